"""Client library for the router protocol (asyncio).

    session = await connect("127.0.0.1", 7448, name="pub1")
    pub = session.declare_publisher("demo/a", priority=Priority.DATA,
                                    congestion_control=CongestionControl.BLOCK)
    await pub.put(b"...")
    sub = await session.declare_subscriber("demo/**")          # async iterator
    async for sample in sub: ...
    await session.declare_subscriber("demo/**", callback=fn)   # or a callback
    await session.close()

Outgoing messages go through the same transmission pipeline as the router's
(priority queues, batching, drop/close deadlines), so a publisher's priority
and congestion control already apply on the client -> router hop.

When the router asks for a stream connection (a STREAM frame: it sends a large
message apart from the shared connection, router/streaming.py), the session
connects back with the token; what arrives there is delivered like the rest.
"""
from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Dict, Optional, Tuple

from router import keyexpr
from router.codec import (
    DEFAULT_TTL,
    FLAG_BLOCK,
    FLAG_EXPRESS,
    MESSAGE_HEADER_SIZE,
    CodecError,
    CongestionControl,
    FrameKind,
    Priority,
    encode_json_frame,
    iter_message_spans,
    message_flags,
)
from router.config import PipelineConfig
from router.connection import Connection, ConnectionHandler, read_frame
from router.pipeline import TransmissionPipeline

from .querying import Query, Queryable, QueryResult, Querying, Reply

__all__ = ["Session", "Publisher", "Subscriber", "Sample", "connect", "Priority", "CongestionControl",
           "Query", "Queryable", "QueryResult", "Reply"]

_PAYLEN = struct.Struct(">I")
_PREFIX = struct.Struct(">BBIH")


@dataclass(frozen=True)
class Sample:
    key: str
    payload: bytes
    priority: int
    congestion_control: int
    express: bool
    recv_ns: int


class ClosedError(ConnectionError):
    pass


class Publisher:
    def __init__(self, session: "Session", key: str, priority: int, congestion_control: int, express: bool) -> None:
        keyexpr.validate(key)
        self.session = session
        self.key = key
        self.priority = int(priority)
        self.congestion_control = int(congestion_control)
        self.express = express
        self.block = congestion_control == CongestionControl.BLOCK
        kb = key.encode("utf-8")
        self._prefix = _PREFIX.pack(message_flags(self.priority, self.congestion_control, express),
                                    DEFAULT_TTL, 0, len(kb))
        self._key = kb
        self._heads: Dict[int, bytes] = {}
        self._local_version = -1
        self._local: Tuple["Subscriber", ...] = ()
        self.dropped = 0
        self.sent = 0

    def _deliver_locally(self, payload: bytes) -> None:
        """Subscribers of the same session get the sample too (as in Zenoh)."""
        session = self.session
        if self._local_version != session._sub_version:
            self._local = tuple(s for s in session._subs.values() if keyexpr.intersects(s.key, self.key))
            self._local_version = session._sub_version
        if self._local:
            sample = Sample(self.key, bytes(payload), self.priority, self.congestion_control, self.express,
                            time.time_ns())
            for sub in self._local:
                sub._deliver(sample)

    def _head(self, n: int) -> bytes:
        head = self._heads.get(n)
        if head is None:
            head = self._prefix + _PAYLEN.pack(n) + self._key
            if len(self._heads) < 64:
                self._heads[n] = head
        return head

    def put_nowait(self, payload: bytes) -> bool:
        """Queue without waiting; False if the queue has no room right now (counted as a drop)."""
        pipe = self.session.pipeline
        st = pipe.queues[self.priority].stats
        st.tried += 1
        st.avg_qsize += 0.1 * (st.in_queue - st.avg_qsize)
        if self.session._subs:
            self._deliver_locally(payload)
        if pipe.try_push(self.priority, self.express, self._head(len(payload)), payload, time.time_ns()):
            self.sent += 1
            return True
        st.dropped += 1
        self.dropped += 1
        return False

    async def put(self, payload: bytes) -> bool:
        """Queue one message.  Drop: waits up to the drop deadline, returns False if dropped.
        Block: waits up to the close deadline, then closes the session and raises ClosedError."""
        pipe = self.session.pipeline
        self.session.raise_if_closed()
        st = pipe.queues[self.priority].stats
        st.tried += 1
        st.avg_qsize += 0.1 * (st.in_queue - st.avg_qsize)
        head = self._head(len(payload))
        if self.session._subs:
            self._deliver_locally(payload)
        if pipe.try_push(self.priority, self.express, head, payload, time.time_ns()):
            self.sent += 1
            return True
        if await pipe.push_wait(self.priority, self.express, head, payload, self.block):
            self.sent += 1
            return True
        if pipe.closed:
            raise ClosedError(f"session closed: {self.session.close_reason}")
        if self.block:
            self.session._conn.close("close deadline exceeded by a Block put")
            raise ClosedError("a Block put waited past the close deadline; session closed")
        st.dropped += 1
        self.dropped += 1
        return False


class Subscriber:
    def __init__(self, session: "Session", sub_id: int, key: str,
                 callback: Optional[Callable[[Sample], Any]]) -> None:
        self.session = session
        self.id = sub_id
        self.key = key
        self.callback = callback
        self._queue: "asyncio.Queue[Optional[Sample]]" = asyncio.Queue()
        self.received = 0

    def _deliver(self, sample: Sample) -> None:
        self.received += 1
        if self.callback is not None:
            self.callback(sample)
        else:
            self._queue.put_nowait(sample)

    def __aiter__(self) -> AsyncIterator[Sample]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Sample]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item

    async def recv(self, timeout: Optional[float] = None) -> Sample:
        item = await asyncio.wait_for(self._queue.get(), timeout)
        if item is None:
            raise ClosedError("subscriber undeclared or session closed")
        return item

    async def undeclare(self) -> None:
        self.session._undeclare(self)


class Session(Querying, ConnectionHandler):
    def __init__(self, name: str) -> None:
        self.name = name
        self._querying_init()
        self.router_name = ""
        self.pipeline: TransmissionPipeline
        self._conn: Connection
        self._streams: set = set()  # stream connections the router sends large messages on
        self._stream_tasks: set = set()  # connect-backs asked for by STREAM, under way
        self._address: Tuple[str, int, bool] = ("", 0, False)  # host, port, slow_reader: where streams dial
        self._subs: Dict[int, Subscriber] = {}
        self._next_id = 1
        self._match_cache: Dict[bytes, Tuple[Subscriber, ...]] = {}
        self._sub_version = 0
        self.close_reason = ""
        self.closed = asyncio.Event()
        #: a slow reader (a slow subscriber experiment): None reads as fast as it can; a rate (bit/s)
        #: pauses the reading after each frame for its size at that rate; 0 stops reading for good
        self.read_rate_bps: Optional[float] = None

    # ---------------------------------------------------------------- API

    def declare_publisher(self, key: str, priority: int = Priority.DATA,
                          congestion_control: int = CongestionControl.DROP, express: bool = False) -> Publisher:
        return Publisher(self, key, priority, congestion_control, express)

    def raise_if_closed(self) -> None:
        """ClosedError with the router's reason (a CLOSE it sent: a limit, a malformed frame) once closed."""
        if self.pipeline.closed:
            raise ClosedError(f"session closed: {self.close_reason}")

    async def declare_subscriber(self, key: str, callback: Optional[Callable[[Sample], Any]] = None) -> Subscriber:
        keyexpr.validate(key)
        self.raise_if_closed()
        sub = Subscriber(self, self._next_id, key, callback)
        self._next_id += 1
        self._subs[sub.id] = sub
        self._sub_version += 1
        self._match_cache.clear()
        self._conn.send_control(FrameKind.DECLARE, {"id": sub.id, "key": key})
        return sub

    def _undeclare(self, sub: Subscriber) -> None:
        if self._subs.pop(sub.id, None) is not None:
            self._sub_version += 1
            self._match_cache.clear()
            self._conn.send_control(FrameKind.UNDECLARE, {"id": sub.id})
            sub._queue.put_nowait(None)

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until every queued message has been handed to the kernel socket."""
        deadline = time.monotonic() + timeout
        pipe = self.pipeline
        transport = self._conn.transport
        while any(q.stats.in_queue for q in pipe.queues) or pipe.control or transport.get_write_buffer_size():
            if time.monotonic() > deadline or pipe.closed:
                return
            await asyncio.sleep(0.001)

    async def close(self, timeout: float = 10.0) -> None:
        """Send what is queued, then close so that the router reads all of it."""
        if not self._conn.closed:
            deadline = time.monotonic() + timeout
            await self.flush(timeout)
            await self._conn.close_gracefully("client closed the session", max(0.1, deadline - time.monotonic()))
        for task in list(self._stream_tasks):
            task.cancel()
        for conn in list(self._streams):
            conn.close("client closed the session")
        await asyncio.sleep(0)

    def abort(self, reason: str) -> None:
        """Close at once, without waiting for what is queued and without telling the router."""
        self._conn.close(reason, notify_peer=False)

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ---------------------------------------------------------------- handler

    async def on_data(self, conn: Connection, body: bytes) -> None:
        now = time.time_ns()
        cache = self._match_cache
        for flags, _ttl, _origin, ks, ps, stop in iter_message_spans(body):
            key = body[ks:ps]
            subs = cache.get(key)
            if subs is None:
                try:
                    key_s = key.decode("utf-8")
                except UnicodeDecodeError:
                    raise CodecError("key is not valid UTF-8") from None
                subs = cache[key] = tuple(s for s in self._subs.values() if keyexpr.intersects(s.key, key_s))
            if not subs:
                continue
            prio = flags & 7
            conn.rx.messages[prio] += 1
            conn.rx.bytes[prio] += stop - ks + MESSAGE_HEADER_SIZE
            sample = Sample(key.decode("utf-8"), body[ps:stop], prio,
                            CongestionControl.BLOCK if flags & FLAG_BLOCK else CongestionControl.DROP,
                            bool(flags & FLAG_EXPRESS), now)
            for s in subs:
                s._deliver(sample)
        rate = self.read_rate_bps
        if rate is not None:  # the connection is not read while this waits: TCP pushes back on the router
            if rate <= 0:
                await self.closed.wait()
            else:
                await asyncio.sleep(len(body) * 8 / rate)

    def on_control(self, conn: Connection, kind: int, obj: Dict[str, Any]) -> None:
        if kind == FrameKind.STREAM and conn is self._conn and isinstance(obj.get("token"), str):
            task = asyncio.get_running_loop().create_task(self._open_stream(obj["token"]), name=f"stream-{self.name}")
            self._stream_tasks.add(task)  # kept until done (the loop holds tasks only weakly)
            task.add_done_callback(self._stream_tasks.discard)
            return
        raise CodecError(f"unexpected control frame kind {kind} from router")

    async def _open_stream(self, token: str) -> None:
        """The router asked for a stream connection: connect back with its token."""
        host, port, slow = self._address
        try:
            reader, writer, _hello = await _open(host, port, {"role": "stream", "name": self.name, "token": token},
                                                 slow, timeout=5.0)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, CodecError):
            return  # the router gives up waiting and sends on the shared connection
        if self._conn.closed:
            writer.close()
            return
        conn = Connection(reader, writer, TransmissionPipeline(self.pipeline.config), self, self.router_name,
                          "router", lease_s=self._conn.lease_s, keepalive_s=self._conn.keepalive_s)
        conn.main = self._conn
        self._streams.add(conn)
        conn.start()

    def on_closed(self, conn: Connection, reason: str) -> None:
        if conn is not self._conn:  # a stream connection: the session goes on
            self._streams.discard(conn)
            return
        for stream in list(self._streams):
            stream.close(reason)
        self.close_reason = reason
        self._querying_closed()
        for s in self._subs.values():
            s._queue.put_nowait(None)
        self.closed.set()


SLOW_READER_BUFFER = 64 * 1024


async def connect(host: str, port: int, name: str = "client", pipeline: Optional[PipelineConfig] = None,
                  lease_ms: int = 3000, timeout: float = 5.0, slow_reader: bool = False) -> Session:
    """Open a session to the router's client port.  ``slow_reader``: small receive buffers
    (socket and stream, 64 KiB each), so that a session that reads slowly (``read_rate_bps``)
    makes the router hold what it has not read, rather than megabytes of buffers."""
    config = pipeline or PipelineConfig(queue_sizes=(2, 2, 2, 2, 4, 4, 4, 2), drop_deadline_ms=1.0)
    reader, writer, hello = await _open(host, port, {"role": "client", "name": name, "lease_ms": lease_ms},
                                        slow_reader, timeout)
    session = Session(name)
    session._address = (host, port, slow_reader)
    session.router_name = str(hello.get("name", ""))
    session.pipeline = TransmissionPipeline(config)
    lease = int(hello.get("lease_ms", lease_ms)) / 1000.0
    session._conn = Connection(reader, writer, session.pipeline, session, session.router_name, "router",
                               lease_s=lease, keepalive_s=lease / 4)
    session._conn.start()
    return session


async def _open(host: str, port: int, hello: Dict[str, Any], slow_reader: bool, timeout: float):
    """A connection to the router's client port after the HELLO exchange: (reader, writer, its HELLO)."""
    sock = None
    if slow_reader:
        import socket

        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_READER_BUFFER)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, (host, port)), timeout)
        except BaseException:
            sock.close()
            raise
    limit = SLOW_READER_BUFFER // 2 if slow_reader else 1 << 20
    opened = asyncio.open_connection(sock=sock, limit=limit) if sock is not None else \
        asyncio.open_connection(host, port, limit=limit)
    reader, writer = await asyncio.wait_for(opened, timeout)
    writer.write(encode_json_frame(FrameKind.HELLO, hello))
    try:
        frame = await asyncio.wait_for(read_frame(reader), timeout)
        if frame.kind != FrameKind.HELLO:
            raise CodecError(f"expected HELLO from router, got frame kind {frame.kind}")
        return reader, writer, frame.json()
    except BaseException:
        writer.close()
        raise
