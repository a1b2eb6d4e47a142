"""Congestion-aware QoS routing proven end to end on the diamond, with `testbed run` and the analysis:
the diamond's congestion story with congestion-awareness on and off, side by side. Reroutes are timed from
the onset the analysis finds (the bulk flow overloading r2-r4), through r2's detection, to the first message
on the new path (docs/reports.md).

The story is the short diamond's (tests/conftest.py short_diamond, the smoke suite's case: topologies/diamond.yaml
in 18 s), read from each run's own topology (:func:`run_story`): realtime every 50 ms from 1 s, the bulk flow
over r2-r4 from 4 s to 14 s (r2-r4 narrowed from 8 s), pub1 until 12 s and pub2 after. The checks are
derived from those instants, so they hold whatever length the story is told in."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from router.config import RouterConfig
from router.congestion import SEGMENT_HEADERS, SEGMENT_PAYLOAD
from spark.compare import compare_command
from runfolder.units import parse_duration
from tests.conftest import needs_mininet

pytestmark = [needs_mininet, pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server")]

DATA_FLOWS = ("zpub.pub1", "bulk")


@pytest.fixture(scope="module")
def runs(short_diamond_run, short_diamond_aware_off) -> dict:
    """The session's short diamond runs, each analysed as `testbed run` does: congestion-awareness on (the
    topology's own setting, tests/conftest.py short_diamond_run) and off (tests/run/conftest.py
    short_diamond_aware_off): their results folders and summaries, read only."""
    return {name: (run.run_dir, json.loads((run.run_dir / "report" / "summary.json").read_text()))
            for name, run in (("on", short_diamond_run), ("off", short_diamond_aware_off))}


@dataclass(frozen=True)
class Story:
    """The instants of a run's story on its run clock, in s, as its topology gave them: realtime sends a message
    every ``tick_s`` from ``realtime_start_s`` to the run's end (``duration_s``); the bulk flow overloads r2-r4
    from ``bulk_start_s`` to ``bulk_stop_s``."""

    realtime_start_s: float
    tick_s: float
    bulk_start_s: float
    bulk_stop_s: float
    duration_s: float

    def realtime_sent(self, start_s: float, stop_s: float) -> int:
        """How many realtime messages the publisher sends in [start_s, stop_s)."""
        start, stop = max(start_s, self.realtime_start_s), min(stop_s, self.duration_s)
        return max(0, round((stop - start) / self.tick_s))


def run_story(run_dir: Path) -> Story:
    spec = json.loads((run_dir / "manifest.json").read_text())["spec"]["spec"]
    zpub = next(t for t in spec["traffic"] if t["profile"] == "zpub")
    bulk = next(t for t in spec["traffic"] if t["name"] == "bulk")
    story = Story(*(parse_duration(v) / 1e9 for v in (zpub["start_delay"], zpub["tick"], bulk["start"], bulk["stop"],
                                                      spec["duration"])))
    # the story the checks are made for: an uncongested start, the congestion, and time after it
    assert story.realtime_start_s < story.bulk_start_s < story.bulk_stop_s < story.duration_s, story
    return story


def monitor_interval_ns(run_dir: Path) -> int:
    """How often r2, at the bottleneck, checks its links for congestion (the run's router settings)."""
    spec = json.loads((run_dir / "manifest.json").read_text())["spec"]
    return parse_duration(spec["router_settings"]["r2"]["monitor_interval"])


def flow(summary: dict, name: str) -> dict:
    return next(f for f in summary["flows"] if f["flow"] == name)


def test_data_flows_leave_the_congested_link_within_two_monitor_intervals(runs):
    run_dir, s = runs["on"]
    interval_ns = monitor_interval_ns(run_dir)
    bulk_start_ns = s["t0_ns"] + int(run_story(run_dir).bulk_start_s * 1e9)  # 4 s in the short story
    moved = {r["flow"]: r for r in s["reroutes"]}
    for name in DATA_FLOWS:
        assert name in moved, f"{name} never left the congested path"
        r = moved[name]
        assert (r["old_path"], r["new_path"]) == ("r1>r2>r4", "r1>r3>r4")
        # the cause the analysis found: r2-r4 overloaded when the bulk flow's messages reached r2
        assert (r["cause"], r["cause_link"]) == ("overload", "r2>r4"), r
        assert bulk_start_ns <= r["onset_ns"] <= bulk_start_ns + 10**8, \
            f"{name}: onset {(r['onset_ns'] - bulk_start_ns) / 1e9:.3f} s after the bulk flow started"
        # onset -> r2's congestion_detected -> first message on r1-r3-r4, in that order
        assert (r["detection_node"], r["detection_event"]) == ("r2", "congestion_detected"), r
        assert r["onset_ns"] < r["detection_ns"] < r["time_ns"], r
        assert r["reroute_time_ns"] == r["detection_time_ns"] + r["reaction_time_ns"]
        # the monitor needs at most two intervals to see a whole interval of overload; r1 then pins the flow a
        # debounce later, and its next message (every 50 ms at most) takes the new path
        assert 0 < r["detection_time_ns"] <= 2 * interval_ns, f"{name}: {r['detection_time_ns'] / 1e6:.0f} ms"
        assert 0 < r["reaction_time_ns"] <= 10**8, f"{name}: {r['reaction_time_ns'] / 1e6:.0f} ms"
        assert r["reroute_time_ns"] <= 2 * interval_ns + 10**8, \
            f"{name} moved {r['reroute_time_ns'] / 1e9:.3f} s after the onset"
    assert s["episodes"], "the routers reported the congestion"


def realtime_latencies_ms(run_dir: Path, start_s: float, stop_s: float) -> list[tuple[float, float]]:
    """(send time on the run clock in s, latency in ms) of the realtime messages sent in [start_s, stop_s)."""
    t0 = json.loads((run_dir / "manifest.json").read_text())["traffic_start_ns"]
    rows = (run_dir / "traffic" / "recv-zpub.realtime-r4.csv").read_text().splitlines()[1:]
    out = []
    for line in rows:
        seq, send_ns, recv_ns, size = map(int, line.split(","))
        if t0 + start_s * 1e9 <= send_ns < t0 + stop_s * 1e9:
            out.append(((send_ns - t0) / 1e9, (recv_ns - send_ns) / 1e6))
    return out


def percentile(values: list[float], share: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(share * len(values)))]


def p99(values: list[float]) -> float:
    return percentile(values, 0.99)


def p90(values: list[float]) -> float:
    return percentile(values, 0.90)


def egress(run_dir: Path, src: str, dst: str) -> dict:
    """The shaping of the direction src -> dst (the manifest's links: bw_bps, queue_packets)."""
    links = json.loads((run_dir / "manifest.json").read_text())["spec"]["links"]
    link = next(lk for lk in links if {lk["a"]["node"], lk["b"]["node"]} == {src, dst})
    return (link["a"] if link["a"]["node"] == src else link["b"])["egress"]


def queued_ahead_ns(run_dir: Path) -> int:
    """How long what r2 can hold for r4 ahead of a message takes to leave at r2-r4's rate: a full tc queue
    of full-size frames, and r2's unsent socket bytes (the notsent low-water mark, router/config.py, and
    one batch written above it). With the diamond's 10 Mbit/s, 30 frames and 64 KiB batches: 115 ms."""
    r2_r4 = egress(run_dir, "r2", "r4")
    batch = json.loads((run_dir / "manifest.json").read_text())["spec"]["router_settings"]["r2"]["batch_bytes"]
    held = r2_r4["queue_packets"] * (SEGMENT_PAYLOAD + SEGMENT_HEADERS) + RouterConfig.tcp_notsent_lowat + batch
    return held * 8 * 10**9 // r2_r4["bw_bps"]


def onset_window_s(run_dir: Path, summary: dict) -> tuple[float, float]:
    """[onset of the r2-r4 overload, the last data flow's first message on the new path + what r2 still
    held for r4 then, queued_ahead_ns) on the run clock, in s."""
    overload = next(o for o in summary["overloads"] if (o["src_node"], o["dst_node"]) == ("r2", "r4"))
    moved = max(r["time_ns"] for r in summary["reroutes"] if r["flow"] in DATA_FLOWS)
    return ((overload["onset_ns"] - summary["t0_ns"]) / 1e9,
            (moved + queued_ahead_ns(run_dir) - summary["t0_ns"]) / 1e9)


def onset_worst_ms(run_dir: Path) -> float:
    """The most a realtime message can wait in the onset window: its own transfer over r1-r2 and r2-r4
    (routers forward whole messages), what r2 can hold ahead of it (queued_ahead_ns) and one round of TCP
    loss recovery at r2-r4's full tc queue (a queue's worth more). On the diamond: 15 + 115 + 36 = 166 ms."""
    rows = (run_dir / "traffic" / "recv-zpub.realtime-r4.csv").read_text().splitlines()[1:]
    size_bits = 8 * max(int(line.rsplit(",", 1)[1]) for line in rows)
    first, second = egress(run_dir, "r1", "r2"), egress(run_dir, "r2", "r4")
    queue_ns = second["queue_packets"] * (SEGMENT_PAYLOAD + SEGMENT_HEADERS) * 8 * 10**9 / second["bw_bps"]
    transfer_ns = size_bits * 10**9 / first["bw_bps"] + size_bits * 10**9 / second["bw_bps"]
    return (transfer_ns + queued_ahead_ns(run_dir) + queue_ns) / 1e6


def test_realtime_outside_the_onset_stays_within_twice_the_uncongested_baseline(runs):
    """From the onset until the data has moved (~0.45 s: a monitor interval of overload must pass before r2
    can act), realtime messages wait behind the bulk flow's in r2-r4's tc queue and r2's unsent socket
    bytes: 10-12 messages at 20 per second, 3 % of the short run's 340, which is where the whole run's p99
    falls. There they are bounded by what can be queued ahead of them (onset_worst_ms); outside that window
    congestion-awareness has to keep realtime where it is without congestion: within twice the uncongested
    baseline, and its tail below the onset's worst.

    The baseline is 120 messages, the rest of the run 330: their p99 is their second and fourth largest
    message. A loaded machine can stall a few messages by tens of ms in any part of the run (the cause is not
    pinned down), so their p99s compare stalls, not routing (on one healthy run 60 ms outside against 26 ms
    before). Their p90s lie below the stalls: the body of the latencies, within
    twice the baseline's; the tail is held to a bound the stalls stay under, what can queue ahead of a
    message at the onset (166 ms; without congestion-awareness the p99 is 190 ms)."""
    run_dir, s = runs["on"]
    story = run_story(run_dir)
    # Baseline: realtime before the bulk flow starts (1-4 s: 60 messages a run), identical in both runs,
    # pooled; at most 1 % of them lost (the diamond's expectation)
    baseline = [lat for run in ("on", "off")
                for _, lat in realtime_latencies_ms(runs[run][0], story.realtime_start_s, story.bulk_start_s)]
    assert len(baseline) >= 0.99 * 2 * story.realtime_sent(story.realtime_start_s, story.bulk_start_s)
    start, end = onset_window_s(run_dir, s)
    realtime = realtime_latencies_ms(run_dir, 0, story.duration_s)
    outside = [lat for t, lat in realtime if not start <= t < end]
    inside = [lat for t, lat in realtime if start <= t < end]
    whole = next(p for p in s["priorities"] if p["priority"] == 1)["latency"]["p99_ns"] / 1e6
    print(f"realtime p99 {whole:.1f} ms (whole run), {p99(outside):.1f} ms outside {start:.3f}-{end:.3f} s "
          f"({len(inside)} messages inside, max {max(inside, default=0):.1f} ms), "
          f"baseline p99 {p99(baseline):.1f} ms, p90 {p90(outside):.1f} ms outside, {p90(baseline):.1f} ms baseline, "
          f"worst possible inside {onset_worst_ms(run_dir):.0f} ms")
    # the whole run's realtime (340 messages from 1 s to 18 s, at most 1 % lost), and few of them in the window:
    # the data moves within two monitor intervals and 100 ms of the onset (the test above), then what r2 held
    # ahead drains in queued_ahead_ns (0.5 + 0.1 + 0.115 s: 15 messages at most)
    assert len(realtime) >= 0.99 * story.realtime_sent(0, story.duration_s)
    assert len(inside) <= (2 * monitor_interval_ns(run_dir) + 10**8 + queued_ahead_ns(run_dir)) / 1e9 / story.tick_s + 1
    assert p90(outside) <= 2 * p90(baseline)
    assert p99(outside) <= onset_worst_ms(run_dir)
    assert max(inside, default=0) <= onset_worst_ms(run_dir)


def test_realtime_never_reroutes_and_no_flow_moves_twice_in_an_episode(runs):
    _, s = runs["on"]
    assert flow(s, "zpub.realtime")["reroutes"] == 0
    assert not [r for r in s["reroutes"] if r["flow"] == "zpub.realtime"]
    for episode in s["episodes"]:
        assert all(n <= 1 for n in episode["reroutes"].values()), episode
    assert sum(1 for r in s["reroutes"] if r["flow"] in DATA_FLOWS) == len(DATA_FLOWS)


def test_data_started_after_the_congestion_takes_the_default_path(runs):
    from spark.pcap import decode_pcap_file

    run_dir, s = runs["on"]
    pub2 = flow(s, "zpub.pub2")
    assert pub2["reroutes"] == 0 and pub2["loss_pct"] <= 1.0
    captures = json.loads((run_dir / "pcap" / "capture.json").read_text())["captures"]
    on_link = {}
    for c in captures:
        ids = {obs[2] for obs in decode_pcap_file(str(run_dir / "pcap" / c["file"])).observations}
        on_link.setdefault(c["link"], set()).update(ids)
    assert pub2["flow_id"] in on_link[0] and pub2["flow_id"] in on_link[1]  # r1-r2, r2-r4: the default path
    assert pub2["flow_id"] not in on_link[2] | on_link[3]


def test_without_congestion_awareness_the_damage_shows_side_by_side(runs, capsys, tmp_path):
    on_dir, on = runs["on"]
    off_dir, off = runs["off"]
    assert off["reroutes"] == [] and off["episodes"] == []
    story = run_story(on_dir)
    assert run_story(off_dir) == story
    # the same overload of r2-r4 from the same onset; without rerouting it lasts as long as the bulk flow (to 14 s)
    overload_on = next(o for o in on["overloads"] if (o["src_node"], o["dst_node"]) == ("r2", "r4"))
    overload_off = next(o for o in off["overloads"] if (o["src_node"], o["dst_node"]) == ("r2", "r4"))
    assert abs((overload_on["onset_ns"] - on["t0_ns"]) - (overload_off["onset_ns"] - off["t0_ns"])) <= 10**8
    assert overload_off["end_ns"] - off["t0_ns"] >= (story.bulk_stop_s - 1) * 1e9
    assert overload_on["end_ns"] - on["t0_ns"] <= (story.bulk_start_s + 1) * 1e9, \
        "with rerouting the overload ends within 1 s"
    assert flow(off, "bulk")["loss_pct"] > 10 * max(flow(on, "bulk")["loss_pct"], 0.5)
    assert on["overall"]["loss_pct"] < 1.0
    # realtime from the end of the onset window (the same instants in both runs) to the bulk flow's stop, ~9.4 s:
    # without rerouting every message waits behind the bulk flow's in r2-r4's queues (110 ms at the median), with
    # it realtime is alone there (15 ms). Its p90, not its p99: a loaded machine stalls a few of these ~190
    # messages by tens of ms in either run, so their p99 is a stall, not the routing (it came out 2.6x and 6.0x
    # in two healthy pairs); their p90 lies below the stalls (5.3x and 6.8x; 5.4x on the 45 s
    # story's pair). A factor of 3 is what "suffers more" has to mean at the least.
    _, end = onset_window_s(on_dir, on)
    rt_on = p90([lat for _, lat in realtime_latencies_ms(on_dir, end, story.bulk_stop_s)])
    rt_off = p90([lat for _, lat in realtime_latencies_ms(off_dir, end, story.bulk_stop_s)])
    assert rt_off >= 3 * rt_on, \
        f"realtime p90 {rt_off:.1f} ms off vs {rt_on:.1f} ms on ({end:.3f}-{story.bulk_stop_s} s)"
    assert compare_command(str(off_dir), str(on_dir), out=str(tmp_path / "compare.html"), label_a="aware off",
                           label_b="aware on") == 0
    assert (tmp_path / "compare.html").exists()
    out = capsys.readouterr().out
    assert "aware off" in out and "better" in out
