"""Writing in the reader's turn (router/writethrough.py), over fake transports: what a reader forwards to a
connection whose writer is idle is written when the reader is done with its read -- before any other task
runs, everything that read brought in one write -- and through the pipeline (its priority order); where the
writer has more to do than write (a paused transport), its writer writes it, as before."""
from __future__ import annotations

import asyncio

from router import codec
from router.codec import FrameKind
from router.config import PipelineConfig
from router.connection import Connection, ConnectionHandler
from router.pipeline import TransmissionPipeline
from router.writethrough import HeldWakes
from test_router_connection_writer import KEEPALIVE_S, FillingTransport, Reader, Writer


class Transport(FillingTransport):
    """Records every write; paused (``pause_writing`` on its protocol) only when the test says so."""

    def write(self, data):
        self.written.append(bytes(data))


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


def with_pair(body) -> None:
    """``body(ingress, out)``: an ingress connection whose reader forwards to an egress connection (whose
    transport is ``out``), both started with their writers idle, sharing one ``HeldWakes``; closed after."""

    async def scenario():
        held = HeldWakes()
        handler = Forwarder()
        ingress = Connection(Reader(), Writer(Transport()), TransmissionPipeline(PipelineConfig()), handler, "in",
                             "router", lease_s=3600, keepalive_s=KEEPALIVE_S, held_wakes=held)
        out = Transport()
        handler.egress = Connection(Reader(), Writer(out), TransmissionPipeline(PipelineConfig()), handler, "out",
                                    "router", lease_s=3600, keepalive_s=KEEPALIVE_S, held_wakes=held)
        ingress.start()
        handler.egress.start()
        for _ in range(5):  # both writers find nothing to write and wait
            await asyncio.sleep(0)
        try:
            await body(ingress, out)
        finally:
            for conn in (ingress, handler.egress):
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
        await asyncio.sleep(0)
        assert out.written == [], "written through into a paused transport"
        out.protocol.resume_writing()
        for _ in range(50):
            if out.written:
                break
            await asyncio.sleep(0)
        assert out.written == [reply(1)]

    with_pair(body)
