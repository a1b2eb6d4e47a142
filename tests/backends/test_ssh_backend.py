"""The ssh backend against a lab it did not build and reaches only over SSH (tests/backends/sshlab.py):
four namespaces with their own sshd, private files, an unprivileged user with sudo.

Each test compares the machines' data interfaces (`tc -j qdisc show`, `ip -j addr show`, read
directly, not through the testbed) before and after, and looks for processes left on them.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.lab import state as labstate
from testbed.backends.ssh.hoststate import LABS_DIR
from testbed.backends import BackendOptions
from testbed.lab.session import LabSession
from testbed.spec import load_spec_text
from tests.backends.sshlab import HOSTS, HostVariant, ssh_lab  # noqa: F401 - the fixture
from tests import spawner
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
DIAMOND = ROOT / "topologies" / "diamond.yaml"

PAIR = """
name: {name}
backend: ssh
nodes:
  left: {{host: r1}}
  right: {{host: r2}}
links:
  - endpoints: ["left:eth1", "right:eth1"]
    bw: 10mbit
    loss: 10%
"""


def _nothing_of_ours(lab) -> list[str]:
    """Processes left on the machines, and lab records kept on them."""
    left = [f"{h}: {p.cmdline}" for h in HOSTS for p in lab.processes(h) if not p.cmdline.startswith("sshd")]
    for h in HOSTS:
        records = lab.run(h, ["sh", "-c", f"ls {LABS_DIR} 2>/dev/null; true"]).stdout.split()
        left += [f"{h}: record {r}" for r in records]
    return left


def _spec(text: str):
    return load_spec_text(text)


def test_up_down_on_lab_machines_puts_everything_back(ssh_lab, tmp_path):
    lab = ssh_lab()
    inventory = lab.write_inventory(tmp_path / "lab.ini")
    before = lab.snapshot()
    spec = load_spec_text(DIAMOND.read_text().replace("name: diamond", "name: sshdiamond"))
    session = LabSession(spec, backend=BackendOptions("ssh", inventory=str(inventory)))
    try:
        built = session.open()
        # the topology's addresses replaced the machines' own, on the named interfaces only
        for link in built.links:
            for end in (link.a, link.b):
                addrs = lab.run(end.node, ["ip", "-j", "-4", "addr", "show", "dev", end.ifname], check=True).stdout
                assert [f"{a['local']}/{a['prefixlen']}" for a in json.loads(addrs)[0]["addr_info"]] == [end.address]
        # shaped through Ansible: the bottleneck r2->r4 at 10 Mbit/s, the others at 20
        assert "rate 10Mbit" in lab.run("r2", ["tc", "class", "show", "dev", "eth2"], check=True).stdout
        assert "rate 20Mbit" in lab.run("r2", ["tc", "class", "show", "dev", "eth1"], check=True).stdout
        assert {a["direction"]: a["qdiscs"] for a in built.applied}["r2->r4"] == ["htb", "pfifo"]
        # every link carries traffic, through node access (ping as root on the machine)
        for link in built.links:
            out = session.access(link.a.node).run(["ping", "-c", "1", "-W", "2", link.b.ip]).stdout
            assert " 0% packet loss" in out, out
        # a long-running process, its exit status, files both ways; nothing lands on the controller
        r1 = session.access("r1")
        proc = r1.spawn(["sh", "-c", "echo hello from $(hostname) >&2; exit 3"], log=f"{r1.work_dir}/x/out.log")
        assert proc.wait(20) == 3
        fetched = tmp_path / "fetched.log"
        r1.fetch(f"{r1.work_dir}/x/out.log", fetched)
        assert "hello from" in fetched.read_text()
        assert not Path(f"{r1.work_dir}/x/out.log").exists()  # the machine's files are its own
        (tmp_path / "up").mkdir()
        (tmp_path / "up" / "a.txt").write_text("payload")
        r1.put(tmp_path / "up", f"{r1.work_dir}/put")
        assert r1.run(["cat", f"{r1.work_dir}/put/a.txt"]).stdout == "payload"
        sleeper = r1.spawn(["sleep", "300"])
        assert sleeper.poll() is None
        # the machines hold the record that `clean --inventory` needs
        assert lab.run("r4", ["cat", f"{LABS_DIR}/sshdiamond.json"], check=True).stdout
    finally:
        session.close()
    assert lab.snapshot() == before
    assert _nothing_of_ours(lab) == []


def test_down_kills_what_a_process_on_the_machine_keeps_forking(ssh_lab, tmp_path):
    """A process started on a lab machine that ignores SIGTERM and forks while `down` runs (relays, children
    adopted by init, children in a network namespace of their own: tests/spawner.py): none is left, since
    they all carry the node's environment markers and the machine sweeps until none is found."""
    lab = ssh_lab()
    inventory = lab.write_inventory(tmp_path / "lab.ini")
    mark = spawner.marker()
    folder = Path("/run") / mark  # the machines share /run with this one, not /tmp
    folder.mkdir()
    session = LabSession(_spec(PAIR.format(name="sshfork")),
                         backend=BackendOptions("ssh", inventory=str(inventory)))
    try:
        session.open()
        session.access("left").spawn(spawner.argv(mark, spawner.link_sleep(folder, mark), moving=True))
        deadline = time.monotonic() + 60
        while len(spawner.processes(mark)) < 20:
            assert time.monotonic() < deadline, "the spawner never forked on the machine"
            time.sleep(0.02)
    finally:
        session.close()
        left = spawner.wait_until_gone(mark)
        killed = spawner.kill_all(mark)
        shutil.rmtree(folder, ignore_errors=True)
    assert left == [] and killed == [], "processes of the node outlived `down`"
    assert _nothing_of_ours(lab) == []


def test_yaml_inventory_host_mapping_and_loss(ssh_lab, tmp_path):
    """Nodes named unlike the hosts (`host:`), a YAML inventory, loss through iptables on the receiver."""
    lab = ssh_lab()
    inventory = lab.write_inventory(tmp_path / "lab.yaml", fmt="yaml")
    before = lab.snapshot()
    spec = _spec(PAIR.format(name="sshpair"))
    with LabSession(spec, backend=BackendOptions("ssh", inventory=str(inventory))) as built:
        assert built.node("left").handle["host"] == "r1"
        loss = {a["direction"]: a["iptables_loss_pct"] for a in built.applied}
        assert loss == {"left->right": 10.0, "right->left": 10.0}
        rules = lab.run("r2", ["iptables", "-t", "mangle", "-S"], check=True).stdout
        assert "TBED-LOSS-eth1" in rules and "statistic" in rules
    assert lab.snapshot() == before
    assert "TBED-LOSS" not in lab.run("r2", ["iptables", "-t", "mangle", "-S"], check=True).stdout
    assert _nothing_of_ours(lab) == []


def test_keep_addresses_uses_the_machines_own(ssh_lab, tmp_path):
    lab = ssh_lab()
    inventory = lab.write_inventory(tmp_path / "lab.ini")
    before = lab.snapshot()
    spec = _spec(PAIR.format(name="sshkeep").replace("    loss: 10%\n", ""))
    with LabSession(spec, backend=BackendOptions("ssh", inventory=str(inventory), keep_addresses=True)) as built:
        assert (built.links[0].a.address, built.links[0].b.address) == (lab.hosts["r1"].data["eth1"],
                                                                         lab.hosts["r2"].data["eth1"])
    assert lab.snapshot() == before


BAD_INPUTS = [
    # (variants, inventory overrides, topology edit, expected words in the one error)
    pytest.param({"r2": HostVariant(no_sudo=True)}, {}, None, ["r2", "sudo", "passwordless"], id="no-sudo"),
    pytest.param({"r3": HostVariant(python_version="3.8.10")}, {}, None, ["r3", "3.8.10", "3.9 or newer"],
                 id="python-too-old"),
    pytest.param({"r4": HostVariant(missing_tool="tcpdump")}, {}, None, ["r4", "tcpdump not found", "install"],
                 id="missing-tool"),
    pytest.param({"r1": HostVariant(interface_down="eth2")}, {}, None, ["r1", "eth2 is down", "ip link set"],
                 id="interface-down"),
    pytest.param({"r2": HostVariant(qdisc={"eth1": "pfifo limit 500"})}, {}, None,
                 ["r2:eth1", "qdisc someone configured", "tc qdisc del"], id="qdisc-not-restorable"),
    pytest.param({}, {"r3": {"ansible_host": "198.19.255.254"}}, None, ["r3", "does not answer", "ansible_host"],
                 id="unreachable"),
    pytest.param({}, {"r2": {"ansible_user": "nosuchuser"}}, None, ["r2", "nosuchuser", "cannot log in"],
                 id="wrong-user"),
    pytest.param({}, {"r4": {"ansible_ssh_private_key_file": "SPARE"}}, None, ["r4", "cannot log in",
                                                                              "ansible_ssh_private_key_file"],
                 id="wrong-key"),
    pytest.param({}, {"r1": {"ansible_ssh_common_args": "-o UserKnownHostsFile=/dev/null"}}, None,
                 ["r1", "host key is not known", "--no-host-key-check"], id="unknown-host-key"),
    pytest.param({}, {"r2": {"ansible_become_password": "secret"}}, None,
                 ["r2", "passwordless sudo", "ansible_become_password"], id="become-password"),
    pytest.param({}, {"r3": {"ansible_ssh_private_key_file": None, "ansible_password": "secret"}}, None,
                 ["r3", "key-based SSH", "ansible_ssh_private_key_file"], id="password-login"),
    pytest.param({}, {"r1": {"ansible_host_key_checking": False}}, None,
                 ["host key checking off for r1", "--no-host-key-check"], id="inventory-without-host-key-check"),
    pytest.param({}, {}, ("r2:eth2", "r2:eth9"), ["r2", "no interface eth9", "topology"], id="missing-interface"),
    pytest.param({}, {}, ("r1:eth1", "r1:mgmt0"), ["r1", "mgmt0", "management"], id="management-interface"),
]


@pytest.mark.parametrize("variants, overrides, edit, words", BAD_INPUTS)
def test_bad_input_is_refused_and_nothing_changes(ssh_lab, tmp_path, variants, overrides, edit, words):
    lab = ssh_lab(**variants)
    overrides = {h: {k: (str(lab.spare_key()) if v == "SPARE" else v) for k, v in o.items()}
                 for h, o in overrides.items()}
    inventory = lab.write_inventory(tmp_path / "lab.ini", overrides=overrides)
    topology = tmp_path / "diamond.yaml"
    text = DIAMOND.read_text().replace("name: diamond", "name: sshbad")
    if edit:
        text = text.replace(f'"{edit[0]}"', f'"{edit[1]}"')
    topology.write_text(text)
    before = lab.snapshot()
    result = run_cli("up", str(topology), "--backend", "ssh", "--inventory", str(inventory), check=False,
                     timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    assert "Traceback" not in result.stderr
    assert lab.snapshot() == before
    assert _nothing_of_ours(lab) == []
    assert labstate.load("sshbad") is None


def test_no_host_key_check_is_explicit_and_recorded(ssh_lab, tmp_path):
    lab = ssh_lab()
    inventory = lab.write_inventory(tmp_path / "lab.ini", overrides={
        h: {"ansible_ssh_common_args": "-o UserKnownHostsFile=/dev/null"} for h in HOSTS})
    spec = _spec(PAIR.format(name="sshnokey"))
    with LabSession(spec, backend=BackendOptions("ssh", inventory=str(inventory), check_host_keys=False)) as built:
        assert built.info["check_host_keys"] is False


def test_clean_after_kill9_restores_the_machines_even_without_local_state(ssh_lab, tmp_path):
    """`testbed up` holder killed hard, this machine's lab state lost too: `clean --inventory` restores every
    machine from the record kept on it, and stops what runs there."""
    lab = ssh_lab()
    inventory = lab.write_inventory(tmp_path / "lab.ini")
    topology = tmp_path / "pair.yaml"
    topology.write_text(PAIR.format(name="sshcrash"))
    before = lab.snapshot()
    run_cli("up", str(topology), "--backend", "ssh", "--inventory", str(inventory), timeout=180)
    state = labstate.load("sshcrash")
    assert state is not None and state.status == "up"
    # something of ours runs on a machine, as during a run
    run_cli("exec", "sshcrash", "left", "--", "true")
    from testbed.backends import Lab, get_backend

    access = get_backend("ssh").access(Lab.from_json(state.lab), "left")
    access.spawn(["sleep", "600"])
    assert any("sleep 600" in p.cmdline for p in lab.processes("r1"))
    assert lab.snapshot() != before
    os.kill(state.owner_pid, signal.SIGKILL)
    labstate.remove("sshcrash")  # the controller's record is gone as well (e.g. /run was wiped)
    # a new lab is refused while the machines still hold this one (its record would become their "original")
    again = run_cli("up", str(topology), "--backend", "ssh", "--inventory", str(inventory), check=False)
    assert again.returncode == 2 and "holds lab 'sshcrash'" in again.stderr and "clean --inventory" in again.stderr
    plain = run_cli("clean", check=False)
    assert lab.snapshot() != before, "without the inventory, clean cannot know the machines"
    result = run_cli("clean", "--inventory", str(inventory), check=False, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "restored" in result.stdout
    assert lab.snapshot() == before
    assert _nothing_of_ours(lab) == []
    assert plain.returncode == 0


def test_up_exec_down_from_the_command_line_with_the_topologys_inventory(ssh_lab, tmp_path):
    """`inventory:` in the topology (relative to it), `testbed up`, `exec` on a machine, `down`: put back."""
    lab = ssh_lab()
    lab.write_inventory(tmp_path / "machines.ini")
    topology = tmp_path / "pair.yaml"
    topology.write_text(PAIR.format(name="sshcli") + "inventory: machines.ini\n")
    before = lab.snapshot()
    up = run_cli("up", str(topology), "--json", timeout=180)
    assert json.loads(up.stdout)["lab"]["backend"] == "ssh"
    try:
        out = run_cli("exec", "sshcli", "right", "--", "ip", "-br", "-4", "addr", "show", "dev", "eth1").stdout
        assert "10.10.0.2/30" in out, out
        assert lab.snapshot() != before
    finally:
        down = run_cli("down", "sshcli", check=False, timeout=180)
    assert down.returncode == 0, down.stdout + down.stderr
    assert lab.snapshot() == before
    assert _nothing_of_ours(lab) == []


def test_what_replacing_addresses_would_break_is_refused(ssh_lab, tmp_path):
    """A route of a data interface's own (flushing its addresses would delete it), and a topology subnet that
    holds an address of the SSH connection (it would take the connection over): refused, nothing changed."""
    lab = ssh_lab()
    inventory = lab.write_inventory(tmp_path / "lab.ini")
    peer = lab.hosts["r2"].data["eth1"].split("/")[0]
    lab.run("r1", ["ip", "route", "add", "192.0.2.0/24", "via", peer, "dev", "eth1"], check=True)
    before = lab.snapshot()
    topology = tmp_path / "pair.yaml"
    topology.write_text(PAIR.format(name="sshroute"))
    result = run_cli("up", str(topology), "--backend", "ssh", "--inventory", str(inventory), check=False)
    assert result.returncode == 2 and "left" in result.stderr and "route someone set (192.0.2.0/24 via" in \
        result.stderr, result.stderr
    lab.run("r1", ["ip", "route", "del", "192.0.2.0/24"], check=True)
    mgmt = lab.hosts["r1"].mgmt_ip
    topology.write_text(PAIR.format(name="sshroute") + f"defaults:\n  address_pool: {mgmt.rsplit('.', 1)[0]}.0/24\n")
    result = run_cli("up", str(topology), "--backend", "ssh", "--inventory", str(inventory), check=False)
    assert result.returncode == 2 and "an address of the SSH connection" in result.stderr, result.stderr
    assert _nothing_of_ours(lab) == []
    assert labstate.load("sshroute") is None
