"""tshark with the dissector on the shared short diamond run (tests/conftest.py ``short_diamond_run``, run once
and analysed in the session's Spark): the DATA messages tshark decodes per link and flow are exactly the
analysis's observations (``parquet/observations``), with no malformed mark."""
from __future__ import annotations

import json

import pytest

from tests.wireshark.tshark import decode, needs_tshark

pytestmark = [pytest.mark.integration, needs_tshark]


def test_tshark_decodes_the_analysis_observations_per_link_and_flow(short_diamond_run, spark):
    """Per link (its capture at the end listed first in capture.json: both ends see the same messages) and flow."""
    run = short_diamond_run.run_dir
    first_ends = {}
    for cap in json.loads((run / "pcap/capture.json").read_text())["captures"]:
        first_ends.setdefault(cap["link"], cap["file"])
    observed = {(r["capture"], r["flow_id"]): r["count"] for r in spark.read.parquet(
        str(run / "parquet/observations")).groupBy("capture", "flow_id").count().collect()
        if r["capture"] in first_ends.values()}
    decoded = {}
    for name in first_ends.values():
        got = decode(run / "pcap" / name, "-o", f"tb.manifest:{run / 'manifest.json'}")
        assert got.malformed() == [], f"{name}: {got.malformed()[:5]}"
        decoded.update({(name, flow): n for flow, n in got.flows().items()})
    assert decoded == observed
    assert len(first_ends) == 4 and {flow for _c, flow in observed} == {1, 2, 3, 4}

