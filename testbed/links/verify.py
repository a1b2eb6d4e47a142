"""Verify on the data plane, before traffic starts, that every link delivers what the topology asks.

Per direction of every link that asks for something, :func:`verify_links` measures through the
nodes' access (so it works on every backend, with nothing on the nodes but python3):

* **goodput** where a bandwidth is asked: TCP goodput with the standard-library meter over a
  window after a warm-up, against the configured rate times the share of a full frame that is TCP
  payload. Where loss is asked too, TCP would measure its own reaction to the loss (cubic backs
  off on every random drop) rather than the link, so the rate is measured instead with paced UDP
  offered above the configured rate, counting what arrives (see :func:`expected_goodput_bps`). So it
  is too where the *reverse* direction loses (asked, or found by its loss probe, which runs first):
  TCP's ACKs cross it, and a fault of that direction would be reported as this one's
  (:func:`way_back_loss_pct`);
* **loss**, always: N sequenced UDP datagrams (the *probe*) paced at no more than a quarter of the
  configured rate (so the queue never overflows and only the loss itself drops them), against the
  asked loss or, where none is asked, against zero;
* **delay** where asked: one way from the probe's records where both nodes read this machine's
  clock (``NodeAccess.shares_clock``: Mininet, Docker), else from the round trips of paced UDP
  echoes (see :func:`one_way_delay_ns`);
* the other **impairments** where asked, from the same probe records (:func:`probe_checks`, the
  statistics in testbed.links.impairstats): the jitter's standard deviation and a KS test against
  netem's distribution, a Gilbert-Elliott model's mean loss burst, reorder and duplicate rates.

A direction that asks for nothing measurable (or only a queue limit) gets a reachability check: a
few datagrams must cross it. Queue limits are not verified (the record says so).

What the lab could not install and left out with ``--allow-missing`` (``lab.applied``'s
``dropped``) is not asked: a link without netem asking for delay is verified without the delay.

The report goes into the run manifest as ``link_verification``; a direction that misses is an
error (:class:`LinkDeviation`) unless the run allows deviation.
"""
from __future__ import annotations

import dataclasses
import math
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence

from router.congestion import ETHERNET_HEADER, TCP_IP_HEADERS  # as the router's monitor counts a frame
from runfolder import units
from testbed.links import impairstats, measure
from testbed.backends.base import Lab, LabEnd, LabLink
from testbed.links.impairstats import DelayModel, GilbertElliottChain
from testbed.links.measure import EndAccess
from testbed.spec.resolve import Shaping

#: IPv4 (20) + UDP (8)
UDP_IP_HEADERS = 28
#: the loss meter's datagrams: 64 bytes of payload, 106 on the wire
LOSS_METER_WIRE_BITS = (64 + UDP_IP_HEADERS + ETHERNET_HEADER) * 8
#: a TCP probe's pure ACK on the wire (IP and TCP headers with timestamps, Ethernet header)
ACK_FRAME_BYTES = TCP_IP_HEADERS + ETHERNET_HEADER
#: the loss meter takes at most this share of a direction's configured rate
LOSS_METER_LOAD = 0.25
#: a loss meter that fell behind sends at most this many datagrams back to back (a longer burst could
#: overflow a short queue on the link: loss that is the meter's, not the link's)
LOSS_METER_MAX_BURST = 4
#: paced UDP for the rate under loss is offered this much above the configured rate
UDP_OVERDRIVE = 1.25
#: rate measurements run at once: at most this many per CPU of this machine, and this much asked rate
PARALLEL_PER_CPU = 2
BUDGET_PER_CPU_BPS = 100_000_000
#: first port of the meters (each measurement has its own)
BASE_PORT = 47100


@dataclass(frozen=True)
class Tolerance:
    """How far a measurement may be from what the topology asks and still count as delivered.

    ``goodput_rel`` (±10%) is relative to the *expected goodput*: the configured rate times the
    share of a full frame that is payload, 1448/1514 for TCP over a 1500-byte MTU. The shaper (htb)
    counts every byte of the frame it sends (IP packet + 14-byte Ethernet header), but a receiver
    only sees the payload: 20 bytes of IP, 20 of TCP and 12 of TCP timestamps go with every 1448
    bytes of data, so a perfect 10 Mbit/s link gives 9.56 Mbit/s of goodput, and comparing with
    the configured rate itself would eat half the tolerance with arithmetic. What remains is real
    variation: TCP's window and ACK clocking leaving the link idle a moment, htb's token-bucket
    granularity on a virtual machine's timers, the edges of a 2-second window. iperf3 and the meter
    both measure within 3% of the expected goodput at 10 and 50 Mbit/s on Mininet, so ±10% passes
    a healthy link with margin and still catches a shaper set to another rate (5 instead of 10,
    or unshaped) or a link sharing its capacity with something else. It is the tolerance the
    backend conformance tests use.

    Loss is measured with N paced datagrams, each lost independently with the asked probability p:
    the measured share has a binomial standard deviation sigma = sqrt(p(1-p)/N). A measurement is
    accepted within ``max(loss_floor_pct, loss_sigmas * sigma)`` percentage points of p: 4 sigma
    fails a healthy link about once in 16,000 checks. The floor (0.5 pp: 10 of 2000 datagrams)
    absorbs a handful lost to something other than the shaping, and is the whole bound where no
    loss is asked (sigma is 0 there). It is kept below what the binomial term allows at p = 1%
    with N = 2000 (0.89 pp), so a link asked for 1% that loses nothing is still caught; a floor of
    1.5 pp would hide that.

    Delay (one way, only where configured) is accepted within ``max(delay_floor_ns,
    delay_rel * asked)``: the median of the probe's one-way delays where the two nodes share a
    clock, else an estimate from round trips, which also hold the time the meter's own process
    and the two kernels take (tens of microseconds on Mininet, up to a few hundred on a switched
    lab), which 1 ms covers; 10% is netem's own timer granularity at long delays.

    Jitter (only where configured, without correlation) is checked twice on the probe's delays:
    their standard deviation within ``max(jitter_rel, loss_sigmas standard errors)`` of the
    configured distribution's (the standard error of a sample standard deviation from the table's
    fourth moment: 1.6% for a normal of 2000 samples, so the 15% dominates and absorbs a few
    datagrams held up by the sender's scheduling), and a Kolmogorov-Smirnov test against netem's
    own table (the location fitted: the delay check covers it) passing at ``ks_alpha``: 1e-4, so a
    healthy link fails about as rarely as the 4-sigma bands (at 0.01 one in a hundred would).
    """

    goodput_rel: float = 0.10
    loss_sigmas: float = 4.0
    loss_floor_pct: float = 0.5
    delay_rel: float = 0.10
    delay_floor_ns: int = 1_000_000
    jitter_rel: float = 0.15
    ks_alpha: float = 1e-4

    def goodput_band(self, expected_bps: float) -> tuple[float, float]:
        return expected_bps * (1 - self.goodput_rel), expected_bps * (1 + self.goodput_rel)

    def loss_bound_pct(self, asked_pct: Optional[float], packets: int,
                       sigma_per_packet: Optional[float] = None) -> float:
        """Percentage points the measured loss may differ from ``asked_pct`` (None: no loss asked): binomial, or
        with ``sigma_per_packet`` (losses in bursts: impairstats.GilbertElliottChain.sigma_per_packet) that one."""
        if sigma_per_packet is None:
            sigma_pp = impairstats.binomial_sigma_pct(asked_pct or 0.0, packets)
        else:
            sigma_pp = 100 * sigma_per_packet / math.sqrt(packets) if packets else math.inf
        return max(self.loss_floor_pct, self.loss_sigmas * sigma_pp)

    def delay_bound_ns(self, asked_ns: int) -> float:
        return max(float(self.delay_floor_ns), self.delay_rel * asked_ns)

    def to_json(self) -> dict:
        return asdict(self)


# -- the comparison maths (pure, unit-tested) ---------------------------------------

def payload_share(mtu: int = 1500, transport: str = "tcp") -> float:
    """The share of a full frame on the wire (as the shaper counts it) that reaches the receiver as payload."""
    headers = TCP_IP_HEADERS if transport == "tcp" else UDP_IP_HEADERS
    return (mtu - headers) / (mtu + ETHERNET_HEADER)


def expected_goodput_bps(rate_bps: float, *, mtu: int = 1500, transport: str = "tcp",
                         loss_after_shaper_pct: float = 0.0) -> float:
    """The goodput a direction shaped to ``rate_bps`` gives to full-size TCP segments or UDP datagrams.

    ``loss_after_shaper_pct``: loss applied after the rate limit (iptables on the receiver's
    ingress, where netem is missing) removes that share of what the shaper sent. Loss in a netem
    leaf under htb drops before the rate limit, which a sender offering above the rate keeps busy
    all the same: pass 0 then.
    """
    return rate_bps * payload_share(mtu, transport) * (1 - loss_after_shaper_pct / 100)


def one_way_delay_ns(rtts_ns: Sequence[int], asked_ns: int, reverse_asked_ns: int, *,
                     jitter: bool = False) -> float:
    """This direction's one-way delay, estimated from round trips over it and back.

    A round trip cannot tell which direction added what: the estimate is half the round trip plus
    half the difference between what this direction and the reverse one ask, so that when both ask
    the same it is RTT/2 and in any case the unexplained part (the path's base delay, or a
    deviation) is shared equally by the two directions. The round trip is the minimum (queueing
    and scheduling only add), or the median where jitter is asked (netem's jitter spreads delays
    around the asked one; the minimum would be delay - jitter)."""
    if not rtts_ns:
        raise ValueError("no round trip")
    rtt = statistics.median(rtts_ns) if jitter else min(rtts_ns)
    return rtt / 2 + (asked_ns - reverse_asked_ns) / 2


def loss_meter_interval_ms(bw_bps: Optional[int]) -> float:
    """Pace of the loss meter: 1 ms, slower where that would take more than a quarter of the rate."""
    if not bw_bps:
        return 1.0
    return max(1.0, 1000 * LOSS_METER_WIRE_BITS / (LOSS_METER_LOAD * bw_bps))


def loss_meter_packets(most: int, interval_ms: float, seconds: float, least: int = 200) -> int:
    """How many datagrams the loss meter sends: ``most``, fewer (at least ``least``) where that would
    take more than ``seconds`` at ``interval_ms`` apart."""
    return max(min(most, least), min(most, int(seconds * 1000 / interval_ms)))


def rate_window_s(seconds: float, bw_bps: int, mtu: int = 1500) -> float:
    """The rate measurement's window: ``seconds``, or the time 150 full frames take at ``bw_bps`` (a
    window holding fewer would count arrivals too coarsely)."""
    return max(seconds, 150 * (mtu + ETHERNET_HEADER) * 8 / bw_bps)


def _fmt_rate(bps: float) -> str:
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if abs(bps) >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} bit/s"


def _fmt_in(bps: float, unit_of: float) -> str:
    for scale in (1e9, 1e6, 1e3):
        if abs(unit_of) >= scale:
            return f"{bps / scale:.3g}"
    return f"{bps:.3g}"




@dataclass
class LinkCheck:
    """One quantity measured in one direction, against what was asked."""

    quantity: str  # goodput | loss | delay | reachable
    ok: bool
    measured: Optional[float]  # bit/s, %, ns, or datagrams arrived; None when it could not be measured
    expected: Optional[float]
    low: Optional[float]  # the accepted range
    high: Optional[float]
    unit: str
    method: str
    message: str = ""  # the miss, as a sentence; '' when ok
    detail: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def check_goodput(path: str, asked_bps: int, measured_bps: float, tolerance: Tolerance, *, mtu: int = 1500,
                  transport: str = "tcp", loss_after_shaper_pct: float = 0.0, method: str = "",
                  detail: Optional[dict] = None) -> LinkCheck:
    expected = expected_goodput_bps(asked_bps, mtu=mtu, transport=transport,
                                    loss_after_shaper_pct=loss_after_shaper_pct)
    low, high = tolerance.goodput_band(expected)
    ok = low <= measured_bps <= high
    message = "" if ok else (
        f"{path} goodput {_fmt_rate(measured_bps)}, asked {_fmt_rate(asked_bps)} "
        f"(expected {_fmt_in(expected, asked_bps)} ± {_fmt_in(expected - low, asked_bps)}"
        f"{', ' + transport.upper() if transport != 'tcp' else ''})")
    return LinkCheck("goodput", ok, measured_bps, expected, low, high, "bit/s", method, message,
                     dict(detail or {}, mtu=mtu, transport=transport, loss_after_shaper_pct=loss_after_shaper_pct))


def check_loss(path: str, asked_pct: Optional[float], packets: int, lost: int, tolerance: Tolerance, *,
               method: str = "", detail: Optional[dict] = None,
               sigma_per_packet: Optional[float] = None) -> LinkCheck:
    """``asked_pct``: the share expected lost (None: none asked); ``sigma_per_packet``: see
    :meth:`Tolerance.loss_bound_pct`."""
    measured = 100.0 * lost / packets if packets else 100.0
    bound = tolerance.loss_bound_pct(asked_pct, packets, sigma_per_packet)
    want = asked_pct or 0.0
    low, high = max(0.0, want - bound), min(100.0, want + bound)
    ok = bool(packets) and low <= measured <= high
    asked_text = f"asked {units.percent_text(want)}" if asked_pct else "none asked"
    message = "" if ok else (
        f"{path} loss {units.percent_text(measured)} of {packets} datagrams, {asked_text} "
        f"(accepted {units.percent_text(low)}–{units.percent_text(high)})")
    return LinkCheck("loss", ok, measured, want, low, high, "%", method, message,
                     dict(detail or {}, packets=packets, lost=lost))


def check_delay(path: str, asked_ns: int, reverse_asked_ns: int, rtts_ns: Sequence[int], tolerance: Tolerance,
                *, jitter: bool = False, method: str = "", sent: Optional[int] = None) -> LinkCheck:
    detail = {"echoes_sent": sent, "replies": len(rtts_ns), "reverse_asked_ns": reverse_asked_ns,
              "statistic": "median" if jitter else "min"}
    if not rtts_ns:
        return LinkCheck("delay", False, None, asked_ns, None, None, "ns", method,
                         f"{path} delay: no echo came back over the link", detail)
    detail["rtt_min_ns"], detail["rtt_median_ns"] = min(rtts_ns), int(statistics.median(rtts_ns))
    measured = one_way_delay_ns(rtts_ns, asked_ns, reverse_asked_ns, jitter=jitter)
    bound = tolerance.delay_bound_ns(asked_ns)
    low, high = asked_ns - bound, asked_ns + bound
    ok = low <= measured <= high
    rtt = detail["rtt_median_ns" if jitter else "rtt_min_ns"]
    rtt_text = f"{'median' if jitter else 'min'} RTT {units.ms_text(rtt)}"
    message = "" if ok else (
        f"{path} one-way delay {units.ms_text(measured)} ({rtt_text}), asked {units.ms_text(asked_ns)} "
        f"(accepted {units.ms_text(max(0.0, low))}–{units.ms_text(high)})")
    return LinkCheck("delay", ok, measured, float(asked_ns), low, high, "ns", method, message, detail)


def check_reachable(path: str, packets: int, arrived: int, *, method: str = "") -> LinkCheck:
    ok = arrived > 0
    message = "" if ok else f"{path} unreachable: none of {packets} datagrams arrived"
    return LinkCheck("reachable", ok, float(arrived), None, 1.0, float(packets), "datagrams", method, message,
                     {"packets": packets, "arrived": arrived})


def check_one_way_delay(path: str, asked: DelayModel, delays_ns: Sequence[float], tolerance: Tolerance, *,
                        method: str = "") -> LinkCheck:
    """The median one-way delay (nodes on one clock) against the median of what netem draws."""
    stats = impairstats.delay_stats(delays_ns)
    expected = asked.median()
    bound = tolerance.delay_bound_ns(int(expected))
    low, high = expected - bound, expected + bound
    ok = low <= stats.p50_ns <= high
    message = "" if ok else (
        f"{path} one-way delay p50 {units.ms_text(stats.p50_ns)} (p99 {units.ms_text(stats.p99_ns)}), asked "
        f"{units.ms_text(expected)} (accepted {units.ms_text(max(0.0, low))}–{units.ms_text(high)})")
    return LinkCheck("delay", ok, stats.p50_ns, expected, low, high, "ns", method, message,
                     {"one_way": True, **dataclasses.asdict(stats)})


def check_jitter(path: str, asked: DelayModel, delays_ns: Sequence[float], tolerance: Tolerance, *,
                 method: str = "") -> LinkCheck:
    """The standard deviation of the one-way delays against the configured distribution's."""
    spread = impairstats.check_spread(delays_ns, asked, sigmas=tolerance.loss_sigmas)
    bound = max(tolerance.jitter_rel * spread.expected_ns, spread.tolerance_ns)
    low, high = spread.expected_ns - bound, spread.expected_ns + bound
    ok = spread.n > 1 and low <= spread.measured_ns <= high
    message = "" if ok else (
        f"{path} jitter: delays' sd {units.ms_text(spread.measured_ns)} of {spread.n}, asked jitter "
        f"{units.ms_text(asked.jitter_ns)} {asked.kind} "
        f"(sd {units.ms_text(spread.expected_ns)}, accepted {units.ms_text(max(0.0, low))}–{units.ms_text(high)})")
    return LinkCheck("jitter", ok, spread.measured_ns, spread.expected_ns, low, high, "ns", method, message,
                     {"samples": spread.n, "distribution": asked.kind})


def check_delay_shape(path: str, asked: DelayModel, delays_ns: Sequence[float], tolerance: Tolerance, *,
                       method: str = "") -> LinkCheck:
    """A Kolmogorov-Smirnov test of the delays' shape against netem's table (location fitted)."""
    ks = impairstats.check_distribution(delays_ns, asked, alpha=tolerance.ks_alpha,
                                        offset_ns=impairstats.fitted_offset(delays_ns, asked))
    message = "" if ks.passed else (
        f"{path} delays are not netem's jitter {units.ms_text(asked.jitter_ns)} {asked.kind}: KS D {ks.statistic:.3f} "
        f"over {ks.n}, "
        f"p {ks.p_value:.2g} < {ks.alpha:g}")
    return LinkCheck("distribution", ks.passed, ks.statistic, None, None, None, "KS D", method, message,
                     {"p_value": ks.p_value, "alpha": ks.alpha, "samples": ks.n, "offset_ns": ks.offset_ns,
                      "distribution": asked.kind})


def check_loss_burst(path: str, model: GilbertElliottChain, sent: int, records: Sequence[impairstats.Record],
                     tolerance: Tolerance, *, method: str = "") -> LinkCheck:
    """The mean loss burst against the Gilbert-Elliott model's."""
    burst = impairstats.check_burst(sent, records, model, sigmas=tolerance.loss_sigmas)
    low, high = burst.expected - burst.tolerance, burst.expected + burst.tolerance
    message = "" if burst.passed else (
        f"{path} mean loss burst {burst.measured:.3g} datagrams over {burst.bursts} bursts, asked "
        f"{model.describe()} (expected {burst.expected:.3g}, accepted {max(0.0, low):.3g}–{high:.3g})")
    return LinkCheck("loss_burst", burst.passed, burst.measured if burst.bursts else None, burst.expected,
                     low, high, "datagrams", method, message, {"bursts": burst.bursts})


def check_rate(path: str, rate: impairstats.RateCheck, asked_text: str, *, method: str = "") -> LinkCheck:
    """A reorder or duplicate share (impairstats.check_reorder, check_duplicate) as a check."""
    message = "" if rate.passed else (
        f"{path} {rate.quantity} {units.percent_text(rate.measured_pct)} of {rate.n} datagrams, {asked_text} "
        f"(expected {units.percent_text(rate.expected_pct)}, accepted {units.percent_text(rate.low_pct)}–"
        f"{units.percent_text(rate.high_pct)})")
    return LinkCheck(rate.quantity, rate.passed, rate.measured_pct, rate.expected_pct, rate.low_pct, rate.high_pct,
                     "%", method, message, {"count": rate.count, "of": rate.n})


def failed_measurement(quantity: str, path: str, exc: BaseException, method: str) -> LinkCheck:
    return LinkCheck(quantity, False, None, None, None, None, "", method,
                     f"{path} {quantity} could not be measured: {exc}")


# -- what each direction asks ------------------------------------------------------

#: the fields of Shaping that are netem impairments (beyond bw_bps and queue_packets)
IMPAIRMENT_FIELDS = ("delay_ns", "jitter_ns", "jitter_distribution", "delay_correlation_pct", "loss_pct",
                     "loss_correlation_pct", "loss_gemodel", "duplicate_pct", "corrupt_pct", "reorder")


@dataclass(frozen=True)
class Impairments:
    """What one direction asks of netem, as the statistics read it (from its :class:`Shaping`); 0 or None:
    not asked. Percentages are percent."""

    delay_ns: float = 0
    jitter_ns: float = 0
    distribution: Optional[str] = None
    delay_correlation_pct: float = 0
    loss_pct: float = 0
    loss_correlation_pct: float = 0
    gemodel: Optional[GilbertElliottChain] = None
    duplicate_pct: float = 0
    reorder_pct: float = 0
    reorder_gap: int = 1
    reorder_correlation_pct: float = 0
    corrupt_pct: float = 0

    @classmethod
    def of(cls, shape: Shaping) -> "Impairments":
        ge, reorder = shape.loss_gemodel, shape.reorder
        return cls(
            delay_ns=shape.delay_ns or 0, jitter_ns=shape.jitter_ns or 0, distribution=shape.jitter_distribution,
            delay_correlation_pct=shape.delay_correlation_pct or 0, loss_pct=shape.loss_pct or 0,
            loss_correlation_pct=shape.loss_correlation_pct or 0,
            gemodel=None if ge is None else GilbertElliottChain(ge.p_pct / 100, ge.r_pct / 100,
                                                                ge.loss_bad_pct / 100, ge.loss_good_pct / 100),
            duplicate_pct=shape.duplicate_pct or 0, reorder_pct=reorder.pct if reorder else 0,
            reorder_gap=(reorder.gap or 1) if reorder else 1,
            reorder_correlation_pct=(reorder.correlation_pct or 0) if reorder else 0,
            corrupt_pct=shape.corrupt_pct or 0)

    @property
    def any(self) -> bool:
        """Delay, jitter, loss (a rate or a model), duplicate, reorder or corrupt asked."""
        return bool(self.delay_ns or self.jitter_ns or self.loss_pct or self.gemodel or self.duplicate_pct
                    or self.reorder_pct or self.corrupt_pct)

    @property
    def delay(self) -> DelayModel:
        return DelayModel(self.delay_ns, self.jitter_ns, self.distribution)

    @property
    def asked_loss_pct(self) -> float:
        """netem's own loss: the rate, or the Gilbert-Elliott chain's stationary loss."""
        return 100 * self.gemodel.loss_rate() if self.gemodel else self.loss_pct

    def unverified(self) -> list[str]:
        """What is asked but not verified, and why (the record's notes)."""
        out = []
        if self.jitter_ns and self.delay_correlation_pct:
            out.append(f"jitter is not verified: {impairstats.CORRELATED}")
        if self.loss_pct and self.loss_correlation_pct:
            out.append(f"loss is not verified (the loss check is recorded, not judged): {impairstats.CORRELATED}")
        if self.reorder_pct and self.reorder_correlation_pct:
            out.append(f"reorder is not verified: {impairstats.CORRELATED}")
        elif self.reorder_pct and self.jitter_ns:
            out.append("reorder is not verified: jitter reorders too (the count is in the loss check's detail)")
        if self.corrupt_pct:
            out.append("corrupt is verified as loss: the receiver drops a corrupted datagram")
        return out

    def expected_loss_pct(self, frame_bytes: int) -> float:
        """The share of a probe's ``frame_bytes`` datagrams that never arrive (duplication and corruption
        counted: impairstats.expected_loss_pct)."""
        return impairstats.expected_loss_pct(
            self.asked_loss_pct, duplicate_pct=self.duplicate_pct, corrupt_pct=self.corrupt_pct,
            corrupt_dropped=impairstats.corrupt_dropped_share(frame_bytes))


def _asked_json(shape: Shaping) -> dict:
    """What a direction asks, for the record: bw, loss and delay always (None: not asked), the other
    impairments where asked, with Shaping's names."""
    out = {"bw_bps": shape.bw_bps, "loss_pct": shape.loss_pct, "delay_ns": shape.delay_ns}
    for name in IMPAIRMENT_FIELDS:
        value = getattr(shape, name)
        if value is not None and name not in out:
            out[name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return out


@dataclass
class DirectionVerification:
    """Everything verified about one direction of one link."""

    link: int
    label: str  # LabLink.label
    direction: str  # "a->b", as lab.applied names it
    path: str  # "a:eth1->b:eth1", as the messages name it
    asked: dict  # bw_bps, loss_pct, delay_ns (None: not asked, or left out by --allow-missing); the other
    # impairments where asked (Impairments.to_json)
    dropped: list[str]
    checks: list[LinkCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def misses(self) -> list[str]:
        return [c.message for c in self.checks if not c.ok]

    def measured(self) -> dict:
        out: dict[str, Any] = {}
        for c in self.checks:
            key = {"goodput": "goodput_bps", "loss": "loss_pct", "delay": "delay_ns",
                   "reachable": "datagrams_arrived", "jitter": "jitter_sd_ns", "distribution": "ks_statistic",
                   "loss_burst": "mean_loss_burst", "reorder": "reorder_pct", "duplicate": "duplicate_pct"}[c.quantity]
            out[key] = c.measured
        return out

    def to_json(self) -> dict:
        return {
            "link": self.link, "label": self.label, "direction": self.direction, "path": self.path,
            "asked": self.asked, "dropped": self.dropped, "measured": self.measured(), "ok": self.ok,
            "misses": self.misses(), "checks": [c.to_json() for c in self.checks], "notes": self.notes,
        }

    def summary(self) -> str:
        parts = []
        for c in self.checks:
            if c.measured is None:
                parts.append(f"{c.quantity} not measured")
            elif c.quantity == "goodput":
                parts.append(f"goodput {_fmt_rate(c.measured)} (expected {_fmt_rate(c.expected)})")
            elif c.quantity == "loss":
                parts.append(f"loss {units.percent_text(c.measured)}")
            elif c.quantity == "delay":
                parts.append(f"delay {units.ms_text(c.measured)}{' one way' if c.detail.get('one_way') else ''}")
            elif c.quantity == "jitter":
                parts.append(f"jitter sd {units.ms_text(c.measured)} (expected {units.ms_text(c.expected)})")
            elif c.quantity == "distribution":
                parts.append(f"KS p {c.detail['p_value']:.2g}")
            elif c.quantity == "loss_burst":
                parts.append(f"mean loss burst {c.measured:.3g} (expected {c.expected:.3g})")
            elif c.quantity in ("reorder", "duplicate"):
                parts.append(f"{c.quantity} {units.percent_text(c.measured)} "
                             f"(expected {units.percent_text(c.expected)})")
            else:
                parts.append(f"reachable ({int(c.measured)}/{c.detail['packets']})")
        return f"{self.path}: {', '.join(parts)}: {'ok' if self.ok else 'MISS'}"


@dataclass
class _Direction:
    """What to measure in one direction (internal plan)."""

    link: LabLink
    src: LabEnd
    dst: LabEnd
    asked: Shaping  # what is asked and installed
    reverse: Shaping
    applied: dict
    result: DirectionVerification

    @property
    def impairments(self) -> Impairments:
        return Impairments.of(self.asked)

    @property
    def measurable(self) -> bool:
        return bool(self.asked.bw_bps or self.impairments.any)

    @property
    def loss_after_shaper(self) -> bool:
        """Loss applied after the rate limit: iptables on the receiver (where netem is missing), or netem in the
        impairment appliance (the rate is shaped at the node's end, the loss further on: ``lab.applied``'s
        ``providers`` say which feature went where)."""
        providers = self.applied.get("providers") or {}
        in_appliance = any(str(providers.get(f, "")).startswith("appliance") for f in ("loss", "loss_model"))
        return self.applied.get("iptables_loss_pct") is not None or in_appliance


def has_impairments(lab: Lab) -> bool:
    """Whether a direction of a link asks for delay, jitter, loss (a rate or a model), duplicate, reorder or
    corrupt: link verification is then on by default, on every backend."""
    return any(Impairments.of(shape).any for link in lab.links for shape in (link.shape_ab, link.shape_ba))


def plan_directions(lab: Lab) -> list[_Direction]:
    applied = {(a.get("link"), a.get("direction")): a for a in lab.applied}
    out = []
    for link in lab.links:
        pairs = ((link.a, link.b, link.shape_ab, link.shape_ba), (link.b, link.a, link.shape_ba, link.shape_ab))
        for src, dst, shape, reverse in pairs:
            name = f"{src.node}->{dst.node}"
            rev_name = f"{dst.node}->{src.node}"
            entry = applied.get((link.index, name), {})
            dropped = list(entry.get("dropped") or [])
            asked = shape.without(dropped)
            rev = reverse.without(applied.get((link.index, rev_name), {}).get("dropped") or [])
            impaired = Impairments.of(asked)
            result = DirectionVerification(
                link.index, link.label, name, f"{src.node}:{src.ifname}->{dst.node}:{dst.ifname}",
                _asked_json(asked), dropped)
            for what in dropped:
                result.notes.append(f"{what} is not verified: it was left out (--allow-missing)")
            result.notes.extend(impaired.unverified())
            if asked.queue_packets:
                result.notes.append("the queue limit is not verified")
            if asked.qdisc is not None:
                result.notes.append(f"the queue discipline ({asked.qdisc.kind}) is not verified")
            out.append(_Direction(link, src, dst, asked, rev, entry, result))
    return out


def schedule_rounds(directions: Sequence[Any], nodes_of: Callable[[Any], tuple[str, str]], max_parallel: int,
                    rate_of: Optional[Callable[[Any], float]] = None,
                    budget_bps: Optional[float] = None) -> list[list[Any]]:
    """Group rate measurements into rounds that run at once: in a round no two share a node (so no
    two compete for a node's links or CPU), at most ``max_parallel`` run, and their rates
    (``rate_of``) add up to no more than ``budget_bps`` (one above the budget runs alone)."""
    rounds: list[list[Any]] = []
    busy: list[set[str]] = []
    load: list[float] = []
    for d in directions:
        nodes = set(nodes_of(d))
        rate = rate_of(d) if rate_of is not None else 0.0
        for i, (r, used) in enumerate(zip(rounds, busy)):
            fits = budget_bps is None or load[i] + rate <= budget_bps
            if len(r) < max_parallel and not (used & nodes) and fits:
                r.append(d)
                used |= nodes
                load[i] += rate
                break
        else:
            rounds.append([d])
            busy.append(set(nodes))
            load.append(rate)
    return rounds


# -- the report -----------------------------------------------------------------------

class LinkDeviation(RuntimeError):
    """A link does not deliver what the topology asks (the message lists every miss)."""

    def __init__(self, report: "LinkVerificationReport"):
        self.report = report
        misses = report.failures()
        lines = "\n".join(f"  {m}" for m in misses)
        super().__init__(
            f"{len(misses)} link measurement{'s' if len(misses) != 1 else ''} miss what the topology asks "
            f"(tolerances: goodput ±{report.tolerance.goodput_rel:.0%} of the expected goodput, loss within "
            f"max({report.tolerance.loss_floor_pct:g} pp, {report.tolerance.loss_sigmas:g} sigma), delay within "
            f"max({report.tolerance.delay_floor_ns / 1e6:g} ms, {report.tolerance.delay_rel:.0%})):\n{lines}\n"
            "Fix the link (its shaping, the interfaces, whatever else shares it), or pass --allow-deviation "
            "to run anyway (the deviation is recorded in the manifest).")


@dataclass
class LinkVerificationReport:
    tolerance: Tolerance
    directions: list[DirectionVerification]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.directions)

    def failures(self) -> list[str]:
        """Every miss, one sentence each ("r2:eth2->r4:eth1 goodput 7.1 Mbit/s, asked 10 Mbit/s (...)")."""
        return [m for d in self.directions for m in d.misses()]

    def raise_for_deviation(self) -> None:
        if not self.ok:
            raise LinkDeviation(self)

    def to_json(self) -> dict:
        return {"tolerance": self.tolerance.to_json(), "links": [d.to_json() for d in self.directions],
                "ok": self.ok, "seconds": round(self.seconds, 3)}


# -- measuring ---------------------------------------------------------------------------

class _Ports:
    def __init__(self, base: int):
        self._next = base
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            port, self._next = self._next, self._next + 1
            return port


def _mtu(ep: EndAccess) -> int:
    result = ep.access.run(["cat", f"/sys/class/net/{ep.end.ifname}/mtu"], check=False, timeout=10)
    try:
        return int(result.stdout.strip())
    except ValueError:
        return 1500


def verify_links(lab: Lab, access_of: Callable[[str], Any], *, tolerance: Tolerance = Tolerance(),
                 goodput_seconds: float = 2.0, warmup_s: float = 0.5, loss_packets: int = 2000,
                 loss_seconds: float = 8.0, reach_packets: int = 50, delay_echoes: int = 100,
                 max_parallel: Optional[int] = None, parallel_budget_bps: Optional[float] = None,
                 progress: Optional[Callable[[str], None]] = None, python_of: Optional[Callable[[str], str]] = None,
                 base_port: int = BASE_PORT) -> LinkVerificationReport:
    """Measure every direction of every link of ``lab`` against what it asks; see the module docstring.

    ``access_of(node)`` gives a node's access (``LabSession.access``); ``python_of(node)`` its python3
    (default ``python3``; a lab machine's inventory may name another).

    Loss, reachability and delay meters are light (paced well below the rates) and run at once (16
    at a time). The loss meter sends ``loss_packets`` datagrams, fewer on a link so slow that they
    would take more than ``loss_seconds`` (the loss bound widens accordingly). Rates are measured
    over ``goodput_seconds`` (longer on a link too slow to carry 150 full frames in that time) after
    ``warmup_s`` (plus ten asked round trips), in rounds of directions that share no node, at most
    ``max_parallel`` at once and ``parallel_budget_bps`` of asked rate per round (defaults: two
    per CPU of this machine and 100 Mbit/s per CPU, as on Mininet and Docker every node runs on
    this machine's CPUs; measured on two CPUs, four 50 Mbit/s directions at once give the same
    goodputs as one at a time). ``progress`` is called with a line as it starts and a line for
    each direction when it is done.
    """
    started = time.monotonic()
    plan = plan_directions(lab)
    accesses = {name: access_of(name) for name in lab.nodes}
    ports = _Ports(base_port)
    cpus = max(1, os.cpu_count() or 1)
    if max_parallel is None:
        max_parallel = PARALLEL_PER_CPU * cpus
    if parallel_budget_bps is None:
        parallel_budget_bps = BUDGET_PER_CPU_BPS * cpus

    pythons = {name: python_of(name) if python_of is not None else "python3" for name in lab.nodes}

    def ep(end: LabEnd) -> EndAccess:
        return EndAccess(accesses[end.node], end, pythons[end.node])

    pending = {id(d): 0 for d in plan}
    lock = threading.Lock()

    def done(d: _Direction) -> None:
        with lock:
            pending[id(d)] -= 1
            finished = pending[id(d)] == 0
        if finished and progress is not None:
            progress(f"link {d.link.index} {d.result.summary()}")

    # The meter goes on every node once, before measurements run at once.
    for name, access in accesses.items():
        end = next((e for link in lab.links for e in (link.a, link.b) if e.node == name), None)
        if end is not None:
            measure.put_meter(EndAccess(access, end))

    def one_clock(d: _Direction) -> bool:
        """Both ends read one clock: the probe's delays are one-way delays."""
        return bool(accesses[d.src.node].shares_clock and accesses[d.dst.node].shares_clock)

    light: list[Callable[[], None]] = []
    rates: list[_Direction] = []
    for d in plan:
        if d.measurable:
            light.append(_probe_task(d, ep, ports, tolerance, loss_packets, loss_seconds, one_clock(d), done))
            pending[id(d)] += 1
            if d.asked.bw_bps:
                rates.append(d)
                pending[id(d)] += 1
        else:
            light.append(_reach_task(d, ep, ports, reach_packets, done))
            pending[id(d)] += 1
    by_link: dict[int, list[_Direction]] = {}
    for d in plan:
        if d.asked.delay_ns and not one_clock(d):  # else the probe measures it one way
            by_link.setdefault(d.link.index, []).append(d)
    for index, ds in by_link.items():
        light.append(_delay_task(ds, ep, ports, tolerance, delay_echoes, done))
        for d in ds:
            pending[id(d)] += 1

    rounds = schedule_rounds(rates, lambda d: (d.src.node, d.dst.node), max_parallel,
                             lambda d: float(d.asked.bw_bps), parallel_budget_bps)
    if progress is not None:
        progress(f"verifying {len(plan)} directions of {len(lab.links)} links: loss, delay, impairments and "
                 f"reachability "
                 f"at once, then rates in {len(rounds)} round{'s' if len(rounds) != 1 else ''}")
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(light)))) as pool:
        for future in [pool.submit(task) for task in light]:
            future.result()
    # the reverse of each direction: its loss, measured above, decides how the rate is measured
    by_source = {(d.link.index, d.src.node, d.src.ifname): d for d in plan}
    way_back_of = {id(d): by_source[(d.link.index, d.dst.node, d.dst.ifname)] for d in plan}
    for round_ in rounds:
        with ThreadPoolExecutor(max_workers=len(round_)) as pool:
            for future in [pool.submit(_rate, d, way_back_of[id(d)], ep, ports, tolerance, goodput_seconds, warmup_s,
                                       done)
                           for d in round_]:
                future.result()
    order = {q: i for i, q in enumerate(("goodput", "loss", "loss_burst", "delay", "jitter", "distribution",
                                         "reorder", "duplicate", "reachable"))}
    for d in plan:
        d.result.checks.sort(key=lambda c: order[c.quantity])
    return LinkVerificationReport(tolerance, [d.result for d in plan], time.monotonic() - started)


def _settle_s(d: _Direction) -> float:
    """How long to wait after the last datagram was sent for those still on their way: twice the longest delay
    netem draws (its tables reach 4 jitters above the delay; uniform 1)."""
    return 0.3 + 2 * ((d.asked.delay_ns or 0) + 4 * (d.asked.jitter_ns or 0)) / 1e9


def _probe_task(d: _Direction, ep, ports: _Ports, tolerance: Tolerance, most: int, seconds: float,
                one_clock: bool, done) -> Callable[[], None]:
    """The loss meter's sequenced datagrams; where impairments are asked, the same records also give the
    one-way delay (``one_clock``), the jitter, the loss bursts, reorder and duplicates."""
    def run() -> None:
        interval = loss_meter_interval_ms(d.asked.bw_bps)
        packets = loss_meter_packets(most, interval, seconds)
        method = f"{packets} sequenced 106-byte UDP datagrams, one per {interval:.3g} ms"
        try:
            records = measure.udp_arrivals(ep(d.src), ep(d.dst), packets, interval, ports.take(),
                                           settle_s=_settle_s(d), max_burst=LOSS_METER_MAX_BURST, meter_ready=True)
            checks = probe_checks(d.result.path, d.impairments, packets, records, tolerance, interval_ms=interval,
                                  one_clock=one_clock, method=method)
        except Exception as exc:  # noqa: BLE001 - a measurement that cannot run is a miss, with why
            checks = [failed_measurement("loss", d.result.path, exc, method)]
        d.result.checks.extend(checks)
        done(d)
    return run


def probe_checks(path: str, asked: Impairments, packets: int, records: Sequence[impairstats.Record],
                 tolerance: Tolerance, *, interval_ms: float, one_clock: bool, method: str = "") -> list[LinkCheck]:
    """Every check one direction's probe records (``(seq, arrival ns, send ns)`` of the ``packets`` sent
    ``interval_ms`` apart) support: loss always (what netem's loss, duplication and corruption leave,
    expected 0 where none is asked); where asked, the mean loss burst of a Gilbert-Elliott model, the
    one-way delay (only where ``one_clock``: the two ends read one clock), the jitter's spread and
    distribution (arrival - send: a constant clock offset changes neither), reorder and duplicate."""
    frame = LOSS_METER_WIRE_BITS // 8
    lost = int(impairstats.lost_seqs(packets, records).sum())
    firsts = impairstats.first_arrivals(records)
    twice, _ = impairstats.duplicated(records)
    detail = {"interval_ms": interval_ms, "reordered": impairstats.reordered(firsts), "duplicated": twice}
    expected_loss = asked.expected_loss_pct(frame) if asked.any else None
    sigma = asked.gemodel.sigma_per_packet() if asked.gemodel else None
    if asked.duplicate_pct or asked.corrupt_pct:
        detail["loss_expected_from"] = {"loss_pct": asked.asked_loss_pct, "duplicate_pct": asked.duplicate_pct,
                                        "corrupt_pct": asked.corrupt_pct}
    delays = impairstats.one_way_delays(firsts) if firsts else None
    if delays is not None and one_clock:
        detail["one_way"] = dataclasses.asdict(impairstats.delay_stats(delays))
    loss = check_loss(path, expected_loss or None, packets, lost, tolerance, method=method, detail=detail,
                      sigma_per_packet=sigma)
    if asked.loss_pct and asked.loss_correlation_pct:  # recorded, not judged (Impairments.unverified says why)
        loss = dataclasses.replace(loss, ok=True, message="", detail={**loss.detail, "judged": False})
    checks = [loss]
    if asked.gemodel:
        checks.append(check_loss_burst(path, asked.gemodel, packets, records, tolerance, method=method))
    if delays is None or not len(delays):
        return checks
    if one_clock and (asked.delay_ns or asked.jitter_ns):
        checks.append(check_one_way_delay(path, asked.delay, delays, tolerance,
                                          method=f"{method}; one way: arrival - send, on one clock"))
    if asked.jitter_ns and not asked.delay_correlation_pct:
        checks.append(check_jitter(path, asked.delay, delays, tolerance, method=method))
        checks.append(check_delay_shape(path, asked.delay, delays, tolerance, method=method))
    if asked.reorder_pct and not asked.jitter_ns and not asked.reorder_correlation_pct:
        expected = impairstats.expected_reorder_pct(asked.reorder_pct, asked.reorder_gap, asked.delay_ns,
                                                    interval_ms * 1e6, asked.asked_loss_pct)
        rate = impairstats.check_reorder(firsts, expected, sigmas=tolerance.loss_sigmas)
        checks.append(check_rate(path, rate, f"asked {units.percent_text(asked.reorder_pct)} gap {asked.reorder_gap}",
                                 method=method))
    if asked.duplicate_pct:
        rate = impairstats.check_duplicate(records, impairstats.expected_duplicate_pct(
            asked.duplicate_pct, asked.asked_loss_pct), sigmas=tolerance.loss_sigmas)
        checks.append(check_rate(path, rate, f"asked {units.percent_text(asked.duplicate_pct)}", method=method))
    return checks


def _reach_task(d: _Direction, ep, ports: _Ports, packets: int, done) -> Callable[[], None]:
    def run() -> None:
        method = f"{packets} UDP datagrams, one per 10 ms"
        try:
            result = measure.udp_loss(ep(d.src), ep(d.dst), packets, 10.0, ports.take(), settle_s=_settle_s(d),
                                      max_burst=LOSS_METER_MAX_BURST, meter_ready=True)
            check = check_reachable(d.result.path, packets, packets - result.lost, method=method)
        except Exception as exc:  # noqa: BLE001
            check = failed_measurement("reachable", d.result.path, exc, method)
        d.result.checks.append(check)
        d.result.notes.append("nothing measurable asked (bandwidth, loss, delay): reachability only")
        done(d)
    return run


def _delay_task(ds: list[_Direction], ep, ports: _Ports, tolerance: Tolerance, echoes: int,
                done) -> Callable[[], None]:
    """One echo series over the link (from its a end) serves both directions."""
    def run() -> None:
        link = ds[0].link
        jitter = bool(ds[0].asked.jitter_ns or ds[0].reverse.jitter_ns)
        interval = 10.0
        method = f"{echoes} UDP echoes from {link.a.node}, one per {interval:g} ms; " \
                 f"one way = {'median' if jitter else 'min'} RTT/2 + (asked - reverse asked)/2"
        try:
            trips = measure.udp_round_trips(ep(link.a), ep(link.b), echoes, interval, ports.take(),
                                            meter_ready=True)
            error = None
        except Exception as exc:  # noqa: BLE001
            trips, error = None, exc
        for d in ds:
            if trips is None:
                check = failed_measurement("delay", d.result.path, error, method)
            else:
                check = check_delay(d.result.path, d.asked.delay_ns or 0, d.reverse.delay_ns or 0,
                                    trips.rtts_ns, tolerance, jitter=jitter, method=method, sent=trips.sent)
            d.result.checks.append(check)
            done(d)
    return run


def way_back_loss_pct(asked_loss_pct: float, checks: Sequence[LinkCheck], tolerance: Tolerance) -> Optional[float]:
    """The share of datagrams the reverse direction loses when it loses any to speak of, else None: what it
    asks (``asked_loss_pct``, of a TCP ACK's frame), or what its loss probe or reachability check (``checks``,
    measured before the rates) lost beyond what a link asking no loss may lose.

    A TCP probe's ACKs cross the reverse direction: dropped there, they stall the sender (cumulative ACKs
    cover a few; a run of them costs a retransmission timeout, 200 ms at least of a 2 s window), so its
    goodput would also measure the way back, and a fault of one direction would be reported as the other's
    miss: 20% dropped on one direction's receiver pulled the other's TCP goodput to 2.1-8.5 Mbit/s of 10 in
    5 of 40 verifications on a loaded 2-core machine (bench/verify_attribution_bench.py)."""
    if asked_loss_pct > 0:
        return asked_loss_pct
    for check in checks:
        if check.quantity == "loss" and check.measured is not None:
            lost_pct = check.measured
        elif check.quantity == "reachable" and check.detail.get("packets"):
            lost_pct = 100.0 * (check.detail["packets"] - check.detail["arrived"]) / check.detail["packets"]
        else:
            continue
        if lost_pct > tolerance.loss_bound_pct(None, int(check.detail.get("packets") or 0)):
            return lost_pct
    return None


def _rate(d: _Direction, back: _Direction, ep, ports: _Ports, tolerance: Tolerance, seconds: float,
          warmup_s: float, done) -> None:
    src, dst = ep(d.src), ep(d.dst)
    rtt_s = ((d.asked.delay_ns or 0) + (d.reverse.delay_ns or 0) + (d.asked.jitter_ns or 0)) / 1e9
    warmup = warmup_s + 10 * rtt_s  # slow start takes a number of round trips
    method = "rate"
    try:
        mtu = _mtu(src)
        window = rate_window_s(seconds, d.asked.bw_bps, mtu)
        lossy = d.impairments.expected_loss_pct(mtu + ETHERNET_HEADER)  # of full frames (corruption too)
        way_back = way_back_loss_pct(back.impairments.expected_loss_pct(ACK_FRAME_BYTES), back.result.checks,
                                     tolerance)
        if lossy or way_back is not None:
            loss_check = next((c for c in d.result.checks if c.quantity == "loss"), None)
            after = 0.0
            if d.loss_after_shaper:  # what the loss meter measured, not what was asked: one fault, one miss
                after = loss_check.measured if loss_check is not None and loss_check.measured is not None \
                    else lossy
            offered = UDP_OVERDRIVE * d.asked.bw_bps / (1 - min(lossy, 90.0) / 100)
            why = "TCP under random loss would measure its own reaction to it" if lossy else (
                f"TCP's ACKs would cross {back.result.direction}, which loses {units.percent_text(way_back)}: "
                f"it would measure that direction too")
            method = (f"paced UDP offered at {_fmt_rate(offered)} on the wire, received over {window:g} s after "
                      f"{warmup:g} s ({why})")
            rate = measure.udp_delivered_rate(src, dst, offered, seconds=window, warmup_s=warmup,
                                              payload=mtu - UDP_IP_HEADERS, port=ports.take(), meter_ready=True)
            check = check_goodput(d.result.path, d.asked.bw_bps, rate.bits_per_second, tolerance, mtu=mtu,
                                  transport="udp", loss_after_shaper_pct=after, method=method,
                                  detail={"seconds": rate.seconds, "offered_bps": rate.offered_bps})
        else:
            method = f"TCP probe, received over {window:g} s after {warmup:g} s"
            good = measure.tcp_goodput_metered(src, dst, seconds=window, warmup_s=warmup, port=ports.take(),
                                               meter_ready=True)
            check = check_goodput(d.result.path, d.asked.bw_bps, good.bits_per_second, tolerance, mtu=mtu,
                                  method=method, detail={"seconds": good.seconds})
    except Exception as exc:  # noqa: BLE001
        check = failed_measurement("goodput", d.result.path, exc, method)
    d.result.checks.insert(0, check)
    done(d)
