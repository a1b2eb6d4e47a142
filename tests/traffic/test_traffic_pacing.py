"""The tick schedule on a made-up clock: absolute tick times, exact long-run rate, skipping late ticks."""
from __future__ import annotations

import random

import pytest

from traffic.pacing import TickSchedule, Window, active_windows, merge_phases

S = 1_000_000_000
MS = 1_000_000


def serve_all(sched: TickSchedule, delays=lambda due: 0):
    """Serve every tick at ``due + delays(due)``; return the ticks served."""
    out = []
    while True:
        due = sched.next_due()
        if due is None:
            return out
        tick = sched.take(due + delays(due))
        assert tick is not None
        out.append(tick)


def test_zpub_defaults_send_one_message_per_tick_on_the_grid():
    # 2 Mbit/s, 50 ms ticks, 12500-byte messages (rate*tick/8): exactly one message per tick
    sched = TickSchedule(active_windows([[5 * S, 30 * S]]), 50 * MS, 2_000_000, 12500)
    ticks = serve_all(sched)
    assert len(ticks) == 500
    assert [t.due_ns for t in ticks] == [5 * S + k * 50 * MS for k in range(500)]
    assert {t.count for t in ticks} == {1}
    assert sum(t.skipped_ticks for t in ticks) == 0


def test_nothing_is_due_before_the_first_tick():
    sched = TickSchedule(active_windows([[S, 2 * S]]), 10 * MS, 1_000_000, 1000)
    assert sched.next_due() == S
    assert sched.take(S - 1) is None
    assert sched.take(S).due_ns == S


@pytest.mark.parametrize("rate,size,tick", [
    (500_000, 1024, 10 * MS), (7_000_000, 1200, 2 * MS), (100_000, 1024, 50 * MS), (3_333_333, 777, 7 * MS),
])
def test_long_run_rate_is_exact_within_one_message(rate, size, tick):
    duration = 10 * S
    sched = TickSchedule(active_windows([[0, duration]]), tick, rate, size)
    ticks = serve_all(sched)
    sent_bits = sum(t.count for t in ticks) * size * 8
    assert abs(sent_bits - rate * duration / S) <= size * 8
    # every prefix stays within one message of the ideal (no burst, no drift)
    total = 0
    for t in ticks:
        total += t.count
        ideal = rate * min(t.due_ns + tick, duration) / S / 8 / size
        assert ideal - 1 < total < ideal + 1 + 1e-9


def test_first_tick_of_a_window_always_sends():
    sched = TickSchedule(active_windows([[0, S]]), 10 * MS, 10_000, 1000)  # 12.5 bytes per tick
    ticks = serve_all(sched)
    assert ticks[0].count == 1
    assert sum(t.count for t in ticks) == 2  # ceil(10 kbit/s * 1 s / 8000 bits)


def test_late_ticks_are_skipped_not_caught_up():
    sched = TickSchedule(active_windows([[0, S]]), 10 * MS, 8_000_000, 1000, catch_up_ticks=0)
    assert sched.take(0).count == 10  # 10 messages per tick
    tick = sched.take(55 * MS)  # ticks 1..4 missed, tick 5 is the latest due
    assert tick.due_ns == 50 * MS
    assert tick.count == 10      # one tick's worth, not 50
    assert tick.skipped_ticks == 4 and tick.skipped_messages == 40
    assert sched.next_due() == 60 * MS  # the grid is unchanged


def test_catch_up_is_limited_to_one_tick_by_default():
    sched = TickSchedule(active_windows([[0, S]]), 10 * MS, 8_000_000, 1000)
    assert sched.take(0).count == 10
    one_late = sched.take(25 * MS)  # tick 1 missed, tick 2 due: both sent, nothing lost
    assert (one_late.due_ns, one_late.count, one_late.skipped_ticks, one_late.caught_up_ticks) == (20 * MS, 20, 0, 1)
    stall = sched.take(75 * MS)  # ticks 3..6 missed, 7 due: 6 and 7 sent, 3..5 skipped
    assert (stall.due_ns, stall.count, stall.skipped_ticks, stall.skipped_messages) == (70 * MS, 20, 3, 30)
    assert sched.next_due() == 80 * MS
    with pytest.raises(ValueError):
        TickSchedule(iter(()), 1, 1, 1, catch_up_ticks=-1)


def test_random_lateness_keeps_the_grid_and_accounts_for_every_message():
    rng = random.Random(7)
    tick_ns = 5 * MS
    sched = TickSchedule(active_windows([[0, 3 * S]]), tick_ns, 4_000_000, 1500, catch_up_ticks=0)
    expected = sched.messages_per_window(Window(0, 3 * S))
    ticks = serve_all(sched, delays=lambda due: int(rng.expovariate(1 / (3 * MS))))
    assert all(t.due_ns % tick_ns == 0 for t in ticks)
    assert sum(t.count + t.skipped_messages for t in ticks) == expected
    assert sum(t.skipped_ticks for t in ticks) > 0  # 3 ms mean lateness on 5 ms ticks skips some
    dues = [t.due_ns for t in ticks]
    assert dues == sorted(set(dues))
    # with one tick of catch-up, the same lateness loses fewer messages, never sends > 2 ticks at once
    rng = random.Random(7)
    sched = TickSchedule(active_windows([[0, 3 * S]]), tick_ns, 4_000_000, 1500)
    ticks1 = serve_all(sched, delays=lambda due: int(rng.expovariate(1 / (3 * MS))))
    assert sum(t.count + t.skipped_messages for t in ticks1) == expected
    assert sum(t.skipped_messages for t in ticks1) < sum(t.skipped_messages for t in ticks)
    assert max(t.count for t in ticks1) <= 2 * max(sched.cumulative(1, S), 2)


def test_burst_windows_and_end_clipping():
    windows = list(active_windows([[S, 10 * S]], end_ns=6 * S, on_ns=S, off_ns=2 * S // 2))
    assert windows == [Window(S, 2 * S), Window(3 * S, 4 * S), Window(5 * S, 6 * S)]
    sched = TickSchedule(iter(windows), 100 * MS, 80_000, 1000)  # one message per tick
    ticks = serve_all(sched)
    assert len(ticks) == 30
    assert ticks[10].due_ns == 3 * S


def test_a_window_entirely_in_the_past_is_skipped_when_a_later_one_is_due():
    sched = TickSchedule(active_windows([[0, 10 * S]], on_ns=S, off_ns=S), 100 * MS, 80_000, 1000,
                         catch_up_ticks=0)
    assert sched.take(0).due_ns == 0
    tick = sched.take(2 * S + 150 * MS)  # the rest of window [0,1s) and ticks 0 of [2s,3s) are late
    assert tick.due_ns == 2 * S + 100 * MS
    assert tick.skipped_ticks == 9 + 1
    # late past a window's end with no later window due: its last tick is sent
    tick = sched.take(3 * S + 500 * MS)
    assert tick.due_ns == 2 * S + 900 * MS and tick.skipped_ticks == 7


def test_phases_are_merged_and_empty_ones_dropped():
    assert merge_phases([[5, 9], [0, 3], [2, 4], [7, 7], [9, 12]]) == [(0, 4), (5, 12)]
    assert list(active_windows([[0, 5 * S]], end_ns=0)) == []
    with pytest.raises(ValueError):
        list(active_windows([[0, S]], on_ns=S))


def test_bad_arguments_are_refused():
    for args in ((0, 1, 1), (1, 0, 1), (1, 1, 0)):
        with pytest.raises(ValueError):
            TickSchedule(iter(()), *args)
