"""Shared helpers for the deploy tests."""
from __future__ import annotations

from testbed.backends.base import Lab, LabEnd, LabLink, LabNode


def lab_from_spec(spec) -> Lab:
    """The Lab a backend would build for ``spec`` (same addresses and shaping), without building it."""
    nodes = {n: LabNode(n, spec.nodes[n].kind, {"netns": f"tbed-{spec.name}-{n}"}) for n in spec.nodes}
    links = []
    for link in spec.resolved_links():
        ends = [LabEnd(e.node, e.ifname, str(e.address)) for e in (link.a, link.b)]
        links.append(LabLink(link.index, ends[0], ends[1], link.weight, link.a.egress, link.b.egress))
    return Lab(spec.name, "mininet", nodes, links)
