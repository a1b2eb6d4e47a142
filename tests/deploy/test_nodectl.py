"""playbooks/files/nodectl.py with real processes: any router command from a launch.json (files written,
placeholders filled, readiness by TCP port or HTTP), a router that exits at start, stop, signal, pack,
a pid file whose process is gone or reused, and the controller's check of what pack sent."""
from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import json
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from runfolder.layout import LAYOUT
from testbed.proc import kill_tree

NODECTL = Path(__file__).resolve().parents[2] / "playbooks" / "files" / "nodectl.py"

#: a "router": listens on the port its config file names, says so, and exits 0 on SIGTERM
LISTENER = """
import json, signal, socket, sys, time
conf = json.load(open(sys.argv[1]))
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
time.sleep(conf.get("delay", 0))
s.bind(("127.0.0.1", conf["port"])); s.listen()
print("listening", conf["port"], flush=True)
while True:
    time.sleep(1)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nodectl(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(NODECTL), *args], capture_output=True, text=True, timeout=timeout)


def pack_tarball(stdout: str) -> tarfile.TarFile:
    """The tarball pack's stdout carries, its header line checked."""
    header, _, text = stdout.partition("\n")
    tag, length, digest = header.split()
    assert (tag, int(length), digest) == ("TBPACK", len(text), hashlib.sha256(text.encode()).hexdigest())
    return tarfile.open(fileobj=io.BytesIO(base64.b64decode(text)))


def collect_unpack(stdin: str, dest: Path) -> subprocess.CompletedProcess:
    """vars/common.yml's collect_unpack_script as the collect playbooks run it (sh, DEST in the environment)."""
    script = yaml.safe_load((NODECTL.parents[1] / "vars" / "common.yml").read_text())["collect_unpack_script"]
    return subprocess.run(["sh", "-c", script], input=stdin, env={"PATH": "/usr/bin:/bin", "DEST": str(dest)},
                          capture_output=True, text=True, timeout=30)


@pytest.fixture
def node(tmp_path):
    """An install folder; whatever router it started is killed at the end."""
    d = tmp_path / "node"
    d.mkdir()
    (d / "listener.py").write_text(LISTENER)
    yield d
    pid_file = d / "router.pid"
    if pid_file.exists():
        kill_tree(int(pid_file.read_text().split()[0]))


def write_launch(d: Path, port: int, **extra) -> None:
    launch = {"driver": "command", "argv": ["{python}", "{dir}/listener.py", "{dir}/conf.json"],
              "files": {"conf.json": json.dumps({"port": port, **extra.pop("conf", {})})},
              "ready": {"tcp": port}, "env": {"WHERE": "{dir}"}, "check": None, **extra}
    (d / "launch.json").write_text(json.dumps(launch))


def gone(pid) -> bool:
    """No such process, or only its zombie (dead, waiting for the init process to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def running(d: Path) -> bool:
    pid, started = (d / "router.pid").read_text().split()
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return stat[19] == started and stat[0] not in ("Z", "X")


def test_start_waits_for_the_port_then_stop(node):
    port = free_port()
    write_launch(node, port, conf={"delay": 0.5})
    t0 = time.monotonic()
    r = nodectl("start", "--dir", str(node), "--timeout", "10")
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 >= 0.5  # not before it listened
    out = json.loads(r.stdout)
    assert out["already_running"] is False and out["ready_url"] is None
    assert json.loads((node / "conf.json").read_text())["port"] == port  # the launch's file written
    assert oct((node / "conf.json").stat().st_mode & 0o777) == "0o600"
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    env = Path(f"/proc/{out['pid']}/environ").read_bytes().split(b"\0")
    assert f"WHERE={node}".encode() in env  # placeholders filled in the environment too
    assert nodectl("start", "--dir", str(node)).stdout.count('"already_running": true') == 1
    status = nodectl("status", "--dir", str(node))
    assert status.returncode == 0 and status.stdout.strip() == str(out["pid"])
    r = nodectl("stop", "--dir", str(node), "--timeout", "5")
    assert "stopped by SIGTERM" in r.stdout and not running(node)
    assert "router not running" in nodectl("stop", "--dir", str(node)).stdout
    assert nodectl("status", "--dir", str(node)).returncode == 1


def test_a_router_that_exits_at_start_fails_with_its_own_words(node):
    launch = {"driver": "command", "argv": ["sh", "-c", "echo 'bad option --frobnicate' >&2; exit 3"],
              "files": {}, "ready": {"tcp": free_port()}, "env": {}}
    (node / "launch.json").write_text(json.dumps(launch))
    r = nodectl("start", "--dir", str(node), "--timeout", "10")
    assert r.returncode == 1
    assert "router exited with status 3 at start" in r.stderr and "bad option --frobnicate" in r.stderr


def test_a_router_that_never_gets_ready_is_stopped_not_left_running(node):
    write_launch(node, free_port(), conf={"delay": 60})
    r = nodectl("start", "--dir", str(node), "--timeout", "1")
    assert r.returncode == 1 and "did not answer within 1 s" in r.stderr
    assert not running(node)


def test_signal_kills_at_once_and_never_a_reused_pid(node):
    port = free_port()
    write_launch(node, port)
    assert nodectl("start", "--dir", str(node), "--timeout", "10").returncode == 0
    assert nodectl("signal", "--dir", str(node), "--signal", "KILL").returncode == 0
    time.sleep(0.2)
    assert not running(node)
    r = nodectl("signal", "--dir", str(node))
    assert r.returncode == 1 and "no router running" in r.stderr
    # a live process under the recorded pid but with another start time is not ours
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (node / "router.pid").write_text(f"{sleeper.pid} 1\n")
        assert nodectl("signal", "--dir", str(node)).returncode == 1
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_pack_holds_the_logs_the_launch_and_its_files(node):
    write_launch(node, free_port())
    assert nodectl("start", "--dir", str(node), "--timeout", "10").returncode == 0
    nodectl("stop", "--dir", str(node))
    r = nodectl("pack", "--dir", str(node))
    with pack_tarball(r.stdout) as tar:
        names = sorted(tar.getnames())
        log = tar.extractfile("router.log").read().decode()
    assert names == ["conf.json", "launch.json", "router.log"]
    assert "listening" in log


def test_the_controller_unpacks_a_pack_only_if_it_arrived_whole(node, tmp_path):
    """collect_unpack_script unpacks what pack sent (line ends a tty rewrote included) and refuses, saying how
    much arrived, a pack cut short or changed on the way, or text that is no pack at all, unpacking nothing."""
    write_launch(node, free_port())
    assert nodectl("start", "--dir", str(node), "--timeout", "10").returncode == 0
    nodectl("stop", "--dir", str(node))
    sent = nodectl("pack", "--dir", str(node)).stdout
    header, _, text = sent.partition("\n")
    whole = collect_unpack(sent + "\n", tmp_path / "whole")  # the shell module adds a newline to stdin
    assert whole.returncode == 0, whole.stderr
    assert sorted(p.name for p in (tmp_path / "whole").iterdir()) == ["conf.json", "launch.json", "router.log"]
    assert (tmp_path / "whole" / "router.log").read_bytes() == (node / "router.log").read_bytes()
    assert collect_unpack(header + "\r\n" + text, tmp_path / "crlf").returncode == 0
    cut = len(text) - 5
    short = collect_unpack(header + "\n" + text[:cut], tmp_path / "short")
    assert short.returncode != 0 and f"arrived damaged: {cut} of {len(text)} base64 characters" in short.stderr
    changed = collect_unpack(header + "\n" + text[:-8] + "AAAAAAAA", tmp_path / "changed")
    assert changed.returncode != 0 and f"arrived damaged: {len(text)} of {len(text)}" in changed.stderr
    foreign = collect_unpack("Traceback (most recent call last):\n", tmp_path / "foreign")
    assert foreign.returncode != 0 and "it starts 'Traceback'" in foreign.stderr
    nothing = collect_unpack("\n", tmp_path / "nothing")  # all lost on the way
    assert nothing.returncode != 0 and "it starts ''" in nothing.stderr
    assert not any((tmp_path / d).exists() for d in ("short", "changed", "foreign", "nothing"))


def test_machine_collect_copies_the_files_machine_pack_holds(node, tmp_path):
    """machine-collect (stop-collect-machine.yml) puts into DEST/<node>/ the very files machine-pack's tarball
    holds, with their content and mode; a node that left none gets no folder."""
    write_launch(node, free_port())
    assert nodectl("start", "--dir", str(node), "--timeout", "10").returncode == 0
    nodectl("stop", "--dir", str(node))
    plan = {"code_dir": str(tmp_path), "nodes": [{"name": "n1", "dir": str(node)},
                                                 {"name": "n2", "dir": str(tmp_path / "never-started")}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    packed = nodectl("machine-pack", "--plan", str(tmp_path / "plan.json"))
    with pack_tarball(packed.stdout) as tar:
        in_tar = {m.name: (tar.extractfile(m).read(), m.mode) for m in tar.getmembers()}
    dest = tmp_path / "collected"
    r = nodectl("machine-collect", "--plan", str(tmp_path / "plan.json"), "--dest", str(dest))
    assert r.returncode == 0, r.stderr
    copied = {p.relative_to(dest).as_posix(): (p.read_bytes(), p.stat().st_mode & 0o7777)
              for p in dest.rglob("*") if p.is_file()}
    assert sorted(copied) == sorted(in_tar) == ["n1/conf.json", "n1/launch.json", "n1/router.log"]
    assert copied == in_tar
    assert sorted(p.name for p in dest.iterdir()) == ["n1"]


def test_machine_collect_copies_the_other_nodes_files_when_one_nodes_cannot_be(node, tmp_path):
    """One node's folder cannot be made under DEST (a file has its name): the other node's files are still
    copied, with their times, and the exit names the node that failed and why."""
    write_launch(node, free_port())
    plan = {"code_dir": str(tmp_path), "nodes": [{"name": "n1", "dir": str(node)}, {"name": "n2", "dir": str(node)}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    dest = tmp_path / "collected"
    dest.mkdir()
    (dest / "n1").write_text("in the way")
    r = nodectl("machine-collect", "--plan", str(tmp_path / "plan.json"), "--dest", str(dest))
    assert r.returncode == 1
    assert "n1:" in r.stderr and "n2" not in r.stderr
    copied = dest / "n2" / "launch.json"
    assert copied.read_bytes() == (node / "launch.json").read_bytes()
    assert copied.stat().st_mtime_ns == (node / "launch.json").stat().st_mtime_ns


def test_the_files_it_keeps_are_the_layouts():
    """nodectl.py runs alone on a node (standard library, no runfolder): its names of what a router leaves in
    its folder must be the ones the run collects and salvages (runfolder.layout.LAYOUT)."""
    spec = importlib.util.spec_from_file_location("nodectl_under_test", NODECTL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.LAUNCH == LAYOUT.launch_name
    assert tuple(module.ROUTER_FILES) == LAYOUT.router_file_names


def test_machine_start_stops_every_router_when_one_fails(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    for d in (good, bad):
        d.mkdir()
        (d / "listener.py").write_text(LISTENER)
    port = free_port()
    launches = {
        "good": {"driver": "command", "argv": ["{python}", "{dir}/listener.py", "{dir}/conf.json"],
                 "files": {"conf.json": json.dumps({"port": port})}, "ready": {"tcp": port}, "env": {}},
        "bad": {"driver": "command", "argv": ["sh", "-c", "echo no such interface >&2; exit 2"], "files": {},
                "ready": {"tcp": free_port()}, "env": {}},
    }
    plan = {"code_dir": str(tmp_path), "nodes": [{"name": n, "dir": str(tmp_path / n), "enter": [],
                                                  "python": sys.executable, "launch": launches[n]} for n in ("good", "bad")]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    try:
        r = nodectl("machine-start", "--plan", str(tmp_path / "plan.json"), "--timeout", "10")
        assert r.returncode == 1
        report = json.loads(r.stdout)
        assert "pid" in report["good"] and "no such interface" in report["bad"]["error"]
        assert "bad: router exited with status 2 at start" in r.stderr
        assert not running(good)  # nothing left running
    finally:
        for d in (good, bad):
            if (d / "router.pid").exists():
                kill_tree(int((d / "router.pid").read_text().split()[0]))


def test_stop_and_signal_reach_what_a_wrapper_started(node):
    """A router started through a wrapper (a shell that runs it as a child): stop and kill take the whole
    process group, so nothing of it is left listening."""
    port = free_port()
    write_launch(node, port, argv=["sh", "-c", '"$0" "$1" "$2"; echo wrapper done', "{python}", "{dir}/listener.py",
                                   "{dir}/conf.json"])
    assert nodectl("start", "--dir", str(node), "--timeout", "10").returncode == 0
    leader = int((node / "router.pid").read_text().split()[0])
    children = Path(f"/proc/{leader}/task/{leader}/children").read_text().split()
    assert len(children) == 1  # the listener runs as the wrapper's child
    assert "stopped by SIGTERM" in nodectl("stop", "--dir", str(node), "--timeout", "5").stdout
    assert gone(children[0])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1)
    assert nodectl("start", "--dir", str(node), "--timeout", "10").returncode == 0
    leader = int((node / "router.pid").read_text().split()[0])
    child = Path(f"/proc/{leader}/task/{leader}/children").read_text().split()[0]
    assert nodectl("signal", "--dir", str(node), "--signal", "KILL").returncode == 0
    time.sleep(0.3)
    assert gone(child) and gone(leader)


def test_a_listener_that_is_not_the_routers_does_not_make_it_ready(node):
    port = free_port()
    with socket.socket() as other:  # somebody else's listener on the router's port, in the same namespace
        other.bind(("127.0.0.1", port))
        other.listen()
        write_launch(node, port, conf={"delay": 60})
        r = nodectl("start", "--dir", str(node), "--timeout", "1.5")
    assert r.returncode == 1 and "did not answer within 1.5 s" in r.stderr
    assert not running(node)


def test_a_command_that_cannot_be_started_is_said_and_nothing_is_left(tmp_path):
    d = tmp_path / "node"
    d.mkdir()
    launch = {"driver": "command", "argv": ["{code}/bin/zenohd", "-c", "x"], "files": {}, "ready": {"tcp": 7}, "env": {}}
    (d / "launch.json").write_text(json.dumps(launch))
    r = nodectl("start", "--dir", str(d))
    assert r.returncode == 1 and "router could not be started:" in r.stderr and "bin/zenohd" in r.stderr
    good = tmp_path / "good"
    good.mkdir()
    (good / "listener.py").write_text(LISTENER)
    port = free_port()
    plan = {"code_dir": str(tmp_path), "nodes": [
        {"name": "good", "dir": str(good), "enter": [], "python": sys.executable,
         "launch": {"driver": "command", "argv": ["{python}", "{dir}/listener.py", "{dir}/conf.json"],
                    "files": {"conf.json": json.dumps({"port": port})}, "ready": {"tcp": port}, "env": {}}},
        {"name": "bad", "dir": str(d), "enter": [], "python": sys.executable, "launch": launch}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    try:
        r = nodectl("machine-start", "--plan", str(tmp_path / "plan.json"), "--timeout", "10")
        assert r.returncode == 1, r.stderr
        assert "bad: router could not be started" in r.stderr
        assert not running(good)
    finally:
        if (good / "router.pid").exists():
            kill_tree(int((good / "router.pid").read_text().split()[0]))
