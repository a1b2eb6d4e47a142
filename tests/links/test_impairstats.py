"""The statistics that verify netem's impairments (testbed.links.impairstats), on synthetic probes drawn as
netem draws them (tests/links/netem_sim.py: iproute2's own tables, netem's order of decisions). Every draw is
seeded: each test's outcome is fixed. A right configuration passes; a wrong one (jitter 5 ms tested against
3 ms, loss 2 % against 1 %, ...) fails."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from testbed.links import impairstats as ist
from testbed.links.impairstats import DelayModel, GilbertElliottChain
from tests.links.netem_sim import Netem, probe

MS = 1_000_000


def delays_of(model: DelayModel, n: int, seed: int, base_ns: int = 0) -> np.ndarray:
    rnd = np.random.default_rng(seed).integers(0, 2 ** 32, n, dtype=np.uint64)
    return np.maximum(0.0, model.draw(rnd)) + base_ns


# -- the delay distribution -----------------------------------------------------------

def test_the_normal_table_is_iproute2s_standard_normal_quantiles():
    table = ist.dist_table("normal")
    assert len(table) == 4096
    z = table / ist.NETEM_DIST_SCALE
    assert abs(z.mean()) < 0.01 and z.std() == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("dist", ["normal", "pareto", "paretonormal", "uniform"])
def test_delays_drawn_as_netem_draws_pass_the_ks_test_and_the_spread(dist):
    model = DelayModel(50 * MS, 5 * MS, dist)
    d = delays_of(model, 2000, seed=1)
    ks = ist.check_distribution(d, model, alpha=0.01)
    assert ks.passed, ks.describe()
    spread = ist.check_spread(d, model, rel=0.15)
    assert spread.passed, spread.describe()
    assert ist.check_spread(d, model).passed
    assert ist.check_delay(d, model).passed


@pytest.mark.parametrize("dist", ["normal", "uniform"])
def test_jitter_5ms_tested_against_3ms_fails(dist):
    drawn = delays_of(DelayModel(50 * MS, 5 * MS, dist), 2000, seed=2)
    asked = DelayModel(50 * MS, 3 * MS, dist)
    assert not ist.check_distribution(drawn, asked, alpha=0.01).passed
    assert not ist.check_spread(drawn, asked, rel=0.15).passed
    assert not ist.check_spread(drawn, asked).passed


def test_a_normal_drawn_is_not_taken_for_a_pareto_nor_a_uniform():
    drawn = delays_of(DelayModel(50 * MS, 5 * MS, "normal"), 2000, seed=3)
    for other in ("pareto", "uniform"):
        assert not ist.check_distribution(drawn, DelayModel(50 * MS, 5 * MS, other), alpha=0.01).passed


def test_a_base_latency_is_taken_out_by_the_fitted_offset():
    model = DelayModel(10 * MS, 2 * MS, "normal")
    d = delays_of(model, 2000, seed=4, base_ns=700_000)  # a path's own 0.7 ms
    assert not ist.check_distribution(d, model).passed
    fitted = ist.check_distribution(d, model, offset_ns=ist.fitted_offset(d, model))
    assert fitted.passed and fitted.offset_ns == pytest.approx(700_000, abs=150_000)


def test_a_negative_draw_is_a_delay_of_zero():
    model = DelayModel(1 * MS, 2 * MS, "normal")
    assert model.cdf(np.array([-1.0]))[0] == 0.0
    assert model.cdf(np.array([0.0]))[0] == pytest.approx(stats.norm.cdf(-0.5), abs=0.01)
    assert ist.check_distribution(delays_of(model, 2000, seed=5), model).passed


@pytest.mark.parametrize("delay_ms", [10, 50])
def test_delay_p50_within_a_third_of_a_ms_and_two_percent(delay_ms):
    model = DelayModel(delay_ms * MS)
    d = delays_of(model, 2000, seed=6, base_ns=60_000) + np.random.default_rng(7).exponential(30_000, 2000)
    assert ist.check_delay(d, model).passed
    assert not ist.check_delay(d, DelayModel(delay_ms * MS * 1.1)).passed
    stats = ist.delay_stats(d)
    assert stats.p50_ns <= stats.p99_ns and stats.n == 2000


# -- loss ---------------------------------------------------------------------------------

@pytest.mark.parametrize("pct", [1.0, 10.0])
def test_loss_drawn_at_its_rate_passes_within_four_sigma(pct):
    recs = probe(Netem(DelayModel(0), loss_pct=pct), 5000, MS, seed=8)
    check = ist.check_loss(5000, recs, pct)
    assert check.passed, check.describe()


def test_loss_of_2pct_tested_against_1pct_fails():
    recs = probe(Netem(DelayModel(0), loss_pct=2.0), 5000, MS, seed=9)
    check = ist.check_loss(5000, recs, 1.0)
    assert not check.passed and "expected 1%" in check.describe()


def test_the_binomial_band_is_four_sigma():
    sd = ist.binomial_sigma_pct(1.0, 5000)
    assert sd == pytest.approx(100 * np.sqrt(0.01 * 0.99 / 5000))
    assert ist.within(1.0 + 3.99 * sd, 1.0, 5000) and not ist.within(1.0 + 4.01 * sd, 1.0, 5000)


def test_gilbert_elliott_mean_burst_is_one_over_r_and_its_loss_rate_p_over_p_plus_r():
    ge = GilbertElliottChain(p=0.01, r=0.3)
    assert ge.mean_burst() == pytest.approx(1 / 0.3)
    assert ge.loss_rate() == pytest.approx(0.01 / 0.31)
    recs = probe(Netem(DelayModel(0), gemodel=ge), 20000, MS, seed=10)
    assert ist.check_burst(20000, recs, ge).passed
    assert ist.check_burst(20000, recs, ge, rel=0.2).passed
    assert ist.check_loss(20000, recs, 100 * ge.loss_rate(), model=ge).passed
    wrong = GilbertElliottChain(p=0.01, r=0.6)  # bursts half as long
    assert not ist.check_burst(20000, recs, wrong).passed


def test_gilbert_elliott_with_loss_in_both_states_matches_the_chain():
    ge = GilbertElliottChain(p=0.02, r=0.25, loss_bad=0.7, loss_good=0.005)
    recs = probe(Netem(DelayModel(0), gemodel=ge), 50000, MS, seed=11)
    assert ist.check_burst(50000, recs, ge).passed
    assert ist.check_loss(50000, recs, 100 * ge.loss_rate(), model=ge).passed
    # the binomial band is too narrow for bursts: the chain's is wider
    assert ge.sigma_per_packet() > np.sqrt(ge.loss_rate() * (1 - ge.loss_rate()))


# -- reorder and duplicate ----------------------------------------------------------------

@pytest.mark.parametrize("pct,gap", [(25.0, 1), (25.0, 5), (5.0, 1)])
def test_reorder_rate_matches_netems_immediate_share(pct, gap):
    netem = Netem(DelayModel(10 * MS), reorder_pct=pct, gap=gap)
    recs = probe(netem, 5000, MS, seed=12)
    expected = ist.expected_reorder_pct(pct, gap, 10 * MS, MS)
    assert expected == pytest.approx(100 * pct / 100 / (1 + (gap - 1) * pct / 100), rel=0.01 if gap > 1 else 0.05)
    check = ist.check_reorder(recs, expected)
    assert check.passed, check.describe()
    assert not ist.check_reorder(recs, ist.expected_reorder_pct(pct / 2, gap, 10 * MS, MS)).passed


def test_reorder_with_a_gap_under_loss_needs_only_one_kept_packet_in_flight():
    """netem decides the loss before the reorder and counts only the kept packets toward the gap, so with a gap the
    nearest kept packet before one sent at once is always delayed: it overtakes unless all m before it are lost."""
    netem = Netem(DelayModel(10 * MS), loss_pct=50, reorder_pct=25, gap=2)
    recs = probe(netem, 20000, MS, seed=14)
    expected = ist.expected_reorder_pct(25, 2, 10 * MS, MS, loss_pct=50)
    check = ist.check_reorder(recs, expected)
    assert check.passed, check.describe()


def test_reorder_needs_the_delayed_ones_still_in_flight():
    assert ist.expected_reorder_pct(25, 1, 1 * MS, 2 * MS) == 0.0  # paced slower than the delay: nothing to overtake
    recs = probe(Netem(DelayModel(1 * MS), reorder_pct=25), 2000, 2 * MS, seed=13)
    assert ist.reordered(recs) == 0


def test_a_probe_in_order_has_no_reorder_and_no_duplicate():
    recs = [(i, 1000 + i, i) for i in range(100)]
    assert ist.reordered(recs) == 0 and ist.duplicated(recs) == (0, 100)
    assert ist.reordered([(1, 5, 0), (0, 6, 0), (2, 7, 0)]) == 1


@pytest.mark.parametrize("loss", [0.0, 5.0])
def test_duplicate_rate_passes_at_its_rate_and_fails_at_another(loss):
    netem = Netem(DelayModel(0), duplicate_pct=5.0, loss_pct=loss)
    recs = probe(netem, 5000, MS, seed=14)
    assert ist.check_duplicate(recs, ist.expected_duplicate_pct(5.0, loss)).passed
    assert not ist.check_duplicate(recs, ist.expected_duplicate_pct(1.0, loss)).passed
    # a duplicated datagram that loss hits is sent once: the loss measured is (1-d) l
    assert ist.check_loss(5000, recs, ist.expected_loss_pct(loss, duplicate_pct=5.0)).passed


def test_corruption_counts_as_loss_except_what_the_receiver_cannot_tell():
    share = ist.corrupt_dropped_share(106)
    assert 0.9 < share < 0.95
    assert ist.expected_loss_pct(0, corrupt_pct=10, corrupt_dropped=share) == pytest.approx(10 * share)


def test_every_result_describes_itself_on_one_line():
    model = DelayModel(10 * MS, 1 * MS, "normal")
    d = delays_of(model, 500, seed=15)
    recs = probe(Netem(model, loss_pct=1), 500, MS, seed=16)
    for result in (ist.delay_stats(d), ist.check_delay(d, model), ist.check_spread(d, model),
                   ist.check_distribution(d, model), ist.check_loss(500, recs, 1.0), ist.check_reorder(recs, 0),
                   ist.check_duplicate(recs, 0), ist.check_burst(500, recs, GilbertElliottChain(0.01, 0.5))):
        text = result.describe()
        assert text and "\n" not in text
