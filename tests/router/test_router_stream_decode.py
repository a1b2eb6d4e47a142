"""Contract 2 / 4: the bytes on a router-to-router TCP connection, as a
capture would reassemble them, decode with the codec's pure functions and
carry every traffic payload header untouched."""
from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import List

from clients import probe_until_received, subscribe
from router import codec
from router.codec import FrameKind
from routerlab import free_port
from traffic.client import CongestionControl, connect


class Tap:
    """A TCP proxy that records each direction of each connection."""

    def __init__(self, upstream_port: int) -> None:
        self.port = free_port()
        self.upstream_port = upstream_port
        self.streams: List[bytearray] = []  # downstream -> upstream bytes, per connection
        self._sockets: List[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop:
            try:
                down, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self._sockets.append(down)
            try:
                up = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:  # upstream not listening yet: the router will dial again
                down.close()
                continue
            self._sockets.append(up)
            record = bytearray()
            self.streams.append(record)
            threading.Thread(target=self._pump, args=(down, up, record), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, None), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, record) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if record is not None:
                    record += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop = True
        self._listener.close()
        for s in self._sockets:
            s.close()


def test_router_link_stream_decodes_to_every_payload_header(cluster):
    b = cluster.add("b")
    tap = Tap(b.router_port)
    try:
        a = cluster.add("a", batch_size_bytes=2048)
        a.config["neighbours"].append({"name": "b", "address": "127.0.0.1", "port": tap.port})
        cluster.start()
        cluster.wait_links()

        async def scenario():
            s, _, rec = await subscribe(b.client_port, "cap/**", "sub")
            await probe_until_received(a.client_port, "cap/probe", [rec])
            session = await connect("127.0.0.1", a.client_port, name="pub")
            pubs = [session.declare_publisher("cap/rt", priority=1, congestion_control=CongestionControl.BLOCK),
                    session.declare_publisher("cap/data", priority=5, congestion_control=CongestionControl.BLOCK,
                                              express=False)]
            for seq in range(300):
                for flow, pub in enumerate(pubs, start=1):
                    await pub.put(codec.make_payload(flow, seq, time.time_ns(), 100 + seq % 50))
            await session.close()
            deadline = time.monotonic() + 10
            while sum(len(rec.seqs(f)) for f in (1, 2)) < 600 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await s.close()
            return rec

        rec = asyncio.run(scenario())
        assert rec.seqs(1) == list(range(300)) and rec.seqs(2) == list(range(300))
        stream = bytes(tap.streams[-1])  # the connection that carried the traffic
        # feed the decoder in arbitrary chunks, as a pcap reassembler would
        frames, buf = [], b""
        for cut in range(0, len(stream), 777):
            buf += stream[cut:cut + 777]
            got, consumed = codec.decode_frames(buf)
            frames += got
            buf = buf[consumed:]
        assert frames[0].kind == FrameKind.HELLO and frames[0].json()["name"] == "a"
        headers = {}
        for f in frames:
            if f.kind == FrameKind.DATA:
                for m in codec.decode_messages(f.body):
                    assert f.flags == m.priority
                    h = codec.unpack_payload_header(m.payload)
                    if h is not None and h.flow_id in (1, 2):
                        assert m.key == ("cap/rt" if h.flow_id == 1 else "cap/data")
                        assert m.origin == codec.router_id("a")
                        assert len(m.payload) == 100 + h.seq % 50
                        headers.setdefault(h.flow_id, []).append(h.seq)
        assert headers == {1: list(range(300)), 2: list(range(300))}
        pairs, _ = codec.find_payload_headers(stream)
        assert sum(1 for _, h in pairs if h is not None and h.flow_id in (1, 2)) == 600
    finally:
        tap.close()
