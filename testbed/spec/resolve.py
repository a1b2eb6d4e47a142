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
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Set, Tuple

from runfolder import units
from runfolder.wording import did_you_mean
from .fieldtypes import Endpoint, LinkRef
from .models import DEFAULT_WEIGHT, SHAPING_FIELDS, ShapingParams

if TYPE_CHECKING:  # pragma: no cover
    from .topology import Spec

__all__ = [
    "Shaping", "ResolvedEnd", "ResolvedLink", "AddressPoolExhausted",
    "assign_ifnames", "allocate_addresses", "egress_shaping", "resolve_links", "find_link", "link_rate",
    "resolve_flow_rates",
]


@dataclass(frozen=True)
class Shaping:
    """Shaping of one direction of a link; ``None`` means not shaped in that respect."""

    bw_bps: Optional[int] = None
    delay_ns: Optional[int] = None
    jitter_ns: Optional[int] = None
    loss_pct: Optional[float] = None
    queue_packets: Optional[int] = None

    def required_capabilities(self) -> Set[str]:
        """Subset of {bw, delay, jitter, loss, queue} that installing this needs."""
        values = {"bw": self.bw_bps, "delay": self.delay_ns, "jitter": self.jitter_ns,
                  "loss": self.loss_pct, "queue": self.queue_packets}
        return {name for name, value in values.items() if value}

    def describe(self) -> str:
        """``10mbit 5ms jitter 1ms loss 0.1% queue 100``, or ``unshaped``."""
        parts = []
        if self.bw_bps:
            parts.append(units.format_bandwidth(self.bw_bps))
        if self.delay_ns:
            parts.append(units.format_duration(self.delay_ns))
        if self.jitter_ns:
            parts.append(f"jitter {units.format_duration(self.jitter_ns)}")
        if self.loss_pct:
            parts.append(f"loss {units.format_percent(self.loss_pct)}")
        if self.queue_packets:
            parts.append(f"queue {self.queue_packets}")
        return " ".join(parts) or "unshaped"

    @classmethod
    def from_params(cls, params: Dict[str, Any]) -> "Shaping":
        return cls(bw_bps=params.get("bw"), delay_ns=params.get("delay"), jitter_ns=params.get("jitter"),
                   loss_pct=params.get("loss"), queue_packets=params.get("queue"))


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

    def required_capabilities(self) -> Set[str]:
        return self.a.egress.required_capabilities() | self.b.egress.required_capabilities()

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


def _set_fields(params: ShapingParams) -> Dict[str, Any]:
    return {k: getattr(params, k) for k in SHAPING_FIELDS if getattr(params, k) is not None}


def egress_params(spec: "Spec", index: int, node: str) -> Dict[str, Any]:
    """Merged shaping fields of the direction leaving ``node`` on link ``index``."""
    link = spec.links[index]
    merged = _set_fields(spec.defaults.link)
    merged.update(_set_fields(link))
    if node in link.egress:
        merged.update(_set_fields(link.egress[node]))
    return merged


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
