"""Real traffic processes against a real router on loopback: logs line up, SIGTERM flushes, reconnects."""
from __future__ import annotations

import csv
import signal
import statistics
import time
from pathlib import Path
from typing import List

from routerlab import RouterCluster, free_port  # tests/router, put on sys.path by tests/traffic/conftest.py
from traffic.logs import read_summary

S = 1_000_000_000
MS = 1_000_000


def base(role, name, port, t0, end_ns, log_dir, **extra):
    return dict({"version": 1, "role": role, "name": name, "node": "r1", "router": {"host": "127.0.0.1", "port": port},
                 "t0_ns": t0, "end_ns": end_ns, "log_dir": str(log_dir)}, **extra)


def pub_flow(name, flow_id, key, rate, size, tick, phases, priority=5, cc="drop", burst=None):
    return {"name": name, "flow_id": flow_id, "key": key, "priority": priority, "congestion_control": cc,
            "express": False, "size": size, "rate_bps": rate, "tick_ns": tick, "phases": phases, "burst": burst}


def read_csv(path: Path) -> List[List[int]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows


def wait_for_line(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.02)
    raise AssertionError(f"{path.name}: no {text!r} within {timeout}s: "
                         f"{path.read_text(errors='replace') if path.exists() else '(no file)'}")


def test_loopback_pub_and_sub_logs_line_up(router, procs, tmp_path):
    logs = tmp_path / "traffic"
    t0 = time.time_ns() + 4 * S
    flows = [pub_flow("f500k", 11, "t/f500k", 500_000, 1024, 10 * MS, [[0, 3 * S]]),
             pub_flow("rt", 12, "t/rt", 200_000, 1250, 50 * MS, [[500 * MS, 3 * S]], priority=1, cc="block")]
    sub = base("sub", "sub-r1", router.client_port, t0, 4 * S, logs,
               flows=[{"name": f["name"], "flow_id": f["flow_id"], "key": f["key"]} for f in flows])
    pub = base("pub", "pub-both", router.client_port, t0, 3 * S, logs, flows=flows)
    procs.start(sub)
    wait_for_line(logs / "sub-r1.log", "ready: subscribed", 10)
    assert time.time_ns() < t0 - 300 * MS, "subscriber too slow to start on this machine"
    procs.start(pub)
    assert procs.wait("pub-both", 20) == 0, procs.stderr("pub-both")
    assert procs.wait("sub-r1", 20) == 0, procs.stderr("sub-r1")

    for flow in flows:
        name = flow["name"]
        sent = read_csv(logs / f"send-{name}.csv")
        recv = read_csv(logs / f"recv-{name}-r1.csv")
        assert sent[0] == ["seq", "send_ns", "size"]
        assert recv[0] == ["seq", "send_ns", "recv_ns", "size"]
        sent_rows = [tuple(map(int, r)) for r in sent[1:]]
        recv_rows = [tuple(map(int, r)) for r in recv[1:]]
        assert [r[0] for r in sent_rows] == list(range(len(sent_rows)))
        by_seq = {r[0]: r for r in sent_rows}
        for seq, send_ns, recv_ns, size in recv_rows:
            assert seq in by_seq, f"{name}: received seq {seq} was never sent"
            assert by_seq[seq][1] == send_ns
            assert recv_ns > send_ns
            assert size == flow["size"] == by_seq[seq][2]
        assert len({r[0] for r in recv_rows}) == len(recv_rows), "duplicates"
        assert len(recv_rows) >= 0.99 * len(sent_rows), f"{name}: {len(recv_rows)}/{len(sent_rows)} delivered"
        # every send is inside the flow's phases on the run clock
        start, stop = flow["phases"][0]
        assert all(t0 + start <= r[1] < t0 + stop + 50 * MS for r in sent_rows)

    # rate: messages planned minus the ones skipped (late ticks under CPU contention) were sent
    summary = read_summary(str(logs / "pub-both.log"))
    assert summary and summary["end"] == "completed"
    fs = {f["flow"]: f for f in summary["flows"]}
    planned_500k = -(-3 * 500_000 // (8 * 1024))  # 184 messages in 3 s
    assert fs["f500k"]["sent"] + fs["f500k"]["skipped_messages"] == planned_500k
    assert fs["f500k"]["sent"] >= 0.8 * planned_500k
    assert fs["rt"]["sent"] + fs["rt"]["skipped_messages"] == 50  # one message per 50 ms tick for 2.5 s
    # rt: one message per tick, on the absolute grid (no drift): lateness stays small through the run
    rt = [tuple(map(int, r)) for r in read_csv(logs / "send-rt.csv")[1:]]
    late = [(send_ns - t0 - 500 * MS) % (50 * MS) for _seq, send_ns, _size in rt]
    assert statistics.median(late) < 10 * MS
    assert rt[-1][1] - t0 >= 2900 * MS  # the last tick (2.95 s) was reached, not shifted
    sub_summary = read_summary(str(logs / "sub-r1.log"))
    assert sub_summary["invalid"] == 0 and sub_summary["foreign"] == 0
    assert {f["flow"]: f["received"] for f in sub_summary["flows"]} == {
        f: len(read_csv(logs / f"recv-{f}-r1.csv")) - 1 for f in ("f500k", "rt")}


def test_sigterm_stops_flushes_and_exits_0(router, procs, tmp_path):
    logs = tmp_path / "traffic"
    t0 = time.time_ns() + 1500 * MS
    flow = pub_flow("long", 1, "t/long", 800_000, 1000, 10 * MS, [[0, 60 * S]])
    sub = base("sub", "sub-r1", router.client_port, t0, 60 * S, logs, flush_interval_ns=S,
               flows=[{"name": "long", "flow_id": 1, "key": "t/long"}])
    pub = base("pub", "pub-long", router.client_port, t0, 60 * S, logs, flush_interval_ns=S, flows=[flow])
    procs.start(sub)
    wait_for_line(logs / "sub-r1.log", "ready: subscribed", 10)
    procs.start(pub)
    wait_for_line(logs / "pub-long.log", "flow long (id 1) started", 10)
    time.sleep(1.3)
    sigterm_ns = time.time_ns()
    procs.procs["pub-long"].send_signal(signal.SIGTERM)
    assert procs.wait("pub-long", 10) == 0, procs.stderr("pub-long")
    time.sleep(0.3)
    procs.procs["sub-r1"].send_signal(signal.SIGTERM)
    assert procs.wait("sub-r1", 10) == 0, procs.stderr("sub-r1")

    sent = read_csv(logs / "send-long.csv")[1:]
    recv = read_csv(logs / "recv-long-r1.csv")[1:]
    summary = read_summary(str(logs / "pub-long.log"))
    assert summary["end"] == "stopped"
    # every message counted was logged (the buffer was flushed at exit, not only every second)
    assert summary["flows"][0]["sent"] == len(sent) > 50
    assert int(sent[-1][1]) > sigterm_ns - 600 * MS  # not only what the 1 s periodic flush had written
    assert int(sent[-1][1]) < sigterm_ns + 500 * MS  # it did stop publishing
    sub_summary = read_summary(str(logs / "sub-r1.log"))
    assert sub_summary["end"] == "stopped"
    assert sub_summary["flows"][0]["received"] == len(recv) >= 0.99 * len(sent)
    text = (logs / "pub-long.log").read_text()
    assert "SIGTERM received" in text and "Traceback" not in text


def test_router_late_killed_and_restarted_processes_reconnect(tmp_path, procs):
    cluster = RouterCluster(tmp_path / "routers")
    (tmp_path / "routers").mkdir()
    try:
        r = cluster.add("r1")
        logs = tmp_path / "traffic"
        t0 = time.time_ns() + 500 * MS
        flow = pub_flow("f", 5, "t/f", 400_000, 1000, 10 * MS, [[0, 7 * S]])
        procs.start(base("sub", "sub-r1", r.client_port, t0, 7500 * MS, logs, retry_max_ns=300 * MS,
                         flows=[{"name": "f", "flow_id": 5, "key": "t/f"}]))
        procs.start(base("pub", "pub-f", r.client_port, t0, 7 * S, logs, retry_max_ns=300 * MS, flows=[flow]))
        # a publisher whose router never comes: retries until its end, then exits 0 without a traceback
        procs.start(base("pub", "pub-nowhere", free_port(), t0, 2 * S, logs, retry_max_ns=300 * MS,
                         flows=[pub_flow("g", 6, "t/g", 100_000, 100, 10 * MS, [[0, 2 * S]])]))
        time.sleep(1.0)
        cluster.start()  # the router comes up after the traffic processes
        wait_for_line(logs / "sub-r1.log", "ready: subscribed", 10)
        wait_for_line(logs / "pub-f.log", "connected to router", 10)
        time.sleep(1.5)
        cluster.kill("r1")
        kill_ns = time.time_ns()
        time.sleep(0.8)
        cluster.start("r1")
        restart_ns = time.time_ns()
        assert procs.wait("pub-nowhere", 10) == 0, procs.stderr("pub-nowhere")
        assert procs.wait("pub-f", 20) == 0, procs.stderr("pub-f")
        assert procs.wait("sub-r1", 20) == 0, procs.stderr("sub-r1")
    finally:
        cluster.cleanup()

    nowhere = (logs / "pub-nowhere.log").read_text()
    assert "could not connect" in nowhere and "Traceback" not in nowhere
    assert read_summary(str(logs / "pub-nowhere.log"))["end"] == "no connection"
    assert read_csv(logs / "send-g.csv") == [["seq", "send_ns", "size"]]
    for name in ("pub-f", "sub-r1"):
        text = (logs / f"{name}.log").read_text()
        assert "Traceback" not in text
        assert "connection to router lost" in text, text
        summary = read_summary(str(logs / f"{name}.log"))
        assert summary["connections"] >= 2 and summary["connection_losses"] >= 1, summary
    sent = [tuple(map(int, r)) for r in read_csv(logs / "send-f.csv")[1:]]
    recv = [tuple(map(int, r)) for r in read_csv(logs / "recv-f-r1.csv")[1:]]
    assert [s[0] for s in sent] == list(range(len(sent)))  # seq continues across sessions
    sent_ns = {s[0]: s[1] for s in sent}
    assert all(sent_ns[seq] == send_ns for seq, send_ns, _r, _s in recv)
    assert any(send_ns < kill_ns for _q, send_ns, _r, _s in recv), "nothing received before the kill"
    assert any(send_ns > restart_ns + 500 * MS for _q, send_ns, _r, _s in recv), "nothing received after restart"


def test_a_slow_subscriber_process_stops_reading_and_the_router_names_it(tmp_path, procs):
    """A subscriber process with a plan "read" (100 kbit/s from 1 s) and "log_as": its session really stops
    reading (the router's queue to it backs up and its slow-reader limit names it), it logs under its own
    name, and an ordinary subscriber of the same flow on the same node receives everything."""
    c = RouterCluster(tmp_path)
    try:
        r = c.add("r1", limits={"client": {"endpoint_bytes": 128 * 1024, "slow_reader_ms": 300,
                                           "slow_reader_policy": "drop"}})
        c.start()
        logs = tmp_path / "traffic"
        t0 = time.time_ns() + 4 * S
        flow = pub_flow("feed", 21, "t/feed", 2_000_000, 1024, 10 * MS, [[0, 5 * S]], cc="block")
        sub_flow = [{"name": "feed", "flow_id": 21, "key": "t/feed"}]
        fast = base("sub", "sub-r1", r.client_port, t0, 6 * S, logs, flows=sub_flow)
        slow = base("sub", "slow-feed-r1.slow1", r.client_port, t0, 6 * S, logs, flows=sub_flow,
                    read={"rate_bps": 100_000, "from_ns": 1 * S}, log_as="r1.slow1")
        procs.start(fast)
        procs.start(slow)
        wait_for_line(logs / "sub-r1.log", "ready: subscribed", 10)
        wait_for_line(logs / "slow-feed-r1.slow1.log", "ready: subscribed", 10)
        procs.start(base("pub", "pub-feed", r.client_port, t0, 5 * S, logs, flows=[flow]))
        assert procs.wait("pub-feed", 30) == 0, procs.stderr("pub-feed")
        assert procs.wait("sub-r1", 30) == 0, procs.stderr("sub-r1")
        assert procs.wait("slow-feed-r1.slow1", 30) == 0, procs.stderr("slow-feed-r1.slow1")
        sent = len(read_csv(logs / "send-feed.csv")) - 1
        fast_got = len(read_csv(logs / "recv-feed-r1.csv")) - 1
        slow_got = len(read_csv(logs / "recv-feed-r1.slow1.csv")) - 1
        assert sent > 1000 and fast_got == sent  # block: nothing lost for the ordinary subscriber
        # the slow one read 1 s at full speed (~245 messages), then 100 kbit/s (12.5 kB/s) for 5 s: ~61 more
        assert 200 < slow_got < 245 + 61 + 40, (slow_got, sent)
        assert "reading at 100000 bit/s from now on" in (logs / "slow-feed-r1.slow1.log").read_text()
        named = [e for e in r.events() if e["event"] == "slow_reader"]
        assert len(named) == 1 and named[0]["endpoint"].startswith("slow-feed-r1.slow1@")
    finally:
        c.cleanup()
