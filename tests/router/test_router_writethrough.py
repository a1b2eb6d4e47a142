"""Writing in the reader's turn (router/writethrough.py), over fake transports: what a reader forwards to a
connection whose writer is idle is written when the reader is done with its read -- before any other task
runs, everything that read brought in one write -- and through the pipeline (its priority order); where the
writer has more to do than write (a paused transport), its writer writes it, as before."""
from __future__ import annotations

import asyncio
from typing import Optional

from router import codec
from router.codec import FrameKind
from router.config import PipelineConfig
from router.connection import Connection, ConnectionHandler
from router.pipeline import TransmissionPipeline
from router.writethrough import HeldWakes
from test_router_connection_writer import KEEPALIVE_S, FillingTransport, Reader, Writer


class Transport(FillingTransport):
    """Records every write; paused (``pause_writing`` on its protocol) only when the test says so."""

    pause_after_write = False  # set: a write fills the buffer (the protocol paused), as FillingTransport's

    def write(self, data):
        self.written.append(bytes(data))
        if self.pause_after_write:
            self.protocol.pause_writing()


class Forwarder(ConnectionHandler):
    """Forwards every REPLY frame it reads to ``egress``; DATA frames' messages at their priority."""

    def __init__(self):
        self.egress = None

    def on_query(self, conn, kind, header, payload):
        self.egress.send_query_frame(kind, header, payload)

    async def on_data(self, conn, body):
        for msg in codec.decode_messages(body):
            assert self.egress.pipeline.try_push(msg.priority, False, codec.encode_message(msg.key, msg.payload,
                                                                                           msg.priority), b"", 0)

    def on_closed(self, conn, reason):
        pass


def reply(n: int) -> bytes:
    return codec.encode_query_frame(FrameKind.REPLY, {"id": 1, "key": f"k/{n}"}, b"x")


def receive(conn: Connection, data: bytes) -> None:
    """``data`` arrives on ``conn``'s socket."""
    buf = conn.receiver.get_buffer(len(data))
    buf[:len(data)] = data
    conn.receiver.buffer_updated(len(data))


def with_pair(body, handler: Optional[Forwarder] = None) -> None:
    """``body(ingress, out)``: an ingress connection whose reader forwards to an egress connection (whose
    transport is ``out``) through ``handler``, both started with their writers idle, sharing one
    ``HeldWakes``; closed after."""

    async def scenario():
        held = HeldWakes()
        forwarder = handler or Forwarder()
        ingress = Connection(Reader(), Writer(Transport()), TransmissionPipeline(PipelineConfig()), forwarder, "in",
                             "router", lease_s=3600, keepalive_s=KEEPALIVE_S, held_wakes=held)
        out = Transport()
        forwarder.egress = Connection(Reader(), Writer(out), TransmissionPipeline(PipelineConfig()), forwarder, "out",
                                       "router", lease_s=3600, keepalive_s=KEEPALIVE_S, held_wakes=held)
        ingress.start()
        forwarder.egress.start()
        for _ in range(5):  # both writers find nothing to write and wait
            await asyncio.sleep(0)
        try:
            await body(ingress, out)
        finally:
            for conn in (ingress, forwarder.egress):
                conn.close("test over", notify_peer=False)

    asyncio.run(scenario())


def test_what_a_read_brings_is_written_in_the_readers_turn_in_one_write():
    async def body(ingress, out):
        receive(ingress, reply(1) + reply(2))
        await asyncio.sleep(0)  # the reader's turn (woken first), then this one's
        assert out.written == [reply(1) + reply(2)], out.written
        receive(ingress, reply(3))  # the egress writer, idle again, is handed the next one too
        await asyncio.sleep(0)
        assert out.written[1:] == [reply(3)]

    with_pair(body)


def test_the_pipelines_priority_order_holds_in_a_write_through():
    async def body(ingress, out):
        low = codec.encode_data_frame([codec.encode_message("k/low", b"l", priority=6)], priority=6)
        high = codec.encode_data_frame([codec.encode_message("k/high", b"h", priority=1)], priority=1)
        receive(ingress, low + high)
        await asyncio.sleep(0)
        assert len(out.written) == 1, out.written
        frames, _ = codec.decode_frames(out.written[0])
        assert [f.flags for f in frames] == [1, 6], "the higher priority first, as the writer pulls them"

    with_pair(body)


def test_a_paused_transport_is_left_to_its_writer():
    async def body(ingress, out):
        out.protocol.pause_writing()
        receive(ingress, reply(1))
        for _ in range(10):  # the reader's turn, then the writer's it woke, and more
            await asyncio.sleep(0)
        assert out.written == [], "written into a paused transport"
        out.protocol.resume_writing()
        for _ in range(50):
            if out.written:
                break
            await asyncio.sleep(0)
        assert out.written == [reply(1)]

    with_pair(body)


def test_a_writer_woken_after_a_write_through_paused_its_transport_waits_for_the_drain():
    async def body(ingress, out):
        egress = ingress.handler.egress
        egress.high_water = len(reply(1))  # one frame is a write's worth: the second is left to the writer
        out.pause_after_write = True
        receive(ingress, reply(1) + reply(2))
        for _ in range(10):
            await asyncio.sleep(0)
        assert out.written == [reply(1)], "the woken writer wrote into the transport the write-through paused"
        out.protocol.resume_writing()
        for _ in range(50):
            if len(out.written) == 2:
                break
            await asyncio.sleep(0)
        assert out.written == [reply(1), reply(2)]

    with_pair(body)


class GatedForwarder(Forwarder):
    """Forwards each DATA frame's messages, then waits at ``gate`` (as a reader waits for queue room)."""

    def __init__(self):
        super().__init__()
        self.gate = asyncio.Event()

    async def on_data(self, conn, body):
        await super().on_data(conn, body)
        await self.gate.wait()


def test_a_reader_that_waits_while_holding_does_not_keep_the_writes_it_holds_waiting():
    async def body(ingress, out):
        receive(ingress, codec.encode_data_frame([codec.encode_message("k/1", b"x", priority=5)], priority=5))
        for _ in range(10):  # the reader forwards and waits at the gate, holding the egress's wake-up
            await asyncio.sleep(0)
        assert len(out.written) == 1, "the held write waited for the reader"
        ingress.handler.gate.set()

    with_pair(body, GatedForwarder())


def test_a_write_that_fails_in_the_readers_turn_wakes_its_writer_and_spares_the_others():
    async def scenario():
        held = HeldWakes()
        broken, sound = TransmissionPipeline(PipelineConfig()), TransmissionPipeline(PipelineConfig())
        written = []

        def fail() -> bool:
            raise RuntimeError("a bug")

        broken.write_now = fail
        sound.write_now = lambda: written.append("sound") or True
        waiting = asyncio.ensure_future(broken.wait_for_data(3600))
        await asyncio.sleep(0)
        held.hold()
        assert held.take(broken) and held.take(sound)
        held.release()
        assert written == ["sound"], "a failed write in the reader's turn lost the wake-ups held after it"
        await asyncio.wait_for(waiting, 1)  # the broken one's writer is woken (not left to its keep-alive)

    asyncio.run(scenario())
