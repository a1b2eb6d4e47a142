"""Reroute time from congestion onset, on the event log of a real diamond run (tests/spark/data/diamond-real):
the routers' own sequence (congestion_detected, flow_pinned local_block, weight_changed and its link-state
copies, flow_pinned upstream_request at r1 a debounce later, trees_recomputed) with traffic as the diamond
makes it. The reroute is timed from the onset (the bulk flow pushes r2-r4 past its 10 Mbit/s at 10 s), not
from the router's last step before the move."""
from __future__ import annotations

import json

import pytest

from spark.cli import analyze_command
from spark.testing import T0_NS
from spark_builders import MS, S, real_router_events, write_real_run

BULK_START_NS = T0_NS + 10 * S   # topologies/diamond.yaml: bulk from 10 s


@pytest.fixture(scope="module")
def real(spark, tmp_path_factory):
    rd = write_real_run(tmp_path_factory.mktemp("runs"))
    assert analyze_command(str(rd)) == 0
    meta, logs = real_router_events()
    shift = T0_NS - meta["traffic_start_ns"]
    events = {rel: [{**e, "ts_ns": e["ts_ns"] + shift} for e in recs] for rel, recs in logs.items()}
    return json.loads((rd / "report/summary.json").read_text()), events, meta["monitor_interval_ms"] * MS


def test_the_real_router_acts_before_the_move_and_after_the_onset(real):
    _s, events, _interval = real
    r1 = [e for e in events["nodes/r1/events.jsonl"] if BULK_START_NS <= e["ts_ns"] <= BULK_START_NS + S]
    r2 = [e for e in events["nodes/r2/events.jsonl"] if BULK_START_NS <= e["ts_ns"] <= BULK_START_NS + S]
    # what the synthetic runs (spark.testing.congestion_events) imitate
    assert [e["event"] for e in r2[:4]] == ["congestion_detected", "flow_pinned", "flow_pinned", "weight_changed"]
    assert {e["reason"] for e in r2[1:3]} == {"local_block"} and r2[3]["source"] == "monitor"
    assert [e["event"] for e in r1[:3]] == ["weight_changed", "flow_pinned", "flow_pinned"]
    assert r1[0]["source"] == "linkstate" and {e["reason"] for e in r1[1:3]} == {"upstream_request"}


def test_reroutes_are_timed_from_the_onset(real):
    s, events, interval = real
    detected = next(e for e in events["nodes/r2/events.jsonl"] if e["event"] == "congestion_detected")
    moved = {r["flow"]: r for r in s["reroutes"]}
    assert sorted(moved) == ["bulk", "zpub.pub1"]
    for r in moved.values():
        assert (r["old_path"], r["new_path"], r["cause"], r["cause_link"]) == ("r1>r2>r4", "r1>r3>r4", "overload",
                                                                             "r2>r4")
        # onset: when the bulk flow's first messages reach r2 (sent from 10 s, 1.1 ms to r2), not later
        assert BULK_START_NS <= r["onset_ns"] <= BULK_START_NS + 5 * MS
        assert r["detection_ns"] == detected["ts_ns"] and r["detection_event"] == "congestion_detected"
        assert r["onset_ns"] < r["detection_ns"] < r["time_ns"]
        assert r["reroute_time_ns"] == r["detection_time_ns"] + r["reaction_time_ns"]
        assert r["reroute_time_ns"] > r["detection_time_ns"]
        # of the order of the monitor interval (250 ms), not the few ms from the router's own last step
        assert interval / 2 < r["reroute_time_ns"] < 3 * interval
    # pub1 publishes every 50 ms: its first message after r1's pin leaves up to a tick later than bulk's
    assert moved["bulk"]["time_ns"] <= moved["zpub.pub1"]["time_ns"] <= moved["bulk"]["time_ns"] + 50 * MS
    [o] = [o for o in s["overloads"] if (o["src_node"], o["dst_node"]) == ("r2", "r4")]
    assert o["cause"] == "load" and o["capacity_bps"] == 10_000_000 and o["offered_bps"] > 10_000_000
    assert o["onset_ns"] == moved["bulk"]["onset_ns"]


def test_the_episode_is_the_one_r2_reported(real):
    s, events, _interval = real
    detected = next(e for e in events["nodes/r2/events.jsonl"] if e["event"] == "congestion_detected")
    cleared = next(e for e in events["nodes/r2/events.jsonl"] if e["event"] == "congestion_cleared")
    [ep] = s["episodes"]
    # the other routers' link-state copies of r2's weight change neither open nor close it
    assert (ep["start_ns"], ep["end_ns"]) == (detected["ts_ns"], cleared["ts_ns"])
    assert ep["opened_by"] == "r2: congestion_detected (r4)" and ep["closed_by"] == "r2: congestion_cleared (r4)"
    assert ep["reroutes"] == {"bulk": 1, "zpub.pub1": 1}
