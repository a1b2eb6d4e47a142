"""The query figures of a real run: `testbed run topologies/queries.yaml` at 3ca62ed, kept in
tests/spark/data/queries-real (the querier's log, flows.json, the orchestrator's and r1's events).
r1 asks svc/lookup 20 times a second from 2 s to 32 s (timeout 1 s, consolidation first); the
queryables on r2 (nearest) and r3 take 100 ms to answer; the scenario kills r2's router at 12 s
and restarts it at 22 s. What is known from first principles: 600 queries; each takes the 100 ms
service time plus two short hops; the queries outstanding at r2 when it died (about two, at 20/s and
100 ms) fail over to r3 within their timeout; r3 serves everything sent while r2 is down."""
from __future__ import annotations

import json
from pathlib import Path

from spark import queries
from spark.ingest import _read_events, read_query_logs
from spark.storage import ResultsStore

DATA = Path(__file__).parent / "data" / "queries-real"
MS = 1_000_000


def _run():
    folder = ResultsStore(str(DATA))
    flows = json.loads((DATA / "traffic/flows.json").read_text())["flows"]
    run = json.loads((DATA / "run.json").read_text())
    problems: list = []
    q = read_query_logs(folder, [f for f in flows if queries.is_query_flow(f)], problems)
    events = _read_events(folder, problems)
    assert problems == []
    t0 = run["traffic_start_ns"]
    spans = queries.phases(events, t0, run["ended_ns"])
    return q, flows, events, spans, t0


def test_failover_before_during_and_after_the_kill():
    q, flows, events, spans, t0 = _run()
    summary = queries.query_summary(q, flows, spans)
    f = summary["flows"][0]
    assert f["queries"] == 20 * 30 == len(set(q["qid"])), "per_second x (stop - start)"
    assert f["outcomes"]["ok"] == 600 and f["timeouts"] == 0 and f["past_timeout"] == 0
    done = f["completion"]
    assert 100 * MS < done["min_ns"] and 100 * MS < done["p50_ns"] < 110 * MS, "the service time and two hops"
    assert [p["label"] for p in f["phases"]] == ["start", "kill_router r2", "restart_router r2"]
    before, down, after = f["phases"]
    kill_at = before["end_ns"]
    assert 12.0 < (kill_at - t0) / 1e9 < 12.5 and 22.0 < (down["end_ns"] - t0) / 1e9 < 22.5
    # r2 served all it could before the kill; while it was down only r3; after, r2 again once back
    assert before["served_by"]["r2"] == before["queries"] - before["failovers"]
    assert down["served_by"] == {"r3": down["queries"]} and down["failovers"] == 0
    assert after["served_by"]["r2"] > after["served_by"]["r3"] > 0
    # the failovers: outstanding at r2 when it died (sent before the kill, and less long before it than
    # the slowest query r2 answered took), first tried at r2, answered by r3 within (kill - sent) + r3's
    # 100 ms + a little (r1 saw r2's connection close at the instant the scenario recorded)
    moved = q[q["retries"] > 0]
    assert len(moved) == f["failovers"] == before["failovers"] >= 1
    by_r2 = q[(q["served_by"] == "r2") & (q["send_ns"] < kill_at)]
    slowest_r2 = int((by_r2["done_ns"] - by_r2["send_ns"]).max())
    for _, m in moved.iterrows():
        assert m["attempts"] == "r2:disconnect;r3:ok" and m["served_by"] == "r3"
        assert kill_at - slowest_r2 <= m["send_ns"] < kill_at
        took = m["done_ns"] - m["send_ns"]
        assert kill_at - m["send_ns"] + 100 * MS < took < kill_at - m["send_ns"] + 200 * MS
    assert done["max_ns"] == max(m["done_ns"] - m["send_ns"] for _, m in moved.iterrows())
    # the router's own word for them: one query_failover event per failover, same attempts
    failovers = events[events["event"] == "query_failover"]
    assert len(failovers) == len(moved)
    assert all(json.loads(x)["attempts"] == [["r2", "disconnect"], ["r3", "ok"]] for x in failovers["fields"])


def test_the_time_series_follows_the_phases():
    q, flows, events, spans, t0 = _run()
    series = queries.query_series(q, t0, 1_000_000_000)
    assert series["queries"].sum() == 600 and set(series["window"]) == set(range(2, 32))
    assert series[series["window"] == 12]["failovers"].item() == len(q[q["retries"] > 0])
    assert (series["timeouts"] == 0).all() and (series["p99_ns"] < 250 * MS).all()
