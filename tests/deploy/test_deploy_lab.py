"""Deployment on a real Mininet lab over the management path: routers up and linked, metrics
answer from the controller, data listeners off the management address, host keys checked,
stop and collect; a broken router setting on one node fails naming that node and the task.
Nodes that share this machine (the lab's own management) are deployed once for the machine."""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from testbed import proc
from testbed.backends.localns import netns
from testbed.deploy import Deployer, DeployError
from testbed.deploy.deployer import DEFAULT_INSTALL_ROOT
from tests.conftest import needs_mininet
from tests.deploy.conftest import ManagedLab, line_spec, needs_sshd

pytestmark = [needs_mininet, needs_sshd]

NEIGHBOURS = {"r1": {"r2"}, "r2": {"r1", "r3"}, "r3": {"r2"}}


@pytest.fixture(scope="module")
def managed(caps):
    lab = ManagedLab(line_spec("tbt-deploy"), caps)
    try:
        yield lab.open()
    finally:
        lab.close()


@pytest.fixture
def deployers(managed):
    made: list[Deployer] = []
    yield made
    for d in made:  # never leave a router running for the next test, whatever happened
        if not router_pids(managed):  # none runs in the lab's nodes: nothing to stop (a stop playbook saved)
            break
        d.__dict__.pop("extravars", None)  # a test's failing stop (failing_stop) undone
        try:
            d.stop()
        except Exception:
            pass


def router_pids(managed) -> list[int]:
    inodes = {netns.inode(managed.netns(n)) for n in managed.lab.nodes}
    out = []
    for pid in netns.pids_in({i for i in inodes if i is not None}):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"router" in argv and b"-m" in argv:
            out.append(pid)
    return out


def events(path: Path) -> list[dict]:
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []


def wait_for_links(install_dirs: dict[str, str], timeout_s: float = 20.0) -> dict[str, set[str]]:
    deadline = time.monotonic() + timeout_s
    while True:
        up = {n: {e["neighbour"] for e in events(Path(d) / "events.jsonl") if e["event"] == "link_up"}
              for n, d in install_dirs.items()}
        if up == NEIGHBOURS or time.monotonic() > deadline:
            return up
        time.sleep(0.2)


def listeners(ns: str) -> set[tuple[str, int]]:
    out = proc.run(["ss", "-ltnH"], netns=ns).stdout
    found = set()
    for line in out.splitlines():
        local = line.split()[3]
        host, _, port = local.rpartition(":")
        found.add((host.strip("[]"), int(port)))
    return found


def test_deploy_start_stop_collect(managed, deployers, tmp_path):
    d = Deployer(managed.spec, managed.lab, tmp_path, managed.access)
    deployers.append(d)
    endpoints = d.deploy()
    assert set(endpoints) == {"r1", "r2", "r3"}
    for node, ep in endpoints.items():
        assert ep.mgmt_ip == managed.ips[node]
        with urllib.request.urlopen(ep.metrics_url, timeout=5) as resp:
            assert resp.status == 200
            assert b"router_" in resp.read()
        # The admin API wants the run's token.
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{ep.admin_url}/state", timeout=5)
        req = urllib.request.Request(f"{ep.admin_url}/state", headers={"Authorization": f"Bearer {ep.admin_token}"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200
    # Routers linked up with their neighbours over the data links.
    assert wait_for_links({n: ep.install_dir for n, ep in endpoints.items()}) == NEIGHBOURS
    # Data and client listeners are on data addresses and loopback, metrics on the management address only.
    for node, ep in endpoints.items():
        ns = managed.netns(node)
        got = listeners(ns)
        data_ips = {l.end(node).ip for l in managed.lab.links if node in (l.a.node, l.b.node)}
        assert {h for h, p in got if p == 7447} == data_ips
        assert {h for h, p in got if p == 7448} == {"127.0.0.1"}
        assert {h for h, p in got if p == 9464} == {ep.mgmt_ip}
        assert (ep.mgmt_ip, 22) in got
        assert not any(h == ep.mgmt_ip for h, p in got if p not in (22, 9464))
    # Management paths do not connect nodes, with routers running.
    r1 = managed.netns("r1")
    assert proc.run(["ping", "-c", "1", "-W", "1", managed.ips["r2"]], netns=r1, check=False).returncode != 0
    # Config as deployed is in the run folder, with the link's weight and per-direction capacity.
    cfg = json.loads((tmp_path / "nodes" / "r2" / "router.json").read_text())
    by_name = {n["name"]: n for n in cfg["neighbours"]}
    assert by_name["r1"]["weight"] == 20 and by_name["r3"]["link_capacity_bps"] == 10_000_000
    assert "capacity_bps" not in by_name["r3"]  # tc shapes the link: the router must not pace it too
    assert len(router_pids(managed)) == 3

    d.stop()
    assert router_pids(managed) == []
    with pytest.raises(OSError):
        urllib.request.urlopen(endpoints["r1"].metrics_url, timeout=2)
    d.collect()
    for node in ("r1", "r2", "r3"):
        folder = tmp_path / "nodes" / node
        assert (folder / "router.log").exists()
        evs = [e["event"] for e in events(folder / "events.jsonl")]
        assert "ready" in evs and "link_up" in evs and "stopping" in evs
        assert json.loads((folder / "router.json").read_text())["node"] == node
    # Ansible's output for every playbook is in the run folder.
    runs = sorted(p.name for p in (tmp_path / "ansible").iterdir() if p.is_dir() and p.name[:2].isdigit())
    assert runs == ["00-deploy", "01-stop", "02-collect"]
    assert list((tmp_path / "ansible" / "00-deploy" / "artifacts").glob("*/stdout"))
    d.uninstall()
    assert not any(Path(ep.install_dir).exists() for ep in endpoints.values())


def test_broken_router_setting_names_node_and_task(managed, deployers, tmp_path):
    d = Deployer(managed.spec, managed.lab, tmp_path, managed.access)
    deployers.append(d)
    d.configs["r2"]["scheduler"] = "fifo"
    with pytest.raises(DeployError) as info:
        d.deploy()
    err = info.value
    assert err.hosts == ["r2"]
    assert err.failures[0].task == "start router"
    message = str(err)
    assert "r2: task 'start router' failed" in message
    assert "scheduler" in message and "fifo" in message  # the router's own reason
    # Stopping after a failed deployment works and leaves no router behind.
    d.stop()
    assert router_pids(managed) == []


def test_port_in_use_names_node_and_task(managed, deployers, tmp_path):
    ns = managed.netns("r3")
    blocker = proc.spawn(["python3", "-c", "import socket,time; s=socket.socket(); "
                          "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                          "s.bind(('127.0.0.1', 7448)); s.listen(); time.sleep(120)"], netns=ns)
    try:
        deadline = time.monotonic() + 10
        while ("127.0.0.1", 7448) not in listeners(ns) and time.monotonic() < deadline:
            time.sleep(0.05)
        d = Deployer(managed.spec, managed.lab, tmp_path, managed.access)
        deployers.append(d)
        with pytest.raises(DeployError) as info:
            d.deploy()
        assert info.value.hosts == ["r3"]
        assert "r3: task 'start router' failed" in str(info.value)
        assert "exited with status 1" in str(info.value)
    finally:
        blocker.kill()
        blocker.wait()


def test_host_keys_are_checked(managed, tmp_path):
    access = managed.access
    ip = managed.ips["r1"]
    base = ["ssh", "-i", str(access.private_key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes", "-o", "ControlMaster=no",
            "-o", "ControlPath=none"]

    def ssh(known_hosts: Path) -> subprocess.CompletedProcess:
        return subprocess.run([*base, "-o", f"UserKnownHostsFile={known_hosts}", f"root@{ip}", "true"],
                              capture_output=True, text=True, timeout=30)

    assert ssh(access.known_hosts).returncode == 0
    empty = tmp_path / "empty"
    empty.write_text("")
    r = ssh(empty)
    assert r.returncode != 0 and "Host key verification failed" in r.stderr
    # r2's key presented as r1's: a mismatch is refused, not accepted.
    lines = access.known_hosts.read_text().splitlines()
    key_of = {l.split()[0]: l.split(maxsplit=1)[1] for l in lines}
    wrong = tmp_path / "wrong"
    wrong.write_text(f"{ip} {key_of[managed.ips['r2']]}\n")
    r = ssh(wrong)
    assert r.returncode != 0 and "Host key verification failed" in r.stderr


def test_playbooks_with_a_hand_written_inventory(managed, deployers, tmp_path):
    """The playbooks as a person uses them on a lab: ansible-playbook, a YAML inventory, -e vars.
    Exercises what Deployer skips: the separate config check and the controller-side uri check."""
    import sys

    d = Deployer(managed.spec, managed.lab, tmp_path / "run", managed.access)
    deployers.append(d)  # its stop() cleans up should this test fail half-way
    d.prepare()  # bundle and configs only
    access = managed.access
    hosts = "\n".join(f"        {n}: {{ansible_host: {ip}, testbed_install_dir: {DEFAULT_INSTALL_ROOT}/tbt-deploy/{n}}}"
                      for n, ip in managed.ips.items())
    inventory = tmp_path / "lab.yml"
    inventory.write_text(f"""all:
  vars:
    ansible_user: root
    ansible_ssh_private_key_file: {access.private_key}
    ansible_ssh_common_args: -o UserKnownHostsFile={access.known_hosts} -o StrictHostKeyChecking=yes
    ansible_python_interpreter: /usr/bin/python3
  children:
    routers:
      hosts:
{hosts}
""")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
           "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"), "ANSIBLE_NOCOLOR": "1"}
    (tmp_path / "none.cfg").write_text("[defaults]\n")
    extra = ["-e", f"testbed_bundle={d.bundle_path}", "-e", f"testbed_config_dir={d.nodes_dir}",
             "-e", f"testbed_collect_dir={tmp_path / 'collected'}"]
    playbooks = Path(__file__).resolve().parents[2] / "playbooks"

    def play(name: str) -> str:
        r = subprocess.run(["ansible-playbook", "-i", str(inventory), str(playbooks / name), *extra],
                           env=env, capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        return r.stdout

    out = play("deploy.yml")
    assert "check router config" in out
    out = play("start.yml")
    assert "readiness URL answers from the controller" in out
    assert "skipping" not in out.split("readiness URL answers")[1]  # our router's metrics endpoint, fetched
    assert len(router_pids(managed)) == 3
    play("stop.yml")
    assert router_pids(managed) == []
    play("collect.yml")
    for node in managed.ips:
        assert (tmp_path / "collected" / node / "events.jsonl").exists()


def test_kill_and_restart_one_router(managed, deployers, tmp_path):
    d = Deployer(managed.spec, managed.lab, tmp_path, managed.access)
    deployers.append(d)
    endpoints = d.deploy()
    before = set(router_pids(managed))
    d.kill_router("r2")
    deadline = time.monotonic() + 10
    while len(router_pids(managed)) != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(router_pids(managed)) == 2
    with pytest.raises(DeployError, match="r2: task 'kill router' failed: no router running"):
        d.kill_router("r2")
    d.restart_router("r2")
    after = set(router_pids(managed))
    assert len(after) == 3 and len(after - before) == 1
    with urllib.request.urlopen(endpoints["r2"].metrics_url, timeout=5) as resp:
        assert resp.status == 200


def failing_stop(d: Deployer) -> None:
    """Make ``d``'s stop fail on every node (a stop timeout nodectl.py refuses); ``del d.extravars`` undoes it."""
    d.extravars = lambda: {**Deployer.extravars(d), "testbed_stop_timeout": "never"}


def job_hosts(run_dir: Path, step: str) -> set[str]:
    """The inventory hosts Ansible ran tasks on in playbook run ``step`` (e.g. 00-deploy)."""
    hosts = set()
    for job in (run_dir / "ansible" / step / "artifacts").glob("*/job_events/*.json"):
        data = json.loads(job.read_text()).get("event_data", {})
        if data.get("host") and data.get("task") and not data.get("delegate_to"):
            hosts.add(data["host"])
    return hosts


def test_nodes_sharing_this_machine_are_deployed_once_for_the_machine(managed, deployers, tmp_path):
    management = managed.session.management  # the lab's own management: it knows its nodes share this machine
    d = Deployer(managed.spec, managed.lab, tmp_path, management)
    deployers.append(d)
    assert d.machine_entries is not None and set(d.machine_entries) == {"r1", "r2", "r3"}
    endpoints = d.deploy()
    # One host, the machine, did the work: no SSH session per node.
    assert job_hosts(tmp_path, "00-deploy") == {"local"}
    code = d.code_dirs["r1"]
    assert set(d.code_dirs.values()) == {code} and d.shared_code_dirs() == [code]
    assert (Path(code) / "router" / "__main__.py").exists()
    for node, ep in endpoints.items():
        assert json.loads((Path(ep.install_dir) / "router.json").read_text())["node"] == node
        with urllib.request.urlopen(ep.metrics_url, timeout=5) as resp:
            assert resp.status == 200
    assert wait_for_links({n: ep.install_dir for n, ep in endpoints.items()}) == NEIGHBOURS
    # Each router runs in its own node's namespace, started from the shared code.
    pids = router_pids(managed)
    assert len(pids) == 3
    for node in ("r1", "r2", "r3"):
        pid = int((Path(endpoints[node].install_dir) / "router.pid").read_text().split()[0])
        assert pid in pids and os.stat(f"/proc/{pid}/ns/net").st_ino == netns.inode(managed.netns(node))
        environ = dict(v.split(b"=", 1) for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in v)
        assert environ[b"PYTHONPATH"].split(b":")[:2] == [f"{code}/lib".encode(), code.encode()]
    # A scenario's kill and restart of one router still work node by node, from the shared code.
    d.kill_router("r2")
    deadline = time.monotonic() + 10
    while len(router_pids(managed)) != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    d.restart_router("r2")
    assert len(router_pids(managed)) == 3
    # The run's end (testbed/run/phases.py): stop and collect in one play. A stop that fails (here: a timeout
    # nodectl.py refuses) is the machine's failure, named with its task, and the files are collected all the same.
    failing_stop(d)
    with pytest.raises(DeployError) as info:
        d.stop_and_collect()
    assert [(f.host, f.task) for f in info.value.failures] == [("local", "stop every router of the machine")]
    assert "playbook stop-collect-machine.yml failed" in str(info.value) and "--timeout" in str(info.value)
    assert len(router_pids(managed)) == 3
    for node in ("r1", "r2", "r3"):
        assert "ready" in [e["event"] for e in events(tmp_path / "nodes" / node / "events.jsonl")]
    del d.extravars
    d.stop()
    assert router_pids(managed) == [] and job_hosts(tmp_path, "02-stop") == {"local"}
    d.collect()
    for node in ("r1", "r2", "r3"):
        evs = [e["event"] for e in events(tmp_path / "nodes" / node / "events.jsonl")]
        assert "ready" in evs and "stopping" in evs
        assert json.loads((tmp_path / "nodes" / node / "router.json").read_text())["node"] == node


def test_a_router_that_fails_on_a_shared_machine_is_named_with_its_reason(managed, deployers, tmp_path):
    d = Deployer(managed.spec, managed.lab, tmp_path, managed.session.management, start_timeout_s=20)
    deployers.append(d)
    d.configs["r2"]["scheduler"] = "fifo"
    with pytest.raises(DeployError) as info:
        d.deploy()
    err = info.value
    # told as the per-node playbooks tell it: the node, the task, the router's own reason
    assert err.hosts == ["r2"] and err.failures[0].task == "start router"
    assert "scheduler" in str(err) and "fifo" in str(err) and "exited with status" in str(err)
    # the others came up and were stopped again with it (the run cannot go on): nothing left running
    assert router_pids(managed) == []
    d.stop()
    assert router_pids(managed) == []


def test_per_node_deployment_can_be_asked_for_on_a_shared_machine(managed, deployers, tmp_path):
    d = Deployer(managed.spec, managed.lab, tmp_path, managed.session.management, share_machine=False)
    deployers.append(d)
    assert d.machine_entries is None and d.code_dirs == d.install_dirs
    d.deploy()
    assert job_hosts(tmp_path, "00-deploy") == {"r1", "r2", "r3"}
    assert len(router_pids(managed)) == 3
    # The run's end (testbed/run/phases.py), node by node: stop and collect in one play. A stop that fails (a
    # timeout nodectl.py refuses) is each node's failure, named with its task, and each node's files are
    # collected all the same; then the stop that works leaves no router and the files of the stop.
    failing_stop(d)
    with pytest.raises(DeployError) as info:
        d.stop_and_collect()
    assert sorted((f.host, f.task) for f in info.value.failures) == [(n, "stop router") for n in ("r1", "r2", "r3")]
    assert "playbook stop-collect.yml failed" in str(info.value)
    assert len(router_pids(managed)) == 3
    for node in ("r1", "r2", "r3"):
        assert "ready" in [e["event"] for e in events(tmp_path / "nodes" / node / "events.jsonl")]
    del d.extravars
    d.stop_and_collect()
    assert router_pids(managed) == []
    for node in ("r1", "r2", "r3"):
        assert "stopping" in [e["event"] for e in events(tmp_path / "nodes" / node / "events.jsonl")]
