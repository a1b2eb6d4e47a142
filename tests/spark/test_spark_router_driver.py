"""A run of another router (manifest ``router_driver``: stock Zenoh, its own wire format, no metrics, no event
log), analysed end to end beside the same run of our router: latency, loss and delivery from the logs; paths,
reroutes and drops per hop from the traffic headers found in the captures, equal to what our frames give;
the router's own figures marked "not available" with the reason, in summary.json, the report and the checks."""
from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from spark.cli import analyze_command, check_command
from spark.expectations import evaluate, parse_expectations
from spark.routerdriver import read_router_driver
from spark.schema import schema_errors
from spark.testing import FOREIGN_FALSE_HEADERS, ZENOH_DRIVER, write_run
from spark_builders import small_run

NO_METRICS = "not available: router driver zenoh provides no metrics"
NO_EVENTS = "not available: router driver zenoh provides no event log"
EXPECT = ["loss <= 5% for flow f1", "reroute.time <= 3s for flow f1", "detection.time <= 1s",
          "reaction.time <= 1s", "reroutes_per_episode <= 1", "router.memory <= 100MiB",
          "router.queued_bytes <= 1MiB", "limits.disconnects == 0", "limits.noisy_senders == 0"]


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    """The same traffic, paths, losses and reroute through our router and through stock Zenoh."""
    root = tmp_path_factory.mktemp("drivers")
    ours = write_run(dataclasses.replace(small_run("ours"), expect=EXPECT), root)
    zenoh = write_run(dataclasses.replace(small_run("zenoh"), expect=EXPECT, wire="foreign",
                                          router_driver=ZENOH_DRIVER), root)
    for rd in (ours, zenoh):
        assert analyze_command(str(rd)) == 0
    return ours, zenoh


def summary_of(rd):
    return json.loads((rd / "report/summary.json").read_text())


def test_summary_validates_and_names_the_driver(runs):
    ours, zenoh = (summary_of(rd) for rd in runs)
    assert schema_errors(ours) == [] and schema_errors(zenoh) == []
    assert zenoh["router"] == {"driver": "zenoh", "wire": "zenoh", "client": "zenoh", "recorded": True,
                               "metrics": {"available": False, "reason": NO_METRICS},
                               "events": {"available": False, "reason": NO_EVENTS},
                               "admin": False, "observations": "header-search"}
    # the driver is where the orchestrator writes it: at the top level of manifest.json
    manifest = json.loads((runs[1] / "manifest.json").read_text())
    assert manifest["router_driver"] == ZENOH_DRIVER and "router_driver" not in manifest.get("extra", {})
    # a run without router_driver in its manifest is our router, with everything
    assert ours["router"]["driver"] == "testbed" and ours["router"]["recorded"] is False
    assert ours["router"]["observations"] == "router-frames" and ours["paths"]["header_search"] is None
    assert ours["router"]["metrics"] == {"available": True, "reason": None}
    # nothing reported missing for what the driver never provides
    assert not [p for p in zenoh["input"]["problems"] if "metrics" in p["file"] or "events.jsonl" in p["file"]
                and p["file"] != "events.jsonl"]


def test_latency_loss_and_delivery_come_from_the_logs_for_every_driver(runs):
    ours, zenoh = (summary_of(rd) for rd in runs)
    keys = ("sent", "expected", "delivered", "lost", "loss_pct", "duplicates", "reordered", "latency", "jitter")
    for a, b in zip(ours["flows"], zenoh["flows"]):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    assert zenoh["overall"]["delivered"] > 0


def test_paths_reroutes_and_drops_per_hop_from_the_headers_equal_those_from_our_frames(runs, spark):
    ours, zenoh = (summary_of(rd) for rd in runs)
    assert [f["paths"] for f in zenoh["flows"]] == [f["paths"] for f in ours["flows"]]
    assert [f["paths"] for f in zenoh["flows"]][0] == [{"path": "r1>r2>r4", "messages": 38},
                                                     {"path": "r1>r3>r4", "messages": 40}]
    for key in ("links", "hops", "lost_by_last_seen", "overloads", "paths"):
        if key == "paths":
            assert {k: v for k, v in zenoh[key].items() if k not in ("method", "header_search")} == \
                {k: v for k, v in ours[key].items() if k not in ("method", "header_search")}
        else:
            assert zenoh[key] == ours[key], key
    # the reroute, its onset (the scenario's narrowing) and its reroute time, from the captures alone;
    # detection (a router event) is not available
    [a], [b] = ours["reroutes"], zenoh["reroutes"]
    same = ("flow", "time_ns", "old_path", "new_path", "last_old_seq", "first_new_seq", "lost", "cause",
            "cause_link", "onset_ns", "reroute_time_ns")
    assert {k: b[k] for k in same} == {k: a[k] for k in same}
    assert b["reroute_time_ns"] > 0 and a["detection_ns"] is not None
    assert b["detection_ns"] is None and b["detection_time_ns"] is None and b["reaction_time_ns"] is None
    # every observation row is the same, whichever way it was found
    cols = ["capture", "link", "src_node", "dst_node", "side", "ts_ns", "flow_id", "seq", "send_ns", "priority",
            "payload_len"]
    obs = [spark.read.parquet(str(rd / "parquet/observations")).toPandas()[cols].sort_values(cols)
           .reset_index(drop=True) for rd in runs]
    assert len(obs[0]) > 0
    pd.testing.assert_frame_equal(obs[0], obs[1])
    # the header search's counts: every false header of the foreign openings rejected, none counted
    hs = zenoh["paths"]["header_search"]
    captures = len(zenoh["input"]["captures"])
    assert hs["validated"] == len(obs[1])
    assert hs["rejected"] == captures * 2 * FOREIGN_FALSE_HEADERS
    assert hs["rejected_unknown_flow"] == hs["rejected_not_sent"] == captures * 2
    assert hs["headers_found"] == hs["validated"] + hs["rejected"] and hs["in_holes"] == hs["no_send_log"] == 0
    assert all(c["method"] == "header-search" and c["headers_rejected"] == 4 for c in zenoh["input"]["captures"])


def test_router_metrics_and_events_are_marked_not_available(runs):
    ours, zenoh = (summary_of(rd) for rd in runs)
    assert zenoh["resources"] == {"available": False,
                                  "reason": "not available: router driver zenoh provides no metrics and no event log"}
    assert zenoh["router_drops"] == {"available": False, "reason": NO_METRICS}
    assert zenoh["episodes"] == {"available": False, "reason": NO_EVENTS}
    # our router's run has them all
    assert ours["router_drops"] and ours["episodes"] and ours["resources"]["decisions"] == []
    assert ours["resources"]["noisy_senders"] == 0
    html = (runs[1] / "report/report.html").read_text()
    for text in (NO_METRICS, NO_EVENTS, "Detection, and so detection and reaction times: " + NO_EVENTS,
                 "validated against the send logs"):
        assert text in html
    assert "No router took a resource-limit decision" not in html
    assert 'id="resources"' in html and 'id="reroute-timeline"' in html


def test_expectations_on_what_the_driver_cannot_measure_fail_with_the_reason(runs):
    verdicts = {v.expectation: v for v in evaluate(parse_expectations(EXPECT, "test"), summary_of(runs[1]))}
    for text, reason in (("router.memory <= 100MiB", NO_METRICS), ("router.queued_bytes <= 1MiB", NO_METRICS),
                         ("limits.disconnects == 0", NO_EVENTS), ("limits.noisy_senders == 0", NO_EVENTS),
                         ("detection.time <= 1s", NO_EVENTS), ("reaction.time <= 1s", NO_EVENTS),
                         ("reroutes_per_episode <= 1", NO_EVENTS)):
        v = next(v for k, v in verdicts.items() if k.replace(" ", "") == text.replace(" ", ""))
        assert not v.passed and not v.skipped and v.measured is None, v.message
        assert reason in v.message and v.message.startswith("FAIL"), v.message
    assert next(v for k, v in verdicts.items() if k.startswith("reroute.time")).passed
    assert next(v for k, v in verdicts.items() if k.startswith("loss")).passed
    # the same through `check`: exit 1, the reasons in check.json
    assert check_command(str(runs[1])) == 1
    check = json.loads((runs[1] / "report/check.json").read_text())
    assert any(NO_METRICS in v["message"] for v in check["verdicts"])
    # our router's run measures them (its synthetic metrics have no memory or queued bytes: "not in the metrics")
    ours = evaluate(parse_expectations(EXPECT, "test"), summary_of(runs[0]))
    assert not [v.message for v in ours if "not available" in v.message]
    assert sum(v.measured is not None for v in ours) == len(EXPECT) - 2


@pytest.mark.parametrize("manifest, expected, problems", [
    (None, ("testbed", "testbed", True, True, False), 0),
    ({"run_id": "x"}, ("testbed", "testbed", True, True, False), 0),
    ({"router_driver": ZENOH_DRIVER, "extra": {}}, ("zenoh", "zenoh", False, False, True), 0),
    ({"router_driver": {}, "extra": {}}, ("testbed", "testbed", True, True, False), 0),  # the field's default
    ({"extra": {"router_driver": ZENOH_DRIVER}}, ("zenoh", "zenoh", False, False, True), 0),  # hand-made folders
    ({"router_driver": {**ZENOH_DRIVER, "name": "command", "wire": "unknown"}},
     ("command", "unknown", False, False, True), 0),
    ({"extra": {"router_driver": {"name": "command", "wire": "quic", "metrics": "yes", "events": False}}},
     ("command", "unknown", False, False, True), 3),
    ({"extra": {"router_driver": "zenoh"}}, ("unknown", "unknown", False, False, True), 1),
])
def test_router_driver_is_read_from_the_manifest(manifest, expected, problems):
    drv, found = read_router_driver(manifest)
    assert (drv.name, drv.wire, drv.metrics, drv.events, drv.recorded) == expected
    assert len(found) == problems
    assert drv.frames_decodable == (drv.wire == "testbed")


COMMAND_DRIVER = {"name": "command", "wire": "unknown", "client": "testbed", "metrics": True, "events": False,
                  "admin": False}
NO_OUR_NAMES = "not available: the router's metrics have none of the testbed's metric names (docs/metrics.md)"


@pytest.fixture(scope="module")
def command_run(spark, tmp_path_factory):
    """Any router binary (a `command` driver) whose scraped metrics have names of its own, not ours."""
    own = {n: [(0.0, "zenoh_rx_bytes", {"space": "data"}, 0.0), (5.0, "zenoh_rx_bytes", {"space": "data"}, 9e5),
               (5.0, "process_resident_memory_bytes", {}, 3e7)] for n in ("r1", "r2", "r3", "r4")}
    rd = write_run(dataclasses.replace(small_run("command"), expect=EXPECT, wire="foreign",
                                       router_driver=COMMAND_DRIVER, metric_samples=own),
                   tmp_path_factory.mktemp("command"))
    assert analyze_command(str(rd)) == 0
    return rd


def test_metrics_without_our_names_are_not_available_never_0(command_run, runs, tmp_path, capsys):
    s = summary_of(command_run)
    assert schema_errors(s) == []
    assert s["router"]["metrics"] == {"available": False, "reason": NO_OUR_NAMES}
    assert s["router_drops"] == {"available": False, "reason": NO_OUR_NAMES}
    assert s["resources"] == {"available": False, "reason": NO_OUR_NAMES + "; router driver command provides no "
                                                                        "event log"}
    verdicts = {v.expectation.replace(" ", ""): v for v in evaluate(parse_expectations(EXPECT, "test"), s)}
    memory = verdicts["router.memory<=100MiB"]
    assert not memory.passed and memory.measured is None and NO_OUR_NAMES in memory.message
    # compare: n/a with the reason, not a 0 that would read as "better"
    from spark.compare import compare_runs
    assert compare_runs([str(runs[0]), str(command_run)], out=str(tmp_path / "c.html"), as_json=True) == 0
    doc = json.loads(capsys.readouterr().out)
    drops = next(f for f in doc["figures"] if f["group"] == "run" and f["figure"] == "router drops")
    assert drops["runs"]["command"] == {"value": None, "available": False, "reason": NO_OUR_NAMES}


def test_one_definition_of_unavailable_and_of_the_manifests_driver():
    import pandas as pd

    import spark.analyze
    import spark.compare
    import spark.expectations
    import spark.report
    from spark import resources, routerdriver
    from spark.routerdriver import Availability, RecordedDriver

    for module in (spark.analyze, spark.compare, spark.expectations, spark.report):
        assert module.unavailable_reason is routerdriver.unavailable_reason, module.__name__
    # compare names the driver as analysis reads it (the top-level field's default, {}, is no driver)
    manifest = {"router_driver": {}, "extra": {"router_driver": ZENOH_DRIVER}}
    assert spark.compare._driver_name(manifest, {}) == read_router_driver(manifest)[0].name == "zenoh"
    # reasons are put together from their causes
    zenoh = read_router_driver({"router_driver": ZENOH_DRIVER})[0]
    empty_series = resources.node_series(pd.DataFrame(columns=["node", "ts_ns", "ok", "metric", "labels", "value"]))
    assert resources.summary(empty_series, pd.DataFrame(), 0, Availability(zenoh)) == {
        "available": False, "reason": "not available: router driver zenoh provides no metrics and no event log"}
    command = RecordedDriver("command", "unknown", "testbed", metrics=True, events=False, admin=False)
    assert Availability(command).reason("metrics") is None
    assert Availability(command, metrics_unnamed=True).reason("metrics", "events") == (
        NO_OUR_NAMES + "; router driver command provides no event log")
    assert Availability(zenoh, metrics_unnamed=True).reason("metrics") == NO_METRICS


@pytest.mark.parametrize("metrics, events", [(True, False), (False, True)])
def test_a_router_with_only_metrics_or_only_events_shows_what_it_has(spark, tmp_path, metrics, events):
    """A command driver with a metrics URL (our metric names) but no event log shows the routers' table of
    scrapes and marks the decisions not available; a router with an event log but no metrics the reverse -
    the report is written either way."""
    driver = {"name": "command", "wire": "testbed", "client": "testbed", "metrics": metrics, "events": events,
              "admin": False}
    samples = {n: [(0.0, "router_resident_memory_bytes", {}, 3e7), (1.0, "router_queued_bytes", {}, 2**20)]
               for n in ("r1", "r2", "r3", "r4")}
    rd = write_run(dataclasses.replace(small_run(f"half-{metrics}"), router_driver=driver, metric_samples=samples),
                   tmp_path)
    assert analyze_command(str(rd)) == 0
    s = summary_of(rd)
    assert schema_errors(s) == []
    html = (rd / "report/report.html").read_text()
    no_metrics = "not available: router driver command provides no metrics"
    no_events = "not available: router driver command provides no event log"
    if metrics:
        assert [(n["node"], n["queued_bytes_max"]) for n in s["resources"]["nodes"]] == [
            (n, 2**20) for n in ("r1", "r2", "r3", "r4")]
        assert s["resources"]["decisions"] == {"available": False, "reason": no_events}
        assert "queued MiB max (running peak)" in html and '<td class="l">r4</td>' in html
        assert f"Resource-limit decisions: {no_events}" in html
    else:
        assert s["resources"]["nodes"] == {"available": False, "reason": no_metrics}
        assert s["resources"]["decisions"] == []
        assert f"Queued bytes and memory: {no_metrics}" in html and "queued MiB max" not in html
        assert "No router took a resource-limit decision" in html
