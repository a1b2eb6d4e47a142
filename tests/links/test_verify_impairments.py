"""Link verification of impairments (testbed.links.verify.probe_checks and what decides it runs), on probe
records drawn as netem draws them (tests/links/netem_sim.py; this kernel has no netem): what is asked
passes, a link that does something else misses, naming the direction and the figures. Seeded."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from testbed.links.impairstats import DelayModel, GilbertElliottChain
from testbed.links.verify import (
    Impairments, Tolerance, has_impairments, plan_directions, probe_checks,
)
from testbed.run.phases import VerifyPhase
from testbed.spec.resolve import FqCodel, GilbertElliott, Reorder, Shaping
from tests.links.netem_sim import Netem, probe
from tests.links.test_verify import _lab

MS = 1_000_000
T = Tolerance()
PATH = "a:eth1->b:eth1"


def checks_of(asked: Impairments, netem: Netem, *, one_clock: bool = True, packets: int = 2000, seed: int = 1,
              clock_offset_ns: int = 0):
    records = [(seq, arrival + clock_offset_ns, send) for seq, arrival, send in probe(netem, packets, MS, seed)]
    return {c.quantity: c for c in probe_checks(PATH, asked, packets, records, T, interval_ms=1.0,
                                                one_clock=one_clock)}


def test_delay_jitter_and_loss_as_asked_pass_one_way():
    asked = Impairments(delay_ns=20 * MS, jitter_ns=5 * MS, distribution="normal", loss_pct=1.0)
    checks = checks_of(asked, Netem(asked.delay, loss_pct=1.0))
    assert set(checks) == {"loss", "delay", "jitter", "distribution"}
    assert all(c.ok for c in checks.values()), [c.message for c in checks.values()]
    assert checks["delay"].detail["one_way"] and checks["delay"].measured == pytest.approx(20 * MS, abs=0.5 * MS)
    assert checks["loss"].detail["one_way"]["p99_ns"] > checks["loss"].detail["one_way"]["p50_ns"]


def test_jitter_of_5ms_where_3ms_is_asked_misses():
    asked = Impairments(delay_ns=20 * MS, jitter_ns=3 * MS, distribution="normal")
    checks = checks_of(asked, Netem(DelayModel(20 * MS, 5 * MS, "normal")), seed=2)
    assert checks["delay"].ok
    assert not checks["jitter"].ok and not checks["distribution"].ok
    assert checks["jitter"].message.startswith(f"{PATH} jitter: delays' sd 4.9")
    assert "asked jitter 3 ms normal (sd 3 ms, accepted 2.55 ms–3.45 ms)" in checks["jitter"].message
    assert "not netem's jitter 3 ms normal: KS D" in checks["distribution"].message


def test_a_delay_on_the_other_direction_misses_one_way():
    """One way catches what a round trip cannot: 20 ms asked here, installed on the reverse direction."""
    asked = Impairments(delay_ns=20 * MS)
    checks = checks_of(asked, Netem(DelayModel(0)), seed=3)
    assert not checks["delay"].ok and "one-way delay p50 0.0" in checks["delay"].message


def test_on_separate_clocks_no_one_way_delay_but_the_jitter_still_checked():
    asked = Impairments(delay_ns=20 * MS, jitter_ns=5 * MS, distribution="pareto")
    checks = checks_of(asked, Netem(asked.delay), one_clock=False, clock_offset_ns=-3_000_000_000, seed=4)
    assert "delay" not in checks and "one_way" not in checks["loss"].detail
    assert checks["jitter"].ok and checks["distribution"].ok  # a constant offset changes neither


def test_gilbert_elliott_loss_and_bursts():
    ge = GilbertElliottChain(p=0.02, r=0.4)
    asked = Impairments(gemodel=ge)
    checks = checks_of(asked, Netem(DelayModel(0), gemodel=ge), packets=5000, seed=5)
    assert checks["loss"].ok and checks["loss_burst"].ok, [c.message for c in checks.values()]
    assert checks["loss_burst"].expected == pytest.approx(2.5)
    independent = checks_of(asked, Netem(DelayModel(0), loss_pct=100 * ge.loss_rate()), packets=5000, seed=5)
    assert not independent["loss_burst"].ok  # the same loss rate without bursts: caught


def test_gilbert_elliott_loss_is_judged_by_the_chains_band_not_the_binomial():
    """Bursts make the loss count vary more than independent drops: 6.6% lost where the chain gives 4.8% is
    within its 4 sigma (2.3 pp over 5000), beyond the binomial's (1.2 pp)."""
    ge = GilbertElliottChain(p=0.02, r=0.4)
    lost = {seq for start in range(0, 5000, 61) for seq in (start, start + 1, start + 2, start + 3)}
    records = [(seq, 20 * MS + seq * MS, seq * MS) for seq in range(5000) if seq not in lost]
    assert len(lost) == 328
    loss = probe_checks(PATH, Impairments(gemodel=ge), 5000, records, T, interval_ms=1.0, one_clock=True)[0]
    assert loss.quantity == "loss" and loss.ok, loss.message
    assert not probe_checks(PATH, Impairments(loss_pct=100 * ge.loss_rate()), 5000, records, T, interval_ms=1.0,
                            one_clock=True)[0].ok


def test_reorder_and_duplicate_as_asked_pass_and_others_miss():
    asked = Impairments(delay_ns=10 * MS, reorder_pct=25.0, reorder_gap=5, duplicate_pct=5.0)
    checks = checks_of(asked, Netem(asked.delay, reorder_pct=25.0, gap=5, duplicate_pct=5.0), seed=6)
    assert checks["reorder"].ok and checks["duplicate"].ok and checks["loss"].ok
    other = checks_of(asked, Netem(asked.delay, reorder_pct=10.0, gap=5, duplicate_pct=1.0), seed=6)
    assert not other["reorder"].ok and not other["duplicate"].ok
    assert other["reorder"].message.startswith(f"{PATH} reorder ") and "asked 25% gap 5" in other["reorder"].message


def test_an_unimpaired_direction_keeps_the_loss_check_alone():
    checks = checks_of(Impairments(), Netem(DelayModel(0)), seed=7)
    assert set(checks) == {"loss"} and checks["loss"].ok and checks["loss"].expected == 0.0


def test_corruption_and_duplication_change_the_loss_expected():
    asked = Impairments(loss_pct=10.0, duplicate_pct=20.0, corrupt_pct=5.0)
    assert asked.expected_loss_pct(106) == pytest.approx(100 * (1 - (1 - 0.8 * 0.1) * (1 - 0.05 * (1 - 49 / 848))))


def test_impairments_switch_verification_on_by_default_on_every_backend():
    def ctx(backend: str, shape: Shaping, option=None):
        lab = _lab([("a", "b", shape, Shaping())])
        return SimpleNamespace(options=SimpleNamespace(verify_links=option), lab=lab,
                               session=SimpleNamespace(backend=SimpleNamespace(name=backend)))

    phase = VerifyPhase()
    for shape in (Shaping(delay_ns=MS), Shaping(loss_pct=1.0), Shaping(jitter_ns=MS)):
        assert has_impairments(_lab([("a", "b", Shaping(), shape)]))
        assert phase.wanted(ctx("mininet", shape)) and phase.wanted(ctx("docker", shape))
        assert not phase.wanted(ctx("mininet", shape, option=False))
    plain = Shaping(bw_bps=10_000_000, queue_packets=50)
    assert not has_impairments(_lab([("a", "b", plain, plain)]))
    assert not phase.wanted(ctx("mininet", plain)) and not phase.wanted(ctx("docker", plain))
    assert phase.wanted(ctx("ssh", plain)) and phase.wanted(ctx("mininet", plain, option=True))


def test_what_the_lab_left_out_is_not_an_impairment():
    shape = Shaping(bw_bps=10_000_000, delay_ns=5 * MS, jitter_ns=MS, jitter_distribution="normal")
    lab = _lab([("a", "b", shape, Shaping())], [{"link": 0, "direction": "a->b", "dropped": ["delay", "jitter"]}])
    ab, _ = plan_directions(lab)
    assert ab.asked == Shaping(bw_bps=10_000_000) and not ab.impairments.any


def test_impairments_read_from_a_shaping():
    shape = Shaping(delay_ns=10 * MS, jitter_ns=2 * MS, jitter_distribution="paretonormal",
                    loss_gemodel=GilbertElliott(1.0, 25.0), duplicate_pct=0.5, corrupt_pct=0.1,
                    reorder=Reorder(25.0, 5), qdisc=FqCodel())
    imp = Impairments.of(shape)
    assert imp.gemodel == GilbertElliottChain(0.01, 0.25) and imp.asked_loss_pct == pytest.approx(100 / 26)
    assert imp.delay == DelayModel(10 * MS, 2 * MS, "paretonormal") and imp.any
    assert (imp.reorder_pct, imp.reorder_gap) == (25.0, 5)
    lab = _lab([("a", "b", shape, Shaping())])
    ab, _ = plan_directions(lab)
    assert ab.result.asked == {
        "bw_bps": None, "loss_pct": None, "delay_ns": 10 * MS, "jitter_ns": 2 * MS, "jitter_distribution": "paretonormal",
        "loss_gemodel": {"p_pct": 1.0, "r_pct": 25.0, "loss_bad_pct": 100.0, "loss_good_pct": 0.0},
        "duplicate_pct": 0.5, "corrupt_pct": 0.1, "reorder": {"pct": 25.0, "gap": 5, "correlation_pct": None}}
    assert any("fq_codel" in n for n in ab.result.notes) and any("corrupt is verified as loss" in n
                                                                  for n in ab.result.notes)


def test_correlated_impairments_are_recorded_not_judged():
    asked = Impairments(delay_ns=20 * MS, jitter_ns=5 * MS, distribution="normal", delay_correlation_pct=25.0,
                        loss_pct=1.0, loss_correlation_pct=25.0)
    checks = checks_of(asked, Netem(DelayModel(20 * MS, 5 * MS, "normal"), loss_pct=5.0), seed=8)
    assert "jitter" not in checks and "distribution" not in checks
    assert checks["loss"].ok and checks["loss"].detail["judged"] is False and checks["loss"].measured > 3
    assert len(asked.unverified()) == 2


def test_loss_in_the_appliance_comes_after_the_rate_limit():
    shape = Shaping(bw_bps=10_000_000, loss_pct=5.0)
    entry = {"link": 0, "direction": "a->b", "dropped": [],
             "providers": {"bw": "host kernel", "loss": "appliance (user-mode Linux 6.1.0)"}}
    ab, _ = plan_directions(_lab([("a", "b", shape, Shaping())], [entry]))
    assert ab.loss_after_shaper
    entry["providers"]["loss"] = "host kernel"
    ab, _ = plan_directions(_lab([("a", "b", shape, Shaping())], [entry]))
    assert not ab.loss_after_shaper
