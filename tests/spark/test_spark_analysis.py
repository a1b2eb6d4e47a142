"""Ingest and analysis of a hand-made run whose right answers are known (spark_builders.small_run)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from spark.analyze import REROUTES_SCHEMA, analyze_run, build_summary
from spark.cli import analyze_command, check_command
from spark.ingest import SCHEMAS, _rows_frame, _to_spark
from spark.latency import rfc3550_jitter
from spark.storage import ResultsStore
from spark.testing import T0_NS, write_run
from spark_builders import (
    CONGESTION_S, F1_LOST_AT_R2, F1_NEVER_SEEN, LATENCY_NS, MS, NARROWED_AT_S, NARROWED_BPS, R2_DROPS_INCREASE,
    REROUTE_AT_S, S, SCENARIO_APPLIED_NS, US, send_ns, small_run,
)


@pytest.fixture(scope="module")
def small(spark, tmp_path_factory):
    rd = write_run(small_run(), tmp_path_factory.mktemp("runs"))
    folder = ResultsStore(str(rd), spark)
    analysis = analyze_run(spark, folder, 1.0)
    return rd, folder, analysis, build_summary(analysis)


def flow(summary, name):
    return next(f for f in summary["flows"] if f["flow"] == name)


def test_observations_of_a_message_on_its_links(small, spark):
    _rd, _f, a, _s = small
    obs = a.ingested["observations"].where((F.col("flow_id") == 1) & (F.col("seq") == 3))
    t = send_ns(10, 3) + 100 * US
    expected = spark.createDataFrame(
        [("r1-eth1.pcap", "tx", 0, "r1", "r2", t), ("r2-eth1.pcap", "rx", 0, "r1", "r2", t + MS),
         ("r2-eth2.pcap", "tx", 1, "r2", "r4", t + 1100 * US), ("r4-eth1.pcap", "rx", 1, "r2", "r4", t + 2100 * US)],
        "capture string, side string, link int, src_node string, dst_node string, ts_ns long")
    assertDataFrameEqual(obs.select(*expected.columns), expected)


def test_retransmitted_and_reordered_segments_give_one_observation_each(small):
    _rd, _f, a, _s = small
    obs = a.ingested["observations"]
    per = obs.groupBy("capture", "flow_id", "seq").count()
    assert per.where("count > 1").count() == 0
    caps = {c["capture"]: c for c in a.ingested.captures}
    assert caps["r1-eth1.pcap"]["retransmitted_segments"] == 1
    assert caps["r2-eth1.pcap"]["retransmitted_segments"] == 1
    assert caps["r2-eth2.pcap"]["out_of_order_segments"] == 1
    assert caps["r4-eth1.pcap"]["out_of_order_segments"] == 1
    # every message that crossed r2>r4 is seen on both captures of that link
    on_link1 = obs.where("link = 1 and src_node = 'r2'").groupBy("side").agg(F.countDistinct("flow_id", "seq"))
    assert sorted(r[1] for r in on_link1.collect()) == [40 - 2 + 160] * 2  # f1 before 4 s minus its two lost, and f2


def test_latency_percentiles_are_exact(small):
    _rd, _f, _a, s = small
    f1 = flow(s, "f1")["latency"]
    assert f1["messages"] == 78
    for k in ("p50_ns", "p95_ns", "p99_ns", "p999_ns", "max_ns", "min_ns"):
        assert f1[k] == LATENCY_NS
    f2 = flow(s, "f2")["latency"]
    late = 50 * MS + LATENCY_NS + 10 * US  # seq 10 arrives 10 us after seq 11
    assert f2["max_ns"] == late
    assert f2["p50_ns"] == LATENCY_NS and f2["messages"] == 160
    rt = next(p for p in s["priorities"] if p["priority"] == 1)
    assert rt["latency"]["max_ns"] == late


def test_jitter_follows_rfc3550(small):
    rd, _f, _a, s = small
    assert flow(s, "f1")["jitter"]["max_ns"] == pytest.approx(0.0)
    rows = [tuple(map(int, line.split(","))) for line in (rd / "traffic/recv-f2-r4.csv").read_text().split()[1:]]
    first = {}
    for seq, snd, rcv, _size in rows:
        first.setdefault(seq, (snd, rcv))
    ordered = sorted(first.values(), key=lambda x: x[1])
    expected = rfc3550_jitter([x[0] for x in ordered], [x[1] for x in ordered])
    assert expected > 0
    assert flow(s, "f2")["jitter"]["last_ns"] == pytest.approx(expected, rel=1e-9)


def test_rfc3550_jitter_by_hand():
    # transits 0, 16, 16, 0 (ns): J = 1, then 15/16, then 15/16*15/16 + 1
    j = rfc3550_jitter([0, 0, 0, 0], [0, 16, 16, 0])
    assert j == pytest.approx((1 * 15 / 16) * 15 / 16 + 1)


def test_loss_duplicates_reordering(small):
    _rd, _f, _a, s = small
    f1, f2 = flow(s, "f1"), flow(s, "f2")
    assert (f1["sent"], f1["expected"], f1["delivered"], f1["lost"]) == (80, 80, 78, 2)
    assert f1["loss_pct"] == pytest.approx(2.5)
    assert (f1["duplicates"], f1["reordered"]) == (0, 0)
    assert (f2["sent"], f2["delivered"], f2["lost"], f2["duplicates"], f2["reordered"]) == (160, 160, 0, 1, 1)
    assert s["overall"]["lost"] == 2


def test_lost_messages_with_last_link_seen(small, spark):
    rd, _f, _a, _s = small
    lost = spark.read.parquet(str(rd / "parquet/lost_messages"))
    expected = spark.createDataFrame([("f1", "r4", F1_LOST_AT_R2, "r1>r2 at r2"), ("f1", "r4", F1_NEVER_SEEN, None)],
                                     "flow string, node string, seq long, last_seen string")
    assertDataFrameEqual(lost.select("flow", "node", "seq", "last_seen"), expected)


def test_loss_per_window(small):
    _rd, _f, a, _s = small
    ls = a.loss_series
    f1 = ls[ls["flow"] == "f1"].set_index("window")
    assert f1.loc[2, "lost"] == 1 and f1.loc[3, "lost"] == 1 and f1["lost"].sum() == 2
    assert (f1["expected"] == 10).all()


def test_router_drops_handle_counter_reset(small):
    _rd, _f, _a, s = small
    rows = [d for d in s["router_drops"] if d["node"] == "r2" and d["reason"] == "queue_full" and d["dropped"]]
    assert rows == [{"node": "r2", "priority_name": "data", "reason": "queue_full", "dropped": R2_DROPS_INCREASE}]


def test_per_hop_and_link_transit(small):
    _rd, _f, _a, s = small
    hop = next(h for h in s["hops"] if h["flow"] == "f2")
    assert (hop["from_node"], hop["via_node"], hop["to_node"]) == ("r1", "r2", "r4")
    assert hop["p50_ns"] == 1100 * US  # first seen on r1>r2 (r1's capture) to first seen on r2>r4 (r2's)
    transit = {(l["src_node"], l["dst_node"]): l for l in s["links"]}
    assert transit[("r1", "r2")]["transit_p50_ns"] == MS


def test_reroute_from_onset_through_detection_to_the_new_path(small):
    _rd, _f, _a, s = small
    assert [r["flow"] for r in s["reroutes"]] == ["f1"]
    r = s["reroutes"][0]
    assert (r["old_path"], r["new_path"]) == ("r1>r2>r4", "r1>r3>r4")
    first_new = send_ns(10, 40) + 100 * US
    onset = T0_NS + int(NARROWED_AT_S * S) + SCENARIO_APPLIED_NS
    detection = T0_NS + int(CONGESTION_S[0] * S)
    assert r["time_ns"] == first_new
    # the cause: the scenario narrowed r2-r4 below what f1 and f2 offer it; r2 reported it 0.948 s later
    assert (r["cause"], r["cause_link"], r["onset_ns"]) == ("overload", "r2>r4", onset)
    assert (r["detection_ns"], r["detection_node"], r["detection_event"]) == (detection, "r2", "congestion_detected")
    assert r["reroute_time_ns"] == first_new - onset
    assert r["detection_time_ns"] == detection - onset
    assert r["reaction_time_ns"] == first_new - detection
    assert r["reroute_time_ns"] == r["detection_time_ns"] + r["reaction_time_ns"]
    assert r["old_path_idle_ns"] == first_new - (send_ns(10, 38) + LATENCY_NS - 100 * US)
    # lost from the onset on: 39 (sent at 3.9 s); 20 was lost before the onset
    assert (r["last_old_seq"], r["first_new_seq"], r["lost"]) == (38, 40, 1)
    assert r["episode"] == 0
    assert s["episodes"][0]["reroutes"] == {"f1": 1}
    assert s["episodes"][0]["start_ns"] == detection
    assert s["episodes"][0]["end_ns"] == T0_NS + int(CONGESTION_S[1] * S)


def test_overload_of_the_narrowed_link(small):
    _rd, _f, _a, s = small
    [o] = s["overloads"]
    assert (o["link"], o["src_node"], o["dst_node"], o["cause"]) == (1, "r2", "r4", "set_link")
    assert o["onset_ns"] == T0_NS + int(NARROWED_AT_S * S) + SCENARIO_APPLIED_NS
    assert o["capacity_bps"] == NARROWED_BPS < o["offered_bps"] < 1_000_000
    # f1 (10/s, 300 B) and f2 (20/s, 120 B) with their headers on the wire: 52 kbit/s on average
    assert 50_000 < o["peak_offered_bps"] < 70_000
    assert o["end_ns"] <= send_ns(10, 40) + 100 * MS  # f1 gone: f2 alone fits in 40 kbit/s


def test_paths_over_time(small):
    _rd, _f, a, _s = small
    ps = a.path_series
    f1 = ps[ps["flow"] == "f1"]
    assert set(f1[f1["window"] < REROUTE_AT_S]["path"]) == {"r1>r2>r4"}
    assert set(f1[f1["window"] >= REROUTE_AT_S]["path"]) == {"r1>r3>r4"}


def test_parquet_tables_written(small, spark):
    rd, _f, _a, _s = small
    for table in ("observations", "link_traffic", "captures", "sent", "received", "metrics", "events", "flows",
                  "links", "problems", "lost_messages", "reroutes", "message_hops", "message_paths", "overloads"):
        assert (rd / "parquet" / table).is_dir(), table
    assert spark.read.parquet(str(rd / "parquet/sent")).count() == 240
    assert spark.read.parquet(str(rd / "parquet/received")).count() == 78 + 161


# ---------------------------------------------------------------- damaged input


@pytest.fixture(scope="module")
def damaged(spark, tmp_path_factory):
    run = small_run("damaged")
    run.failed_scrapes = {"r1": [2.0]}
    rd = write_run(run, tmp_path_factory.mktemp("runs"), truncate_pcap={"r4-eth1.pcap": 4000},
                   omit={"traffic/recv-f2-r4.csv", "pcap/r3-eth2.pcap", "metrics/r4.jsonl"})
    (rd / "metrics/r3.jsonl").write_text("")
    with open(rd / "events.jsonl", "a") as fh:
        fh.write('{"ts_ns": 18000000')  # a line cut by an interrupted write
    with open(rd / "traffic/recv-f1-r4.csv", "a") as fh:
        fh.write("79,18000")
    code = analyze_command(str(rd))
    return rd, code


def test_damaged_input_is_reported_and_the_rest_analysed(damaged):
    rd, code = damaged
    assert code == 0
    s = json.loads((rd / "report/summary.json").read_text())
    probs = {(p["file"], p["severity"]): p["problem"] for p in s["input"]["problems"]}
    assert "cut short" in probs[("pcap/r4-eth1.pcap", "warning")]
    assert "missing" in probs[("traffic/recv-f2-r4.csv", "error")]
    assert "listed in capture.json but missing" in probs[("pcap/r3-eth2.pcap", "error")]
    assert "never scraped" in probs[("metrics/r3.jsonl", "error")]
    assert "missing" in probs[("metrics/r4.jsonl", "error")]
    assert "scrapes failed" in probs[("metrics/r1.jsonl", "warning")]
    assert "unreadable lines" in probs[("events.jsonl", "warning")]
    assert "1 unreadable lines" in probs[("traffic/recv-f1-r4.csv", "warning")]
    f1, f2 = flow(s, "f1"), flow(s, "f2")
    assert (f1["delivered"], f1["lost"]) == (78, 2)
    assert f2["expected"] == 0 and f2["loss_pct"] is None  # unknown, not 100 % lost
    assert (rd / "report/report.html").stat().st_size > 10_000
    assert (rd / "report/summary.json").stat().st_mtime <= (rd / "report/report.html").stat().st_mtime


def test_check_on_damaged_run_fails_unmeasured_expectations(damaged, tmp_path, capsys):
    rd, _ = damaged
    exp = tmp_path / "expect.yaml"
    exp.write_text("- loss <= 1% for flow f2\n- loss <= 5% for flow f1\n")
    assert check_command(str(rd), str(exp)) == 1
    out = capsys.readouterr().out
    assert "FAIL loss <= 1% for flow f2: not measured" in out
    assert "PASS loss <= 5% for flow f1" in out


def test_a_uri_is_read_through_hadoop_and_gives_the_same_figures(small, spark, tmp_path):
    import shutil

    rd, _f, _a, s = small
    copy = tmp_path / "uri"
    shutil.copytree(rd, copy, ignore=shutil.ignore_patterns("parquet", "report"))
    folder = ResultsStore(copy.as_uri(), spark)
    assert not folder.is_local
    assert folder.list("pcap", ".pcap") == sorted(p.name for p in (rd / "pcap").glob("*.pcap"))
    assert analyze_command(copy.as_uri()) == 0
    s2 = json.loads((copy / "report/summary.json").read_text())
    # every figure (a URI's captures are decoded and its messages' rows made through Spark's own paths)
    for key in set(s) | set(s2):
        if key not in ("timings_s", "verdict"):
            assert s2.get(key) == s.get(key), key
    assert check_command(copy.as_uri()) == 0


def test_no_lab_and_an_interrupted_run_still_give_the_traffic_figures(spark, tmp_path, capsys):
    rd = write_run(small_run("nolab"), tmp_path, omit={"lab.json"})
    manifest = json.loads((rd / "manifest.json").read_text())
    manifest.update(status="interrupted", error="SIGINT during traffic")
    (rd / "manifest.json").write_text(json.dumps(manifest))
    (rd / "pcap/r1-eth1.pcap").write_bytes(b"garbage, not a capture at all" * 4)
    assert analyze_command(str(rd)) == 0
    s = json.loads((rd / "report/summary.json").read_text())
    probs = {(p["file"], p["severity"]): p["problem"] for p in s["input"]["problems"]}
    assert probs[("lab.json", "error")] == "missing"
    assert "interrupted" in probs[("manifest.json", "warning")]
    assert "not a pcap file" in probs[("pcap/r1-eth1.pcap", "error")]
    assert (flow(s, "f1")["lost"], flow(s, "f2")["duplicates"]) == (2, 1)
    assert s["reroutes"] == [] and s["links"] == []  # without lab.json no capture maps to a link direction
    assert "lab.json missing" in (rd / "report/report.html").read_text()
    assert "report.html not written" not in capsys.readouterr().err


def test_reroutes_and_loss_tables_exactly(small, spark):
    rd, _f, a, s = small
    first_new = send_ns(10, 40) + 100 * US
    onset = T0_NS + int(NARROWED_AT_S * S) + SCENARIO_APPLIED_NS
    detection = T0_NS + int(CONGESTION_S[0] * S)
    last_old = send_ns(10, 38) + LATENCY_NS - 100 * US
    expected = spark.createDataFrame(
        [("f1", first_new, "r1>r2>r4", "r1>r3>r4", 38, 40, last_old, first_new - last_old, 1, "overload", "r2>r4",
          s["reroutes"][0]["cause_detail"], onset, detection, "r2", "congestion_detected", first_new - onset,
          detection - onset, first_new - detection, 0)],
        REROUTES_SCHEMA)
    assertDataFrameEqual(spark.read.parquet(str(rd / "parquet/reroutes")), expected)
    import pandas as pd

    loss = a.loss[["flow", "sent", "expected", "delivered", "lost", "duplicates", "reordered"]]
    assertDataFrameEqual(loss, pd.DataFrame({"flow": ["f1", "f2"], "sent": [80, 160], "expected": [80, 160],
                                             "delivered": [78, 160], "lost": [2, 0], "duplicates": [0, 1],
                                             "reordered": [0, 1]}), checkRowOrder=True)


def test_an_empty_folder_is_reported_not_a_crash(spark, tmp_path, capsys):
    assert analyze_command(str(tmp_path)) == 0
    s = json.loads((tmp_path / "report/summary.json").read_text())
    files = {p["file"] for p in s["input"]["problems"] if p["severity"] == "error"}
    assert {"manifest.json", "lab.json", "traffic/flows.json", "pcap/", "metrics/", "events.jsonl"} <= files
    assert s["overall"]["sent"] == 0 and s["flows"] == []
    err = capsys.readouterr().err
    assert "input error: pcap/: no pcap files" in err
    assert "report.html not written" not in err
    assert "lab.json missing" in (tmp_path / "report/report.html").read_text()
    assert check_command(str(tmp_path)) == 2  # no topology.yaml to take expectations from


def test_driver_tables_are_written_as_spark_would_write_them(small, spark):
    """The tables the driver reads (logs, metrics, events) are written by pyarrow, no Spark job: read back by
    Spark, each has its schema's types and the rows Spark's own conversion of the same frame gives."""
    rd, _f, a, _s = small
    for name in ("sent", "received", "metrics", "events", "links", "flows", "captures", "problems"):
        assert sorted(p.name for p in (rd / "parquet" / name).iterdir()) == ["_SUCCESS", "part-0.parquet"], name
        back = spark.read.parquet(str(rd / "parquet" / name))
        assert back.schema.simpleString() == SCHEMAS[name].simpleString(), name
        if name in a.ingested.frames:
            assertDataFrameEqual(back, _to_spark(spark, a.ingested.frames[name], name))


def test_a_frame_of_python_values_keeps_its_integers_and_nulls(spark, tmp_path):
    """Nanosecond times past 2**53 beside a None stay exact (a float column would round them to 256 ns)."""
    ns = 1_764_000_000_123_456_789
    rows = _rows_frame([(1, ns, ns + 1, None, 1, 0, "ok", "r2", "r2", "q", 10**9),
                        (2, ns + 2, None, ns + 3, None, 1, None, None, "r2,r3", "q", None)], "queries")
    store = ResultsStore(str(tmp_path))
    assert store.write_frame("parquet/queries", rows, SCHEMAS["queries"])
    back = spark.read.parquet(str(tmp_path / "parquet/queries")).orderBy("qid").collect()
    assert [r.asDict() for r in back] == [dict(zip(SCHEMAS["queries"].names, r)) for r in rows.itertuples(index=False)]


def test_a_link_captured_at_one_end_only_keeps_the_figures_integers(damaged):
    """r3-eth2's capture is missing: r3>r4 is seen at r4 only, a direction with no transit. It names its link
    for the offered load but gives no transit row, and the others' nanosecond figures stay integers."""
    rd, _code = damaged
    s = json.loads((rd / "report" / "summary.json").read_text())
    assert s["links"] and all(isinstance(lk["transit_max_ns"], int) for lk in s["links"])
    assert s["hops"] and all(isinstance(h["max_ns"], int) for h in s["hops"])
    assert all(lk["messages"] > 0 for lk in s["links"])


def test_the_driver_frames_reach_spark_without_a_python_worker(tmp_path):
    """A pandas frame the driver holds, an empty one too, becomes a Spark DataFrame through Arrow: no Python
    worker is started to make it (rows would be a Python RDD). A session of its own, in a process of its own,
    so that no other test's worker is counted."""
    import subprocess
    import sys

    script = tmp_path / "frames.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "import pandas as pd\n"
        "from spark.session import frame_to_spark, get_spark\n"
        "spark = get_spark('local[1]')\n"
        "full = frame_to_spark(spark, pd.DataFrame({'flow': ['f'], 'seq': [2**62]}), 'flow string, seq long')\n"
        "empty = frame_to_spark(spark, pd.DataFrame(columns=['flow', 'seq']), 'flow string, seq long')\n"
        f"full.unionByName(empty).write.parquet({str(tmp_path / 'out')!r})\n"
        "jvm = spark.sparkContext._gateway.proc.pid\n"
        "import subprocess\n"
        "kids = subprocess.run(['pgrep', '-a', '-P', str(jvm)], capture_output=True, text=True).stdout.splitlines()\n"
        "workers = [k for k in kids if 'pyspark' in k]  # Hadoop's file system forks short-lived shell commands\n"
        "print('workers', len(workers), 'rows', spark.read.parquet(sys.argv[1]).collect())\n")
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "workers 0 rows [Row(flow='f', seq=4611686018427387904)]" in out.stdout, out.stdout
