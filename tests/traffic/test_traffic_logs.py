"""Log files (buffering, names, summary) and what makes traffic/ deployable to a bare lab node."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from traffic.logs import (
    CsvLog, close_process_log, log_summary, open_process_log, read_summary,
)
from runfolder.layout import LAYOUT
from runfolder.records import RECV_HEADER, SEND_HEADER

ROOT = Path(__file__).resolve().parents[2]
OURS = ["pacing.py", "logs.py", "clients.py", "profiles.py", "querier.py", "__main__.py"]


def test_csv_is_buffered_until_flush_and_complete_after_close(tmp_path):
    log = CsvLog(str(tmp_path / "d" / LAYOUT.send_log_name("zpub.pub1")), SEND_HEADER)
    path = tmp_path / "d" / "send-zpub.pub1.csv"
    assert path.read_text() == "seq,send_ns,size\n"  # header is on disk at once
    log.write_send(0, 1_700_000_000_000_000_001, 1250)
    log.write_send(1, 1_700_000_000_000_000_002, 1250)
    assert path.read_text() == "seq,send_ns,size\n"  # buffered, no I/O per line
    log.flush()
    assert path.read_text().splitlines() == ["seq,send_ns,size", "0,1700000000000000001,1250",
                                             "1,1700000000000000002,1250"]
    log.write_send(2, 3, 24)
    log.close()
    log.close()  # idempotent
    assert path.read_text().splitlines()[-1] == "2,3,24"
    assert log.lines == 3


def test_recv_csv_and_buffer_limit(tmp_path):
    log = CsvLog(str(tmp_path / LAYOUT.recv_log_name("bulk", "r4")), RECV_HEADER, max_buffered=10)
    for i in range(25):
        log.write_recv(i, 100 + i, 200 + i, 1200)
    lines = (tmp_path / "recv-bulk-r4.csv").read_text().splitlines()
    assert lines[0] == "seq,send_ns,recv_ns,size"
    assert len(lines) == 1 + 20  # two full buffers written without an explicit flush
    log.close()
    assert (tmp_path / "recv-bulk-r4.csv").read_text().splitlines()[-1] == "24,124,224,1200"


def test_process_log_lines_and_summary(tmp_path):
    logger = open_process_log(str(tmp_path), "pub-x")
    logger.info("hello %d", 3)
    log_summary(logger, {"sent": 5, "end": "completed"})
    close_process_log(logger)
    lines = (tmp_path / "pub-x.log").read_text().splitlines()
    ts, level, rest = lines[0].split(" ", 2)
    assert int(ts) > 1_600_000_000 * 10**9 and level == "INFO" and rest == "pub-x: hello 3"
    assert read_summary(str(tmp_path / "pub-x.log")) == {"sent": 5, "end": "completed"}
    assert read_summary(str(tmp_path / "missing.log")) is None


def test_traffic_modules_are_deployable_python39_stdlib_router_and_runfolder_only():
    from tests.conftest import not_deployable

    assert [p for name in OURS for p in not_deployable(ROOT / "traffic" / name, {"router", "traffic", "runfolder"})] == []


def test_cli_help_and_unwritable_log_dir(tmp_path):
    r = subprocess.run([sys.executable, "-m", "traffic", "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and "pub" in r.stdout and "sub" in r.stdout
    blocker = tmp_path / "file"
    blocker.write_text("")
    plan = {"version": 1, "role": "sub", "name": "sub-r1", "node": "r1", "router": {"host": "127.0.0.1", "port": 9},
            "t0_ns": 0, "end_ns": 1, "log_dir": str(blocker / "sub"),
            "flows": [{"name": "f", "flow_id": 1, "key": "a/b"}]}
    (tmp_path / "p.json").write_text(json.dumps(plan))
    r = subprocess.run([sys.executable, "-m", "traffic", "sub", "--plan", str(tmp_path / "p.json")], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "cannot write the process log" in r.stderr and "Traceback" not in r.stderr
