"""Data-plane verification of links (testbed.links.verify) and the standard-library meters it uses.

The comparison maths (expected goodput, the loss bound, the delay estimate, scheduling) is tested
without a lab; the meters run for real on this machine's loopback; the verification itself runs on
real labs (Mininet, Docker, and lab machines reached over SSH: tests/backends/sshlab.py): a link that
delivers what it asks passes, and a link whose shaping was changed behind the verifier's back (the
lab still says 10 Mbit/s and 10% loss) is reported, naming the link, the direction and the figures.

This kernel has no netem, so no lab here can delay a link: the delay comparison is tested on
measured round-trip samples only (and a lab asking for delay with --allow-missing is verified
without it).
"""
from __future__ import annotations

import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.backends.base import Lab, LabEnd, LabLink, LabNode
from testbed.backends import BackendOptions
from testbed.lab.session import LabSession
from testbed.links.control import LinkControl
from testbed.links.verify import (
    LinkCheck, DirectionVerification, LinkDeviation, LinkVerificationReport, Tolerance, check_delay,
    check_goodput, check_loss, check_reachable, expected_goodput_bps, loss_meter_interval_ms,
    one_way_delay_ns, payload_share, plan_directions, schedule_rounds, verify_links,
)
from testbed.links.measure import EndAccess, Goodput, UdpRate, tcp_goodput, tcp_goodput_metered
from testbed.links.meter import goodput_from_samples, parse_arrivals, parse_round_trips, parse_samples
from testbed.spec import load_spec_text
from testbed.spec.resolve import Shaping
from tests.backends.sshlab import ssh_lab  # noqa: F401 - the fixture
from tests.conftest import BACKEND_PARAMS, needs_iperf3, needs_mininet, skip_unless_backend

METER = Path(__file__).resolve().parents[2] / "testbed" / "links" / "meter.py"
MBIT = 1_000_000
T = Tolerance()


# -- expected goodput ----------------------------------------------------------------------

def test_expected_goodput_is_the_payload_share_of_full_frames():
    assert payload_share(1500, "tcp") == pytest.approx(1448 / 1514)
    assert payload_share(1500, "udp") == pytest.approx(1472 / 1514)
    assert payload_share(9000, "tcp") == pytest.approx(8948 / 9014)
    assert expected_goodput_bps(10 * MBIT) == pytest.approx(9.5641e6, rel=1e-4)
    # iptables loss on the receiver comes after the rate limit: it removes its share of what was sent
    assert expected_goodput_bps(10 * MBIT, transport="udp", loss_after_shaper_pct=10) == \
        pytest.approx(10e6 * 1472 / 1514 * 0.9)


def test_goodput_accepted_within_ten_percent_of_the_expected_goodput_both_ways():
    expected = expected_goodput_bps(10 * MBIT)
    assert check_goodput("a:eth1->b:eth1", 10 * MBIT, expected * 0.9001, T).ok
    assert check_goodput("a:eth1->b:eth1", 10 * MBIT, expected * 1.0999, T).ok
    assert not check_goodput("a:eth1->b:eth1", 10 * MBIT, expected * 1.101, T).ok  # no shaper: too fast
    low = check_goodput("r2:eth2->r4:eth1", 10 * MBIT, 7.1e6, T)
    assert not low.ok
    assert low.message == "r2:eth2->r4:eth1 goodput 7.1 Mbit/s, asked 10 Mbit/s (expected 9.56 ± 0.956)"
    assert (low.low, low.high) == pytest.approx((expected * 0.9, expected * 1.1))
    # the configured rate itself would be 4.4% above the expected goodput; 10.6 Mbit/s is beyond 10%
    assert check_goodput("x", 10 * MBIT, 10e6, T).ok and not check_goodput("x", 10 * MBIT, 10.6e6, T).ok


# -- loss ---------------------------------------------------------------------------------------

def test_loss_bound_is_binomial_with_a_floor():
    assert T.loss_bound_pct(10.0, 2000) == pytest.approx(4 * 100 * math.sqrt(0.1 * 0.9 / 2000))  # 2.68 pp
    assert T.loss_bound_pct(None, 2000) == 0.5  # nothing asked: the floor only
    assert T.loss_bound_pct(1.0, 2000) == pytest.approx(0.89, abs=0.005)
    assert T.loss_bound_pct(0.01, 2000) == 0.5
    assert Tolerance(loss_floor_pct=1.5).loss_bound_pct(1.0, 2000) == 1.5


def test_loss_edges():
    bound = T.loss_bound_pct(10.0, 2000)
    inside = math.floor((10 + bound) / 100 * 2000)  # the most datagrams that may be lost
    assert check_loss("a:eth1->b:eth1", 10.0, 2000, inside, T).ok
    assert not check_loss("a:eth1->b:eth1", 10.0, 2000, inside + 1, T).ok
    assert check_loss("a:eth1->b:eth1", 10.0, 2000, math.ceil((10 - bound) / 100 * 2000), T).ok
    missing = check_loss("a:eth1->b:eth1", 10.0, 2000, 0, T)
    assert not missing.ok
    assert missing.message == "a:eth1->b:eth1 loss 0% of 2000 datagrams, asked 10% (accepted 7.32%–12.68%)"
    # no loss asked: up to the floor (0.5% = 10 of 2000)
    assert check_loss("a:eth1->b:eth1", None, 2000, 10, T).ok
    unasked = check_loss("a:eth1->b:eth1", None, 2000, 11, T)
    assert not unasked.ok and "none asked" in unasked.message
    # 1% asked, nothing lost: caught (it would not be with a 1.5 pp floor)
    assert not check_loss("a:eth1->b:eth1", 1.0, 2000, 0, T).ok
    assert not check_loss("x", None, 0, 0, T).ok  # nothing sent is no measurement


def test_loss_meter_takes_at_most_a_quarter_of_the_rate():
    assert loss_meter_interval_ms(None) == 1.0 and loss_meter_interval_ms(20 * MBIT) == 1.0
    one_mbit = loss_meter_interval_ms(1 * MBIT)
    assert 106 * 8 / (one_mbit / 1000) == pytest.approx(0.25 * MBIT)


# -- delay ----------------------------------------------------------------------------------------

def test_one_way_delay_is_half_the_min_round_trip_when_symmetric():
    rtts = [10_400_000, 10_200_000, 13_000_000]
    assert one_way_delay_ns(rtts, 5_000_000, 5_000_000) == 5_100_000
    # asymmetric: what is unexplained is shared equally
    assert one_way_delay_ns([10_300_000], 10_000_000, 0) == 10_150_000
    assert one_way_delay_ns([10_300_000], 0, 10_000_000) == 150_000
    # jitter asked: the median (the minimum would be delay - jitter)
    assert one_way_delay_ns([8_000_000, 10_000_000, 12_000_000], 5_000_000, 5_000_000, jitter=True) == 5_000_000
    with pytest.raises(ValueError):
        one_way_delay_ns([], 1, 1)


def test_delay_edges_on_measured_samples():
    # 5 ms asked each way: accepted 4..6 ms (the 1 ms floor is above 10%)
    assert check_delay("a:eth1->b:eth1", 5_000_000, 5_000_000, [11_990_000, 12_500_000], T).ok
    late = check_delay("a:eth1->b:eth1", 5_000_000, 5_000_000, [12_100_000, 12_500_000], T)
    assert not late.ok
    assert late.message == ("a:eth1->b:eth1 one-way delay 6.05 ms (min RTT 12.1 ms), asked 5 ms "
                            "(accepted 4 ms–6 ms)")
    assert late.detail["rtt_min_ns"] == 12_100_000 and late.detail["replies"] == 2
    # 100 ms asked: 10% (10 ms) is above the floor
    assert check_delay("x", 100_000_000, 100_000_000, [218_000_000], T).ok
    assert not check_delay("x", 100_000_000, 100_000_000, [222_000_000], T).ok
    # delay asked but nothing installed: the round trip is the bare path's
    assert not check_delay("x", 5_000_000, 5_000_000, [120_000, 150_000], T).ok
    none = check_delay("x", 5_000_000, 0, [], T)
    assert not none.ok and "no echo came back" in none.message


# -- what is asked, scheduling, the report -----------------------------------------------------------

def _lab(links: list[tuple[str, str, Shaping, Shaping]], applied: list[dict] = ()) -> Lab:
    """A lab as data only (nothing built): links between named nodes, interfaces eth1, eth2 ... per node."""
    nodes = {n: LabNode(n, "router") for a, b, _, _ in links for n in (a, b)}
    count: dict[str, int] = {}

    def end(node: str, address: str) -> LabEnd:
        count[node] = count.get(node, 0) + 1
        return LabEnd(node, f"eth{count[node]}", address)

    lab_links = [LabLink(i, end(a, f"10.0.{i}.1/30"), end(b, f"10.0.{i}.2/30"), 10, ab, ba)
                 for i, (a, b, ab, ba) in enumerate(links)]
    return Lab("t", "mininet", nodes, lab_links, list(applied))


def test_what_was_left_out_is_not_asked():
    shape = Shaping(bw_bps=10 * MBIT, delay_ns=5_000_000, jitter_ns=1_000_000, queue_packets=30)
    lab = _lab([("a", "b", shape, Shaping())],
               [{"link": 0, "direction": "a->b", "qdiscs": ["htb", "pfifo"], "iptables_loss_pct": None,
                 "dropped": ["delay", "jitter"]}])
    ab, ba = plan_directions(lab)
    assert ab.result.asked == {"bw_bps": 10 * MBIT, "loss_pct": None, "delay_ns": None}
    assert ab.result.dropped == ["delay", "jitter"] and ab.measurable
    assert any("delay is not verified: it was left out" in n for n in ab.result.notes)
    assert any("queue limit is not verified" in n for n in ab.result.notes)
    assert ab.result.path == "a:eth1->b:eth1" and ab.result.label == "a:eth1<->b:eth1"
    assert not ba.measurable  # nothing asked: reachability only


def test_rate_rounds_share_no_node():
    diamond = _lab([("r1", "r2", Shaping(), Shaping()), ("r2", "r4", Shaping(), Shaping()),
                    ("r1", "r3", Shaping(), Shaping()), ("r3", "r4", Shaping(), Shaping())])
    directions = [(d.src.node, d.dst.node) for d in plan_directions(diamond)]
    rounds = schedule_rounds(directions, lambda d: d, max_parallel=2)
    assert len(rounds) == 4 and all(len(r) == 2 for r in rounds)
    for r in rounds:
        assert not set(r[0]) & set(r[1])
    assert sorted(d for r in rounds for d in r) == sorted(directions)
    assert len(schedule_rounds(directions, lambda d: d, max_parallel=1)) == 8
    # a rate budget: two 20 Mbit/s directions fit in 40, not in 30
    assert len(schedule_rounds(directions, lambda d: d, 4, lambda d: 20e6, 40e6)) == 4
    assert len(schedule_rounds(directions, lambda d: d, 4, lambda d: 20e6, 30e6)) == 8
    # on a ring of eight, four directions share no node
    ring = [(f"n{i}", f"n{(i + 1) % 8}") for i in range(8)]
    assert [len(r) for r in schedule_rounds(ring, lambda d: d, 4)] == [4, 4]


def test_slow_links_get_fewer_loss_datagrams_and_longer_rate_windows():
    from testbed.links.verify import loss_meter_packets, rate_window_s

    assert loss_meter_packets(2000, 1.0, 8.0) == 2000
    one_mbit = loss_meter_interval_ms(1 * MBIT)  # 3.4 ms: 2000 would take 6.8 s
    assert loss_meter_packets(2000, one_mbit, 8.0) == 2000
    assert loss_meter_packets(2000, loss_meter_interval_ms(100_000), 8.0) == 235  # 34 ms apart
    assert loss_meter_packets(2000, 1000.0, 8.0) == 200  # never fewer
    assert rate_window_s(2.0, 10 * MBIT) == 2.0
    assert rate_window_s(2.0, 500_000) == pytest.approx(150 * 1514 * 8 / 500_000)  # 3.6 s


def test_report_json_and_the_deviation_error():
    ok = DirectionVerification(0, "a:eth1<->b:eth1", "a->b", "a:eth1->b:eth1",
                               {"bw_bps": 10 * MBIT, "loss_pct": None, "delay_ns": None}, [])
    ok.checks = [check_goodput(ok.path, 10 * MBIT, 9.5e6, T), check_loss(ok.path, None, 2000, 0, T)]
    bad = DirectionVerification(0, "a:eth1<->b:eth1", "b->a", "b:eth1->a:eth1",
                                {"bw_bps": 10 * MBIT, "loss_pct": 10.0, "delay_ns": None}, [])
    bad.checks = [check_goodput(bad.path, 10 * MBIT, 4.8e6, T, transport="udp"),
                  check_loss(bad.path, 10.0, 2000, 0, T)]
    report = LinkVerificationReport(T, [ok, bad], 7.5)
    assert not report.ok and len(report.failures()) == 2
    data = report.to_json()
    assert set(data) == {"tolerance", "links", "ok", "seconds"} and data["ok"] is False
    assert data["tolerance"] == {"goodput_rel": 0.1, "loss_sigmas": 4.0, "loss_floor_pct": 0.5,
                                 "delay_rel": 0.1, "delay_floor_ns": 1_000_000, "jitter_rel": 0.15,
                                 "ks_alpha": 1e-4}
    first = data["links"][0]
    assert first["direction"] == "a->b" and first["ok"] is True
    assert first["measured"] == {"goodput_bps": 9.5e6, "loss_pct": 0.0}
    assert data["links"][1]["misses"] == report.failures()
    with pytest.raises(LinkDeviation) as err:
        report.raise_for_deviation()
    message = str(err.value)
    assert all(m in message for m in report.failures())
    assert "--allow-deviation" in message and "manifest" in message
    LinkVerificationReport(T, [ok], 1.0).raise_for_deviation()  # nothing missed: nothing raised


def test_reachability_and_a_failed_measurement_are_checks_too():
    assert check_reachable("a:eth1->b:eth1", 50, 1).ok
    gone = check_reachable("a:eth1->b:eth1", 50, 0)
    assert not gone.ok and gone.message == "a:eth1->b:eth1 unreachable: none of 50 datagrams arrived"
    assert isinstance(gone, LinkCheck)


class _SimulatedPair:
    """The data plane of a lab of one 10 Mbit/s link a-b, as the meters would see it, where b's own firewall
    drops ``drop_at_b`` of what arrives on its end: a->b loses it, and so do the ACKs of a TCP probe b->a."""

    def __init__(self, drop_at_b: float):
        self.drop = drop_at_b
        self.tcp_probes: list[str] = []

    def lost(self, dst: EndAccess) -> float:
        return self.drop if dst.end.node == "b" else 0.0

    def udp_arrivals(self, src, dst, packets, *args, **kw):
        kept = round(packets * (1 - self.lost(dst)))
        return [(seq, 1_000_000 * seq, 1_000_000 * seq) for seq in range(kept)]

    def tcp_goodput_metered(self, src, dst, **kw):
        """TCP's goodput falls with loss either way: a->b's segments or b->a's ACKs (as measured on a loaded
        2-core machine: bench/verify_attribution_bench.py)."""
        self.tcp_probes.append(f"{src.end.node}->{dst.end.node}")
        either_way = max(self.lost(dst), self.lost(src))
        return Goodput(10 * MBIT * 1448 / 1514 * (1 - 1.5 * either_way), 2.0)

    def udp_delivered_rate(self, src, dst, offered_bps, **kw):
        return UdpRate(10 * MBIT * 1472 / 1514 * (1 - self.lost(dst)), 2.0, offered_bps)


class _Access:
    shares_clock = False
    work_dir = "/nonexistent"

    def run(self, argv, **kw):
        return subprocess.CompletedProcess(argv, 0, "1500\n", "")


@pytest.mark.parametrize("drop", [0.0, 0.2])
def test_loss_on_one_direction_is_not_blamed_on_the_other(monkeypatch, drop):
    """b's firewall drops a fifth of what arrives on b: only a->b misses. b->a's TCP probe would lose its ACKs
    on a->b, so its rate is measured with paced UDP (no reverse traffic); a healthy link keeps the TCP probe."""
    from testbed.links import measure

    world = _SimulatedPair(drop)
    for name in ("udp_arrivals", "tcp_goodput_metered", "udp_delivered_rate"):
        monkeypatch.setattr(measure, name, getattr(world, name))
    monkeypatch.setattr(measure, "put_meter", lambda ep: "")
    shape = Shaping(bw_bps=10 * MBIT)
    report = verify_links(_lab([("a", "b", shape, shape)]), lambda node: _Access())
    ab, ba = report.directions
    assert ba.ok, ba.misses
    if not drop:
        assert report.ok and world.tcp_probes == ["a->b", "b->a"]
        return
    assert [c.quantity for c in ab.checks if not c.ok] == ["goodput", "loss"]  # its own TCP probe and the loss
    assert world.tcp_probes == ["a->b"]
    rate = ba.checks[0]
    assert rate.detail["transport"] == "udp" and "ACKs would cross a->b, which loses 20%" in rate.method


def test_the_way_back_loses_when_asked_or_measured_beyond_a_healthy_links_bound():
    from testbed.links.verify import failed_measurement, way_back_loss_pct

    healthy = [check_loss("b->a", None, 2000, 10, T)]  # 0.5%: the floor
    assert way_back_loss_pct(0.0, healthy, T) is None
    assert way_back_loss_pct(1.0, healthy, T) == 1.0  # asked: whatever the probe saw
    assert way_back_loss_pct(0.0, [check_loss("b->a", None, 2000, 11, T)], T) == pytest.approx(0.55)
    assert way_back_loss_pct(0.0, [check_reachable("b->a", 50, 50)], T) is None
    assert way_back_loss_pct(0.0, [check_reachable("b->a", 50, 40)], T) == pytest.approx(20.0)
    assert way_back_loss_pct(0.0, [failed_measurement("loss", "b->a", RuntimeError("x"), "")], T) is None


# -- the meters, for real on loopback ---------------------------------------------------------------

def _meter(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(METER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tcp_meter_samples_bytes_with_timestamps():
    port = str(_port())
    receiver = _meter("tcp-recv", "127.0.0.1", port, "1.0")
    sender = _meter("tcp-send", "127.0.0.1", port, "20")  # retries until the receiver listens
    out, err = receiver.communicate(timeout=30)
    assert receiver.returncode == 0, err
    sender.send_signal(signal.SIGTERM)  # the receiver is done; the sender stops and says what it sent
    sent_out, sent_err = sender.communicate(timeout=30)
    # the sender may already have been ending on its own (the receiver closed): Python resets its SIGTERM
    # handler while it exits, so the signal can still end it — after it has said what it sent
    assert sender.returncode == 0 or (sender.returncode == -signal.SIGTERM and sent_out.strip()), sent_err
    samples = parse_samples(out)
    assert len(samples) > 5
    assert all(b0 < b1 and t0 < t1 for (t0, b0), (t1, b1) in zip(samples, samples[1:]))
    assert 0.9e9 <= samples[-1][0] - samples[0][0] <= 1.2e9  # it stopped a second after the first byte
    assert int(sent_out) >= samples[-1][1]
    bps, seconds = goodput_from_samples(samples, 0.2, 0.6)
    assert bps > 0 and 0.3 <= seconds <= 0.6


def test_goodput_window_starts_after_the_warm_up():
    second = 1_000_000_000
    # 1 MB/s, but twice that during the first half second (a burst)
    samples = [(0, 0), (second // 4, 500_000), (second // 2, 1_000_000)]
    samples += [(second // 2 + i * second // 10, 1_000_000 + i * 100_000) for i in range(1, 26)]
    bps, seconds = goodput_from_samples(samples, 0.5, 2.0)
    assert bps == pytest.approx(8e6) and seconds == pytest.approx(2.0)
    with pytest.raises(ValueError, match="arrived for 3.00 s only, less than the 2.5 s warm-up and half"):
        goodput_from_samples(samples, 2.5, 2.0)
    with pytest.raises(ValueError, match="nothing arrived"):
        goodput_from_samples([], 0.5, 2.0)


def test_udp_rate_meter_and_receivers_stop_on_sigterm():
    port = str(_port())
    counter = _meter("udp-count", "127.0.0.1", port, "60")
    time.sleep(0.3)
    blast = _meter("udp-blast", "127.0.0.1", port, "4000000", "1.0", "1000")
    sent_out, _ = blast.communicate(timeout=30)
    sent, took = sent_out.split()
    time.sleep(0.2)
    counter.send_signal(signal.SIGTERM)  # it writes what it counted and ends
    out, err = counter.communicate(timeout=10)
    assert counter.returncode == 0, err
    samples = parse_samples(out)
    assert samples and samples[-1][1] % 1000 == 0 and samples[-1][1] <= int(sent) * 1000
    assert float(took) >= 1.0


def _wait_bound(port: str, process: subprocess.Popen) -> None:
    """Until ``process`` has bound UDP ``port`` (as testbed.links.measure waits for a receiver on a node)."""
    deadline = time.monotonic() + 30
    while f":{int(port):04X}" not in " ".join(line.split()[1] for line in
                                              Path("/proc/net/udp").read_text().splitlines()[1:]):
        assert process.poll() is None and time.monotonic() < deadline, "the receiver never bound its port"
        time.sleep(0.02)


def test_loss_receiver_stopped_counts_what_is_already_in_its_buffer():
    port = str(_port())
    receiver = _meter("recv", "127.0.0.1", port, "60")
    _wait_bound(port, receiver)
    receiver.send_signal(signal.SIGSTOP)  # a receiver starved of CPU
    try:
        subprocess.run([sys.executable, str(METER), "send", "127.0.0.1", port, "0.1", "200"], check=True, timeout=30)
    finally:
        receiver.send_signal(signal.SIGTERM)
        receiver.send_signal(signal.SIGCONT)
    out, _ = receiver.communicate(timeout=10)
    assert sorted(seq for seq, _, _ in parse_arrivals(out)) == list(range(200))


def test_loss_receiver_stamps_arrivals_with_the_kernels_receive_time():
    """A receiver starved of CPU for half a second still gives each datagram the time it arrived (the one-way
    delays are the link's, not the receiver's lateness)."""
    port = str(_port())
    receiver = _meter("recv", "127.0.0.1", port, "60")
    _wait_bound(port, receiver)
    receiver.send_signal(signal.SIGSTOP)
    try:
        subprocess.run([sys.executable, str(METER), "send", "127.0.0.1", port, "1", "50"], check=True, timeout=30)
        time.sleep(0.5)
    finally:
        receiver.send_signal(signal.SIGTERM)
        receiver.send_signal(signal.SIGCONT)
    out, _ = receiver.communicate(timeout=10)
    arrivals = parse_arrivals(out)
    assert len(arrivals) == 50
    assert max(arrival - send for _, arrival, send in arrivals) < 250_000_000


def _longest_burst(sends: list[int], gap_ns: int) -> int:
    """The most datagrams sent one after the other less than ``gap_ns`` apart."""
    sends = sorted(sends)
    longest = run = 1
    for a, b in zip(sends, sends[1:]):
        run = run + 1 if b - a < gap_ns else 1
        longest = max(longest, run)
    return longest


@pytest.mark.parametrize("max_burst", [0, 4])
def test_a_sender_that_fell_behind_catches_up_in_bursts_of_at_most_max_burst(max_burst):
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(30)
        port = str(sock.getsockname()[1])
        sender = _meter("send", "127.0.0.1", port, "2", "400", *([str(max_burst)] if max_burst else []))
        sends = [int.from_bytes(sock.recv(256)[8:16], "big")]  # it is sending: stop it for 0.3 s
        sender.send_signal(signal.SIGSTOP)  # 150 datagrams behind
        time.sleep(0.3)
        sender.send_signal(signal.SIGCONT)
        sender.communicate(timeout=30)
        sock.settimeout(0.5)
        try:
            while True:
                sends.append(int.from_bytes(sock.recv(256)[8:16], "big"))
        except socket.timeout:
            pass
    assert len(sends) == 400
    burst = _longest_burst(sends, 1_000_000)  # half the interval
    if max_burst:
        assert burst <= max_burst
    else:
        assert burst > 50  # it caught up at once


def test_echo_meter_measures_round_trips():
    port = str(_port())
    server = _meter("echo-server", "127.0.0.1", port, "60")
    client = _meter("echo", "127.0.0.1", port, "5", "20")  # waits for the server with a hello
    out, err = client.communicate(timeout=30)
    server.send_signal(signal.SIGTERM)
    server.communicate(timeout=10)
    assert client.returncode == 0, err
    rtts = parse_round_trips(out)
    assert len(rtts) == 20 and all(0 < r < 1e9 for r in rtts)


def test_echo_without_a_server_says_so():
    client = _meter("echo", "127.0.0.1", str(_port()), "5", "3", "1", "0.5")
    _, err = client.communicate(timeout=30)
    assert client.returncode != 0 and "no reply" in err


# -- on real labs ------------------------------------------------------------------------------------------

PAIR = "name: {name}\nnodes: {{a: {{}}, b: {{}}}}\nlinks:\n  - {{endpoints: [a, b], {params}}}\n"


@pytest.fixture
def open_lab(caps):
    sessions: list[LabSession] = []

    def _open(text: str, backend: str = "mininet", allow_missing: bool = False) -> LabSession:
        spec = load_spec_text(text, filename="lv.yaml")
        session = LabSession(spec, caps, allow_missing=allow_missing, backend=backend)
        sessions.append(session)
        session.open()
        return session

    yield _open
    for session in sessions:
        session.close()


def _ends(session: LabSession, index: int = 0) -> tuple[EndAccess, EndAccess]:
    link = session.lab.links[index]
    return EndAccess(session.access(link.a.node), link.a), EndAccess(session.access(link.b.node), link.b)


@needs_mininet
@needs_iperf3
@pytest.mark.parametrize("rate_mbit", [10, 50])
def test_tcp_meter_agrees_with_iperf3(open_lab, rate_mbit):
    session = open_lab(PAIR.format(name=f"tbt-lvi{rate_mbit}", params=f"bw: {rate_mbit}mbit"))
    a, b = _ends(session)
    meter = tcp_goodput_metered(a, b, seconds=2.0, warmup_s=0.5).bits_per_second
    iperf = tcp_goodput(a, b, seconds=3).bits_per_second
    expected = rate_mbit * MBIT * 1448 / 1514
    print(f"{rate_mbit} Mbit/s: meter {meter / 1e6:.3f}, iperf3 {iperf / 1e6:.3f}, "
          f"expected {expected / 1e6:.3f} Mbit/s")
    assert meter == pytest.approx(iperf, rel=0.05)
    assert meter == pytest.approx(expected, rel=0.05)
    assert iperf == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_rate_and_loss_as_asked_pass_then_changed_behind_its_back_miss(open_lab, caps, backend):
    skip_unless_backend(backend)
    session = open_lab(PAIR.format(name=f"tbt-{backend[:2]}-lvl", params="bw: 10mbit, loss: 10%"), backend)
    lines: list[str] = []
    report = verify_links(session.lab, session.access, progress=lines.append)
    print("\n".join(lines))
    assert report.ok, report.failures()
    data = report.to_json()
    assert [(d["direction"], [c["quantity"] for c in d["checks"]]) for d in data["links"]] == \
        [("a->b", ["goodput", "loss"]), ("b->a", ["goodput", "loss"])]
    assert all(d["asked"] == {"bw_bps": 10 * MBIT, "loss_pct": 10.0, "delay_ns": None} for d in data["links"])
    assert len([line for line in lines if "a:eth1->b:eth1" in line or "b:eth1->a:eth1" in line]) == 2
    # Behind the verifier's back: a->b really delivers 5 Mbit/s, b->a loses nothing. The lab still
    # says 10 Mbit/s and 10% both ways.
    link = session.lab.links[0]
    session.backend.shaper(session.lab, link, "a", caps).apply(Shaping(bw_bps=5 * MBIT, loss_pct=10.0))
    session.backend.shaper(session.lab, link, "b", caps).apply(Shaping(bw_bps=10 * MBIT))
    assert session.lab.links[0].shape_ab.bw_bps == 10 * MBIT
    report = verify_links(session.lab, session.access)
    misses = report.failures()
    print("\n".join(misses))
    assert len(misses) == 2, misses
    goodput, loss = misses
    assert goodput.startswith("a:eth1->b:eth1 goodput ") and "asked 10 Mbit/s (expected 8." in goodput
    measured = report.directions[0].checks[0].measured
    assert 4.0e6 < measured < 5.2e6  # 5 Mbit/s less the headers and the loss
    assert loss.startswith("b:eth1->a:eth1 loss ") and "asked 10%" in loss
    assert report.directions[1].checks[1].measured < 1.0
    with pytest.raises(LinkDeviation, match="--allow-deviation"):
        report.raise_for_deviation()


@needs_mininet
def test_tcp_rate_miss_and_unreachable_link(open_lab, caps):
    text = ("name: tbt-lvt\nnodes: {a: {}, b: {}, c: {}}\nlinks:\n"
            "  - {endpoints: [a, b], bw: 10mbit, queue: 30}\n  - {endpoints: [b, c]}\n")
    session = open_lab(text)
    report = verify_links(session.lab, session.access)
    assert report.ok, report.failures()
    ab, ba, bc, cb = report.directions
    assert [c.quantity for c in ab.checks] == ["goodput", "loss"]
    assert "TCP probe" in ab.checks[0].method
    assert [c.quantity for c in bc.checks] == ["reachable"] and bc.checks[0].measured == 50
    ctl = LinkControl(session.lab, session.backend, caps)
    ctl.set_bandwidth(0, 5 * MBIT, direction="b")  # b->a now 5 Mbit/s; ctl's own copy, not the lab's
    assert session.lab.links[0].shape_ba.bw_bps == 10 * MBIT
    ctl.link_down(1)
    report = verify_links(session.lab, session.access)
    misses = report.failures()
    print("\n".join(misses))
    assert [m.split()[0] for m in misses] == ["b:eth1->a:eth1", "b:eth2->c:eth1", "c:eth1->b:eth2"]
    assert 4.3e6 < report.directions[1].checks[0].measured < 5.2e6  # 5 Mbit/s less the headers
    assert misses[0].startswith("b:eth1->a:eth1 goodput 4.")
    assert misses[0].endswith(" Mbit/s, asked 10 Mbit/s (expected 9.56 ± 0.956)")
    assert misses[1] == "b:eth2->c:eth1 unreachable: none of 50 datagrams arrived"
    assert report.directions[0].ok


@needs_mininet
def test_delay_left_out_is_not_verified(open_lab, caps, monkeypatch):
    if caps.has_qdisc("netem"):
        pytest.skip("this kernel has netem: nothing is left out")
    from testbed.links import appliance

    monkeypatch.setattr(appliance, "UML_KERNEL", "/nonexistent/linux.uml")  # nor the impairment appliance
    session = open_lab(PAIR.format(name="tbt-lvd", params="delay: 5ms"), allow_missing=True)
    report = verify_links(session.lab, session.access)
    assert report.ok, report.failures()
    for d in report.directions:
        assert d.asked["delay_ns"] is None and d.dropped == ["delay"]
        assert [c.quantity for c in d.checks] == ["reachable"]
        assert any("delay is not verified" in n for n in d.notes)


SSH_PAIR = """
name: tbt-lvssh
backend: ssh
nodes:
  left: {host: r1}
  right: {host: r2}
links:
  - endpoints: ["left:eth1", "right:eth1"]
    bw: 10mbit
    loss: 10%
"""


def test_on_lab_machines_reached_over_ssh(ssh_lab, tmp_path):
    """Machines that have python3 and no iperf3, reached only over SSH; their inventory's python3."""
    lab = ssh_lab()
    inventory = lab.write_inventory(tmp_path / "lab.ini")
    session = LabSession(load_spec_text(SSH_PAIR), backend=BackendOptions("ssh", inventory=str(inventory)),
                         management=True)
    try:
        session.open()
        pythons = {n: session.management.inventory_vars(n)["ansible_python_interpreter"] for n in session.lab.nodes}
        report = verify_links(session.lab, session.access, python_of=pythons.__getitem__)
        assert report.ok, report.failures()
        assert [[c.quantity for c in d.checks] for d in report.directions] == [["goodput", "loss"]] * 2
        assert {d.checks[0].detail["loss_after_shaper_pct"] > 0 for d in report.directions} == {True}  # iptables
    finally:
        session.close()
