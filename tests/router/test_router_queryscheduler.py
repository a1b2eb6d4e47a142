"""router/queryscheduler.py: the peer message scheduler and RetryingRequest, on a fake clock.

Every test drives the scheduler through its public API with a manual clock
(``FakeTimers``) and a recording transmit; receivers fail the test if they
ever hear a second terminal callback for the same request.
"""
from __future__ import annotations

import heapq
import itertools
import random
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest

from router.queryscheduler import (FailureReason, MessageScheduler, Offer, OfferError, Outcome, PeerError,
                                   RetryingRequest)

TIMEOUT, DISCONNECT, SHUTDOWN = FailureReason.TIMEOUT, FailureReason.DISCONNECT, FailureReason.SHUTDOWN


# ------------------------------------------------------------------ fakes

class FakeHandle:
    def __init__(self, when: float, seq: int, callback: Callable[[], None]) -> None:
        self.when, self.seq, self.callback, self.cancelled = when, seq, callback, False

    def __lt__(self, other: "FakeHandle") -> bool:
        return (self.when, self.seq) < (other.when, other.seq)

    def cancel(self) -> None:
        self.cancelled = True


class FakeTimers:
    """A manual clock: ``advance`` fires due timers in order, setting ``now`` to each one's time."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: List[FakeHandle] = []
        self._seq = itertools.count()
        self.delays: List[float] = []

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> FakeHandle:
        assert delay_s >= 0
        self.delays.append(delay_s)
        h = FakeHandle(self.now + delay_s, next(self._seq), callback)
        heapq.heappush(self._heap, h)
        return h

    def advance(self, dt: float) -> None:
        target = self.now + dt
        while self._heap and self._heap[0].when <= target:
            h = heapq.heappop(self._heap)
            if not h.cancelled:
                self.now = h.when
                h.callback()
        self.now = target

    def live(self) -> int:
        return sum(1 for h in self._heap if not h.cancelled)


class Recv:
    """A receiver that records everything and asserts one terminal callback per request."""

    def __init__(self, on_end: Optional[Callable[[int, str], None]] = None) -> None:
        self.replies: List[Tuple[int, Any]] = []
        self.ends: Dict[int, Tuple[str, Any]] = {}
        self.on_end = on_end

    def _end(self, rid: int, kind: str, value: Any) -> None:
        assert rid not in self.ends, f"second terminal callback for request {rid}: {kind} after {self.ends[rid]}"
        self.ends[rid] = (kind, value)
        if self.on_end:
            self.on_end(rid, kind)

    def on_reply(self, rid: int, reply: Any) -> None:
        assert rid not in self.ends
        self.replies.append((rid, reply))

    def on_success(self, rid: int, reply: Any) -> None:
        self._end(rid, "ok", reply)

    def on_failure(self, rid: int, reason: FailureReason) -> None:
        self._end(rid, "fail", reason)


class Snd:
    """A sender: sends up to ``want`` requests (or notifications) to peers in ``accept`` (None = any)."""

    def __init__(self, name: str, priority: int = 5, want: int = 1, accept: Optional[Sequence[str]] = None,
                 receiver: Optional[Recv] = None, timeout_s: float = 10.0, log: Optional[List[str]] = None,
                 notify: bool = False) -> None:
        self.name, self.priority, self.want, self.accept = name, priority, want, accept
        self.receiver = receiver if receiver is not None or notify else Recv()
        self.timeout_s, self.log = timeout_s, log
        self.offers: List[Tuple[int, List[str]]] = []
        self.sent: List[Tuple[str, int]] = []
        self.discarded = 0

    def on_offer(self, offer: Offer) -> None:
        self.offers.append((offer.size, offer.channels))
        assert len(self.offers) < 100, "offered again and again"
        if self.log is not None:
            self.log.append(self.name)
        for peer in offer.channels:
            if len(self.sent) >= self.want or offer.sent >= offer.size:
                break
            if self.accept is None or peer in self.accept:
                self.sent.append((peer, offer.send(peer, self.name, self.timeout_s, self.receiver)))

    def on_discard(self) -> None:
        self.discarded += 1


def make(**peers: int) -> Tuple[MessageScheduler, FakeTimers, List[Tuple[str, int, Any]]]:
    timers = FakeTimers()
    wire: List[Tuple[str, int, Any]] = []
    s = MessageScheduler(timers, lambda peer, rid, msg: wire.append((peer, rid, msg)))
    for name, n in peers.items():
        s.add_peer(name, n)
    return s, timers, wire


# ------------------------------------------------------------------ offers

def test_offer_size_is_one_while_several_senders_wait():
    s, _, wire = make()
    a, b, c = Snd("a", want=5), Snd("b", want=5), Snd("c", want=5)
    for x in (a, b, c):
        s.schedule(x)
    assert s.waiting_senders() == 3 and wire == []
    s.add_peer("p", 2)
    assert a.offers == [(1, ["p", "p"])] and len(a.sent) == 1
    assert b.offers == [(1, ["p"])] and len(b.sent) == 1
    assert c.offers == []  # nothing left to offer
    assert s.outstanding("p") == 2 and s.open_channels("p") == 0 and s.waiting_senders() == 1


def test_offer_size_is_all_channels_with_one_sender():
    s, _, wire = make(p=2, q=1)
    x = Snd("x", want=10)
    s.schedule(x)
    assert x.offers == [(3, ["p", "q", "p"])]
    assert [peer for peer, _ in x.sent] == ["p", "q", "p"]
    assert s.outstanding("p") == 2 and s.outstanding("q") == 1 and s.waiting_senders() == 0
    assert [w[0] for w in wire] == ["p", "q", "p"]


def test_offer_misuse_raises():
    s, _, wire = make(p=1, q=1)
    errors: List[str] = []
    kept: List[Offer] = []

    class Greedy:
        priority = 1

        def on_offer(self, offer: Offer) -> None:
            kept.append(offer)
            with pytest.raises(OfferError, match="no open channel to peer 'zz'"):
                offer.send("zz", "m", 1.0)
            offer.send("p", "m", 1.0)
            with pytest.raises(OfferError, match="no open channel to peer 'p'"):
                offer.send("p", "m", 1.0)
            offer.send("q", "m", 1.0)
            with pytest.raises(OfferError, match="used up"):
                offer.send("q", "m", 1.0)
            errors.append("checked")

        def on_discard(self) -> None: ...

    s.schedule(Greedy())
    assert errors == ["checked"] and len(wire) == 2
    s.add_peer("r", 1)
    with pytest.raises(OfferError, match="expired"):
        kept[0].send("r", "m", 1.0)
    assert s.outstanding("r") == 0


def test_size_one_offer_rejects_a_second_send():
    s, _, _ = make()
    s.schedule(Snd("blocker", accept=["nowhere"]))
    seen: List[str] = []

    class Two:
        priority = 5

        def on_offer(self, offer: Offer) -> None:
            assert offer.size == 1 and offer.channels == ["p", "p"]
            offer.send("p", "m", 1.0)
            with pytest.raises(OfferError):
                offer.send("p", "m", 1.0)
            seen.append("ok")

        def on_discard(self) -> None: ...

    s.schedule(Two())
    s.add_peer("p", 2)
    assert seen == ["ok"] and s.outstanding("p") == 1


def test_priority_order_and_fifo_within_a_priority():
    s, _, _ = make()
    log: List[str] = []
    for name, prio in (("low1", 5), ("low2", 5), ("urgent", 1), ("low3", 5), ("mid", 3)):
        s.schedule(Snd(name, priority=prio, log=log))
    s.add_peer("p", 1)
    assert log == ["urgent"]
    rids = iter(range(1, 100))
    for _ in range(4):
        assert s.complete(next(rids))
    assert log == ["urgent", "mid", "low1", "low2", "low3"]


def test_priority_order_within_one_round_of_offers():
    s, _, _ = make()
    log: List[str] = []
    for name, prio in (("b", 4), ("c", 4), ("a", 0)):
        s.schedule(Snd(name, priority=prio, log=log))
    s.add_peer("p", 3)
    assert log == ["a", "b", "c"]


def test_sender_that_closes_nothing_keeps_its_place_and_is_not_reoffered_the_same_set():
    s, _, _ = make(a=2)
    picky = Snd("picky", accept=["b"])
    s.schedule(picky)
    assert picky.offers == [(2, ["a", "a"])] and s.waiting_senders() == 1
    picky2 = Snd("picky2", accept=["b"])
    s.schedule(picky2)  # a new offer round: the unchanged set is not offered to picky again
    assert len(picky.offers) == 1 and picky2.offers == [(1, ["a", "a"])]
    taker = Snd("taker")
    s.schedule(taker)
    assert taker.sent and len(picky.offers) == 1  # a shrinking set is no new offer either
    s.add_peer("b", 1)  # the set changed: picky, still first in line, is offered again and takes b
    assert picky.offers[-1] == (1, ["a", "b"]) and picky.sent[0][0] == "b"
    assert picky2.offers[-1] == (1, ["a"]) and picky2.sent == []  # b already taken
    assert s.waiting_senders() == 1


def test_declined_sender_is_reoffered_when_a_channel_reopens():
    s, _, _ = make(a=1, b=1)
    first = Snd("first", accept=["b"])
    s.schedule(first)
    (_, rid), = first.sent
    waiter = Snd("waiter", accept=["b"])
    s.schedule(waiter)
    assert waiter.offers == [(1, ["a"])] and waiter.sent == []
    assert s.complete(rid)
    assert waiter.offers[-1] == (2, ["a", "b"]) and waiter.sent[0][0] == "b"
    assert s.waiting_senders() == 0


# ------------------------------------------------------------------ timeouts, late responses, notifications

def test_timeout_fails_the_receiver_once_and_reopens_the_channel():
    s, t, _ = make(p=1)
    r = Recv()
    x = Snd("x", receiver=r, timeout_s=2.0)
    s.schedule(x)
    (_, rid), = x.sent
    t.advance(1.9)
    assert r.ends == {} and s.open_channels("p") == 0
    t.advance(0.1)
    assert r.ends == {rid: ("fail", TIMEOUT)} and s.open_channels("p") == 1 and s.outstanding("p") == 0
    t.advance(100)
    assert len(r.ends) == 1


def test_complete_with_a_last_reply_delivers_it_first_then_ends():
    s, t, wire = make(a=1)
    log = []
    r = Recv(on_end=lambda rid, kind: log.append(("end", kind)))
    snd = Snd("one", receiver=r)
    s.schedule(snd)
    (_, rid), = snd.sent
    assert s.reply(rid, "r1")
    assert s.complete(rid, "final", last="r2")
    assert r.replies == [(rid, "r1"), (rid, "r2")] and r.ends[rid] == ("ok", "final") and log == [("end", "ok")]
    assert s.open_channels("a") == 1 and t.live() == 0
    assert not s.complete(rid, "again", last="r3") and r.replies[-1] == (rid, "r2")  # ended: nothing more
    snd2 = Snd("two", receiver=r)
    s.schedule(snd2)
    (_, rid2), = snd2.sent
    assert s.complete(rid2, "final", last=None)  # None is a reply too (only the default means "none came")
    assert r.replies[-1] == (rid2, None) and r.ends[rid2] == ("ok", "final")


def test_complete_with_a_last_reply_ends_the_request_even_if_the_reply_handler_raises():
    s, t, wire = make(a=1)

    class Raising(Recv):
        def on_reply(self, rid: int, reply: Any) -> None:
            raise ValueError("handler broke")
    r = Raising()
    snd = Snd("one", receiver=r)
    s.schedule(snd)
    (_, rid), = snd.sent
    with pytest.raises(ValueError, match="handler broke"):
        s.complete(rid, "final", last="r")
    assert r.ends[rid] == ("ok", "final") and s.open_channels("a") == 1 and t.live() == 0


def test_late_complete_after_timeout_is_ignored():
    s, t, _ = make(p=1)
    r = Recv()
    x = Snd("x", receiver=r, timeout_s=1.0)
    s.schedule(x)
    (_, rid), = x.sent
    t.advance(1.0)
    assert r.ends == {rid: ("fail", TIMEOUT)}
    assert s.complete(rid, "late") is False
    assert s.reply(rid, "late part") is False
    assert s.fail(rid, DISCONNECT) is False
    assert r.ends == {rid: ("fail", TIMEOUT)} and r.replies == []
    assert s.outstanding("p") == 0 and s.open_channels("p") == 1


def test_replies_then_complete_then_nothing():
    s, t, _ = make(p=1)
    r = Recv()
    x = Snd("x", receiver=r, timeout_s=5.0)
    s.schedule(x)
    (_, rid), = x.sent
    assert s.reply(rid, "part1") and s.reply(rid, "part2")
    assert s.complete(rid, "final") is True
    assert r.replies == [(rid, "part1"), (rid, "part2")] and r.ends == {rid: ("ok", "final")}
    assert s.complete(rid) is False and s.complete(9999) is False
    t.advance(10)  # its timer was cancelled
    assert r.ends == {rid: ("ok", "final")} and t.live() == 0


def test_notification_timeout_limits_the_rate():
    s, t, wire = make(p=1)

    class Notifier:
        """Sends one notification per offer and reschedules itself until it has sent ``n``."""
        priority = 5

        def __init__(self, n: int) -> None:
            self.left = n

        def on_offer(self, offer: Offer) -> None:
            rid = offer.send("p", "note", 1.0)
            assert s.complete(rid) is False and s.fail(rid, TIMEOUT) is False  # not a request
            self.left -= 1
            if self.left:
                s.schedule(self)

        def on_discard(self) -> None: ...

    s.schedule(Notifier(5))
    counts = []
    for _ in range(6):
        counts.append(len(wire))
        assert s.outstanding("p") <= 1
        t.advance(1.0)
    assert counts == [1, 2, 3, 4, 5, 5]
    assert s.waiting_senders() == 0 and s.open_channels("p") == 1


def test_failed_transmit_leaves_no_trace():
    timers = FakeTimers()

    def boom(peer: str, rid: int, msg: Any) -> None:
        raise ConnectionError("socket closed")

    s = MessageScheduler(timers, boom)
    s.add_peer("p", 1)
    x = Snd("x")
    with pytest.raises(ConnectionError):
        s.schedule(x)
    assert s.outstanding("p") == 0 and s.open_channels("p") == 1 and timers.live() == 0
    assert s.waiting_senders() == 1  # it closed nothing, so it keeps its place


# ------------------------------------------------------------------ peers

def test_remove_peer_fails_outstanding_receivers_with_disconnect():
    s, t, _ = make(a=2, b=1)
    r = Recv()
    x = Snd("x", want=3, receiver=r, timeout_s=5.0)
    s.schedule(x)
    by_peer = {}
    for peer, rid in x.sent:
        by_peer.setdefault(peer, []).append(rid)
    s.remove_peer("a")
    assert r.ends == {rid: ("fail", DISCONNECT) for rid in by_peer["a"]}
    assert s.peers() == {"b": 1} and s.outstanding("a") == 0 and s.open_channels("a") == 0
    assert all(s.complete(rid) is False for rid in by_peer["a"])
    t.advance(10)  # the removed requests' timers do not fire; b's request times out
    assert r.ends[by_peer["b"][0]] == ("fail", TIMEOUT) and len(r.ends) == 3
    s.remove_peer("nobody")  # unknown: nothing happens


def test_add_peer_validates_and_changes_capacity():
    s, _, _ = make(p=3)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            s.add_peer("q", bad)
    x = Snd("x", want=3)
    s.schedule(x)
    rids = [rid for _, rid in x.sent]
    s.add_peer("p", 1)  # shrink below what is outstanding: nothing is cancelled, nothing reopens
    assert s.peers() == {"p": 1} and s.outstanding("p") == 3 and s.open_channels("p") == 0
    waiting = Snd("waiting")
    s.schedule(waiting)
    s.complete(rids[0])
    s.complete(rids[1])
    assert waiting.offers == [] and s.open_channels("p") == 0
    s.complete(rids[2])
    assert len(waiting.sent) == 1 and s.outstanding("p") == 1
    more = Snd("more", want=5)
    s.schedule(more)
    assert more.sent == []
    s.add_peer("p", 4)  # grow: three channels open and are offered at once
    assert len(more.sent) == 3 and s.outstanding("p") == 4


# ------------------------------------------------------------------ invariants under random operations

class RandomSender:
    """Sends ``want`` messages in total to peers in ``accept`` (None = any), 20% of them notifications;
    after an offer it used, it schedules a continuation for the rest (from inside on_offer)."""

    def __init__(self, world: "World", want: int, accept: Optional[List[str]]) -> None:
        self.world, self.want, self.accept = world, want, accept
        self.priority = world.rng.randint(0, 7)
        self.done = self.sent_any = False
        self.offered = 0
        world.senders.append(self)
        world.scheduler.schedule(self)

    def on_offer(self, offer: Offer) -> None:
        w = self.world
        assert not self.done and 1 <= offer.size <= len(offer.channels)
        self.offered += 1
        assert self.offered < 100, "offered again and again"
        sent = 0
        for peer in offer.channels:
            if sent == min(self.want, offer.size):
                break
            if self.accept is None or peer in self.accept:
                notify = w.rng.random() < 0.2
                rid = offer.send(peer, "m", w.rng.choice([0.5, 1.0, 3.0]), None if notify else w.recv)
                (w.notes if notify else w.requests)[rid] = peer
                sent += 1
        if self.accept is None:
            assert sent >= 1  # an offer is never empty, so a sender that takes any peer always sends
        if sent:
            self.done = self.sent_any = True
            if self.want > sent:
                RandomSender(w, self.want - sent, self.accept)

    def on_discard(self) -> None:
        assert not self.done
        self.done = True
        self.world.discarded += 1


class World:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.timers = FakeTimers()
        self.scheduler = MessageScheduler(self.timers, self.transmit)
        self.recv = Recv()
        self.senders: List[RandomSender] = []
        self.requests: Dict[int, str] = {}  # request id -> peer
        self.notes: Dict[int, str] = {}
        self.discarded = 0

    def transmit(self, peer: str, rid: int, msg: Any) -> None:
        s = self.scheduler
        assert s.outstanding(peer) <= s.peers()[peer]  # counts this message already
        assert rid not in self.requests and rid not in self.notes and rid > max([0, *self.requests, *self.notes])

    def live_requests(self) -> List[int]:
        return [rid for rid in self.requests if rid not in self.recv.ends]


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_operations_keep_channel_accounting(seed: int):
    w = World(seed)
    s, rng = w.scheduler, w.rng
    names = ["p0", "p1", "p2", "p3"]
    for _ in range(600):
        op = rng.random()
        if op < 0.35:
            RandomSender(w, rng.randint(1, 4), None if rng.random() < 0.7 else rng.sample(names, rng.randint(1, 2)))
        elif op < 0.55 and w.live_requests():
            rid = rng.choice(w.live_requests())
            if rng.random() < 0.3:
                assert s.reply(rid, "part") is True
            assert (s.complete(rid) if rng.random() < 0.8 else s.fail(rid, DISCONNECT)) is True
            assert s.complete(rid) is False  # a second end is refused
        elif op < 0.75:
            w.timers.advance(rng.choice([0.25, 0.5, 1.0]))
        elif op < 0.85:
            s.remove_peer(rng.choice(names))
        else:
            name = rng.choice(names)
            s.add_peer(name, max(s.peers().get(name, 1), rng.randint(1, 3)))  # never shrinks here
        peers = s.peers()
        assert set(peers) <= set(names)
        for name, channels in peers.items():
            assert 0 <= s.outstanding(name) <= channels
            assert s.open_channels(name) == channels - s.outstanding(name)
        # every request still running is counted against its peer
        for name in names:
            assert sum(1 for rid in w.live_requests() if w.requests[rid] == name) <= s.outstanding(name)
        # work conservation: no waiting sender would take a channel that is open
        waiting = [x for x in w.senders if not x.done]
        assert s.waiting_senders() == len(waiting)
        open_peers = {n for n in peers if s.open_channels(n)}
        assert not any(open_peers & set(names if x.accept is None else x.accept) for x in waiting)
    assert len(w.requests) > 100 and len(w.recv.ends) > 50 and len(w.notes) > 20
    assert {v for _, v in w.recv.ends.values()} >= {TIMEOUT, DISCONNECT, None}  # complete() passes None
    s.stop()
    assert set(w.recv.ends) == set(w.requests)  # exactly one end each (Recv asserts "at most one")
    assert all(x.done for x in w.senders) and w.discarded == sum(1 for x in w.senders if not x.sent_any) > 0
    assert s.waiting_senders() == 0 and w.timers.live() == 0
    assert all(s.outstanding(n) == 0 for n in names)


# ------------------------------------------------------------------ stop

def test_stop_fails_receivers_discards_senders_and_later_schedules():
    s, t, wire = make(p=2)
    r = Recv()
    x = Snd("x", want=2, receiver=r)
    s.schedule(x)
    rids = [rid for _, rid in x.sent]
    w1, w2 = Snd("w1"), Snd("w2", accept=["q"])
    s.schedule(w1)
    s.schedule(w2)
    assert s.waiting_senders() == 2
    s.stop()
    assert r.ends == {rid: ("fail", SHUTDOWN) for rid in rids}
    assert (w1.discarded, w2.discarded) == (1, 1) and w1.offers == [] and s.waiting_senders() == 0
    assert t.live() == 0 and s.outstanding("p") == 0
    assert all(s.complete(rid) is False for rid in rids)
    later = Snd("later")
    s.schedule(later)
    assert later.discarded == 1 and later.offers == []
    s.add_peer("q", 3)
    s.stop()
    t.advance(100)
    assert len(r.ends) == 2 and (w1.discarded, w2.discarded) == (1, 1) and len(wire) == 2


def test_stop_inside_on_offer():
    s, _, wire = make(p=2)
    calls: List[str] = []

    class Stopper:
        priority = 1

        def on_offer(self, offer: Offer) -> None:
            calls.append("offer")
            s.stop()
            assert calls == ["offer"]  # not discarded while its on_offer runs
            with pytest.raises(OfferError, match="stopped"):
                offer.send("p", "m", 1.0)

        def on_discard(self) -> None:
            calls.append("discard")

    s.schedule(Stopper())
    assert calls == ["offer", "discard"] and wire == [] and s.waiting_senders() == 0


# ------------------------------------------------------------------ re-entrancy

def test_reentrant_schedule_from_on_offer_never_double_offers():
    s, _, wire = make(p=2, q=1)
    depth = [0, 0]  # current, max

    class Chain:
        """Takes one channel per offer and schedules a continuation from inside on_offer."""
        priority = 3

        def __init__(self, left: int) -> None:
            self.left = left

        def on_offer(self, offer: Offer) -> None:
            depth[0] += 1
            depth[1] = max(depth)
            offer.send(offer.channels[0], "c", 5.0, Recv())
            if self.left > 1:
                s.schedule(Chain(self.left - 1))
            depth[0] -= 1

        def on_discard(self) -> None: ...

    s.schedule(Chain(10))
    assert depth[1] == 1  # offers never nest
    assert sorted(w[0] for w in wire) == ["p", "p", "q"]
    assert len({w[1] for w in wire}) == 3 and s.waiting_senders() == 1
    assert s.outstanding("p") == 2 and s.outstanding("q") == 1


def test_reentrant_schedule_from_receiver_callbacks():
    s, t, wire = make(p=1)
    inside = [False]
    offers_inside_callback: List[bool] = []
    log: List[str] = []

    class Watch(Snd):
        def on_offer(self, offer: Offer) -> None:
            offers_inside_callback.append(inside[0])
            super().on_offer(offer)

    def on_end(rid: int, kind: str) -> None:
        inside[0] = True
        log.append(f"{kind}:{rid}")
        s.schedule(Watch(f"after-{rid}", receiver=r, timeout_s=1.0))
        inside[0] = False

    r = Recv(on_end=on_end)

    class Replier(Recv):
        def on_reply(self, rid: int, reply: Any) -> None:
            super().on_reply(rid, reply)
            s.schedule(Watch("from-reply", accept=["p"], receiver=r, timeout_s=1.0))
            s.complete(rid, "done-in-reply")  # ending the request from its own on_reply

    s.schedule(Watch("first", receiver=Replier(), timeout_s=1.0))
    assert s.reply(1, "part")
    assert wire[-1][2] == "from-reply" and s.outstanding("p") == 1
    t.advance(1.0)  # from-reply times out -> on_failure schedules after-2 -> offered after the callback
    assert log == ["fail:2"] and wire[-1][2] == "after-2"
    s.complete(3)  # on_success schedules after-3
    assert log == ["fail:2", "ok:3"] and wire[-1][2] == "after-3"
    assert offers_inside_callback and not any(offers_inside_callback)
    assert s.outstanding("p") == 1


def test_loopback_transmit_completing_synchronously():
    timers = FakeTimers()
    sched: List[MessageScheduler] = []
    sent: List[str] = []

    def loopback(peer: str, rid: int, msg: Any) -> None:
        sent.append(peer)
        assert sched[0].outstanding(peer) <= sched[0].peers()[peer]
        sched[0].complete(rid, "echo")  # the response arrives before send returns

    s = MessageScheduler(timers, loopback)
    sched.append(s)
    s.add_peer("p", 1)
    r = Recv()
    offers: List[List[str]] = []

    class Many:
        priority = 0

        def __init__(self, left: int) -> None:
            self.left = left

        def on_offer(self, offer: Offer) -> None:
            offers.append(offer.channels)
            offer.send("p", "m", 1.0, r)
            assert offer.channels == []  # the reopened channel is a new offer, not this one
            if self.left > 1:
                s.schedule(Many(self.left - 1))

        def on_discard(self) -> None: ...

    s.schedule(Many(4))
    assert sent == ["p"] * 4 and offers == [["p"]] * 4
    assert [v for v in r.ends.values()] == [("ok", "echo")] * 4 and s.open_channels("p") == 1


# ------------------------------------------------------------------ RetryingRequest

class CountingRequest(RetryingRequest):
    """A RetryingRequest that fails the test if it is offered without end."""
    offered = 0

    def on_offer(self, offer: Offer) -> None:
        self.offered += 1
        assert self.offered < 100, "offered again and again"
        super().on_offer(offer)


def retrying(s: MessageScheduler, t: FakeTimers, candidates: Callable[[], Sequence[str]], *, deadline_s: float = 10.0,
             attempt_timeout_s: float = 1.0, priority: int = 5) -> Tuple[RetryingRequest, List[Tuple[float, Outcome]]]:
    done: List[Tuple[float, Outcome]] = []
    req = CountingRequest(s, "query", priority=priority, deadline_s=deadline_s, attempt_timeout_s=attempt_timeout_s,
                          candidates=candidates, now=lambda: t.now, on_done=lambda o: done.append((t.now, o)))
    return req, done


def test_retrying_request_retries_on_another_peer_after_timeout():
    s, t, wire = make(a=1, b=1)
    _, done = retrying(s, t, lambda: ["a", "b"])
    assert [w[0] for w in wire] == ["a"]
    t.advance(1.0)
    assert [w[0] for w in wire] == ["a", "b"]  # b is untried, although a is the better candidate
    assert s.complete(wire[-1][1], "data")
    (when, o), = done
    assert (o.status, o.served_by, o.attempts, o.retries, o.reply) == (
        "ok", "b", [("a", "timeout"), ("b", "ok")], 1, "data")
    assert when == 1.0 and s.waiting_senders() == 0 and t.live() == 0


def test_retrying_request_retries_after_disconnect():
    s, t, wire = make(a=1, b=1)
    peers = ["a", "b"]
    _, done = retrying(s, t, lambda: [p for p in peers if p in s.peers()])
    s.remove_peer("a")
    assert [w[0] for w in wire] == ["a", "b"]
    s.complete(wire[-1][1], "x")
    (_, o), = done
    assert o.status == "ok" and o.attempts == [("a", "disconnect"), ("b", "ok")] and o.retries == 1


def test_retrying_request_stays_within_its_deadline():
    s, t, wire = make(a=1, b=1)
    _, done = retrying(s, t, lambda: ["a", "b"], deadline_s=2.5, attempt_timeout_s=1.0)
    t.advance(10)
    (when, o), = done
    assert o.status == "timeout" and when == 2.5
    assert o.attempts == [("a", "timeout"), ("b", "timeout"), ("a", "timeout")] and o.retries == 2
    assert [w[0] for w in wire] == ["a", "b", "a"]  # a failed peer is tried again when nothing untried is offered
    # every candidate failed once: the next try waits the back-off (50 ms), then has what is left
    assert max(t.delays) <= 2.5 and 0.05 in t.delays and t.delays[-1] == pytest.approx(0.45)
    assert t.live() == 0 and s.outstanding("a") == 0


def test_a_request_sent_at_once_sets_one_timer_and_only_a_waiting_one_a_deadline_timer():
    s, t, wire = make(a=1)
    _, done = retrying(s, t, lambda: ["a"], deadline_s=3.0, attempt_timeout_s=5.0)
    assert len(wire) == 1 and t.delays == [3.0]  # the attempt's timeout (capped by the deadline), nothing more
    _, waiting = retrying(s, t, lambda: ["a"], deadline_s=2.0)
    assert len(wire) == 1 and t.delays == [3.0, 2.0]  # queued: its deadline has a timer
    t.advance(2.0)
    assert [o.status for _, o in waiting] == ["timeout"] and done == []
    s.complete(wire[0][1], "r")
    assert [o.status for _, o in done] == ["ok"] and t.live() == 0


def test_a_request_whose_offer_raised_stays_queued_and_still_ends_at_its_deadline():
    timers = FakeTimers()
    sent: List[str] = []

    def transmit(peer: str, rid: int, msg: Any) -> None:
        sent.append(peer)
        raise RuntimeError("cannot encode")
    s = MessageScheduler(timers, transmit)
    s.add_peer("a", 1)
    done: List[Outcome] = []
    with pytest.raises(RuntimeError, match="cannot encode"):
        CountingRequest(s, "query", priority=5, deadline_s=2.0, attempt_timeout_s=1.0, candidates=lambda: ["a"],
                        now=lambda: timers.now, on_done=done.append)
    assert sent == ["a"] and s.waiting_senders() == 1 and s.outstanding("a") == 0
    timers.advance(2.0)
    assert [o.status for o in done] == ["timeout"] and s.waiting_senders() == 0 and timers.live() == 0


def test_retrying_request_no_match_ends_at_once():
    s, t, wire = make(a=1)
    _, done = retrying(s, t, lambda: [])
    (when, o), = done
    assert (o.status, o.served_by, o.attempts, o.retries) == ("no_match", None, [], 0)
    assert wire == [] and s.waiting_senders() == 0 and t.live() == 0


def test_retrying_request_no_match_when_candidates_vanish_after_failure():
    s, t, wire = make(a=1)
    cands = ["a"]
    _, done = retrying(s, t, lambda: list(cands))
    cands.clear()
    t.advance(1.0)
    (_, o), = done
    assert o.status == "no_match" and o.attempts == [("a", "timeout")] and t.live() == 0


def test_retrying_request_times_out_while_queued():
    s, t, wire = make(a=1)
    blocker = Snd("blocker", timeout_s=100.0)
    s.schedule(blocker)
    _, done = retrying(s, t, lambda: ["a"], deadline_s=3.0)
    assert s.waiting_senders() == 1 and done == []
    t.advance(2.9)
    assert done == []
    t.advance(0.1)
    (when, o), = done
    assert o.status == "timeout" and when == 3.0 and o.attempts == []
    assert s.waiting_senders() == 0  # withdrawn from the queue
    s.complete(blocker.sent[0][1])
    assert len(wire) == 1 and s.open_channels("a") == 1  # the freed channel is not offered to it


def test_retrying_request_waits_for_a_candidate_channel_and_keeps_its_place():
    s, t, wire = make(a=1, b=1)
    blocker = Snd("blocker", accept=["b"], timeout_s=100.0)
    s.schedule(blocker)
    _, done = retrying(s, t, lambda: ["b"])
    assert len(wire) == 1 and s.waiting_senders() == 1  # offered only a: closed nothing
    t.advance(2.0)
    s.complete(blocker.sent[0][1])
    assert [w[0] for w in wire] == ["b", "b"]
    s.complete(wire[-1][1], "r")
    assert done[0][1].status == "ok" and done[0][1].served_by == "b"


def test_retrying_request_peer_error_ends_without_retry():
    s, t, wire = make(a=1, b=1)
    replies: List[Any] = []
    done: List[Outcome] = []
    RetryingRequest(s, "q", priority=2, deadline_s=10, attempt_timeout_s=1, candidates=lambda: ["a", "b"],
                    now=lambda: t.now, on_done=done.append, on_reply=replies.append)
    s.reply(wire[0][1], "partial")
    s.complete(wire[0][1], PeerError("not found"))
    assert len(wire) == 1 and replies == ["partial"]
    o, = done
    assert (o.status, o.served_by, o.attempts, o.retries) == ("error", None, [("a", "error")], 0)
    assert o.reply == PeerError("not found") and s.open_channels("a") == 1 and t.live() == 0


def test_retrying_request_shutdown_in_flight_and_queued():
    s, t, wire = make(a=1)
    _, done1 = retrying(s, t, lambda: ["a"])
    _, done2 = retrying(s, t, lambda: ["a"])
    assert len(wire) == 1 and s.waiting_senders() == 1
    s.stop()
    assert done1[0][1].status == "shutdown" and done1[0][1].attempts == [("a", "shutdown")]
    assert done2[0][1].status == "shutdown" and done2[0][1].attempts == []
    t.advance(100)
    assert len(done1) == len(done2) == 1 and t.live() == 0
    _, done3 = retrying(s, t, lambda: ["a"], deadline_s=t.now + 10)
    assert done3[0][1].status == "shutdown"


def test_a_peer_that_fails_every_attempt_at_once_is_retried_with_a_back_off_not_a_spin():
    """A serving router with no route to it answers 'failed' at once; without a back-off the request
    re-sent itself at event-loop speed (10 144 attempts in 200 ms in a review)."""
    timers = FakeTimers()
    holder: List[MessageScheduler] = []
    s = MessageScheduler(timers, lambda peer, rid, msg: timers.call_later(0, lambda: holder[0].fail(
        rid, FailureReason.DISCONNECT)))
    holder.append(s)
    s.add_peer("a", 1)
    _, done = retrying(s, timers, lambda: ["a"], deadline_s=2.0)
    timers.advance(3.0)
    (when, o), = done
    assert o.status == "timeout" and when <= 2.0
    # back-off 50, 100, 200, 400, 800 ms: at most 6 attempts in 2 s
    assert 3 <= len(o.attempts) <= 6 and all(r == "disconnect" for _, r in o.attempts)


def test_a_queued_request_whose_only_peer_goes_away_ends_no_match_at_once():
    s, t, wire = make(a=1)
    blocker = Snd("blocker", timeout_s=100.0)
    s.schedule(blocker)  # a's only channel is taken: the request waits in the queue
    peers = ["a"]
    req, done = retrying(s, t, lambda: list(peers), deadline_s=30.0)
    assert done == [] and s.waiting_senders() == 1
    peers.clear()
    s.remove_peer("a")
    req.recheck()
    (when, o), = done
    assert o.status == "no_match" and when == 0.0 and s.waiting_senders() == 0


def test_cancel_withdraws_a_waiting_request_and_frees_the_channel_of_one_in_flight():
    s, t, wire = make(a=1)
    flying, done1 = retrying(s, t, lambda: ["a"])
    waiting, done2 = retrying(s, t, lambda: ["a"])
    assert s.outstanding("a") == 1 and s.waiting_senders() == 1
    waiting.cancel()
    assert done2[0][1].status == "cancelled" and s.waiting_senders() == 0
    flying.cancel()
    assert done1[0][1].status == "cancelled" and s.outstanding("a") == 0 and s.open_channels("a") == 1
    assert t.live() == 0
