"""Link-state database: one link-state packet (LSP) per router, flooded with
sequence numbers.  An LSP lists the router's up neighbours with their link
weights, and the key expressions its local clients subscribe to.

Extension point: ``LinkStatePacket.extra`` carries named per-neighbour weight
maps (e.g. ``{"data": {"r2": 65535}}``) for additional tree sets, so a data
tree with its own weights needs no change to the flooding code.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .codec import CodecError, router_id


@dataclass(frozen=True)
class LinkStatePacket:
    origin: str
    seq: int
    links: Dict[str, int]
    subs: Tuple[str, ...] = ()
    extra: Dict[str, Dict[str, int]] = field(default_factory=dict)
    #: key expressions of the queryables its local clients declared
    queryables: Tuple[str, ...] = ()

    def to_json(self) -> Dict[str, Any]:
        out = {"origin": self.origin, "seq": self.seq, "links": dict(self.links),
               "subs": list(self.subs), "extra": {k: dict(v) for k, v in self.extra.items()}}
        if self.queryables:
            out["queryables"] = list(self.queryables)
        return out

    @staticmethod
    def from_json(obj: Dict[str, Any]) -> "LinkStatePacket":
        try:
            origin = obj["origin"]
            seq = obj["seq"]
            links = obj["links"]
            subs = obj.get("subs", [])
            extra = obj.get("extra", {})
            queryables = obj.get("queryables", [])
        except KeyError as exc:
            raise CodecError(f"LINKSTATE body misses key {exc}") from None
        if not isinstance(origin, str) or not origin or not isinstance(seq, int) or seq < 0:
            raise CodecError("LINKSTATE origin must be a non-empty string and seq a non-negative integer")
        if not isinstance(links, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and 0 < v <= 65535 for k, v in links.items()
        ):
            raise CodecError("LINKSTATE links must map neighbour names to weights 1..65535")
        if not isinstance(subs, list) or not all(isinstance(s, str) and s for s in subs):
            raise CodecError("LINKSTATE subs must be a list of key expressions")
        if not isinstance(queryables, list) or not all(isinstance(q, str) and q for q in queryables):
            raise CodecError("LINKSTATE queryables must be a list of key expressions")
        if not isinstance(extra, dict) or not all(
            isinstance(m, dict) and all(isinstance(k, str) and isinstance(v, int) for k, v in m.items())
            for m in extra.values()
        ):
            raise CodecError("LINKSTATE extra must map names to {neighbour: weight}")
        return LinkStatePacket(origin, seq, dict(links), tuple(subs), {k: dict(v) for k, v in extra.items()},
                               tuple(queryables))


class LinkStateDatabase:
    def __init__(self) -> None:
        self._lsps: Dict[str, LinkStatePacket] = {}
        #: bumped at every stored LSP: what is derived from the database may be cached against it
        self.version = 0

    def update(self, lsp: LinkStatePacket) -> bool:
        """Store ``lsp`` if it is newer than what we hold; True if stored."""
        old = self._lsps.get(lsp.origin)
        if old is not None and old.seq >= lsp.seq:
            return False
        self._lsps[lsp.origin] = lsp
        self.version += 1
        return True

    def get(self, origin: str) -> Optional[LinkStatePacket]:
        return self._lsps.get(origin)

    def all(self) -> List[LinkStatePacket]:
        return [self._lsps[k] for k in sorted(self._lsps)]

    def edges(self, weights: str = "") -> Dict[str, Dict[str, int]]:
        """Directed adjacency with weights, keeping only links both ends report.

        ``weights`` names an ``extra`` weight map overriding the base weights
        ("" = base link weights).
        """
        adj: Dict[str, Dict[str, int]] = {name: {} for name in self._lsps}
        for name, lsp in self._lsps.items():
            override = lsp.extra.get(weights, {}) if weights else {}
            for nbr, w in lsp.links.items():
                other = self._lsps.get(nbr)
                if other is None or name not in other.links:
                    continue
                adj[name][nbr] = override.get(nbr, w)
        return adj

    def subscriptions(self) -> Dict[str, Tuple[str, ...]]:
        return {name: lsp.subs for name, lsp in self._lsps.items()}

    def queryables(self) -> Dict[str, Tuple[str, ...]]:
        return {name: lsp.queryables for name, lsp in self._lsps.items() if lsp.queryables}

    def id_map(self) -> Dict[int, str]:
        """Wire id -> router name; raises if two routers' names collide."""
        out: Dict[int, str] = {}
        for name in self._lsps:
            rid = router_id(name)
            if rid in out and out[rid] != name:
                raise ValueError(f"router names {out[rid]!r} and {name!r} have the same wire id {rid}; rename one")
            out[rid] = name
        return out


def reachable(adj: Dict[str, Dict[str, int]], start: str) -> Iterable[str]:
    seen = {start}
    stack = [start]
    while stack:
        n = stack.pop()
        for m in adj.get(n, {}):
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return seen
