"""Congestion-aware routing, in process: monitor decisions (hysteresis edges),
data trees, data weight propagation, pinning, unpinning and expiry, the admin
weights API and the off switch."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from types import SimpleNamespace

import pytest

from router.config import ConfigError, config_from_dict
from router.congestion import (
    BLOCK, RESTORE, CongestionMonitor, Decision, decide, default_buffer, payload_capacity,
)
from router.metrics import HttpServer, make_registry
from router.node import RouterNode, tree_sets_for
from router.routing import RoutingTable
from test_router_inprocess import DIAMOND, ListEvents, routing_settled, subscribe_at_d, until
from test_router_routing import lsdb_of
from routerlab import free_port

MBIT = 1_000_000


# ------------------------------------------------------------------ monitor decisions


PAYLOAD_10M = 10 * MBIT * 1448 / 1514  # what a 10 Mbit/s shaper leaves for TCP payload in full segments


def test_the_capacity_is_what_the_shaper_leaves_for_the_bytes_written():
    assert payload_capacity(10 * MBIT) == pytest.approx(PAYLOAD_10M) == pytest.approx(9_564_069, abs=1)
    # a saturated link: its payload capacity minus what the high priorities took is what data can have; with
    # the 5 % buffer that is 5 % of the capacity above cap_limit (counted against the whole frames' rate, it
    # was 0.6 %: a coin flip per interval)
    for high in (0, 1 * MBIT, 2 * MBIT):
        kind, limit = decide(False, PAYLOAD_10M - high, high, 10 * MBIT, default_buffer(10 * MBIT, None), 0.2)
        assert kind == BLOCK and PAYLOAD_10M - high - limit == pytest.approx(500_000)


def test_block_only_strictly_above_cap_limit():
    # capacity 10M (9.564M of payload), high 1M, buffer 0.5M -> cap_limit 8.064M
    limit = PAYLOAD_10M - 1.5 * MBIT
    assert decide(False, limit, 1 * MBIT, 10 * MBIT, 0.5 * MBIT, 0.2) == (None, pytest.approx(limit))
    assert decide(False, limit + 1, 1 * MBIT, 10 * MBIT, 0.5 * MBIT, 0.2)[0] == BLOCK
    # high-priority traffic lowers the limit: the same data rate blocks when realtime grows
    assert decide(False, 7.5 * MBIT, 1 * MBIT, 10 * MBIT, 0.5 * MBIT, 0.2)[0] is None
    assert decide(False, 7.5 * MBIT, 2 * MBIT, 10 * MBIT, 0.5 * MBIT, 0.2)[0] == BLOCK
    # no data at all never blocks, even when high priority alone exceeds the capacity
    assert decide(False, 0, 12 * MBIT, 10 * MBIT, 0.5 * MBIT, 0.2)[0] is None


def test_restore_only_strictly_below_recovery_ratio_while_blocked():
    limit = PAYLOAD_10M - 1.5 * MBIT
    at = 0.2 * limit
    assert decide(True, at, 1 * MBIT, 10 * MBIT, 0.5 * MBIT, 0.2)[0] is None  # exactly 20%: stays blocked
    assert decide(True, at - 1, 1 * MBIT, 10 * MBIT, 0.5 * MBIT, 0.2)[0] == RESTORE
    assert decide(True, 5 * MBIT, 1 * MBIT, 10 * MBIT, 0.5 * MBIT, 0.2)[0] is None  # hysteresis band
    assert decide(True, 9 * MBIT, 1 * MBIT, 10 * MBIT, 0.5 * MBIT, 0.2)[0] is None  # already blocked
    assert decide(False, 0, 1 * MBIT, 10 * MBIT, 0.5 * MBIT, 0.2)[0] is None  # not blocked: nothing to restore


def test_default_buffer_is_five_percent():
    assert default_buffer(10 * MBIT, None) == 500_000
    assert default_buffer(10 * MBIT, 0) == 0


def test_monitor_measures_per_priority_throughput_from_tx_counters():
    m = CongestionMonitor((4, 5, 6, 7), (0, 1, 2, 3), None, 0.2)
    tx = [0] * 8
    assert m.tick(0.0, [("b", 1, 10 * MBIT, tx)]) == []  # baseline only
    tx = [0, 125_000, 0, 0, 0, 1_250_000, 0, 0]  # 1 Mbit/s realtime, 10 Mbit/s data in 1 s
    (d,) = m.tick(1.0, [("b", 1, 10 * MBIT, tx)])
    assert d.kind == BLOCK and d.data_bps == 10 * MBIT and d.high_bps == 1 * MBIT
    assert d.cap_limit_bps == pytest.approx(PAYLOAD_10M - 1 * MBIT - 500_000)
    assert m.links["b"].blocked and m.links["b"].decisions[BLOCK] == 1
    # data moved away: 0.1 Mbit/s in the next 0.5 s -> below 20% of the limit -> restore
    tx2 = list(tx)
    tx2[5] += 6_250
    (d,) = m.tick(1.5, [("b", 1, 10 * MBIT, tx2)])
    assert d.kind == RESTORE and d.data_bps == pytest.approx(100_000)
    # a new connection (reconnect) resets the baseline instead of measuring across it
    assert m.tick(2.5, [("b", 2, 10 * MBIT, [0] * 8)]) == []
    # a link without capacity is never measured
    assert m.tick(3.0, [("c", 3, None, tx)]) == [] and "c" not in m.links


# ------------------------------------------------------------------ config and trees


def test_config_defaults_and_rejections():
    base = {"node": "r1", "client_listen": ["127.0.0.1:1"]}
    cfg = config_from_dict(dict(base))
    assert cfg.congestion_aware and cfg.monitor_interval_ms == 1000 and cfg.flow_ttl_ms == 5000
    assert cfg.data_priorities == (4, 5, 6, 7) and cfg.high_priorities == (0, 1, 2, 3)
    assert cfg.block_weight == 65535 and cfg.restore_weight is None and cfg.recovery_ratio == 0.2
    assert cfg.monitor_buffer_bps is None and cfg.tcp_notsent_lowat == 32768
    cfg = config_from_dict(dict(base, data_priorities=["data", 7], tcp_notsent_lowat=0,
                                neighbours=[{"name": "r2", "address": "x", "port": 1, "link_capacity_bps": 10 * MBIT,
                                             "data_weight": 7}]))
    assert cfg.data_priorities == (5, 7) and cfg.tcp_notsent_lowat is None
    assert cfg.neighbours[0].link_capacity_bps == 10 * MBIT and cfg.neighbours[0].capacity_bps is None
    for patch, msg in [({"congestion_aware": "yes"}, "congestion_aware"), ({"data_priorities": [9]}, "unknown priority"),
                       ({"recovery_ratio": 1.5}, "recovery_ratio"), ({"restore_weight": 70000}, "restore_weight"),
                       ({"neighbours": [{"name": "r2", "address": "x", "port": 1, "link_capacity_bps": 0}]},
                        "link_capacity_bps")]:
        with pytest.raises(ConfigError, match=msg):
            config_from_dict(dict(base, **patch))


def test_data_trees_from_data_weights_serve_the_configured_priorities():
    # a - b - d and a - c - d; the data weight of b-d is blocked at b
    db = lsdb_of([("a", "b", 100), ("a", "c", 100), ("b", "d", 100), ("c", "d", 100)], subs={"d": ["k/**"]},
                 extra={"b": {"data": {"a": 100, "d": 65535}}})
    rt = RoutingTable("a", tree_sets_for((4, 5, 6, 7)))
    rt.recompute(db)
    for p in (0, 1, 2, 3):
        assert rt.next_hops(p, "a", "k/x") == ("b",), f"priority {p} uses the default trees"
    for p in (4, 5, 6, 7):
        assert rt.next_hops(p, "a", "k/x") == ("c",), f"priority {p} uses the data trees"
    # configurable: only Background on the data trees
    rt = RoutingTable("a", tree_sets_for((7,)))
    rt.recompute(db)
    assert rt.next_hops(5, "a", "k/x") == ("b",) and rt.next_hops(7, "a", "k/x") == ("c",)
    # a weight on one direction counts for that direction only (b -> d); d -> b is unchanged
    assert rt.trees["data"]["d"].parent["a"] == "b"


# ------------------------------------------------------------------ in-process diamond


async def diamond(**extra):
    ports = {n: free_port() for n in "abcd"}
    links = {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}
    nodes = {}
    for n in "abcd":
        cfg = config_from_dict(dict({"node": n, "router_listen": [f"127.0.0.1:{ports[n]}"], "lease_ms": 1000,
                                     "route_debounce_ms": 5, "monitor_interval_ms": 60000, "flow_sweep_ms": 60000,
                                     "neighbours": [{"name": m, "address": "127.0.0.1", "port": ports[m]}
                                                    for m in links[n]]}, **extra))
        nodes[n] = RouterNode(cfg, ListEvents(n))
    for node in nodes.values():
        await node.start()
    await until(lambda: routing_settled(nodes, DIAMOND))
    subscribe_at_d(nodes)
    # c's and d's () hold before their trees are computed: converged routing first (no computation pending)
    await until(lambda: routing_settled(nodes, DIAMOND) and all(
        nd.routing.next_hops(5, "a", "k/x") == {"a": ("b",), "b": ("d",), "c": (), "d": ()}[n]
        for n, nd in nodes.items()))
    return nodes


async def stop(nodes):
    for n in nodes.values():
        await n.stop()


def events(node, name):
    return [e for e in node.events.records if e["event"] == name]


CLIENT = SimpleNamespace(kind="client", peer_name="pub@127.0.0.1:1")


def see(node, origin: str, key: str, prev, prio: int = 5):
    """What the fast path does for one message of a flow (cache miss + touch)."""
    from router.codec import router_id
    now = time.time_ns()
    ck = (node.routing.set_of_priority[prio], router_id(origin), key.encode())
    cached = node._remote_cache.get(ck)
    if cached is None:
        cached = node._remote_cache[ck] = node._targets(ck[0], ck[1], ck[2], prio, now)
    targets, flow = cached
    if flow is not None:
        flow.last_ns = now
        flow.prev = prev
    return tuple(t.peer_name for t in targets), flow


def test_admin_data_weight_floods_to_every_router_and_moves_only_data():
    async def go():
        nodes = await diamond()
        try:
            a, d = nodes["a"], nodes["d"]
            a.admin_set_weights({"neighbour": "b", "data_weight": 5000})
            await until(lambda: all(nd.lsdb.get("a").extra["data"]["b"] == 5000 for nd in nodes.values()))
            await until(lambda: a.routing.next_hops(5, "a", "k/x") == ("c",))
            assert a.routing.next_hops(1, "a", "k/x") == ("b",)
            assert nodes["c"].routing.next_hops(5, "a", "k/x") == ("d",)
            (ev,) = events(a, "weight_changed")
            assert ev == dict(ev, neighbour="b", tree="data", weight_before=100, weight_after=5000, source="admin")
            await until(lambda: any(e.get("router") == "a" for e in events(d, "weight_changed")))
            (ev,) = [e for e in events(d, "weight_changed") if e.get("router") == "a"]
            assert ev == dict(ev, neighbour="b", tree="data", weight_before=100, weight_after=5000, source="linkstate")
            assert any(e["event"] == "trees_recomputed" for e in d.events.records)
            with pytest.raises(ValueError):
                a.admin_set_weights({"neighbour": "zz", "data_weight": 5})
            with pytest.raises(ValueError):
                a.admin_set_weights({"neighbour": "b", "data_weight": 0})
            a.admin_set_weights({"neighbour": "b", "data_weight": None})  # back to the configured value
            await until(lambda: a.routing.next_hops(5, "a", "k/x") == ("b",))
        finally:
            await stop(nodes)
    asyncio.run(go())


def block_at_b(b):
    d = Decision("d", BLOCK, 9.9 * MBIT, 0.1 * MBIT, 10 * MBIT, 9.4 * MBIT)
    b.monitor.links.setdefault("d", SimpleNamespace(blocked=True, data_bps=0, high_bps=0, cap_limit_bps=0,
                                                    decisions={}))
    b._apply_decision(d)


def test_block_pins_upstream_flows_to_the_detour_and_restore_does_not_move_them_back():
    async def go():
        nodes = await diamond(flow_ttl_ms=300)
        try:
            a, b, c = nodes["a"], nodes["b"], nodes["c"]
            assert see(a, "a", "k/data", CLIENT)[0] == ("b",)
            assert see(b, "a", "k/data", b.routers["a"])[0] == ("d",)
            assert see(a, "a", "k/rt", CLIENT, prio=1) == (("b",), None)  # default trees: not tracked
            block_at_b(b)
            (ev,) = events(b, "congestion_detected")
            assert ev["neighbour"] == "d" and ev["weight_before"] == 100 and ev["weight_after"] == 65535
            assert ev["data_bps"] == 9_900_000 and ev["cap_limit_bps"] == 9_400_000
            # b keeps the flow on b-d for what is already on its way, and asks a to move it
            (pin_b,) = events(b, "flow_pinned")
            assert pin_b == dict(pin_b, key="k/data", origin="a", next_hop=["d"], reason="local_block")
            await until(lambda: events(a, "flow_pinned"))
            (pin_a,) = events(a, "flow_pinned")
            assert pin_a == dict(pin_a, key="k/data", next_hop=["c"], previous_next_hop=["b"], reason="upstream_request")
            assert see(a, "a", "k/data", CLIENT)[0] == ("c",)
            assert see(a, "a", "k/rt", CLIENT, prio=1)[0] == ("b",), "realtime stays"
            assert see(c, "a", "k/data", c.routers["a"])[0] == ("d",)
            # the link is restored: the data trees go through b again, the pinned flow stays on c
            b._apply_decision(Decision("d", RESTORE, 0.1 * MBIT, 0.1 * MBIT, 10 * MBIT, 9.4 * MBIT))
            await until(lambda: a.routing.next_hops(5, "a", "k/data") == ("b",))
            await asyncio.sleep(0.05)
            assert see(a, "a", "k/data", CLIENT)[0] == ("c",)
            assert see(c, "a", "k/data", c.routers["a"])[0] == ("d",)
            # c's flow would have lost its route (c is a leaf of a's data tree again): kept where it is
            assert [e["reason"] for e in events(c, "flow_pinned")] == ["route_change"]
            assert see(a, "a", "k/new", CLIENT)[0] == ("b",), "a new flow follows the restored trees"
            # idle past the TTL: expired and unpinned; when it comes back it follows the trees
            await asyncio.sleep(0.35)
            assert a.sweep_flows() == 2
            assert {e["key"] for e in events(a, "flow_expired")} == {"k/data", "k/new"}
            (unpin,) = events(a, "flow_unpinned")
            assert unpin == dict(unpin, key="k/data", next_hop=["c"], reason="ttl")
            assert see(a, "a", "k/data", CLIENT)[0] == ("b",)
            assert len(a.flows) == 1 and a.flows.pinned_count() == 0
        finally:
            await stop(nodes)
    asyncio.run(go())


def test_pins_cascade_upstream():
    # line u - a, plus the diamond: a flow from u to d crosses a then b; b blocks b-d
    async def go():
        nodes = await diamond()
        try:
            a, b = nodes["a"], nodes["b"]
            fake_u = SimpleNamespace(kind="router", peer_name="u")
            sent = []
            a.routers["u"] = SimpleNamespace(send_control=lambda kind, obj: sent.append(obj), kind="router",
                                             peer_name="u")
            # a flow that entered at a from router u (origin a for routing, previous hop u)
            see(a, "a", "k/far", fake_u)
            see(b, "a", "k/far", b.routers["a"])
            block_at_b(b)
            await until(lambda: sent)
            assert sent[0]["pin"]["flows"] == [{"origin": "a", "key": "k/far"}]
            assert sent[0]["pin"]["link"] == ["b", "d"]
            await until(lambda: events(a, "flow_pinned"))
            del a.routers["u"]
        finally:
            await stop(nodes)
    asyncio.run(go())


def test_weight_change_pins_active_flows_where_they_are():
    async def go():
        nodes = await diamond()
        try:
            a = nodes["a"]
            see(a, "a", "k/old", CLIENT)
            a.admin_set_weights({"neighbour": "b", "data_weight": 5000})
            await until(lambda: a.routing.next_hops(5, "a", "k/x") == ("c",))
            await until(lambda: events(a, "flow_pinned"))
            assert see(a, "a", "k/old", CLIENT)[0] == ("b",), "an active flow stays"
            assert see(a, "a", "k/young", CLIENT)[0] == ("c",), "a new flow takes the new trees"
            assert events(a, "flow_pinned")[0]["reason"] == "route_change"
            # a link going down unpins what was pinned to it
            a._unpin_via("b", "link_down")
            assert events(a, "flow_unpinned")[0]["reason"] == "link_down"
        finally:
            await stop(nodes)
    asyncio.run(go())


def test_congestion_awareness_off_never_pins_or_monitors():
    async def go():
        nodes = await diamond(congestion_aware=False)
        try:
            a = nodes["a"]
            assert not any(t.get_name() == "congestion-monitor" for t in a._tasks)
            see(a, "a", "k/old", CLIENT)
            a.admin_set_weights({"neighbour": "b", "data_weight": 5000})
            await until(lambda: a.routing.next_hops(5, "a", "k/x") == ("c",))
            await asyncio.sleep(0.05)
            assert see(a, "a", "k/old", CLIENT)[0] == ("c",)
            assert not events(a, "flow_pinned")
        finally:
            await stop(nodes)
    asyncio.run(go())


def test_admin_weights_endpoint_needs_the_token():
    async def http(port, method, path, body=None, token=None):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        data = json.dumps(body).encode() if body is not None else b""
        hdr = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n"
        if token:
            hdr += f"Authorization: Bearer {token}\r\n"
        w.write(hdr.encode() + b"\r\n" + data)
        resp = await r.read()
        w.close()
        head, _, payload = resp.partition(b"\r\n\r\n")
        return int(head.split()[1]), payload

    async def go():
        nodes = await diamond()
        srv = HttpServer(nodes["a"], make_registry(nodes["a"]), "secret-token")
        port = await srv.start("127.0.0.1", 0)
        try:
            body = {"neighbour": "b", "data_weight": 777}
            assert (await http(port, "POST", "/admin/weights", body))[0] == 403
            assert (await http(port, "POST", "/admin/weights", body, token="wrong-token"))[0] == 403
            assert nodes["a"]._data_weight("b") == 100
            status, payload = await http(port, "POST", "/admin/weights", body, token="secret-token")
            assert status == 200 and json.loads(payload)["b"]["data_weight"] == 777
            await until(lambda: nodes["d"].lsdb.get("a").extra["data"]["b"] == 777)
            status, payload = await http(port, "POST", "/admin/weights", {"neighbour": "b", "data_weight": "x"},
                                         token="secret-token")
            assert status == 400 and b"data_weight" in payload
            status, payload = await http(port, "GET", "/metrics")
            assert b'router_link_data_weight{neighbour="b"} 777.0' in payload
        finally:
            srv.close()
            await stop(nodes)
    asyncio.run(go())


def test_restore_returns_to_the_configured_data_weight():
    """Links weighted 10 (not the reference's 100): restoring must not leave them at 100,
    or the data trees would stay on the detour for ever."""
    async def go():
        nodes = await diamond()
        try:
            b = nodes["b"]
            b.neighbour_cfg["d"] = dataclasses.replace(b.neighbour_cfg["d"], data_weight=10)
            assert b._data_weight("d") == 10
            block_at_b(b)
            assert b._data_weight("d") == 65535
            b._apply_decision(Decision("d", RESTORE, 0.1 * MBIT, 0.1 * MBIT, 10 * MBIT, 9.4 * MBIT))
            (cleared,) = events(b, "congestion_cleared")
            assert (cleared["weight_before"], cleared["weight_after"]) == (65535, 10)
            assert b._data_weight("d") == 10 and "d" not in b.weight_overrides.get("data", {})
            restored = [e for e in events(b, "weight_changed") if e["weight_before"] == 65535]
            assert [(e["weight_after"], e["source"]) for e in restored] == [(10, "monitor")]
        finally:
            await stop(nodes)
    asyncio.run(go())


# ------------------------------------------------------------------ link capacity changed at run time


def test_monitor_decides_against_a_capacity_set_at_run_time():
    """The configured capacity is 10 Mbit/s; 8 Mbit/s of Data is fine.  The link is
    narrowed to 6 Mbit/s through the admin call: the next tick blocks it against the
    new cap_limit (6M - high - 5% buffer).  Capacity removed (null): restored."""
    async def go():
        nodes = await diamond()
        try:
            b = nodes["b"]
            b.neighbour_cfg["d"] = dataclasses.replace(b.neighbour_cfg["d"], link_capacity_bps=10 * MBIT)
            tx = b.routers["d"].pipeline.tx.bytes
            assert b.monitor_tick(now=100.0) == []  # baseline
            tx[5] += 1_000_000  # 8 Mbit/s for 1 s
            assert b.monitor_tick(now=101.0) == []
            assert b.monitor.links["d"].cap_limit_bps == pytest.approx(PAYLOAD_10M - 500_000)
            answer = b.admin_set_capacity({"neighbour": "d", "capacity_bps": 6 * MBIT, "reason": "set_link b-d"})
            assert answer == dict(answer, neighbour="d", capacity_bps_before=10 * MBIT, capacity_bps=6 * MBIT,
                                  configured_capacity_bps=10 * MBIT, congested=False, up=True)
            (changed,) = events(b, "link_capacity_changed")
            assert changed == dict(changed, neighbour="d", capacity_bps_before=10 * MBIT, capacity_bps_after=6 * MBIT,
                                   source="admin", reason="set_link b-d")
            tx[5] += 1_000_000  # the same 8 Mbit/s
            tx[1] += 62_500  # and 0.5 Mbit/s of RealTime
            (d,) = b.monitor_tick(now=102.0)
            assert d.kind == BLOCK and d.capacity_bps == 6 * MBIT
            assert d.cap_limit_bps == pytest.approx(0.6 * PAYLOAD_10M - 500_000 - 300_000)
            (ev,) = events(b, "congestion_detected")
            assert ev["capacity_bps"] == 6 * MBIT and ev["cap_limit_bps"] == 4_938_441 and ev["data_bps"] == 8 * MBIT
            assert b.weights_view()["d"]["link_capacity_bps"] == 6 * MBIT
            assert b.capacity_view()["d"]["cap_limit_bps"] == 4_938_441
            # capacity unknown: nothing to decide against; the block is lifted at the next tick
            b.admin_set_capacity({"neighbour": "d", "capacity_bps": None})
            tx[5] += 1_000_000
            (d,) = b.monitor_tick(now=103.0)
            assert d.kind == RESTORE and d.capacity_bps is None
            assert not b.monitor.links["d"].blocked and b._data_weight("d") == 100
            assert b.monitor_tick(now=104.0) == []
            # given again: a new baseline first, then decisions against it
            b.admin_set_capacity({"neighbour": "d", "capacity_bps": 2 * MBIT})
            assert b.monitor_tick(now=105.0) == []
            tx[5] += 1_000_000
            (d,) = b.monitor_tick(now=106.0)
            assert d.kind == BLOCK and d.capacity_bps == 2 * MBIT
            assert [(e["capacity_bps_before"], e["capacity_bps_after"]) for e in events(b, "link_capacity_changed")] \
                == [(10 * MBIT, 6 * MBIT), (6 * MBIT, None), (None, 2 * MBIT)]
        finally:
            await stop(nodes)
    asyncio.run(go())


def test_admin_capacity_rejects_bad_requests():
    async def go():
        nodes = await diamond()
        try:
            a = nodes["a"]
            for body, msg in [({"neighbour": "zz", "capacity_bps": 5}, "not a neighbour"),
                              ({"neighbour": "b"}, "give capacity_bps"),
                              ({"neighbour": "b", "capacity_bps": 0}, "positive integer"),
                              ({"neighbour": "b", "capacity_bps": "10mbit"}, "positive integer"),
                              ({"neighbour": "b", "capacity_bps": True}, "positive integer"),
                              ({"neighbour": "b", "capacity_bps": 5, "bw": 1}, "unknown key"),
                              ([1], "JSON object")]:
                with pytest.raises(ValueError, match=msg):
                    a.admin_set_capacity(body)
            from router.node import LinkMismatch
            with pytest.raises(LinkMismatch, match="not at 10.9.9.9"):
                a.admin_set_capacity({"neighbour": "b", "capacity_bps": 5, "address": "10.9.9.9"})
            assert not events(a, "link_capacity_changed") and a.link_capacity("b") is None
            a.admin_set_capacity({"neighbour": "b", "capacity_bps": 5, "address": "127.0.0.1"})
            assert a.link_capacity("b") == 5
        finally:
            await stop(nodes)
    asyncio.run(go())


def test_admin_capacity_endpoint_needs_the_token_and_says_why_it_refuses():
    async def http(port, method, path, body=None, token=None):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        data = json.dumps(body).encode() if body is not None else b""
        hdr = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n"
        if token:
            hdr += f"Authorization: Bearer {token}\r\n"
        w.write(hdr.encode() + b"\r\n" + data)
        resp = await r.read()
        w.close()
        head, _, payload = resp.partition(b"\r\n\r\n")
        return int(head.split()[1]), payload

    async def go():
        nodes = await diamond()
        srv = HttpServer(nodes["a"], make_registry(nodes["a"]), "secret-token")
        port = await srv.start("127.0.0.1", 0)
        try:
            body = {"neighbour": "b", "capacity_bps": 3 * MBIT}
            assert (await http(port, "POST", "/admin/capacity", body))[0] == 403
            assert (await http(port, "POST", "/admin/capacity", body, token="wrong-token"))[0] == 403
            assert (await http(port, "GET", "/admin/capacity"))[0] == 403
            assert nodes["a"].link_capacity("b") is None
            status, payload = await http(port, "POST", "/admin/capacity", body, token="secret-token")
            assert status == 200 and json.loads(payload)["capacity_bps"] == 3 * MBIT
            status, payload = await http(port, "GET", "/admin/capacity", token="secret-token")
            assert status == 200 and json.loads(payload)["b"]["capacity_bps"] == 3 * MBIT
            status, payload = await http(port, "PUT", "/admin/capacity", {"neighbour": "b", "capacity_bps": -1},
                                         token="secret-token")
            assert status == 400 and b"capacity_bps" in payload
            status, payload = await http(port, "POST", "/admin/capacity",
                                         {"neighbour": "b", "capacity_bps": 1, "address": "10.1.1.1"},
                                         token="secret-token")
            assert status == 409 and b"not at 10.1.1.1" in payload
            status, payload = await http(port, "GET", "/metrics")
            assert b'router_link_capacity_bps{neighbour="b"} 3e+06' in payload or \
                b'router_link_capacity_bps{neighbour="b"} 3000000.0' in payload
        finally:
            srv.close()
            await stop(nodes)
    asyncio.run(go())
