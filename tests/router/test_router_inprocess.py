"""Routers in one asyncio loop (no subprocesses): the weight-change hook that a
congestion monitor will drive, and a second tree set with its own weights."""
from __future__ import annotations

import asyncio
from typing import Dict, List

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


async def diamond(tree_sets=None) -> Dict[str, RouterNode]:
    ports = {n: free_port() for n in "abcd"}
    links = {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}
    nodes = {}
    for n in "abcd":
        cfg = config_from_dict({"node": n, "router_listen": [f"127.0.0.1:{ports[n]}"], "lease_ms": 1000,
                                "route_debounce_ms": 5,
                                "neighbours": [{"name": m, "address": "127.0.0.1", "port": ports[m]}
                                               for m in links[n]]})
        node = RouterNode(cfg, ListEvents(n))
        if tree_sets:
            node.routing = RoutingTable(n, tree_sets)
        nodes[n] = node
    for node in nodes.values():
        await node.start()
    await until(lambda: all(len(nd.lsdb.edges().get(nd.name, {})) == len(
        {"a": "bc", "b": "ad", "c": "ad", "d": "bc"}[nd.name]) and len(nd.lsdb.all()) == 4 for nd in nodes.values()))
    return nodes


async def until(pred, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.02)


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
