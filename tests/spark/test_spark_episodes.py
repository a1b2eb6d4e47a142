"""Congestion episodes from the router's events (no Spark needed)."""
from __future__ import annotations

import json

import pandas as pd

from spark.reroutes import episodes


def event(ts, name, node="r2", neighbour="r4", **fields):
    return {"ts_ns": ts, "event": name, "node": node, "neighbour": neighbour, "source": "router",
            "fields": json.dumps(fields)}


def test_blocking_and_restoring_a_data_weight_makes_one_episode():
    events = pd.DataFrame([
        event(10, "weight_changed", tree="data", weight_before=100, weight_after=65535),
        event(12, "congestion_detected", data_bps=9e6),  # same link, same episode
        event(13, "weight_changed", node="r1", neighbour="r2", source="linkstate", weight_after=65535),
        event(20, "weight_changed", tree="data", weight_before=65535, weight_after=100),
        event(21, "weight_changed", node="r3", neighbour="r2", source="linkstate", weight_after=65535),
        event(30, "weight_changed", node="r1", neighbour="r3", weight_before=100, weight_after=65535),
        event(35, "congestion_cleared", node="r1", neighbour="r3"),
    ])
    found = episodes(events, end_ns=40)
    assert [(e.start_ns, e.end_ns) for e in found] == [(10, 20), (30, 35)]


def test_an_episode_still_open_at_the_end_has_no_end():
    found = episodes(pd.DataFrame([event(5, "congestion_detected")]), end_ns=50)
    assert len(found) == 1 and found[0].end_ns is None
