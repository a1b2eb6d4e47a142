"""The receiving side of a framed connection, and its transport's flow control.

``FrameReceiver`` is the transport's protocol once the HELLO exchange is done
(router/connection.py switches to it): an ``asyncio.BufferedProtocol``, so the
kernel copies what arrives straight into a buffer of the receiver's own,
without the per-read ``bytes`` objects, buffer extensions and per-frame
wake-ups of ``asyncio.StreamReader``.  ``next_frame`` cuts the next complete
frame out of that buffer; its body is a ``bytes`` of its own (one copy per
frame, so what a handler keeps of it stays valid however the buffer is reused).

Back-pressure: while more than ``pause_at`` bytes of complete frames wait to be
handled, the transport stops reading (the kernel's socket buffer then fills and
TCP slows the sender down), as ``StreamReader``'s limit did.

It also takes the transport's write flow control (``pause_writing`` /
``resume_writing``): ``drained`` waits until the transport's buffer is below its
low-water mark again.
"""
from __future__ import annotations

import asyncio
import time
from typing import Optional, Tuple

from .codec import FRAME_HEADER_SIZE, parse_frame_header
from .wakeup import Wakeup

#: the buffer's size to start with; it grows for a frame larger than it
INITIAL_BUFFER = 256 * 1024
#: ``get_buffer`` offers at least this much room (moving the unread bytes to the front, or growing)
MIN_READ = 64 * 1024


class FrameReceiver(asyncio.BufferedProtocol):
    """Bytes received into ``buf[start:end]``; ``next_frame`` consumes them frame by frame."""

    def __init__(self, transport: asyncio.Transport, pause_at: int, received: bytes = b"") -> None:
        self.transport = transport
        self.pause_at = pause_at
        self.buf = bytearray(max(INITIAL_BUFFER, len(received) + MIN_READ))
        self.buf[:len(received)] = received
        self.start = 0
        self.end = len(received)
        #: the monotonic time of the last bytes received
        self.last_rx = time.monotonic()
        self.eof = False
        #: what ended the connection (None: the peer closed it, or nothing yet)
        self.error: Optional[BaseException] = None
        self._read_paused = False
        #: the transport's write buffer is above its high-water mark (``drained`` waits for it)
        self.write_paused = False
        self._more_bytes = Wakeup()
        self._drained = Wakeup()

    # ------------------------------------------------------------ the transport's side

    def get_buffer(self, sizehint: int) -> memoryview:
        buf = self.buf
        if len(buf) - self.end < MIN_READ:
            start, held = self.start, self.end - self.start
            if held <= start:
                # what is not handled yet moves to the front: never more bytes than were handled
                # since the last move, so each byte received is moved at most once on average
                buf[:held] = memoryview(buf)[start:self.end]
                self.start, self.end = 0, held
            if len(buf) - self.end < MIN_READ:
                buf.extend(bytes(len(buf)))
        # no more than would reach the pause mark (so a small one, a slow reader's, bounds what is held here)
        return memoryview(buf)[self.end:self.end + max(MIN_READ, self.pause_at - (self.end - self.start))]

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        self.last_rx = time.monotonic()
        if self.end - self.start >= self.pause_at and not self._read_paused and self._frame_ready():
            self._read_paused = True
            self.transport.pause_reading()
        self._more_bytes.wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._more_bytes.wake()
        # the transport stays open (half-closed) until the connection has handled what is buffered and
        # closes it: so it can still be written to meanwhile, on uvloop as on asyncio's loop
        return True

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.eof = True
        self.error = exc
        self._more_bytes.wake()
        self.write_paused = False
        self._drained.wake()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._drained.wake()

    # ------------------------------------------------------------ the connection's side

    def next_frame(self) -> Optional[Tuple[int, int, bytes]]:
        """The next complete frame (kind, flags, body), or None until more has arrived.
        Raises CodecError for a malformed frame header."""
        start = self.start
        frame = None
        if self.end - start >= FRAME_HEADER_SIZE:
            kind, flags, length = parse_frame_header(self.buf, start)
            stop = start + FRAME_HEADER_SIZE + length
            if stop <= self.end:
                with memoryview(self.buf) as view:  # released at once: the buffer may grow later
                    body = bytes(view[start + FRAME_HEADER_SIZE:stop]) if length else b""
                frame = (kind, flags, body)
                self.start = stop
                if stop == self.end:
                    self.start = self.end = 0
        if self._read_paused and (frame is None or self.end - self.start < self.pause_at):
            self._read_paused = False
            self.transport.resume_reading()
            # nothing could arrive while reading was paused: the lease counts from now
            self.last_rx = time.monotonic()
        return frame

    async def wait_for_bytes(self) -> None:
        """Until more bytes arrived, or the connection ended (``eof``)."""
        if not self.eof:
            await self._more_bytes.wait()

    async def drained(self) -> None:
        """Until the transport's write buffer went below its low-water mark (or the connection ended)."""
        while self.write_paused:
            await self._drained.wait()

    @property
    def backlogged(self) -> bool:
        """A complete frame is buffered, not handled yet: the peer is not silent, the connection is behind
        (its lease does not run out meanwhile, however long the handling takes)."""
        return self._frame_ready()

    def _frame_ready(self) -> bool:
        """At least one complete frame is buffered (so the connection's reader has work, and will resume)."""
        start = self.start
        if self.end - start < FRAME_HEADER_SIZE:
            return False
        length = int.from_bytes(self.buf[start + 4:start + FRAME_HEADER_SIZE], "big")
        return start + FRAME_HEADER_SIZE + length <= self.end
