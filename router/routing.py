"""Routing table: which neighbour routers a publication goes to.

A publication that entered the network at router O travels down the
shortest-path tree rooted at O.  At router X it goes to each child c of X in
that tree whose subtree holds a router with a matching subscription.

Tree sets: the table holds one or more named tree sets, each computed from its
own link weights (``""`` = the base weights in the LSPs, any other name = the
LSPs' ``extra`` weight map of that name) and serving a set of priorities.
The router uses two: "default" and "data" (``node.tree_sets_for``, from the
``data_priorities`` config key); the data trees use the LSPs' ``extra["data"]``
weights, which the congestion monitor raises to block a link.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

from . import keyexpr
from .codec import NUM_PRIORITIES
from .linkstate import LinkStateDatabase
from .trees import Tree, compute_trees


@dataclass(frozen=True)
class TreeSetSpec:
    name: str
    weights: str  # "" = base link weights, else name of an LSP extra weight map
    priorities: FrozenSet[int]


DEFAULT_TREE_SETS = (TreeSetSpec("default", "", frozenset(range(NUM_PRIORITIES))),)


@dataclass
class RecomputeResult:
    duration_ns: int
    routers: int
    links: int


class RoutingTable:
    def __init__(self, self_name: str, tree_sets: Sequence[TreeSetSpec] = DEFAULT_TREE_SETS) -> None:
        self.self_name = self_name
        self.specs = list(tree_sets)
        self.trees: Dict[str, Dict[str, Tree]] = {s.name: {} for s in self.specs}
        # priority -> index into self.specs
        self.set_of_priority: List[int] = [0] * NUM_PRIORITIES
        for i, spec in enumerate(self.specs):
            for p in spec.priorities:
                self.set_of_priority[p] = i
        self.subs: Dict[str, Tuple[str, ...]] = {}
        self._sub_sets: Dict[str, keyexpr.KeySet] = {}
        self.id_to_name: Dict[int, str] = {}
        # per tree set: origin name -> {child neighbour: routers in its subtree}
        self._branches: List[Dict[str, Dict[str, FrozenSet[str]]]] = [{} for _ in self.specs]
        self._cache: List[Dict[Tuple[str, str], Tuple[str, ...]]] = [{} for _ in self.specs]

    def recompute(self, lsdb: LinkStateDatabase) -> RecomputeResult:
        t0 = time.monotonic_ns()
        self.id_to_name = lsdb.id_map()
        self._set_subscriptions(lsdb)
        links = 0
        for i, spec in enumerate(self.specs):
            adj = lsdb.edges(spec.weights)
            links = sum(len(v) for v in adj.values()) // 2
            trees = compute_trees(adj) if self.self_name in adj else {}
            self.trees[spec.name] = trees
            branches: Dict[str, Dict[str, FrozenSet[str]]] = {}
            for origin, tree in trees.items():
                if self.self_name not in tree.parent:
                    continue
                branches[origin] = {c: frozenset(tree.subtree(c)) for c in tree.children.get(self.self_name, [])}
            self._branches[i] = branches
            self._cache[i] = {}
        return RecomputeResult(time.monotonic_ns() - t0, len(self.subs), links)

    def _set_subscriptions(self, lsdb: LinkStateDatabase) -> None:
        subs = lsdb.subscriptions()
        old = self.subs
        # a router whose subscriptions did not change keeps its set (one router declaring 20 000 keys
        # does not rebuild every other router's)
        self._sub_sets = {r: (self._sub_sets[r] if old.get(r) == keys and r in self._sub_sets
                              else keyexpr.KeySet(keys)) for r, keys in subs.items()}
        self.subs = subs

    def update_subscriptions(self, lsdb: LinkStateDatabase) -> None:
        self._set_subscriptions(lsdb)
        for c in self._cache:
            c.clear()

    def next_hops(self, priority: int, origin: str, key: str) -> Tuple[str, ...]:
        """Neighbour routers to forward a publication on ``key`` from ``origin`` to."""
        return self.next_hops_in_set(self.set_of_priority[priority], origin, key)

    def next_hops_in_set(self, i: int, origin: str, key: str) -> Tuple[str, ...]:
        cache = self._cache[i]
        ck = (origin, key)
        hops = cache.get(ck)
        if hops is None:
            hops = cache[ck] = self._compute_hops(i, origin, key)
        return hops

    def _compute_hops(self, i: int, origin: str, key: str) -> Tuple[str, ...]:
        out: List[str] = []
        for child, routers in sorted(self._branches[i].get(origin, {}).items()):
            if any(self._sub_sets[r].matches(key) for r in routers if r in self._sub_sets):
                out.append(child)
        return tuple(out)

    def describe(self) -> Dict[str, object]:
        return {
            "tree_sets": {s.name: {"weights": s.weights or "base", "priorities": sorted(s.priorities)} for s in self.specs},
            "trees": {name: {root: t.to_json() for root, t in trees.items()} for name, trees in self.trees.items()},
            "branches": {
                s.name: {o: {c: sorted(r) for c, r in b.items()} for o, b in self._branches[i].items()}
                for i, s in enumerate(self.specs)
            },
        }

    def origin_name(self, rid: int) -> Optional[str]:
        return self.id_to_name.get(rid)
