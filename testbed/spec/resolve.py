"""Turning a validated ``Spec`` into what a backend builds: named interfaces,
addresses, and the fully merged shaping of each direction of each link.

Merge order for the egress of end ``a`` (traffic from ``a`` toward ``b``):
``defaults.link`` < the link's own fields < ``link.egress[a]``.
Interface names: explicit ones are kept; the others become ``eth1``,
``eth2``, ... per node in link order, skipping names taken explicitly.
Addresses: explicit ``addresses`` are kept; every other link gets the next
free /30 of ``defaults.address_pool`` in link order (``a`` = .1, ``b`` = .2),
skipping subnets that overlap explicit addresses.
"""
from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Set, Tuple, Union

from runfolder import units
from runfolder.wording import did_you_mean
from .fieldtypes import Endpoint, LinkRef
from .models import (
    DEFAULT_WEIGHT, SHAPING_FIELDS, CakeParams, FqCodelParams, GilbertElliottLossParams, PfifoParams, RandomLossParams,
    RedParams, ShapingParams,
)

if TYPE_CHECKING:  # pragma: no cover
    from .topology import Spec

__all__ = [
    "Shaping", "GilbertElliott", "Reorder", "FqCodel", "Cake", "Red", "Pie", "QueueDiscipline", "QUEUE_DISCIPLINES",
    "FEATURES", "FEATURE_FIELDS", "shaping_changes", "event_shaping", "ResolvedEnd", "ResolvedLink", "AddressPoolExhausted",
    "assign_ifnames", "allocate_addresses", "egress_shaping", "resolve_links", "find_link", "link_rate",
    "resolve_flow_rates",
]


@dataclass(frozen=True)
class GilbertElliott:
    """netem's ``loss gemodel p r 1-h 1-k``: ``p_pct`` good -> bad, ``r_pct`` bad -> good (per packet), and the
    loss in each state."""

    p_pct: float
    r_pct: float
    loss_bad_pct: float = 100.0
    loss_good_pct: float = 0.0

    def describe(self) -> str:
        pct = units.format_percent
        text = f"gemodel p {pct(self.p_pct)} r {pct(self.r_pct)}"
        if self.loss_bad_pct != 100.0:
            text += f" loss_bad {pct(self.loss_bad_pct)}"
        if self.loss_good_pct:
            text += f" loss_good {pct(self.loss_good_pct)}"
        return text


@dataclass(frozen=True)
class Reorder:
    """netem's ``reorder P [CORRELATION] gap N``: ``pct`` of the packets (every ``gap``-th candidate) go at once,
    the others wait the delay."""

    pct: float
    gap: Optional[int] = None
    correlation_pct: Optional[float] = None

    def describe(self) -> str:
        text = f"reorder {units.format_percent(self.pct)}"
        if self.correlation_pct:
            text += f" correlation {units.format_percent(self.correlation_pct)}"
        return text + (f" gap {self.gap}" if self.gap else "")


def _words(kind: str, *pairs: Tuple[str, Optional[str]], ecn: Optional[bool] = None) -> str:
    text = " ".join([kind] + [f"{name} {value}" for name, value in pairs if value is not None])
    return text + ("" if ecn is None else " ecn" if ecn else " noecn")


def _time(ns: Optional[int]) -> Optional[str]:
    return None if ns is None else units.format_duration(ns)


def _size(size: Optional[int]) -> Optional[str]:
    return None if size is None else units.format_size(size)


@dataclass(frozen=True)
class FqCodel:
    """fq_codel's main parameters (None: the kernel's default; ``limit_packets`` None: the link's ``queue``)."""

    target_ns: Optional[int] = None
    interval_ns: Optional[int] = None
    limit_packets: Optional[int] = None
    flows: Optional[int] = None
    ecn: Optional[bool] = None
    kind: str = field(default="fq_codel", init=False)

    def describe(self) -> str:
        return _words(self.kind, ("target", _time(self.target_ns)), ("interval", _time(self.interval_ns)),
                      ("limit", None if self.limit_packets is None else str(self.limit_packets)),
                      ("flows", None if self.flows is None else str(self.flows)), ecn=self.ecn)


@dataclass(frozen=True)
class Cake:
    """cake's round-trip time (rate shaping stays the link's htb)."""

    rtt_ns: Optional[int] = None
    kind: str = field(default="cake", init=False)

    def describe(self) -> str:
        return _words(self.kind, ("rtt", _time(self.rtt_ns)))


@dataclass(frozen=True)
class Red:
    """RED's thresholds (bytes), marking probability, burst (packets), limit (bytes) and ECN marking."""

    min_bytes: Optional[int] = None
    max_bytes: Optional[int] = None
    probability_pct: Optional[float] = None
    burst_packets: Optional[int] = None
    limit_bytes: Optional[int] = None
    ecn: Optional[bool] = None
    kind: str = field(default="red", init=False)

    def describe(self) -> str:
        return _words(self.kind, ("min", _size(self.min_bytes)), ("max", _size(self.max_bytes)),
                      ("probability", None if self.probability_pct is None else units.format_percent(
                          self.probability_pct)),
                      ("burst", None if self.burst_packets is None else str(self.burst_packets)),
                      ("limit", _size(self.limit_bytes)), ecn=self.ecn)


@dataclass(frozen=True)
class Pie:
    """PIE's target delay, limit (packets; None: the link's ``queue``) and ECN marking."""

    target_ns: Optional[int] = None
    limit_packets: Optional[int] = None
    ecn: Optional[bool] = None
    kind: str = field(default="pie", init=False)

    def describe(self) -> str:
        return _words(self.kind, ("target", _time(self.target_ns)),
                      ("limit", None if self.limit_packets is None else str(self.limit_packets)), ecn=self.ecn)


#: a queue discipline other than pfifo (``Shaping.qdisc`` None is pfifo, today's queue)
QueueDiscipline = Union[FqCodel, Cake, Red, Pie]
QUEUE_DISCIPLINES = {cls().kind: cls for cls in (FqCodel, Cake, Red, Pie)}

#: every feature a direction can need, in the order they are checked and reported (docs/spec.md "Link shaping"):
#: plain ``loss`` apart from ``loss_model`` because plain loss has an iptables fallback on the host
FEATURES = ("bw", "delay", "jitter", "loss", "loss_model", "duplicate", "reorder", "corrupt", "queue",
            "fq_codel", "cake", "red", "pie")

#: the fields of :class:`Shaping` each feature sets (a feature left out clears them all)
FEATURE_FIELDS: Dict[str, Tuple[str, ...]] = {
    "bw": ("bw_bps",), "delay": ("delay_ns",),
    "jitter": ("jitter_ns", "jitter_distribution", "delay_correlation_pct"),
    "loss": ("loss_pct",), "loss_model": ("loss_gemodel", "loss_correlation_pct", "loss_pct"),
    "duplicate": ("duplicate_pct",), "reorder": ("reorder",), "corrupt": ("corrupt_pct",),
    "queue": ("queue_packets",), "fq_codel": ("qdisc",), "cake": ("qdisc",), "red": ("qdisc",), "pie": ("qdisc",),
}


#: shaping keys that mean nothing without another one: (key, the key it needs, what to tell the user)
NEEDS: Tuple[Tuple[str, str, str], ...] = (
    ("jitter", "delay", "jitter needs a delay (netem varies the delay by up to the jitter); add e.g. delay: 10ms"),
    ("distribution", "jitter", "distribution is the jitter's: it needs a jitter (and a delay); add e.g. jitter: 5ms"),
    ("correlation", "jitter", "correlation is that of the jitter from one packet to the next: it needs a jitter (and "
                              "a delay); add e.g. jitter: 5ms"),
    ("reorder", "delay", "reorder sends some packets at once while the others wait the delay: it needs a delay; add "
                         "e.g. delay: 10ms"),
)


@dataclass(frozen=True)
class Shaping:
    """Shaping of one direction of a link; ``None`` means not shaped in that respect.

    Loss is ``loss_pct`` (a rate; with ``loss_correlation_pct``, netem's correlated ``loss random``) or
    ``loss_gemodel``; ``qdisc`` None is pfifo (a FIFO of ``queue_packets``)."""

    bw_bps: Optional[int] = None
    delay_ns: Optional[int] = None
    jitter_ns: Optional[int] = None
    loss_pct: Optional[float] = None
    queue_packets: Optional[int] = None
    jitter_distribution: Optional[str] = None  # normal, pareto, paretonormal, uniform (None: netem's, uniform)
    delay_correlation_pct: Optional[float] = None
    loss_correlation_pct: Optional[float] = None
    loss_gemodel: Optional[GilbertElliott] = None
    duplicate_pct: Optional[float] = None
    corrupt_pct: Optional[float] = None
    reorder: Optional[Reorder] = None
    qdisc: Optional[QueueDiscipline] = None

    def features(self) -> Set[str]:
        """The features of :data:`FEATURES` that installing this needs."""
        values = {"bw": self.bw_bps, "delay": self.delay_ns, "jitter": self.jitter_ns,
                  "loss": self.loss_pct and not self.loss_correlation_pct,
                  "loss_model": self.loss_gemodel or (self.loss_pct and self.loss_correlation_pct),
                  "duplicate": self.duplicate_pct, "reorder": self.reorder and self.reorder.pct,
                  "corrupt": self.corrupt_pct, "queue": self.queue_packets and self.qdisc is None}
        found = {name for name, value in values.items() if value}
        return found | ({self.qdisc.kind} if self.qdisc is not None else set())

    def unmet_needs(self) -> List[Tuple[str, str, str]]:
        """The rules of :data:`NEEDS` this shaping breaks: a key set without the key it needs."""
        asked = {"jitter": self.jitter_ns, "delay": self.delay_ns, "distribution": self.jitter_distribution,
                 "correlation": self.delay_correlation_pct, "reorder": self.reorder and self.reorder.pct}
        return [(key, needed, why) for key, needed, why in NEEDS if asked[key] and not asked[needed]]

    def without(self, features: Iterable[str]) -> "Shaping":
        """This shaping with every field of ``features`` cleared (what is left when they are left out)."""
        return replace(self, **{name: None for f in features for name in FEATURE_FIELDS[f]})

    def describe(self) -> str:
        """``10mbit 20ms jitter 5ms normal loss gemodel p 1% r 25% reorder 25% gap 5 fq_codel target 5ms``, or
        ``unshaped``."""
        pct = units.format_percent
        parts = []
        if self.bw_bps:
            parts.append(units.format_bandwidth(self.bw_bps))
        if self.delay_ns:
            parts.append(units.format_duration(self.delay_ns))
        if self.jitter_ns:
            parts.append(f"jitter {units.format_duration(self.jitter_ns)}")
            if self.jitter_distribution:
                parts.append(self.jitter_distribution)
            if self.delay_correlation_pct:
                parts.append(f"correlation {pct(self.delay_correlation_pct)}")
        if self.loss_gemodel is not None:
            parts.append(f"loss {self.loss_gemodel.describe()}")
        elif self.loss_pct:
            parts.append(f"loss {pct(self.loss_pct)}")
            if self.loss_correlation_pct:
                parts.append(f"correlation {pct(self.loss_correlation_pct)}")
        if self.duplicate_pct:
            parts.append(f"duplicate {pct(self.duplicate_pct)}")
        if self.corrupt_pct:
            parts.append(f"corrupt {pct(self.corrupt_pct)}")
        if self.reorder is not None and self.reorder.pct:
            parts.append(self.reorder.describe())
        if self.queue_packets:
            parts.append(f"queue {self.queue_packets}")
        if self.qdisc is not None:
            parts.append(self.qdisc.describe())
        return " ".join(parts) or "unshaped"

    @classmethod
    def from_params(cls, params: Dict[str, Any]) -> "Shaping":
        """The shaping of merged spec keys (``egress_params``: key -> parsed value)."""
        return cls(**shaping_changes(params))

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Shaping":
        """The inverse of ``dataclasses.asdict`` (a lab state's or a manifest's shape); keys it lacks are None."""
        values = dict(data)
        if values.get("loss_gemodel") is not None:
            values["loss_gemodel"] = GilbertElliott(**values["loss_gemodel"])
        if values.get("reorder") is not None:
            values["reorder"] = Reorder(**values["reorder"])
        if values.get("qdisc") is not None:
            qdisc = dict(values["qdisc"])
            values["qdisc"] = QUEUE_DISCIPLINES[qdisc.pop("kind")](**qdisc)
        return cls(**values)


def _loss_fields(value: Any) -> Dict[str, Any]:
    plain: Dict[str, Any] = {"loss_pct": None, "loss_correlation_pct": None, "loss_gemodel": None}
    if isinstance(value, GilbertElliottLossParams):
        return {**plain, "loss_gemodel": GilbertElliott(value.p, value.r, value.loss_bad, value.loss_good)}
    if isinstance(value, RandomLossParams):
        return {**plain, "loss_pct": value.rate, "loss_correlation_pct": value.correlation or None}
    return {**plain, "loss_pct": value}


def _qdisc(value: Any) -> Optional[QueueDiscipline]:
    if value is None or isinstance(value, PfifoParams):
        return None
    if isinstance(value, FqCodelParams):
        return FqCodel(value.target, value.interval, value.limit, value.flows, value.ecn)
    if isinstance(value, CakeParams):
        return Cake(value.rtt)
    if isinstance(value, RedParams):
        return Red(value.min, value.max, value.probability, value.burst, value.limit, value.ecn)
    return Pie(value.target, value.limit, value.ecn)


def shaping_changes(params: Dict[str, Any]) -> Dict[str, Any]:
    """The :class:`Shaping` fields that spec keys set (``params``: key -> parsed value, as a ``set_link`` event or a
    merged direction has them; keys absent or None set nothing). ``loss`` sets every loss field, so that a rate
    replaces a model and back."""
    out: Dict[str, Any] = {}
    simple = {"bw": "bw_bps", "delay": "delay_ns", "jitter": "jitter_ns", "queue": "queue_packets",
              "distribution": "jitter_distribution", "correlation": "delay_correlation_pct",
              "duplicate": "duplicate_pct", "corrupt": "corrupt_pct"}
    for key, name in simple.items():
        if params.get(key) is not None:
            out[name] = params[key]
    if params.get("loss") is not None:
        out.update(_loss_fields(params["loss"]))
    reorder = params.get("reorder")
    if reorder is not None:
        out["reorder"] = Reorder(reorder.rate, reorder.gap, reorder.correlation)
    if params.get("qdisc") is not None:
        out["qdisc"] = _qdisc(params["qdisc"])
    return out


@dataclass(frozen=True)
class ResolvedEnd:
    node: str
    ifname: str
    address: ipaddress.IPv4Interface
    egress: Shaping

    def __str__(self) -> str:
        return f"{self.node}:{self.ifname}"


@dataclass(frozen=True)
class ResolvedLink:
    index: int
    a: ResolvedEnd
    b: ResolvedEnd
    weight: int

    @property
    def label(self) -> str:
        """``r1:eth1-r2:eth1``, a link reference the spec accepts."""
        return f"{self.a}-{self.b}"

    def ends(self) -> Tuple[ResolvedEnd, ResolvedEnd]:
        return (self.a, self.b)

    def end(self, node: str) -> ResolvedEnd:
        for end in self.ends():
            if end.node == node:
                return end
        raise KeyError(f"{node!r} is not an end of link {self.index} ({self.label})")

    def features(self) -> Set[str]:
        """The features (``FEATURES``) either direction needs."""
        return self.a.egress.features() | self.b.egress.features()

    def describe(self) -> str:
        """``r1:eth1 <-> r2:eth1 10mbit loss 0.1% queue 100 weight 100`` (both directions if they differ)."""
        if self.a.egress == self.b.egress:
            shaping = self.a.egress.describe()
        else:
            shaping = f"[{self.a.node}->{self.b.node}: {self.a.egress.describe()}; " \
                      f"{self.b.node}->{self.a.node}: {self.b.egress.describe()}]"
        return f"{self.a} <-> {self.b} {shaping} weight {self.weight}"

    def to_dict(self) -> Dict[str, Any]:
        def end(e: ResolvedEnd) -> Dict[str, Any]:
            return {"node": e.node, "ifname": e.ifname, "address": str(e.address), "egress": asdict(e.egress)}

        return {"index": self.index, "a": end(self.a), "b": end(self.b), "weight": self.weight}


class AddressPoolExhausted(ValueError):
    pass


def assign_ifnames(spec: "Spec") -> List[Tuple[str, str]]:
    """Interface name of both ends of every link, in link order."""
    taken: Dict[str, Set[str]] = {}
    for link in spec.links:
        for end in link.endpoints:
            if end.ifname is not None:
                taken.setdefault(end.node, set()).add(end.ifname)
    counters: Dict[str, int] = {}
    names: List[Tuple[str, str]] = []

    def next_name(node: str) -> str:
        used = taken.setdefault(node, set())
        n = counters.get(node, 0)
        while True:
            n += 1
            candidate = f"eth{n}"
            if candidate not in used:
                counters[node] = n
                used.add(candidate)
                return candidate

    for link in spec.links:
        a, b = link.endpoints
        names.append((a.ifname or next_name(a.node), b.ifname or next_name(b.node)))
    return names


def _free_subnets(pool: ipaddress.IPv4Network, avoid: List[ipaddress.IPv4Network]) -> Iterator[ipaddress.IPv4Network]:
    for subnet in pool.subnets(new_prefix=30):
        if not any(subnet.overlaps(other) for other in avoid):
            yield subnet


def allocate_addresses(spec: "Spec") -> List[Tuple[ipaddress.IPv4Interface, ipaddress.IPv4Interface]]:
    """Addresses of both ends of every link; raises ``AddressPoolExhausted``."""
    explicit = [link.addresses[0].network for link in spec.links if link.addresses]
    free = _free_subnets(spec.defaults.address_pool, explicit)
    out = []
    for link in spec.links:
        if link.addresses:
            out.append((link.addresses[0], link.addresses[1]))
            continue
        subnet = next(free, None)
        if subnet is None:
            needed = sum(1 for l in spec.links if not l.addresses)
            raise AddressPoolExhausted(
                f"{spec.defaults.address_pool} has too few free /30 subnets for the {needed} links "
                "without explicit addresses; choose a larger pool, e.g. 10.10.0.0/16"
            )
        hosts = list(subnet.hosts())
        out.append((ipaddress.IPv4Interface(f"{hosts[0]}/30"), ipaddress.IPv4Interface(f"{hosts[1]}/30")))
    return out


def set_fields(params: ShapingParams) -> Dict[str, Any]:
    """The shaping keys ``params`` sets (key -> parsed value; the unset ones left out)."""
    return {k: getattr(params, k) for k in SHAPING_FIELDS if getattr(params, k) is not None}


def egress_params(spec: "Spec", index: int, node: str) -> Dict[str, Any]:
    """Merged shaping fields of the direction leaving ``node`` on link ``index``."""
    link = spec.links[index]
    merged = set_fields(spec.defaults.link)
    merged.update(set_fields(link))
    if node in link.egress:
        merged.update(set_fields(link.egress[node]))
    return merged


def event_shaping(event: ShapingParams) -> Shaping:
    """The shaping fields a ``set_link`` event sets (the others None)."""
    return Shaping.from_params(set_fields(event))


def egress_shaping(spec: "Spec", index: int, node: str) -> Shaping:
    return Shaping.from_params(egress_params(spec, index, node))


def resolve_links(spec: "Spec") -> List[ResolvedLink]:
    ifnames = assign_ifnames(spec)
    addresses = allocate_addresses(spec)
    default_weight = spec.defaults.link.weight or DEFAULT_WEIGHT
    out = []
    for i, link in enumerate(spec.links):
        a, b = link.endpoints
        ends = [
            ResolvedEnd(end.node, ifnames[i][j], addresses[i][j], egress_shaping(spec, i, end.node))
            for j, end in enumerate((a, b))
        ]
        out.append(ResolvedLink(i, ends[0], ends[1], link.weight or default_weight))
    return out


def _matches(ref: Endpoint, node: str, ifname: str) -> bool:
    return ref.node == node and (ref.ifname is None or ref.ifname == ifname)


def find_link(spec: "Spec", ref: LinkRef) -> Tuple[Optional[int], str]:
    """(index, "") for a reference that names exactly one link, else (None, why not)."""
    count = len(spec.links)
    if ref.index is not None:
        if ref.index < count:
            return ref.index, ""
        have = f"links 0..{count - 1}" if count else "no links"
        return None, f"there is no link {ref.index} (the topology has {have})"
    ifnames = assign_ifnames(spec)
    hits = []
    for i, link in enumerate(spec.links):
        (na, nb), (ia, ib) = (e.node for e in link.endpoints), ifnames[i]
        if (_matches(ref.a, na, ia) and _matches(ref.b, nb, ib)) or (_matches(ref.a, nb, ib) and _matches(ref.b, na, ia)):
            hits.append(i)
    if len(hits) == 1:
        return hits[0], ""
    if not hits:
        names = [f"{a.node}-{b.node}" for a, b in (link.endpoints for link in spec.links)]
        listed = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        return None, f"no link connects {ref.a} and {ref.b} ({did_you_mean(ref, names)}links: {listed or 'none'})"
    return None, (
        f"{ref} is ambiguous: links {', '.join(map(str, hits))} all connect {ref.a.node} and {ref.b.node}; "
        "name the interfaces (e.g. r1:eth2-r2:eth2) or use the link's index"
    )


def link_rate(spec: "Spec", ref: LinkRef) -> Tuple[Optional[int], str]:
    """(bits per second, "") of the link ``ref`` names, in the direction it is written (``r2-r3``: r2 -> r3;
    an index: from the link's first end), else (None, why not)."""
    index, why = find_link(spec, ref)
    if index is None:
        return None, why
    ends = spec.links[index].endpoints
    sender = ref.a.node if ref.a is not None else ends[0].node
    receiver = ends[1].node if ends[0].node == sender else ends[0].node
    bps = egress_shaping(spec, index, sender).bw_bps
    if not bps:
        return None, (f"link {ref} has no rate from {sender} to {receiver} (no bw), so a multiple of it means "
                      "nothing; give the flow's rate as a bandwidth (e.g. 60mbit) or the link a bw")
    return bps, ""


def resolve_flow_rates(spec: "Spec") -> List[Any]:
    """``spec.traffic`` with every rate written as a multiple of a link's rate (``10x r2-r3``) turned into
    bits per second; the flows are copies, the others the same objects. The references must resolve
    (``checks`` refuses those that do not)."""
    from .fieldtypes import LinkMultiple

    out = []
    for flow in spec.traffic:
        rate = getattr(flow, "rate", None)
        if isinstance(rate, LinkMultiple):
            bps, why = link_rate(spec, rate.link)
            if bps is None:
                raise ValueError(why)
            flow = flow.model_copy(update={"rate": max(1, round(bps * rate.factor))})
        out.append(flow)
    return out
