"""The receiving side of a framed connection, and its transport's flow control.

``FrameReceiver`` is the transport's protocol once the HELLO exchange is done
(router/connection.py switches to it): an ``asyncio.BufferedProtocol``, so the
kernel copies what arrives straight into a buffer of the receiver's own,
without the per-read ``bytes`` objects, buffer extensions and per-frame
wake-ups of ``asyncio.StreamReader``.  ``next_frame`` cuts the next complete
frame out of that buffer; its body is a ``bytes`` of its own (one copy per
frame, so what a handler keeps of it stays valid however the buffer is reused).

When the buffer's free end runs short while frames wait to be handled (a reader
behind its sender holds up to ``pause_at`` bytes), those complete frames stay
where they are and only the unfinished frame at the end moves, into the next
buffer: reading goes on there while the frames behind are handled from the old
one, which is then kept for reuse.  (Moving every waiting byte to the front
instead cost a copy of up to ``pause_at`` bytes each time the end ran short.)

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
from collections import deque
from typing import Deque, Optional, Tuple

from .codec import FRAME_HEADER_SIZE, FRAME_MAGIC, parse_frame_header
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
        #: earlier buffers' complete frames not handled yet, oldest first: [buffer, start, stop]
        self._behind: Deque[list] = deque()
        #: the bytes in ``_behind``
        self._behind_bytes = 0
        #: a buffer whose frames were all handled, for the next time the end runs short
        self._spare: Optional[bytearray] = None

    # ------------------------------------------------------------ the transport's side

    def get_buffer(self, sizehint: int) -> memoryview:
        buf = self.buf
        if len(buf) - self.end < MIN_READ:
            start = self.start
            tail = _complete_end(buf, start, self.end)
            if tail > start:
                # complete frames wait: they stay in this buffer, handled from ``_behind``; the
                # unfinished frame at the end (if any) starts the next buffer
                self._behind.append([buf, start, tail])
                self._behind_bytes += tail - start
                held = self.end - tail
                spare, self._spare = self._spare, None
                if spare is None or len(spare) < held + MIN_READ:
                    spare = bytearray(max(INITIAL_BUFFER, held + MIN_READ))
                spare[:held] = memoryview(buf)[tail:self.end]
                self.buf = buf = spare
                self.start, self.end = 0, held
            else:
                held = self.end - start
                if held <= start:
                    # one unfinished frame moves to the front: never more bytes than were handled
                    # since the last move, so each byte received is moved at most once on average
                    buf[:held] = memoryview(buf)[start:self.end]
                    self.start, self.end = 0, held
                if len(buf) - self.end < MIN_READ:
                    buf.extend(bytes(len(buf)))
        # no more than would reach the pause mark (so a small one, a slow reader's, bounds what is held here)
        return memoryview(buf)[self.end:self.end + max(MIN_READ, self.pause_at - self.held)]

    @property
    def held(self) -> int:
        """Bytes received and not handled yet (complete frames and the unfinished one)."""
        return self._behind_bytes + self.end - self.start

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        self.last_rx = time.monotonic()
        if self.held >= self.pause_at and not self._read_paused and self._frame_ready():
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
        frame = None
        if self._behind:
            behind = self._behind[0]
            buf, start = behind[0], behind[1]
            kind, flags, length = parse_frame_header(buf, start)
            stop = start + FRAME_HEADER_SIZE + length
            with memoryview(buf) as view:
                body = bytes(view[start + FRAME_HEADER_SIZE:stop]) if length else b""
            frame = (kind, flags, body)
            self._behind_bytes -= stop - start
            if stop == behind[2]:
                self._behind.popleft()
                if len(buf) == INITIAL_BUFFER:
                    self._spare = buf
            else:
                behind[1] = stop
        else:
            start = self.start
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
        if self._read_paused and (frame is None or self.held < self.pause_at):
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
        return bool(self._behind) or _complete_end(self.buf, self.start, self.end, 1) > self.start


def _complete_end(buf: bytearray, start: int, end: int, most: int = -1) -> int:
    """Where the complete frames from ``start`` on end (at most ``most`` of them; -1: all), ``end`` at the
    latest. A header that is not a frame's ends them too: ``next_frame`` raises on it when it gets there."""
    pos = start
    while most and end - pos >= FRAME_HEADER_SIZE:
        if buf[pos:pos + 2] != FRAME_MAGIC:
            break
        stop = pos + FRAME_HEADER_SIZE + int.from_bytes(buf[pos + 4:pos + FRAME_HEADER_SIZE], "big")
        if stop > end:
            break
        pos = stop
        most -= 1
    return pos
