"""Query traffic: plans for ``query``/``queryable`` processes, the querier's pacing, and real querier and
queryable processes against a real router on loopback (logs, outcomes, service time, reconnect, SIGTERM)."""
from __future__ import annotations

import asyncio
import csv
import json
import logging
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from routerlab import RouterCluster  # tests/router, put on sys.path by tests/traffic/conftest.py
from test_traffic_processes import wait_for_line
from traffic.client import QueryResult, Reply
from runfolder.records import QUERY_HEADER, SERVED_HEADER
from traffic.logs import read_summary
from runfolder.trafficplan import PlanError, parse_plan
from traffic.querier import FlowQuerier, SessionHolder
from traffic.profiles import RunClock

ROOT = Path(__file__).resolve().parents[2]
S = 1_000_000_000
MS = 1_000_000
T0 = 1_800_000_000 * S


def plan(role: str, name: str, port: int, t0: int, end_ns: int, log_dir, flows: List[dict], **extra) -> dict:
    return dict({"version": 1, "role": role, "name": name, "node": "r1",
                 "router": {"host": "127.0.0.1", "port": port}, "t0_ns": t0, "end_ns": end_ns,
                 "log_dir": str(log_dir), "flows": flows}, **extra)


def query_flow(name: str, flow_id: int, key: str, interval_ns: int, timeout_ns: int, phases, **extra) -> dict:
    return dict({"name": name, "flow_id": flow_id, "key": key, "priority": 3, "size": 64,
                 "interval_ns": interval_ns, "timeout_ns": timeout_ns, "consolidation": "first",
                 "phases": phases}, **extra)


def queryable_flow(name: str, flow_id: int, key: str, service_time_ns: int = 0, reply_size: int = 64) -> dict:
    return {"name": name, "flow_id": flow_id, "key": key, "service_time_ns": service_time_ns,
            "reply_size": reply_size}


def rows(path: Path) -> List[Dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def header(path: Path) -> str:
    return path.read_text().splitlines()[0]


# ------------------------------------------------------------------ plans


def good_query() -> dict:
    return plan("query", "qry-q", 7447, T0, 10 * S, "/tmp/x", [query_flow("q", 4, "svc/**", 50 * MS, S, [[0, S]])])


def good_queryable() -> dict:
    return plan("queryable", "qbl-q-r1", 7447, T0, 12 * S, "/tmp/x", [queryable_flow("q", 4, "svc/**", 5 * MS, 100)])


def test_query_plans_round_trip_with_only_their_keys():
    q = parse_plan(good_query())
    assert (q.role, q.flows[0].interval_ns, q.flows[0].timeout_ns, q.flows[0].consolidation) == (
        "query", 50 * MS, S, "first")
    assert parse_plan(q.to_json()) == q
    assert set(q.to_json()["flows"][0]) == {"name", "flow_id", "key", "priority", "size", "interval_ns",
                                           "timeout_ns", "consolidation", "phases"}
    qbl = parse_plan(good_queryable())
    assert (qbl.flows[0].service_time_ns, qbl.flows[0].reply_size) == (5 * MS, 100)
    assert parse_plan(qbl.to_json()) == qbl
    assert set(qbl.to_json()["flows"][0]) == {"name", "flow_id", "key", "service_time_ns", "reply_size"}
    defaults = good_queryable()
    del defaults["flows"][0]["service_time_ns"], defaults["flows"][0]["reply_size"]
    assert (parse_plan(defaults).flows[0].service_time_ns, parse_plan(defaults).flows[0].reply_size) == (0, 64)


@pytest.mark.parametrize("make,field,value,message", [
    (good_query, "interval_ns", 999_999, "interval_ns: 999999 is below 1 ms"),
    (good_query, "timeout_ns", 0, r"timeout_ns: 0 is not in \(0, 3600 s\]"),
    (good_query, "timeout_ns", 3601 * S, "timeout_ns: .* is not in"),
    (good_query, "consolidation", "any", "consolidation: 'any' is not one of all, first, latest"),
    (good_query, "size", 23, "size: 23 bytes is smaller than the 24-byte payload header"),
    (good_query, "priority", 8, "priority: 8 is not 0..7"),
    (good_query, "key", "svc//x", "key: .*empty chunk"),
    (good_query, "phases", [[5, 5]], r"phases\[0\]: stop 5 is not after start 5"),
    (good_query, "interval_ns", None, "missing 'interval_ns'"),
    (good_queryable, "reply_size", 10, "reply_size: 10 bytes is smaller than the 24-byte payload header"),
    (good_queryable, "service_time_ns", -1, "service_time_ns: -1 must be >= 0"),
    (good_queryable, "key", "svc/a*b", "key: .*chunk 'a\\*b'"),
])
def test_bad_query_plans_name_the_field(make, field, value, message):
    obj = make()
    obj["flows"][0][field] = value
    with pytest.raises(PlanError, match=message):
        parse_plan(obj)


def test_cli_checks_query_plans_and_refuses_the_wrong_verb(tmp_path):
    path = tmp_path / "q.json"
    path.write_text(json.dumps(good_query()))
    run = lambda *args: subprocess.run([sys.executable, "-m", "traffic", *args, "--plan", str(path)],  # noqa: E731
                                       cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert run("query", "--check").returncode == 0
    r = run("queryable")
    assert r.returncode == 2 and "is a 'query' plan, but the command is 'queryable'" in r.stderr
    obj = good_query()
    obj["flows"][0]["consolidation"] = "most"
    path.write_text(json.dumps(obj))
    r = run("query")
    assert r.returncode == 2 and "consolidation" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------ the querier in-process (no router)


class InstantSession:
    """Answers every query at once, as one router would; records when each query was asked."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()
        self.asked: List[int] = []

    async def get(self, key, timeout, consolidation, payload, priority) -> QueryResult:
        self.asked.append(time.time_ns())
        return QueryResult([Reply(key, b"", "r9", 0, time.time_ns())], served_by=["r9"], attempts=[["r9", "ok"]])


class SilentSession(InstantSession):
    async def get(self, key, timeout, consolidation, payload, priority) -> QueryResult:
        await asyncio.sleep(3600)
        raise AssertionError("not reached")


def _querier(tmp_path, interval_ns: int, phases, timeout_ns: int = S) -> FlowQuerier:
    flow = parse_plan(plan("query", "qry-p", 1, T0, 60 * S, tmp_path,
                           [query_flow("p", 7, "svc/p", interval_ns, timeout_ns, phases)])).flows[0]
    return FlowQuerier(flow, 60 * S, str(tmp_path))


def test_queries_are_paced_on_absolute_times_and_late_ones_skipped(tmp_path):
    """Query k at start + k/per_second (50/s): every query of a window, on the grid (no drift); a stall of
    ~10 intervals skips the queries it passed by more than an interval (counted, their ids not used)."""
    logger = logging.getLogger("test.querier")

    async def go() -> tuple:
        t0 = time.time_ns() + 200 * MS
        clock = RunClock(t0)
        session = InstantSession()
        holder = SessionHolder()
        await holder.declare(session)
        q = _querier(tmp_path, 20 * MS, [[0, S], [1500 * MS, 2 * S]])

        async def stall() -> None:  # the loop blocked for 205 ms, from 1.6 s on
            await asyncio.sleep((t0 + 1600 * MS - time.time_ns()) / S)
            time.sleep(0.205)

        staller = asyncio.ensure_future(stall())
        await q.run(holder, clock, logger)
        await q.drain(logger)
        await staller
        q.log.close()
        return t0, q

    t0, q = asyncio.run(go())
    lines = rows(tmp_path / "query-p.csv")
    assert header(tmp_path / "query-p.csv") == QUERY_HEADER
    qids = [int(r["qid"]) for r in lines]
    # 50 queries in [0, 1 s), 25 in [1.5 s, 2 s); ids 50.. continue in the second window
    assert len(qids) + q.skipped == 75 == q.next_qid and qids == sorted(set(qids))
    assert 8 <= q.skipped <= 12, q.skipped
    due = {k: t0 + k * 20 * MS if k < 50 else t0 + 1500 * MS + (k - 50) * 20 * MS for k in range(75)}
    late = [int(r["send_ns"]) - due[int(r["qid"])] for r in lines]
    assert min(late) >= 0 and statistics.median(late) < 5 * MS
    # a query is sent only if no later one was due yet: never more than one interval late
    assert max(late) < 20 * MS + 5 * MS, max(late)
    skipped = sorted(set(range(75)) - set(qids))
    assert all(due[k] >= t0 + 1600 * MS - 20 * MS for k in skipped), skipped
    assert all(r["outcome"] == "ok" and r["served_by"] == "r9" and r["attempts"] == "r9:ok" for r in lines)
    summary = q.summary()
    assert (summary["sent"], summary["ok"], summary["skipped"]) == (len(qids), len(qids), q.skipped)


def test_queries_without_a_session_end_shutdown_and_unfinished_ones_stopped(tmp_path):
    logger = logging.getLogger("test.querier")

    async def go() -> FlowQuerier:
        q = _querier(tmp_path, 20 * MS, [[0, S]], timeout_ns=MS)
        now = time.time_ns()
        q._issue(0, None, now, logger)                  # not connected: ends at once
        q._issue(1, SilentSession(), now, logger)       # never answered: cut when the drain gives up
        await q.drain(logger)
        q.log.close()
        return q

    q = asyncio.run(go())
    by_qid = {r["qid"]: r for r in rows(tmp_path / "query-p.csv")}
    assert by_qid["0"]["outcome"] == "shutdown" and by_qid["0"]["done_ns"] == by_qid["0"]["send_ns"]
    assert by_qid["1"]["outcome"] == "stopped" and by_qid["1"]["done_ns"] == "" and by_qid["1"]["first_reply_ns"] == ""
    assert (q.outcomes["shutdown"], q.outcomes["stopped"], q.sent) == (1, 1, 2)


# ------------------------------------------------------------------ real processes, a real router


def test_querier_and_queryables_against_a_real_router(router, procs, tmp_path):
    """One querier process with three flows against one router: answered after a 30 ms service time
    (ok, served by r1, latency >= the service time), nobody serving (no_match at once), and a queryable
    slower than the timeout (timeout, ended by the timeout)."""
    logs = tmp_path / "traffic"
    t0 = time.time_ns() + 3 * S
    port = router.client_port
    qbl_fast = plan("queryable", "qbl-fast-r1", port, t0, 5 * S, logs,
                    [queryable_flow("fast", 1, "svc/fast", 30 * MS, 200)])
    qbl_slow = plan("queryable", "qbl-slow-r1", port, t0, 5 * S, logs,
                    [queryable_flow("slow", 3, "svc/slow", 1500 * MS)])
    qry = plan("query", "qry-all", port, t0, 2 * S, logs, [
        query_flow("fast", 1, "svc/fast", 25 * MS, S, [[0, 2 * S]]),           # 40/s for 2 s: 80 queries
        query_flow("none", 2, "svc/none", 100 * MS, S, [[0, S]]),              # 10 queries nobody answers
        query_flow("slow", 3, "svc/slow", 250 * MS, 300 * MS, [[0, S]]),        # 4 queries, 300 ms timeout
    ])
    procs.start(qbl_fast)
    procs.start(qbl_slow)
    wait_for_line(logs / "qbl-fast-r1.log", "ready: queryable on svc/fast", 10)
    wait_for_line(logs / "qbl-slow-r1.log", "ready: queryable on svc/slow", 10)
    procs.start(qry)
    assert procs.wait("qry-all", 30) == 0, procs.stderr("qry-all")
    for name in ("qbl-fast-r1", "qbl-slow-r1"):
        procs.procs[name].send_signal(signal.SIGTERM)
        assert procs.wait(name, 10) == 0, procs.stderr(name)

    fast = rows(logs / "query-fast.csv")
    assert header(logs / "query-fast.csv") == QUERY_HEADER
    summary = read_summary(str(logs / "qry-all.log"))
    flows = {f["flow"]: f for f in summary["flows"]}
    assert summary["end"] == "completed" and summary["role"] == "query"
    assert flows["fast"]["sent"] + flows["fast"]["skipped"] == 80 and flows["fast"]["sent"] == len(fast) >= 70
    ok = [r for r in fast if r["outcome"] == "ok"]
    assert len(ok) >= 0.95 * len(fast) and flows["fast"]["ok"] == len(ok)
    assert all(r["served_by"] == "r1" and r["retries"] == "0" and r["attempts"] == "r1:ok" and r["replies"] == "1"
               for r in ok)
    latency = [int(r["first_reply_ns"]) - int(r["send_ns"]) for r in ok]
    assert min(latency) >= 30 * MS, "the queryable's service time is in every query's latency"
    assert all(int(r["done_ns"]) >= int(r["first_reply_ns"]) for r in ok)
    # pacing: query k at t0 + k * 25 ms, never more than an interval late
    late = [int(r["send_ns"]) - (t0 + int(r["qid"]) * 25 * MS) for r in fast]
    assert min(late) >= 0 and statistics.median(late) < 10 * MS and max(late) < 40 * MS

    served = rows(logs / "served-fast-r1.csv")
    assert header(logs / "served-fast-r1.csv") == SERVED_HEADER
    assert sorted(int(r["qid"]) for r in served) == sorted(int(r["qid"]) for r in ok)
    assert all(int(r["reply_ns"]) - int(r["recv_ns"]) >= 30 * MS for r in served)
    assert read_summary(str(logs / "qbl-fast-r1.log"))["flows"] == [
        {"flow": "fast", "flow_id": 1, "served": len(served)}]

    none = rows(logs / "query-none.csv")
    assert len(none) == 10 and all(r["outcome"] == "no_match" and r["first_reply_ns"] == "" for r in none)
    assert all(int(r["done_ns"]) - int(r["send_ns"]) < 300 * MS for r in none)
    assert flows["none"]["no_match"] == 10

    slow = rows(logs / "query-slow.csv")
    assert len(slow) == 4 and all(r["outcome"] == "timeout" and r["replies"] == "0" for r in slow)
    took = [int(r["done_ns"]) - int(r["send_ns"]) for r in slow]
    assert all(300 * MS <= t < 1300 * MS for t in took), took
    assert flows["slow"]["timeout"] == 4
    text = (logs / "qry-all.log").read_text()
    assert "Traceback" not in text and text.rstrip().endswith("exit 0")


def test_querier_rides_out_a_router_restart_and_sigterm_waits_for_outstanding_queries(tmp_path, procs):
    """The router is killed and restarted under a querier and a queryable: queries meanwhile end
    shutdown at once, both processes reconnect (the queryable says it is ready again) and queries are
    answered again; SIGTERM with queries outstanding at a 400 ms queryable: they end ok, not cut."""
    cluster = RouterCluster(tmp_path / "routers")
    (tmp_path / "routers").mkdir()
    try:
        r = cluster.add("r1")
        cluster.start()
        logs = tmp_path / "traffic"
        t0 = time.time_ns() + 2 * S
        port = r.client_port
        procs.start(plan("queryable", "qbl-q-r1", port, t0, 60 * S, logs, [queryable_flow("q", 9, "svc/q", 400 * MS)],
                         retry_max_ns=200 * MS))
        wait_for_line(logs / "qbl-q-r1.log", "ready: queryable on", 10)
        procs.start(plan("query", "qry-q", port, t0, 60 * S, logs,
                         [query_flow("q", 9, "svc/q", 50 * MS, 2 * S, [[0, 60 * S]])], retry_max_ns=200 * MS))
        time.sleep((t0 - time.time_ns()) / S + 1.5)
        cluster.kill("r1")
        kill_ns = time.time_ns()
        time.sleep(1.0)
        cluster.start("r1")
        restart_ns = time.time_ns()
        deadline = time.monotonic() + 10
        while (logs / "qbl-q-r1.log").read_text().count("ready: queryable on") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        ready_ns = time.time_ns()  # the queryable is declared again (the querier reconnects as quickly)
        time.sleep(2.0)
        sigterm_ns = time.time_ns()
        procs.procs["qry-q"].send_signal(signal.SIGTERM)
        assert procs.wait("qry-q", 10) == 0, procs.stderr("qry-q")
        exit_ns = time.time_ns()
        procs.procs["qbl-q-r1"].send_signal(signal.SIGTERM)
        assert procs.wait("qbl-q-r1", 10) == 0, procs.stderr("qbl-q-r1")
    finally:
        cluster.cleanup()

    lines = rows(logs / "query-q.csv")
    send = lambda r: int(r["send_ns"])  # noqa: E731
    before = [r for r in lines if send(r) < kill_ns - 500 * MS]
    down = [r for r in lines if kill_ns + 100 * MS < send(r) < restart_ns]
    after = [r for r in lines if ready_ns + 700 * MS < send(r) < sigterm_ns - 500 * MS]
    assert before and all(r["outcome"] == "ok" for r in before)
    assert down and all(r["outcome"] == "shutdown" and int(r["done_ns"]) - send(r) < 50 * MS for r in down)
    assert after and all(r["outcome"] == "ok" for r in after), [(r["qid"], r["outcome"]) for r in after]
    # SIGTERM: no query after it, the outstanding ones answered (400 ms) before the process exited
    assert all(send(r) < sigterm_ns + 50 * MS for r in lines)
    last = [r for r in lines if send(r) > sigterm_ns - 300 * MS]
    assert last and all(r["outcome"] == "ok" and int(r["done_ns"]) < exit_ns for r in last)
    assert not any(r["outcome"] == "stopped" for r in lines)
    summary = read_summary(str(logs / "qry-q.log"))
    assert summary["end"] == "stopped" and summary["connections"] >= 2 and summary["connection_losses"] >= 1
    assert summary["flows"][0]["shutdown"] == sum(r["outcome"] == "shutdown" for r in lines)
    for name in ("qry-q", "qbl-q-r1"):
        text = (logs / f"{name}.log").read_text()
        assert "connection to router lost" in text and "Traceback" not in text


# ------------------------------------------------------------------ the queryable's writes


def test_a_queryables_final_word_rides_on_its_last_reply_in_the_same_write():
    """The client library sends a queryable's final word in its last REPLY frame, queued in the same turn
    as the replies before it, so its writer sends them in one write and the router reads and forwards one
    frame fewer per query and hop. Against a fake router on loopback; the session's writes recorded."""
    from router.codec import FrameKind, decode_frames, decode_query_body, encode_json_frame, encode_query_frame
    from router.connection import read_frame
    from traffic.client import connect

    async def go():
        query_seen = asyncio.get_running_loop().create_future()

        async def fake_router(reader, writer):
            await read_frame(reader)  # the session's HELLO
            writer.write(encode_json_frame(FrameKind.HELLO, {"name": "fake", "lease_ms": 60_000}))
            declared = await read_frame(reader)
            assert declared.kind == FrameKind.DECLARE_QUERYABLE
            writer.write(encode_query_frame(FrameKind.QUERY, {"id": 7, "key": "svc/x", "priority": 3,
                                                                    "timeout_ms": 5000}, b"q"))
            while True:
                frame = await read_frame(reader)
                if frame.kind == FrameKind.REPLY and decode_query_body(frame.kind, frame.body)[0].get("final"):
                    query_seen.set_result(None)
                    break
            writer.close()

        server = await asyncio.start_server(fake_router, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        session = await connect("127.0.0.1", port, name="qbl")
        writes = []
        transport = session._conn.transport
        write = transport.write
        transport.write = lambda data: (writes.append(bytes(data)), write(data))
        transport.writelines = lambda chunks: transport.write(b"".join(chunks))  # one call: one write
        try:
            await session.declare_queryable("svc/**", lambda q: [("svc/x", b"a"), ("svc/y", b"b")])
            await asyncio.wait_for(query_seen, 10)
        finally:
            await session.close()
            server.close()
            await server.wait_closed()
        replies = [[decode_query_body(f.kind, f.body) for f in decode_frames(w)[0] if f.kind == FrameKind.REPLY]
                   for w in writes]  # the REPLY frames of each write: (header, payload)
        with_replies = [r for r in replies if r]
        assert len(with_replies) == 1, f"the replies and the final word took {len(with_replies)} writes: {replies}"
        assert [(h.get("key"), h.get("final", False), p) for h, p in with_replies[0]] == \
            [("svc/x", False, b"a"), ("svc/y", True, b"b")], "the final word on the last reply"

    asyncio.run(go())
