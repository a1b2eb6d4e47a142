"""On a real diamond run (`testbed run` of the diamond's story in 18 s, tests/conftest.py short_diamond): summary.json validates against its schema,
every plot of report.html renders in headless Chromium, the results folder keeps its contract (runfolder.layout:
every file declared, and read by the analysis where the layout says so), the diamond meets its expectations, and
each reroute's onset, detection and first message on the new path come in that order, the reroute taking of the
order of the congestion monitor's interval (not the few ms from the router's last step).

Needs what `testbed run` needs (root, Mininet, openssh-server); skipped otherwise, saying what is missing.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from xml.etree import ElementTree as ET

from runfolder.layout import ENTRIES, LAYOUT
from spark.cli import check_command
from spark.report import PLOT_IDS
from spark.schema import schema_errors
from spark_browser import CHROMIUM, MISSING_REASON, rendered_plots
from testbed.spec import load_spec
from tests.realruns import RunContract, copy_of, missing

pytestmark = [pytest.mark.integration, pytest.mark.skipif(bool(missing()), reason=missing() or "ok")]


@pytest.fixture(scope="module")
def real_contract(short_diamond_run) -> RunContract:
    return short_diamond_run.contract


@pytest.fixture(scope="module")
def real_diamond(short_diamond_run) -> Path:
    """The shared run's results folder (tests/conftest.py short_diamond_run): read only."""
    return short_diamond_run.run_dir


@pytest.fixture
def own_diamond(real_diamond, tmp_path) -> Path:
    """A copy of the shared run's folder, for a test that runs `testbed check` (it rewrites report/check.json)."""
    return copy_of(real_diamond, tmp_path)


def test_real_run_folder_keeps_the_layout(real_diamond, real_contract):
    """The results-folder contract (runfolder.layout, docs/results.md): every file the run writes is declared
    by the layout, every file the layout says the analysis reads was read by it (none is written for
    nobody), and the analysis writes only files declared as its own."""
    undeclared = sorted(rel for rel in real_contract.run_files if LAYOUT.entry(rel) is None)
    assert undeclared == [], f"the run wrote files runfolder.layout does not declare: {undeclared}"
    wrong_writer = sorted(rel for rel in real_contract.run_files if LAYOUT.entry(rel).writer != "run")
    assert wrong_writer == [], f"the run wrote files the layout gives to the analysis: {wrong_writer}"
    unread = sorted(rel for rel in real_contract.run_files
                    if LAYOUT.entry(rel).analysed and not real_contract.read(rel))
    assert unread == [], f"the layout says the analysis reads these, but it did not: {unread}"
    kinds = {LAYOUT.entry(rel).pattern for rel in real_contract.run_files if LAYOUT.entry(rel).analysed}
    query_logs = {LAYOUT.traffic_file("query-*.csv")}  # the diamond has no query flow (tests/spark/test_spark_queries*.py)
    assert kinds == {e.pattern for e in ENTRIES if e.analysed} - query_logs, "an analysed kind of file went missing"
    theirs = sorted(rel for rel in real_contract.analysis_files
                    if LAYOUT.entry(rel) is None or LAYOUT.entry(rel).writer != "analysis")
    assert theirs == [], f"the analysis wrote files the layout does not declare as its own: {theirs}"


def test_real_summary_validates(real_diamond):
    summary = json.loads((real_diamond / "report/summary.json").read_text())
    assert schema_errors(summary) == []
    assert summary["overall"]["sent"] > 0 and summary["overall"]["delivered"] > 0
    # the zpub flows were seen on the links they crossed
    assert summary["paths"]["messages_with_path"] > 0
    assert all(c["error"] is None for c in summary["input"]["captures"])


def test_real_run_resources(real_diamond):
    """Every router was scraped for its queued bytes and memory; the diamond configures no limit beyond the
    defaults and has no noisy sender or slow reader, so no router took a decision."""
    summary = json.loads((real_diamond / "report/summary.json").read_text())
    res = summary["resources"]
    assert [n["node"] for n in res["nodes"]] == ["r1", "r2", "r3", "r4"]
    for n in res["nodes"]:
        assert n["scrapes"] >= 10 and n["queued_bytes_limit"] == 64 * 2**20
        assert 0 <= n["queued_bytes_max"] <= n["queued_bytes_limit"]
        assert 10 * 2**20 < n["rss_bytes_first"] <= n["rss_bytes_max"] < 500 * 2**20
    # the 7 Mbit/s bulk flow meets the 6 Mbit/s bottleneck at r2: data queues there
    assert max(n["queued_bytes_max"] for n in res["nodes"]) > 0
    assert res["decisions"] == [] and res["noisy_senders"] == res["slow_readers"] == res["disconnects"] == 0


def test_real_manifest_records_each_router_s_event_loop(real_diamond):
    """The event loop each router ran on (router/eventloop.py: uvloop where the bundle could ship it and
    the node's python imports it, asyncio's otherwise), from its ready event, in the manifest."""
    manifest = json.loads((real_diamond / "manifest.json").read_text())
    loops = manifest["extra"]["router_event_loops"]
    assert sorted(loops) == ["r1", "r2", "r3", "r4"]
    assert all(v == "asyncio" or v.startswith("uvloop ") for v in loops.values()), loops


@pytest.mark.skipif(CHROMIUM is None, reason=MISSING_REASON)
def test_real_report_renders(real_diamond):
    total, ok, failed, _ = rendered_plots(real_diamond / "report/report.html")
    assert failed == set() and set(PLOT_IDS) <= ok and total == len(ok)


def test_real_diamond_meets_its_expectations(own_diamond, capsys):
    code = check_command(str(own_diamond))
    out = capsys.readouterr().out
    assert code == 0, f"the diamond missed its own expectations:\n{out}"
    check = json.loads((own_diamond / "report/check.json").read_text())
    expected = load_spec(own_diamond / "topology.yaml").expect
    verdicts = [v for v in check["verdicts"] if v["metric"] != "clock_error_share"]  # and the clock check
    assert check["passed"] is True and len(verdicts) == len(expected) > 0
    assert len(check["verdicts"]) == len(expected) + 1
    assert all(v["passed"] and v["measured"] is not None for v in verdicts)
    cases = ET.parse(own_diamond / "report/junit.xml").getroot().iter("testcase")
    assert sorted(c.get("name") for c in cases if c.get("classname").endswith(".expect")) == sorted(
        e.describe() for e in expected)


def test_real_report_opens_with_the_verdict(own_diamond, capsys):
    """report.html's body starts with the PASS banner; summary.json's verdict is check's, expectation by
    expectation, with measured value, limit and margin."""
    html = (own_diamond / "report/report.html").read_text()
    body = html.split("<body>", 1)[1]
    assert body.startswith('<div class="verdict pass" id="verdict"><b class="word">PASS</b>'), body[:300]
    expected = load_spec(own_diamond / "topology.yaml").expect
    assert f"{len(expected)} of {len(expected)} expectations met; clock check passed</div>" in body.split("\n", 1)[0]
    verdict = json.loads((own_diamond / "report/summary.json").read_text())["verdict"]
    check_command(str(own_diamond))
    capsys.readouterr()
    check = json.loads((own_diamond / "report/check.json").read_text())
    assert verdict["passed"] is check["passed"] is True and verdict["failed"] == []
    assert [{k: v for k, v in e.items() if k != "shown"} for e in verdict["expectations"] + [verdict["clock_check"]]] \
        == check["verdicts"]
    assert all(e["shown"]["measured"] and e["shown"]["limit"] and e["shown"]["margin"]
               for e in verdict["expectations"])


def test_real_lost_messages_add_up(real_diamond):
    """Every lost delivery is in one part of the accounting, and the parts add up to the run's lost total; the
    report shows them (issue 27.4)."""
    summary = json.loads((real_diamond / "report/summary.json").read_text())
    acc = summary["loss_accounting"]
    assert acc["lost"] == summary["overall"]["lost"] == acc["accounted"] == sum(p["lost"] for p in acc["parts"])
    # the diamond's routers count their drops: what arrived at a router and was lost there is theirs
    counted = {d["node"]: 0 for d in summary["router_drops"]}
    for d in summary["router_drops"]:
        counted[d["node"]] += d["dropped"]
    for p in acc["parts"]:
        if p["part"] == "router_drop":
            assert p["messages"] <= counted[p["where"]]
    html = (real_diamond / "report/report.html").read_text()
    if acc["lost"]:  # the routers block rather than drop by default: a run may lose nothing
        assert "<h3>Where the lost messages went</h3>" in html and f"of {acc['lost']} lost deliveries" in html


def test_real_run_clocks(own_diamond, capsys):
    """Mininet's nodes read the controller's clock: with clocks in the manifest they are same-host (bound 0,
    nothing corrected) and the clock check passes saying so; a manifest without them is analysed as before,
    the clock check not measured."""
    manifest = json.loads((own_diamond / "manifest.json").read_text())
    summary = json.loads((own_diamond / "report/summary.json").read_text())
    check_command(str(own_diamond))  # its exit status is the expectations' too (test above)
    clock = json.loads((own_diamond / "report/check.json").read_text())["verdicts"][-1]
    assert clock["metric"] == "clock_error_share" and clock["passed"] is True
    latencies = [f["latency"] for f in summary["flows"] if f["latency"]]
    assert latencies
    if "clocks" in manifest:
        assert set(manifest["clocks"]["before"]) >= {"r1", "r2", "r3", "r4"}
        assert summary["clocks"]["measured"] is False and summary["clocks"]["max_bound_ns"] == 0
        assert {n["method"] for n in summary["clocks"]["nodes"]} == {"same-host"}
        assert all(lat["clock_error_ns"] == 0 for lat in latencies)
        assert "same host" in clock["message"] and not clock["skipped"]
    else:
        assert summary["clocks"] is None and all(lat["clock_error_ns"] is None for lat in latencies)
        assert clock["skipped"] is True and "not measured" in clock["message"]


def test_real_reroutes_go_onset_detection_new_path(real_diamond):
    summary = json.loads((real_diamond / "report/summary.json").read_text())
    spec = load_spec(real_diamond / "topology.yaml")
    interval_ns = int(spec.router_settings("r2").monitor_interval)
    bulk_start_ns = summary["t0_ns"] + next(f for f in spec.traffic if f.name == "bulk").start
    moved = {r["flow"]: r for r in summary["reroutes"]}
    assert {"zpub.pub1", "bulk"} <= set(moved), summary["reroutes"]
    for name in ("zpub.pub1", "bulk"):
        r = moved[name]
        assert (r["cause"], r["cause_link"], r["detection_event"]) == ("overload", "r2>r4", "congestion_detected"), r
        # the bulk flow pushes r2-r4 past its 10 Mbit/s: its first messages reach r2 within ms of its start
        assert bulk_start_ns <= r["onset_ns"] < bulk_start_ns + interval_ns, r
        assert r["onset_ns"] < r["detection_ns"] < r["time_ns"], r
        assert r["reroute_time_ns"] > r["detection_time_ns"] > 0 and r["reaction_time_ns"] > 0
        assert r["reroute_time_ns"] == r["detection_time_ns"] + r["reaction_time_ns"]
        assert interval_ns / 2 < r["reroute_time_ns"] < 4 * interval_ns, r


def test_real_header_search_gives_what_the_frame_decoder_gives(real_diamond):
    """Ground truth on the whole run: searching the captures for validated traffic headers (how runs of
    other routers are analysed) gives exactly the observations decoding our frames gives, at the same
    times, nothing rejected."""
    assert_header_search_matches_frames(real_diamond)


def assert_header_search_matches_frames(run_dir: Path) -> None:
    import pandas as pd

    from spark.pcap import decode_pcap_file
    from spark.streamsearch import SentIndex, search_pcap_file

    flows = json.loads((run_dir / "traffic/flows.json").read_text())["flows"]
    sent = pd.concat([pd.read_csv(run_dir / f"traffic/send-{f['name']}.csv", dtype="int64").assign(
        flow_id=f["flow_id"], priority=f["priority"]) for f in flows if f.get("kind") != "query"])
    index = SentIndex.from_sent(sent, [f["flow_id"] for f in flows])
    total = 0
    for pcap in sorted((run_dir / "pcap").glob("*.pcap")):
        decoded, found = decode_pcap_file(str(pcap)), search_pcap_file(str(pcap), index)
        want = {(decoded.streams[s], f, q): ts for s, ts, f, q, *_ in decoded.observations if f in index.flows}
        got = {(found.streams[s], f, q): ts for s, ts, f, q, *_ in found.observations}
        # the decoder never loses its place in a real capture of our router (it once did, after cutting a
        # stream's buffer while a link-state frame was in flight: "bad frame magic" in the frame's JSON, every
        # later message on that link timed a packet late, up to 48 ms - tests/spark/test_spark_pcap_decode.py)
        assert decoded.stats.codec_errors == 0, pcap.name
        # the same messages at the same times: the packet carrying each message's last byte
        assert got == want, (pcap.name, sorted(set(got) ^ set(want))[:5],
                             sorted((k, got[k] - want[k]) for k in got if k in want and got[k] != want[k])[:5])
        assert found.stats.headers_rejected == found.stats.headers_in_holes == 0, pcap.name
        total += len(got)
    assert total > 0
