"""Shaping plans: which qdiscs and iptables rules a requested shape turns into, per kernel."""
from __future__ import annotations

import pytest

from testbed.kernel import KernelCapabilities
from testbed.links.shaping import UnsupportedShaping, htb_class_args, plan
from testbed.spec.resolve import Shaping as Shape

NO_NETEM = KernelCapabilities({"htb": True, "tbf": True, "netem": False, "pfifo": True, "bfifo": True}, True)
WITH_NETEM = KernelCapabilities({"htb": True, "tbf": True, "netem": True, "pfifo": True, "bfifo": True}, True)
BARE = KernelCapabilities({"htb": False, "tbf": False, "netem": False, "pfifo": False, "bfifo": False}, False)


def test_bandwidth_and_queue_without_netem():
    p = plan(Shape(bw_bps=10_000_000, queue_packets=50), NO_NETEM)
    assert p.qdisc_kinds == ["htb", "pfifo"] and p.leaf_args == ("limit", "50")
    assert p.iptables_loss_pct is None and p.dropped == ()


def test_loss_without_netem_uses_iptables():
    p = plan(Shape(loss_pct=10.0), NO_NETEM)
    assert p.qdisc_kinds == [] and p.iptables_loss_pct == 10.0


def test_everything_with_netem_goes_into_one_netem_leaf():
    p = plan(Shape(bw_bps=5_000_000, delay_ns=5_000_000, jitter_ns=1_000_000, loss_pct=0.5, queue_packets=100),
             WITH_NETEM)
    assert p.qdisc_kinds == ["htb", "netem"]
    assert p.leaf_args == ("delay", "5000us", "1000us", "loss", "0.5%", "limit", "100")
    assert p.iptables_loss_pct is None


@pytest.mark.parametrize("shape,feature", [
    (Shape(delay_ns=1_000_000), "delay"),
    (Shape(delay_ns=1_000_000, jitter_ns=10), "delay"),
])
def test_missing_netem_is_refused_with_the_fix(shape, feature):
    with pytest.raises(UnsupportedShaping, match=f"{feature}: needs the netem qdisc.*modprobe sch_netem"):
        plan(shape, NO_NETEM)


def test_allow_missing_leaves_out_and_records():
    p = plan(Shape(bw_bps=1_000_000, delay_ns=1_000_000, jitter_ns=10_000), NO_NETEM, allow_missing=True)
    assert p.dropped == ("delay", "jitter") and p.qdisc_kinds == ["htb"]


def test_bare_kernel_refuses_bandwidth_and_loss():
    with pytest.raises(UnsupportedShaping, match="bw: needs the htb qdisc"):
        plan(Shape(bw_bps=1_000_000), BARE)
    with pytest.raises(UnsupportedShaping, match="loss: needs the netem qdisc or the iptables `statistic`"):
        plan(Shape(loss_pct=1.0), BARE)


def test_htb_burst_covers_two_milliseconds_and_two_frames():
    args = dict(zip(htb_class_args(50_000_000)[::2], htb_class_args(50_000_000)[1::2]))
    assert args["rate"] == "50000000bit" and args["ceil"] == "50000000bit"
    assert int(args["burst"]) == 50_000_000 // 8 // 500
    small = dict(zip(htb_class_args(100_000)[::2], htb_class_args(100_000)[1::2]))
    assert int(small["burst"]) == 3200




def test_scenario_set_link_needing_netem_is_caught_before_the_run():
    from testbed.lab.capabilities import missing_capabilities
    from testbed.spec import load_spec_text

    spec = load_spec_text("name: t\nnodes: {a: {}, b: {}}\nlinks: [{endpoints: [a, b], bw: 10mbit}]\n"
                          "scenario:\n  - {at: 5s, action: set_link, link: a-b, delay: 20ms}\n")
    missing = missing_capabilities(spec, NO_NETEM)
    assert [(m.feature, "scenario[0] at 5s" in m.link) for m in missing] == [("delay", True)]
    assert missing_capabilities(spec, WITH_NETEM) == []


def test_as_installed_says_what_was_left_out():
    """`up --allow-missing` shows what was installed, not what was asked (issue 27.3)."""
    from testbed.links.shaping import as_installed

    asked = Shape(bw_bps=20_000_000, delay_ns=5_000_000, jitter_ns=1_000_000, queue_packets=30)
    dropped = plan(asked, NO_NETEM, allow_missing=True).dropped
    assert dropped == ("delay", "jitter")
    assert as_installed(asked, dropped) == "20mbit queue 30 (left out, this kernel cannot: delay 5ms, jitter 1ms)"
    assert as_installed(asked, ()) == asked.describe() == "20mbit 5ms jitter 1ms queue 30"
    assert as_installed(Shape(delay_ns=5_000_000), ("delay",)) == "unshaped (left out, this kernel cannot: delay 5ms)"
    lossy = Shape(loss_pct=1.5, queue_packets=10)
    assert as_installed(lossy, plan(lossy, BARE, allow_missing=True).dropped) == \
        "unshaped (left out, this kernel cannot: loss 1.5%, queue 10)"
