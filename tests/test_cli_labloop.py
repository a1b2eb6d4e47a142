"""The interactive lab loop (issue 27.2): `down` and a run's lab, `exec` into a shell, `inspect`, `link`,
`up --routers` and `ping`. Every lab is taken down by its fixture, even when the test fails."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from testbed.lab import state as labstate
from tests.conftest import needs_mininet, run_cli

pytestmark = [needs_mininet]

#: generous: a loaded 2-core machine builds a lab and starts a run's routers slowly
DEADLINE_S = 240.0

TWO = """
name: {name}
duration: 600s
nodes:
  r1: {{}}
  r2: {{}}
links:
  - endpoints: [r1, r2]
    bw: 10mbit
    queue: 40
"""


def _name(tag: str) -> str:
    return f"tbt-ll{os.getpid() % 1000}{tag}"


class Labs:
    """Labs and processes a test starts; :meth:`close` stops and removes every one of them."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.names: list[str] = []
        self.processes: list[subprocess.Popen] = []

    def topology(self, tag: str, text: str = TWO) -> tuple[str, Path]:
        name = _name(tag)
        path = self.folder / f"{name}.yaml"
        path.write_text(text.format(name=name))
        self.names.append(name)
        return name, path

    def popen(self, *args: str, **kwargs) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-m", "testbed.cli", *args], start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
        self.processes.append(p)
        return p

    def close(self) -> None:
        for p in self.processes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)  # a run tears its lab down on SIGTERM
                try:
                    p.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=30)
        for name in self.names:
            if labstate.load(name) is not None:
                run_cli("down", name, "--force", check=False, timeout=400)


@pytest.fixture
def labs(tmp_path):
    made = Labs(tmp_path)
    try:
        yield made
    finally:
        made.close()


def wait_for(what: str, predicate, deadline_s: float = DEADLINE_S, process: "subprocess.Popen | None" = None):
    end = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        if process is not None and process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"{what}: the process exited {process.returncode} first:\n{out}\n{err}")
        assert time.monotonic() < end, f"{what}: not within {deadline_s:g} s"
        time.sleep(0.2)


# --- a. `down` of a lab a run holds, and of a lab that is not up ---------------------------------------------------

def test_down_of_a_lab_that_is_not_up_exits_0():
    result = run_cli("down", _name("none"))
    assert "is not up" in result.stdout


def test_down_refuses_a_running_run_unless_forced(labs, tmp_path):
    name, path = labs.topology("r")
    results = tmp_path / "results"
    run = labs.popen("run", str(path), "--results", str(results), "--no-analyze", "--quiet")
    state = wait_for("the run's lab is up", lambda: (s := labstate.load(name)) and s.status == "up" and s, process=run)
    assert state.run_dir and Path(state.run_dir).parent == results.resolve()
    # inspect sees what the run started on each node once its captures are on (routers are deployed before)
    wait_for("the run's captures started", (Path(state.run_dir) / "pcap" / "capture.json").exists, process=run)
    view = json.loads(run_cli("inspect", name, "--json").stdout)
    assert view["holder"]["kind"] == "run" and view["holder"]["run_id"] == state.run_id
    assert view["holder"]["run_dir"] == state.run_dir and view["holder"]["alive"]
    for node in view["nodes"]:
        roles = {p["role"] for p in node["processes"]}
        assert {"router", "capture"} <= roles, node
        assert any("tcpdump -i eth1" in p["command"] for p in node["processes"] if p["role"] == "capture")
    refused = run_cli("down", name, check=False)
    assert refused.returncode == 1, refused.stderr
    assert f"held by run {state.run_id}" in refused.stderr and "--force" in refused.stderr
    assert run.poll() is None and labstate.load(name) is not None, "a refused `down` left the run alone"
    forced = run_cli("down", name, "--force", timeout=400)
    assert f"stopped run {state.run_id}; its results are in {state.run_dir}" in forced.stdout
    assert "status: interrupted" in forced.stdout
    assert run.wait(timeout=120) == 1
    assert labstate.load(name) is None
    manifest = json.loads((Path(state.run_dir) / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"


# --- b. `exec LAB NODE` opens a shell in the node ------------------------------------------------------------------

def test_exec_without_a_command_opens_a_shell_in_the_node(labs):
    pexpect = pytest.importorskip("pexpect")  # ansible-runner's dependency
    import socket

    name, path = labs.topology("s")
    lab = json.loads(run_cli("up", str(path), "--json").stdout)["lab"]
    r1 = lab["links"][0]["a"]["address"].split("/")[0] if lab["links"][0]["a"]["node"] == "r1" else \
        lab["links"][0]["b"]["address"].split("/")[0]
    machine = socket.gethostname()
    shell = pexpect.spawn(sys.executable, ["-m", "testbed.cli", "exec", name, "r1"], timeout=60, encoding="utf-8",
                          env={**os.environ, "TERM": "dumb"})
    try:
        prompt = rf"\[{name}\] \S+@r1:\S*[#$] "
        shell.expect(prompt)
        shell.sendline("hostname; echo host=$HOSTNAME node=$TESTBED_NODE")
        shell.expect(r"\r\nr1\r\nhost=r1 node=r1\r\n")
        shell.expect(prompt)
        shell.sendline("ip -br addr show dev eth1")
        shell.expect(rf"eth1\S*\s+UP\s+{r1}/")  # the node's own interface: we are inside its namespace
        shell.expect(prompt)
        shell.sendline("exit 5")
        shell.expect(pexpect.EOF)
    finally:
        shell.close(force=True)
    assert shell.exitstatus == 5
    assert socket.gethostname() == machine, "the node's hostname was set in a UTS namespace of its own"


# --- c. inspect ---------------------------------------------------------------------------------------------------

def test_inspect_json_reads_a_running_lab_back_from_its_nodes(labs):
    name, path = labs.topology("i")
    built = run_cli("up", str(path))
    assert "shaped wires only: no router runs" in built.stdout
    refused = run_cli("ping", name, check=False)
    assert refused.returncode == 2 and "shaped wires only" in refused.stderr
    lab = labstate.load(name).lab
    sleeper = labs.popen("exec", name, "r2", "--", "sleep", "300")
    view = wait_for("the command started with exec shows in r2", lambda: (v := json.loads(
        run_cli("inspect", name, "--json").stdout)) and any("sleep 300" in p["command"] for n in v["nodes"]
                                                            if n["name"] == "r2" for p in n["processes"]) and v)
    assert view["name"] == name and view["status"] == "up" and view["backend"] == "mininet"
    assert view["holder"]["kind"] == "up" and view["holder"]["run_id"] is None and view["holder"]["alive"]
    assert view["spec"] == str(path.resolve()) and view["routers"] is None
    link = lab["links"][0]
    nodes = {n["name"]: n for n in view["nodes"]}
    for end, other in (("a", "b"), ("b", "a")):
        node, ifname = link[end]["node"], link[end]["ifname"]
        iface = next(i for i in nodes[node]["interfaces"] if i["name"] == ifname)
        assert iface["addresses"] == [link[end]["address"]] and iface["up"]
        assert iface["peer"] == f"{link[other]['node']}:{link[other]['ifname']}" and iface["link"] == 0
        assert [q["kind"] for q in iface["qdiscs"]] == ["htb", "pfifo"]
    assert [p["role"] for p in nodes["r2"]["processes"] if "sleep 300" in p["command"]] == ["other"]
    assert not [p for n in view["nodes"] for p in n["processes"] if p["role"] != "other"]
    assert len(view["directions"]) == 2
    for d in view["directions"]:
        assert d["installed"]["bw_bps"] == 10_000_000 and d["installed"]["queue_packets"] == 40
        assert d["as_built"] and d["up"] and d["installed_text"] == "10mbit queue 40"
    text = run_cli("inspect", name).stdout
    assert f"held by `testbed up` (holder process {view['holder']['pid']})" in text
    assert "r1->r2 (eth1): 10mbit queue 40" in text
    sleeper.terminate()


# --- d. link ------------------------------------------------------------------------------------------------------

def _tc(name: str, node: str, *args: str) -> str:
    return run_cli("exec", name, node, "--", "tc", *args).stdout


def _is_up(name: str, node: str, ifname: str) -> bool:
    return "UP" in json.loads(run_cli("exec", name, node, "--", "ip", "-j", "link", "show", ifname).stdout)[0]["flags"]


def test_link_changes_a_live_link_as_the_scenario_does_read_back_from_tc(labs):
    from testbed.spec.models import SHAPING_FIELDS
    from testbed.spec.resolve import Shaping

    name, path = labs.topology("l")
    run_cli("up", str(path))
    assert "10Mbit" in _tc(name, "r1", "class", "show", "dev", "eth1")
    before = time.time_ns()
    changed = json.loads(run_cli("link", name, "r1-r2", "--node", "r1", "--bw", "5mbit", "--json").stdout)
    assert changed["action"] == "set_link" and changed["changes"] == {"bw_bps": 5_000_000}
    assert before <= changed["applied_ns"] <= time.time_ns() and changed["applied_utc"]
    assert "rate 5Mbit" in _tc(name, "r1", "class", "show", "dev", "eth1")  # r1's egress only
    assert "rate 10Mbit" in _tc(name, "r2", "class", "show", "dev", "eth1")
    # a second change keeps the first: r2's queue, loss on both directions
    run_cli("link", name, "r1-r2", "--node", "r2", "--queue", "20")
    text = run_cli("link", name, "r1:eth1-r2:eth1", "--loss", "2%").stdout
    assert "set loss 2% on both directions, applied at " in text
    assert "limit 20" in _tc(name, "r2", "qdisc", "show", "dev", "eth1")
    assert "rate 5Mbit" in _tc(name, "r1", "class", "show", "dev", "eth1")
    shown = {d["sender"]: d for d in json.loads(run_cli("link", name, "0", "--show", "--json").stdout)["directions"]}
    assert shown["r1"]["installed"] == asdict(Shaping(bw_bps=5_000_000, loss_pct=2.0, queue_packets=40))
    assert shown["r2"]["installed"] == asdict(Shaping(bw_bps=10_000_000, loss_pct=2.0, queue_packets=20))
    assert not shown["r1"]["as_built"] and shown["r1"]["built"]["bw_bps"] == 10_000_000
    # down and up again, both ends
    downed = run_cli("link", name, "r1-r2", "--down").stdout
    assert "down, applied at" in downed and downed.count(" [DOWN]") == 2 and "did not read" not in downed
    assert not _is_up(name, "r1", "eth1") and not _is_up(name, "r2", "eth1")
    assert not any(d["up"] for d in json.loads(run_cli("inspect", name, "--json").stdout)["directions"])
    upped = json.loads(run_cli("link", name, "r1-r2", "--up", "--json").stdout)  # read back once up: no [DOWN]
    assert upped["settled"] is True and all(d["up"] for d in upped["directions"])
    assert _is_up(name, "r1", "eth1") and _is_up(name, "r2", "eth1")
    # bad input: exit 2, nothing changed
    for args in (["r1-r3", "--bw", "1mbit"], ["r1-r2", "--queue", "abc"], ["r1-r2", "--bw", "1mbit", "--down"],
                 ["r1-r2", "--node", "r3", "--bw", "1mbit"], ["r1-r2"]):
        refused = run_cli("link", name, *args, check=False)
        assert refused.returncode == 2 and refused.stderr.startswith("error: "), (args, refused.stderr)
    # a jitter without a delay: refused for what it is (before the kernel is asked), nothing changed
    refused = run_cli("link", name, "r1-r2", "--jitter", "5ms", check=False)
    assert refused.returncode == 2 and "with a jitter but no delay" in refused.stderr, refused.stderr
    assert "rate 5Mbit" in _tc(name, "r1", "class", "show", "dev", "eth1")
    # every shaping key of the spec is an option
    helptext = run_cli("link", "--help", env={"COLUMNS": "200"}).stdout
    assert all(f"--{key}" in helptext for key in SHAPING_FIELDS)


def _direction(up: bool):
    from testbed.lab.inspect import Direction

    return Direction(0, "r1", "r3", "eth2", {}, {}, True, "as built", "10mbit", up)


def test_link_up_reads_back_until_the_kernel_says_up():
    """The kernel marks an interface up a moment after `ip link set up`: `link --up` printed [DOWN] in 2 of 9
    tries. It reads the link back until it says what was asked (5 s at the most), and says so if it never does."""
    from testbed.links.change import LinkResult, read_until

    readings = iter([[_direction(True), _direction(False)], [_direction(True), _direction(True)]])
    directions, settled = read_until(lambda: next(readings), up=True, poll_s=0)
    assert settled and all(d.up for d in directions)
    calls = []
    directions, settled = read_until(lambda: calls.append(1) or [_direction(False)], up=True, settle_s=0, poll_s=0)
    assert not settled and len(calls) == 2  # read again at least once, however short the bound
    result = LinkResult("lab", 2, "r1-r3", "link_up", None, 0, directions=directions, settled=False)
    assert result.lines()[-2:] == [
        "  r1->r3 (eth2): 10mbit [DOWN]",
        "  the kernel did not read the link as up within 5 s of the change (`testbed link lab 2 --show` reads it "
        "again)"]
    assert read_until(lambda: [_direction(False)], up=False) == ([_direction(False)], True)


# --- e. up --routers and ping -------------------------------------------------------------------------------------

DIAMOND = Path(__file__).resolve().parents[1] / "topologies" / "diamond.yaml"


def test_up_with_routers_and_ping_every_pair(labs):
    """Issue 27's must-show: `up --routers` and `ping` all reachable on the diamond."""
    text = DIAMOND.read_text()
    assert "\nname: diamond\n" in text
    name, path = labs.topology("p", text.replace("\nname: diamond\n", "\nname: {name}\n").replace("{", "{{")
                                .replace("}", "}}").replace("{{name}}", "{name}"))
    routers = ["r1", "r2", "r3", "r4"]
    up = json.loads(run_cli("up", str(path), "--routers", "--json", timeout=DEADLINE_S).stdout)
    assert up["routers"]["driver"] == "testbed" and sorted(up["routers"]["nodes"]) == routers
    view = json.loads(run_cli("inspect", name, "--json").stdout)
    assert view["routers"] == up["routers"]
    for node in view["nodes"]:
        assert [p["role"] for p in node["processes"]].count("router") >= 1, node
    matrix = json.loads(run_cli("ping", name, "--json", timeout=DEADLINE_S).stdout)
    assert matrix["ok"] and matrix["unreachable"] == [] and matrix["errors"] == {}
    for a in routers:
        assert sorted(matrix["rtt_ms"][a]) == sorted(set(routers) - {a})
        assert all(v is not None and v > 0 for v in matrix["rtt_ms"][a].values())
    # a new bandwidth is told to the routers, as the scenario tells them
    told = json.loads(run_cli("link", name, "r1-r2", "--node", "r1", "--bw", "2mbit", "--json").stdout)["routers_told"]
    assert [(t["router"], t["neighbour"], t["capacity_bps"], t["applied"]) for t in told] == [
        ("r1", "r2", 2_000_000, True)]
    # r4 cut off: its pairs are unreachable, exit 1
    run_cli("link", name, "r2-r4", "--down")
    run_cli("link", name, "r3-r4", "--down")
    cut = run_cli("ping", name, "--json", "--timeout", "5s", check=False, timeout=DEADLINE_S)
    assert cut.returncode == 1, cut.stderr
    assert sorted(map(tuple, json.loads(cut.stdout)["unreachable"])) == sorted(
        [(a, "r4") for a in routers[:3]] + [("r4", a) for a in routers[:3]])
    run_cli("down", name, timeout=DEADLINE_S)
    from testbed.backends.base import NODE_ROOT

    assert not (Path(NODE_ROOT) / name).exists(), "down left the routers' files"


def test_ping_matrix_text():
    from testbed.lab.ping import PingMatrix

    matrix = PingMatrix("lab", "testbed", ["r1", "r2", "r3"], {"r1": {"r2": 1.25, "r3": None},
                                                                "r2": {"r1": 1.5, "r3": 2.0},
                                                                "r3": {"r1": None, "r2": 3.0}})
    assert not matrix.ok and matrix.unreachable == [("r1", "r3"), ("r3", "r1")]
    lines = matrix.lines()
    assert lines[0] == "ping lab lab through its testbed routers (3 routers, 6 pairs): 2 of 6 pairs unreachable"
    assert lines[3].split() == ["r1", "-", "1.2", "x"] and lines[5].split() == ["r3", "x", "3.0", "-"]
    everyone = PingMatrix("lab", "testbed", ["a", "b"], {"a": {"b": 1.0}, "b": {"a": 1.0}})
    assert everyone.ok and everyone.lines()[0].endswith("(2 routers, 2 pairs): all reachable")
