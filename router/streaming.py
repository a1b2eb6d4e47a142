"""Streaming links (after qpid-dispatch's fix for head-of-line blocking, DISPATCH-1545).

A message of at least ``streaming_threshold_bytes`` for a neighbour router or a client
does not go on the shared connection, where every small message queued after it at its
priority would wait until its last byte has left: it goes over a dedicated *stream
connection* taken from a pool kept per endpoint.  A stream connection carries one
message at a time; it goes back to the pool when its pipeline is empty (the last piece
is written); free ones beyond ``stream_pool_max_idle`` that stayed free
``stream_idle_ms`` are closed.  A stream connection to a router is paced by the
kernel (``SO_MAX_PACING_RATE``, TCP's own pacing) at ``stream_pacing`` of the
link's capacity, set again each time it is taken (the capacity may change at run
time), so a large message never fills the link's queue ahead of the small
messages of the shared connection.

Who dials: the side that knows the other's address.  A router dials a stream
connection to a neighbour in its configuration directly; otherwise (a neighbour that
dialled us, a client) it sends a STREAM control frame with a token on the shared
connection, and the peer connects back with a HELLO of role ``stream`` naming that
token.  The receiving side hands what arrives on a stream connection to the same
forwarding as the shared connection's frames, as if it had come on the shared one (the
endpoint, its counters and its limits are the same).

Each stream connection has its own transmission pipeline and resource account (named
``<endpoint>#s<n>``), so a large message in flight never makes the endpoint's shared
queue look full or slow.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import socket
import struct
import time
from collections import deque
from typing import Any, Deque, Dict, Optional, Protocol, Set, Tuple

from .codec import FrameKind, encode_json_frame
from .config import RouterConfig
from .connection import Connection, read_frame
from .events import EventLog
from .limits import Ledger
from .pipeline import TransmissionPipeline

log = logging.getLogger(__name__)

STREAM_OPEN_TIMEOUT_S = 2.0
#: How long a message waits for a new stream connection before it goes on the shared one (the opening
#: goes on, and the connection joins the free ones when it is made): a peer slow to answer never
#: holds up the connection the message came from for longer than this.
STREAM_TAKE_WAIT_S = 0.2
#: After an opening failed, none is tried for this long (doubling on each failure in a row, up to the max).
STREAM_RETRY_S = 1.0
STREAM_RETRY_MAX_S = 30.0
STREAM_ROLE = "stream"
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # Linux
_UNPACED = 0xFFFFFFFFFFFFFFFF


class StreamHost(Protocol):
    """What a stream pool needs from its router (:class:`router.node.RouterNode` through the
    :class:`StreamLinks` mixin): the settings, event log and resource ledger, the link capacity
    it paces at, a keeper of its background openings, a new stream connection to send on, and
    the handling of what arrives on the connections it adopts (it is their ConnectionHandler)."""

    config: RouterConfig
    events: EventLog
    ledger: Ledger
    lease_s: float
    keepalive_s: float

    def link_capacity(self, neighbour: str) -> Optional[int]: ...

    def keep_task(self, task: "asyncio.Future[Any]") -> None: ...

    async def open_stream(self, pool: "StreamPool") -> Optional[Connection]: ...

    async def on_data(self, conn: Connection, body: bytes) -> None: ...

    def on_control(self, conn: Connection, kind: int, obj: Dict[str, Any]) -> None: ...

    def on_closed(self, conn: Connection, reason: str) -> None: ...

    def on_query(self, conn: Connection, kind: int, header: Dict[str, Any], payload: bytes) -> None: ...


class StreamPool:
    """The stream connections of one endpoint (the shared connection ``main``): those this
    router sends on (``free`` and ``busy``), and those it receives on (``receiving``)."""

    def __init__(self, node: StreamHost, main: Connection) -> None:
        self.node = node
        self.main = main
        self.free: Deque[Tuple[Connection, float]] = deque()  # (connection, monotonic time it became free)
        self.busy: Set[Connection] = set()
        self.receiving: Set[Connection] = set()
        self.opening = 0
        self.opened = 0
        self.reused = 0
        self.trimmed = 0
        self.messages = 0
        self.failures = 0  # openings failed in a row
        self.retry_at = 0.0  # monotonic time before which no opening is tried
        self.overflow = 0  # messages sent on the shared connection: pool busy, opening slow or failing
        self.late = 0  # openings still going on after their message stopped waiting
        self._numbers = itertools.count(1)
        self._trim_handle: Optional[asyncio.TimerHandle] = None

    # ------------------------------------------------------------ sending side

    async def take(self) -> Optional[Connection]:
        """A free stream connection (made on demand), marked busy; None when one cannot be
        had at once or within ``STREAM_TAKE_WAIT_S`` — ``stream_pool_max_busy`` carry a message
        already, the last opening failed less than the back-off ago, or the peer is slow to
        answer (then no other opening starts until that one ends) — and the message then goes on
        the shared connection."""
        while self.free:
            conn, _since = self.free.pop()  # the most recently used: the others age and get trimmed
            if not conn.closed:
                self.busy.add(conn)
                self.reused += 1
                self._pace(conn)
                return conn
        if (self.main.closed or self.late or time.monotonic() < self.retry_at
                or len(self.busy) + self.opening >= self.node.config.stream_pool_max_busy):
            self.overflow += 1
            return None
        opening = asyncio.ensure_future(self._open())
        try:
            conn = await asyncio.wait_for(asyncio.shield(opening), STREAM_TAKE_WAIT_S)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            self.late += 1  # no other opening is started while this one goes on
            opening.add_done_callback(self._opened_late)
            self.node.keep_task(opening)
            if isinstance(exc, asyncio.CancelledError):
                raise
            self.overflow += 1
            return None
        if conn is None:
            self.overflow += 1
            return None
        self.busy.add(conn)
        self._pace(conn)
        return conn

    async def _open(self) -> Optional[Connection]:
        """One new stream connection (None: it failed, and the back-off starts or grows)."""
        self.opening += 1
        try:
            conn = await self.node.open_stream(self)
        finally:
            self.opening -= 1
        if conn is not None and self.main.closed:
            conn.close("the shared connection closed while the stream connection was being made")
            conn = None
        if conn is None or conn.closed:
            return None
        self.failures = 0
        self.opened += 1
        return conn

    def failed(self) -> float:
        """An opening failed: the seconds until the next is tried."""
        self.failures += 1
        wait = min(STREAM_RETRY_MAX_S, STREAM_RETRY_S * 2 ** (self.failures - 1))
        self.retry_at = time.monotonic() + wait
        return wait

    def _opened_late(self, opening: "asyncio.Future[Optional[Connection]]") -> None:
        """A connection made after its message stopped waiting for it: a free one from now."""
        self.late -= 1
        if opening.cancelled() or opening.exception() is not None:
            return
        conn = opening.result()
        if conn is not None and not conn.closed:
            self.busy.add(conn)
            self.release(conn, sent=False)

    def held_bytes(self) -> int:
        """DATA bytes waiting on this endpoint's busy stream connections (they count toward its
        endpoint limit: a reader slower than its large messages holds no more than that)."""
        return sum(c.pipeline.account.queued_to for c in self.busy if c.pipeline.account is not None)

    def pacing_bps(self) -> Optional[int]:
        """The rate a stream connection of this endpoint is paced at (None: not paced)."""
        share = self.node.config.stream_pacing
        if self.main.kind != "router" or share <= 0:
            return None
        capacity = self.node.link_capacity(self.main.peer_name)
        return int(capacity * share) if capacity else None

    def _pace(self, conn: Connection) -> None:
        rate = self.pacing_bps()
        sock = conn.transport.get_extra_info("socket")
        if sock is None:
            return
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, struct.pack("=Q", rate // 8 if rate else _UNPACED))
        except OSError as exc:  # a kernel without it: unpaced, and said once
            if not getattr(self, "_pacing_failed", False):
                self._pacing_failed = True
                self.node.events.emit("stream_link_failed", endpoint=self.main.peer_name, kind=self.main.kind,
                                      reason=f"cannot pace stream connections (SO_MAX_PACING_RATE): {exc}")

    def adopt(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sending: bool) -> Connection:
        """A stream connection of this endpoint from its set-up streams; started."""
        node = self.node
        main = self.main
        name = f"{main.peer_name}#s{next(self._numbers)}"
        pipeline = TransmissionPipeline(node.config.pipeline, account=node.ledger.open(name, main.kind, time.time_ns()),
                                        ledger=node.ledger)
        pipeline.tx = main.pipeline.tx  # its traffic counts for the endpoint
        lowat = node.config.tcp_notsent_lowat if main.kind == "router" else node.config.client_tcp_notsent_lowat
        conn = Connection(reader, writer, pipeline, node, main.peer_name, main.kind, node.lease_s, node.keepalive_s,
                          main.capacity_bps, notsent_lowat=lowat)
        conn.main = main
        conn.rx = main.rx
        if sending:
            conn.on_idle = self.release
        else:
            self.receiving.add(conn)
        conn.start()
        node.events.emit("stream_link_opened", endpoint=main.peer_name, kind=main.kind, stream=name,
                         direction="send" if sending else "receive")
        return conn

    def release(self, conn: Connection, sent: bool = True) -> None:
        """Back to the pool: the writer of ``conn`` found its pipeline empty (the message has
        left), or (``sent`` False) nothing was queued on it after all."""
        if conn not in self.busy:
            return
        self.busy.discard(conn)
        self.messages += sent
        if conn.closed:
            return
        self.free.append((conn, time.monotonic()))
        if len(self.free) > self.node.config.stream_pool_max_idle and self._trim_handle is None:
            self._trim_handle = asyncio.get_running_loop().call_later(
                self.node.config.stream_idle_ms / 1000.0, self.trim)

    def trim(self) -> None:
        """Close the free connections beyond ``stream_pool_max_idle`` that have been free
        ``stream_idle_ms`` (the oldest first); look again later if some are not old enough."""
        self._trim_handle = None
        keep = self.node.config.stream_pool_max_idle
        idle_s = self.node.config.stream_idle_ms / 1000.0
        now = time.monotonic()
        while len(self.free) > keep and now - self.free[0][1] >= idle_s:
            conn, _since = self.free.popleft()
            self.trimmed += 1
            conn.close(f"stream link idle for {idle_s:g} s beyond the pool's {keep} free")
        if len(self.free) > keep:
            self._trim_handle = asyncio.get_running_loop().call_later(
                max(0.01, idle_s - (now - self.free[0][1])), self.trim)

    # ------------------------------------------------------------ both

    def closed(self, conn: Connection, reason: str) -> None:
        """A stream connection of this pool closed (trimmed, the peer went away, an error)."""
        self.busy.discard(conn)
        self.receiving.discard(conn)
        for i, (c, _since) in enumerate(self.free):
            if c is conn:
                del self.free[i]
                break
        self.node.events.emit("stream_link_closed", endpoint=self.main.peer_name, kind=self.main.kind,
                              reason=reason)

    def close_all(self, reason: str) -> None:
        if self._trim_handle is not None:
            self._trim_handle.cancel()
            self._trim_handle = None
        for conn in [c for c, _ in self.free] + list(self.busy) + list(self.receiving):
            conn.close(reason)

    def view(self) -> Dict[str, Any]:
        return {"endpoint": self.main.peer_name, "kind": self.main.kind, "pacing_bps": self.pacing_bps(),
                "free": len(self.free),
                "busy": len(self.busy), "receiving": len(self.receiving), "opened": self.opened,
                "reused": self.reused, "trimmed": self.trimmed, "messages": self.messages,
                "on_shared": self.overflow, "failures_in_a_row": self.failures}


class StreamLinks:
    """Mixin of :class:`router.node.RouterNode`: stream connections, both directions."""

    def stream_pools(self) -> list:
        """The pools of the endpoints connected now (routers, then clients)."""
        mains = list(self.routers.values()) + list(self.clients)
        return [c.streams for c in mains if c.streams is not None]

    def streams_view(self) -> Dict[str, Any]:
        """GET /admin/streams: the settings and every endpoint's pool."""
        cfg = self.config
        return {"streaming_links": cfg.streaming_links, "threshold_bytes": cfg.streaming_threshold_bytes,
                "pool_max_idle": cfg.stream_pool_max_idle, "idle_ms": cfg.stream_idle_ms,
                "fragmentation": cfg.pipeline.fragmentation, "pools": [p.view() for p in self.stream_pools()]}

    def _pool(self, main: Connection) -> StreamPool:
        pool = main.streams
        if pool is None:
            pool = main.streams = StreamPool(self, main)
        return pool

    def _stream_hello(self, token: Optional[str] = None) -> bytes:
        hello: Dict[str, Any] = {"role": STREAM_ROLE, "name": self.name}
        if token is not None:
            hello["token"] = token
        return encode_json_frame(FrameKind.HELLO, hello)

    async def open_stream(self, pool: StreamPool) -> Optional[Connection]:
        """A new stream connection to send on: dialled when the endpoint is a configured
        neighbour, else asked for (STREAM) and waited for."""
        main = pool.main
        nb = self.neighbour_cfg.get(main.peer_name) if main.kind == "router" else None
        try:
            if nb is not None:
                reader, writer = await self._dial_stream(nb.address, nb.port, None)
            else:
                token = secrets.token_hex(8)
                waiter = asyncio.get_running_loop().create_future()
                self._stream_requests[token] = (waiter, main)
                try:
                    main.send_control(FrameKind.STREAM, {"token": token})
                    reader, writer = await asyncio.wait_for(waiter, STREAM_OPEN_TIMEOUT_S)
                finally:
                    self._stream_requests.pop(token, None)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            retry_s = pool.failed()
            self.events.emit("stream_link_failed", endpoint=main.peer_name, kind=main.kind,
                             reason=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
                             retry_in_s=retry_s)
            return None
        return pool.adopt(reader, writer, sending=True)

    def keep_task(self, task: "asyncio.Future[Any]") -> None:
        """Keep a background task of this router (cancelled when it stops) until it ends."""
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def _dial_stream(self, host: str, port: int, token: Optional[str]):
        from .peering import STREAM_LIMIT

        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=STREAM_LIMIT),
                                                STREAM_OPEN_TIMEOUT_S)
        try:
            writer.write(self._stream_hello(token))
            frame = await asyncio.wait_for(read_frame(reader), STREAM_OPEN_TIMEOUT_S)
            if frame.kind != FrameKind.HELLO or frame.json().get("role") != STREAM_ROLE:
                raise ValueError(f"expected a stream HELLO from {host}:{port}")
        except BaseException:
            writer.close()
            raise
        return reader, writer

    def _on_stream_request(self, main: Connection, obj: Dict[str, Any]) -> None:
        """The neighbour ``main`` asks for a stream connection to send to us on: dial it."""
        token = obj.get("token")
        nb = self.neighbour_cfg.get(main.peer_name)
        if not isinstance(token, str) or nb is None:
            self.events.emit("stream_link_failed", endpoint=main.peer_name, kind=main.kind,
                             reason="asked for a stream link without a token, or by a router we cannot dial")
            return

        async def dial() -> None:
            try:
                reader, writer = await self._dial_stream(nb.address, nb.port, token)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                self.events.emit("stream_link_failed", endpoint=main.peer_name, kind=main.kind,
                                 reason=f"{type(exc).__name__}: {exc}")
                return
            if main.closed:
                writer.close()
                return
            self._pool(main).adopt(reader, writer, sending=False)

        self.keep_task(asyncio.get_running_loop().create_task(dial(), name=f"stream-to-{main.peer_name}"))

    def _stream_accepted(self, hello: Dict[str, Any], reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter, kind: str) -> None:
        """An accepted connection said HELLO as a stream: either the one we asked for (its
        token), to send on, or one a neighbour dialled to send to us."""
        token = hello.get("token")
        request = self._stream_requests.get(token) if isinstance(token, str) else None
        if request is not None:
            waiter, main = request
            if main.kind == kind and not waiter.done():
                writer.write(self._stream_hello())
                waiter.set_result((reader, writer))
                return
        main = self.routers.get(hello["name"]) if kind == "router" and request is None else None
        if main is None or main.closed:
            self.events.emit("stream_link_failed", endpoint=hello["name"], kind=kind,
                             reason="a stream connection for no known endpoint, or with an unknown token")
            writer.close()
            return
        writer.write(self._stream_hello())
        self._pool(main).adopt(reader, writer, sending=False)
