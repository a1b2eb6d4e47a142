"""Routers in one asyncio loop (no subprocesses): the weight-change hook that a
congestion monitor will drive, and a second tree set with its own weights."""
from __future__ import annotations

import asyncio

import pytest
from typing import Dict, List, Tuple

from router.config import config_from_dict
from router.events import EventLog
from router.node import RouterNode
from router.routing import RoutingTable, TreeSetSpec
from routerlab import free_port


class ListEvents(EventLog):
    def __init__(self, node: str) -> None:
        self.node = node
        self.records: List[Dict] = []

    def emit(self, event: str, **fields) -> None:
        self.records.append(dict(fields, event=event))

    def close(self) -> None:
        pass


#: the diamond's links, both ends of each: a - b - d and a - c - d
DIAMOND = {"a": "bc", "b": "ad", "c": "ad", "d": "bc"}


def routing_settled(nodes: Dict[str, RouterNode], links: Dict[str, str]) -> bool:
    """Routing has converged: every router holds every router's latest LSP (the sequence number its
    origin last gave it), those LSPs give the links ``links`` (each reported by both ends), and no tree
    computation is pending, so each router's trees were computed on that database.  That every LSP has
    arrived is not enough: a router computes its trees ``route_debounce_ms`` after a change, or later:
    ``route_hold_factor`` times the last computation's duration after that one ended (a first
    computation that took 25 ms on a crowded machine holds the next one back 0.25 s)."""
    latest = {o: nd.lsdb.get(o).seq for o, nd in nodes.items()}
    want = {o: set(ls) for o, ls in links.items()}
    return all({p.origin: p.seq for p in nd.lsdb.all()} == latest
               and {o: set(nb) for o, nb in nd.lsdb.edges().items()} == want
               and nd._recompute_handle is None for nd in nodes.values())


async def diamond(tree_sets=None, **settings) -> Dict[str, RouterNode]:
    """Four routers in this loop, returned once routing has converged (``routing_settled``)."""
    ports = {n: free_port() for n in "abcd"}
    links = {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}
    nodes = {}
    for n in "abcd":
        cfg = config_from_dict({"node": n, "router_listen": [f"127.0.0.1:{ports[n]}"], "lease_ms": 1000,
                                "route_debounce_ms": 5,
                                "neighbours": [{"name": m, "address": "127.0.0.1", "port": ports[m]}
                                               for m in links[n]], **settings})
        node = RouterNode(cfg, ListEvents(n))
        if tree_sets:
            node.routing = RoutingTable(n, tree_sets)
        nodes[n] = node
    for node in nodes.values():
        await node.start()
    await until(lambda: routing_settled(nodes, DIAMOND))
    return nodes


async def until(pred, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.02)


async def one_router() -> Tuple[RouterNode, int]:
    """A router "a" alone, started, with a client port (returned): stop it with ``await node.stop()``."""
    port = free_port()
    node = RouterNode(config_from_dict({"node": "a", "router_listen": [f"127.0.0.1:{free_port()}"],
                                        "client_listen": [f"127.0.0.1:{port}"]}), ListEvents("a"))
    await node.start()
    return node, port


def record_query_frames(session, frames: List) -> None:
    """Every QUERY/REPLY frame the router sends ``session`` is appended to ``frames`` as (header, payload)."""
    handle = session.on_query
    session.on_query = lambda conn, kind, header, payload: (frames.append((header, payload)),
                                                            handle(conn, kind, header, payload))


def subscribe_at_d(nodes) -> None:
    d = nodes["d"]
    # as if a client of d subscribed: re-originate d's LSP with a subscription
    d._local_sub_keys = lambda: ("k/**",)  # type: ignore[method-assign]
    d._originate_lsp()


def test_set_link_weight_reroutes_and_is_reported():
    async def go():
        nodes = await diamond()
        try:
            subscribe_at_d(nodes)
            a = nodes["a"]
            await until(lambda: a.routing.next_hops(5, "a", "k/x") == ("b",))  # tie broken by name
            a.set_link_weight("b", 1000, reason="test")
            await until(lambda: a.routing.next_hops(5, "a", "k/x") == ("c",))
            # every router agrees: b no longer forwards a's traffic to d
            b = nodes["b"]
            await until(lambda: b.routing.next_hops(5, "a", "k/x") == ())
            ev = [e for e in a.events.records if e["event"] == "weight_changed"]
            assert ev and ev[0]["weight_before"] == 100 and ev[0]["weight_after"] == 1000
            assert ev[0]["tree"] == "default" and ev[0]["source"] == "admin"
            a.clear_link_weight("b")
            await until(lambda: a.routing.next_hops(5, "a", "k/x") == ("b",))
        finally:
            for n in nodes.values():
                await n.stop()
    asyncio.run(go())


def test_data_tree_set_with_own_weights_only_moves_data_priorities():
    specs = [TreeSetSpec("default", "", frozenset(range(0, 4))), TreeSetSpec("data", "data", frozenset(range(4, 8)))]

    async def go():
        nodes = await diamond(specs)
        try:
            subscribe_at_d(nodes)
            a = nodes["a"]
            await until(lambda: a.routing.next_hops(5, "a", "k/x") == ("b",))
            a.set_link_weight("b", 65535, weight_set="data", reason="congested")
            await until(lambda: a.routing.next_hops(5, "a", "k/x") == ("c",))
            assert a.routing.next_hops(1, "a", "k/x") == ("b",), "RealTime keeps its route"
            assert nodes["d"].lsdb.get("a").extra == {"data": {"b": 65535, "c": 100}}
        finally:
            for n in nodes.values():
                await n.stop()
    asyncio.run(go())


def test_a_subscription_is_applied_at_once_while_tree_computations_are_held_back():
    """Every router's last tree computation "took" 2 s, so route_hold_factor (10) holds a link or
    weight change back 20 s (no ceiling here); a new subscription still reaches every router as fast as the
    LSP floods, because it changes no tree (a 100-router run dropped its first 9 s of traffic for
    "no route" before this)."""
    async def go():
        nodes = await diamond(route_hold_max_ms=0)
        try:
            loop = asyncio.get_running_loop()
            for n in nodes.values():
                assert n._recompute_handle is None  # diamond() returns with no computation pending
                n._last_recompute = (loop.time(), 2.0)
            a, b = nodes["a"], nodes["b"]
            t0 = loop.time()
            subscribe_at_d(nodes)
            await until(lambda: a.routing.next_hops(5, "a", "k/x") == ("b",)
                        and b.routing.next_hops(5, "a", "k/x") == ("d",), timeout=2.0)
            assert loop.time() - t0 < 2.0
            assert any(e["event"] == "subscriptions_updated" and e["router"] == "d" for e in a.events.records)
            assert a._recompute_handle is None, "a subscription alone computes no trees"
            recomputed = a.counters.trees_recomputed
            # a weight change is still held back by the hold-down
            nodes["d"].set_link_weight("b", 1000, reason="test")
            await until(lambda: a.lsdb.get("d").links.get("b") == 1000, timeout=2.0)
            await asyncio.sleep(0.3)
            assert a._recompute_handle is not None and a.counters.trees_recomputed == recomputed
            assert a.routing.next_hops(5, "a", "k/x") == ("b",), "trees unchanged until the held computation"
        finally:
            for n in nodes.values():
                await n.stop()
    asyncio.run(go())


def test_the_hold_back_of_a_tree_computation_has_a_ceiling():
    """A computation that "took" 30 s would hold the next change back 300 s; route_hold_max_ms
    (here 300 ms) bounds how long a router forwards on stale trees."""
    async def go():
        nodes = await diamond(route_hold_max_ms=300)
        try:
            loop = asyncio.get_running_loop()
            subscribe_at_d(nodes)
            a = nodes["a"]
            await until(lambda: a.routing.next_hops(5, "a", "k/x") == ("b",))
            a._last_recompute = (loop.time(), 30.0)
            t0 = loop.time()
            nodes["d"].set_link_weight("b", 1000, reason="test")
            nodes["b"].set_link_weight("d", 1000, reason="test")
            await until(lambda: a.routing.next_hops(5, "a", "k/x") == ("c",), timeout=3.0)
            assert 0.25 <= loop.time() - t0 < 3.0
        finally:
            for n in nodes.values():
                await n.stop()
    asyncio.run(go())


def test_a_served_query_whose_time_is_up_is_forgotten_and_the_sweep_stops_when_none_is_left():
    """The serving router forgets a query its queryable never answered once the query's time is up
    (one sweep timer for all, not a timer per query), and the sweep is not armed while nothing is served."""
    from traffic.client import connect

    async def go():
        node, port = await one_router()
        never = asyncio.Event()

        async def silent(query):
            await never.wait()
            return []
        try:
            qbl = await connect("127.0.0.1", port, name="qbl")
            await qbl.declare_queryable("svc/**", silent)
            querier = await connect("127.0.0.1", port, name="querier")
            await until(lambda: node._query_candidates("svc/x"))
            assert node._serving_sweep is None
            first = asyncio.ensure_future(querier.get("svc/x", timeout=0.3))
            second = asyncio.ensure_future(querier.get("svc/y", timeout=0.3))
            await until(lambda: len(node._serving) == 2)
            assert node._serving_sweep is not None  # one sweep for both
            assert [r.outcome for r in await asyncio.gather(first, second)] == ["timeout", "timeout"]
            # the attempts timed out at the ingress; the serving side drops them by the next sweep
            await until(lambda: not node._serving, timeout=0.3 + 2 * 0.1 + 1.0)
            await until(lambda: node._serving_sweep is None, timeout=1.0)
            await qbl.close()
            await querier.close()
        finally:
            never.set()
            await node.stop()
    asyncio.run(go())


def test_a_reply_key_over_the_limit_is_an_error_answer_and_a_query_key_over_it_is_refused():
    """Key expressions are at most 4 096 bytes (as in a message header): a queryable's reply with a longer key
    becomes an error answer (so no frame on the way can be too large to send), and ``get`` refuses a longer
    key before anything is sent."""
    from router.codec import FrameKind
    from router.keyexpr import KeyExprError
    from traffic.client import connect

    async def go():
        node, port = await one_router()
        try:
            qbl = await connect("127.0.0.1", port, name="qbl")
            await qbl.declare_queryable("svc/**", lambda query: [("svc/" + "x" * 4093, b"big")])
            querier = await connect("127.0.0.1", port, name="querier")
            await until(lambda: node._query_candidates("svc/x"))
            result = await querier.get("svc/x", timeout=5)
            assert result.outcome == "error" and list(result) == []
            assert "exceeds the limit of 4096 bytes" in result.reason
            with pytest.raises(KeyExprError, match="exceeds the limit"):
                await querier.get("svc/" + "x" * 4093, timeout=5)
            # a queryable that is not this library's sends the long key anyway: the router makes it the error
            raw = await connect("127.0.0.1", port, name="raw")
            never = asyncio.Event()

            async def silent(query):
                await never.wait()
                return []
            await raw.declare_queryable("raw/**", silent)
            asked = []
            record_query_frames(raw, asked)
            await until(lambda: node._query_candidates("raw/x"))
            pending = asyncio.ensure_future(querier.get("raw/x", timeout=5))
            await until(lambda: asked)
            raw._conn.send_query_frame(FrameKind.REPLY, {"id": asked[0][0]["id"], "key": "raw/" + "y" * 4093,
                                                         "ts_ns": 1, "final": True}, b"v")
            result = await pending
            assert result.outcome == "error" and list(result) == []
            assert "a reply's key: key expression of 4097 bytes" in result.reason
            never.set()
            await raw.close()
            await qbl.close()
            await querier.close()
        finally:
            await node.stop()
    asyncio.run(go())


def test_the_querier_gets_the_final_word_on_the_last_reply():
    """The ingress tells the querying client its last reply and the final word in one REPLY frame
    (``all`` and ``latest``); a query with no reply gets the bare final word."""
    from traffic.client import connect

    async def go():
        node, port = await one_router()
        try:
            qbl = await connect("127.0.0.1", port, name="qbl")
            await qbl.declare_queryable("svc/**", lambda query: [("svc/x", b"a"), ("svc/y", b"b"), ("svc/x", b"c")])
            querier = await connect("127.0.0.1", port, name="querier")
            frames = []
            record_query_frames(querier, frames)
            await until(lambda: node._query_candidates("svc/x"))
            every = await querier.get("svc/**", timeout=5)
            assert every.outcome == "ok" and [(r.key, r.payload) for r in every] == \
                [("svc/x", b"a"), ("svc/y", b"b"), ("svc/x", b"c")]
            assert [(h.get("key"), h.get("final", False), p) for h, p in frames] == \
                [("svc/x", False, b"a"), ("svc/y", False, b"b"), ("svc/x", True, b"c")]
            assert frames[-1][0]["outcome"] == "ok" and frames[-1][0]["replies"] == 3
            frames.clear()
            latest = await querier.get("svc/**", timeout=5, consolidation="latest")
            assert [(r.key, r.payload) for r in latest] == [("svc/x", b"c"), ("svc/y", b"b")]
            assert [(h.get("key"), h.get("final", False)) for h, _ in frames] == [("svc/x", False), ("svc/y", True)]
            frames.clear()
            none = await querier.get("other/x", timeout=5)
            assert none.outcome == "no_match" and list(none) == []
            assert [("key" in h, h.get("final")) for h, _ in frames] == [(False, True)]
            # a client that does not say final_on_reply (an older library) gets the reply and the final word apart
            send = querier._conn.send_query_frame
            querier._conn.send_query_frame = lambda kind, header, payload=b"": send(
                kind, {k: v for k, v in header.items() if k != "final_on_reply"}, payload)
            frames.clear()
            old = await querier.get("svc/**", timeout=5)
            assert old.outcome == "ok" and [r.payload for r in old] == [b"a", b"b", b"c"]
            assert [(h.get("key"), h.get("final", False)) for h, _ in frames] == \
                [("svc/x", False), ("svc/y", False), ("svc/x", False), (None, True)]
            await qbl.close()
            await querier.close()
        finally:
            await node.stop()
    asyncio.run(go())


def test_a_routers_own_lsp_coming_back_is_not_superseded_but_a_previous_incarnations_is():
    """Over a cycle whose links' delays differ, a router's current LSP can reach a neighbour by the
    longer way first and be flooded on back to it: that copy is its own and must not make it
    originate again (each new one could come back the same way: a flood without end). One of an
    earlier incarnation, ahead of it or of the same number with other contents, is superseded."""
    from dataclasses import replace

    async def go():
        nodes = await diamond()
        try:
            d = nodes["d"]
            own = d.lsdb.get("d")
            seq = d._seq
            d._on_linkstate(None, own)
            assert d._seq == seq and d.lsdb.get("d") is own
            d._on_linkstate(None, replace(own, links={"b": 100}))  # same number, other links
            assert d._seq == seq + 1 and d.lsdb.get("d").links == own.links
            d._on_linkstate(None, replace(own, seq=seq + 10))
            assert d._seq == seq + 11 and d.lsdb.get("d").links == own.links
            await until(lambda: all(nd.lsdb.get("d").seq == seq + 11 for nd in nodes.values()))
        finally:
            for n in nodes.values():
                await n.stop()
    asyncio.run(go())
