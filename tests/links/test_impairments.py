"""A direction's impairments and queue discipline as tc arguments (testbed.links.impairments), where the host
kernel provides them (testbed.kernel, testbed.links.shaping.plan), and that real `tc` accepts every argument list."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from testbed.kernel import FEATURE_HINTS, QDISC_PROBES, KernelCapabilities
from testbed.links.impairments import FEATURE_QDISC, netem_args, queue_args, tfifo_limit
from testbed.links.shaping import UnsupportedShaping, as_installed, plan
from testbed.spec.resolve import FEATURES, Cake, FqCodel, GilbertElliott, Pie, Red, Reorder, Shaping

MS = 1_000_000

#: (shape, netem's arguments)
NETEM = [
    (Shaping(bw_bps=10_000_000, queue_packets=50), []),
    (Shaping(delay_ns=20 * MS), ["delay", "20000us", "limit", "33334"]),  # no rate: 10 Gbit/s
    (Shaping(bw_bps=10_000_000, delay_ns=20 * MS, jitter_ns=5 * MS, jitter_distribution="normal",
             delay_correlation_pct=25.0),
     ["delay", "20000us", "5000us", "25%", "distribution", "normal", "limit", "1000"]),
    (Shaping(delay_ns=10 * MS, jitter_ns=2 * MS, jitter_distribution="uniform"),  # netem's own: no table
     ["delay", "10000us", "2000us", "limit", str(tfifo_limit(Shaping(delay_ns=10 * MS, jitter_ns=2 * MS)))]),
    (Shaping(bw_bps=10_000_000, loss_gemodel=GilbertElliott(1.0, 25.0)),
     ["loss", "gemodel", "1%", "25%", "100%", "0%", "limit", "1000"]),
    (Shaping(bw_bps=10_000_000, loss_pct=1.0, loss_correlation_pct=25.0),
     ["loss", "random", "1%", "25%", "limit", "1000"]),
    (Shaping(bw_bps=10_000_000, loss_pct=0.5), ["loss", "0.5%", "limit", "1000"]),
    (Shaping(bw_bps=100_000_000, delay_ns=5 * MS, duplicate_pct=0.5, corrupt_pct=0.1, reorder=Reorder(25.0, 5, 50.0)),
     ["delay", "5000us", "duplicate", "0.5%", "reorder", "25%", "50%", "gap", "5", "corrupt", "0.1%", "limit", "1000"]),
    (Shaping(bw_bps=1_000_000_000, delay_ns=50 * MS, reorder=Reorder(10.0)),
     ["delay", "50000us", "reorder", "10%", "limit", "8334"]),
]


@pytest.mark.parametrize("shape,args", NETEM, ids=[s.describe() for s, _ in NETEM])
def test_netem_args(shape, args):
    assert netem_args(shape) == args


def test_tfifo_limit_holds_the_delay_at_the_rate():
    # 1 Gbit/s for 50 ms is 4167 full frames; twice that
    assert tfifo_limit(Shaping(bw_bps=10**9, delay_ns=50 * MS)) == 8334
    # without a rate: 10 Gbit/s; a jitter reaches four times its value beyond the delay
    assert tfifo_limit(Shaping(delay_ns=10 * MS, jitter_ns=5 * MS)) == 50_000
    assert tfifo_limit(Shaping(bw_bps=1_000_000, delay_ns=1 * MS)) == 1000


#: (shape, the queue qdisc's kind and arguments)
QUEUES = [
    (Shaping(), ("pfifo", [])),
    (Shaping(queue_packets=100), ("pfifo", ["limit", "100"])),
    (Shaping(queue_packets=100, qdisc=FqCodel()), ("fq_codel", ["limit", "100"])),
    (Shaping(queue_packets=100, qdisc=FqCodel(5 * MS, 100 * MS, 1000, 1024, True)),
     ("fq_codel", ["limit", "1000", "flows", "1024", "target", "5000us", "interval", "100000us", "ecn"])),
    (Shaping(qdisc=FqCodel(ecn=False)), ("fq_codel", ["noecn"])),
    (Shaping(qdisc=Cake()), ("cake", [])),
    (Shaping(qdisc=Cake(100 * MS)), ("cake", ["rtt", "100000us"])),
    (Shaping(bw_bps=10_000_000, qdisc=Red(30_000, 90_000, 2.0, 55, 1_000_000, True)),
     ("red", ["limit", "1000000", "min", "30000", "max", "90000", "avpkt", "1000", "burst", "55",
              "probability", "0.02", "bandwidth", "10000000bit", "ecn"])),
    (Shaping(queue_packets=200, qdisc=Red()), ("red", ["limit", "300000", "avpkt", "1000"])),
    (Shaping(qdisc=Red(min_bytes=600_000)), ("red", ["limit", "3600000", "min", "600000", "avpkt", "1000"])),
    (Shaping(queue_packets=500, qdisc=Pie(15 * MS, ecn=True)), ("pie", ["limit", "500", "target", "15000us", "ecn"])),
    (Shaping(qdisc=Pie(limit_packets=50, ecn=False)), ("pie", ["limit", "50", "noecn"])),
]


@pytest.mark.parametrize("shape,expected", QUEUES, ids=[s.describe() for s, _ in QUEUES])
def test_queue_args(shape, expected):
    assert queue_args(shape) == expected


def _tc_accepts(kind_and_args: list[str]) -> tuple[bool, str]:
    """Whether `tc` parses ``kind_and_args`` (in a scratch network namespace, on its loopback): accepted when the
    kernel installs it or only the kernel refuses it (a qdisc it lacks)."""
    result = subprocess.run(["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root", *kind_and_args],
                            capture_output=True, text=True, timeout=30)
    accepted = result.returncode == 0 or "Specified qdisc kind is unknown" in result.stderr
    return accepted, result.stderr


needs_tc = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("tc") or not shutil.which("unshare"),
                              reason="needs root, tc and unshare (a scratch network namespace)")


@needs_tc
def test_real_tc_accepts_every_argument_list():
    lists = [["netem", *netem_args(s)] for s, args in NETEM if args]
    lists += [[kind, *args] for kind, args in (queue_args(s) for s, _ in QUEUES)]
    lists += [args for args in QDISC_PROBES.values()]
    for args in lists:
        accepted, stderr = _tc_accepts(args)
        assert accepted, f"tc refuses {' '.join(args)}: {stderr}"


@needs_tc
def test_the_tc_check_refuses_what_tc_refuses():
    """The check above can fail: a distribution tc has no table for, and a word netem does not know."""
    assert not _tc_accepts(["netem", "delay", "10ms", "2ms", "distribution", "uniform"])[0]
    assert not _tc_accepts(["netem", "delay", "10ms", "bogus"])[0]


def test_every_feature_has_a_qdisc_and_a_hint():
    assert set(FEATURE_QDISC) == set(FEATURES) and set(FEATURE_HINTS) == set(FEATURES)
    assert set(FEATURE_QDISC.values()) <= set(QDISC_PROBES)


def _caps(*kinds: str, iptables: bool = True) -> KernelCapabilities:
    return KernelCapabilities({kind: kind in kinds for kind in QDISC_PROBES}, iptables)


THIS_HOST = _caps("htb", "tbf", "pfifo", "bfifo")  # no netem, no AQM qdisc (this machine's kernel)
EVERYTHING = _caps(*QDISC_PROBES)


def test_supports_answers_for_every_feature_through_its_qdisc():
    assert {f for f in FEATURES if THIS_HOST.supports(f)} == {"bw", "loss", "queue"}  # loss through iptables
    assert all(EVERYTHING.supports(f) for f in FEATURES)
    assert _caps("fq_codel", "red").supports("fq_codel") and not _caps("fq_codel").supports("red")
    assert not _caps(iptables=False).supports("loss") and _caps("netem", iptables=False).supports("loss")
    with pytest.raises(ValueError, match="unknown shaping feature"):
        THIS_HOST.supports("teleport")


def test_plan_puts_every_netem_feature_into_one_netem_leaf():
    shape = Shaping(bw_bps=10_000_000, delay_ns=20 * MS, jitter_ns=5 * MS, jitter_distribution="pareto",
                    loss_gemodel=GilbertElliott(1.0, 25.0), reorder=Reorder(25.0, 5), queue_packets=100)
    p = plan(shape, EVERYTHING)
    assert p.qdisc_kinds == ["htb", "netem"] and p.iptables_loss_pct is None
    assert p.leaf_args == ("delay", "20000us", "5000us", "distribution", "pareto", "loss", "gemodel", "1%", "25%",
                           "100%", "0%", "reorder", "25%", "gap", "5", "limit", "100")  # the queue: netem's limit


def test_plan_uses_the_queue_discipline_as_the_leaf():
    p = plan(Shaping(bw_bps=10_000_000, queue_packets=100, qdisc=FqCodel(5 * MS)), EVERYTHING)
    assert p.qdisc_kinds == ["htb", "fq_codel"] and p.leaf_args == ("limit", "100", "target", "5000us")
    lossy = plan(Shaping(loss_pct=1.0, qdisc=Pie()), _caps("htb", "pie"))
    assert lossy.qdisc_kinds == ["pie"] and lossy.iptables_loss_pct == 1.0  # plain loss stays iptables'


def test_plan_refuses_what_the_host_lacks_naming_the_feature():
    with pytest.raises(UnsupportedShaping, match="fq_codel: needs the fq_codel qdisc"):
        plan(Shaping(qdisc=FqCodel()), THIS_HOST)
    with pytest.raises(UnsupportedShaping, match="loss_model: needs the netem qdisc"):
        plan(Shaping(loss_pct=1.0, loss_correlation_pct=5.0), THIS_HOST)
    with pytest.raises(UnsupportedShaping, match="fq_codel with delay: on the host kernel a direction has one leaf"):
        plan(Shaping(delay_ns=MS, qdisc=FqCodel()), EVERYTHING)


def test_allow_missing_leaves_out_the_new_features_and_says_so():
    shape = Shaping(bw_bps=20_000_000, queue_packets=30, duplicate_pct=1.0, qdisc=Cake(50 * MS),
                    loss_gemodel=GilbertElliott(1.0, 25.0))
    p = plan(shape, THIS_HOST, allow_missing=True)
    assert p.dropped == ("loss_model", "duplicate", "cake") and p.qdisc_kinds == ["htb", "pfifo"]
    assert as_installed(shape, p.dropped) == ("20mbit queue 30 (left out, this kernel cannot: loss gemodel p 1% r 25%, "
                                              "duplicate 1%, cake rtt 50ms)")


def test_testbed_link_reads_the_new_keys_as_a_set_link_event():
    from testbed.links.change import LinkInputError, parse_change
    from testbed.links.control import apply_set_link

    event = parse_change("a-b", "a", {"loss": "{model: gilbert-elliott, p: 1%, r: 25%}", "qdisc": "fq_codel",
                                      "reorder": "{rate: 25%, gap: 5}", "duplicate": "1%", "corrupt": None})
    asked = {}

    class Links:  # LinkControl's set_shape, recording what it is asked
        def set_shape(self, index, *, direction, **fields):
            asked.update(fields, index=index, direction=direction)
            return []

    _, changes, _ = apply_set_link(Links(), 0, event)
    assert changes == {"loss_pct": None, "loss_correlation_pct": None, "loss_gemodel": GilbertElliott(1.0, 25.0),
                       "qdisc": FqCodel(), "reorder": Reorder(25.0, 5), "duplicate_pct": 1.0}  # a model replaces a rate
    assert asked == {**changes, "index": 0, "direction": "a"}
    with pytest.raises(LinkInputError, match="--qdisc .*did you mean 'fq_codel'"):
        parse_change("a-b", None, {"qdisc": "codel"})
    with pytest.raises(LinkInputError, match="--loss .*must be above 0%"):
        parse_change("a-b", None, {"loss": "{model: gilbert-elliott, p: 0%, r: 5%}"})
