"""The resources section and the slow subscribers of a real run: `testbed run topologies/slow-reader.yaml` (limits
on), kept in tests/spark/data/slow-reader-real (its resource metrics, the routers' events, flows.json, the slow
subscriber's receive log and the feed's send log). r3 named the subscriber that reads 100 kbit/s of a 2 Mbit/s
feed a slow reader (its queue had held data 524 ms without emptying when a message found it full), dropped what
did not fit from then on, and never held more than its 256 KiB endpoint limit for it."""
from __future__ import annotations

import json
from pathlib import Path

from spark import resources
from spark.analyze import slow_subscribers
from spark.ingest import _read_events, _read_logs, _read_metrics
from spark.storage import ResultsStore

DATA = Path(__file__).parent / "data" / "slow-reader-real"


def _folder():
    folder = ResultsStore(str(DATA))
    flows = json.loads((DATA / "traffic/flows.json").read_text())["flows"]
    t0 = json.loads((DATA / "run.json").read_text())["traffic_start_ns"]
    return folder, flows, t0


def test_the_router_named_the_slow_reader_and_held_it_within_its_limit():
    folder, _flows, t0 = _folder()
    problems: list = []
    res = resources.summary(resources.node_series(_read_metrics(folder, problems)), _read_events(folder, problems), t0)
    assert [d["event"] for d in res["decisions"]] == ["slow_reader"]
    d = res["decisions"][0]
    assert d["node"] == "r3" and d["endpoint"].startswith("slow-feed-r3.slow1@") and d["policy"] == "drop"
    # the feed starts at 13 s; the router decided once the queue had been backlogged past slow_reader_ms
    assert 13 < d["t_s"] < 20 and d["backlog_ms"] >= d["slow_reader_ms"] == 300
    assert d["queued_to_bytes"] <= d["endpoint_limit_bytes"] == 256 * 1024
    nodes = {n["node"]: n for n in res["nodes"]}
    assert nodes["r3"]["queued_bytes_max"] <= 256 * 1024 + 65535  # the endpoint limit (+ the batch being filled)
    assert all(20 * 2**20 < n["rss_bytes_max"] < 64 * 2**20 for n in nodes.values())
    assert (res["slow_readers"], res["noisy_senders"], res["disconnects"]) == (1, 0, 0)


def test_the_slow_subscriber_is_reported_apart():
    folder, flows, t0 = _folder()
    problems: list = []
    slow = _read_logs(folder, flows, "slow", problems)
    feed = next(f for f in flows if f["name"] == "feed")
    sent = len((DATA / "traffic/send-feed.csv").read_text().splitlines()) - 1
    [s] = slow_subscribers(feed, slow, sent, t0)
    assert s["label"] == "r3.slow1" and s["read_rate_bps"] == 100_000 and s["received"] == 220
    assert round(s["delivery_pct"], 1) == 5.3
    # reading 12.5 kB/s while 250 kB/s arrive: what it got waited seconds in the buffers
    assert s["latency_p50_ns"] > 1e9
