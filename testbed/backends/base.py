"""The lab a backend builds: nodes (each a named network namespace) and shaped links."""
from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field
from typing import Optional, Protocol

from testbed.shaping import Port
from testbed.spec.resolve import Shaping


@dataclass(frozen=True)
class LabNode:
    name: str
    kind: str  # "router" or "host"
    netns: str
    pid: Optional[int] = None  # the backend's process holding the namespace, if any


@dataclass(frozen=True)
class LabEnd:
    node: str
    netns: str
    ifname: str
    address: str  # CIDR, e.g. "10.10.0.1/30"

    @property
    def ip(self) -> str:
        return str(ipaddress.ip_interface(self.address).ip)

    @property
    def port(self) -> Port:
        return Port(self.netns, self.ifname)


@dataclass(frozen=True)
class LabLink:
    index: int
    a: LabEnd
    b: LabEnd
    weight: int
    shape_ab: Shaping  # traffic a -> b, shaped at a's egress
    shape_ba: Shaping

    @property
    def label(self) -> str:
        return f"{self.a.node}:{self.a.ifname}<->{self.b.node}:{self.b.ifname}"

    def end(self, node: str) -> LabEnd:
        if node == self.a.node:
            return self.a
        if node == self.b.node:
            return self.b
        raise KeyError(f"link {self.label} has no end on node {node!r}")

    def other(self, node: str) -> LabEnd:
        return self.b if self.end(node) is self.a else self.a


@dataclass
class Lab:
    name: str
    backend: str
    nodes: dict[str, LabNode]
    links: list[LabLink]
    #: what shaping was really installed per direction, and anything left out
    applied: list[dict] = field(default_factory=list)

    def node(self, name: str) -> LabNode:
        try:
            return self.nodes[name]
        except KeyError:
            raise KeyError(f"lab {self.name!r} has no node {name!r} (nodes: {', '.join(self.nodes)})") from None

    def find_link(self, ref: "int | str") -> LabLink:
        """A link by index, or by `a-b` / `a:eth1-b:eth1` naming its two ends."""
        if isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()):
            i = int(ref)
            if not 0 <= i < len(self.links):
                raise KeyError(f"lab {self.name!r} has no link {i} (links 0..{len(self.links) - 1})")
            return self.links[i]
        left, sep, right = str(ref).partition("-")
        if not sep:
            raise KeyError(f"link reference {ref!r} is neither an index nor 'a-b'")
        matches = [link for link in self.links if _end_matches(link, left, right) or _end_matches(link, right, left)]
        if len(matches) != 1:
            what = "no link" if not matches else "several links"
            raise KeyError(f"lab {self.name!r} has {what} matching {ref!r}")
        return matches[0]

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "backend": self.backend,
            "nodes": {n.name: {"kind": n.kind, "netns": n.netns, "pid": n.pid} for n in self.nodes.values()},
            "links": [
                {
                    "index": link.index,
                    "weight": link.weight,
                    "a": _end_json(link.a),
                    "b": _end_json(link.b),
                    "shape_ab": asdict(link.shape_ab),
                    "shape_ba": asdict(link.shape_ba),
                }
                for link in self.links
            ],
            "applied": self.applied,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Lab":
        nodes = {name: LabNode(name, v["kind"], v["netns"], v.get("pid")) for name, v in data["nodes"].items()}
        links = [
            LabLink(
                index=d["index"],
                a=LabEnd(**d["a"]),
                b=LabEnd(**d["b"]),
                weight=d["weight"],
                shape_ab=Shaping(**d["shape_ab"]),
                shape_ba=Shaping(**d["shape_ba"]),
            )
            for d in data["links"]
        ]
        return cls(data["name"], data["backend"], nodes, links, list(data.get("applied", [])))


def _end_json(end: LabEnd) -> dict:
    return {"node": end.node, "netns": end.netns, "ifname": end.ifname, "address": end.address}


def _end_matches(link: LabLink, left: str, right: str) -> bool:
    def match(end: LabEnd, ref: str) -> bool:
        node, _, ifname = ref.partition(":")
        return end.node == node and (not ifname or end.ifname == ifname)

    return match(link.a, left) and match(link.b, right)


class Backend(Protocol):
    name: str

    def planned_netns(self, spec) -> list[str]:
        """The namespace names ``up`` will create (recorded before building, for `clean`)."""

    def up(self, spec) -> Lab:
        """Create nodes and links (addresses assigned, interfaces up, not yet shaped)."""

    def down(self) -> None:
        """Remove everything ``up`` created."""
