"""Link schedulers driven through the real transmission pipeline (``try_push`` /
``pull``, as the router's reader and writer tasks call them), on a simulated
clock: every pulled frame occupies the link for ``len(frame) * 8 / rate``
seconds, so a window of the contention/polling scheduler holds as many frames
as a link of that rate would send in it.

Shares are checked from first principles: a backlogged priority's share of the
bytes is its weight divided by the sum of the weights of the backlogged
priorities.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict, Iterable, List, Tuple

import pytest

from router import codec
from router.config import ConfigError, PipelineConfig, config_from_dict
from router.pipeline import EMPTY, TransmissionPipeline
from router.scheduler import ContentionPollingScheduler, WeightedRoundRobinScheduler, make_scheduler

MSG_PAYLOAD = 1000
LINK_BPS = 10_000_000


def message(prio: int, size: int = MSG_PAYLOAD) -> Tuple[bytes, bytes]:
    m = codec.encode_message("s/k", b"x" * size, prio)
    return m[:12], m[12:]


class Link:
    """A pipeline whose writer sends on a link of ``LINK_BPS``, on a simulated clock."""

    def __init__(self, scheduler: str, weights=(8, 8, 8, 8, 4, 2, 1, 1), **cfg) -> None:
        # one message per batch (threshold 1): every frame is one queued batch
        self.pipe = TransmissionPipeline(PipelineConfig(
            queue_sizes=(4,) * 8, batch_size_bytes=4096, batch_threshold_bytes=1, scheduler=scheduler,
            wrr_weights=tuple(weights), **cfg))
        self.now_ns = 1_000_000_000_000

    def fill(self, prios: Iterable[int], sizes: Dict[int, int] = {}) -> None:
        """Keep the queues of ``prios`` full (backlogged)."""
        for p in prios:
            while self.pipe.try_push(p, False, *message(p, sizes.get(p, MSG_PAYLOAD)), self.now_ns):
                pass

    def send(self) -> Tuple[int, int, int]:
        """Pull one frame and let the link carry it: (priority, bytes, pull time)."""
        at = self.now_ns
        item = self.pipe.pull(at)
        assert item is not EMPTY and isinstance(item, tuple), item
        prio, frame, _ = item
        self.now_ns += len(frame) * 8 * 1_000_000_000 // LINK_BPS
        return prio, len(frame), at

    def run(self, frames: int, backlogged: Iterable[int], sizes: Dict[int, int] = {}) -> List[Tuple[int, int, int]]:
        out = []
        for _ in range(frames):
            self.fill(backlogged, sizes)
            out.append(self.send())
        return out


def byte_shares(sent: List[Tuple[int, int, int]]) -> Dict[int, float]:
    total = sum(n for _, n, _ in sent)
    by = Counter()
    for p, n, _ in sent:
        by[p] += n
    return {p: by[p] / total for p in by}


def assert_weighted(shares: Dict[int, float], weights: Dict[int, int], tolerance: float = 0.10) -> None:
    total_w = sum(weights.values())
    for p, w in weights.items():
        want = w / total_w
        got = shares.get(p, 0.0)
        assert abs(got - want) <= tolerance * want, f"priority {p}: share {got:.3f}, weight says {want:.3f} ({shares})"


# ------------------------------------------------------------------ wrr


def test_wrr_idle_priority_banks_no_credit_through_the_pipeline():
    """The issue's case: Data (5) sends 100 batches alone; one DataLow (6) batch then
    leaves alone (Data's queue was empty for a moment, so the pipeline asks the
    scheduler nothing); from then on both are backlogged.  DataLow must get its
    weighted share (weights 2 : 1), not every frame until it has caught up with
    the virtual time Data used alone."""
    link = Link("wrr")
    for _ in range(100):
        assert link.pipe.try_push(5, False, *message(5), link.now_ns)
        assert link.send()[0] == 5
    assert link.pipe.try_push(6, False, *message(6), link.now_ns)
    assert link.send()[0] == 6
    sent = link.run(60, backlogged=[5, 6])
    order = [p for p, _, _ in sent]
    longest_run_of_6 = max(len(r) for r in "".join(str(p) for p in order).split("5"))
    assert longest_run_of_6 <= 2, f"DataLow served {longest_run_of_6} times in a row: {order}"
    assert_weighted(byte_shares(sent), {5: 2, 6: 1})


def test_wrr_virtual_time_never_goes_back():
    s = WeightedRoundRobinScheduler([1] * 8)
    for _ in range(50):
        s.charge(5, 1000)
    before = s._virtual_now
    s.charge(6, 1000)  # a priority never served before, charged without choose()
    assert s._virtual_now >= before
    assert s.choose([5, 6]) == 5, "the newcomer starts at the current virtual time, not at 0"


@pytest.mark.parametrize("sizes", [{}, {4: 1000, 5: 1000, 6: 300}])
def test_wrr_shares_by_bytes_through_the_pipeline(sizes):
    weights = (1, 1, 1, 1, 1, 2, 4, 1)
    link = Link("wrr", weights)
    sent = link.run(2000, backlogged=[4, 5, 6], sizes=sizes)
    assert_weighted(byte_shares(sent), {4: 1, 5: 2, 6: 4}, tolerance=0.02)


def test_wrr_a_priority_joining_later_gets_its_share_from_then_on():
    weights = (1, 1, 1, 1, 1, 2, 4, 1)
    link = Link("wrr", weights)
    link.run(300, backlogged=[4, 5])
    # 6 was idle (no frame ever) while 4 and 5 shared the link
    sent = link.run(700, backlogged=[4, 5, 6])
    assert_weighted(byte_shares(sent[:70]), {4: 1, 5: 2, 6: 4}, tolerance=0.15)
    assert_weighted(byte_shares(sent), {4: 1, 5: 2, 6: 4}, tolerance=0.03)


# ------------------------------------------------------------------ contention / polling (the reference's scheduler)

CONTENTION_US, POLLING_US = 5_000, 20_000  # ~6 and ~25 frames of ~1 KB at 10 Mbit/s


def windows(link: Link, sent: List[Tuple[int, int, int]]) -> Dict[str, List[Tuple[int, int, int]]]:
    """The frames pulled in contention windows and in polling windows."""
    sched = link.pipe.scheduler
    assert isinstance(sched, ContentionPollingScheduler)
    out: Dict[str, List[Tuple[int, int, int]]] = {"contention": [], "polling": []}
    for frame in sent:
        out[sched.window(frame[2])].append(frame)
    return out


def cp_link(weights=(1, 1, 1, 1, 1, 2, 4, 1)) -> Link:
    return Link("contention_polling", weights, contention_window_us=CONTENTION_US, polling_window_us=POLLING_US)


def test_contention_polling_shares_follow_the_weights_in_the_polling_window():
    link = cp_link()
    sent = link.run(3000, backlogged=[4, 5, 6])
    by = windows(link, sent)
    assert len(by["polling"]) > 2000 and len(by["contention"]) > 400
    # polling windows: weighted virtual time, within 10% of the weights 1 : 2 : 4
    assert_weighted(byte_shares(by["polling"]), {4: 1, 5: 2, 6: 4})
    # ... and window by window, not only on average over the run
    cycle = (CONTENTION_US + POLLING_US) * 1000
    start = sent[0][2]
    per_window: Dict[int, List[Tuple[int, int, int]]] = {}
    for f in by["polling"]:
        per_window.setdefault((f[2] - start) // cycle, []).append(f)
    full = [frames for frames in per_window.values() if len(frames) >= 20]
    assert len(full) > 80
    for frames in full:
        assert_weighted(byte_shares(frames), {4: 1, 5: 2, 6: 4}, tolerance=0.35)


def test_contention_window_is_served_by_priority():
    link = cp_link()
    sent = link.run(3000, backlogged=[4, 5, 6])
    by = windows(link, sent)
    assert {p for p, _, _ in by["contention"]} == {4}, "the most urgent backlogged priority, always"
    # the link's time splits as the windows do: contention 5 ms of every 25 ms
    total = sum(n for _, n, _ in sent)
    contention_bytes = sum(n for _, n, _ in by["contention"])
    want = CONTENTION_US / (CONTENTION_US + POLLING_US)
    assert abs(contention_bytes / total - want) <= 0.1 * want
    # so over the whole run: 4 gets the contention windows plus 1/7 of the polling windows
    shares = byte_shares(sent)
    for p, w in ((4, 1), (5, 2), (6, 4)):
        expected = (want if p == 4 else 0.0) + (1 - want) * w / 7
        assert abs(shares[p] - expected) <= 0.1 * expected, (p, shares[p], expected)


def test_contention_window_lets_an_urgent_priority_overtake():
    """RealTime (1) arriving during a contention window leaves before the backlog of 4, 5 and 6."""
    link = cp_link()
    sched = link.pipe.scheduler
    for _ in range(5):
        while sched.window(link.now_ns) != "polling":
            link.run(1, backlogged=[4, 5, 6])
        while sched.window(link.now_ns) != "contention":
            link.run(1, backlogged=[4, 5, 6])
        link.fill([1])
        assert [p for p, _, _ in link.run(4, backlogged=[4, 5, 6])] == [1, 1, 1, 1]


def test_contention_polling_never_starves_the_lowest_priority():
    link = cp_link(weights=(1, 1, 1, 1, 1, 1, 1, 1))
    sent = link.run(2000, backlogged=[1, 7])
    by = windows(link, sent)
    assert_weighted(byte_shares(by["polling"]), {1: 1, 7: 1})
    assert {p for p, _, _ in by["contention"]} == {1}


def test_contention_polling_cycle_restarts_with_contention_after_idle():
    link = cp_link()
    link.run(40, backlogged=[4, 5, 6])
    while link.pipe.pull(link.now_ns) is not EMPTY:  # drain: the link runs out of work
        link.now_ns += 1_000_000
    link.now_ns += 7_000_000  # 7 ms later, whatever phase the old cycle would be in
    link.fill([4, 5, 6])
    first = [link.send()[0] for _ in range(4)]
    assert first == [4, 4, 4, 4], "a busy period starts with a contention window"


def test_contention_polling_config_and_construction():
    base = {"node": "r1", "client_listen": ["127.0.0.1:1"]}
    cfg = config_from_dict(dict(base, scheduler="contention_polling", contention_window_us=1000,
                                polling_window_us=4000, wrr_weights={"data": 3}))
    assert cfg.pipeline.scheduler == "contention_polling"
    assert (cfg.pipeline.contention_window_us, cfg.pipeline.polling_window_us) == (1000, 4000)
    s = TransmissionPipeline(cfg.pipeline).scheduler
    assert isinstance(s, ContentionPollingScheduler) and s.weights[5] == 3 and s.cycle_ns == 5_000_000
    defaults = config_from_dict(dict(base)).pipeline
    assert (defaults.contention_window_us, defaults.polling_window_us) == (20_000, 80_000)
    with pytest.raises(ConfigError, match="at least one"):
        config_from_dict(dict(base, contention_window_us=0, polling_window_us=0))
    with pytest.raises(ConfigError, match="contention_window_us"):
        config_from_dict(dict(base, contention_window_us=-1))
    with pytest.raises(ConfigError, match="contention_polling"):
        config_from_dict(dict(base, scheduler="fifo"))
    with pytest.raises(ValueError, match="unknown scheduler"):
        make_scheduler("fifo", [1] * 8)
    # a zero window degenerates to the other rule
    only_polling = make_scheduler("contention_polling", [1, 1, 1, 1, 1, 1, 1, 100], 0, 1000)
    assert only_polling.window(0) == "polling"
    only_contention = make_scheduler("contention_polling", [1] * 8, 1000, 0)
    assert only_contention.choose([3, 7], 123) == 3 and only_contention.window(5_000_000) == "contention"
