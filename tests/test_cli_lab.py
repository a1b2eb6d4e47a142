"""`testbed up / exec / down / clean` from other shells, and recovery from a killed holder."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import cgroups
from testbed.lab import state as labstate
from testbed.backends.localns import mgmt, netns
from tests.conftest import needs_mininet, run_cli

pytestmark = [needs_mininet]

LINE = """
name: {name}
nodes:
  r1: {{}}
  r2: {{}}
  r3: {{}}
links:
  - endpoints: [r1, r2]
    bw: 10mbit
  - endpoints: [r2, r3]
    bw: 20mbit
    queue: 50
"""


@pytest.fixture
def topo(tmp_path):
    name = f"tbt-cli{os.getpid() % 1000}"
    path = tmp_path / "line.yaml"
    path.write_text(LINE.format(name=name))
    yield name, path
    if labstate.load(name) is not None:
        run_cli("down", name, check=False)


def ours(name: str) -> list[str]:
    return [n for n in netns.list_names() if n.startswith(f"{netns.PREFIX}{name}-")]


def test_up_exec_down(topo):
    name, path = topo
    up = run_cli("up", str(path), "--json")
    lab = json.loads(up.stdout)["lab"]
    assert set(lab["nodes"]) == {"r1", "r2", "r3"}
    assert len(ours(name)) == 3
    # Another shell finds the lab: ping across the first link from r1.
    r2_addr = lab["links"][0]["b"]["address"].split("/")[0]
    ping = run_cli("exec", name, "r1", "--", "ping", "-c", "2", "-i", "0.2", "-W", "1", r2_addr)
    assert "2 received" in ping.stdout
    # No kernel forwarding: r1 cannot reach r3 through r2 (the router will be the only path).
    r3_addr = lab["links"][1]["b"]["address"].split("/")[0]
    assert run_cli("exec", name, "r1", "--", "ping", "-c", "1", "-W", "1", r3_addr, check=False).returncode != 0
    # Exit status of the command is passed through.
    assert run_cli("exec", name, "r2", "--", "sh", "-c", "exit 7", check=False).returncode == 7
    tc = run_cli("exec", name, "r2", "--", "tc", "qdisc", "show", "dev", "eth2").stdout
    assert "htb" in tc and "pfifo" in tc and "limit 50" in tc
    # A second `up` of the same lab is refused as bad input.
    again = run_cli("up", str(path), check=False)
    assert again.returncode == 2 and "is in use by process" in again.stderr
    run_cli("down", name)
    assert ours(name) == []
    assert labstate.load(name) is None


def test_bad_input_exit_codes(topo, tmp_path):
    name, _ = topo
    assert run_cli("exec", "nosuchlab", "r1", "--", "true", check=False).returncode == 2
    missing = run_cli("up", str(tmp_path / "missing.yaml"), check=False)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_sigkilled_holder_is_cleaned_up(topo):
    name, path = topo
    lab = json.loads(run_cli("up", str(path), "--json").stdout)
    holder = lab["holder_pid"]
    # A long-running process inside a node, started from another shell.
    sleeper = subprocess.Popen([sys.executable, "-m", "testbed.cli", "exec", name, "r2", "--", "sleep", "300"],
                               start_new_session=True)
    deadline = time.monotonic() + 30
    while not any("sleep" in _cmdline(pid) for pid in netns.pids_in({netns.inode(f"{netns.PREFIX}{name}-r2")})):
        assert time.monotonic() < deadline, "the command started with `testbed exec` never ran inside r2"
        time.sleep(0.05)
    veths_before = _root_veths()
    os.kill(holder, signal.SIGKILL)
    time.sleep(0.2)
    assert ours(name), "the namespaces outlive the killed holder (named), so clean has work to do"
    report = json.loads(run_cli("clean", "--json").stdout)
    assert name in report["labs"]
    assert ours(name) == []
    # `clean` killed the command inside the node (it would still be sleeping otherwise).
    assert sleeper.wait(timeout=10) in (-signal.SIGTERM, -signal.SIGKILL)
    assert not labstate.process_is_holder(holder)
    # Nothing started in a node is left anywhere: each node's cgroup is removed only once empty. (Not "no
    # `sleep 300` on this machine": other tests and users run some too; this test's is `sleeper`, above.)
    assert cgroups.names(f"{netns.PREFIX}{name}-") == []
    # links lived inside the namespaces only (other labs' management interfaces may come and go meanwhile)
    others = mgmt.HOST_PREFIX
    assert [v for v in _root_veths() - veths_before
            if not v.startswith(others) or v.startswith(others + mgmt.lab_tag(name))] == []
    # Idempotent: a second clean finds nothing of this lab (another test's or user's may be found).
    second = json.loads(run_cli("clean", "--json").stdout)
    assert name not in second["labs"] and not [x for x in second["removed"] if name in x]


def _root_veths() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show", "type", "veth"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip() for line in out.splitlines() if line.strip()}


def test_impairments_without_netem_or_user_mode_linux_are_refused_as_bad_input(tmp_path, caps):
    """Neither the kernel (no netem) nor the impairment appliance (user-mode Linux missing) can delay: exit 2
    with one line that says what to install, before anything is built."""
    if caps.has_qdisc("netem"):
        pytest.skip("this kernel has netem: nothing to refuse")
    path = tmp_path / "delay.yaml"
    path.write_text("name: tbt-delay\nnodes: {a: {}, b: {}}\nlinks:\n  - {endpoints: [a, b], delay: 5ms}\n")
    result = run_cli("up", str(path), check=False, env={"TESTBED_UML_KERNEL": str(tmp_path / "no-linux.uml")})
    assert result.returncode == 2
    assert "apt-get install user-mode-linux" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not [n for n in netns.list_names() if "tbt-delay" in n]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
