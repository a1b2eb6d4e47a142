"""The bundle is self-contained: the system python3 (which lacks prometheus_client) runs the
router's metrics module and nodectl from the unpacked bundle alone."""
from __future__ import annotations

import json
import subprocess
import tarfile

from testbed.deploy.bundle import build_bundle


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


def test_nodectl_check_reports_the_routers_reason(tmp_path):
    dest = build_bundle(tmp_path / "b.tar.gz")
    with tarfile.open(dest) as tar:
        tar.extractall(tmp_path / "x")
    d = tmp_path / "x"
    (d / "router.json").write_text(json.dumps({"node": "r1", "client_listen": ["127.0.0.1:0"], "scheduler": "fifo"}))
    r = subprocess.run(["/usr/bin/python3", str(d / "nodectl.py"), "check", "--dir", str(d)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "scheduler" in r.stderr
    (d / "router.json").write_text(json.dumps({"node": "r1", "client_listen": ["127.0.0.1:0"]}))
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
    (d / "router.json").write_text(json.dumps({"node": "r1", "client_listen": ["192.0.2.254:1"],
                                               "metrics_listen": "127.0.0.1:0"}))
    r = subprocess.run([*nodectl, "start", "--dir", str(d), "--timeout", "20"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert "exited with status 1" in r.stderr and "router.log" in r.stderr
    r = subprocess.run([*nodectl, "stop", "--dir", str(d)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "not running" in r.stdout
