"""Small hand-made runs for the Spark tests, with their right answers spelled out."""
from __future__ import annotations

from spark.testing import T0_NS, SynthFlow, SynthRun

MS = 1_000_000
US = 1_000
S = 1_000_000_000

#: every message crosses 2 links: router delay + 2 * (link delay + router delay)
LATENCY_NS = 100 * US + 2 * (1 * MS + 100 * US)   # 2.3 ms
F1_LOST_AT_R2 = 20        # seen r1>r2, then gone
F1_NEVER_SEEN = 39        # lost inside r1, just before the reroute
F2_DUPLICATE = 5
F2_REORDERED = (10, 11)   # 11 arrives before 10
REROUTE_AT_S = 4.0
CONGESTION_S = (3.5, 6.0)
# r2's drop counter at each scrape (second 0..8), with a restart (reset) after second 4
R2_DROPS = [0, 0, 0, 5, 10, 2, 4, 4, 4]
R2_DROPS_INCREASE = 5 + 5 + 2 + 2


def small_run(name: str = "small") -> SynthRun:
    """Diamond r1-r2-r4 / r1-r3-r4; f1 (data, 10/s) moves to r1-r3-r4 at 4 s; f2 (realtime, 20/s) stays.

    One f1 message lost at r2 and one never seen, one f2 duplicate, one f2 pair reordered, one TCP
    segment retransmitted on r1-r2, one pair of segments reordered on r2-r4.
    """
    upper, lower = ["r1", "r2", "r4"], ["r1", "r3", "r4"]
    labels = {"peer": "r4", "peer_kind": "router", "priority": "5", "priority_name": "data"}
    return SynthRun(
        name=name,
        nodes=["r1", "r2", "r3", "r4"],
        links=[("r1", "r2"), ("r2", "r4"), ("r1", "r3"), ("r3", "r4")],
        flows=[SynthFlow("f1", 1, "r1", ["r4"], priority=5, rate_hz=10, size=300, start_s=0, stop_s=8),
               SynthFlow("f2", 2, "r1", ["r4"], priority=1, rate_hz=20, size=120, start_s=0, stop_s=8)],
        paths={"f1": [(0, upper), (REROUTE_AT_S, lower)], "f2": [(0, upper)]},
        lost={("f1", F1_LOST_AT_R2): 1, ("f1", F1_NEVER_SEEN): 0},
        duplicates={("f2", F2_DUPLICATE)},
        reordered=[(("f2", F2_REORDERED[0]), ("f2", F2_REORDERED[1]))],
        retransmit={(0, "ab", 10)},
        swap={(1, "ab", 20)},
        scenario_events=[{"at_s": 3.0, "event": "set_link", "link": 1, "bw_bps": 1_000_000}],
        router_events={"r2": [{"at_s": CONGESTION_S[0], "event": "congestion_detected", "neighbour": "r4"},
                              {"at_s": CONGESTION_S[1], "event": "congestion_cleared", "neighbour": "r4"}],
                       "r1": [{"at_s": 3.9, "event": "trees_recomputed", "duration_ns": 1000}]},
        metric_samples={"r2": [(float(s), "router_queue_dropped_messages_total", labels, v)
                               for s, v in enumerate(R2_DROPS)]},
        duration_s=8.0,
        expect=["latency.p99 <= 10ms for priority realtime", "loss <= 5% for flow f1"],
    )


def send_ns(rate_hz: float, seq: int) -> int:
    return T0_NS + int(seq * S / rate_hz)


#: y_run: f's message 7 is lost on the branch to r5 only (r2 never forwards it there), message 12 inside r1
Y_LOST_ON_R5_BRANCH = 7
Y_LOST_EVERYWHERE = 12


def y_run(name: str = "y") -> SynthRun:
    """r1 publishes f to r4 and r5 through r2 (a tree: r1-r2, then r2-r4 and r2-r5).

    Message 7 reaches r4 but is dropped by r2 on the branch to r5: on its way to r5 it was last seen
    arriving at r2, although the r4 branch carried it later and further.
    """
    return SynthRun(
        name=name,
        nodes=["r1", "r2", "r4", "r5"],
        links=[("r1", "r2"), ("r2", "r4"), ("r2", "r5")],
        flows=[SynthFlow("f", 1, "r1", ["r4", "r5"], priority=5, rate_hz=10, size=300, start_s=0, stop_s=3)],
        paths={"f": [(0, [["r1", "r2", "r4"], ["r1", "r2", "r5"]])]},
        lost_on_branch={("f", Y_LOST_ON_R5_BRANCH, "r5"): 1},
        lost={("f", Y_LOST_EVERYWHERE): 0},
        duration_s=3.0,
    )


#: jittery_run: every other message of f is 2 ms late during the first JITTERY_S seconds, none after
JITTERY_S = 2.5
JITTER_STEP_NS = 2 * MS


def jittery_run(name: str = "jittery") -> SynthRun:
    """r1 -> r2, f at 20/s for 5 s: while t < 2.5 s every odd message arrives 2 ms late, then none does.

    RFC 3550's estimator rises towards 2 ms in the first half and decays to ~0.08 ms by the end: its final
    value describes only the calm end of the run.
    """
    flow = SynthFlow("f", 1, "r1", ["r2"], priority=5, rate_hz=20, size=200, start_s=0, stop_s=5)
    return SynthRun(
        name=name, nodes=["r1", "r2"], links=[("r1", "r2")], flows=[flow], paths={"f": [(0, ["r1", "r2"])]},
        recv_delay={("f", seq): JITTER_STEP_NS for seq in range(int(JITTERY_S * 20)) if seq % 2},
        duration_s=5.0, expect=["jitter <= 1ms for flow f"],
    )
