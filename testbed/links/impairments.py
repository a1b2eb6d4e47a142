"""One direction's impairments and queue discipline as tc arguments (iproute2's syntax): a pure translation, no I/O.

The same arguments serve the host kernel (testbed.links.shaping) and the impairment appliance (docs/impairments.md):
``netem_args`` for netem's features (delay, jitter, loss, loss models, duplicate, reorder, corrupt) and
``queue_args`` for the queue a packet waits in (pfifo, fq_codel, cake, red, pie). Times are written in
microseconds, percentages with a ``%`` sign (RED's probability as the fraction tc takes).
"""
from __future__ import annotations

import math

from runfolder import units
from testbed.spec.resolve import Cake, FqCodel, Pie, Red, Shaping

__all__ = ["FEATURE_QDISC", "NETEM_FEATURES", "TFIFO_MIN_LIMIT", "netem_args", "netem_change_args",
           "netem_impairment_args", "queue_args", "tfifo_limit"]

#: the qdisc kind that provides each feature of testbed.spec.resolve.FEATURES (plain ``loss`` also has an iptables
#: fallback on the host: testbed.links.shaping)
FEATURE_QDISC: dict[str, str] = {
    "bw": "htb", "delay": "netem", "jitter": "netem", "loss": "netem", "loss_model": "netem",
    "duplicate": "netem", "reorder": "netem", "corrupt": "netem", "queue": "pfifo",
    "fq_codel": "fq_codel", "cake": "cake", "red": "red", "pie": "pie",
}
NETEM_FEATURES = frozenset(feature for feature, kind in FEATURE_QDISC.items() if kind == "netem")

#: netem's own default limit, and the least a tfifo limit of ours is
TFIFO_MIN_LIMIT = 1000
#: the rate a direction without ``bw`` is taken to carry at most, for its tfifo limit
UNSHAPED_RATE_BPS = 10 * 10**9
#: the packet size a tfifo limit is counted in (a full Ethernet frame's payload)
FRAME_BYTES = 1500
#: how far beyond the delay a jitter may reach, in jitters (netem's tables go to about four standard deviations)
JITTER_REACH = 4
#: RED's average packet size (bytes), and the queue it holds without ``limit`` or ``queue`` (packets)
RED_AVPKT_BYTES = 1000
RED_DEFAULT_QUEUE_PACKETS = 1000


def _us(ns: int) -> str:
    return f"{ns // 1000}us"


def _pct(pct: float) -> str:
    return units.format_percent(pct)


def tfifo_limit(shape: Shaping) -> int:
    """Packets netem must hold so that none is dropped while it waits out the delay: twice the full frames the
    direction's rate (or :data:`UNSHAPED_RATE_BPS`) sends during the delay and its jitter's reach, at least
    :data:`TFIFO_MIN_LIMIT`."""
    held_ns = (shape.delay_ns or 0) + JITTER_REACH * (shape.jitter_ns or 0)
    rate = shape.bw_bps or UNSHAPED_RATE_BPS
    return max(TFIFO_MIN_LIMIT, math.ceil(2 * rate * held_ns / 1e9 / 8 / FRAME_BYTES))


def netem_impairment_args(shape: Shaping) -> list[str]:
    """netem's arguments for ``shape``'s netem features, without ``limit`` (empty when it has none)."""
    args: list[str] = []
    if shape.delay_ns:
        args += ["delay", _us(shape.delay_ns)]
        if shape.jitter_ns:
            args.append(_us(shape.jitter_ns))
            if shape.delay_correlation_pct:
                args.append(_pct(shape.delay_correlation_pct))
            if shape.jitter_distribution and shape.jitter_distribution != "uniform":  # uniform: netem's, no table
                args += ["distribution", shape.jitter_distribution]
    if shape.loss_gemodel is not None:
        ge = shape.loss_gemodel
        args += ["loss", "gemodel", _pct(ge.p_pct), _pct(ge.r_pct), _pct(ge.loss_bad_pct), _pct(ge.loss_good_pct)]
    elif shape.loss_pct:
        if shape.loss_correlation_pct:
            args += ["loss", "random", _pct(shape.loss_pct), _pct(shape.loss_correlation_pct)]
        else:
            args += ["loss", _pct(shape.loss_pct)]
    if shape.duplicate_pct:
        args += ["duplicate", _pct(shape.duplicate_pct)]
    if shape.reorder is not None and shape.reorder.pct:
        args += ["reorder", _pct(shape.reorder.pct)]
        if shape.reorder.correlation_pct:
            args.append(_pct(shape.reorder.correlation_pct))
        if shape.reorder.gap:
            args += ["gap", str(shape.reorder.gap)]
    if shape.corrupt_pct:
        args += ["corrupt", _pct(shape.corrupt_pct)]
    return args


def _tableless_jitter(shape: Shaping | None) -> bool:
    """A jitter netem draws by itself, without a distribution table (``uniform``, or none given)."""
    return shape is not None and bool(shape.jitter_ns) and shape.jitter_distribution in (None, "uniform")


def netem_change_args(shape: Shaping, previous: Shaping | None = None) -> list[str] | None:
    """netem's arguments (without ``limit``) to change a netem in place to ``shape``, or None where it cannot be.

    ``tc qdisc change`` of a netem keeps every setting the kernel gets in an attribute of its own that the change
    leaves out: the correlations (delay, loss, duplicate), reorder and corrupt (seen on the appliance's 6.1
    kernel: a change to ``delay 3ms`` kept ``reorder 25%`` and ``corrupt 0.1%``). So each is given, 0 where
    ``shape`` has none. The jitter's distribution table is kept too and no argument removes it: a jitter drawn
    as netem draws it by itself (no table: ``uniform`` or none given) is reached in place only from ``previous``
    (the shaping installed now) with such a jitter too, which had no table (None: rebuild; also when
    ``previous`` is not known). Every path to a table-less jitter goes through a rebuild, so that holds.
    """
    if _tableless_jitter(shape) and not _tableless_jitter(previous):
        return None
    args = ["delay", _us(shape.delay_ns or 0), _us(shape.jitter_ns or 0), _pct(shape.delay_correlation_pct or 0)]
    if shape.jitter_ns and shape.jitter_distribution:
        args += ["distribution", shape.jitter_distribution]
    if shape.loss_gemodel is not None:
        ge = shape.loss_gemodel
        args += ["loss", "gemodel", _pct(ge.p_pct), _pct(ge.r_pct), _pct(ge.loss_bad_pct), _pct(ge.loss_good_pct)]
    else:
        args += ["loss", "random", _pct(shape.loss_pct or 0), _pct(shape.loss_correlation_pct or 0)]
    args += ["duplicate", _pct(shape.duplicate_pct or 0), _pct(0)]
    reorder = shape.reorder if shape.reorder is not None and shape.reorder.pct else None
    args += ["reorder", _pct(reorder.pct if reorder else 0), _pct(reorder.correlation_pct or 0 if reorder else 0)]
    if reorder and reorder.gap:
        args += ["gap", str(reorder.gap)]
    args += ["corrupt", _pct(shape.corrupt_pct or 0), _pct(0)]
    return args


def netem_args(shape: Shaping) -> list[str]:
    """netem's arguments for ``shape`` with a tfifo ``limit`` that holds the delay (:func:`tfifo_limit`); empty
    when ``shape`` has no netem feature. The queue is not netem's: :func:`queue_args`."""
    args = netem_impairment_args(shape)
    return args + ["limit", str(tfifo_limit(shape))] if args else []


def _ecn(ecn: bool | None) -> list[str]:
    return [] if ecn is None else ["ecn" if ecn else "noecn"]


def _opt(name: str, value: object) -> list[str]:
    return [] if value is None else [name, str(value)]


def queue_args(shape: Shaping) -> tuple[str, list[str]]:
    """The kind of the queue a packet of ``shape`` waits in and its arguments: pfifo of ``queue`` packets (no
    ``qdisc``), or the ``qdisc``'s, whose packet limit is the link's ``queue`` where it sets none."""
    q, queue = shape.qdisc, shape.queue_packets
    if q is None:
        return "pfifo", _opt("limit", queue)
    if isinstance(q, FqCodel):
        limit = q.limit_packets if q.limit_packets is not None else queue
        return q.kind, (_opt("limit", limit) + _opt("flows", q.flows)
                        + _opt("target", q.target_ns and _us(q.target_ns))
                        + _opt("interval", q.interval_ns and _us(q.interval_ns)) + _ecn(q.ecn))
    if isinstance(q, Cake):
        return q.kind, _opt("rtt", q.rtt_ns and _us(q.rtt_ns))
    if isinstance(q, Red):
        high = q.max_bytes or 3 * (q.min_bytes or 0)  # tc's own max without one: three times min
        limit = q.limit_bytes or max((queue or RED_DEFAULT_QUEUE_PACKETS) * FRAME_BYTES, 2 * high)
        probability = None if q.probability_pct is None else f"{q.probability_pct / 100:g}"
        return q.kind, (["limit", str(limit)] + _opt("min", q.min_bytes) + _opt("max", q.max_bytes)
                        + ["avpkt", str(RED_AVPKT_BYTES)] + _opt("burst", q.burst_packets)
                        + _opt("probability", probability)
                        + _opt("bandwidth", shape.bw_bps and f"{shape.bw_bps}bit") + (["ecn"] if q.ecn else []))
    if isinstance(q, Pie):
        limit = q.limit_packets if q.limit_packets is not None else queue
        return q.kind, _opt("limit", limit) + _opt("target", q.target_ns and _us(q.target_ns)) + _ecn(q.ecn)
    raise ValueError(f"unknown queue discipline {q!r}")
