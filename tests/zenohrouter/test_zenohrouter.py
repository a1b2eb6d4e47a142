"""``python -m zenohrouter``: real processes on loopback -- exit codes, readiness, SIGTERM, a router chain."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.proc import kill_tree

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "router"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from routerlab import free_port  # noqa: E402
from zenohlab import ROOT, ZenohLab, router_config, wait_for  # noqa: E402


def run(config_path: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zenohrouter", "--config", str(config_path), *args], cwd=str(ROOT),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def lab(tmp_path):
    lab = ZenohLab(tmp_path)
    try:
        yield lab
    finally:
        lab.cleanup()


def test_a_bad_config_exits_2_with_zenohs_reason(tmp_path):
    bad = tmp_path / "bad.json5"
    bad.write_text('{ mode: "router", lisen: { endpoints: ["tcp/127.0.0.1:1"] } }')
    r = run(bad)
    assert r.returncode == 2
    assert "zenohrouter: invalid config" in r.stderr and "unknown field `lisen`" in r.stderr
    r = run(tmp_path / "missing.json5")
    assert r.returncode == 2 and "No such file or directory" in r.stderr
    broken = tmp_path / "broken.json5"
    broken.write_text('{ mode: "router", ')
    r = run(broken)
    assert r.returncode == 2 and "invalid config" in r.stderr


@pytest.mark.parametrize("mode", ["peer", "client", None])
def test_a_mode_other_than_router_exits_2(tmp_path, mode):
    conf = tmp_path / "c.json5"
    conf.write_text(json.dumps({"listen": {"endpoints": [f"tcp/127.0.0.1:{free_port()}"]},
                                **({"mode": mode} if mode else {})}))
    r = run(conf)
    assert r.returncode == 2
    assert f"mode is {json.dumps(mode)}" in r.stderr and "runs only a router" in r.stderr


def test_check_validates_without_opening(tmp_path):
    conf = tmp_path / "c.json5"
    conf.write_text(json.dumps(router_config(["tcp/192.0.2.254:7447"])))  # not ours: fine for a check
    r = run(conf, "--check")
    assert r.returncode == 0 and "is valid" in r.stdout


def test_an_address_in_use_exits_2_with_zenohs_reason(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        conf = tmp_path / "c.json5"
        conf.write_text(json.dumps(router_config([f"tcp/127.0.0.1:{s.getsockname()[1]}"])))
        r = run(conf)
    assert r.returncode == 2
    assert "cannot open the router session" in r.stderr and "Address already in use" in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ready_line_then_a_stop_signal_exits_0(lab, sig):
    r = lab.add("a", client_port=free_port(), router_port=free_port())
    lab.start()
    line = next(x for x in r.log().splitlines() if x.startswith("zenohrouter ready"))
    assert "zid=" in line and f"tcp/127.0.0.1:{r.client_port}" in line and f"tcp/127.0.0.1:{r.router_port}" in line
    with socket.create_connection(("127.0.0.1", r.client_port), timeout=5):
        pass  # the listeners are bound once ready is written
    r.proc.send_signal(sig)
    assert r.proc.wait(20) == 0, r.log()
    assert f"{signal.Signals(sig).name} received: closing" in r.log()


def test_a_stop_signal_during_start_up_is_honoured(tmp_path):
    conf = tmp_path / "c.json5"
    conf.write_text(json.dumps(router_config([f"tcp/127.0.0.1:{free_port()}"])))
    p = subprocess.Popen([sys.executable, "-m", "zenohrouter", "--config", str(conf)], cwd=str(ROOT),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        time.sleep(0.3)  # the interpreter is importing zenoh or opening the session
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
        assert p.returncode in (0, -signal.SIGTERM), out  # before the handler: the default action
    finally:
        if p.poll() is None:
            kill_tree(p.pid)
            p.wait(10)


def test_two_routers_link_and_log_their_transports(lab):
    a = lab.add("a", client_port=free_port(), router_port=free_port())
    b = lab.add("b", client_port=free_port(), connect=[a])
    lab.start()
    wait_for(lambda: "transport up router" in a.log() and "transport up router" in b.log(), 15, "the A-B link")
    zid_b = b.log().split("zid=")[1].split()[0]
    assert f"transport up router {zid_b}" in a.log()
    assert lab.stop(b) == 0
    wait_for(lambda: f"transport down router {zid_b}" in a.log(), 15, "A to see B go")
