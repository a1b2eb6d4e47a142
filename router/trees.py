"""Shortest-path trees, one rooted at every router, from a weighted graph.

Every router computes the same trees from the same link-state database:
Dijkstra with ties broken by router name, so equal-cost paths resolve the
same way everywhere (this is what keeps forwarding free of duplicates).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set


@dataclass
class Tree:
    root: str
    parent: Dict[str, Optional[str]]
    distance: Dict[str, int]
    children: Dict[str, List[str]] = field(default_factory=dict)

    def subtree(self, node: str) -> Set[str]:
        out = {node}
        stack = [node]
        while stack:
            for c in self.children.get(stack.pop(), []):
                if c not in out:
                    out.add(c)
                    stack.append(c)
        return out

    def to_json(self) -> Dict[str, object]:
        return {"root": self.root, "parent": dict(self.parent), "distance": dict(self.distance)}


def shortest_path_tree(adj: Dict[str, Dict[str, int]], root: str) -> Tree:
    dist: Dict[str, int] = {root: 0}
    parent: Dict[str, Optional[str]] = {root: None}
    done: Set[str] = set()
    heap = [(0, root)]
    while heap:
        d, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        for v, w in adj.get(u, {}).items():
            if v in done:
                continue
            nd = d + w
            old = dist.get(v)
            if old is None or nd < old or (nd == old and u < (parent[v] or "")):
                dist[v] = nd
                parent[v] = u
                heapq.heappush(heap, (nd, v))
    children: Dict[str, List[str]] = {n: [] for n in dist}
    for n, p in parent.items():
        if p is not None:
            children[p].append(n)
    for c in children.values():
        c.sort()
    return Tree(root, parent, dist, children)


def compute_trees(adj: Dict[str, Dict[str, int]]) -> Dict[str, Tree]:
    return {root: shortest_path_tree(adj, root) for root in sorted(adj)}
