"""bench/appliance_bench.py's labs: which of their links cross the impairment appliance (no lab is built; nothing
about speed is asserted)."""
from __future__ import annotations

import sys
from pathlib import Path

from testbed.kernel import KernelCapabilities
from testbed.links.provider import appliance_links
from testbed.spec import load_spec, load_spec_text

sys.path.insert(0, "bench")
from appliance_bench import delayed_ring, pairs_topology  # noqa: E402  (the benchmark's own labs)

#: a kernel with every qdisc: the benchmark's labs force the appliance all the same
NETEM_HOST = KernelCapabilities(qdiscs={k: True for k in ("htb", "netem", "pfifo", "fq_codel")},
                                iptables_statistic=True)


def test_the_measured_links_cross_the_appliance_and_the_plain_ones_stay_veths():
    spec = load_spec_text(pairs_topology(4, 4), filename="appbench.yaml")
    through = appliance_links(spec, NETEM_HOST, force_appliance=spec.impairments == "appliance")
    assert [spec.resolved_links()[i].a.node for i in through] == ["c0a", "c1a", "c2a", "c3a"]


def test_a_zero_delay_is_no_feature_so_the_link_stays_a_veth():
    spec = load_spec_text(pairs_topology(1, 0, through="delay: 0ms"), filename="appbench.yaml")
    assert appliance_links(spec, NETEM_HOST, force_appliance=True) == []


def test_the_delayed_ring_is_ring50_with_every_link_through_the_appliance():
    path = Path("topologies/ring50.yaml")
    plain = load_spec(path)
    spec = load_spec_text(delayed_ring(path.read_text()), filename=str(path))
    assert spec.name != plain.name and len(spec.links) == len(plain.links) == 50
    assert len(appliance_links(spec, NETEM_HOST, force_appliance=True)) == 50
    assert all(link.a.egress.delay_ns == 5_000_000 and link.a.egress.bw_bps == plain_link.a.egress.bw_bps
               for link, plain_link in zip(spec.resolved_links(), plain.resolved_links()))
