"""Transmission pipeline of one connection (after Zenoh's StageIn/StageOut).

One bounded queue per priority, each a deque of sealed batches plus the batch
currently being filled.  A queue's size counts batches, the filling one
included.  Producers call ``try_push`` (synchronous fast path) and, when it
fails, ``push_wait`` (waits up to the drop or close deadline).  The single
consumer (the connection's writer task) calls ``pull``.

A filling batch leaves when it is full, when its bytes pass the threshold,
when the time limit since its first write expires, or when no new bytes were
written to it since the writer last looked (the producer went idle: Zenoh's
back-off rule).  Express messages are sealed into a batch of their own.

A message larger than a batch is, with fragmentation on, queued whole as one
:class:`Fragments` (one slot of its priority's queue) and leaves as FRAGMENT
frames no larger than a batch, one per ``pull``: the scheduler chooses again
before every piece, so frames of other priorities pass between the pieces
(Zenoh's fragmentation).  With fragmentation off it leaves as one oversize
DATA frame, and everything behind it on the connection waits.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Deque, List, Optional, Tuple, Union

from .codec import (
    FRAGMENT_HEADER_SIZE, FRAME_HEADER, FRAME_HEADER_SIZE, FRAME_MAGIC, FrameKind, NUM_PRIORITIES, encode_fragment,
)
from .config import PipelineConfig
from .limits import EndpointAccount, Ledger
from .scheduler import LinkScheduler, make_scheduler
from .stats import EMA_ALPHA, QueueStats, TrafficCounters
from .wakeup import Wakeup

_HEADER_PLACEHOLDER = bytes(FRAME_HEADER_SIZE)
_DATA_KIND = int(FrameKind.DATA)


def drop_deadline_ms(config: PipelineConfig, priority: int) -> float:
    """How long a Drop message of ``priority`` waits for room: its priority's ``drop_deadlines_ms``, else
    ``drop_deadline_ms``."""
    own = config.drop_deadlines_ms[priority] if config.drop_deadlines_ms else None
    return config.drop_deadline_ms if own is None else own


def patch_heads(buf: bytearray, base: int, count: int, size: int, old: bytes, new: bytes) -> None:
    """Messages of ``size`` bytes lie back to back in ``buf`` from ``base``, each starting with
    ``old``: replace that by ``new`` in each, one strided slice assignment per differing byte."""
    stop = base + count * size
    for i in range(len(new)):
        if new[i] != old[i]:
            buf[base + i:stop:size] = new[i:i + 1] * count


class Batch:
    """A DATA frame being built: reserved header, then messages."""

    __slots__ = ("buf", "times", "priority", "first_write_ns", "srcs", "sizes")

    def __init__(self, priority: int, now_ns: int) -> None:
        self.buf = bytearray(_HEADER_PLACEHOLDER)
        self.times: List[int] = []
        self.priority = priority
        self.first_write_ns = now_ns
        # Resource accounting: the senders charged for its messages and their bytes (router/limits.py),
        # made on the first charge (most batches never have one).
        self.srcs: Optional[List[EndpointAccount]] = None
        self.sizes: Optional[List[int]] = None

    def release(self) -> None:
        """Give the senders back the bytes this batch held for them."""
        if self.srcs:
            for src, size in zip(self.srcs, self.sizes):
                src.queued_from -= size

    def seal(self) -> bytearray:
        FRAME_HEADER.pack_into(self.buf, 0, FRAME_MAGIC, _DATA_KIND, self.priority, len(self.buf) - FRAME_HEADER_SIZE)
        return self.buf

    def held(self) -> int:
        """Message bytes still waiting in it."""
        return len(self.buf) - FRAME_HEADER_SIZE


class Fragments(Batch):
    """One message larger than a batch, leaving piece by piece (``sent`` bytes so far).  Its
    bytes are ``head`` then ``body`` (a view of the frame it arrived in: never copied whole)."""

    __slots__ = ("head", "body", "total", "sent")

    def __init__(self, priority: int, now_ns: int, head: bytes, body) -> None:
        super().__init__(priority, now_ns)
        self.head = bytes(head)
        self.body = body
        self.total = len(self.head) + len(body)
        self.sent = 0

    def held(self) -> int:
        return self.total - self.sent

    def piece(self, start: int, end: int):
        """Bytes ``start..end`` of the message."""
        h = len(self.head)
        if start >= h:
            return self.body[start - h:end - h]
        return self.head[start:] + bytes(self.body[:end - h])


class PriorityQueue:
    __slots__ = ("priority", "capacity", "ready", "current", "last_seen_len", "stats")

    def __init__(self, priority: int, capacity: int) -> None:
        self.priority = priority
        self.capacity = capacity
        self.ready: Deque[Batch] = deque()
        self.current: Optional[Batch] = None
        self.last_seen_len = -1
        self.stats = QueueStats(priority)

    def batches(self) -> int:
        return len(self.ready) + (1 if self.current is not None else 0)


BACKOFF = "backoff"
EMPTY = "empty"
PullResult = Union[Tuple[int, bytes, int], str]


class TransmissionPipeline:
    def __init__(self, config: PipelineConfig, queue_sizes: Optional[Tuple[int, ...]] = None,
                 scheduler: Optional[LinkScheduler] = None, account: Optional[EndpointAccount] = None,
                 ledger: Optional[Ledger] = None) -> None:
        sizes = queue_sizes if queue_sizes is not None else config.queue_sizes
        self.config = config
        self.queues = [PriorityQueue(p, sizes[p]) for p in range(NUM_PRIORITIES)]
        self.scheduler = scheduler if scheduler is not None else make_scheduler(
            config.scheduler, config.wrr_weights, config.contention_window_us, config.polling_window_us)
        self.batch_size = config.batch_size_bytes
        self.threshold = config.batch_threshold_bytes + FRAME_HEADER_SIZE
        self.time_limit_ns = config.batch_time_limit_us * 1000
        self.fragmentation = config.fragmentation
        self.piece_size = self.batch_size - FRAME_HEADER_SIZE - FRAGMENT_HEADER_SIZE
        self.control: Deque[bytes] = deque()
        # Resource accounting (router only): the endpoint this pipeline sends to, and the totals.
        self.account = account
        self.ledger = ledger
        self.control_limit = ledger.config.control_bytes if ledger is not None else 0
        self.tx = TrafficCounters()
        self.closed = False
        self._data_ready = Wakeup()  # the writer, waiting for something to send
        self._room = Wakeup()  # producers waiting for room (push_wait)
        self._room_waiters = 0
        self._writer_waiting = False

    # ------------------------------------------------------------ producer side

    def send_control(self, frame: bytes) -> bool:
        """Queue a control frame (hello, keep-alive, link-state, declare): always sent
        first, never counted against the data budget.  False (nothing queued) when
        the endpoint's control bytes would pass ``limits.control_bytes``."""
        acct = self.account
        if acct is not None:
            n = len(frame)
            if acct.control + n > self.control_limit:
                return False
            acct.control += n
            self.ledger.control += n
        self.control.append(frame)
        if self._writer_waiting:
            self._writer_waiting = False
            self._data_ready.wake()
        return True

    def try_push(self, priority: int, express: bool, head: bytes, body, now_ns: int,
                 src: Optional[EndpointAccount] = None) -> bool:
        """Append one encoded message (``head`` + ``body``) if there is room now:
        in its priority queue and under the target endpoint's byte limit (checked
        on every message), and under the total (checked when a batch opens: a
        batch being filled may take the total past its limit by at most its own
        size).  ``src`` is the sender's account (charged until the message leaves).
        A message larger than the endpoint's limit is taken when its queue is empty.
        A closed pipeline takes nothing (its caller counts the message as lost to the closed link)."""
        if self.closed:
            return False
        q = self.queues[priority]
        size = len(head) + len(body)
        acct = self.account
        if acct is not None:
            held = acct.queued_to + size
            if held > acct.limit_to and acct.queued_to:
                acct.push_refused(now_ns)
                return False
        cur = q.current
        if express or size + FRAME_HEADER_SIZE > self.batch_size:
            # A batch of its own: seal what is filling (keeps order), need a free slot.
            if len(q.ready) + (2 if cur is not None else 1) > q.capacity:
                if acct is not None:
                    acct.push_refused(now_ns)
                return False
            if acct is not None and not self._total_has_room(acct, held, size):
                return False
            if cur is not None:
                q.ready.append(cur)
                q.current = None
                q.last_seen_len = -1
            if self.fragmentation and size + FRAME_HEADER_SIZE > self.batch_size:
                batch = Fragments(priority, now_ns, head, body)
            else:
                batch = Batch(priority, now_ns)
                batch.buf += head
                batch.buf += body
            batch.times.append(now_ns)
            q.ready.append(batch)
        else:
            if cur is None or len(cur.buf) + size > self.batch_size:
                if len(q.ready) + (1 if cur is None else 2) > q.capacity:
                    if acct is not None:
                        acct.push_refused(now_ns)
                    return False
                if acct is not None and not self._total_has_room(acct, held, size):
                    return False
                if cur is not None:
                    q.ready.append(cur)
                cur = q.current = Batch(priority, now_ns)
            batch = cur
            buf = cur.buf
            buf += head
            buf += body
            cur.times.append(now_ns)
            if len(buf) >= self.threshold:
                q.ready.append(cur)
                q.current = None
        q.stats.in_queue += 1
        if acct is not None:
            self._charge(acct, batch, src, size, now_ns)
        if self._writer_waiting:
            self._writer_waiting = False
            self._data_ready.wake()
        return True

    def _charge(self, acct: EndpointAccount, batch: Batch, src: Optional[EndpointAccount], size: int,
                now_ns: int) -> None:
        """``size`` bytes were queued into ``batch``: the target endpoint holds them, and the sender
        ``src`` (if charged) until they leave."""
        if not acct.queued_to:  # it was empty: a backlog starts
            acct.backlog_since_ns = now_ns
        acct.queued_to += size
        if src is not None:
            src.queued_from += size
            srcs = batch.srcs
            if srcs is None:
                batch.srcs, batch.sizes = [src], [size]
            elif srcs[-1] is src:  # runs of one sender share an entry
                batch.sizes[-1] += size
            else:
                srcs.append(src)
                batch.sizes.append(size)

    def push_run(self, priority: int, head: bytes, run, count: int, size: int, now_ns: int,
                 src: Optional[EndpointAccount] = None) -> int:
        """Queue up to ``count`` messages of ``size`` bytes each that lie back to back in ``run`` (a
        view of the frame they arrived in) and share their first 6 bytes, each with those replaced
        by ``head``; not express, none larger than a batch.  The same as, for each in turn, its
        offer in the queue statistics then ``try_push``, stopping before the first message that
        ``try_push`` would refuse.  Returns how many were queued; the caller offers the rest one by
        one.  What fits in the filling batch is copied in one piece and its heads patched in place
        (no per-message slices, calls or allocations)."""
        q = self.queues[priority]
        st = q.stats
        acct = self.account
        batch_size = self.batch_size
        taken = 0
        while taken < count:
            cur = q.current
            start = taken * size
            if cur is None or len(cur.buf) + size > batch_size:
                # a batch opens: where room can be refused, so one message through try_push
                in_queue = st.in_queue
                if not self.try_push(priority, False, head, run[start + len(head):start + size], now_ns, src):
                    break
                st.tried += 1  # its offer, as forwarding records it, saw the queue without it
                st.avg_qsize += EMA_ALPHA * (in_queue - st.avg_qsize)
                taken += 1
                continue
            buf = cur.buf
            # as many as the filling batch takes before it is full or passes the threshold
            n = min(count - taken, (batch_size - len(buf)) // size, -(-(self.threshold - len(buf)) // size))
            if acct is not None:  # and the target endpoint's limit (try_push's check, for n at once)
                n = min(n, (acct.limit_to - acct.queued_to) // size)
                if n <= 0:
                    break
            base = len(buf)
            buf += run[start:start + n * size]
            patch_heads(buf, base, n, size, run[start:start + len(head)], head)
            cur.times += [now_ns] * n
            st.record_queued_run(n)
            if acct is not None:
                self._charge(acct, cur, src, n * size, now_ns)
            if len(buf) >= self.threshold:
                q.ready.append(cur)
                q.current = None
            taken += n
        if taken and self._writer_waiting:
            self._writer_waiting = False
            self._data_ready.wake()
        return taken

    def _total_has_room(self, acct: EndpointAccount, held: int, size: int) -> bool:
        """A batch opens for a message of ``size``: is there room for it in the total?
        (Also where the peaks are sampled.)"""
        if held > acct.peak_to:
            acct.peak_to = held
        ledger = self.ledger
        total = ledger.total + size
        if total > ledger.peak:
            ledger.peak = total
        return total <= ledger.limit

    async def push_wait(self, priority: int, express: bool, head: bytes, body, block: bool,
                        src: Optional[EndpointAccount] = None, max_wait_s: Optional[float] = None) -> bool:
        """Slow path after ``try_push`` failed: wait for room up to the drop
        deadline (Drop) or the close deadline (Block), or ``max_wait_s`` if that
        is shorter.  Returns False on timeout.
        """
        deadline_ms = self.config.close_deadline_ms if block else drop_deadline_ms(self.config, priority)
        wait_s = deadline_ms / 1000.0
        if max_wait_s is not None and max_wait_s < wait_s:
            wait_s = max(0.0, max_wait_s)
        deadline = time.monotonic() + wait_s
        self._room_waiters += 1
        try:
            while not self.closed:
                if self.try_push(priority, express, head, body, time.time_ns(), src):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                await self._room.wait(remaining)
            return False
        finally:
            self._room_waiters -= 1

    def stats(self, priority: int) -> QueueStats:
        return self.queues[priority].stats

    # ------------------------------------------------------------ consumer side

    def pull(self, now_ns: int, backoff: bool = True) -> PullResult:
        """Next frame to write: (priority, frame_bytes, n_messages), or BACKOFF
        (filling batches exist but should wait a little), or EMPTY.  Control
        frames are returned with priority -1.

        ``backoff`` False: a filling batch leaves now, as if nothing had been added to it since the
        last look.  The writer pulls so when a producer has just woken it from idle: that producer
        has queued all it had before the writer runs (it wakes the writer, it does not yield to
        it), so waiting one more turn of the event loop for it would only add latency.
        """
        if self.control:
            frame = self.control.popleft()
            if self.account is not None:
                self.account.control -= len(frame)
                self.ledger.control -= len(frame)
            return (-1, frame, 0)
        eligible: List[int] = []
        filling = False
        for q in self.queues:
            if q.ready:
                eligible.append(q.priority)
                continue
            cur = q.current
            if cur is None:
                continue
            n = len(cur.buf)
            if n == q.last_seen_len or not backoff or now_ns - cur.first_write_ns >= self.time_limit_ns:
                eligible.append(q.priority)
            else:
                q.last_seen_len = n
                filling = True
        if not eligible:
            if filling:
                return BACKOFF
            self.scheduler.reset()
            return EMPTY
        scheduler = self.scheduler
        prio = eligible[0] if len(eligible) == 1 else scheduler.choose(eligible, now_ns)
        q = self.queues[prio]
        if q.ready:
            batch = q.ready[0]
            if batch.__class__ is Fragments:
                return self._pull_piece(q, batch, now_ns)
            q.ready.popleft()
        else:
            batch = q.current
            q.current = None
            q.last_seen_len = -1
        frame = batch.seal()
        n_msgs = len(batch.times)
        acct = self.account
        if acct is not None:
            held = len(frame) - FRAME_HEADER_SIZE
            acct.queued_to -= held
            batch.release()
            acct.moved(now_ns)
            if not acct.queued_to:  # emptied: the backlog, and whatever refusal there was, is over
                acct.full_since_ns = 0
                acct.backlog_since_ns = 0
        q.stats.record_pulled(batch.times, now_ns)
        scheduler.charge(prio, len(frame), now_ns)
        self.tx.bytes[prio] += len(frame)
        self.tx.messages[prio] += n_msgs
        if self._room_waiters:
            self._room.wake()
        return (prio, frame, n_msgs)

    def _pull_piece(self, q: PriorityQueue, msg: Fragments, now_ns: int) -> Tuple[int, bytes, int]:
        """The next FRAGMENT frame of the message at the head of ``q``; the message leaves
        the queue (and counts as pulled) with its last piece."""
        prio = q.priority
        start = msg.sent
        total = msg.total
        end = min(total, start + self.piece_size)
        frame = encode_fragment(prio, total, start, msg.piece(start, end))
        msg.sent = end
        done = end == total
        acct = self.account
        if acct is not None:
            acct.queued_to -= end - start
            acct.moved(now_ns)
        if done:
            q.ready.popleft()
            if acct is not None:
                msg.release()
            q.stats.record_pulled(msg.times, now_ns)
        if acct is not None and not acct.queued_to:
            acct.full_since_ns = 0
            acct.backlog_since_ns = 0
        self.scheduler.charge(prio, len(frame), now_ns)
        self.tx.bytes[prio] += len(frame)
        self.tx.messages[prio] += done
        if self._room_waiters:
            self._room.wake()
        return (prio, frame, int(done))

    async def wait_for_data(self, timeout: float) -> None:
        self._writer_waiting = True
        try:
            await self._data_ready.wait(timeout)
        finally:
            self._writer_waiting = False

    def close(self) -> int:
        """Mark closed, wake waiters; return how many queued messages are lost."""
        self.closed = True
        self._room.wake()
        self._data_ready.wake()
        lost = 0
        acct = self.account
        for q in self.queues:
            lost += q.stats.in_queue
            q.stats.in_queue = 0
            if acct is not None:
                for batch in list(q.ready) + ([q.current] if q.current is not None else []):
                    acct.queued_to -= batch.held()
                    batch.release()
            q.ready.clear()
            q.current = None
        if acct is not None:
            self.ledger.control -= acct.control
            acct.control = 0
            self.control.clear()
        return lost
