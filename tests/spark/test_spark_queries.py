"""The query figures from a querier's log shaped like the real one (traffic/query-<flow>.csv, as
traffic/ writes it): phases cut at the scenario's network changes, completion percentiles of the
queries that ended ok, failovers, timeouts, and queries that outlived their timeout."""
from __future__ import annotations

import pandas as pd
import pytest

from spark import queries
from spark.ingest import _read_logs, read_query_logs
from spark.expectations import evaluate, parse_expectations
from spark.storage import ResultsStore

MS = 1_000_000
S = 1_000 * MS
T0 = 1_800_000_000 * S
HEADER = ",".join(queries.QUERY_LOG_COLUMNS)


def _log(tmp_path, lines):
    (tmp_path / "traffic").mkdir()
    (tmp_path / "traffic" / "query-lookup.csv").write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    return ResultsStore(str(tmp_path))


FLOW = {"name": "lookup", "flow_id": 4, "kind": "query", "key": "svc/lookup", "from": "r1",
        "queryables": ["r2", "r3"], "consolidation": "first", "timeout_ns": S, "per_second": 10.0,
        "priority": 3, "priority_name": "interactive_low"}


def _line(qid, sent_s, took_ms, outcome="ok", served="r2", retries=0, attempts=None):
    send = T0 + int(sent_s * S)
    done = "" if took_ms is None else str(send + int(took_ms * MS))
    first = done if outcome == "ok" else ""
    attempts = attempts if attempts is not None else (f"{served}:ok" if outcome == "ok" else f"{served}:{outcome}")
    return f"{qid},{send},{first},{done},{outcome},{1 if outcome == 'ok' else 0},{retries},{served if outcome == 'ok' else ''},{attempts}"


def _events(*rows):
    return pd.DataFrame([{"ts_ns": T0 + int(t * S), "source": src, "event": ev, "node": node, "link": None}
                         for t, src, ev, node in rows])


def test_figures_per_phase_from_a_querier_log(tmp_path):
    lines = [_line(q, q * 0.1, 2.0 + q % 3) for q in range(100)]              # 0-10 s: r2 answers in 2-4 ms
    lines += [_line(100, 10.05, 35.0, served="r3", retries=1, attempts="r2:disconnect;r3:ok")]  # the failover
    lines += [_line(q, q * 0.1, 3.0, served="r3") for q in range(101, 200)]   # 10.1-20 s: r3 alone
    lines += [_line(200, 20.0, 1000.0 + 5, outcome="timeout", served="r3")]    # ended by its timeout
    lines += [_line(201, 20.1, 1000.0 + 400, outcome="timeout", served="r3")]  # 400 ms past it: a hang
    lines += [_line(202, 20.2, None, outcome="stopped", served="r3", attempts="")]  # killed before it ended
    problems: list = []
    q = read_query_logs(_log(tmp_path, lines), [FLOW], problems)
    assert problems == [] and len(q) == 203
    spans = queries.phases(_events((5, "orchestrator", "routers_up", None), (10, "scenario", "kill_router", "r2"),
                                   (15, "scenario", "start_flow", None), (20, "scenario", "restart_router", "r2")),
                           T0, T0 + 30 * S)
    assert [(p["label"], (p["start_ns"] - T0) // S, None if p["end_ns"] is None else (p["end_ns"] - T0) // S)
            for p in spans] == [("start", 0, 10), ("kill_router r2", 10, 20), ("restart_router r2", 20, 30)]
    s = queries.query_summary(q, [FLOW], spans)
    f = s["flows"][0]
    assert f["queries"] == 203 and f["outcomes"]["ok"] == 200 and f["outcomes"]["stopped"] == 1
    assert f["timeouts"] == 2 and f["failovers"] == 1 and f["retries"] == 1
    assert f["past_timeout"] == 1, "only the query that ended 400 ms after its timeout"
    assert f["longest_ns"] == 1400 * MS and f["served_by"] == {"r2": 100, "r3": 100}
    before, during, after = f["phases"]
    assert before["queries"] == 100 and before["served_by"] == {"r2": 100} and before["failovers"] == 0
    assert before["completion"]["p50_ns"] == pytest.approx(3 * MS) and before["completion"]["max_ns"] == 4 * MS
    assert during["failovers"] == 1 and during["served_by"] == {"r3": 100}
    assert during["completion"]["max_ns"] == 35 * MS
    assert after["queries"] == 3 and after["completion"]["messages"] == 0 and after["timeouts"] == 2
    assert s["overall"]["queries"] == 203
    series = queries.query_series(q, T0, S)
    assert series["queries"].sum() == 203 and series.loc[series["window"] == 10, "failovers"].item() == 1

    summary = {"queries": s}
    verdicts = evaluate(parse_expectations([
        "query.p99 <= 40ms for flow lookup", "query.timeouts <= 0", "query.failovers >= 1 for flow lookup",
        "query.past_timeout == 0", "query.p50 <= 1ms for flow nothing"], "test"), summary)
    assert [v.passed for v in verdicts] == [True, False, True, False, False]
    assert "no query flow nothing" in verdicts[-1].message and "served by r2: 100, r3: 100" in verdicts[2].message


def test_a_query_metric_takes_no_priority_and_a_run_without_queries_measures_nothing():
    from runfolder.expectations import ExpectationError
    with pytest.raises(ExpectationError, match="query flows"):
        parse_expectations(["query.p99 <= 1s for priority realtime"], "test")
    [v] = evaluate(parse_expectations(["query.timeouts == 0"], "test"), {"queries": None})
    assert not v.passed and "no query flow in this run" in v.message


def test_a_malformed_or_missing_query_log_is_an_input_problem(tmp_path):
    folder = _log(tmp_path, [_line(0, 0.1, 2.0), "garbage,line", "1,notanumber,,,,ok,,,"])
    problems: list = []
    q = read_query_logs(folder, [FLOW, dict(FLOW, name="other")], problems)
    assert len(q) == 1 and q["done_ns"].iloc[0] - q["send_ns"].iloc[0] == 2 * MS
    said = [(p.severity, p.file, p.problem) for p in problems]
    assert ("warning", "traffic/query-lookup.csv", "2 unreadable lines skipped") in said
    assert any(f == "traffic/query-other.csv" and sev == "error" for sev, f, _ in said)


def test_a_cut_line_in_a_receive_log_does_not_round_the_other_timestamps(tmp_path):
    """pandas reads a column with one unreadable value as float64, which holds an epoch in ns only to
    ~256 ns: every latency of the file would be off by up to that."""
    (tmp_path / "traffic").mkdir()
    sent = [T0 + k * 10 * MS + 1 for k in range(3)]
    (tmp_path / "traffic" / "recv-f-r2.csv").write_text(
        "seq,send_ns,recv_ns,size\n" + "".join(f"{k},{s},{s + 1_234_567},64\n" for k, s in enumerate(sent))
        + "3,18000000")  # the last line cut by a kill
    problems: list = []
    got = _read_logs(ResultsStore(str(tmp_path)), [{"name": "f", "flow_id": 1, "subscribers": ["r2"]}], "recv", problems)
    assert list(got["recv_ns"] - got["send_ns"]) == [1_234_567] * 3 and list(got["send_ns"]) == sent
    assert any("unreadable" in p.problem for p in problems)


def test_a_retry_at_the_same_router_is_no_failover(tmp_path):
    lines = [_line(0, 0.1, 1500.0, served="r2", retries=1, attempts="r2:timeout;r2:ok"),
             _line(1, 0.2, 900.0, served="r3", retries=1, attempts="r2:disconnect;r3:ok"),
             _line(2, 0.3, 900.0, outcome="timeout", served="r2", retries=2, attempts="r2:timeout;r3:timeout")]
    q = read_query_logs(_log(tmp_path, lines), [dict(FLOW, timeout_ns=2 * S)], [])
    f = queries.query_summary(q, [FLOW], queries.phases(None, T0, None))["flows"][0]
    assert (f["failovers"], f["retries"], f["timeouts"]) == (1, 4, 1)
