"""One framed TCP connection (router<->router or client<->router): a reader
loop, a writer loop fed by a TransmissionPipeline, keep-alives and a lease.

Used by the router and by the client library alike.  What to do with frames is
the handler's job (``ConnectionHandler``).

The HELLO exchange is done on asyncio streams (``open_connection`` /
``start_server``); from then on the transport's protocol is a
:class:`router.receiver.FrameReceiver` (frames read into a buffer of its own)
and the writer writes to the transport directly.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Dict, Optional

from .codec import (
    CodecError,
    FRAME_HEADER_SIZE,
    Frame,
    FrameKind,
    QUERY_KINDS,
    Reassembly,
    decode_json_body,
    decode_query_body,
    encode_query_frame,
    encode_frame,
    encode_json_frame,
    parse_frame_header,
)
from .pipeline import BACKOFF, EMPTY, TransmissionPipeline
from .receiver import FrameReceiver
from .stats import TrafficCounters

log = logging.getLogger(__name__)

WRITE_HIGH_WATER = 64 * 1024
# A reader that finds a large message's pieces already buffered, or a writer whose socket takes
# them all, never waits: each gives the event loop a turn after every FRAGMENT frame, so one large
# message (on loopback, or into megabytes of send buffer) cannot hold up the other connections
# for ms.  DATA frames do not (a turn costs ~10 us: too much per batch of small messages).
_FRAGMENT_KIND = int(FrameKind.FRAGMENT)
_KEEPALIVE = encode_frame(FrameKind.KEEPALIVE)


class ConnectionHandler:
    async def on_data(self, conn: "Connection", body: bytes) -> None:
        raise NotImplementedError

    def on_control(self, conn: "Connection", kind: int, obj: Dict[str, Any]) -> None:
        raise NotImplementedError

    def on_closed(self, conn: "Connection", reason: str) -> None:
        raise NotImplementedError

    def on_query(self, conn: "Connection", kind: int, header: Dict[str, Any], payload: bytes) -> None:
        raise CodecError(f"unexpected {FrameKind(kind).name} frame")


async def read_frame(reader: asyncio.StreamReader) -> Frame:
    header = await reader.readexactly(FRAME_HEADER_SIZE)
    kind, flags, length = parse_frame_header(header)
    body = await reader.readexactly(length) if length else b""
    return Frame(kind, flags, body)


class Connection:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pipeline: TransmissionPipeline,
        handler: ConnectionHandler,
        peer_name: str,
        kind: str,
        lease_s: float,
        keepalive_s: float,
        capacity_bps: Optional[int] = None,
        notsent_lowat: Optional[int] = None,
    ) -> None:
        self.pipeline = pipeline
        self.handler = handler
        self.peer_name = peer_name
        self.kind = kind  # "router" or "client"
        self.lease_s = lease_s
        self.keepalive_s = keepalive_s
        self.capacity_bps = capacity_bps
        self.rx = TrafficCounters()
        self.closed = False
        self.close_reason = ""
        self._in_handler = False
        self.reassembly: Optional[Reassembly] = None  # made at the first FRAGMENT frame
        # Streaming links (router/streaming.py): on a stream connection, the endpoint's shared
        # connection, and what its writer calls when its pipeline is empty; on a shared one, its pool.
        self.main: Optional["Connection"] = None
        self.on_idle: Optional[Callable[["Connection"], None]] = None
        self.streams: Any = None
        self._tasks: list = []
        self._done = asyncio.Event()
        self.transport: asyncio.Transport = writer.transport  # type: ignore[assignment]
        # kept for as long as the connection: asyncio (3.11.5+) closes the transport when its StreamWriter
        # is collected, and the caller that opened the stream need not keep it
        self._stream_writer = writer
        # What the peer sent after its HELLO is still in the stream reader's buffer: it is the start
        # of what the receiver reads; and reading pauses where the stream reader paused, at twice the
        # limit it was opened with (asyncio has no public call for either).
        self.receiver = FrameReceiver(self.transport, 2 * reader._limit,  # type: ignore[attr-defined]
                                      bytes(reader._buffer))  # type: ignore[attr-defined]
        # the end of the stream as the stream reader saw it, its buffer still unread (at_eof() needs it empty)
        self.receiver.eof = (reader._eof or reader.exception() is not None  # type: ignore[attr-defined]
                             or self.transport.is_closing())
        self.transport.set_protocol(self.receiver)
        self.transport.resume_reading()  # in case the stream reader had paused it (a no-op otherwise)
        # With TCP_NOTSENT_LOWAT the kernel holds at most ``notsent_lowat`` unsent
        # bytes; the user-space transport buffer is kept as small, so a backlog
        # stays in the pipeline's priority queues where the scheduler reorders it.
        self.high_water = min(WRITE_HIGH_WATER, notsent_lowat) if notsent_lowat else WRITE_HIGH_WATER
        self.transport.set_write_buffer_limits(high=self.high_water)
        self.notsent_lowat = None
        try:
            import socket

            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if notsent_lowat:
                    sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, "TCP_NOTSENT_LOWAT", 25), notsent_lowat)
                    self.notsent_lowat = notsent_lowat
        except OSError:
            pass

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._read_loop(), name=f"read-{self.peer_name}"),
            loop.create_task(self._write_loop(), name=f"write-{self.peer_name}"),
            loop.create_task(self._lease_loop(), name=f"lease-{self.peer_name}"),
        ]

    async def wait_closed(self) -> str:
        await self._done.wait()
        return self.close_reason

    def send_control(self, kind: int, obj: Dict[str, Any]) -> None:
        self._send_control_frame(encode_json_frame(kind, obj))

    def send_query_frame(self, kind: int, header: Dict[str, Any], payload: bytes = b"") -> None:
        """A QUERY or REPLY frame, on the control path (bounded on its own, ahead of data)."""
        self._send_control_frame(encode_query_frame(kind, header, payload))

    def _send_control_frame(self, frame: bytes) -> None:
        if not self.closed and not self.pipeline.send_control(frame):
            # The peer does not read its control messages (AllJoyn's maxControlMessages):
            # a deliberate disconnect, once the caller's loop over connections is done.
            limit = self.pipeline.control_limit
            asyncio.get_running_loop().call_soon(
                self.close, f"control queue over its limit of {limit} bytes: the peer does not read; "
                            f"disconnected by the router's resource limits")

    async def close_gracefully(self, reason: str, timeout: float) -> None:
        """Send CLOSE after everything queued, half-close, and wait until the
        peer has read it all and closed its side (or ``timeout``)."""
        if self.closed:
            return
        if len(self._tasks) > 1:
            self._tasks[1].cancel()  # the writer: nothing may follow CLOSE
        try:
            self.transport.write(encode_json_frame(FrameKind.CLOSE, {"reason": reason}))
            if self.transport.can_write_eof():
                self.transport.write_eof()
        except (ConnectionError, OSError, RuntimeError):
            self.close(reason, notify_peer=False)
            return
        try:
            await asyncio.wait_for(self._done.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        self.close(reason, notify_peer=False)

    def close(self, reason: str, notify_peer: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        if notify_peer:
            try:
                self.transport.write(encode_json_frame(FrameKind.CLOSE, {"reason": reason}))
            except Exception:  # transport may already be gone
                pass
        lost = self.pipeline.close()
        if self.reassembly is not None:
            partial, held = self.reassembly.discard()
            if partial:
                reason = f"{reason} ({partial} fragmented message(s) lost after {held} bytes received)"
        try:
            self.transport.close()
        except Exception:
            pass
        current = asyncio.current_task()
        for t in self._tasks:
            if t is not current:
                t.cancel()
        self._done.set()
        self.handler.on_closed(self, reason if not lost else f"{reason} ({lost} queued messages discarded)")

    async def _read_loop(self) -> None:
        receiver = self.receiver
        handler = self.handler
        try:
            while True:
                frame = receiver.next_frame()
                if frame is None:
                    if receiver.eof:
                        if receiver.error is not None:
                            raise receiver.error
                        self.close("connection closed by peer", notify_peer=False)
                        return
                    await receiver.wait_for_bytes()
                    continue
                kind, flags, body = frame
                if kind == _FRAGMENT_KIND:
                    await asyncio.sleep(0)
                    if self.reassembly is None:
                        self.reassembly = Reassembly(self.pipeline.config.max_message_bytes)
                    body = self.reassembly.feed(flags, body)
                    if body is None:
                        continue
                    kind = FrameKind.DATA  # a whole message: on as a DATA body of one message
                if kind == FrameKind.DATA:
                    # While the handler waits for queue room (back-pressure) the
                    # peer is alive even though we read nothing: hold the lease.
                    self._in_handler = True
                    try:
                        await handler.on_data(self, body)
                    finally:
                        self._in_handler = False
                        receiver.last_rx = time.monotonic()
                elif kind == FrameKind.KEEPALIVE:
                    continue
                elif kind == FrameKind.CLOSE:
                    reason = decode_json_body(Frame(kind, 0, body)).get("reason", "")
                    self.close(f"peer closed: {reason}", notify_peer=False)
                    return
                elif kind in QUERY_KINDS:
                    header, payload = decode_query_body(kind, body)
                    handler.on_query(self, kind, header, payload)
                else:
                    handler.on_control(self, kind, decode_json_body(Frame(kind, 0, body)))
                    # a peer sending control frames back to back (20 000 declarations) must not hold
                    # the loop: every other connection gets its turn between two of them
                    await asyncio.sleep(0)
                if self.closed:
                    return
        except (ConnectionError, OSError) as exc:
            self.close(f"connection error: {exc}", notify_peer=False)
        except CodecError as exc:
            log.warning("malformed frame from %s %s: %s", self.kind, self.peer_name, exc)
            self.close(f"malformed frame: {exc}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not take the router down
            log.exception("error handling frames from %s", self.peer_name)
            self.close(f"internal error: {exc!r}")

    async def _write_loop(self) -> None:
        """Pull frames and write them: all the pipeline has ready (up to the write buffer's high-water
        mark) in one write, so one system call carries many control frames or batches -- on loopback
        the sender pays for the receiver's TCP work too, per call.  A paced link (``capacity_bps``)
        writes frame by frame; a FRAGMENT frame ends a write (the event loop gets a turn after it)."""
        pipeline = self.pipeline
        transport = self.transport
        receiver = self.receiver
        capacity = self.capacity_bps
        gather = self.high_water if not capacity else 0
        next_send = time.monotonic()
        last_tx = time.monotonic()
        woken = False  # from idle, by a producer (or the keep-alive timeout)
        pending = None  # what the last pull of a write said after its frames (EMPTY or BACKOFF)
        try:
            while not self.closed:
                if pending is not None:
                    item, pending = pending, None
                else:
                    item = pipeline.pull(time.time_ns(), backoff=not woken)
                    woken = False
                if item is EMPTY:
                    if self.on_idle is not None:
                        self.on_idle(self)
                    idle = self.keepalive_s - (time.monotonic() - last_tx)
                    if idle <= 0:
                        transport.write(_KEEPALIVE)
                        last_tx = time.monotonic()
                        continue
                    await pipeline.wait_for_data(idle)
                    woken = True
                    continue
                if item is BACKOFF:
                    await asyncio.sleep(0)
                    continue
                frame = item[1]  # type: ignore[index]
                size = len(frame)
                if size < gather and frame[2] != _FRAGMENT_KIND:
                    frames = [frame]
                    while size < gather:
                        item = pipeline.pull(time.time_ns())
                        if item.__class__ is not tuple:
                            pending = item
                            break
                        frame = item[1]  # type: ignore[index]
                        frames.append(frame)
                        size += len(frame)
                        if frame[2] == _FRAGMENT_KIND:
                            break
                    transport.writelines(frames) if len(frames) > 1 else transport.write(frame)
                else:
                    transport.write(frame)
                last_tx = time.monotonic()
                if capacity:
                    next_send = max(next_send, last_tx) + size * 8 / capacity
                    delay = next_send - time.monotonic()
                    if delay > 0.0005:
                        await asyncio.sleep(delay)
                if receiver.write_paused:
                    await receiver.drained()
                    pending = None  # producers pushed meanwhile without waking this writer: pull again
                    if transport.is_closing():
                        raise ConnectionResetError("the connection was lost while writing")
                elif frame[2] == _FRAGMENT_KIND:
                    await asyncio.sleep(0)
        except (ConnectionError, OSError) as exc:
            self.close(f"write failed: {exc}", notify_peer=False)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if transport.is_closing():  # uvloop refuses a write to a closed transport (asyncio drops it)
                self.close(f"write failed: the connection was closed ({exc})", notify_peer=False)
                return
            log.exception("writer for %s failed", self.peer_name)
            self.close(f"internal error in writer: {exc!r}")

    async def _lease_loop(self) -> None:
        try:
            while not self.closed:
                await asyncio.sleep(min(self.lease_s / 4, 0.25))
                receiver = self.receiver
                if not self._in_handler and not receiver.backlogged \
                        and time.monotonic() - receiver.last_rx > self.lease_s:
                    self.close(f"lease expired: nothing received for {self.lease_s:.3f} s")
                    return
        except asyncio.CancelledError:
            raise
