"""Statistics that verify netem's impairments from a sequenced one-way probe (pure: numbers in, verdicts out).

A probe sends datagrams ``0 .. sent-1`` in order; the receiver records ``(seq, arrival_ns, send_ns)`` per
datagram received, in the order of arrival (testbed.links.meter's ``recv``). A duplicate appears as a
repeated seq, a lost datagram never appears. From these records:

* one-way delay p50/p99/mean/standard deviation (:func:`delay_stats`; ``arrival - send``, which is the
  delay itself where the two ends share a clock and the delay plus a constant clock offset otherwise);
* the spread against the configured jitter (:func:`check_spread`) and a Kolmogorov–Smirnov test of the
  delays against netem's own distribution (:func:`check_distribution`);
* loss, plain (:func:`check_loss`) or Gilbert–Elliott (with :class:`GilbertElliottChain`, and the mean loss
  burst :func:`check_burst`); reorder (:func:`check_reorder`) and duplicate rates (:func:`check_duplicate`).

What netem does, read from the kernel (net/sched/sch_netem.c) and iproute2 (its man page and tables):

* **delay**: ``tabledist(mu, sigma)`` draws a 32-bit random ``rnd``; without a table (``distribution``
  not given, or ``uniform``) the delay is ``mu - sigma + rnd % (2 sigma)``; with one it is
  ``mu + sigma * table[rnd % size] / 8192`` (NETEM_DIST_SCALE), the table being iproute2's
  ``normal``/``pareto``/``paretonormal.dist`` (4096 entries each). A negative draw is sent at once (delay
  0). Packets leave in the order of their time to send, so jitter reorders. The reference distribution
  here is built from the same table, so the test is exact rather than against an idealised normal;
* **correlation** (``value = (1-rho) * rnd + rho * last``) narrows the distribution and makes draws
  dependent: neither the KS test nor the binomial bands hold then (the checks say so, :data:`CORRELATED`);
* **reorder** P with gap G (iproute2 sets G = 1 when none is given): after a datagram sent at once, the
  next G-1 are delayed; then each is sent at once (to the head of the queue) with probability P. The
  share sent at once is ``P / (1 + (G-1) P)``;
* **duplicate** d: the copy is enqueued at the root again, where loss applies to it once more;
  a datagram both duplicated and lost is sent once;
* **Gilbert–Elliott**: a two-state chain, good→bad with p, bad→good with r, loss probability
  ``loss_good`` (1-k) in the good state and ``loss_bad`` (1-h) in the bad one, the loss drawn in the
  state the datagram finds.

Every check returns a small frozen dataclass with ``passed`` and a one-line ``describe()``; bands are
±``sigmas`` standard errors (4 by default: a healthy link fails about once in 16,000 checks).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np

from runfolder import units

#: netem's scale of a distribution table's entries (include/uapi/linux/pkt_sched.h)
NETEM_DIST_SCALE = 8192
#: where iproute2 installs its distribution tables (Debian multiarch, then the upstream default)
DIST_DIRS = (Path("/usr/lib/x86_64-linux-gnu/tc"), Path("/usr/lib/aarch64-linux-gnu/tc"), Path("/usr/lib/tc"),
             Path("/usr/lib64/tc"), Path("/usr/share/tc"))
DISTRIBUTIONS = ("uniform", "normal", "pareto", "paretonormal")
#: the default width of every band, in standard errors
SIGMAS = 4.0
#: a reason the statistics do not hold, for checks that skip a correlated impairment
CORRELATED = "netem's correlated generator changes the distribution and makes draws dependent"

Record = tuple[int, int, int]  # (seq, arrival_ns, send_ns), as testbed.links.meter.parse_arrivals gives

#: a check's times, to the microsecond
_ms = partial(units.ms_text, spec=".3f")
#: a check's shares, to the thousandth of a percent
_pct = partial(units.percent_text, decimals=3)


# -- netem's delay distribution -----------------------------------------------------------

@lru_cache(maxsize=None)
def dist_table(name: str) -> np.ndarray:
    """iproute2's table for ``name`` (normal, pareto, paretonormal) as netem holds it (int16 entries)."""
    for folder in DIST_DIRS:
        path = folder / f"{name}.dist"
        if path.is_file():
            words = [w for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
                     for w in line.split()]
            return np.array([int(w) for w in words], dtype=np.int64)
    raise FileNotFoundError(f"netem's {name}.dist table is not in {', '.join(str(d) for d in DIST_DIRS)}: "
                            "install iproute2 (apt-get install iproute2)")


@dataclass(frozen=True)
class DelayModel:
    """One direction's netem delay: ``delay_ns`` ± ``jitter_ns`` drawn from ``distribution`` (None: uniform,
    what netem does when tc is given no distribution)."""

    delay_ns: float
    jitter_ns: float = 0.0
    distribution: Optional[str] = None

    def __post_init__(self) -> None:
        if self.kind not in DISTRIBUTIONS:
            raise ValueError(f"distribution {self.distribution!r} is not one of {', '.join(DISTRIBUTIONS)}")

    @property
    def kind(self) -> str:
        return self.distribution or "uniform"

    def draw(self, rnd: np.ndarray) -> np.ndarray:
        """The delays netem gives to 32-bit random numbers ``rnd`` (tabledist), before the clamp at 0."""
        rnd = np.asarray(rnd, dtype=np.uint64)
        sigma = int(round(self.jitter_ns))
        if sigma == 0:
            return np.full(rnd.shape, float(self.delay_ns))
        if self.kind == "uniform":
            return (rnd % (2 * sigma)).astype(np.float64) + self.delay_ns - sigma
        table = dist_table(self.kind)
        return self.delay_ns + sigma * table[(rnd % len(table)).astype(np.int64)] / NETEM_DIST_SCALE

    def support(self) -> np.ndarray:
        """Equally likely delays, sorted, clamped at 0: a table's 4096 entries, or for uniform 4096 evenly
        spaced quantiles."""
        if self.kind == "uniform":
            grid = (np.arange(4096) + 0.5) / 4096
            values = self.delay_ns - self.jitter_ns + 2 * self.jitter_ns * grid
        else:
            values = self.delay_ns + self.jitter_ns * dist_table(self.kind) / NETEM_DIST_SCALE
        return np.sort(np.maximum(0.0, values))

    def cdf(self, x: np.ndarray, *, strict: bool = False) -> np.ndarray:
        """P(delay <= x) of the delays netem gives (a negative draw counts as 0); P(delay < x) with ``strict``."""
        x = np.asarray(x, dtype=np.float64)
        if not self.jitter_ns:
            at = max(0.0, self.delay_ns)
            return ((x > at) if strict else (x >= at)).astype(np.float64)
        if self.kind == "uniform":
            low = self.delay_ns - self.jitter_ns
            inside = np.clip((x - low) / (2 * self.jitter_ns), 0.0, 1.0)
            return np.where((x < 0) | (strict & (x == 0)), 0.0, inside)
        values = self.support()
        return np.searchsorted(values, x, side="left" if strict else "right") / len(values)

    def moments(self) -> tuple[float, float, float]:
        """Mean, standard deviation and fourth central moment of the delays (clamped at 0)."""
        if not self.jitter_ns:
            return max(0.0, self.delay_ns), 0.0, 0.0
        values = self.support()
        mean = float(values.mean())
        centred = values - mean
        return mean, float(np.sqrt((centred ** 2).mean())), float((centred ** 4).mean())

    def median(self) -> float:
        if not self.jitter_ns:
            return max(0.0, self.delay_ns)
        return float(np.median(self.support()))

    def describe(self) -> str:
        if not self.jitter_ns:
            return f"delay {_ms(self.delay_ns)}"
        return f"delay {_ms(self.delay_ns)} jitter {_ms(self.jitter_ns)} {self.kind}"


# -- the probe's records ------------------------------------------------------------------

def first_arrivals(records: Iterable[Record]) -> list[Record]:
    """Each datagram's first arrival, in the order of arrival (a duplicate's second copy left out)."""
    seen: set[int] = set()
    out = []
    for rec in sorted(records, key=lambda r: r[1]):
        if rec[0] not in seen:
            seen.add(rec[0])
            out.append(rec)
    return out


def one_way_delays(records: Iterable[Record]) -> np.ndarray:
    """``arrival - send`` (ns) of each datagram's first arrival."""
    return np.array([a - s for _, a, s in first_arrivals(records)], dtype=np.float64)


@dataclass(frozen=True)
class DelayStats:
    n: int
    p50_ns: float
    p99_ns: float
    mean_ns: float
    std_ns: float

    def describe(self) -> str:
        return (f"one-way delay of {self.n}: p50 {_ms(self.p50_ns)}, p99 {_ms(self.p99_ns)}, "
                f"mean {_ms(self.mean_ns)}, sd {_ms(self.std_ns)}")


def delay_stats(delays: Sequence[float]) -> DelayStats:
    d = np.asarray(delays, dtype=np.float64)
    if not len(d):
        raise ValueError("no datagram arrived: no delay to describe")
    p50, p99 = np.percentile(d, [50, 99])
    return DelayStats(len(d), float(p50), float(p99), float(d.mean()), float(d.std(ddof=1)) if len(d) > 1 else 0.0)


@dataclass(frozen=True)
class DelayCheck:
    """The median one-way delay against the model's median."""

    measured_ns: float
    expected_ns: float
    tolerance_ns: float
    passed: bool

    def describe(self) -> str:
        return (f"delay p50 {_ms(self.measured_ns)}, expected {_ms(self.expected_ns)} ± {_ms(self.tolerance_ns)}: "
                f"{'ok' if self.passed else 'MISS'}")


def check_delay(delays: Sequence[float], model: DelayModel, *, abs_ns: float = 300_000,
                rel: float = 0.02) -> DelayCheck:
    """p50 within ±(``abs_ns`` + ``rel`` × expected): the issue's ±(0.3 ms + 2 %) by default."""
    measured = delay_stats(delays).p50_ns
    expected = model.median()
    tol = abs_ns + rel * expected
    return DelayCheck(measured, expected, tol, abs(measured - expected) <= tol)


@dataclass(frozen=True)
class SpreadCheck:
    """The delays' standard deviation against the configured distribution's."""

    n: int
    measured_ns: float
    expected_ns: float
    tolerance_ns: float
    passed: bool

    def describe(self) -> str:
        return (f"jitter sd {_ms(self.measured_ns)} of {self.n}, expected {_ms(self.expected_ns)} "
                f"± {_ms(self.tolerance_ns)}: {'ok' if self.passed else 'MISS'}")


def check_spread(delays: Sequence[float], model: DelayModel, *, sigmas: float = SIGMAS,
                 rel: Optional[float] = None) -> SpreadCheck:
    """Standard deviation within ``rel`` × expected (the issue's ±15 %: pass ``rel=0.15``) or, without
    ``rel``, within ``sigmas`` standard errors of a sample sd: SE ≈ sqrt((mu4 - sd^4) / n) / (2 sd), with the
    fourth moment of netem's table (heavy for pareto)."""
    d = np.asarray(delays, dtype=np.float64)
    n = len(d)
    measured = float(d.std(ddof=1)) if n > 1 else 0.0
    _, sd, mu4 = model.moments()
    if rel is not None:
        tol = rel * sd
    elif n > 1 and sd > 0:
        tol = sigmas * math.sqrt(max(mu4 - sd ** 4, 0.0) / n) / (2 * sd)
    else:
        tol = 0.0
    return SpreadCheck(n, measured, sd, tol, n > 1 and abs(measured - sd) <= tol)


@dataclass(frozen=True)
class DistributionCheck:
    """A one-sample Kolmogorov–Smirnov test of the delays against netem's distribution."""

    n: int
    distribution: str
    statistic: float
    p_value: float
    alpha: float
    offset_ns: float  # subtracted from the delays before the test
    passed: bool

    def describe(self) -> str:
        shift = f" (shifted by {_ms(self.offset_ns)})" if self.offset_ns else ""
        return (f"KS against netem's {self.distribution} of {self.n}{shift}: D {self.statistic:.4f}, "
                f"p {self.p_value:.3g} (alpha {self.alpha:g}): {'ok' if self.passed else 'MISS'}")


def fitted_offset(delays: Sequence[float], model: DelayModel) -> float:
    """The shift that puts the delays' median on the model's (for a test of the shape alone: where the clocks
    differ, or a base latency of the path is not part of the model)."""
    return float(np.median(np.asarray(delays, dtype=np.float64))) - model.median()


def check_distribution(delays: Sequence[float], model: DelayModel, *, alpha: float = 0.01,
                       offset_ns: float = 0.0) -> DistributionCheck:
    """KS test of ``delays - offset_ns`` against ``model``'s CDF, built from netem's own table. With a fitted
    offset (:func:`fitted_offset`) the test is conservative (a location estimated from the same data)."""
    d = np.sort(np.asarray(delays, dtype=np.float64) - offset_ns)
    if not len(d):
        raise ValueError("no datagram arrived: no distribution to test")
    from scipy import stats  # here, not at the top: scipy.stats takes ~1 s to import, and every `testbed run`
    # imports this module (through testbed.links.verify) whether it tests a distribution or not

    statistic = ks_statistic(d, model)
    p_value = float(stats.kstwo.sf(statistic, len(d)))
    return DistributionCheck(len(d), model.kind, statistic, p_value, alpha, offset_ns, p_value >= alpha)


def ks_statistic(delays: np.ndarray, model: DelayModel) -> float:
    """sup |F_n - F| over every point where either steps, from both sides: netem's delays have atoms (the
    table's 4096 values, a negative draw's 0), where scipy's kstest (for a continuous F) would count a tie
    as a deviation. The p-value of the continuous case is then conservative."""
    d = np.sort(np.asarray(delays, dtype=np.float64))
    points = np.union1d(d, model.support() if model.jitter_ns and model.kind != "uniform" else [0.0])
    n = len(d)
    right = np.abs(np.searchsorted(d, points, side="right") / n - model.cdf(points))
    left = np.abs(np.searchsorted(d, points, side="left") / n - model.cdf(points, strict=True))
    return float(max(right.max(), left.max()))


# -- rates: loss, reorder, duplicate --------------------------------------------------------

def binomial_sigma_pct(expected_pct: float, n: int) -> float:
    """The standard deviation (percentage points) of a share measured over ``n`` independent trials."""
    p = expected_pct / 100
    return 100 * math.sqrt(p * (1 - p) / n) if n else math.inf


def within(measured_pct: float, expected_pct: float, n: int, sigmas: float = SIGMAS,
           sigma_pct: Optional[float] = None) -> bool:
    """Whether ``measured_pct`` is within ``sigmas`` standard deviations of ``expected_pct`` over ``n`` trials
    (binomial unless ``sigma_pct`` gives the standard deviation)."""
    sd = binomial_sigma_pct(expected_pct, n) if sigma_pct is None else sigma_pct
    return abs(measured_pct - expected_pct) <= sigmas * sd


@dataclass(frozen=True)
class RateCheck:
    """A share of datagrams (lost, reordered, duplicated) against its expected value."""

    quantity: str  # loss | reorder | duplicate
    count: int
    n: int
    measured_pct: float
    expected_pct: float
    sigma_pct: float  # the standard deviation of the measured share
    sigmas: float
    passed: bool

    @property
    def low_pct(self) -> float:
        return max(0.0, self.expected_pct - self.sigmas * self.sigma_pct)

    @property
    def high_pct(self) -> float:
        return min(100.0, self.expected_pct + self.sigmas * self.sigma_pct)

    def describe(self) -> str:
        return (f"{self.quantity} {_pct(self.measured_pct)} ({self.count} of {self.n}), expected "
                f"{_pct(self.expected_pct)}, accepted {_pct(self.low_pct)}–{_pct(self.high_pct)}: "
                f"{'ok' if self.passed else 'MISS'}")


def _rate(quantity: str, count: int, n: int, expected_pct: float, sigmas: float,
          sigma_per_trial: Optional[float] = None) -> RateCheck:
    measured = 100.0 * count / n if n else math.nan
    sd = binomial_sigma_pct(expected_pct, n) if sigma_per_trial is None else (
        100 * sigma_per_trial / math.sqrt(n) if n else math.inf)
    return RateCheck(quantity, count, n, measured, expected_pct, sd, sigmas,
                     bool(n) and within(measured, expected_pct, n, sigmas, sd))


@dataclass(frozen=True)
class GilbertElliottChain:
    """The statistics of netem's Gilbert–Elliott loss (the spec's is testbed.spec.resolve.GilbertElliott, in
    percent): good→bad with ``p``, bad→good with ``r`` (probabilities 0..1), loss probability ``loss_good``
    (1-k) in the good state and ``loss_bad`` (1-h) in the bad one."""

    p: float
    r: float
    loss_bad: float = 1.0
    loss_good: float = 0.0

    def __post_init__(self) -> None:
        if not (0 < self.p <= 1 and 0 < self.r <= 1):
            raise ValueError(f"Gilbert-Elliott p={self.p}, r={self.r}: both must be in (0, 1]")

    @property
    def bad_share(self) -> float:
        """The stationary probability of the bad state."""
        return self.p / (self.p + self.r)

    def loss_rate(self) -> float:
        b = self.bad_share
        return b * self.loss_bad + (1 - b) * self.loss_good

    def sigma_per_packet(self) -> float:
        """sqrt of the asymptotic variance per datagram of the loss count: Var(L) plus twice the sum of its
        autocovariances, Var(loss prob of the state) × lambda^k with lambda = 1-p-r."""
        q = self.loss_rate()
        b = self.bad_share
        state_var = b * (1 - b) * (self.loss_bad - self.loss_good) ** 2
        lam = 1 - self.p - self.r
        return math.sqrt(max(q * (1 - q) + (2 * state_var * lam / (1 - lam) if lam < 1 else 0.0), 0.0))

    def mean_burst(self) -> float:
        """The expected length of a run of consecutive losses: P(loss) / P(no loss, then loss); 1/r with
        loss_bad 1 and loss_good 0."""
        b = self.bad_share
        pi = np.array([1 - b, b])
        trans = np.array([[1 - self.p, self.p], [self.r, 1 - self.r]])
        lose = np.array([self.loss_good, self.loss_bad])
        starts = float(((pi * (1 - lose)) @ trans) @ lose)
        return self.loss_rate() / starts if starts else math.inf

    def describe(self) -> str:
        return (f"Gilbert-Elliott p {self.p:.4g} r {self.r:.4g} 1-h {self.loss_bad:.4g} 1-k {self.loss_good:.4g}")


def lost_seqs(sent: int, records: Iterable[Record]) -> np.ndarray:
    """Which of ``0 .. sent-1`` never arrived (a bool per seq)."""
    lost = np.ones(sent, dtype=bool)
    for seq, _, _ in records:
        if 0 <= seq < sent:
            lost[seq] = False
    return lost


def expected_loss_pct(loss_pct: float = 0.0, *, duplicate_pct: float = 0.0, corrupt_pct: float = 0.0,
                      corrupt_dropped: float = 1.0) -> float:
    """The share of datagrams that never arrive: netem's loss, except a duplicated one (sent once when its
    loss hits), or a corrupted one the receiver drops (``corrupt_dropped``: :func:`corrupt_dropped_share`)."""
    lost = (1 - duplicate_pct / 100) * loss_pct / 100
    return 100 * (1 - (1 - lost) * (1 - corrupt_dropped * corrupt_pct / 100))


def corrupt_dropped_share(frame_bytes: int) -> float:
    """The share of corrupted frames the receiver drops: netem flips one bit of the frame from its Ethernet
    header on; the IP and UDP checksums catch it, and so does the destination MAC (another host's) except its
    group bit; a flip in the source MAC (6 bytes) or the destination's group bit goes through."""
    return 1 - (6 * 8 + 1) / (frame_bytes * 8)


def check_loss(sent: int, records: Iterable[Record], expected_pct: float, *, sigmas: float = SIGMAS,
               model: Optional[GilbertElliottChain] = None) -> RateCheck:
    """Lost datagrams against ``expected_pct``, within ``sigmas`` binomial standard deviations, or those of the
    Gilbert–Elliott chain ``model`` (losses come in bursts: the band is wider)."""
    lost = int(lost_seqs(sent, records).sum())
    return _rate("loss", lost, sent, expected_pct, sigmas, model.sigma_per_packet() if model else None)


def loss_bursts(sent: int, records: Iterable[Record]) -> list[int]:
    """The lengths of the runs of consecutive lost seqs."""
    out, run = [], 0
    for gone in lost_seqs(sent, records):
        if gone:
            run += 1
        elif run:
            out.append(run)
            run = 0
    if run:
        out.append(run)
    return out


@dataclass(frozen=True)
class BurstCheck:
    """The mean loss-burst length against the Gilbert–Elliott model's."""

    bursts: int
    measured: float
    expected: float
    tolerance: float
    passed: bool

    def describe(self) -> str:
        return (f"mean loss burst {self.measured:.3g} over {self.bursts} bursts, expected {self.expected:.3g} "
                f"± {self.tolerance:.3g}: {'ok' if self.passed else 'MISS'}")


def check_burst(sent: int, records: Iterable[Record], model: GilbertElliottChain, *, sigmas: float = SIGMAS,
                rel: Optional[float] = None) -> BurstCheck:
    """Mean burst within ``rel`` × expected (the issue's ±20 %: ``rel=0.2``) or, without ``rel``, within
    ``sigmas`` standard errors of the bursts' own spread."""
    bursts = loss_bursts(sent, records)
    expected = model.mean_burst()
    if not bursts:
        return BurstCheck(0, 0.0, expected, math.inf if rel is None else rel * expected, False)
    measured = float(np.mean(bursts))
    if rel is not None:
        tol = rel * expected
    else:  # a burst's length is close to geometric: its sd at least that of a geometric of the expected mean
        geometric_sd = math.sqrt(max(expected * (expected - 1), 0.0))
        sd = max(float(np.std(bursts, ddof=1)) if len(bursts) > 1 else 0.0, geometric_sd)
        tol = sigmas * sd / math.sqrt(len(bursts))
    return BurstCheck(len(bursts), measured, expected, tol, abs(measured - expected) <= tol)


def reordered(records: Iterable[Record]) -> int:
    """How many datagrams (first arrivals) arrived before one with a lower seq (sent earlier)."""
    count, lowest_later = 0, math.inf
    for seq, _, _ in reversed(first_arrivals(records)):
        if lowest_later < seq:
            count += 1
        lowest_later = min(lowest_later, seq)
    return count


def sent_at_once_share(reorder_pct: float, gap: int = 1) -> float:
    """The share of datagrams netem sends at once (to the head of its queue) with ``reorder`` P and ``gap`` G:
    a cycle is G-1 delayed ones, then trials until one goes at once: P / (1 + (G-1) P)."""
    p = reorder_pct / 100
    return p / (1 + (max(gap, 1) - 1) * p) if p else 0.0


def expected_reorder_pct(reorder_pct: float, gap: int, delay_ns: float, interval_ns: float,
                         loss_pct: float = 0.0) -> float:
    """The expected share of datagrams that arrive before a lower seq, for a probe paced ``interval_ns`` apart
    over a netem delaying ``delay_ns`` (no jitter): a datagram sent at once overtakes the delayed ones sent
    within ``delay_ns`` before it. There are m = ceil(delay/interval) - 1 such; it needs one that is not lost
    and delayed. netem decides the loss first, and counts only the packets it keeps toward the gap: with gap
    G > 1 the G-1 kept packets before one sent at once are all delayed, so the nearest kept one before it is
    delayed, and it overtakes unless all m are lost (l^m); with G = 1 each kept one is delayed with 1-P."""
    share = sent_at_once_share(reorder_pct, gap)
    m = max(0, math.ceil(delay_ns / interval_ns) - 1)
    if not share or not m:
        return 0.0
    p, lost = reorder_pct / 100, loss_pct / 100
    if gap > 1:
        none_in_flight = lost ** m
    else:
        none_in_flight = (p + (1 - p) * lost) ** m
    return 100 * share * (1 - none_in_flight)


def check_reorder(records: Iterable[Record], expected_pct: float, *, sigmas: float = SIGMAS) -> RateCheck:
    """Datagrams that arrived before a lower seq, among the first arrivals, against ``expected_pct``
    (:func:`expected_reorder_pct`)."""
    firsts = first_arrivals(records)
    return _rate("reorder", reordered(firsts), len(firsts), expected_pct, sigmas)


def duplicated(records: Iterable[Record]) -> tuple[int, int]:
    """(datagrams that arrived more than once, datagrams that arrived)."""
    seqs, counts = np.unique(np.array([r[0] for r in records], dtype=np.int64), return_counts=True)
    return int((counts > 1).sum()), len(seqs)


def expected_duplicate_pct(duplicate_pct: float, loss_pct: float = 0.0) -> float:
    """The expected share of arrived datagrams that arrived twice: duplicated (d), neither copy lost (the copy
    meets the loss again), over those that arrived at all (1 - (1-d) l)."""
    d, lost = duplicate_pct / 100, loss_pct / 100
    arrived = 1 - (1 - d) * lost
    return 100 * d * (1 - lost) ** 2 / arrived if arrived else 0.0


def check_duplicate(records: Iterable[Record], expected_pct: float, *, sigmas: float = SIGMAS) -> RateCheck:
    twice, arrived = duplicated(list(records))
    return _rate("duplicate", twice, arrived, expected_pct, sigmas)
