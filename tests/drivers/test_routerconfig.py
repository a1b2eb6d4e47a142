"""Router configs from spec + lab: neighbours, addresses, weights, per-direction capacities,
settings mapping — and every generated config is accepted by the router's own loader."""
from __future__ import annotations

from pathlib import Path

import pytest

from router.config import config_from_dict
from testbed.drivers.routerconfig import RouterPorts, router_config, settings_to_router_keys
from testbed.spec import load_spec, load_spec_text
from tests.deploy.helpers import lab_from_spec

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"

SPEC = """
name: cfgtest
defaults:
  link: {bw: 20mbit}
  router: {scheduler: wrr, wrr_weights: {realtime: 9, data_low: 2}, lease: 2s, keepalive: 500ms,
           batch_time: 250us, drop_deadline: 3ms, queue_batches: 6, log_level: debug}
nodes:
  r1: {}
  r2: {router: {scheduler: strict}}
  r3: {}
  h1: {kind: host}
links:
  - endpoints: ["r1:eth1", "r2:eth1"]
    weight: 10
    egress: {r2: {bw: 5mbit}}
  - endpoints: ["r1:eth2", "r2:eth2"]
  - endpoints: [r2, r3]
  - endpoints: [r3, h1]
"""


def configs(spec, ports=RouterPorts()):
    lab = lab_from_spec(spec)
    return {n: router_config(spec, lab, n, mgmt_ip=f"100.100.0.{4 * i + 2}", install_dir=f"/opt/t/{n}/",
                             admin_token="tok-123456789", ports=ports)
            for i, n in enumerate(spec.routers())}


def test_neighbours_addresses_weights_and_capacity_per_direction():
    spec = load_spec_text(SPEC, filename="cfgtest.yaml")
    cfg = configs(spec)
    r1, r2, r3 = cfg["r1"], cfg["r2"], cfg["r3"]
    links = spec.resolved_links()
    # r1 listens on both of its data addresses (parallel links), never on the management address.
    assert r1["router_listen"] == [f"{links[0].a.address.ip}:7447", f"{links[1].a.address.ip}:7447"]
    assert r1["metrics_listen"] == "100.100.0.2:9464"
    assert r1["client_listen"] == ["127.0.0.1:7448"]
    # Parallel links: one neighbour entry (the first link), the other end's data address.
    assert r1["neighbours"] == [{"name": "r2", "address": str(links[0].b.address.ip), "port": 7447,
                                 "weight": 10, "link_capacity_bps": 20_000_000}]
    # r2 -> r1 is shaped at 5mbit by egress: the capacity is per direction.
    r2_to_r1 = next(n for n in r2["neighbours"] if n["name"] == "r1")
    assert r2_to_r1["link_capacity_bps"] == 5_000_000 and r2_to_r1["weight"] == 10
    # A host runs no router: it is nobody's neighbour and r3 does not listen towards it.
    assert [n["name"] for n in r3["neighbours"]] == ["r2"]
    assert r3["router_listen"] == [f"{links[2].b.address.ip}:7447"]
    assert "h1" not in cfg
    assert r1["event_log"] == "/opt/t/r1/events.jsonl"
    assert r1["admin_token"] == "tok-123456789"


def test_router_settings_are_mapped():
    spec = load_spec_text(SPEC, filename="cfgtest.yaml")
    cfg = configs(spec)
    r1, r2 = cfg["r1"], cfg["r2"]
    assert r1["scheduler"] == "wrr" and r2["scheduler"] == "strict"
    assert r1["wrr_weights"] == {"1": 9, "6": 2}
    assert r1["lease_ms"] == 2000 and r1["keepalive_ms"] == 500
    assert r1["batch_time_limit_us"] == 250 and r1["drop_deadline_ms"] == 3.0
    assert r1["queue_sizes"] == [6] * 8
    assert r1["log_level"] == "DEBUG"
    parsed = config_from_dict(r1)
    assert parsed.pipeline.wrr_weights[1] == 9 and parsed.pipeline.wrr_weights[6] == 2
    assert parsed.pipeline.wrr_weights[0] == 8  # router default kept for priorities not given
    assert parsed.lease_ms == 2000 and parsed.pipeline.scheduler == "wrr"


@pytest.mark.parametrize("topology", sorted(p.name for p in TOPOLOGIES.glob("*.yaml")))
def test_every_shipped_topology_gives_configs_the_router_accepts(topology):
    spec = load_spec(TOPOLOGIES / topology)
    for node, cfg in configs(spec, RouterPorts(7000, 7001, 9000)).items():
        parsed = config_from_dict(cfg)
        assert parsed.node == node
        assert {n.name for n in parsed.neighbours} <= set(spec.routers()) - {node}
        assert str(parsed.metrics_listen).endswith(":9000")


def test_unshaped_link_has_no_capacity():
    spec = load_spec_text("name: u\nnodes: {a: {}, b: {}}\nlinks: [{endpoints: [a, b]}]\n", filename="u.yaml")
    cfg = configs(spec)
    assert cfg["a"]["neighbours"][0]["link_capacity_bps"] is None
    config_from_dict(cfg["a"])


def test_unset_queue_sizes_and_data_priorities_leave_the_router_defaults():
    plain = configs(load_spec_text("name: t\nnodes: {a: {}, b: {}}\nlinks: [{endpoints: [a, b]}]\n"))
    assert "queue_sizes" not in plain["a"] and "data_priorities" not in plain["a"]
    spec = load_spec_text("name: t\ndefaults: {router: {data_priorities: [data, background, 4]}}\n"
                          "nodes: {a: {}, b: {}}\nlinks: [{endpoints: [a, b]}]\n")
    cfg = configs(spec)
    assert cfg["a"]["data_priorities"] == [4, 5, 7]
    from router.config import config_from_dict

    assert config_from_dict(cfg["a"]).data_priorities == (4, 5, 7)  # the router accepts what we write


def test_large_message_settings_are_mapped_and_default_to_the_routers_own():
    plain = configs(load_spec_text("name: t\nnodes: {a: {}, b: {}}\nlinks: [{endpoints: [a, b]}]\n"))["a"]
    defaults = config_from_dict({"node": "a", "client_listen": ["127.0.0.1:1"]})
    parsed = config_from_dict(plain)
    for key in ("streaming_links", "streaming_threshold_bytes", "stream_pool_max_idle", "stream_pool_max_busy",
                "stream_idle_ms", "stream_pacing"):
        assert getattr(parsed, key) == getattr(defaults, key), key
    assert parsed.pipeline.fragmentation and parsed.pipeline.max_message_bytes == defaults.pipeline.max_message_bytes
    spec = load_spec_text("name: t\ndefaults: {router: {fragmentation: false, streaming_links: false, "
                          "streaming_threshold: 1MiB, stream_pool_idle: 2, stream_pool_busy: 3, stream_idle: 3s, stream_pacing: 0.5, "
                          "max_message: 8MiB}}\nnodes: {a: {}, b: {}}\nlinks: [{endpoints: [a, b]}]\n")
    cfg = config_from_dict(configs(spec)["a"])
    assert not cfg.pipeline.fragmentation and not cfg.streaming_links
    assert cfg.streaming_threshold_bytes == 1 << 20 and cfg.stream_pool_max_idle == 2 and cfg.stream_pool_max_busy == 3
    assert cfg.stream_idle_ms == 3000 and cfg.stream_pacing == 0.5 and cfg.pipeline.max_message_bytes == 8 << 20
    with pytest.raises(Exception, match="stream_pacing"):
        load_spec_text("name: t\ndefaults: {router: {stream_pacing: 2}}\nnodes: {a: {}, b: {}}\n"
                       "links: [{endpoints: [a, b]}]\n")
