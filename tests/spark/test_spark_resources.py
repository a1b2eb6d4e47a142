"""spark/resources.py: the routers' queued bytes and memory from scraped metrics, and the resource-limit
decisions from their events, with inputs shaped as ingest reads them (metrics/<node>.jsonl samples and
nodes/<node>/events.jsonl lines as router/enforcement.py writes them)."""
from __future__ import annotations

import json

import pandas as pd

from spark import resources
from spark.expectations import measure
from runfolder.expectations import parse_expectation

T0 = 1_700_000_000_000_000_000
S = 1_000_000_000
MIB = 2**20


def _metrics(rows):
    """(second, node, metric, value) -> the frame ingest._read_metrics builds."""
    return pd.DataFrame([(T0 + int(s * S), n, True, None, m, {}, float(v)) for s, n, m, v in rows],
                        columns=["ts_ns", "node", "ok", "error", "metric", "labels", "value"])


def _events(rows):
    """(second, node, event, fields) of a router's own events -> the frame ingest._read_events builds."""
    return pd.DataFrame([(T0 + int(s * S), "router", n, e, None, None, f.get("neighbour") or f.get("peer"),
                          json.dumps(f, sort_keys=True)) for s, n, e, f in rows],
                        columns=["ts_ns", "source", "node", "event", "at_ns", "link", "neighbour", "fields"])


# r1's queue grew to 3 MiB between two scrapes (its running peak says so), r2 stayed small
METRICS = _metrics([
    (0, "r1", "router_queued_bytes", 0), (0, "r1", "router_queued_bytes_peak", 0),
    (0, "r1", "router_queued_bytes_limit", 64 * MIB), (0, "r1", "router_resident_memory_bytes", 30 * MIB),
    (1, "r1", "router_queued_bytes", 1 * MIB), (1, "r1", "router_queued_bytes_peak", 3 * MIB),
    (1, "r1", "router_queued_bytes_limit", 64 * MIB), (1, "r1", "router_resident_memory_bytes", 41 * MIB),
    (1, "r1", "router_control_queued_bytes", 2048),
    (2, "r1", "router_queued_bytes", 0), (2, "r1", "router_queued_bytes_peak", 3 * MIB),
    (2, "r1", "router_resident_memory_bytes", 39 * MIB),
    (0, "r2", "router_queued_bytes", 0), (0, "r2", "router_resident_memory_bytes", 28 * MIB),
    (1, "r2", "router_queued_bytes", 65536), (1, "r2", "router_resident_memory_bytes", 29 * MIB),
    (1, "r2", "router_queue_dropped_messages_total", 5),  # not a resource metric: ignored
])

EVENTS = _events([
    (0.5, "r1", "client_connected", {"client": "noisy@127.0.0.1:40000"}),
    (5.2, "r1", "noisy_sender", {"endpoint": "noisy@127.0.0.1:40000", "kind": "client", "policy": "throttle",
                                 "cause": "input_rate", "input_rate_bps": 52_000_000, "input_rate_limit_bps": 3_000_000,
                                 "queued_from_bytes": 0, "sender_limit_bytes": None, "share_of_total": 0.0,
                                 "total_bytes": 1024, "total_limit_bytes": 64 * MIB}),
    (7.0, "r4", "slow_reader", {"endpoint": "slow1@127.0.0.1:40100", "kind": "client", "policy": "disconnect",
                                "full_for_ms": 503, "slow_reader_ms": 500, "queued_to_bytes": 1 << 20,
                                "endpoint_limit_bytes": 1 << 20}),
    (7.0, "r4", "client_disconnected", {"client": "slow1@127.0.0.1:40100",
                                        "reason": "slow reader: its queue stayed full for 503 ms (limit 500 ms); "
                                                  "disconnected by the router's resource limits (3 queued messages "
                                                  "discarded)"}),
    (8.0, "r4", "client_disconnected", {"client": "pub@127.0.0.1:40200", "reason": "peer closed: bye"}),
    (9.1, "r1", "noisy_sender_cleared", {"endpoint": "noisy@127.0.0.1:40000", "kind": "client",
                                         "policy": "throttle", "duration_ms": 3900, "dropped": 0,
                                         "throttled_ms": 3700}),
])


def test_node_table_takes_the_running_peak_and_memory_at_scrapes():
    series = resources.node_series(METRICS)
    table = {n["node"]: n for n in resources.node_table(series)}
    assert table["r1"]["queued_bytes_max"] == 3 * MIB  # the peak between scrapes, not the 1 MiB seen
    assert table["r1"]["queued_bytes_limit"] == 64 * MIB and table["r1"]["control_bytes_max"] == 2048
    assert (table["r1"]["rss_bytes_first"], table["r1"]["rss_bytes_max"]) == (30 * MIB, 41 * MIB)
    assert table["r1"]["scrapes"] == 3
    # an older router without the peak gauge: the highest scraped value
    assert table["r2"]["queued_bytes_max"] == 65536 and table["r2"]["queued_bytes_limit"] is None


def test_decisions_and_only_the_disconnects_the_limits_caused():
    d = resources.decisions(EVENTS, T0)
    assert [x["event"] for x in d] == ["noisy_sender", "slow_reader", "disconnected", "noisy_sender_cleared"]
    noisy = d[0]
    assert noisy["endpoint"] == "noisy@127.0.0.1:40000" and noisy["policy"] == "throttle"
    assert noisy["t_s"] == 5.2 and noisy["input_rate_bps"] == 52_000_000
    assert d[2]["endpoint"] == "slow1@127.0.0.1:40100" and "slow reader" in d[2]["reason"]


def test_summary_and_expectations_read_it():
    summary = {"resources": resources.summary(resources.node_series(METRICS), EVENTS, T0)}
    res = summary["resources"]
    assert res["queued_bytes_max"] == 3 * MIB and res["rss_bytes_max"] == 41 * MIB
    assert (res["noisy_senders"], res["slow_readers"], res["disconnects"]) == (1, 1, 1)
    v, note = measure(parse_expectation({"metric": "router.queued_bytes", "op": "<=", "value": "64MiB"}),
                      summary)
    assert v == 3 * MIB and "r1" in note
    v, note = measure(parse_expectation({"metric": "limits.noisy_senders", "op": ">=", "value": 1}),
                      summary)
    assert v == 1 and "noisy@127.0.0.1:40000 at r1" in note
    v, _ = measure(parse_expectation({"metric": "router.memory", "op": "<", "value": "100MiB"}), summary)
    assert v == 41 * MIB
    v, note = measure(parse_expectation({"metric": "limits.slow_readers", "op": ">=", "value": 1}),
                      {"flows": []})
    assert v is None and "before testbed-summary/4" in note


def test_router_metrics_take_no_flow_or_priority():
    import pytest
    from runfolder.expectations import ExpectationError
    with pytest.raises(ExpectationError, match="about the routers"):
        parse_expectation({"metric": "router.memory", "op": "<", "value": "100MiB", "flow": "bulk"})
    from spark.expectations import parse_expectations
    [exp] = parse_expectations(["router.queued_bytes <= 64MiB"], "test")
    assert exp.describe() == "router.queued_bytes <= 64MiB" and exp.value == 64 * MIB
    with pytest.raises(ExpectationError, match="about the routers"):
        parse_expectations(["limits.slow_readers >= 1 for flow bulk"], "test")


def test_no_metrics_no_events():
    empty_m = _metrics([])
    empty_e = _events([])
    res = resources.summary(resources.node_series(empty_m), empty_e, T0)
    assert res["nodes"] == [] and res["queued_bytes_max"] is None and res["decisions"] == []
