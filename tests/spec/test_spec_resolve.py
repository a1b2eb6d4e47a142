"""Resolution: merging order, interface names, addresses, link references, settings."""
from __future__ import annotations

import ipaddress
import textwrap

import pytest
from pydantic import ValidationError

from runfolder.priorities import Priority
from testbed.spec import SpecError, load_spec_text
from testbed.spec.resolve import Shaping


def spec_of(text: str):
    return load_spec_text(textwrap.dedent(text), filename="t.yaml")


def test_shaping_merges_defaults_then_link_then_egress():
    spec = spec_of("""\
        name: t
        defaults:
          link: {bw: 10mbit, queue: 50, loss: 1%}
        nodes: {a: {}, b: {}}
        links:
          - endpoints: [a, b]
            bw: 20mbit
            egress:
              b: {bw: 1mbit, queue: 7}
        """)
    (link,) = spec.resolved_links()
    assert link.a.egress == Shaping(bw_bps=20_000_000, loss_pct=1.0, queue_packets=50)
    assert link.b.egress == Shaping(bw_bps=1_000_000, loss_pct=1.0, queue_packets=7)
    assert link.features() == {"bw", "loss", "queue"}
    assert link.describe() == "a:eth1 <-> b:eth1 [a->b: 20mbit loss 1% queue 50; b->a: 1mbit loss 1% queue 7] weight 100"


def test_unshaped_link_needs_nothing():
    spec = spec_of("name: t\nnodes: {a: {}, b: {}}\nlinks: [{endpoints: [a, b]}]\n")
    (link,) = spec.resolved_links()
    assert link.a.egress == Shaping() and link.features() == set()
    assert spec.features() == set()
    assert link.describe() == "a:eth1 <-> b:eth1 unshaped weight 100"


def test_weight_default_then_defaults_then_link():
    spec = spec_of("""\
        name: t
        defaults: {link: {weight: 7}}
        nodes: {a: {}, b: {}, c: {}}
        links:
          - endpoints: [a, b]
          - endpoints: [b, c]
            weight: 3
        """)
    assert [l.weight for l in spec.resolved_links()] == [7, 3]


def test_interface_names_skip_explicit_ones_in_link_order():
    spec = spec_of("""\
        name: t
        nodes: {a: {}, b: {}, c: {}, d: {}}
        links:
          - endpoints: [a, b]
          - endpoints: ["a:eth1", c]
          - endpoints: [a, d]
          - endpoints: ["b:uplink", "a:eth3"]
        """)
    names = [(str(l.a), str(l.b)) for l in spec.resolved_links()]
    assert names == [("a:eth2", "b:eth1"), ("a:eth1", "c:eth1"), ("a:eth4", "d:eth1"), ("b:uplink", "a:eth3")]


def test_parallel_links_with_distinct_interfaces_are_allowed():
    spec = spec_of("""\
        name: t
        nodes: {a: {}, b: {}}
        links:
          - endpoints: ["a:eth1", "b:eth1"]
          - endpoints: ["a:eth2", "b:eth2"]
        """)
    assert len(spec.resolved_links()) == 2
    assert spec.link_index("a:eth2-b:eth2") == 1
    assert spec.link_index("b:eth1-a") == 0
    with pytest.raises(KeyError, match="ambiguous"):
        spec.link_index("a-b")


def test_addresses_come_from_the_pool_and_skip_explicit_subnets():
    spec = spec_of("""\
        name: t
        defaults: {address_pool: 192.168.0.0/24}
        nodes: {a: {}, b: {}, c: {}}
        links:
          - endpoints: [a, b]
            addresses: [192.168.0.1/30, 192.168.0.2/30]
          - endpoints: [b, c]
          - endpoints: [a, c]
        """)
    got = [(str(l.a.address), str(l.b.address)) for l in spec.resolved_links()]
    assert got == [("192.168.0.1/30", "192.168.0.2/30"), ("192.168.0.5/30", "192.168.0.6/30"),
                   ("192.168.0.9/30", "192.168.0.10/30")]
    assert isinstance(spec.resolved_links()[0].a.address, ipaddress.IPv4Interface)


def test_router_settings_merge_node_overrides_over_defaults():
    spec = spec_of("""\
        name: t
        defaults:
          router: {scheduler: wrr, wrr_weights: {realtime: 4, 5: 1}, lease: 6s}
        nodes:
          a: {router: {lease: 9s, log_level: debug}}
          b: {}
          h: {kind: host}
        links: [{endpoints: [a, b]}, {endpoints: [b, h]}]
        """)
    a, b = spec.router_settings("a"), spec.router_settings("b")
    assert (a.lease, a.log_level, a.scheduler) == (9 * 10**9, "debug", "wrr")
    assert (b.lease, b.log_level) == (6 * 10**9, "info")
    assert a.wrr_weights == {Priority.REALTIME: 4, Priority.DATA: 1}
    assert a.keepalive == 10**9 and a.flow_ttl == 5 * 10**9 and a.congestion_aware is True
    assert spec.routers() == ["a", "b"] and spec.hosts() == ["h"]
    with pytest.raises(KeyError):
        spec.router_settings("zz")


def test_null_node_means_a_default_router_and_yaml_keywords_stay_names():
    spec = spec_of("name: t\nnodes:\n  on:\n  no: {}\nlinks: [{endpoints: [on, no]}]\n")
    assert spec.routers() == ["on", "no"]


def test_capture_list_and_expectations():
    spec = spec_of("""\
        name: t
        nodes: {a: {}, b: {}, c: {}}
        links: [{endpoints: [a, b]}, {endpoints: [b, c]}]
        traffic:
          - {profile: constant, name: f, from: a, to: [c], rate: 1mbit, priority: 1, express: true}
          - {profile: zpub, node: a, subscribers: [c]}
        capture: {links: [b-c], snaplen: 128}
        expect:
          - "latency.p99 <= 50ms for priority realtime"
          - {metric: throughput, op: ">=", value: 900kbit, flow: f}
          - "reroute.time < 1.5s for flow zpub.pub1"
          - "reroutes_per_episode <= 1"
        """)
    assert spec.captured_links() == [1]
    assert spec.traffic[0].priority is Priority.REALTIME and spec.traffic[0].key_expr == "flows/f"
    assert spec.traffic[1].message_size() == 12500  # 2mbit * 50ms / 8
    assert spec.flow_names() == ["f", "zpub", "zpub.pub1", "zpub.pub2", "zpub.realtime"]
    e = spec.expect
    assert (e[0].metric, e[0].op, e[0].value, e[0].priority) == ("latency.p99", "<=", 50_000_000, Priority.REALTIME)
    assert (e[1].value, e[1].flow) == (900_000, "f")
    assert e[2].value == 1_500_000_000 and e[2].describe() == "reroute.time < 1.5s for flow zpub.pub1"
    assert e[3].value == 1


def test_spec_built_in_python_is_checked_too():
    from testbed.spec import Spec

    with pytest.raises(ValueError, match=r"links\[0\].endpoints\[1\]: unknown node 'c'"):
        Spec.model_validate({"name": "t", "nodes": {"a": {}, "b": {}}, "links": [{"endpoints": ["a", "c"]}]})


def test_models_are_frozen():
    spec = spec_of("name: t\nnodes: {a: {}}\n")
    with pytest.raises(ValidationError, match="frozen"):
        spec.name = "u"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        spec.links  # noqa: B018  (no links: still a list)
        spec.defaults.link.bw = 5  # type: ignore[misc]


def test_yaml_anchors_and_merge_keys_work():
    text = textwrap.dedent("""\
        name: t
        nodes: {a: {}, b: {}, c: {}}
        defaults:
          link: &slow {bw: 1mbit, queue: 10}
        links:
          - {<<: *slow, endpoints: [a, b]}
          - {<<: *slow, endpoints: [b, c], bw: 2mbit}
        """)
    spec = load_spec_text(text)
    assert [l.bw for l in spec.links] == [1_000_000, 2_000_000]
    assert [l.queue for l in spec.links] == [10, 10]


def test_a_typo_inside_a_merged_anchor_points_at_the_anchor_line():
    text = "name: t\nnodes: {a: {}, b: {}}\nx: &p {bw: fast}\nlinks:\n  - {<<: *p, endpoints: [a, b]}\n"
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="m.yaml")
    lines = {(p.line, p.path) for p in info.value.problems}
    assert (3, "x") in lines  # unknown top-level key x
    assert (3, "links[0].bw") in lines  # the bad value lives on the anchor's line


def test_router_settings_can_be_forced_on_every_node():
    from testbed.spec import load_spec_text

    spec = load_spec_text(
        "name: t\ndefaults: {router: {congestion_aware: true}}\n"
        "nodes: {a: {router: {congestion_aware: true, scheduler: wrr}}, b: {}}\n"
        "links: [{endpoints: [a, b]}]\n")
    off = spec.with_router_settings(congestion_aware=False)
    assert not off.router_settings("a").congestion_aware and not off.router_settings("b").congestion_aware
    assert off.router_settings("a").scheduler == "wrr"
    assert spec.router_settings("a").congestion_aware  # the original is unchanged
    import pytest

    with pytest.raises(KeyError, match="unknown router settings"):
        spec.with_router_settings(congestion_awar=False)


_MULTIPLE_TOPOLOGY = """\
    name: t
    nodes: {r1: {}, r2: {}, r3: {}}
    links:
      - endpoints: [r1, r2]
        bw: 20mbit
      - endpoints: [r2, r3]
        egress:
          r2: {bw: 6mbit}
    traffic:
      - {profile: constant, name: noisy, from: r1, to: [r3], rate: RATE}
    """


def _multiple(rate: str):
    return spec_of(_MULTIPLE_TOPOLOGY.replace("RATE", repr(rate)))


@pytest.mark.parametrize("rate, bps", [
    ("10x r2-r3", 60_000_000),        # the direction as written: r2 -> r3 is 6 Mbit/s
    ("2.5 x r1-r2", 50_000_000),
    ("0.5x 1", 3_000_000),            # by index: from the link's first end (r2) to its second
    ("10mbit", 10_000_000),
])
def test_a_flow_rate_may_be_a_multiple_of_a_link_rate_in_the_direction_written(rate, bps):
    spec = _multiple(rate)
    (flow,) = spec.traffic
    assert flow.rate == bps
    # what a run's manifest keeps is the rate that ran, and it reads back the same
    again = type(spec).model_validate_json(spec.model_dump_json(by_alias=True))
    assert again.traffic[0].rate == bps


@pytest.mark.parametrize("rate, message", [
    ("10x r3-r2", "link r3-r2 has no rate from r3 to r2 (no bw)"),
    ("10x r1-r3", "no link connects r1 and r3"),
    ("10x 7", "there is no link 7"),
    ("10x banana", "'banana' is not a link"),
    ("0x r2-r3", "must be greater than zero"),
    ("x r2-r3", "or a multiple of a link's rate, e.g. 10x r2-r3"),
])
def test_a_multiple_of_a_link_rate_that_means_nothing_is_refused_at_the_rate(rate, message):
    with pytest.raises(SpecError) as err:
        _multiple(rate)
    text = str(err.value)
    assert message in text and "traffic[0].rate" in text and "t.yaml:" in text
