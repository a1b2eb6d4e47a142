"""Lost messages reconcile on a real run with a failure (issue 27.4): the short diamond (tests/conftest.py
short_diamond) with r2-r4 cut from 10 s to 14 s and router r3 killed from 12 s to 15 s, run and analysed:
every lost delivery is in one part of summary.json's loss_accounting and the parts add up to the lost total
(measured: 1002 lost = 931 dropped by r1 for want of a route + 58 by r2 + 3 in the killed r3 + 10 unexplained
at r2). Needs what `testbed run` needs; skipped otherwise."""
from __future__ import annotations

import json

import pytest

from tests.realruns import missing, run_and_analyze

pytestmark = [pytest.mark.integration, pytest.mark.skipif(bool(missing()), reason=missing() or "ok")]

FAILURES = """- {at: 10s, action: link_down, link: r2-r4}
- {at: 12s, action: kill_router, node: r3}
- {at: 14s, action: link_up, link: r2-r4}
- {at: 15s, action: restart_router, node: r3}
"""


@pytest.fixture(scope="module")
def failed_diamond(spark, tmp_path_factory):
    from tests.conftest import short_diamond

    results = tmp_path_factory.mktemp("results")
    path = short_diamond(results, "lossacct")
    text = path.read_text()
    restore = "- {at: 14s, action: set_link, link: r2-r4, bw: 10mbit}\n"
    assert restore in text
    path.write_text(text.replace(restore, FAILURES))
    return run_and_analyze(path, results).run_dir


def test_every_lost_delivery_is_accounted_for(failed_diamond):
    summary = json.loads((failed_diamond / "report/summary.json").read_text())
    acc = summary["loss_accounting"]
    assert acc["lost"] == summary["overall"]["lost"] > 0
    assert acc["accounted"] == sum(p["lost"] for p in acc["parts"]) == acc["lost"]
    parts = {(p["part"], p["where"]): p for p in acc["parts"]}
    # with r2-r4 down and r3 killed r1 has no route to r4 for a while: it counts those drops, and the messages
    # its publishers gave it were never seen on a link
    assert parts[("router_drop", "r1")]["lost"] > 0 and "no_route" in parts[("router_drop", "r1")]["detail"]
    counted = {}
    for d in summary["router_drops"]:
        counted[d["node"]] = counted.get(d["node"], 0) + d["dropped"]
    assert all(p["messages"] <= counted[p["where"]] for p in acc["parts"] if p["part"] == "router_drop")
    html = (failed_diamond / "report/report.html").read_text()
    assert "<h3>Where the lost messages went</h3>" in html and f"of {acc['lost']} lost deliveries" in html
