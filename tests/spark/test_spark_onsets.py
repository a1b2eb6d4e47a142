"""Overloads of a link direction (spark.onsets, no Spark): what a link carries, computed for many intervals at
once, and an overload whose onset, offered load and end follow from the arrivals and the capacity."""
from __future__ import annotations

import random

import numpy as np

from spark.onsets import LinkCapacity, find_overloads

S = 1_000_000_000
MS = 1_000_000


def test_carried_between_equals_carried_to_the_bit():
    rng = random.Random(7)
    t0 = 1_764_000_000 * S  # epoch nanoseconds, as the runs' times are
    for _ in range(200):
        steps = [(0, rng.choice([None, 1e6, 8e6, 123_456.7]))]
        for at in sorted(rng.sample(range(1, 10 * S), rng.randint(0, 4))):
            steps.append((t0 + at, rng.choice([None, 5e5, 1e7, 3.3e6])))
        cap = LinkCapacity(steps)
        a = np.array([t0 + rng.randint(-S, 11 * S) for _ in range(50)], dtype=np.int64)
        b = a + np.array([rng.randint(0, 3 * S) for _ in range(50)], dtype=np.int64)
        got = cap.carried_between(a, b)
        want = [cap.carried(x, y) for x, y in zip(a, b)]
        assert got.tolist() == want  # not approximately: the same float (inf for an unshaped stretch)


def test_an_overload_from_its_arrivals():
    """1 MB/s link; 1000 B every 0.5 ms (2 MB/s) from 1.0 s to 2.0 s, then every 2 ms (0.5 MB/s) to 3.0 s.

    The queue is busy from the first arrival; the first window of 100 ms (arrival excluded, later one included)
    holds 200 arrivals (200 kB against 100 kB carried): the onset is the window's first arrival (1.0005 s), its
    load 16 Mbit/s. Windows stay overloaded while (100 ms - x) * 2 MB/s + x * 0.5 MB/s > 100 kB, x past 2.0 s:
    the last overloaded window ends before 2.0667 s."""
    fast = [S + k * MS // 2 for k in range(2000)]
    slow = [2 * S + k * 2 * MS for k in range(500)]
    ts = np.array(fast + slow, dtype=np.int64)
    offered = {"link": 1, "src_node": "r2", "dst_node": "r4", "arrival_ns": ts, "wire_bytes": np.full(len(ts), 1000.0)}
    import pandas as pd

    (over,) = find_overloads(pd.DataFrame(offered), {(1, "r2", "r4"): LinkCapacity([(0, 8e6)])})
    assert (over.link, over.src_node, over.dst_node, over.cause) == (1, "r2", "r4", "load")
    assert over.busy_start_ns == S and over.onset_ns == S + MS // 2
    assert over.offered_bps == 200 * 1000 * 8e9 / (100 * MS)
    assert over.capacity_bps == 8e6
    assert 2 * S + 64 * MS <= over.end_ns < 2 * S + 66_700_000
    assert over.peak_offered_bps >= over.offered_bps
