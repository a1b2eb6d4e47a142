"""What every backend must do, checked the same way on each (Mininet and Docker): real namespaces or
containers, veths, tc and iptables, reached only through the backend's node access.

Every lab is torn down even when a test fails; the session's leak check (tests/conftest.py)
fails the suite if any backend's leftovers remain.
"""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import cgroups, sweep
from testbed.lab import state as labstate
from testbed.backends import BACKENDS, get_backend
from testbed.lab.errors import LabError
from testbed.lab.session import LabSession
from testbed.links import appliance
from testbed.links.control import LinkControl
from testbed.links.measure import EndAccess, tcp_goodput, udp_arrivals, udp_loss
from testbed.spec import load_spec_text
from tests import spawner
from tests.conftest import BACKEND_PARAMS, needs_iperf3, run_cli, skip_unless_backend

PAIR = """
name: {name}
nodes:
  a: {{kind: router}}
  b: {{kind: router}}
links:
  - endpoints: [a, b]
{params}
"""

TRIANGLE = """
name: {name}
nodes: {{a: {{}}, b: {{}}, c: {{}}}}
links:
  - {{endpoints: [a, b], bw: 10mbit}}
  - {{endpoints: [b, c], bw: 20mbit, queue: 50}}
  - {{endpoints: [c, a]}}
"""


def pair_spec(name: str, **params: str):
    body = "".join(f"    {k}: {v}\n" for k, v in params.items())
    return load_spec_text(PAIR.format(name=name, params=body), filename=f"{name}.yaml")


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request) -> str:
    skip_unless_backend(request.param)
    return request.param


@pytest.fixture
def open_lab(caps, backend):
    """Opens labs on the backend under test; closes them all afterwards, even after a failure."""
    sessions: list[LabSession] = []

    def _open(spec, allow_missing: bool = False) -> LabSession:
        session = LabSession(spec, caps, allow_missing=allow_missing, backend=backend)
        sessions.append(session)
        session.open()
        return session

    yield _open
    for session in sessions:
        session.close()


def ends(session: LabSession, index: int = 0) -> tuple[EndAccess, EndAccess]:
    link = session.lab.links[index]
    return EndAccess(session.access(link.a.node), link.a), EndAccess(session.access(link.b.node), link.b)


def lab_name(backend: str, what: str) -> str:
    return f"tbt-{backend[:2]}-{what}"


def test_addresses_as_the_spec_says_and_a_ping_over_every_link(open_lab, backend):
    spec = load_spec_text(TRIANGLE.format(name=lab_name(backend, "tri")), filename="tri.yaml")
    session = open_lab(spec)
    assert session.lab.backend == backend
    for planned, built in zip(spec.resolved_links(), session.lab.links):
        for want, end in ((planned.a, built.a), (planned.b, built.b)):
            shown = json.loads(session.access(end.node).run(["ip", "-j", "-4", "addr", "show", "dev",
                                                              end.ifname]).stdout)
            got = {f"{a['local']}/{a['prefixlen']}" for a in shown[0]["addr_info"]}
            assert got == {str(want.address)}, f"{end.node}:{end.ifname}"
        a, b = ends(session, built.index)
        ping = a.access.run(["ping", "-c", "2", "-i", "0.2", "-W", "2", b.end.ip], check=False)
        assert ping.returncode == 0, f"no ping over {built.label}: {ping.stdout}{ping.stderr}"
    # No kernel forwarding and no other path: a cannot reach the far end of b-c through b.
    far = session.lab.links[1].b  # c's end of b-c
    a_access = session.access("a")
    routes = a_access.run(["ip", "-4", "route", "get", far.ip], check=False)
    if routes.returncode == 0:  # a has a route only if c's address shares a subnet with a's: it must not
        assert ipaddress.ip_address(far.ip) in ipaddress.ip_interface(session.lab.links[2].b.address).network


@needs_iperf3
@pytest.mark.parametrize("rate_mbit", [10, 50])
def test_tcp_goodput_matches_configured_rate(open_lab, backend, rate_mbit):
    session = open_lab(pair_spec(lab_name(backend, f"bw{rate_mbit}"), bw=f"{rate_mbit}mbit"))
    measured = tcp_goodput(*ends(session), seconds=5)
    ratio = measured.bits_per_second / (rate_mbit * 1e6)
    print(f"{backend}: configured {rate_mbit} Mbit/s, TCP goodput {measured.bits_per_second / 1e6:.2f} Mbit/s, "
          f"ratio {ratio:.3f}")
    assert 0.9 <= ratio <= 1.1


def test_a_rate_shaped_interface_hands_htb_one_frame_at_a_time(open_lab, backend):
    """gso_max_size 1500 where htb shapes (a 64 KiB offload burst would overdraw the
    bucket and hold what follows for ms; bench/link_gso_burst.py measures it); an
    interface without a rate keeps the kernel's default."""
    session = open_lab(pair_spec(lab_name(backend, "gso"), bw="100mbit"))
    a, b = ends(session)
    shaped = json.loads(a.access.run(["ip", "-d", "-j", "link", "show", "dev", a.end.ifname]).stdout)[0]
    assert shaped["gso_max_size"] == 1500
    loopback = json.loads(a.access.run(["ip", "-d", "-j", "link", "show", "dev", "lo"]).stdout)[0]
    assert loopback["gso_max_size"] > 1500


def test_loss_without_netem_is_close_to_configured(open_lab, backend, caps):
    session = open_lab(pair_spec(lab_name(backend, "loss"), loss="10%"))
    applied = {a["direction"]: a for a in session.lab.applied}
    if not caps.has_qdisc("netem"):
        assert applied["a->b"]["iptables_loss_pct"] == 10
    a, b = ends(session)
    result = udp_loss(a, b, packets=3000)
    print(f"{backend}: sent {result.packets} packets, lost {result.lost} ({result.loss_pct:.2f}%)")
    assert 7.0 <= result.loss_pct <= 13.0
    back = udp_loss(b, a, packets=2000)  # the link-wide value applies to both directions
    assert 7.0 <= back.loss_pct <= 13.0


def test_link_down_stops_traffic_and_up_restores_it(open_lab, backend, caps):
    session = open_lab(pair_spec(lab_name(backend, "updown"), bw="10mbit"))
    a, b = ends(session)
    ctl = LinkControl(session.lab, session.backend, caps)
    marks: dict[str, int] = {}

    def flap() -> None:
        time.sleep(1.0)
        marks["down_called"] = time.time_ns()
        marks["down"] = ctl.link_down(0)  # both ends are down when it returns
        time.sleep(1.0)
        marks["up_called"] = time.time_ns()
        marks["up"] = ctl.link_up(0)

    arrivals = udp_arrivals(a, b, packets=3500, interval_ms=1.0, during=flap)
    sent_before = [s for _, _, s in arrivals if s < marks["down_called"]]
    sent_while_down = [s for _, _, s in arrivals if marks["down"] < s < marks["up_called"]]
    sent_after_up = [s for _, _, s in arrivals if s > marks["up"]]
    print(f"{backend}: {len(sent_before)} datagrams before, {len(sent_while_down)} sent while down arrived, "
          f"{len(sent_after_up)} after up")
    assert len(sent_before) > 300, "traffic flowed before the link went down"
    assert sent_while_down == [], "datagrams sent while the link was down arrived"
    assert len(sent_after_up) > 300, "traffic resumed after link up"


@needs_iperf3
def test_runtime_bandwidth_change_changes_goodput(open_lab, backend, caps):
    session = open_lab(pair_spec(lab_name(backend, "change"), bw="50mbit", queue=200))
    a, b = ends(session)
    before = tcp_goodput(a, b, seconds=4).bits_per_second
    ctl = LinkControl(session.lab, session.backend, caps)
    ctl.set_bandwidth(0, 10_000_000)
    qdiscs = a.access.run(["tc", "qdisc", "show", "dev", a.end.ifname]).stdout
    assert "pfifo" in qdiscs and "limit 200" in qdiscs  # the queue was kept: changed in place
    after = tcp_goodput(a, b, seconds=4).bits_per_second
    print(f"{backend}: before {before / 1e6:.2f} Mbit/s, after change to 10 Mbit/s: {after / 1e6:.2f} Mbit/s")
    assert 0.9 <= before / 50e6 <= 1.1
    assert 0.9 <= after / 10e6 <= 1.1
    ctl.set_loss(0, 5.0, direction="a")
    assert ctl.shape(0, "a").loss_pct == 5.0 and ctl.shape(0, "b").loss_pct is None


def test_node_access_runs_spawns_and_moves_files(open_lab, backend, tmp_path):
    session = open_lab(pair_spec(lab_name(backend, "acc"), bw="10mbit"))
    node = session.access("a")
    assert node.run(["sh", "-c", "exit 7"], check=False).returncode == 7
    # A container has its own name (its UTS namespace is entered); a Mininet host shares this machine's.
    assert node.run(["hostname"]).stdout.strip() == ("a" if backend == "docker" else os.uname().nodename)
    local = tmp_path / "in" / "hello.txt"
    local.parent.mkdir()
    local.write_text("hello node\n")
    node.put(local.parent, f"{node.work_dir}/box")
    assert node.run(["cat", f"{node.work_dir}/box/hello.txt"]).stdout == "hello node\n"
    process = node.spawn(["sh", "-c", "echo started; trap 'echo bye; exit 3' TERM; sleep 60 & wait"],
                         log=f"{node.work_dir}/box/out.log")
    deadline = time.monotonic() + 10
    while "started" not in node.run(["cat", f"{node.work_dir}/box/out.log"], check=False).stdout:
        assert time.monotonic() < deadline, "the spawned process never wrote its log"
        time.sleep(0.05)
    assert process.poll() is None
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 3  # the signal reached the program itself, which exited its own way
    node.fetch(f"{node.work_dir}/box", tmp_path / "back")
    assert (tmp_path / "back" / "out.log").read_text().split() == ["started", "bye"]


@pytest.fixture
def no_user_mode_linux(monkeypatch):
    """This machine as if user-mode Linux (the impairment appliance) were not installed."""
    monkeypatch.setattr(appliance, "UML_KERNEL", "/nonexistent/linux.uml")


def test_impairments_without_netem_or_the_appliance_are_refused_before_anything_is_built(
        caps, backend, no_user_mode_linux):
    if caps.has_qdisc("netem"):
        pytest.skip("this kernel has netem, so nothing is refused")
    name = lab_name(backend, "refuse")
    session = LabSession(pair_spec(name, bw="10mbit", delay="5ms"), caps, backend=backend)
    with pytest.raises(appliance.ApplianceMissing) as err:
        session.open()
    assert appliance.INSTALL_HINT in str(err.value) and "\n" not in str(err.value)
    assert not [x for x in get_backend(backend).leftovers(set()) if name in x]
    assert labstate.load(name) is None


def test_allow_missing_builds_and_records_what_was_left_out(open_lab, backend, caps, no_user_mode_linux):
    if caps.has_qdisc("netem"):
        pytest.skip("this kernel has netem: nothing is left out")
    session = open_lab(pair_spec(lab_name(backend, "allow"), bw="10mbit", delay="5ms", jitter="1ms"),
                       allow_missing=True)
    dropped = {a["direction"]: a["dropped"] for a in session.lab.applied}
    assert dropped == {"a->b": ["delay", "jitter"], "b->a": ["delay", "jitter"]}
    # who installed what: the rate only, by the host kernel (what was left out was installed by nobody)
    assert [a["providers"] for a in session.lab.applied] == [{"bw": "host kernel"}] * 2
    qdiscs = session.access("a").run(["tc", "qdisc", "show", "dev", "eth1"]).stdout
    assert "htb" in qdiscs and "netem" not in qdiscs


def test_down_leaves_nothing(caps, backend):
    name = lab_name(backend, "down")
    before = set(get_backend(backend).leftovers(set()))  # other labs' (e.g. a user's) are not this test's
    session = LabSession(load_spec_text(TRIANGLE.format(name=name), filename="t.yaml"), caps, backend=backend,
                         management=True)
    session.open()
    try:
        while_up = set(get_backend(backend).leftovers(set())) - before
        assert [x for x in while_up if name in x], "the lab is there while open"
        assert [x for x in while_up if x.startswith("management interface")], "and its management path"
    finally:
        session.close()
    # Nothing of it remains: namespaces, containers, management interfaces, SSH and node folders.
    assert set(get_backend(backend).leftovers(set())) - before == set()
    assert labstate.load(name) is None
    assert _our_processes(name) == []


RING = "name: {name}\nnodes: {{{nodes}}}\nlinks:\n{links}"


def ring_topology(name: str, n: int) -> str:
    nodes = ", ".join(f"n{i}: {{}}" for i in range(n))
    links = "".join(f"  - {{endpoints: [n{i}, n{(i + 1) % n}], bw: 10mbit}}\n" for i in range(n))
    return RING.format(name=name, nodes=nodes, links=links)


def test_exec_and_kill_9_of_the_holder_during_bring_up_then_clean_leaves_nothing(backend, tmp_path):
    """`testbed up --backend B` from another shell, `exec` into a node, then a holder killed -9 while it
    builds a second lab: `clean` removes exactly what both left, nothing of anyone else's."""
    name = lab_name(backend, "kill")
    path = tmp_path / "ring.yaml"
    path.write_text(ring_topology(name, 8))
    veths_before = _root_veths()
    holder = None
    try:
        proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "up", str(path), "--backend", backend],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        # Kill the holder as soon as the backend has created something, well before the lab is up.
        while True:
            state = labstate.load(name)
            made = [x for x in get_backend(backend).leftovers(set()) if name in x]
            if state is not None and made:
                holder = state.owner_pid
                break
            assert proc.poll() is None, f"`testbed up` ended before building anything: {proc.communicate()}"
            assert time.monotonic() < deadline, "the lab never started to be built"
            time.sleep(0.01)
        assert state.status == "building", "the holder was to be killed during bring-up"
        os.kill(holder, signal.SIGKILL)
        proc.wait(timeout=60)
        assert proc.returncode != 0
        report = json.loads(run_cli("clean", "--json").stdout)
        assert name in report["labs"], report
        assert [x for x in get_backend(backend).leftovers(set()) if name in x] == []
        assert labstate.load(name) is None
        assert _our_processes(name) == []
        assert _root_veths() == veths_before, "a veth of the lab was left in the root namespace"
        # Now a complete lab, and exec into it from another shell.
        up = json.loads(run_cli("up", str(path), "--backend", backend, "--json").stdout)
        peer = up["lab"]["links"][0]["b"]["address"].split("/")[0]
        ping = run_cli("exec", name, "n0", "--", "ping", "-c", "1", "-W", "2", peer, check=False)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert run_cli("exec", name, "n1", "--", "sh", "-c", "exit 7", check=False).returncode == 7
        run_cli("down", name)
        assert [x for x in get_backend(backend).leftovers(set()) if name in x] == []
    finally:
        if labstate.load(name) is not None:
            run_cli("clean", "--all", check=False)


def test_clean_kills_what_a_node_keeps_forking(backend):
    """A process in a node that ignores SIGTERM and forks while `clean` runs (tests/spawner.py: relays,
    children adopted by init, children in a network namespace of their own): none is left. Mininet finds
    them through the node's cgroup, Docker through the container. Bounded; whatever is left is killed
    afterwards. Without a writable cgroup2 hierarchy a Mininet node's process that left its namespace
    cannot be found once its parent is dead, so there the spawner's children stay in the namespace."""
    moving = backend != "mininet" or cgroups.root() is not None
    name = lab_name(backend, "fork")
    path = Path(f"/tmp/{name}.yaml")  # not tmp_path: Docker nodes see their own /tmp, Mininet's see ours
    path.write_text(TRIANGLE.format(name=name))
    mark = spawner.marker()
    sleeper = f"/tmp/{mark}"  # the node's /tmp (this machine's for Mininet)
    child = None
    try:
        lab = json.loads(run_cli("up", str(path), "--backend", backend, "--json").stdout)
        run_cli("exec", name, "b", "--", "sh", "-c", 'ln -s "$(command -v sleep)" "$1"', "sh", sleeper)
        child = subprocess.Popen([sys.executable, "-m", "testbed.cli", "exec", name, "b", "--",
                                  *spawner.argv(mark, sleeper, moving)], start_new_session=True)
        node_ns = spawner.netns_inode(lab["lab"]["nodes"]["b"]["handle"]["pid"])
        deadline = time.monotonic() + 60
        while True:  # until it has forked each kind: adopted by init, and (moving) moved away
            found = spawner.processes(mark)
            adopted = [p for p in found if sweep.parent(p) not in found and spawner.netns_inode(p) == node_ns]
            moved = [p for p in found if spawner.netns_inode(p) not in (node_ns, None)]
            if len(found) >= 20 and adopted and (moved or not moving):
                break
            assert child.poll() is None, "the spawner ended before it forked enough"
            assert time.monotonic() < deadline, f"the spawner never forked each kind: {found}"
            time.sleep(0.02)
        os.kill(lab["holder_pid"], signal.SIGKILL)
        report = json.loads(run_cli("clean", "--json").stdout)
        assert name in report["labs"], report
        assert spawner.wait_until_gone(mark) == [], "processes of the node outlived `clean`"
        assert [x for x in get_backend(backend).leftovers(set()) if name in x] == []
    finally:
        left = spawner.kill_all(mark)
        if child is not None:
            child.wait(timeout=30)
        Path(sleeper).unlink(missing_ok=True)
        path.unlink(missing_ok=True)
        if labstate.load(name) is not None:
            run_cli("down", name, check=False)
    assert left == [], f"the teardown had to kill {left}"


def _root_veths() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show", "type", "veth"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.strip()}


def _our_processes(lab: str) -> list[str]:
    """Processes whose command line names the lab (holders, nsenter, mnexec ...), other than this test's."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"tbed-{lab}-" in cmd or (lab in cmd and "testbed" in cmd):
            found.append(f"{entry}: {cmd}")
    return found


def test_backends_are_chosen_by_name():
    assert set(BACKENDS) == {"mininet", "docker", "ssh"}
    with pytest.raises(Exception) as err:
        get_backend("vagrant")
    assert "unknown backend 'vagrant'" in str(err.value) and "mininet" in str(err.value)


def test_a_command_that_times_out_leaves_nothing_running_in_the_node(open_lab, backend):
    from testbed.proc import CommandError

    session = open_lab(pair_spec(lab_name(backend, "tmo"), bw="10mbit"))
    node = session.access("a")
    with pytest.raises(CommandError, match="timed out"):
        node.run(["sleep", "37.5"], timeout=1)
    deadline = time.monotonic() + 5
    while "sleep 37.5" in node.run(["ps", "-eo", "args"]).stdout:
        assert time.monotonic() < deadline, "the timed-out command goes on running in the node"
        time.sleep(0.1)
