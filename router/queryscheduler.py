"""Peer message scheduler (reference/message-scheduler-design.md).

A **peer** has **channels** (its capacity), each open (may carry one message)
or closed.  **Senders** wait in a queue by priority (lower number = more
urgent), FIFO within one.  While channels are open, the first sender that may
take them gets an :class:`Offer` of all N open channels, of size M = 1 while
several senders wait, else N.  A sender that sends nothing keeps its place and
is offered again only once a channel opens or a peer is added.  A message with
a receiver is a **request** (partial replies, then exactly one terminal
callback); without one a **notification**, whose timeout limits the rate.
Time is injected (:class:`Timers`; an asyncio loop is one).  Single-threaded;
callbacks may call back in: one re-entry-guarded work loop makes every offer.
"""
from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Set, Tuple


class Cancellable(Protocol):
    """A pending timer (asyncio's TimerHandle is one)."""
    def cancel(self) -> None: ...


class Timers(Protocol):
    """Source of timers; an asyncio event loop is one."""
    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Cancellable: ...


class FailureReason(str, Enum):
    """Why a request ended without a response."""
    TIMEOUT = "timeout"
    DISCONNECT = "disconnect"
    SHUTDOWN = "shutdown"
    CANCELLED = "cancelled"  # the one who asked is gone (RetryingRequest.cancel)


class Sender(Protocol):
    """Waits for open channels: ``on_offer`` may send; ``on_discard`` only when the scheduler stops."""
    priority: int
    def on_offer(self, offer: Offer) -> None: ...
    def on_discard(self) -> None: ...


class Receiver(Protocol):
    """Waits for a response: any number of ``on_reply``, then exactly one of success / failure."""
    def on_reply(self, request_id: int, reply: Any) -> None: ...
    def on_success(self, request_id: int, reply: Any) -> None: ...
    def on_failure(self, request_id: int, reason: FailureReason) -> None: ...


class OfferError(RuntimeError):
    """An offer was misused: used up, expired, or asked for a channel it does not hold."""


@dataclass
class _Peer:
    """A peer's capacity and the ids of the messages in flight to it."""
    channels: int
    outstanding: Set[int] = field(default_factory=set)

    @property
    def open(self) -> int:
        return max(0, self.channels - len(self.outstanding))


@dataclass(eq=False)
class _Pending:
    """A message in flight: a request (with a receiver) or a notification."""
    request_id: int
    peer: str
    receiver: Optional[Receiver]
    timer: Optional[Cancellable] = None


@dataclass(eq=False)
class _Waiting:
    """A queued sender; ``seen`` is the version of the open channels it last declined."""
    sender: Sender
    seen: int = -1
    queued: bool = True


class Offer:
    """The open channels offered to one sender, valid while its ``on_offer`` runs.

    ``channels`` has one peer name per open channel (a peer with 3 open channels
    appears 3 times; peers interleaved); ``size`` is how many the sender may use.
    """

    def __init__(self, scheduler: MessageScheduler, open_by_peer: Dict[str, int], size: int) -> None:
        self._scheduler, self._open, self.size, self.sent, self._live = scheduler, open_by_peer, size, 0, True

    def open_to(self, peer: str) -> int:
        """How many of this offer's open channels go to ``peer`` (0 if none, or it was removed meanwhile)."""
        return min(self._open.get(peer, 0), self._scheduler.open_channels(peer))

    @property
    def channels(self) -> List[str]:
        """The open channels still in this offer (a peer removed meanwhile is left out)."""
        counts = {p: self.open_to(p) for p in self._open}
        return [p for k in range(max(counts.values(), default=0)) for p, n in counts.items() if n > k]

    def send(self, peer: str, message: Any, timeout_s: float, receiver: Optional[Receiver] = None) -> int:
        """Send ``message`` to ``peer``, closing one of its channels; return the request id.

        With a receiver it is a request, answered through the receiver or
        failed with TIMEOUT after ``timeout_s``; without, a notification whose
        channel reopens after ``timeout_s``.
        """
        if not self._live:
            raise OfferError("offer expired: it is valid only while on_offer runs")
        if self._scheduler.stopped:
            raise OfferError("scheduler stopped")
        if self.sent >= self.size:
            raise OfferError(f"offer of size {self.size} is used up")
        if self.open_to(peer) == 0:
            raise OfferError(f"no open channel to peer {peer!r} in this offer")
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s >= 0):
            raise ValueError(f"timeout_s must be a finite number >= 0, got {timeout_s!r}")
        request_id = self._scheduler._send(peer, message, timeout_s, receiver)
        self._open[peer] -= 1
        self.sent += 1
        return request_id


#: ``complete``'s ``last`` when no partial reply came with the final one
_NO_REPLY = object()


def _call_all(calls: List[Callable[[], None]]) -> None:
    """Make every call even if some raise (each must hear its end); re-raise the first error."""
    errors = []
    for call in calls:
        try:
            call()
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    if errors:
        raise errors[0]


class MessageScheduler:
    """Senders queued by priority, a pool of peer channels, and the requests in flight.

    ``transmit(peer, request_id, message)`` actually sends; ``Offer.send`` calls it.
    Also a Timers source for its users (``scheduler.timers``).
    """

    def __init__(self, timers: Timers, transmit: Callable[[str, int, Any], None]) -> None:
        self.timers = timers
        self.stopped = False
        self._transmit = transmit
        self._peers: Dict[str, _Peer] = {}
        self._pending: Dict[int, _Pending] = {}
        self._queue: List[Tuple[int, int, _Waiting]] = []  # sorted (priority, arrival, entry)
        self._arrivals = itertools.count()
        self._ids = itertools.count(1)
        self._version = 0  # bumped whenever a channel opens or a peer is added
        #: an offer may be possible: a sender was queued or channels opened since the work loop last
        #: found nothing to offer (it then returns at once: most calls end a request or pass a reply)
        self._dirty = False
        #: bumped at every add_peer and remove_peer: what is derived from the peers may be cached against it
        self.peer_changes = 0
        self._busy = False  # the work loop or a receiver callback is running
        self._offering: Optional[_Waiting] = None

    def add_peer(self, peer: str, channels: int) -> None:
        """Add a peer, or change its capacity (messages in flight stay; the excess does not reopen)."""
        if not isinstance(channels, int) or isinstance(channels, bool) or channels < 1:
            raise ValueError(f"channels must be an int >= 1, got {channels!r}")
        self.peer_changes += 1
        state = self._peers.get(peer)
        before = state.open if state else -1  # a new peer always counts as channels opening
        state = self._peers.setdefault(peer, _Peer(channels))
        state.channels = channels
        if state.open > before:
            self._channels_opened()
        self._run()

    def remove_peer(self, peer: str) -> None:
        """Forget a peer: its requests fail with DISCONNECT, its notifications are dropped."""
        state = self._peers.pop(peer, None)
        self.peer_changes += 1
        if state is not None:
            self._channels_opened()  # the waiting senders look again: one that can use no other peer ends
        ended = [self._pending.pop(rid) for rid in sorted(state.outstanding)] if state else []
        for p in ended:
            self._cancel_timer(p)
        self._run(lambda: _call_all([(lambda p=p: p.receiver.on_failure(p.request_id, FailureReason.DISCONNECT))
                                        for p in ended if p.receiver is not None]))

    def schedule(self, sender: Sender) -> None:
        """Queue a sender for an offer (possibly made before this returns); once stopped, discard it."""
        if self.stopped:
            sender.on_discard()
            return
        bisect.insort(self._queue, (sender.priority, next(self._arrivals), _Waiting(sender)))
        self._dirty = True
        self._run()

    def withdraw(self, sender: Sender) -> bool:
        """Take a sender out of the queue without calling it; True if it was there."""
        out = [item for item in self._queue if item[2].sender is sender]
        for item in out:
            item[2].queued = False
            self._queue.remove(item)
        return bool(out)

    def reply(self, request_id: int, reply: Any) -> bool:
        """Deliver a partial reply (``on_reply``); False if the request is unknown or ended."""
        pending = self._pending.get(request_id)
        if pending is None or pending.receiver is None:
            return False
        receiver = pending.receiver
        self._run(lambda: receiver.on_reply(request_id, reply))
        return True

    def complete(self, request_id: int, reply: Any = None, *, last: Any = _NO_REPLY) -> bool:
        """End a request with its final reply (``on_success``), reopening its channel; False if unknown.
        ``last``: a partial reply that came with the final one, delivered first (``on_reply``; the
        receiver hears ``on_success`` even if ``on_reply`` raised)."""
        if last is _NO_REPLY:
            return self._end(request_id, lambda r: r.on_success(request_id, reply))
        return self._end(request_id, lambda r: _call_all([lambda: r.on_reply(request_id, last),
                                                          lambda: r.on_success(request_id, reply)]))

    def fail(self, request_id: int, reason: FailureReason) -> bool:
        """End a request with ``on_failure(reason)``, reopening its channel; False if unknown."""
        return self._end(request_id, lambda r: r.on_failure(request_id, reason))

    def stop(self) -> None:
        """Fail every request in flight with SHUTDOWN, discard every waiting sender, never offer again."""
        if self.stopped:
            return
        self.stopped = True
        ended, waiting = list(self._pending.values()), [item[2] for item in self._queue]
        self._pending.clear()
        self._queue.clear()
        for p in ended:
            self._cancel_timer(p)
        for state in self._peers.values():
            state.outstanding.clear()
        calls = [(lambda p=p: p.receiver.on_failure(p.request_id, FailureReason.SHUTDOWN))
                 for p in ended if p.receiver is not None]
        for entry in waiting:
            if entry is not self._offering:  # a sender inside on_offer is discarded when it returns
                entry.queued = False
                calls.append(entry.sender.on_discard)
        self._run(lambda: _call_all(calls))

    def outstanding(self, peer: str) -> int:
        """Requests and notifications in flight to a peer (0 if unknown)."""
        return len(self._peers[peer].outstanding) if peer in self._peers else 0

    def open_channels(self, peer: str) -> int:
        """Open channels of a peer (0 if unknown)."""
        return self._peers[peer].open if peer in self._peers else 0

    def waiting_senders(self) -> int:
        """Senders in the queue."""
        return len(self._queue)

    def peers(self) -> Dict[str, int]:
        """Each peer's capacity."""
        return {name: state.channels for name, state in self._peers.items()}

    # ---------------------------------------------------------------- internals

    def _send(self, peer: str, message: Any, timeout_s: float, receiver: Optional[Receiver]) -> int:
        pending = _Pending(next(self._ids), peer, receiver)
        rid = pending.request_id
        self._peers[peer].outstanding.add(rid)
        self._pending[rid] = pending
        pending.timer = self.timers.call_later(
            timeout_s, lambda: self._end(rid, lambda r: r.on_failure(rid, FailureReason.TIMEOUT), expired=True))
        try:
            self._transmit(peer, rid, message)
        except BaseException:
            if self._pending.get(rid) is pending:  # it never left: undo, no callbacks
                del self._pending[rid]
                self._cancel_timer(pending)
                self._peers[peer].outstanding.discard(rid)
            raise
        return rid

    @staticmethod
    def _cancel_timer(pending: _Pending) -> None:
        if pending.timer is not None:
            pending.timer.cancel()
            pending.timer = None

    def _release(self, pending: _Pending) -> None:
        """A message ended: its channel reopens (unless the peer's capacity shrank meanwhile)."""
        state = self._peers.get(pending.peer)
        if state is not None:
            before = state.open
            state.outstanding.discard(pending.request_id)
            if state.open > before:
                self._channels_opened()

    def _channels_opened(self) -> None:
        """Every waiting sender may be offered again (also those that declined the last offer)."""
        self._version += 1
        self._dirty = True

    def _end(self, request_id: int, deliver: Callable[[Receiver], None], expired: bool = False) -> bool:
        """End a message: reopen its channel, then tell its receiver; a notification ends only at expiry."""
        pending = self._pending.get(request_id)
        if pending is None or (pending.receiver is None and not expired):
            return False
        del self._pending[request_id]
        self._cancel_timer(pending)
        self._release(pending)
        receiver = pending.receiver
        self._run(lambda: receiver and deliver(receiver))
        return True

    def _run(self, call: Callable[[], Any] = lambda: None) -> None:
        """Run a callback with offers deferred, then, unless nested, the work loop that makes offers."""
        if self._busy:
            call()
            return
        self._busy = True
        try:
            try:
                call()
            finally:
                while self._offer_next():
                    pass
        finally:
            self._busy = False

    def _offer_next(self) -> bool:
        if not self._dirty:
            return False
        version = self._version
        for item in self._queue:
            if item[2].seen != version:
                break
        else:
            self._dirty = False  # until a sender is queued or a channel opens
            return False
        # each peer's open channels (``_Peer.open``, inlined: this runs for every offer)
        open_now = {name: n for name, s in self._peers.items() if (n := s.channels - len(s.outstanding)) > 0}
        if self.stopped or not open_now:
            self._dirty = False
            return False
        entry = item[2]
        offer = Offer(self, open_now, 1 if len(self._queue) > 1 else sum(open_now.values()))
        self._offering = entry
        try:
            entry.sender.on_offer(offer)
        finally:
            offer._live, self._offering = False, None
            entry.seen = version
            if entry.queued and (offer.sent or self.stopped):  # stop() left a sender in on_offer to us
                entry.queued = False
                if not self.stopped:
                    self._queue.remove(item)
                elif not offer.sent:
                    entry.sender.on_discard()
        return True


# -------------------------------------------------------------------- retrying request

#: a request that every candidate failed once is tried again after this, doubling up to the maximum
#: (a serving peer that fails at once must not be asked thousands of times a second)
RETRY_BACKOFF_S = 0.05
RETRY_BACKOFF_MAX_S = 0.8

@dataclass(frozen=True)
class PeerError:
    """Complete a request with this (``scheduler.complete(rid, PeerError(...))``) when the peer
    answered with an error: the peer is responsive (its channel reopens) but a RetryingRequest
    ends with "error" and does not retry."""
    detail: Any = None


@dataclass
class Outcome:
    """How a RetryingRequest ended.

    ``status``: "ok", "timeout", "no_match", "shutdown", "cancelled" or "error"; ``attempts``:
    (peer, result) per send, result "ok", "error" or a FailureReason value;
    ``retries``: sends after the first; ``reply``: the final reply, or the PeerError.
    """
    status: str
    served_by: Optional[str] = None
    attempts: List[Tuple[str, str]] = field(default_factory=list)
    retries: int = 0
    reply: Any = None


class RetryingRequest:
    """A request (Sender and Receiver) retried on another peer until answered or out of time.

    Scheduled at construction.  At each offer it sends to the first of
    ``candidates()`` (best first) in the offer, preferring peers not tried yet;
    each attempt times out after min(attempt_timeout_s, time left).  A timeout
    or disconnect with time left is retried; a PeerError reply ends it with
    "error".  It ends "no_match" as soon as ``candidates()`` is empty, and
    "timeout" at ``deadline_s`` (on the ``now`` clock), even while queued.
    ``on_done`` is called exactly once; ``on_reply`` gets partial replies.
    """

    def __init__(self, scheduler: MessageScheduler, message: Any, *, priority: int, deadline_s: float,
                 attempt_timeout_s: float, candidates: Callable[[], Sequence[str]], now: Callable[[], float],
                 on_done: Callable[[Outcome], None], on_reply: Optional[Callable[[Any], None]] = None) -> None:
        self.priority, self.message, self.deadline_s = priority, message, deadline_s
        self._scheduler, self._attempt_timeout_s = scheduler, attempt_timeout_s
        self._candidates, self._now, self._on_done, self._on_reply = candidates, now, on_done, on_reply
        self.outcome: Optional[Outcome] = None
        self._attempts: List[Tuple[str, str]] = []
        self._tried: Set[str] = set()
        self._peer: Optional[str] = None  # the peer of the attempt in flight
        self._queued = False
        self._deadline_timer: Optional[Cancellable] = None
        self._retry_timer: Optional[Cancellable] = None
        self._backoff_s = 0.0
        self._rid: Optional[int] = None  # the attempt in flight
        self._schedule()

    def _schedule(self) -> None:
        left = self.deadline_s - self._now()
        if left <= 0 or not self._candidates():
            return self._finish("timeout" if left <= 0 else "no_match")
        self._queued = True
        try:
            self._scheduler.schedule(self)
        finally:  # (also when an offer raised: it stays queued, and its deadline still ends it)
            if self._queued and self.outcome is None:  # it waits for a channel: the deadline needs a timer
                self._arm_deadline()

    def _arm_deadline(self) -> None:
        """A timer for the deadline, armed only while the request waits (queued or backing off): an
        attempt in flight times out by the deadline at the latest by itself (its timeout is at most
        the time left), so the common request -- offered at once, answered -- sets no timer of its own."""
        if self._deadline_timer is None:
            self._deadline_timer = self._scheduler.timers.call_later(max(0.0, self.deadline_s - self._now()),
                                                                     self._on_deadline)

    def _on_deadline(self) -> None:
        self._deadline_timer = None
        if self._queued or self._retry_timer is not None:  # one in flight times out by itself
            self._finish("timeout")

    def _finish(self, status: str, served_by: Optional[str] = None, reply: Any = None) -> None:
        if self.outcome is not None:
            return
        self.outcome = Outcome(status, served_by, list(self._attempts), max(0, len(self._attempts) - 1), reply)
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        if self._queued:
            self._queued = False
            self._scheduler.withdraw(self)
        self._on_done(self.outcome)

    def on_offer(self, offer: Offer) -> None:
        if not self._queued:
            return
        left = self.deadline_s - self._now()
        candidates = list(self._candidates())
        if left <= 0 or not candidates:
            return self._finish("timeout" if left <= 0 else "no_match")
        usable = [p for p in candidates if offer.open_to(p)]
        if not usable:
            return  # closes nothing: keeps its place until the open channels change
        peer = next((p for p in usable if p not in self._tried), usable[0])
        self._queued, self._peer = False, peer  # before send: the answer may come inside it
        try:
            rid = offer.send(peer, self.message, min(self._attempt_timeout_s, left), receiver=self)
        except BaseException:
            self._queued, self._peer = True, None
            raise
        if self._peer == peer:
            self._rid = rid
        self._tried.add(peer)

    def recheck(self) -> None:
        """Waiting, and no peer can serve it any more: end now with "no_match" (the scheduler makes no
        offer while no channel is open anywhere, so whoever changes the peers calls this)."""
        if self.outcome is None and self._queued and not self._candidates():
            self._finish("no_match")

    def cancel(self) -> None:
        """End it now (outcome "cancelled"): withdrawn if it waits, its attempt in flight failed (which
        frees the channel)."""
        if self.outcome is not None:
            return
        if self._rid is not None and self._scheduler.fail(self._rid, FailureReason.CANCELLED):
            return
        self._finish("cancelled")

    def on_discard(self) -> None:
        self._queued = False
        self._finish("shutdown")

    def on_reply(self, request_id: int, reply: Any) -> None:
        if self.outcome is None and self._on_reply is not None:
            self._on_reply(reply)

    def on_success(self, request_id: int, reply: Any) -> None:
        peer, self._peer, self._rid = self._peer, None, None
        if peer is not None:
            status = "error" if isinstance(reply, PeerError) else "ok"
            self._attempts.append((peer, status))
            self._finish(status, peer if status == "ok" else None, reply)

    def on_failure(self, request_id: int, reason: FailureReason) -> None:
        peer, self._peer = self._peer, None
        if peer is not None:
            self._attempts.append((peer, FailureReason(reason).value))
            self._rid = None
            if reason in (FailureReason.SHUTDOWN, FailureReason.CANCELLED):
                self._finish(FailureReason(reason).value)
            elif not self._candidates() or set(self._candidates()) - self._tried:
                self._schedule()  # a failover to a peer not tried yet (or no_match at once: none left)
            else:  # every candidate failed it once: try again, but not faster than the back-off
                left = self.deadline_s - self._now()
                self._backoff_s = min(self._backoff_s * 2, RETRY_BACKOFF_MAX_S) if self._backoff_s else \
                    RETRY_BACKOFF_S
                if left <= self._backoff_s:
                    self._finish("timeout")
                else:
                    self._retry_timer = self._scheduler.timers.call_later(self._backoff_s, self._retry)
                    self._arm_deadline()

    def _retry(self) -> None:
        self._retry_timer = None
        if self.outcome is None:
            self._schedule()
