"""The lab-machines fixture of the ssh backend's tests (tests/backends/sshlab.py) does what it promises:
hosts reachable only over SSH with the inventory's key, user and known_hosts; passwordless sudo; files
private to each host; working data links and no path between hosts over management; each bad-host
variant; and nothing left after close, also when the test process was killed."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.backends import sshlab
from tests.backends.sshlab import (HOSTS, LINKS, MGMT_IFNAME, HostVariant, SshLab, leftover_fixtures,
                                   missing_requirements, release_leftover_fixtures, ssh_lab)  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.skipif(bool(missing_requirements()),
                                                           reason=missing_requirements() or "ok")]

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = Path(sys.executable).parent / "ansible"
ANSIBLE_INVENTORY = Path(sys.executable).parent / "ansible-inventory"


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"exit {result.returncode}: {result.stdout}{result.stderr}"
    return result.stdout


def link_ends(lab: SshLab):
    """(host, its address, peer host, the peer's own address) for both directions of every link."""
    for a, a_if, b, b_if in LINKS:
        a_ip, b_ip = (lab.hosts[h].data[i].split("/")[0] for h, i in ((a, a_if), (b, b_if)))
        yield a, a_ip, b, b_ip
        yield b, b_ip, a, a_ip


def wait_no_processes(lab: SshLab, host: str, timeout_s: float = 5.0) -> list:
    """The host's processes once the last SSH session has gone (sshd takes a moment)."""
    deadline = time.monotonic() + timeout_s
    while (found := lab.processes(host)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def ansible_env(tmp_path: Path) -> dict[str, str]:
    """Ansible without connection masters (they would outlive the lab) and with its files in tmp_path."""
    return {**os.environ, "ANSIBLE_SSH_ARGS": "-o ControlMaster=no", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"), "ANSIBLE_DEPRECATION_WARNINGS": "false"}


# --- a good lab -------------------------------------------------------------------------------

def test_every_host_takes_the_key_and_gives_passwordless_sudo(ssh_lab):
    lab = ssh_lab()
    for host in HOSTS:
        argv = ["ssh", "-i", str(lab.private_key), "-o", f"UserKnownHostsFile={lab.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                f"{lab.user}@{lab.hosts[host].mgmt_ip}", "sudo -n true && id -un && sudo -n id -un"]
        out = ok(subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL))
        assert out.split() == [lab.user, "root"]


def test_wrong_key_wrong_user_and_unknown_host_key_are_refused(ssh_lab, tmp_path):
    lab = ssh_lab()
    assert lab.ssh("r1", "true", key=lab.spare_key()).returncode == 255
    assert lab.ssh("r1", "true", user="root").returncode == 255
    other = tmp_path / "known_hosts"
    r1_key = next(line.split(" ", 1)[1] for line in lab.known_hosts.read_text().splitlines()
                  if line.startswith(f"{lab.hosts['r1'].mgmt_ip} "))
    other.write_text(f"{lab.hosts['r2'].mgmt_ip} {r1_key}\n")  # r2's address with r1's key
    swapped = subprocess.run(["ssh", "-i", str(lab.private_key), "-o", f"UserKnownHostsFile={other}",
                              "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                              f"{lab.user}@{lab.hosts['r2'].mgmt_ip}", "true"],
                             capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert swapped.returncode == 255 and "HOST IDENTIFICATION HAS CHANGED" in swapped.stderr


def test_what_is_written_on_a_host_stays_on_that_host(ssh_lab):
    lab = ssh_lab()
    name = f"sshlab-probe-{lab.tag}"
    ok(lab.ssh("r1", f"echo r1 > /tmp/{name} && sudo -n sh -c 'mkdir -p /var/lib/testbed/{name} && "
                     f"echo r1 > /var/lib/testbed/{name}/f' && echo r1 > ~/{name}"))
    written = [f"/tmp/{name}", f"/var/lib/testbed/{name}/f", f"{lab.dir}/home/{name}"]
    assert ok(lab.ssh("r1", "cat " + " ".join(written))).split() == ["r1"] * 3
    assert ok(lab.run("r1", ["cat", written[0]])) == "r1\n"  # the host's own view, not over SSH
    assert not any(Path(p).exists() for p in written), "a host's files appeared on the controller"
    for other in ("r2", "r3", "r4"):
        assert lab.ssh(other, f"ls {' '.join(written)}").returncode != 0, f"{other} sees r1's files"


def test_data_links_carry_pings_and_management_connects_no_hosts(ssh_lab):
    lab = ssh_lab()
    before = lab.snapshot()
    for host, _, peer, peer_ip in link_ends(lab):
        ok(lab.ssh(host, f"sudo -n ping -c1 -W1 {peer_ip}"))
    for host in HOSTS:
        for other in HOSTS:
            if other != host:
                result = lab.ssh(host, f"sudo -n ping -c1 -W1 {lab.hosts[other].mgmt_ip}")
                assert result.returncode != 0, f"{host} reaches {other}'s management address"
        routes = json.loads(ok(lab.run(host, ["ip", "-j", "route", "show"])))
        assert all(r["dst"] != "default" for r in routes), routes
        mgmt = json.loads(ok(lab.run(host, ["ip", "-j", "addr", "show", "dev", MGMT_IFNAME])))[0]
        assert [a["local"] for a in mgmt["addr_info"]] == [lab.hosts[host].mgmt_ip]
        assert MGMT_IFNAME not in lab.hosts[host].data
    assert lab.snapshot() == before  # pings change nothing the snapshot compares


def test_snapshot_shows_every_data_interface_up_with_the_admins_address(ssh_lab):
    lab = ssh_lab()
    state = lab.snapshot()
    assert {h: sorted(state[h]) for h in HOSTS} == {"r1": ["eth1", "eth2"], "r2": ["eth1", "eth2"],
                                                     "r3": ["eth1", "eth2"], "r4": ["eth1", "eth2"]}
    for host, interfaces in state.items():
        for ifname, seen in interfaces.items():
            link = seen["addr"][0]
            assert "UP" in link["flags"] and link["operstate"] == "UP"
            assert [f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"] if a["family"] == "inet"] \
                == [lab.hosts[host].data[ifname]]
            assert [q["kind"] for q in seen["qdisc"]] == ["noqueue"]
    time.sleep(2)  # longer than IPv6 duplicate address detection: nothing settles later
    assert lab.snapshot() == state


def test_inventories_work_with_ansible_as_written(ssh_lab, tmp_path):
    lab = ssh_lab()
    for inventory in (lab.inventory_ini, lab.inventory_yaml):
        listed = json.loads(ok(subprocess.run([str(ANSIBLE_INVENTORY), "-i", str(inventory), "--list"],
                                              capture_output=True, text=True, timeout=60, env=ansible_env(tmp_path))))
        assert sorted(listed["lab"]["hosts"]) == list(HOSTS)
        for host in HOSTS:  # INI values are strings unless Python literals: become is "true" there
            become = "true" if inventory.suffix == ".ini" else True
            assert listed["_meta"]["hostvars"][host] == {**lab.inventory_vars(host), "ansible_become": become}
    result = subprocess.run([str(ANSIBLE), "-i", str(lab.inventory_ini), "all", "-m", "command", "-a", "id -un"],
                            capture_output=True, text=True, timeout=120, env=ansible_env(tmp_path))
    out = ok(result)
    assert sorted(re.findall(r"^(r\d) \| CHANGED \| rc=0 >>\nroot$", out, re.M)) == list(HOSTS), out
    for host in HOSTS:
        assert wait_no_processes(lab, host) == []


def test_write_inventory_overrides_drops_and_adds_hosts(ssh_lab, tmp_path):
    lab = ssh_lab()
    overrides = {"r1": {"ansible_user": "nobody", "ansible_become": None}, "r2": {"ansible_port": 2222}}
    extra = {"r9": {"ansible_host": "198.51.100.9", "ansible_user": lab.user}}
    for fmt in ("ini", "yaml"):
        path = lab.write_inventory(tmp_path / f"bad.{fmt}", fmt, overrides=overrides, extra_hosts=extra, group=None)
        listed = json.loads(ok(subprocess.run([str(ANSIBLE_INVENTORY), "-i", str(path), "--list"],
                                              capture_output=True, text=True, timeout=60, env=ansible_env(tmp_path))))
        hostvars = listed["_meta"]["hostvars"]
        assert sorted(listed["ungrouped"]["hosts"]) == [*HOSTS, "r9"]
        assert hostvars["r1"]["ansible_user"] == "nobody" and "ansible_become" not in hostvars["r1"]
        assert hostvars["r2"]["ansible_port"] == 2222 and hostvars["r2"]["ansible_user"] == lab.user
        assert hostvars["r9"] == extra["r9"]
    with pytest.raises(ValueError):
        lab.write_inventory(tmp_path / "x", "toml")


# --- bad hosts --------------------------------------------------------------------------------

VERSION_QUERIES = {
    "python3 --version": "Python 3.8.10",
    "python3 -V": "Python 3.8.10",
    "python3 -c 'import sys; print(sys.version_info[:3])'": "(3, 8, 10)",
    """python3 -c "import sys,json; print(json.dumps(list(sys.version_info[:3])))\"""": "[3, 8, 10]",
    "python3 -c 'import platform; print(platform.python_version())'": "3.8.10",
    "python3 -Ic 'import sys; print(sys.version_info >= (3, 9), hex(sys.hexversion))'": "False 0x3080af0",
    "echo 'import sys; print(sys.version.split()[0])' | python3": "3.8.10",
    "echo 'import sys; print(sys.version_info.minor, sys.argv)' | python3 - a": "8 ['-', 'a']",
    "printf 'import sys\\nprint(sys.version_info.major, sys.version_info.minor, sys.argv[1:])\\n' > /tmp/v.py"
    " && python3 -u /tmp/v.py x y": "3 8 ['x', 'y']",
    "echo '[3]' | python3 -m json.tool --compact": "[3]",
    "sudo -n python3 -c 'import sys; print(sys.version_info[:2])'": "(3, 8)",
    "/usr/bin/env python3 -c 'import sys; print(sys.version_info[1])'": "8",
    "python3 -c 'import sys; sys.exit(3)'; echo $?": "3",
}


def test_variants_make_each_host_bad_in_its_own_way(ssh_lab):
    lab = ssh_lab(r1=HostVariant(qdisc={"eth1": "pfifo limit 500"}),
                  r2=HostVariant(python_version="3.8.10", missing_tool="tcpdump"),
                  r3=HostVariant(no_sudo=True),
                  r4={"interface_down": "eth1"})
    # no sudo on r3 only; the user still logs in
    assert ok(lab.ssh("r3", "id -un")).strip() == lab.user
    refused = lab.ssh("r3", "sudo -n true")
    assert refused.returncode != 0 and "sudo" in refused.stderr
    for host in ("r1", "r2", "r4"):
        ok(lab.ssh(host, "sudo -n true"))
    # python 3.8 on r2, the real one elsewhere
    for query, answer in VERSION_QUERIES.items():
        assert ok(lab.ssh("r2", query)).strip() == answer, query
    assert ok(lab.ssh("r1", "python3 --version")).strip() == f"Python {sys.version.split()[0]}"
    # no tcpdump on r2, but everything else (sudo, tc) is there
    for query in ("command -v tcpdump", "sudo -n sh -c 'command -v tcpdump'", "ls /usr/bin/tcpdump", "tcpdump --version"):
        assert lab.ssh("r2", query).returncode != 0, query
    ok(lab.ssh("r2", "sudo -n sh -c 'command -v tc && command -v ip'"))
    ok(lab.ssh("r1", "sudo -n sh -c 'command -v tcpdump'"))
    # r4's eth1 is down (r2's eth2 then has no carrier); r1's eth1 has the admin's qdisc
    state = lab.snapshot()
    assert "UP" not in state["r4"]["eth1"]["addr"][0]["flags"]
    assert "NO-CARRIER" in state["r2"]["eth2"]["addr"][0]["flags"]
    qdisc = state["r1"]["eth1"]["qdisc"]
    assert [(q["kind"], q["root"], q["options"]["limit"]) for q in qdisc] == [("pfifo", True, 500)]
    assert [q["kind"] for q in state["r1"]["eth2"]["qdisc"]] == ["noqueue"]


def test_a_build_that_fails_removes_what_it_made_and_says_why():
    lab = SshLab({"r1": HostVariant(qdisc={"eth1": "no-such-qdisc"})})
    with pytest.raises(sshlab.SshLabError, match="no-such-qdisc"):
        lab.build()
    assert lab.tag and sshlab._traces(lab.tag) == []


def test_unknown_host_in_variants_is_refused():
    with pytest.raises(ValueError, match="r7"):
        SshLab({"r7": HostVariant(no_sudo=True)})


# --- nothing left ------------------------------------------------------------------------------

def fixture_traces(lab: SshLab) -> list[str]:
    return sshlab._traces(lab.tag)


def test_close_removes_everything_with_what_the_system_under_test_left_running(tmp_path):
    lab = SshLab().build()
    try:
        ok(lab.ssh("r1", "nohup sleep 600 >/dev/null 2>&1 & sudo -n sh -c 'setsid sleep 601 >/dev/null 2>&1 &'"))
        deadline = time.monotonic() + 5  # the background shells exec sleep a moment later
        while len(stray := [p for p in lab.processes("r1") if p.cmdline.startswith("sleep")]) < 2:
            assert time.monotonic() < deadline, lab.processes("r1")
            time.sleep(0.05)
        assert sorted(p.cmdline for p in stray) == ["sleep 600", "sleep 601"]
        assert wait_no_processes(lab, "r2") == []
        tag, user, listener = lab.tag, lab.user, lab._sshd["r1"].pid
    finally:
        lab.close()
    assert fixture_traces(lab) == []
    assert not any(Path(f"/proc/{p.pid}").exists() and sshlab._cmdline(p.pid) == p.cmdline for p in stray)
    assert not Path(f"/proc/{listener}").exists()
    assert not Path(f"/run/netns/{sshlab.netns_name(tag, 'r1')}").exists()
    assert sshlab._user_uid(user) is None and not sshlab.sudoers_path(tag).exists()
    assert tag not in sshlab.fixture_tags()
    lab.close()  # twice is fine


def test_a_lab_whose_test_process_was_killed_is_released_by_the_next(ssh_lab):
    mine = ssh_lab()  # a live lab: release must leave it alone
    script = ("from tests.backends.sshlab import SshLab; import sys, time; lab = SshLab().build(); "
              "print(lab.tag, flush=True); time.sleep(600)")
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        tag = child.stdout.readline().strip()
        assert re.fullmatch("[0-9a-f]{6}", tag), tag
        assert leftover_fixtures() == []  # its owner lives
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    left = leftover_fixtures()
    assert f"user {sshlab.user_name(tag)}" in left and f"namespace {sshlab.netns_name(tag, 'r1')}" in left
    assert release_leftover_fixtures() == left
    assert sshlab._traces(tag) == [] and leftover_fixtures() == []
    assert sshlab._traces(mine.tag), "the live lab was removed"
    ok(mine.ssh("r4", "sudo -n true"))
    # at the end of a session, this process's labs count too (the leak check's view)
    assert f"user {mine.user}" in leftover_fixtures(ours_too=True)


def test_two_labs_at_once_do_not_collide(ssh_lab):
    first, second = ssh_lab(), ssh_lab()
    assert first.tag != second.tag and first.user != second.user
    assert not {h.mgmt_ip for h in first.hosts.values()} & {h.mgmt_ip for h in second.hosts.values()}
    ok(first.ssh("r1", "sudo -n true"))
    ok(second.ssh("r1", "sudo -n true"))
    assert first.ssh("r1", "true", key=second.private_key).returncode == 255


def test_the_testbeds_own_leak_check_and_cleaner_do_not_see_the_lab(ssh_lab):
    from testbed.backends import BACKENDS, BackendError, get_backend

    lab = ssh_lab()
    for name in BACKENDS:
        try:
            left = get_backend(name).leftovers(set())
        except BackendError:
            continue
        assert not [x for x in left if lab.tag in x or "sshfx" in x or "sshlab" in x], (name, left)
