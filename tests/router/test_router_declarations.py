"""Declarations (router/declarations.py, router/keyexpr.KeySet): the per-client limit, link state
batched over many declarations, and issue 26's must-show: a client declaring 20 000 keys beside a
healthy pair, with real router processes (bench/declaration_flood_bench.py's run_flood)."""
from __future__ import annotations

import asyncio

import pytest

from bench.declaration_flood_bench import run_flood
from router.codec import FrameKind
from router.config import config_from_dict
from router.keyexpr import KeySet
from router.node import RouterNode
from routerlab import free_port
from test_router_inprocess import ListEvents, until
from traffic.client import ClosedError, connect


def test_keyset_looks_literals_up_and_scans_only_wildcards():
    ks = KeySet(["a/b", "a/b", "x/*/z", "q/**"])
    assert len(ks) == 3
    assert ks.matches("a/b") and ks.matches("x/y/z") and ks.matches("q/1/2") and not ks.matches("a/c")
    assert ks.matches("a/*")  # a wildcard publication meets the literal keys too
    ks.discard("a/b")
    assert ks.matches("a/b")  # held twice: one declaration is left
    ks.discard("a/b")
    assert not ks.matches("a/b") and len(ks) == 2


async def _router(**limits) -> RouterNode:
    cfg = config_from_dict({"node": "r", "client_listen": [f"127.0.0.1:{free_port()}"], "limits": limits})
    node = RouterNode(cfg, ListEvents("r"))
    await node.start()
    return node


def test_declarations_past_the_limit_close_the_client_with_the_reason():
    async def go():
        node = await _router(declarations_per_client=50)
        port = node.ready_addresses["client"][0].port
        session = await connect("127.0.0.1", port, name="many")
        other = await connect("127.0.0.1", port, name="other")
        try:
            subs = [await session.declare_subscriber(f"k/{i}") for i in range(40)]
            await session.declare_queryable("q/x", lambda q: [])  # queryables count too
            await until(lambda: sum(len(st.subs) + len(st.queryables) for st in node.clients.values()) == 41)
            # the same id declared again replaces its key: not one more declaration
            node.on_control(next(c for c in node.clients if c.peer_name.startswith("many@")), FrameKind.DECLARE,
                            {"id": subs[0].id, "key": "k/replaced"})
            for i in range(40, 60):
                session._conn.send_control(FrameKind.DECLARE, {"id": 1000 + i, "key": f"k/{i}"})
            await until(lambda: session.pipeline.closed)
            with pytest.raises(ClosedError, match=r"too many declarations: 49 subscriptions and 1 queryables "
                                                  r"held, limit 50 \(limits.declarations_per_client\)"):
                await session.declare_subscriber("k/late")
            ev = [e for e in node.events.records if e["event"] == "declarations_refused"]
            assert len(ev) == 1 and ev[0]["endpoint"].startswith("many@") and ev[0]["limit"] == 50
            assert node.counters.declarations_refused == 1
            await other.declare_subscriber("k/fine")  # the others are not affected
            await until(lambda: any(st.subs for c, st in node.clients.items() if c.peer_name.startswith("other@")))
        finally:
            await other.close(2)
            await session.close(2)
            await node.stop()
    asyncio.run(go())


def test_many_declarations_cost_a_few_link_state_packets_not_one_each():
    async def go():
        node = await _router()
        port = node.ready_addresses["client"][0].port
        session = await connect("127.0.0.1", port, name="many")
        seq0 = node._seq
        try:
            for i in range(5000):
                session._conn.send_control(FrameKind.DECLARE, {"id": i, "key": f"k/{i}"})
            await until(lambda: node.lsdb.get("r") is not None and len(node.lsdb.get("r").subs) == 5000, 30)
            return node._seq - seq0
        finally:
            await session.close(2)
            await node.stop()
    originated = asyncio.run(go())
    assert 1 <= originated <= 100, originated  # one per declaration before: 5 000, each carrying every key


@pytest.mark.parametrize("limit", [None, 30_000], ids=["default-limit", "limit-raised"])
def test_a_declaration_flood_leaves_a_healthy_pair_alone(tmp_path, limit):
    """Issue 26's must-show: 20 000 DECLARE frames from one client while a healthy pair runs through
    the same router (before: the router stopped answering for over 3 s, the healthy publisher's lease
    expired, 0 messages meanwhile)."""
    out = run_flood(tmp_path, routers=1, declarations=20_000, limit=limit)
    print(out)
    assert out["healthy_lease_expired"] == 0 and not out["healthy_errors"], out
    assert out["healthy_before_msg_s"] > 100 and out["ratio"] >= 0.8, out
    assert out["rss_after_mb"] - out["rss_before_mb"] < 64, out  # bounded: ~8 MB measured for 20 000 keys
    if limit is None:
        assert out["flooder_refused"] and out["refused_event"]["declarations"] == 10_000, out
        assert "too many declarations" in out["flooder_close_text"], out
    else:
        assert not out["flooder_refused"] and out["converged_s"] is not None, out
    assert out["lsps_originated"] <= 100, out


def test_a_line_of_routers_learns_20_000_keys_and_its_other_clients_are_unaffected(tmp_path):
    """The flood on the first router of a 3-router line, the healthy pair across the line (the bench
    runs the 10-router line: docs/benchmarks.md)."""
    out = run_flood(tmp_path, routers=3, declarations=20_000, limit=30_000)
    print(out)
    assert out["healthy_lease_expired"] == 0 and not out["healthy_errors"], out
    assert out["ratio"] >= 0.8 and out["converged_s"] is not None, out
