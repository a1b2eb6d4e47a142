"""Figures bounded by configuration say so (issue 27.4): a detection time after a failure is set by the
detecting router's lease and keep-alive, read from a real run's manifest (tests/spark/data/compare-real);
an overload's detection (the real run's own reroutes) is not. The clock check's row says why it is there
(its place in a real report.html: test_spark_console_real_run.py)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from spark.bounds import CLOCK_CHECK_WHY, failure_detection_bound

DATA = Path(__file__).parent / "data" / "compare-real"


def _run(name: str):
    return (json.loads((DATA / name / "manifest.json").read_text()),
            json.loads((DATA / name / "report" / "summary.json").read_text()))


def test_a_failure_detected_by_link_down_is_bounded_by_the_lease():
    manifest, summary = _run("aware-on")
    assert manifest["spec"]["router_settings"]["r1"]["lease"] == "3s"
    failure = {"cause": "failure", "detection_event": "link_down", "detection_node": "r1"}
    assert failure_detection_bound(failure, manifest) == (
        "set by the lease: 2s–3s after a silent cut (lease 3s − keep-alive 1s) unless the connection closed first")
    # another lease on the detecting router: its own
    longer = copy.deepcopy(manifest)
    longer["spec"]["router_settings"]["r1"].update(lease="10s", keepalive="2500ms")
    assert failure_detection_bound(failure, longer).startswith("set by the lease: 7.5s–10s after a silent cut (lease 10s − keep-alive 2.5s)")
    # the real run's reroutes were overloads, detected by the congestion monitor: no lease bound
    assert summary["reroutes"] and all(failure_detection_bound(r, manifest) is None for r in summary["reroutes"])
    assert failure_detection_bound({**failure, "detection_event": "congestion_detected"}, manifest) is None


def test_no_bound_where_the_driver_ignores_the_lease():
    manifest, _ = _run("zenoh")
    failure = {"cause": "failure", "detection_event": "link_down", "detection_node": "r2"}
    ignoring = copy.deepcopy(manifest)
    ignoring["router_driver"]["settings_ignored"].append("lease")
    assert failure_detection_bound(failure, ignoring) is None
    assert failure_detection_bound(failure, None) is None


def test_the_clock_check_says_why_it_is_there():
    assert CLOCK_CHECK_WHY.startswith("checked on every run: each latency is the subscriber's clock minus the "
                                      "publisher's")
