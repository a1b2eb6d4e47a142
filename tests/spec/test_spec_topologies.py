"""Every shipped topology validates, resolves consistently and round-trips through JSON."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.spec import Spec, load_spec

TOPOLOGIES = sorted((Path(__file__).resolve().parents[2] / "topologies").glob("*.yaml"))
#: the examples with delay or an AQM queue: on a kernel without netem (this one) they run through the impairment
#: appliance (docs/impairments.md); every other example needs no netem
NEEDS_NETEM = {"netem-example.yaml", "wan-diamond.yaml", "aqm-diamond.yaml"}


def test_the_required_topologies_are_shipped():
    names = {p.name for p in TOPOLOGIES}
    assert {"line.yaml", "diamond.yaml", "triangle.yaml", "ring8.yaml", "ring50.yaml"} <= names
    sizes = {p.name: len(load_spec(p).routers()) for p in TOPOLOGIES}
    assert sizes["line.yaml"] == 3 and sizes["diamond.yaml"] == 4 and sizes["triangle.yaml"] == 3
    assert sizes["ring8.yaml"] == 8 and sizes["ring50.yaml"] == 50
    assert any(n >= 12 and name not in ("ring50.yaml",) for name, n in sizes.items()), sizes


@pytest.mark.parametrize("path", TOPOLOGIES, ids=[p.name for p in TOPOLOGIES])
def test_topology_validates_and_resolves(path):
    spec = load_spec(path)
    links = spec.resolved_links()
    assert len(links) == len(spec.links)
    addresses = [end.address for link in links for end in link.ends()]
    assert len({a.ip for a in addresses}) == len(addresses), "addresses must be unique"
    subnets = [link.a.address.network for link in links]
    assert len(set(subnets)) == len(subnets), "one subnet per link"
    for link in links:
        assert link.a.address.network == link.b.address.network
    ifaces = [(end.node, end.ifname) for link in links for end in link.ends()]
    assert len(set(ifaces)) == len(ifaces), "interface names unique per node"
    for node in spec.routers():
        settings = spec.router_settings(node)
        assert settings.keepalive < settings.lease
    linked = {end.node for link in links for end in link.ends()}
    assert linked == set(spec.nodes), f"nodes without links: {set(spec.nodes) - linked}"
    assert spec.captured_links() == sorted(set(spec.captured_links()))


@pytest.mark.parametrize("path", TOPOLOGIES, ids=[p.name for p in TOPOLOGIES])
def test_topology_round_trips_through_json(path):
    spec = load_spec(path)
    again = Spec.model_validate(json.loads(spec.model_dump_json(by_alias=True)))
    assert again == spec


@pytest.mark.parametrize("path", [p for p in TOPOLOGIES if p.name not in NEEDS_NETEM], ids=lambda p: p.name)
def test_default_examples_need_no_netem(path):
    caps = load_spec(path).features()
    assert not caps & {"delay", "jitter"}, f"{path.name} needs netem: {caps}"


def test_netem_example_needs_netem():
    assert {"delay", "jitter", "loss"} <= load_spec(TOPOLOGIES[0].parent / "netem-example.yaml").features()


def test_the_wide_area_diamonds_are_the_diamond_with_delays():
    """wan-diamond: the diamond with 10 + 15 ms on the preferred path and 20 + 20 ms on the other; aqm-diamond:
    the same with fq_codel as the bottleneck's queue (docs/benchmarks.md's congestion and AQM tables)."""
    diamond = load_spec(TOPOLOGIES[0].parent / "diamond.yaml")
    for name, bottleneck_queue in (("wan-diamond.yaml", None), ("aqm-diamond.yaml", "fq_codel")):
        wan = load_spec(TOPOLOGIES[0].parent / name)
        delays = {frozenset((l.a.node, l.b.node)): l.a.egress.delay_ns // 1_000_000 for l in wan.resolved_links()}
        assert delays == {frozenset(("r1", "r2")): 10, frozenset(("r2", "r4")): 15,
                          frozenset(("r1", "r3")): 20, frozenset(("r3", "r4")): 20}
        assert [l.weight for l in wan.resolved_links()] == [l.weight for l in diamond.resolved_links()]
        bottleneck = next(l for l in wan.resolved_links() if {l.a.node, l.b.node} == {"r2", "r4"})
        assert (bottleneck.a.egress.qdisc.kind if bottleneck.a.egress.qdisc else None) == bottleneck_queue


def test_ring50_shapes_every_link():
    spec = load_spec(TOPOLOGIES[0].parent / "ring50.yaml")
    for link in spec.resolved_links():
        assert link.a.egress.bw_bps and link.b.egress.bw_bps, link.label


def test_diamond_prefers_the_bottleneck_path():
    spec = load_spec(TOPOLOGIES[0].parent / "diamond.yaml")
    links = {frozenset((l.a.node, l.b.node)): l for l in spec.resolved_links()}
    short = links[frozenset(("r1", "r2"))].weight + links[frozenset(("r2", "r4"))].weight
    long = links[frozenset(("r1", "r3"))].weight + links[frozenset(("r3", "r4"))].weight
    assert short < long
    assert links[frozenset(("r2", "r4"))].a.egress.bw_bps < links[frozenset(("r1", "r3"))].a.egress.bw_bps
