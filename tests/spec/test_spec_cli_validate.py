"""`testbed validate FILE [--json]` glue: output, exit status, file-system errors."""
from __future__ import annotations

import io
import json
from dataclasses import asdict
import os
import subprocess
import sys
from pathlib import Path


from testbed.spec.cli_validate import validate_command
from testbed.spec.resolve import Shaping

ROOT = Path(__file__).resolve().parents[2]
DIAMOND = ROOT / "topologies" / "diamond.yaml"


def run(path, json_output=False):
    out, err = io.StringIO(), io.StringIO()
    code = validate_command(Path(path), json_output, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_valid_file_prints_a_summary():
    code, out, err = run(DIAMOND)
    assert code == 0 and err == ""
    assert out.startswith("diamond: 4 routers, 0 hosts, 4 links, run 60s\n")
    assert "  [1] r2:eth2 <-> r4:eth1 10mbit queue 30 weight 10\n" in out
    assert "kernel features needed: bw (htb/tbf), queue (qdisc limit)" in out
    assert "latency.p99 <= 50ms for priority real_time" in out


def test_json_output_is_the_resolved_spec():
    code, out, _ = run(DIAMOND, json_output=True)
    assert code == 0
    data = json.loads(out)
    assert data["ok"] is True and data["spec"]["name"] == "diamond"
    assert data["routers"] == ["r1", "r2", "r3", "r4"]
    assert data["links"][1]["a"] == {
        "node": "r2", "ifname": "eth2", "address": "10.10.0.5/30",
        "egress": asdict(Shaping(bw_bps=10_000_000, queue_packets=30)),
    }
    assert data["links"][1]["a"]["egress"]["queue_packets"] == 30 and data["links"][1]["a"]["egress"]["qdisc"] is None
    assert data["features"] == ["bw", "queue"]
    assert data["router_settings"]["r1"]["lease"] == "3s"


def test_invalid_file_prints_problems_and_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nnodes:\n  r1: {}\nlinks:\n  - endpoints: [r1, r2]\n    bw: 10 mbps/s\n")
    code, out, err = run(bad)
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"{bad}:6 links[0].bw: '10 mbps/s' is not a bandwidth (examples: 10mbit, 500kbit, 1gbit); "
        "unknown unit 'mbps/s' (known: bits/s: bit, kbit, mbit, gbit, tbit, kibit...; bytes/s, x8: B/s, kB/s, MB/s, "
            "GB/s, KiB/s...; see 'Rates' in docs/spec.md)",
    ]
    code, out, _ = run(bad, json_output=True)
    assert code == 2
    assert json.loads(out)["problems"][0]["path"] == "links[0].bw"


def test_missing_file_and_directory_exit_2(tmp_path):
    code, _, err = run(tmp_path / "nope.yaml")
    assert code == 2 and err.strip() == f"{tmp_path / 'nope.yaml'}: no such file"
    code, _, err = run(tmp_path)
    assert code == 2 and "is a directory" in err


def test_unreadable_file_exits_2(tmp_path, monkeypatch):
    f = tmp_path / "secret.yaml"
    f.write_text("name: t\n")

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_text", denied)
    code, _, err = run(f)
    assert code == 2 and err.strip() == f"{f}: permission denied"


def test_binary_file_exits_2(tmp_path):
    f = tmp_path / "bin.yaml"
    f.write_bytes(b"\xff\xfe\x00garbage")
    code, _, err = run(f)
    assert code == 2 and "not UTF-8 text" in err


def test_no_traceback_in_a_real_process(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nnodes: [\n")
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from testbed.spec.cli_validate import validate_command; "
         "sys.exit(validate_command(Path(sys.argv[1]), False))", str(bad)],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"{bad}:3: YAML syntax error")
