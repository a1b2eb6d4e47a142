"""Router resource limits in the topology (RouterSettings.limits) and what each router's config gets."""
from __future__ import annotations

import textwrap

import pytest

from router.config import config_from_dict
from testbed.drivers.routerconfig import settings_to_router_keys
from testbed.spec import SpecError, load_spec


def _spec(tmp_path, router_defaults: str, node_router: str = "{}"):
    f = tmp_path / "t.yaml"
    f.write_text("name: limits\ndefaults:\n  router:\n" + textwrap.indent(router_defaults, "    ")
                 + f"nodes:\n  r1: {{}}\n  r2: {{router: {node_router}}}\nlinks: [{{endpoints: [r1, r2]}}]\n")
    return load_spec(f)


def test_limits_map_to_router_keys_and_the_router_accepts_them(tmp_path):
    spec = _spec(tmp_path, """\
limits:
  total: 8MiB
  control: 512KiB
  clients: {endpoint: 1MiB, sender: 4MiB, input_rate: 3mbit, input_burst: 64KiB, noisy_policy: drop,
            drop_priorities: [data_low, 7], slow_reader: 500ms, slow_reader_policy: disconnect}
  routers: {endpoint: 2MiB}
""")
    keys = settings_to_router_keys(spec.router_settings("r1"))
    assert keys["limits"] == {
        "total_bytes": 8 * 2**20, "control_bytes": 512 * 1024,
        "client": {"endpoint_bytes": 2**20, "sender_bytes": 4 * 2**20, "input_rate_bps": 3_000_000,
                   "input_burst_bytes": 65536, "noisy_policy": "drop", "drop_priorities": [6, 7],
                   "slow_reader_ms": 500, "slow_reader_policy": "disconnect"},
        "router": {"endpoint_bytes": 2 * 2**20}}
    cfg = config_from_dict({"node": "r1", "client_listen": ["127.0.0.1:0"], **keys})
    assert cfg.limits.client.input_rate_bps == 3_000_000 and cfg.limits.router.endpoint_bytes == 2 * 2**20


def test_a_node_overrides_one_limit_and_keeps_the_others(tmp_path):
    spec = _spec(tmp_path, "limits: {total: 8MiB, clients: {endpoint: 1MiB, input_rate: 3mbit}}\n",
                 "{limits: {clients: {slow_reader: 200ms}}}")
    r1 = settings_to_router_keys(spec.router_settings("r1"))["limits"]
    r2 = settings_to_router_keys(spec.router_settings("r2"))["limits"]
    assert r1 == {"total_bytes": 8 * 2**20, "client": {"endpoint_bytes": 2**20, "input_rate_bps": 3_000_000}}
    assert r2 == {"total_bytes": 8 * 2**20, "client": {"endpoint_bytes": 2**20, "input_rate_bps": 3_000_000,
                                                         "slow_reader_ms": 200}}


def test_no_limits_no_key(tmp_path):
    spec = _spec(tmp_path, "scheduler: strict\n")
    assert "limits" not in settings_to_router_keys(spec.router_settings("r1"))


@pytest.mark.parametrize("limits, message", [
    ("{clients: {endpont: 1MiB}}", "endpont"),
    ("{clients: {noisy_policy: shout}}", "noisy_policy"),
    ("{clients: {input_burst: 64KiB}}", "give input_rate too"),
    ("{clients: {slow_reader: fast}}", "slow_reader"),
    ("{routers: {drop_priorities: [urgent]}}", "urgent"),
    ("{total: -1MiB}", "total"),
])
def test_bad_limits_are_refused_at_their_line(tmp_path, limits, message):
    with pytest.raises(SpecError, match=message) as err:
        _spec(tmp_path, f"limits: {limits}\n")
    assert "t.yaml:" in str(err.value)


@pytest.mark.parametrize("setting, message", [
    ("limits: {control: 512b}", r"limits.control: '512b': must be at least 1KiB"),
    ("max_message: 100b", r"max_message: '100b': must be between 1KiB and 1GiB"),
    ("max_message: 2GiB", r"max_message: '2GiB': must be between 1KiB and 1GiB"),
])
def test_message_bounds_the_router_would_refuse_are_refused_in_the_topology(tmp_path, setting, message):
    with pytest.raises(SpecError, match=message) as err:
        _spec(tmp_path, setting + "\n")
    assert "t.yaml:" in str(err.value)


@pytest.mark.parametrize("setting", ["limits: {control: 1KiB}", "max_message: 1KiB", "max_message: 1GiB"])
def test_message_bounds_at_the_edge_are_accepted_by_topology_and_router(tmp_path, setting):
    spec = _spec(tmp_path, setting + "\n")
    config_from_dict({"node": "r1", "client_listen": ["127.0.0.1:0"], **settings_to_router_keys(spec.router_settings("r1"))})


@pytest.mark.parametrize("yaml_limits, router_limits", [
    ("{clients: {stalled_reader: 150ms}, declarations: 500}",
     {"client": {"stalled_reader_ms": 150}, "declarations_per_client": 500}),
    ("{clients: {stalled_reader: off}, declarations: off}",  # YAML reads a bare off as false
     {"client": {"stalled_reader_ms": None}, "declarations_per_client": None}),
    ("{clients: {stalled_reader: \"off\"}, routers: {stalled_reader: 1s}}",
     {"client": {"stalled_reader_ms": None}, "router": {"stalled_reader_ms": 1000}}),
])
def test_the_default_protections_can_be_tuned_or_switched_off(tmp_path, yaml_limits, router_limits):
    spec = _spec(tmp_path, f"limits: {yaml_limits}\n")
    keys = settings_to_router_keys(spec.router_settings("r1"))
    assert keys["limits"] == router_limits
    cfg = config_from_dict({"node": "r1", "client_listen": ["127.0.0.1:0"], **keys})
    client = router_limits.get("client", {})
    if "stalled_reader_ms" in client:
        assert cfg.limits.client.stalled_reader_ms == client["stalled_reader_ms"]
    assert cfg.limits.declarations_per_client == router_limits.get("declarations_per_client", 10_000)


def test_a_limit_that_cannot_be_switched_off_names_what_it_takes(tmp_path):
    with pytest.raises(SpecError, match=r"t.yaml:\d+ .*declarations"):
        _spec(tmp_path, "limits: {declarations: -3}\n")
