"""Impairments on every backend, on this kernel (no netem, no fq_codel: CONFIG_MODULES unset), through the
impairment appliance (testbed.links.appliance), checked against the configured values from first principles.

The nodes of Mininet and Docker share this machine's clock, so delays are measured one way: each datagram of
the meter carries its send time, the receiver its arrival time. One lab per backend carries every impairment on
a link of its own (the appliance boots once); every lab is torn down even when a test fails, and the session's
leak check (tests/conftest.py) fails the suite if an appliance, tap or folder of ours remains.
"""
from __future__ import annotations

import math
import statistics
import threading
import time

import pytest

from testbed import proc
from testbed.lab.session import LabSession
from testbed.links import appliance
from testbed.links.control import LinkControl
from testbed.links import impairstats
from testbed.links.impairstats import DelayModel, GilbertElliottChain
from testbed.links.measure import EndAccess, tcp_goodput_metered, udp_arrivals, udp_round_trips
from testbed.spec import load_spec_text
from tests.conftest import BACKEND_PARAMS, skip_unless_backend

pytestmark = pytest.mark.skipif(not appliance.installed(),
                                reason=f"user-mode Linux is not installed ({appliance.INSTALL_HINT})")

#: one link per impairment under test (the keys of a flow mapping), between a pair of nodes of its own
LINKS = {
    "delay10": "delay: 10ms",
    "delay50": "delay: 50ms",
    "jitter": "delay: 20ms, jitter: 5ms, distribution: normal",
    "loss1": "loss: 1%",
    "loss10": "loss: 10%",
    "gemodel": "loss: {model: gilbert-elliott, p: 2%, r: 25%}",
    "reorder": "delay: 10ms, reorder: {rate: 25%, gap: 5}",
    "duplicate": "duplicate: 5%",
}
FORCED = "impairments: appliance"


def lab_text(name: str) -> str:
    nodes = "".join(f"  {k}a: {{}}\n  {k}b: {{}}\n" for k in LINKS)
    links = "".join(f"  - {{endpoints: [{k}a, {k}b], {v}}}\n" for k, v in LINKS.items())
    return f"name: {name}\n{FORCED}\nnodes:\n{nodes}links:\n{links}"


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def impaired(request, caps):
    """One lab per backend with every impairment of LINKS on a link of its own, through the appliance."""
    skip_unless_backend(request.param)
    name = f"imp-{request.param[:3]}"
    session = LabSession(load_spec_text(lab_text(name), filename=f"{name}.yaml"), caps, backend=request.param)
    session.open()
    try:
        yield session
    finally:
        session.close()


def link_ends(session: LabSession, key: str) -> tuple[EndAccess, EndAccess]:
    """The ends of the link under test, its neighbour entries resolved: the first datagrams of a probe would
    otherwise wait for ARP across the link (a round trip: 40 ms through 20 ms of delay each way)."""
    link = session.lab.find_link(f"{key}a-{key}b")
    src, dst = EndAccess(session.access(link.a.node), link.a), EndAccess(session.access(link.b.node), link.b)
    udp_arrivals(src, dst, 3, interval_ms=50.0, settle_s=0.5)
    return src, dst


def one_way_ms(arrivals) -> list[float]:
    return [(arrived - sent) / 1e6 for _, arrived, sent in arrivals]


def within_4_sigma(measured: float, expected: float, n: int) -> bool:
    """A binomial proportion ``measured`` of ``n`` trials within 4 standard deviations of ``expected``."""
    sigma = math.sqrt(expected * (1 - expected) / n)
    return abs(measured - expected) <= 4 * sigma


@pytest.mark.parametrize("key,delay_ms", [("delay10", 10.0), ("delay50", 50.0)])
def test_one_way_delay_p50_is_the_configured_delay(impaired, key, delay_ms):
    src, dst = link_ends(impaired, key)
    delays = one_way_ms(udp_arrivals(src, dst, 500, interval_ms=2.0))
    assert len(delays) >= 490
    p50 = statistics.median(delays)
    assert abs(p50 - delay_ms) <= 0.3 + 0.02 * delay_ms, f"p50 {p50:.3f} ms for {delay_ms} ms configured"


def test_loss_rates_are_the_configured_ones(impaired):
    for key, rate in (("loss1", 0.01), ("loss10", 0.10)):
        src, dst = link_ends(impaired, key)
        packets = 5000
        received = {seq for seq, _, _ in udp_arrivals(src, dst, packets, interval_ms=0.4)}
        lost = 1 - len(received) / packets
        assert within_4_sigma(lost, rate, packets), f"{key}: lost {lost:.4f} of {packets}, configured {rate}"


def test_jitter_spread_and_distribution_are_netems(impaired):
    """delay 20 ms, jitter 5 ms normal: the standard deviation within 15 %, and the delays pass a KS test at
    alpha 0.01 against netem's own normal table (a constant offset, the path's own latency, fitted)."""
    src, dst = link_ends(impaired, "jitter")
    records = udp_arrivals(src, dst, 2200, interval_ms=1.0)
    delays = impairstats.one_way_delays(records)
    assert len(delays) >= 2000
    model = DelayModel(20e6, 5e6, "normal")
    spread = impairstats.check_spread(delays, model, rel=0.15)
    assert spread.passed, spread.describe()
    fitted = impairstats.check_distribution(delays, model, alpha=0.01,
                                            offset_ns=impairstats.fitted_offset(delays, model))
    assert fitted.passed, fitted.describe()
    assert abs(fitted.offset_ns) <= 300_000 + 0.02 * 20e6, fitted.describe()  # the delay's own tolerance


def test_gilbert_elliott_mean_burst_is_one_over_r(impaired):
    src, dst = link_ends(impaired, "gemodel")
    sent = 6000
    records = udp_arrivals(src, dst, sent, interval_ms=0.4)
    model = GilbertElliottChain(0.02, 0.25)
    burst = impairstats.check_burst(sent, records, model, rel=0.2)
    assert burst.passed, burst.describe()
    loss = impairstats.check_loss(sent, records, 100 * model.loss_rate(), model=model)
    assert loss.passed, loss.describe()


def test_reorder_and_duplicate_rates_are_the_configured_ones(impaired):
    src, dst = link_ends(impaired, "reorder")
    records = udp_arrivals(src, dst, 5000, interval_ms=1.0)
    expected = impairstats.expected_reorder_pct(25, 5, 10e6, 1e6)
    reorder = impairstats.check_reorder(records, expected)
    assert reorder.passed, reorder.describe()
    src, dst = link_ends(impaired, "duplicate")
    records = udp_arrivals(src, dst, 5000, interval_ms=0.4)
    duplicate = impairstats.check_duplicate(records, impairstats.expected_duplicate_pct(5))
    assert duplicate.passed, duplicate.describe()


def test_runtime_delay_change_is_in_force_within_a_round_trip_and_recorded(impaired, caps):
    src, dst = link_ends(impaired, "delay10")
    control = LinkControl(impaired.lab, impaired.backend, caps)
    applied: list[int] = []

    def change() -> None:
        time.sleep(1.0)  # the sender is under way (a python that starts on a busy machine takes ~0.5 s)
        control.set_shape("delay10a-delay10b", direction="delay10a", delay_ns=30_000_000)
        applied.append(time.time_ns())

    try:
        arrivals = udp_arrivals(src, dst, 2500, interval_ms=1.0, during=change)
    finally:
        control.set_shape("delay10a-delay10b", direction="delay10a", delay_ns=10_000_000)
    round_trip_ns = 2 * 30_000_000
    after = [(arrived - sent) / 1e6 for _, arrived, sent in arrivals if sent > applied[0] + round_trip_ns]
    # sent before the change began (it takes ~0.1-0.2 s: a request to the appliance)
    before = [(arrived - sent) / 1e6 for _, arrived, sent in arrivals if sent < applied[0] - 500_000_000]
    assert after and before
    assert statistics.median(before) == pytest.approx(10.0, abs=0.5)
    assert min(after) >= 29.0, f"a datagram sent a round trip after the change took {min(after):.2f} ms"


#: a router (m) forwards a TCP flow from s to d1 or d2 over a 10 Mbit/s bottleneck whose queue is fq_codel (the
#: appliance's, with the rate) or a 1000-packet pfifo (m's own): forwarded, as in a lab, not sent by m itself
#: (TCP small queues keep a sender's own qdisc nearly empty)
AQM_LAB = """
name: {name}
impairments: appliance
nodes: {{s: {{}}, m: {{}}, d1: {{}}, d2: {{}}}}
links:
  - {{endpoints: [s, m]}}
  - {{endpoints: [m, d1], bw: 10mbit, qdisc: fq_codel}}
  - {{endpoints: [m, d2], bw: 10mbit, queue: 1000}}
"""


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def aqm_lab(request, caps):
    skip_unless_backend(request.param)
    name = f"aqm-{request.param[:3]}"
    session = LabSession(load_spec_text(AQM_LAB.format(name=name), filename=f"{name}.yaml"), caps,
                         backend=request.param)
    session.open()
    try:
        s_m = session.lab.find_link("s-m")
        netns = {n: node.handle["netns"] for n, node in session.lab.nodes.items()}  # (a container's /proc/sys
        proc.run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"], netns=netns["m"])  # is read-only inside)
        # a flow that fills a queue: loss-based TCP (this machine's default is bbr, which keeps queues short;
        # cubic is not among the algorithms a namespace may choose here, reno is)
        proc.run(["sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=reno"], netns=netns["s"])
        # wire-sized packets: a 64 KiB segment of s's TCP would cross m as one and count as one in its pfifo
        proc.run(["ethtool", "-K", s_m.end("s").ifname, "tso", "off", "gso", "off"], netns=netns["s"])
        for far in ("d1", "d2"):
            m_far = session.lab.find_link(f"m-{far}")
            session.access("s").run(["ip", "route", "add", f"{m_far.end(far).ip}/32", "via", s_m.end("m").ip])
            session.access(far).run(["ip", "route", "add", f"{s_m.end('s').ip}/32", "via", m_far.end("m").ip])
        yield session
    finally:
        session.close()


def round_trips_under_a_saturating_tcp_flow(session: LabSession, far: str) -> list[float]:
    """Round trips (ms) of paced UDP echoes from s to ``far`` through m while a TCP flow from s to ``far`` fills
    the bottleneck (the echoes start 2.5 s into the flow, once its window has filled the queue it fills)."""
    src = EndAccess(session.access("s"), session.lab.find_link("s-m").end("s"))
    dst = EndAccess(session.access(far), session.lab.find_link(f"m-{far}").end(far))
    udp_arrivals(src, dst, 3, interval_ms=50.0, settle_s=0.5)  # neighbours resolved
    flow = threading.Thread(target=tcp_goodput_metered, args=(src, dst), kwargs={"seconds": 6.0, "warmup_s": 0.5})
    flow.start()
    try:
        time.sleep(2.5)
        trips = udp_round_trips(src, dst, count=100, interval_ms=20.0)
    finally:
        flow.join(timeout=60)
    # a full pfifo drops echoes as it drops TCP's segments, and the last ones of a 1.2 s queue come back after
    # the echo has stopped waiting (measured: 42-45 of 100 back, each after 1.187 s: 1000 x 1500 B at 10 Mbit/s)
    assert len(trips.rtts_ns) >= 20
    return [ns / 1e6 for ns in trips.rtts_ns]


def test_fq_codel_keeps_latency_low_under_load_where_a_long_fifo_does_not(aqm_lab):
    """ping p50 under a saturating TCP flow: at most 3 x (codel's target 5 ms + the base RTT) with fq_codel, at
    least 100 ms with a 1000-packet pfifo (which TCP fills: 1000 x 1500 B at 10 Mbit/s is 1.2 s)."""
    src = EndAccess(aqm_lab.access("s"), aqm_lab.lab.find_link("s-m").end("s"))
    dst = EndAccess(aqm_lab.access("d1"), aqm_lab.lab.find_link("m-d1").end("d1"))
    base = statistics.median(ns / 1e6 for ns in udp_round_trips(src, dst, count=20, interval_ms=10.0).rtts_ns)
    fq_codel = statistics.median(round_trips_under_a_saturating_tcp_flow(aqm_lab, "d1"))
    pfifo = statistics.median(round_trips_under_a_saturating_tcp_flow(aqm_lab, "d2"))
    assert fq_codel <= 3 * (5.0 + base), f"fq_codel: p50 {fq_codel:.2f} ms under load (base RTT {base:.2f} ms)"
    assert pfifo >= 100.0, f"pfifo 1000: p50 {pfifo:.2f} ms under load"


def test_a_link_the_appliance_carries_goes_down_and_up(impaired, caps):
    """Down: nothing crosses (the appliance drops what would go to a tap that is down); up: traffic crosses again,
    with the link's delay (a write to a tap that is down would have stalled the appliance's port for good)."""
    src, dst = link_ends(impaired, "delay10")
    control = LinkControl(impaired.lab, impaired.backend, caps)
    control.link_down("delay10a-delay10b")
    try:
        assert udp_arrivals(src, dst, 50, interval_ms=2.0) == []
    finally:
        control.link_up("delay10a-delay10b")
    time.sleep(1.0)  # the interfaces' operstate follows `ip link set up` a moment later
    udp_arrivals(src, dst, 3, interval_ms=50.0, settle_s=0.5)  # neighbours resolved again
    delays = one_way_ms(udp_arrivals(src, dst, 200, interval_ms=2.0))
    assert len(delays) >= 195 and statistics.median(delays) == pytest.approx(10.0, abs=0.5)
