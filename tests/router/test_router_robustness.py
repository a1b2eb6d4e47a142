"""A live router facing malformed input, its metrics endpoint (promtool) and admin API."""
from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from clients import probe_until_received, subscribe
from router import codec
from router.codec import FrameKind


def raw_session(port: int, hello: dict) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(codec.encode_json_frame(FrameKind.HELLO, hello))
    frames, _ = codec.decode_frames(s.recv(4096))
    assert frames and frames[0].kind == FrameKind.HELLO
    return s


def read_until_closed(s: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.parametrize("garbage, reason", [
    (b"GET / HTTP/1.1\r\n\r\n", "bad frame magic"),
    (codec.FRAME_HEADER.pack(b"TB", 99, 0, 0), "unknown frame kind"),
    (codec.encode_frame(FrameKind.DATA, b"\x05\x20\x00\x00\x00\x00\x00\x05\x00\x00\x00\x09abc", flags=5), "malformed message"),
    (codec.encode_frame(FrameKind.DECLARE, b"{oops"), "JSON"),
    (codec.encode_json_frame(FrameKind.DECLARE, {"id": 1, "key": "a//b"}), "empty chunk"),
    (codec.encode_frame(FrameKind.DATA, codec.MESSAGE_HEADER.pack(5, 9, 0, 2, 0) + b"\xff\xfe", flags=5), "UTF-8"),
])
def test_malformed_client_input_closes_that_peer_only(cluster, garbage, reason):
    r = cluster.add("r1")
    cluster.start()
    bad = raw_session(r.client_port, {"role": "client", "name": "evil"})
    bad.sendall(garbage)
    data = read_until_closed(bad)
    bad.close()
    frames, _ = codec.decode_frames(data)
    closes = [f.json() for f in frames if f.kind == FrameKind.CLOSE]
    assert closes and "malformed frame" in closes[0]["reason"] and reason in closes[0]["reason"]
    ev = cluster.wait_event("r1", "client_disconnected", client=next(
        e["client"] for e in r.events() if e["event"] == "client_connected"))
    assert reason in ev["reason"]
    assert cluster.alive("r1")

    async def still_works():
        s, _, rec = await subscribe(r.client_port, "ok/**", "sub")
        await probe_until_received(r.client_port, "ok/x", [rec])
        await s.close()

    asyncio.run(still_works())


def test_malformed_router_input_and_bad_handshakes(cluster):
    r = cluster.add("r1")
    cluster.start()
    # a router peer sending a bad link-state packet
    s = raw_session(r.router_port, {"role": "router", "name": "intruder", "weight": 100})
    cluster.wait_event("r1", "link_up", neighbour="intruder")
    s.sendall(codec.encode_json_frame(FrameKind.LINKSTATE, {"origin": "x", "seq": -1, "links": {}}))
    read_until_closed(s)
    s.close()
    ev = cluster.wait_event("r1", "link_down", neighbour="intruder")
    assert "malformed frame" in ev["reason"]
    # no HELLO at all, then garbage: handshake failure is logged, router survives
    s2 = socket.create_connection(("127.0.0.1", r.router_port), timeout=5)
    s2.sendall(b"\x00" * 16)
    read_until_closed(s2)
    s2.close()
    ev = cluster.wait_event("r1", "peer_disconnected")
    assert "handshake failed" in ev["reason"]
    s3 = socket.create_connection(("127.0.0.1", r.client_port), timeout=5)
    s3.sendall(codec.encode_json_frame(FrameKind.HELLO, {"role": "router", "name": "x"}))
    read_until_closed(s3)
    s3.close()
    assert "handshake failed" in cluster.wait_event("r1", "client_disconnected")["reason"]
    assert cluster.alive("r1")


def test_client_lease_expiry_disconnects_a_silent_client(cluster):
    """A client that says HELLO and then nothing is disconnected by the lease: not
    before ``lease_ms`` (a lower bound no load can break), for the reason the lease
    gives.  How soon after the lease is bench/router_timing_bench.py's to measure."""
    r = cluster.add("r1")
    cluster.start()
    lease_ms = r.config["lease_ms"]
    t_hello = time.time_ns()
    s = raw_session(r.client_port, {"role": "client", "name": "silent"})
    ev = cluster.wait_event("r1", "client_disconnected", timeout=20 * lease_ms / 1000 + 10)
    assert ev["reason"] == f"lease expired: nothing received for {lease_ms / 1000:.3f} s"
    assert ev["ts_ns"] - t_hello >= lease_ms * 1_000_000
    # the router wrote CLOSE with that reason before closing
    frames, _ = codec.decode_frames(read_until_closed(s))
    assert [f.json()["reason"] for f in frames if f.kind == FrameKind.CLOSE] == [ev["reason"]]
    s.close()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (apt-get install prometheus)")
def test_metrics_pass_promtool_and_openmetrics_is_served(cluster):
    cluster.add("a")
    cluster.add("b")
    cluster.link("a", "b")
    cluster.start()
    cluster.wait_links()
    a = cluster.routers["a"]

    async def traffic():
        s, _, rec = await subscribe(cluster.routers["b"].client_port, "m/**", "sub")
        await probe_until_received(a.client_port, "m/x", [rec])
        await s.close()

    asyncio.run(traffic())
    text = a.metrics_text()
    assert 'router_tx_messages_total{peer="b",peer_kind="router",priority="5",priority_name="data"}' in text
    for name in ("router_queue_avg_size_messages", "router_queue_avg_delay_seconds", "router_queue_messages",
                 "router_queue_tried_messages_total", "router_queue_dropped_messages_total",
                 "router_queue_drop_ratio", "router_rx_bytes_total", "router_link_up", "router_info"):
        assert name in text
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    req = urllib.request.Request(f"http://127.0.0.1:{a.metrics_port}/metrics",
                                 headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        om = resp.read().decode()
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
    assert om.rstrip().endswith("# EOF")


def test_admin_api_needs_the_token(cluster):
    r = cluster.add("r1", admin_token="s3cret-token")
    cluster.start()
    url = f"http://127.0.0.1:{r.metrics_port}/admin/linkstate"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url, timeout=5)
    assert err.value.code == 403
    req = urllib.request.Request(url, headers={"Authorization": "Bearer s3cret-token"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        lsps = json.loads(resp.read())
    assert lsps[0]["origin"] == "r1"


def test_ttl_guard_drops_a_message_with_no_hops_left(cluster):
    r = cluster.add("r1")
    cluster.start()
    s = raw_session(r.router_port, {"role": "router", "name": "peer", "weight": 100})
    cluster.wait_event("r1", "link_up", neighbour="peer")
    msgs = [codec.encode_message("t/x", b"p", 5, ttl=1, origin=codec.router_id("peer"))] * 3
    s.sendall(codec.encode_data_frame(msgs, 5))
    deadline = time.monotonic() + 30  # a hang guard: the counter is read until it has all three
    while r.metric("router_ttl_expired_messages_total") < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.metric("router_ttl_expired_messages_total") == 3
    assert r.metric("router_rx_messages_total", peer="peer", priority="5") == 3
    s.close()


def test_sigterm_stops_cleanly(cluster):
    r = cluster.add("r1")
    cluster.start()
    cluster.kill("r1", signal.SIGTERM)
    assert r.proc is not None and r.proc.returncode == 0
    assert any(e["event"] == "stopping" for e in r.events())
