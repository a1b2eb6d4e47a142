"""The ingress's cache of each key's serving routers (``Queries._query_candidates``), on a stub router: the
query code itself, with the link-state database, the trees and the transmission replaced by fakes, so the
moments the cache must be emptied can be reached one by one."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, Dict, List, Tuple

from router.linkstate import LinkStateDatabase, LinkStatePacket
from router.queries import Queries
from router.routecontrol import DEFAULT_TREE_SET
from router.trees import Tree


class FakeClient:
    """A querying client's connection: what the router sends it."""
    closed = False
    main = None
    kind = "client"
    peer_name = "querier"

    def __init__(self) -> None:
        self.frames: List[Tuple[int, Dict[str, Any]]] = []

    def send_query_frame(self, kind: int, header: Dict[str, Any], payload: bytes = b"") -> None:
        self.frames.append((kind, header))


class StubRouter(Queries):
    """Router "me" with the query mixin only; serving routers are remote, QUERY frames go nowhere."""

    def __init__(self) -> None:
        self.name = "me"
        self.lsdb = LinkStateDatabase()
        self.routing = SimpleNamespace(trees={DEFAULT_TREE_SET: {}})
        self.config = SimpleNamespace(query_channels=2, query_attempt_timeout_ms=1000)
        self.clients: Dict[Any, Any] = {}
        self.events = SimpleNamespace(emit=lambda *a, **k: None)
        self.sent: List[str] = []
        self._queries_init()

    def reach(self, *names: str) -> None:
        """New trees in which these routers are reachable (one hop each)."""
        dist = {self.name: 0, **{n: 1 for n in names}}
        parent = {self.name: None, **{n: self.name for n in names}}
        self.routing.trees = {DEFAULT_TREE_SET: {self.name: Tree(self.name, parent, dist)}}

    def _transmit_query(self, peer: str, rid: int, q: Any) -> None:
        self.sent.append(peer)


def _serving(lsdb: LinkStateDatabase, name: str, seq: int, *keys: str) -> None:
    lsdb.update(LinkStatePacket(name, seq, {}, queryables=tuple(keys)))


def _ask(router: StubRouter, client: FakeClient, cid: int, key: str) -> None:
    router._query_from_client(client, {"id": cid, "key": key, "timeout_ms": 5000, "consolidation": "all"}, b"")


def test_peers_removed_one_by_one_in_one_sync_leave_no_stale_candidates():
    """Two serving routers go in one sync while queries are in flight to both: the failed attempts ask for
    candidates between the two removals (only the other one is left then); after the sync none is left,
    and the next query ends no_match at once."""
    async def go():
        r, client = StubRouter(), FakeClient()
        _serving(r.lsdb, "a", 1, "k/**")
        _serving(r.lsdb, "c", 1, "k/**")
        r.reach("a", "c")
        r._sync_query_peers()
        _ask(r, client, 1, "k/x")
        assert sorted(r.sent) == ["a", "c"] and r._query_candidates("k/x") == ("a", "c")
        r.reach()  # both unreachable at once
        r._sync_query_peers()
        assert r.query_scheduler.peers() == {}
        assert r._query_candidates("k/x") == ()
        _ask(r, client, 2, "k/x")
        final = [h for _, h in client.frames if h.get("id") == 2]
        assert [(h["final"], h["outcome"]) for h in final] == [(True, "no_match")]
    asyncio.run(go())


def test_peers_added_one_by_one_in_one_sync_are_all_candidates():
    """Two serving routers come in one sync while a query waits for a channel: the work loop asks for
    candidates between the two additions; after the sync both are candidates of the next query."""
    async def go():
        r, client = StubRouter(), FakeClient()
        _serving(r.lsdb, "a", 1, "k/**")
        r.reach("a")
        r._sync_query_peers()
        for cid in (1, 2, 3):  # a's two channels busy, the third query waits
            _ask(r, client, cid, "k/x")
        assert r.sent == ["a", "a"] and r.query_scheduler.waiting_senders() == 1
        _serving(r.lsdb, "b", 1, "k/**")
        _serving(r.lsdb, "d", 1, "k/**")
        r.reach("a", "b", "d")
        r._sync_query_peers()
        assert r._query_candidates("k/x") == ("a", "b", "d")
        _ask(r, client, 4, "k/x")
        assert r.sent == ["a", "a", "b", "d"]  # its request to a waits for a channel there
    asyncio.run(go())


def test_a_stored_lsp_alone_empties_the_cache():
    """A router's LSP drops its queryable before the trees are recomputed and before the peers are synced:
    the next lookup already leaves it out (it no longer serves the key)."""
    async def go():
        r = StubRouter()
        _serving(r.lsdb, "a", 1, "k/**")
        _serving(r.lsdb, "b", 1, "k/**")
        r.reach("a", "b")
        r._sync_query_peers()
        assert r._query_candidates("k/x") == ("a", "b")
        _serving(r.lsdb, "b", 2)  # b withdrew it; nothing else happened yet
        assert r._query_candidates("k/x") == ("a",)
    asyncio.run(go())

