"""The bundle is self-contained: the system python3 (which lacks prometheus_client and zenoh) runs the
router's metrics module, nodectl and a stock Zenoh router from the unpacked bundle alone."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import tarfile
import time
from importlib import metadata

import pytest

from testbed.deploy import bundle
from testbed.deploy.bundle import BundleError, build_bundle
from testbed.drivers.testbed_router import TestbedDriver
from testbed.drivers.zenoh import ZenohDriver
from testbed.proc import kill_tree


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bundle_runs_with_plain_python3(tmp_path):
    dest = build_bundle(tmp_path / "b.tar.gz")
    with tarfile.open(dest) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path / "x")
    assert "nodectl.py" in names and "router/__main__.py" in names and "traffic/client.py" in names
    assert any(n.startswith("lib/prometheus_client/") for n in names)
    assert not any("__pycache__" in n for n in names)
    info = json.loads((tmp_path / "x" / "BUNDLE.json").read_text())
    assert info["prometheus-client"]
    env = {"PYTHONPATH": f"{tmp_path / 'x' / 'lib'}:{tmp_path / 'x'}", "PATH": "/usr/bin:/bin"}
    r = subprocess.run(["/usr/bin/python3", "-s", "-c", "import router.metrics, traffic.client, prometheus_client; "
                        "print(prometheus_client.__file__)"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(str(tmp_path / "x" / "lib"))


def test_an_optional_distribution_is_shipped_as_a_wheel_or_said_why_not(tmp_path):
    """uvloop for our router: shipped as this machine's wheel when installed on the controller, else
    BUNDLE.json says why, and the bundle is built all the same."""
    dest = build_bundle(tmp_path / "b.tar.gz", distributions=(), optional=("no-such-dist-xyz", "prometheus-client"))
    with tarfile.open(dest) as tar:
        info = json.loads(tar.extractfile("BUNDLE.json").read())
        names = tar.getnames()
    missing, there = info["optional"]["no-such-dist-xyz"], info["optional"]["prometheus-client"]
    assert missing["shipped"] == "no" and "not installed on the controller" in missing["reason"]
    assert there["shipped"] == "yes" and there["source"].startswith("wheel prometheus_client-"), there
    assert any(n.startswith("lib/prometheus_client/") for n in names)  # its files, unpacked


def _launch(d, config):
    """launch.json of our router (the testbed driver's), as the deployer writes it."""
    launch = TestbedDriver().launch_for(config).to_json()
    (d / "launch.json").write_text(json.dumps(launch))


def test_nodectl_check_reports_the_routers_reason(tmp_path):
    dest = build_bundle(tmp_path / "b.tar.gz")
    with tarfile.open(dest) as tar:
        tar.extractall(tmp_path / "x")
    d = tmp_path / "x"
    _launch(d, {"node": "r1", "client_listen": ["127.0.0.1:0"], "metrics_listen": "127.0.0.1:0",
                "scheduler": "fifo"})
    r = subprocess.run(["/usr/bin/python3", str(d / "nodectl.py"), "check", "--dir", str(d)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "scheduler" in r.stderr
    _launch(d, {"node": "r1", "client_listen": ["127.0.0.1:0"], "metrics_listen": "127.0.0.1:0"})
    r = subprocess.run(["/usr/bin/python3", str(d / "nodectl.py"), "check", "--dir", str(d)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_nodectl_start_fails_fast_with_the_log_and_stop_is_idempotent(tmp_path):
    dest = build_bundle(tmp_path / "b.tar.gz")
    with tarfile.open(dest) as tar:
        tar.extractall(tmp_path / "x")
    d = tmp_path / "x"
    nodectl = ["/usr/bin/python3", str(d / "nodectl.py")]
    # Listening on an address that is not ours: the router exits with status 1 at once.
    _launch(d, {"node": "r1", "client_listen": ["192.0.2.254:1"], "metrics_listen": "127.0.0.1:0"})
    r = subprocess.run([*nodectl, "start", "--dir", str(d), "--timeout", "20"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert "exited with status 1" in r.stderr and "router.log" in r.stderr
    r = subprocess.run([*nodectl, "stop", "--dir", str(d)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "not running" in r.stdout


# ------------------------------------------------------------------ any packages and distributions (Zenoh)

#: what the zenoh driver ships (its own definition, so that the bundle tested is the one a run deploys)
ZENOH_PACKAGES = ZenohDriver.packages
ZENOH_DISTRIBUTIONS = ZenohDriver.distributions


def _unpack(dest, where):
    with tarfile.open(dest) as tar:
        names = tar.getnames()
        tar.extractall(where)
    return names


def _isolated_env(d):
    """Only the bundle: its lib/ and its code on PYTHONPATH, nothing of the virtualenv."""
    return {"PYTHONPATH": f"{d / 'lib'}:{d}", "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}


def _imports_zenoh_from(d):
    # -S: no site module (no site-packages, no .pth files of any environment), -s: no user site
    r = subprocess.run(["/usr/bin/python3", "-S", "-s", "-c",
                        "import sys, zenoh, zenohrouter, traffic.zenohclient, prometheus_client; "
                        "print(zenoh.__file__); print(zenohrouter.__file__); print(prometheus_client.__file__); "
                        "print([p for p in sys.path if 'site-packages' in p])"],
                       env=_isolated_env(d), capture_output=True, text=True, cwd="/", timeout=60)
    assert r.returncode == 0, r.stderr
    zenoh_file, zenohrouter_file, prom_file, site = r.stdout.splitlines()
    assert zenoh_file.startswith(str(d / "lib" / "zenoh")), zenoh_file
    assert zenohrouter_file.startswith(str(d / "zenohrouter")) and prom_file.startswith(str(d / "lib"))
    assert site == "[]"


def test_a_zenoh_bundle_runs_a_router_with_only_its_own_files(tmp_path):
    dest = build_bundle(tmp_path / "z.tar.gz", packages=ZENOH_PACKAGES, distributions=ZENOH_DISTRIBUTIONS)
    d = tmp_path / "x"
    names = _unpack(dest, d)
    assert "zenohrouter/__main__.py" in names and "traffic/zenohclient.py" in names and "nodectl.py" in names
    assert any(n.startswith("lib/zenoh/") and n.endswith(".so") for n in names)
    assert not any("__pycache__" in n for n in names)
    info = json.loads((d / "BUNDLE.json").read_text())
    assert info["packages"] == list(ZENOH_PACKAGES)
    assert info["eclipse-zenoh"] == metadata.version("eclipse-zenoh")
    assert info["distributions"]["eclipse-zenoh"]["version"] == metadata.version("eclipse-zenoh")
    assert set(info["distributions"]) == set(ZENOH_DISTRIBUTIONS)
    _imports_zenoh_from(d)

    # python -m zenohrouter from the bundle alone: ready, then exit 0 on SIGTERM
    port = free_port()
    conf = d / "zenoh.json5"
    conf.write_text(json.dumps({"mode": "router", "listen": {"endpoints": [f"tcp/127.0.0.1:{port}"]},
                                "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}}}))
    log = open(d / "router.log", "wb")
    p = subprocess.Popen(["/usr/bin/python3", "-S", "-s", "-m", "zenohrouter", "--config", str(conf)],
                         env=_isolated_env(d), cwd="/", stdout=log, stderr=log, start_new_session=True)
    log.close()
    try:
        deadline = time.monotonic() + 30
        while "zenohrouter ready" not in (d / "router.log").read_text(errors="replace"):
            assert p.poll() is None, (d / "router.log").read_text()
            assert time.monotonic() < deadline, (d / "router.log").read_text()
            time.sleep(0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 0, (d / "router.log").read_text()
    finally:
        if p.poll() is None:
            kill_tree(p.pid)
            p.wait(10)

    # and as the playbooks start it: nodectl with a launch.json, ready when its port listens
    launch = {"driver": "zenoh", "argv": ["{python}", "-m", "zenohrouter", "--config", "{dir}/zenoh.json5"],
              "files": {"zenoh.json5": conf.read_text()}, "ready": {"tcp": port}, "env": {}, "check": None}
    (d / "launch.json").write_text(json.dumps(launch))
    nodectl = ["/usr/bin/python3", "-S", "-s", str(d / "nodectl.py")]
    stopped = False
    try:
        r = subprocess.run([*nodectl, "start", "--dir", str(d), "--timeout", "30"], env=_isolated_env(d),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        r = subprocess.run([*nodectl, "stop", "--dir", str(d)], env=_isolated_env(d), capture_output=True,
                           text=True, timeout=60)
        stopped = r.returncode == 0
        assert stopped, r.stderr + r.stdout
        assert "SIGTERM received: closing" in (d / "router.log").read_text()
    finally:
        pid_file = d / "router.pid"
        if not stopped and pid_file.exists():
            kill_tree(int(pid_file.read_text().split()[0]))


def test_without_pypi_and_wheel_the_installed_files_are_shipped(tmp_path, monkeypatch):
    failed = subprocess.CompletedProcess([], 1, "", "pip: network unreachable")
    monkeypatch.setattr(bundle.subprocess, "run", lambda *a, **k: failed)
    dest = build_bundle(tmp_path / "z.tar.gz", cache=tmp_path / "empty-cache", packages=ZENOH_PACKAGES,
                        distributions=ZENOH_DISTRIBUTIONS)
    d = tmp_path / "x"
    names = _unpack(dest, d)
    info = json.loads((d / "BUNDLE.json").read_text())
    for name in ZENOH_DISTRIBUTIONS:
        assert info["distributions"][name]["source"].startswith("installed copy from ")
        assert info[name] == metadata.version(name)
    # the distribution's own files (its RECORD), not a guess of the package folder: dist-info included
    assert any(n.startswith("lib/eclipse_zenoh-") and n.endswith(".dist-info/METADATA") for n in names)
    assert not any(n.endswith(".pyc") for n in names)
    monkeypatch.undo()
    _imports_zenoh_from(d)


def test_a_cached_wheel_is_used_without_pip(tmp_path, monkeypatch):
    build_bundle(tmp_path / "first.tar.gz", distributions=("eclipse-zenoh",))  # fills the default cache
    calls = []
    monkeypatch.setattr(bundle.subprocess, "run", lambda *a, **k: calls.append(a))
    dest = build_bundle(tmp_path / "z.tar.gz", distributions=("eclipse-zenoh",))
    assert calls == []
    with tarfile.open(dest) as tar:
        info = json.loads(tar.extractfile("BUNDLE.json").read())
    assert info["distributions"]["eclipse-zenoh"]["source"].startswith("wheel eclipse_zenoh-")


def test_a_distribution_not_installed_is_named_with_how_to_install_it(tmp_path):
    with pytest.raises(BundleError, match=r"no-such-dist-xyz is not installed on the controller; "
                                          r"`pip install no-such-dist-xyz`"):
        build_bundle(tmp_path / "z.tar.gz", distributions=("prometheus-client", "no-such-dist-xyz"))
    assert not (tmp_path / "z.tar.gz").exists()
    with pytest.raises(BundleError, match="package 'nosuchpkg'"):
        build_bundle(tmp_path / "z.tar.gz", packages=("router", "nosuchpkg"))


def test_extra_files_are_shipped_in_the_root(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "a.txt").write_text("a")
    (tmp_path / "tool.sh").write_text("echo hi\n")
    dest = build_bundle(tmp_path / "b.tar.gz", extra=[tmp_path / "conf", tmp_path / "tool.sh"])
    with tarfile.open(dest) as tar:
        names = tar.getnames()
        info = json.loads(tar.extractfile("BUNDLE.json").read())
    assert "conf/a.txt" in names and "tool.sh" in names and info["extra"] == ["conf", "tool.sh"]
