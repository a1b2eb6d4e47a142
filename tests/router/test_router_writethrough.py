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
from test_router_connection_writer import Reader, Writer

KEEPALIVE_S = 60.0


class Transport:
    """Records every write; paused (``pause_writing`` on its protocol) only when the test says so."""

    def __init__(self):
        self.protocol = None
        self.written = []

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
        return False

    def write(self, data):
        self.written.append(bytes(data))

    def writelines(self, chunks):
        self.write(b"".join(chunks))

    def close(self):
        pass


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


async def pair(held: HeldWakes):
    """An ingress connection whose reader forwards to an egress connection; both started, writers idle."""
    handler = Forwarder()
    ingress = Connection(Reader(), Writer(Transport()), TransmissionPipeline(PipelineConfig()), handler, "in",
                         "router", lease_s=3600, keepalive_s=KEEPALIVE_S, held_wakes=held)
    out = Transport()
    egress = Connection(Reader(), Writer(out), TransmissionPipeline(PipelineConfig()), handler, "out", "router",
                        lease_s=3600, keepalive_s=KEEPALIVE_S, held_wakes=held)
    handler.egress = egress
    ingress.start()
    egress.start()
    for _ in range(5):  # both writers find nothing to write and wait
        await asyncio.sleep(0)
    return ingress, egress, out


def test_what_a_read_brings_is_written_in_the_readers_turn_in_one_write():
    async def scenario():
        ingress, egress, out = await pair(HeldWakes())
        try:
            receive(ingress, reply(1) + reply(2))
            await asyncio.sleep(0)  # the reader's turn (woken first), then this one's
            assert out.written == [reply(1) + reply(2)], out.written
            receive(ingress, reply(3))  # the egress writer, idle again, is handed the next one too
            await asyncio.sleep(0)
            assert out.written[1:] == [reply(3)]
        finally:
            for conn in (ingress, egress):
                conn.close("test over", notify_peer=False)

    asyncio.run(scenario())


def test_the_pipelines_priority_order_holds_in_a_write_through():
    async def scenario():
        ingress, egress, out = await pair(HeldWakes())
        try:
            low = codec.encode_data_frame([codec.encode_message("k/low", b"l", priority=6)], priority=6)
            high = codec.encode_data_frame([codec.encode_message("k/high", b"h", priority=1)], priority=1)
            receive(ingress, low + high)
            await asyncio.sleep(0)
            assert len(out.written) == 1, out.written
            frames, _ = codec.decode_frames(out.written[0])
            assert [f.flags for f in frames] == [1, 6], "the higher priority first, as the writer pulls them"
        finally:
            for conn in (ingress, egress):
                conn.close("test over", notify_peer=False)

    asyncio.run(scenario())


def test_a_paused_transport_is_left_to_its_writer():
    async def scenario():
        ingress, egress, out = await pair(HeldWakes())
        try:
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
        finally:
            for conn in (ingress, egress):
                conn.close("test over", notify_peer=False)

    asyncio.run(scenario())
