"""What a reroute is timed from, case by case (no Spark): link failures, router kills, an overload, and a
move the scenario caused; and the expectations that read the three spans."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from spark.expectations import evaluate, parse_expectations
from spark.onsets import Overload
from spark.reroutes import Reroute, attribute_cause

S = 1_000_000_000
MS = 1_000_000
LINKS = {0: ("r1", "r2"), 1: ("r2", "r4"), 2: ("r1", "r3"), 3: ("r3", "r4")}


def ns(t_s: float) -> int:
    return round(t_s * S)


def ev(t_s, origin, event, node=None, neighbour=None, link=None, **fields):
    """An events-table row as spark.ingest makes it: ``origin`` is its source column (scenario, router); a
    router's own fields, its "source" (monitor, linkstate...) included, are in fields."""
    return {"ts_ns": ns(t_s), "source": origin, "node": node, "event": event, "at_ns": None, "link": link,
            "neighbour": neighbour, "fields": json.dumps(fields, sort_keys=True)}


def reroute(t_s, old="r1>r2>r4", new="r1>r3>r4"):
    return Reroute(flow="f", time_ns=ns(t_s), old_path=old, new_path=new, last_old_seq=1, first_new_seq=2,
                   last_old_ns=ns(t_s), old_path_idle_ns=0, lost=0)


def linkstate_copies(t_s, router, neighbour, before, after):
    return [ev(t_s + 0.001 * k, "router", "weight_changed", node=n, neighbour=neighbour, router=router, tree="data",
               weight_before=before, weight_after=after, source="linkstate")
            for k, n in enumerate(n for n in ("r1", "r2", "r3", "r4") if n != router)]


def test_a_link_failure_is_timed_from_the_scenario_cutting_it():
    events = pd.DataFrame([
        ev(20.0, "scenario", "set_link", link=1, bw_bps=6_000_000, ok=True),       # earlier, not the cause
        ev(30.0, "scenario", "link_down", link=1),
        ev(33.05, "router", "link_down", node="r4", neighbour="r2", reason="lease expired: no frame for 3000 ms"),
        ev(33.1, "router", "link_down", node="r2", neighbour="r4", reason="lease expired: no frame for 3000 ms"),
        ev(33.12, "router", "trees_recomputed", node="r1", duration_ns=150000),
    ])
    r = reroute(33.2)
    attribute_cause(r, events, [], LINKS)
    assert (r.cause, r.cause_link, r.onset_ns) == ("failure", "r2-r4", 30 * S)
    assert (r.detection_ns, r.detection_node, r.detection_event) == (ns(33.05), "r4", "link_down")
    assert (r.reroute_time_ns, r.detection_time_ns, r.reaction_time_ns) == (
        ns(3.2), ns(3.05), ns(0.15))


def test_a_killed_router_is_the_onset_and_its_neighbours_notice():
    events = pd.DataFrame([
        ev(40.0, "scenario", "kill_router", node="r2"),
        ev(43.02, "router", "link_down", node="r1", neighbour="r2", reason="lease expired"),
        ev(43.03, "router", "link_down", node="r4", neighbour="r2", reason="lease expired"),
    ])
    r = reroute(43.06)
    attribute_cause(r, events, [], LINKS)
    assert (r.cause, r.cause_link, r.onset_ns, r.detection_node) == ("failure", "r2", 40 * S, "r1")
    assert r.reroute_time_ns == ns(3.06) and r.reaction_time_ns == ns(0.04)


def test_an_overload_is_timed_from_its_onset_not_from_the_routers_last_step():
    overload = Overload(1, "r2", "r4", onset_ns=ns(10.002), end_ns=ns(10.3), cause="load",
                        offered_bps=11.7e6, capacity_bps=10e6, peak_offered_bps=12.8e6, busy_start_ns=ns(10.002))
    events = pd.DataFrame([
        ev(10.258, "router", "congestion_detected", node="r2", neighbour="r4", data_bps=9537322),
        ev(10.258, "router", "flow_pinned", node="r2", key="flows/bulk", reason="local_block"),
        ev(10.258, "router", "weight_changed", node="r2", neighbour="r4", weight_before=10, weight_after=65535,
           source="monitor"),
        *linkstate_copies(10.259, "r2", "r4", 10, 65535),
        ev(10.279, "router", "flow_pinned", node="r1", key="flows/bulk", reason="upstream_request"),
    ])
    r = reroute(10.2816)
    attribute_cause(r, events, [overload], LINKS)
    assert (r.cause, r.cause_link, r.onset_ns) == ("overload", "r2>r4", ns(10.002))
    assert (r.detection_node, r.detection_event, r.detection_ns) == ("r2", "congestion_detected", ns(10.258))
    assert r.reroute_time_ns == ns(10.2816) - ns(10.002) > 250 * MS
    assert r.reaction_time_ns == ns(10.2816) - ns(10.258) < 25 * MS
    # an overload of the other direction, or of a link only the new path uses, is no cause
    elsewhere = [Overload(1, "r4", "r2", ns(10.1), ns(10.2), "load", 11e6, 10e6, 11e6, ns(10.1)),
                 Overload(3, "r3", "r4", ns(10.1), ns(10.2), "load", 21e6, 20e6, 21e6, ns(10.1))]
    r2 = reroute(10.2816)
    attribute_cause(r2, events, elsewhere, LINKS)
    assert r2.cause is None and r2.onset_ns is None


def test_a_router_that_only_blocks_the_weight_is_detected_by_it():
    overload = Overload(1, "r2", "r4", ns(5), ns(6), "set_link", 1.3e6, 1e6, 1.3e6, ns(5))
    events = pd.DataFrame([
        *linkstate_copies(5.5, "r2", "r4", 10, 65535),   # copies elsewhere are not r2's report
        ev(5.6, "router", "weight_changed", node="r2", neighbour="r4", weight_before=10, weight_after=65535,
           source="admin", reason="operator"),
    ])
    r = reroute(5.7)
    attribute_cause(r, events, [overload], LINKS)
    assert (r.detection_ns, r.detection_event) == (ns(5.6), "weight_changed")


def test_a_move_back_is_timed_from_the_scenario_event_that_caused_it():
    events = pd.DataFrame([
        ev(40.0, "scenario", "set_link", link=1, bw_bps=10_000_000, ok=True),
        ev(40.5, "router", "congestion_cleared", node="r2", neighbour="r4", data_bps=50000),
        ev(40.5, "router", "weight_changed", node="r2", neighbour="r4", weight_before=65535, weight_after=10,
           source="monitor"),
        *linkstate_copies(40.501, "r2", "r4", 65535, 10),
    ])
    r = reroute(41.0, old="r1>r3>r4", new="r1>r2>r4")
    attribute_cause(r, events, [], LINKS, previous_ns=ns(21.5))
    assert (r.cause, r.onset_ns, r.detection_event, r.detection_node) == ("event", 40 * S, "congestion_cleared", "r2")
    assert (r.reroute_time_ns, r.detection_time_ns, r.reaction_time_ns) == (S, S // 2, S // 2)
    # a cause before the flow's previous reroute explained that one, not this one
    late = reroute(41.0, old="r1>r3>r4", new="r1>r2>r4")
    attribute_cause(late, events, [], LINKS, previous_ns=ns(40.2))
    assert late.onset_ns is None and late.reroute_time_ns is None
    assert (late.detection_event, late.reaction_time_ns) == ("congestion_cleared", S // 2)


def test_without_any_cause_nothing_is_timed():
    r = reroute(12.0)
    attribute_cause(r, pd.DataFrame([ev(5.0, "router", "trees_recomputed", node="r1")]), [], LINKS)
    assert (r.cause, r.onset_ns, r.detection_ns, r.reroute_time_ns) == (None, None, None, None)


def summary(*reroutes):
    return {"flows": [{"flow": "f", "priority": 5}], "reroutes": list(reroutes), "flow_groups": [], "priorities": []}


def rr(onset, detection, first):
    return {"flow": "f", "cause": "overload", "cause_link": "r2>r4", "onset_ns": onset, "detection_ns": detection,
            "time_ns": first, "reroute_time_ns": None if onset is None else first - onset,
            "detection_time_ns": None if None in (onset, detection) else detection - onset,
            "reaction_time_ns": None if detection is None else first - detection, "lost": 0}


def test_expectations_on_the_three_spans():
    exps = parse_expectations(["reroute.time <= 500ms for flow f", "detection.time <= 300ms for flow f",
                               "reaction.time <= 20ms for flow f"], "test")
    verdicts = evaluate(exps, summary(rr(0, 290 * MS, 320 * MS), rr(10 * S, 10 * S + 100 * MS, 10 * S + 110 * MS)))
    assert [(v.passed, v.measured) for v in verdicts] == [(True, 320e6), (True, 290e6), (False, 30e6)]
    assert "onset to first message on the new path, slowest of 2 reroutes (f: overload on r2>r4)" in verdicts[0].message
    assert "detection to first message on the new path" in verdicts[2].message


def test_spans_without_an_onset_are_not_measured():
    exps = parse_expectations(["reroute.time <= 5s", "reaction.time <= 5s", "detection.time <= 5s"], "test")
    verdicts = evaluate(exps, summary(rr(None, 3 * S, 4 * S)))
    assert [v.passed for v in verdicts] == [False, True, False]
    assert "no onset" in verdicts[0].message and verdicts[0].measured is None
    verdicts = evaluate(exps, summary())
    assert all("no reroute happened" in v.message for v in verdicts)
