"""The report's Link verification section, from a manifest's link_verification (testbed.links.verify's
report as a run records it); no Spark needed."""
from __future__ import annotations

from spark.report import _link_verification_section
from testbed.links.verify import DirectionVerification, LinkVerificationReport, Tolerance, probe_checks, Impairments
from testbed.links.impairstats import DelayModel
from tests.links.netem_sim import Netem, probe

MS = 1_000_000


def _verification(allowed: bool) -> dict:
    asked = Impairments(delay_ns=20 * MS, jitter_ns=3 * MS, distribution="normal", loss_pct=1.0)
    d = DirectionVerification(0, "a:eth1<->b:eth1", "a->b", "a:eth1->b:eth1", {"delay_ns": 20 * MS}, [])
    d.checks = probe_checks(d.path, asked, 2000, probe(Netem(DelayModel(20 * MS, 5 * MS, "normal"), loss_pct=1.0),
                                                        2000, MS, seed=1), Tolerance(), interval_ms=1.0,
                            one_clock=True)
    d.notes = ["the queue limit is not verified"]
    return {**LinkVerificationReport(Tolerance(), [d], 3.2).to_json(), "allowed_deviation": allowed}


def test_every_check_of_every_direction_is_a_row_with_its_verdict():
    html = _link_verification_section(_verification(allowed=True))
    assert html.startswith("<h2>Link verification</h2>") and "in 3.2 s" in html
    assert "the run went on (--allow-deviation)" in html
    for quantity in ("loss", "delay one way", "jitter", "distribution"):
        assert f"<td class=\"l\">{quantity}</td>" in html, quantity
    assert html.count('class="fail">MISS') == 2 and html.count('class="pass">ok') == 2  # jitter 5 ms, 3 asked
    assert "17.999 ms – 21.999 ms" in html and "p ≥ 0.0001" in html  # delay: max(1 ms, 10%) around the median
    assert "a:eth1-&gt;b:eth1: the queue limit is not verified" in html


def test_no_section_where_the_links_were_not_verified():
    assert _link_verification_section(None) == ""
