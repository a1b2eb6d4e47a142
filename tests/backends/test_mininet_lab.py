"""Mininet labs with real namespaces, veths, tc and iptables: shaping accuracy, loss,
runtime changes, link down/up. Every lab is torn down even when a test fails."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from testbed import netns, proc
from testbed.lab import LabError, LabSession
from testbed.linkctl import LinkControl
from testbed.measure import tcp_goodput, udp_loss
from testbed.probe import parse_arrivals
from testbed.spec import load_spec_text
from tests.conftest import needs_iperf3, needs_mininet

pytestmark = [needs_mininet]

PAIR = """
name: {name}
nodes:
  a: {{kind: router}}
  b: {{kind: router}}
links:
  - endpoints: [a, b]
{params}
"""


def pair_spec(name: str, **params: str):
    body = "".join(f"    {k}: {v}\n" for k, v in params.items())
    return load_spec_text(PAIR.format(name=name, params=body), filename=f"{name}.yaml")


@pytest.fixture
def open_lab(caps):
    sessions: list[LabSession] = []

    def _open(spec, allow_missing: bool = False):
        session = LabSession(spec, caps, allow_missing=allow_missing)
        sessions.append(session)
        return session.open()

    yield _open
    for session in sessions:
        session.close()


@needs_iperf3
@pytest.mark.parametrize("rate_mbit", [10, 50])
def test_tcp_goodput_matches_configured_rate(open_lab, rate_mbit):
    lab = open_lab(pair_spec(f"tbt-bw{rate_mbit}", bw=f"{rate_mbit}mbit"))
    link = lab.links[0]
    measured = tcp_goodput(link.a, link.b, seconds=5)
    ratio = measured.bits_per_second / (rate_mbit * 1e6)
    print(f"configured {rate_mbit} Mbit/s, TCP goodput {measured.bits_per_second / 1e6:.2f} Mbit/s, ratio {ratio:.3f}")
    assert 0.9 <= ratio <= 1.1


@needs_iperf3
def test_loss_without_netem_is_close_to_configured(open_lab, caps):
    lab = open_lab(pair_spec("tbt-loss", loss="10%"))
    link = lab.links[0]
    applied = {a["direction"]: a for a in lab.applied}
    if not caps.has_qdisc("netem"):
        assert applied["a->b"]["iptables_loss_pct"] == 10
    result = udp_loss(link.a, link.b, packets=3000)
    print(f"sent {result.packets} packets, lost {result.lost} ({result.loss_pct:.2f}%)")
    assert result.packets >= 2000
    assert 7.0 <= result.loss_pct <= 13.0
    # The other direction carries the same configured loss (link-wide value applies to both).
    back = udp_loss(link.b, link.a, packets=2000)
    assert 7.0 <= back.loss_pct <= 13.0


@needs_iperf3
def test_runtime_bandwidth_change_changes_goodput(open_lab, caps):
    lab = open_lab(pair_spec("tbt-change", bw="50mbit", queue=200))
    link = lab.links[0]
    before = tcp_goodput(link.a, link.b, seconds=4).bits_per_second
    ctl = LinkControl(lab, caps)
    ctl.set_bandwidth(0, 10_000_000)
    qdiscs = proc.run(["tc", "qdisc", "show", "dev", link.a.ifname], netns=link.a.netns).stdout
    assert "pfifo" in qdiscs and "limit 200" in qdiscs  # the queue was kept: changed in place
    after = tcp_goodput(link.a, link.b, seconds=4).bits_per_second
    print(f"before {before / 1e6:.2f} Mbit/s, after change to 10 Mbit/s: {after / 1e6:.2f} Mbit/s")
    assert 0.9 <= before / 50e6 <= 1.1
    assert 0.9 <= after / 10e6 <= 1.1
    ctl.set_loss(0, 5.0, direction="a")
    assert ctl.shape(0, "a").loss_pct == 5.0 and ctl.shape(0, "b").loss_pct is None


def _probe(netns_name: str, *args: str, **kw) -> subprocess.Popen:
    return proc.spawn([sys.executable, "-m", "testbed.probe", *args], netns=netns_name, **kw)


def test_link_down_stops_traffic_within_100ms_and_up_restores(open_lab, caps):
    lab = open_lab(pair_spec("tbt-updown", bw="10mbit"))
    link = lab.links[0]
    receiver = _probe(link.b.netns, "recv", link.b.ip, "9100", "4.0", stdout=subprocess.PIPE)
    try:
        time.sleep(0.3)
        sender = _probe(link.a.netns, "send", link.b.ip, "9100", "1", "3500")
        try:
            ctl = LinkControl(lab, caps)
            time.sleep(1.0)
            t_down_called = time.time_ns()
            ctl.link_down(0)
            time.sleep(1.0)
            t_up = ctl.link_up(0)
            out, _ = receiver.communicate(timeout=10)
        finally:
            sender.kill()
            sender.wait()
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    arrivals = parse_arrivals(out.decode())
    before = [t for _, t in arrivals if t < t_down_called]
    after_down = [t for _, t in arrivals if t_down_called <= t < t_up]
    after_up = [t for _, t in arrivals if t >= t_up]
    assert len(before) > 300, "traffic flowed before the link went down"
    last_ms = (max(after_down) - t_down_called) / 1e6 if after_down else 0.0
    print(f"last packet {last_ms:.1f} ms after link down; {len(after_up)} packets after link up, "
          f"first {(min(after_up) - t_up) / 1e6 if after_up else float('nan'):.1f} ms after")
    assert last_ms <= 100.0
    assert len(after_up) > 300, "traffic resumed after link up"


def test_topology_needing_netem_is_refused_before_anything_is_built(caps):
    if caps.has_qdisc("netem"):
        pytest.skip("this kernel has netem, so nothing is refused")
    spec = pair_spec("tbt-refuse", bw="10mbit", delay="5ms")
    session = LabSession(spec, caps)
    with pytest.raises(LabError) as err:
        session.open()
    message = str(err.value)
    assert "links[0] a:eth1<->b:eth1" in message and "delay" in message and "sch_netem" in message
    assert "--allow-missing" in message
    assert not any(n.startswith(f"{netns.PREFIX}tbt-refuse") for n in netns.list_names())


def test_allow_missing_builds_and_records_what_was_left_out(open_lab, caps):
    if caps.has_qdisc("netem"):
        pytest.skip("this kernel has netem: nothing is left out")
    lab = open_lab(pair_spec("tbt-allow", bw="10mbit", delay="5ms", jitter="1ms"), allow_missing=True)
    dropped = {a["direction"]: a["dropped"] for a in lab.applied}
    assert dropped == {"a->b": ["delay", "jitter"], "b->a": ["delay", "jitter"]}
    qdiscs = proc.run(["tc", "qdisc", "show", "dev", "eth1"], netns=lab.links[0].a.netns).stdout
    assert "htb" in qdiscs and "netem" not in qdiscs
