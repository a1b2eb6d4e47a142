"""The connection (router/connection.py) over a fake transport. Its writer, when the write buffer fills:
what producers queue while the writer waits for the buffer to drain goes out once it has drained, not at the
next keep-alive (the writer's last look at the pipeline, made before the wait, is stale after it). Its
reader, when the stream reader that read the HELLO had already seen the end of the stream. Its lease, while the
reader is behind."""
from __future__ import annotations

import asyncio
import time

from router import codec
from router.connection import Connection, ConnectionHandler
from router.pipeline import TransmissionPipeline
from router.config import PipelineConfig

KEEPALIVE_S = 60.0  # far beyond the test's wait: a frame held until the keep-alive never comes


class FillingTransport:
    """A transport whose write buffer is full after the first write (``pause_writing`` on the protocol), until
    the test drains it."""

    def __init__(self):
        self.protocol = None
        self.written = []
        self.closing = False

    def set_protocol(self, protocol):
        self.protocol = protocol

    def resume_reading(self):
        pass

    def pause_reading(self):
        pass

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def get_extra_info(self, name, default=None):
        return default

    def is_closing(self):
        return self.closing

    def write(self, data):
        self.written.append(bytes(data))
        self.protocol.pause_writing()

    def writelines(self, chunks):
        self.write(b"".join(chunks))

    def close(self):
        self.closing = True


class Reader:
    """What the connection takes over from the stream reader that read the HELLO."""

    def __init__(self):
        self._limit = 1 << 16
        self._buffer = bytearray()
        self._eof = False

    def exception(self):
        return None


class Writer:
    def __init__(self, transport):
        self.transport = transport


class Handler(ConnectionHandler):
    def on_closed(self, conn, reason):
        pass


class Recording(Handler):
    """Keeps the control frames it is given, each after ``handling_s`` of synchronous work."""

    def __init__(self, handling_s: float = 0.0):
        self.controls = []
        self.handling_s = handling_s

    def on_control(self, conn, kind, obj):
        time.sleep(self.handling_s)  # the event loop (and the lease's check) waits meanwhile
        self.controls.append(obj)


def closed_after(frames: bytes, *, eof: bool, lease_s: float, handler: Handler) -> str:
    """A connection taking over a HELLO reader that holds ``frames`` (and saw the end of the stream: ``eof``):
    why it closed."""

    async def scenario():
        reader = Reader()
        reader._buffer = bytearray(frames)
        reader._eof = eof  # what the stream reader saw; its at_eof() is False while its buffer holds bytes
        conn = Connection(reader, Writer(FillingTransport()), TransmissionPipeline(PipelineConfig()), handler,
                          "peer", "client", lease_s=lease_s, keepalive_s=KEEPALIVE_S)
        conn.start()
        try:
            return await asyncio.wait_for(conn.wait_closed(), 10)
        finally:
            conn.close("test over", notify_peer=False)

    return asyncio.run(scenario())


def test_what_is_queued_while_the_write_buffer_drains_goes_out_once_it_has_drained():
    async def scenario():
        transport = FillingTransport()
        pipeline = TransmissionPipeline(PipelineConfig())
        conn = Connection(Reader(), Writer(transport), pipeline, Handler(), "peer", "client", lease_s=3600,
                          keepalive_s=KEEPALIVE_S)
        conn.start()
        first = codec.encode_json_frame(codec.FrameKind.LINKSTATE, {"n": 1})
        second = codec.encode_json_frame(codec.FrameKind.LINKSTATE, {"n": 2})
        assert pipeline.send_control(first)
        for _ in range(50):  # the writer writes it, finds the pipeline empty, and waits for the drain
            await asyncio.sleep(0)
        assert transport.written == [first] and conn.receiver.write_paused
        assert pipeline.send_control(second)  # queued meanwhile: the writer is not waiting for data
        transport.protocol.resume_writing()
        try:
            for _ in range(500):
                if len(transport.written) == 2:
                    break
                await asyncio.sleep(0.01)
            assert transport.written == [first, second], "the frame queued during the drain was held back"
        finally:
            conn.close("test over", notify_peer=False)
            await asyncio.wait_for(conn.wait_closed(), 10)

    asyncio.run(scenario())


def test_an_end_of_stream_the_hello_reader_saw_closes_the_connection_after_its_buffered_frames():
    """The peer sent frames after its HELLO, then closed, before the connection took the stream over: the
    frames are handled and the connection ends as closed by the peer (not, a lease later, as expired)."""
    handler = Recording()
    reason = closed_after(codec.encode_json_frame(codec.FrameKind.LINKSTATE, {"n": 1}), eof=True, lease_s=3600,
                          handler=handler)
    assert handler.controls == [{"n": 1}]
    assert reason == "connection closed by peer"


def test_the_lease_does_not_run_out_while_frames_the_peer_sent_wait_to_be_handled():
    """Frames arrived together; handling each takes longer than the lease. The peer is not silent, the connection
    is behind: every frame is handled, and only then, nothing more arriving, does the lease run out."""
    handler = Recording(handling_s=0.4)
    frames = b"".join(codec.encode_json_frame(codec.FrameKind.LINKSTATE, {"n": n}) for n in range(6))
    reason = closed_after(frames, eof=False, lease_s=0.3, handler=handler)
    assert handler.controls == [{"n": n} for n in range(6)], reason
    assert reason.startswith("lease expired"), reason
