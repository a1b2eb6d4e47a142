"""Small hand-made runs for the Spark tests, with their right answers spelled out."""
from __future__ import annotations

import json
from pathlib import Path

from spark.testing import T0_NS, MovedFlow, SynthFlow, SynthRun, congestion_events, write_run

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
#: the scenario narrows r2-r4 to 40 kbit/s, below the ~52 kbit/s f1 and f2 offer it on the wire (onset)
NARROWED_AT_S = 3.0
NARROWED_BPS = 40_000
SCENARIO_APPLIED_NS = 2 * 1_000_000   # spark.testing writes a scenario event 2 ms after its time
#: r2 reports the congestion (detection) and restores the link once f1 has left
CONGESTION_S = (3.95, 4.45)
#: r1 pins f1 to r3 this long after the detection (link-state flooding + route debounce)
PIN_AFTER_S = 0.023
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
        link_bw_bps={0: 1_000_000, 1: 1_000_000, 2: 1_000_000, 3: 1_000_000},
        scenario_events=[{"at_s": NARROWED_AT_S, "event": "set_link", "link": 1, "node": None, "ok": True,
                          "bw_bps": NARROWED_BPS, "left_out": []}],
        router_events=congestion_events(["r1", "r2", "r3", "r4"], "r2", "r4", CONGESTION_S[0],
                                        [MovedFlow("flows/f1", 5, "r1", "pub-f1@127.0.0.1:40000")],
                                        old_next="r2", new_next="r3", cleared_s=CONGESTION_S[1],
                                        stay_pins={"r1": "r3", "r3": "r4"}, capacity_bps=NARROWED_BPS,
                                        data_bps=48_000, high_bps=25_000),
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


#: the event logs of a real diamond run (tests/spark/data/diamond-real/run.json says which)
REAL_EVENTS = Path(__file__).with_name("data") / "diamond-real"


def real_router_events() -> tuple:
    """(run.json, {log path relative to the run: [event records]}) of the real diamond run."""
    meta = json.loads((REAL_EVENTS / "run.json").read_text())
    logs = {}
    for path in sorted(REAL_EVENTS.rglob("events.jsonl")):
        logs[str(path.relative_to(REAL_EVENTS))] = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return meta, logs


def real_events_run(name: str = "diamond-real-events") -> SynthRun:
    """The first 12 s of the real diamond run: its traffic as topologies/diamond.yaml sets it (zpub from 5 s:
    pub1 data and realtime, 12 500 B every 50 ms each; bulk data_low 7 Mbit/s of 1200 B from 10 s), its links
    (20 Mbit/s, r2-r4 10 Mbit/s), and the moves its routers made: pub1 and bulk leave r1-r2-r4 for r1-r3-r4
    when r1 pinned them there (the real log's flow_pinned upstream_request). Write it with ``write_real_run``,
    which puts the real event logs in the results folder.
    """
    meta, logs = real_router_events()
    t0 = meta["traffic_start_ns"]
    pins = [e for e in logs["nodes/r1/events.jsonl"] if e["event"] == "flow_pinned"
            and e.get("reason") == "upstream_request"]
    moved_s = {e["key"]: (e["ts_ns"] - t0) / S for e in pins}
    upper, lower = ["r1", "r2", "r4"], ["r1", "r3", "r4"]
    return SynthRun(
        name=name, nodes=["r1", "r2", "r3", "r4"], links=[("r1", "r2"), ("r2", "r4"), ("r1", "r3"), ("r3", "r4")],
        link_bw_bps={0: 20_000_000, 1: 10_000_000, 2: 20_000_000, 3: 20_000_000},
        flows=[SynthFlow("zpub.pub1", 1, "r1", ["r4"], priority=5, rate_hz=20, size=12500, start_s=5, stop_s=12,
                         key="demo/example/pub1"),
               SynthFlow("zpub.realtime", 3, "r1", ["r4"], priority=1, rate_hz=20, size=12500, start_s=5, stop_s=12,
                         key="demo/example/realtime", congestion_control="block"),
               SynthFlow("bulk", 4, "r1", ["r4"], priority=6, rate_hz=7_000_000 / (1200 * 8), size=1200,
                         start_s=10, stop_s=12, key="flows/bulk")],
        paths={"zpub.pub1": [(0, upper), (moved_s["demo/example/pub1"], lower)],
               "zpub.realtime": [(0, upper)],
               "bulk": [(0, upper), (moved_s["flows/bulk"], lower)]},
        duration_s=12.0, batch_window_ns=1 * MS,
    )


def write_real_run(root: Path, name: str = "diamond-real-events") -> Path:
    """``real_events_run`` written, with the real run's event logs (times moved to the synthetic run clock)."""
    rd = write_run(real_events_run(name), root)
    meta, logs = real_router_events()
    shift = T0_NS - meta["traffic_start_ns"]
    for rel, records in logs.items():
        lines = [json.dumps({**r, "ts_ns": r["ts_ns"] + shift}) for r in records]
        (rd / rel).write_text("\n".join(lines) + "\n")
    return rd


#: clocked_run: r1 and r2 on two machines; f goes r1 -> r2, g r2 -> r1, each message taking CLOCKED_LATENCY_NS
CLOCKED_LATENCY_NS = 5 * MS               # router 0.1 ms + link 4.8 ms + router 0.1 ms
CLOCKED_DURATION_S = 10.0
#: the publisher of f (r1) runs 2 ms behind the controller, its subscriber (r2) 5 ms ahead
R1_OFFSET_NS, R2_OFFSET_NS = -2 * MS, 5 * MS
CLOCK_BOUND_NS = 200 * US


def clock_readings(offsets: dict, method: str = "exchange", bound_ns: int = CLOCK_BOUND_NS, after: bool = True,
                   duration_s: float = CLOCKED_DURATION_S) -> dict:
    """The manifest's ``clocks`` (runfolder.records.clocks_json) for nodes whose clocks are off by ``offsets``
    (node -> (offset at traffic start, offset at the end)), read at traffic start and at the end."""
    from runfolder.records import ClockReading, clocks_json
    from testbed.clocksync import same_host_reading

    def reading(node: str, offset: int, at_ns: int) -> ClockReading:
        if method == "same-host":
            return same_host_reading(node, at_ns)
        return ClockReading(node, method, offset, bound_ns, 2 * bound_ns if method == "exchange" else None, at_ns,
                            16 if method == "exchange" else 1, f"synthetic {method} reading")

    before = {n: reading(n, o[0], T0_NS) for n, o in offsets.items()}
    end = T0_NS + int(duration_s * S)
    return clocks_json(before, {n: reading(n, o[1], end) for n, o in offsets.items()} if after else None)


def clocked_run(name: str = "clocked", offsets: dict = None, clocks: str = "measured", after: bool = True,
                expect=("latency.p50 <= 6ms for flow f",)) -> SynthRun:
    """r1 - r2, f (r1 -> r2) and g (r2 -> r1) at 20/s for 10 s, every message CLOCKED_LATENCY_NS on its way.

    ``offsets``: node -> (clock offset at traffic start, at the end); the logs are written on those clocks.
    ``clocks``: "measured" (exchange readings of exactly those offsets, bound CLOCK_BOUND_NS), "same-host"
    (readings of a shared clock) or None (a manifest without clocks, as older runs have).
    """
    if offsets is None:  # one machine shares one clock; lab machines have their own
        offsets = {} if clocks == "same-host" else {"r1": (R1_OFFSET_NS,) * 2, "r2": (R2_OFFSET_NS,) * 2}
    manifest_clocks = None
    if clocks == "measured":
        manifest_clocks = clock_readings(offsets, after=after)
    elif clocks == "same-host":
        manifest_clocks = clock_readings({"r1": (0, 0), "r2": (0, 0)}, method="same-host")
    return SynthRun(
        name=name, nodes=["r1", "r2"], links=[("r1", "r2")],
        flows=[SynthFlow("f", 1, "r1", ["r2"], priority=5, rate_hz=20, size=200, stop_s=CLOCKED_DURATION_S),
               SynthFlow("g", 2, "r2", ["r1"], priority=1, rate_hz=20, size=200, stop_s=CLOCKED_DURATION_S)],
        paths={"f": [(0, ["r1", "r2"])], "g": [(0, ["r2", "r1"])]},
        link_delay_ns=CLOCKED_LATENCY_NS - 2 * 100 * US, duration_s=CLOCKED_DURATION_S,
        clock_offset_ns=offsets, clocks=manifest_clocks, expect=list(expect),
    )
