"""The router drivers on the controller: the topology's `router:` choice, `--router`, each driver's
launch (command line, config, readiness) from a lab, and their bad-input errors."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from testbed.drivers import (
    CommandDriver, DriverError, NodeContext, TestbedDriver, ZenohDriver, driver_for, preflight_driver, resolve_paths,
    with_router,
)
from testbed.spec import SpecError, load_spec, load_spec_text
from tests.deploy.helpers import lab_from_spec

REPO = Path(__file__).resolve().parents[2]
DIAMOND = REPO / "topologies" / "diamond.yaml"


def ctx(node: str) -> NodeContext:
    return NodeContext(node, "172.31.0.9", f"/var/lib/testbed/nodes/lab/{node}", "tok", 7447, 7448, 9464)


def diamond(extra: str = ""):
    return load_spec_text(DIAMOND.read_text() + "\n" + extra + "\n", str(DIAMOND))


# -- the choice -------------------------------------------------------------------------------


def test_default_is_our_router_and_its_launch_is_the_router_module():
    spec = load_spec(DIAMOND)
    driver = driver_for(spec)
    assert isinstance(driver, TestbedDriver)
    launch = driver.launch(spec, lab_from_spec(spec), ctx("r1"))
    assert launch.argv == ("{python}", "-m", "router", "--config", "{dir}/router.json")
    assert launch.ready == {"http": "http://172.31.0.9:9464/metrics"}
    config = json.loads(launch.files["router.json"])
    assert config["node"] == "r1" and config["congestion_aware"] is True
    assert driver.describe(spec) == {"name": "testbed", "client": "testbed", "wire": "testbed", "metrics": True,
                                     "events": True, "admin": True, "settings_ignored": []}


@pytest.mark.parametrize("text, message", [
    ("router: zenohh", "unknown router driver 'zenohh': one of testbed, zenoh, command (docs/drivers.md); "
                       "did you mean 'zenoh'?"),
    ("router: {driver: quagga}", "unknown router driver 'quagga'"),
    ("router: command", "the command driver needs a block"),
    ("router: {driver: command, command: x, client: zenoh}", "exactly one of config_template"),
    ("router: {driver: command, command: x, config: y}", "missing required key 'client'"),
    ("router: {driver: command, command: x, config: y, client: zenoh, ready: {}}", "exactly one of tcp"),
    ("router: {driver: command, command: x, config: y, client: zenoh, config_file: a/b}", "plain file name"),
])
def test_a_bad_router_choice_is_refused_at_its_line(text, message):
    with pytest.raises(SpecError) as err:
        diamond(text)
    assert message in str(err.value)
    assert f"{DIAMOND}:85" in str(err.value)


def test_router_option_takes_a_name_or_a_file(tmp_path):
    spec = load_spec(DIAMOND)
    assert with_router(spec, DIAMOND, "zenoh").router.driver == "zenoh"
    block = tmp_path / "mine.yaml"
    (tmp_path / "my.conf.j2").write_text("node={{ node }}\n")
    block.write_text("router:\n  driver: command\n  command: '{python} -m mine --config {config}'\n"
                     "  config_template: my.conf.j2\n  client: testbed\n")
    chosen = with_router(spec, DIAMOND, str(block)).router
    assert chosen.driver == "command" and chosen.config_template == str(tmp_path / "my.conf.j2")
    with pytest.raises(DriverError, match="unknown router driver 'zebra'"):
        with_router(spec, DIAMOND, "zebra")
    with pytest.raises(DriverError, match="No such file"):
        with_router(spec, DIAMOND, str(tmp_path / "absent.yaml"))
    (tmp_path / "bad.yaml").write_text("router: {driver: command}\n")
    with pytest.raises(DriverError, match="missing required key 'command'"):
        with_router(spec, DIAMOND, str(tmp_path / "bad.yaml"))


def test_a_driver_whose_package_is_missing_is_refused_before_anything_is_built(monkeypatch, tmp_path):
    import testbed.drivers.base as base
    from importlib import metadata

    real = metadata.version

    def version(name):
        if name == "eclipse-zenoh":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(base.metadata, "version", version)
    with pytest.raises(DriverError, match=r"eclipse-zenoh is not installed on this machine: `pip install eclipse-zenoh`"):
        preflight_driver(diamond("router: zenoh"))
    preflight_driver(load_spec(DIAMOND))  # our router needs no zenoh
    # validate says the same, exit 2
    from testbed.spec.cli_validate import validate_command

    assert validate_command(DIAMOND, out=io.StringIO(), err=io.StringIO()) == 0
    topo = tmp_path / "diamond.yaml"
    topo.write_text(DIAMOND.read_text() + "\nrouter: zenoh\n")
    err = io.StringIO()
    assert validate_command(topo, out=io.StringIO(), err=err) == 2
    assert "router driver zenoh: the Python package eclipse-zenoh is not installed on this machine" in err.getvalue()


def test_every_driver_name_is_a_driver_and_every_named_one_chooses_by_name():
    from testbed.drivers import DRIVERS
    from testbed.spec.routerchoice import DRIVER_NAMES, NAMED_DRIVERS

    assert set(DRIVERS) == set(DRIVER_NAMES)
    for name in NAMED_DRIVERS:
        assert driver_for(diamond(f"router: {name}")).name == name


# -- zenoh ------------------------------------------------------------------------------------


def test_zenoh_routers_listen_on_their_link_addresses_and_connect_only_along_links():
    spec = diamond("router: zenoh")
    lab = lab_from_spec(spec)
    driver = driver_for(spec)
    assert isinstance(driver, ZenohDriver)
    configs = {}
    for node in spec.routers():
        launch = driver.launch(spec, lab, ctx(node))
        assert launch.argv == ("{python}", "-m", "zenohrouter", "--config", "{dir}/zenoh.json5")
        assert launch.ready == {"tcp": 7448} and launch.env == {"RUST_LOG": "info"}
        configs[node] = json.loads(launch.files["zenoh.json5"])
    ip = {(e.node): [] for link in lab.links for e in (link.a, link.b)}
    for link in lab.links:
        for e in (link.a, link.b):
            ip[e.node].append(e.ip)
    for node, config in configs.items():
        assert config["mode"] == "router"
        assert config["listen"]["endpoints"] == [f"tcp/{a}:7447" for a in ip[node]] + ["tcp/127.0.0.1:7448"]
        assert config["scouting"] == {"multicast": {"enabled": False}, "gossip": {"enabled": False}, "delay": 0}
        assert config["connect"]["retry"]["period_max_ms"] == 1000
        assert "172.31.0.9" not in json.dumps(config)  # never the management address
    # each link once, from its first end: r1 -> r2, r2 -> r4, r1 -> r3, r3 -> r4
    connects = sorted((n, ep) for n, c in configs.items() for ep in c["connect"]["endpoints"])
    expected = sorted((link.a.node, f"tcp/{link.b.ip}:7447") for link in lab.links)
    assert connects == expected
    assert configs["r1"]["transport"]["link"]["tx"] == {"lease": 3000, "keep_alive": 3, "batch_size": 65535}
    assert configs["r1"]["transport"]["shared_memory"] == {"enabled": False}  # everything over the links
    # fixed ids, and the topology's link weights by neighbour id (r1-r2 10, r1-r3 20; r2-r4 10, r3-r4 20)
    assert [c["id"] for c in configs.values()] == ["7e570001", "7e570002", "7e570003", "7e570004"]
    assert configs["r1"]["routing"]["router"]["linkstate"]["transport_weights"] == [
        {"dst_zid": "7e570002", "weight": 10}, {"dst_zid": "7e570003", "weight": 20}]
    assert configs["r4"]["routing"]["router"]["linkstate"]["transport_weights"] == [
        {"dst_zid": "7e570002", "weight": 10}, {"dst_zid": "7e570003", "weight": 20}]


def test_zenoh_says_which_of_the_topologys_router_settings_it_does_not_apply():
    spec = diamond("router: zenoh")
    described = driver_for(spec).describe(spec)
    assert described["settings_ignored"] == ["congestion_aware", "monitor_interval", "scheduler"]
    assert (described["metrics"], described["events"], described["admin"]) == (False, False, False)


def test_zenoh_refuses_slow_subscribers_and_queries():
    zenoh = diamond("router: zenoh").router
    spec = load_spec(REPO / "topologies" / "slow-reader.yaml").model_copy(update={"router": zenoh})
    with pytest.raises(DriverError, match=r"traffic\[1\] \(feed\): slow_subscribers .* the zenoh client cannot"):
        preflight_driver(spec)
    spec = load_spec(REPO / "topologies" / "queries.yaml").model_copy(update={"router": zenoh})
    with pytest.raises(DriverError, match=r"query flows use our client library's get/queryables; the zenoh client"):
        preflight_driver(spec)


# -- command ----------------------------------------------------------------------------------


TEMPLATE = """{
  "mode": "router",
  "listen": {"endpoints": [{% for a in listen %}"tcp/{{ a }}", {% endfor %}"tcp/127.0.0.1:{{ client_port }}"]},
  "connect": {"endpoints": [{% for a in connect %}"tcp/{{ a }}"{{ "," if not loop.last }}{% endfor %}]},
  "id": "{{ '%02x' % (node_index + 1) }}",
  "lease": {{ settings.lease // 1000000 }}
}
"""


def command_spec(tmp_path: Path, template: str = TEMPLATE, **extra):
    (tmp_path / "zenoh.json5.j2").write_text(template)
    block = {"driver": "command", "command": "{python} -m zenohrouter --config {config}",
             "config_template": "zenoh.json5.j2", "client": "zenoh", **extra}
    path = tmp_path / "router.yaml"
    path.write_text(json.dumps({"router": block}))
    return with_router(load_spec(DIAMOND), DIAMOND, str(path))


def test_command_driver_renders_its_template_per_node_with_the_labs_addresses(tmp_path):
    spec = command_spec(tmp_path)
    driver = preflight_driver(spec)
    assert isinstance(driver, CommandDriver)
    lab = lab_from_spec(spec)
    launch = driver.launch(spec, lab, ctx("r2"))
    assert launch.argv == ("{python}", "-m", "zenohrouter", "--config", "{dir}/zenoh.json5")
    assert launch.ready == {"tcp": 7448}
    config = json.loads(launch.files["zenoh.json5"])
    r2 = {e.ip for link in lab.links for e in (link.a, link.b) if e.node == "r2"}
    assert {a.rsplit(":", 1)[0].removeprefix("tcp/") for a in config["listen"]["endpoints"][:-1]} == r2
    r4 = next(link.b.ip for link in lab.links if (link.a.node, link.b.node) == ("r2", "r4"))
    assert config["connect"]["endpoints"] == [f"tcp/{r4}:7447"]
    assert config["id"] == "02" and config["lease"] == 3000
    assert driver.describe(spec)["client"] == "zenoh" and driver.packages[-1] == "zenohrouter"
    assert "eclipse-zenoh" in driver.distributions


def test_command_driver_template_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(DriverError, match=r"zenoh.json5.j2:2: .*'nodes' is undefined"):
        preflight_driver(command_spec(tmp_path, '{\n "a": "{{ nodes }}"\n}\n'))
    with pytest.raises(DriverError, match=r"zenoh.json5.j2:1: unexpected '}'"):
        preflight_driver(command_spec(tmp_path, "{{ node }} }}{% }}\n"))


def test_command_driver_checks_what_it_ships_and_fills_the_controllers_placeholders(tmp_path):
    with pytest.raises(DriverError, match="router.ship: .*zenohd does not exist"):
        preflight_driver(command_spec(tmp_path, ship=["bin/zenohd"]))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "zenohd").write_text("#!/bin/sh\n")
    spec = command_spec(tmp_path, ship=["bin/zenohd"], ready={"http": "http://{mgmt_ip}:8000/health"},
                        metrics="http://{mgmt_ip}:{metrics_port}/metrics", env={"CONF": "{config}"})
    driver = preflight_driver(spec)
    assert driver.ship() == [tmp_path / "bin" / "zenohd"]
    launch = driver.launch(spec, lab_from_spec(spec), ctx("r1"))
    assert launch.ready == {"http": "http://172.31.0.9:8000/health"}
    assert launch.env == {"CONF": "{dir}/zenoh.json5"}
    assert driver.metrics_url(ctx("r1")) == "http://172.31.0.9:9464/metrics"
    assert driver.features.metrics and not driver.features.events


def test_relative_paths_of_a_topologys_own_command_block_are_its_folder(tmp_path):
    (tmp_path / "t.j2").write_text("x")
    text = DIAMOND.read_text() + "\nrouter: {driver: command, command: run, config_template: t.j2, client: testbed}\n"
    spec = resolve_paths(load_spec_text(text, str(tmp_path / "topo.yaml")), tmp_path)
    assert spec.router.config_template == str(tmp_path / "t.j2")
    assert CommandDriver(spec.router).config_file == "t"


def test_validate_names_the_driver_and_refuses_what_it_cannot_run(tmp_path, capsys):
    from testbed.spec.cli_validate import validate_command

    assert validate_command(DIAMOND) == 0
    assert "router under test: testbed" in capsys.readouterr().out
    topo = tmp_path / "slow.yaml"
    topo.write_text((REPO / "topologies" / "slow-reader.yaml").read_text() + "\nrouter: zenoh\n")
    assert validate_command(topo) == 2
    assert "router driver zenoh: traffic[1] (feed): slow_subscribers" in capsys.readouterr().err


def test_command_driver_refuses_a_command_that_cannot_run_and_a_wire_its_clients_cannot_speak(tmp_path):
    with pytest.raises(DriverError, match="router.command is empty"):
        preflight_driver(command_spec(tmp_path, command="  "))
    with pytest.raises(DriverError, match="No closing quotation"):
        preflight_driver(command_spec(tmp_path, command="zenohd -c '{config}"))
    with pytest.raises(DriverError, match="router.wire: testbed .* with client: zenoh"):
        preflight_driver(command_spec(tmp_path, wire="testbed"))


def test_command_driver_ignores_exactly_the_settings_its_template_does_not_read(tmp_path):
    spec = command_spec(tmp_path)  # the template reads settings.lease
    spec = spec.with_router_settings(lease=4_000_000_000, keepalive=1_000_000_000)
    ignored = driver_for(spec).describe(spec)["settings_ignored"]
    assert "lease" not in ignored and {"keepalive", "congestion_aware", "scheduler"} <= set(ignored)


def test_zenoh_refuses_two_links_between_the_same_routers():
    second = '  - endpoints: ["r1:eth3", "r2:eth3"]\n  - endpoints: ["r1:eth2", "r3:eth1"]'
    text = DIAMOND.read_text().replace('  - endpoints: ["r1:eth2", "r3:eth1"]', second)
    spec = load_spec_text(text + "\nrouter: zenoh\n", "parallel.yaml")
    with pytest.raises(DriverError, match="two links between r1 and r2 would be one Zenoh transport"):
        preflight_driver(spec)


def test_run_refuses_a_driver_whose_package_is_missing_with_exit_2_before_building(monkeypatch, tmp_path):
    from importlib import metadata

    from typer.testing import CliRunner

    import testbed.drivers.base as base
    from testbed.cli.app import app

    real = metadata.version
    monkeypatch.setattr(base.metadata, "version",
                        lambda name: (_ for _ in ()).throw(metadata.PackageNotFoundError(name))
                        if name == "eclipse-zenoh" else real(name))
    result = CliRunner().invoke(app, ["run", str(DIAMOND), "--router", "zenoh", "--results", str(tmp_path)])
    assert result.exit_code == 2
    assert "eclipse-zenoh is not installed on this machine: `pip install eclipse-zenoh`" in result.output
    assert not any(tmp_path.iterdir())  # no results folder, no lab
