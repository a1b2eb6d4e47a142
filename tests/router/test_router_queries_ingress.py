"""The ingress's query code on a stub router (the link-state database, the trees, the transmission and the
client's connection replaced by fakes), so that moments hard to reach with real processes can be reached one
by one: the cache of each key's serving routers (``Queries._query_candidates``) while peers come and go, and
the final word when it cannot be sent with the last reply."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, Dict, List, Tuple

from router.codec import CodecError
from router.linkstate import LinkStateDatabase, LinkStatePacket
from router.queries import IngressQuery, Queries
from router.routecontrol import DEFAULT_TREE_SET
from router.trees import Tree


class FakeClient:
    """A querying client's connection: what the router sends it (``too_long``: a frame whose header has
    more keys than this is refused as the codec refuses a header over its limit)."""
    closed = False
    main = None
    kind = "client"
    peer_name = "querier"

    def __init__(self, too_long: int = 1 << 30) -> None:
        self.frames: List[Tuple[int, Dict[str, Any], bytes]] = []
        self.too_long = too_long

    def send_query_frame(self, kind: int, header: Dict[str, Any], payload: bytes = b"") -> None:
        if len(header) > self.too_long:
            raise CodecError("REPLY header of 70000 bytes exceeds 65535")
        self.frames.append((kind, header, payload))


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
        final = [h for _, h, _ in client.frames if h.get("id") == 2]
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



def test_a_last_reply_that_cannot_carry_the_final_word_goes_first_on_its_own():
    """Reply and final word together too large for one header: the querier gets the reply, then the bare final
    word (nothing lost); a client that did not ask for final_on_reply gets the two apart anyway."""
    async def go():
        r = StubRouter()
        client = FakeClient(too_long=8)  # the merged header has 11 keys, a reply 4, a final word 8
        q = IngressQuery(client, 7, "k/x", b"", 3, "all", 0.0, final_on_reply=True)
        q.held = ({"key": "k/x", "ts_ns": 5, "replier": "a"}, b"last")
        r._finish_query(q, "ok")
        assert [(h.get("key"), h.get("final", False), p) for _, h, p in client.frames] == \
            [("k/x", False, b"last"), (None, True, b"")]
        assert client.frames[-1][1]["outcome"] == "ok" and q.held is None
    asyncio.run(go())


def test_a_query_key_over_the_limit_is_answered_with_an_error():
    """The router refuses a QUERY whose key is over 4 096 bytes (no frame toward a serving router would carry
    it), with the reason, at once."""
    async def go():
        r, client = StubRouter(), FakeClient()
        _serving(r.lsdb, "a", 1, "k/**")
        r.reach("a")
        r._sync_query_peers()
        _ask(r, client, 1, "k/" + "x" * 4095)
        (_, final, _), = client.frames
        assert final["outcome"] == "error" and "exceeds the limit of 4096 bytes" in final["reason"]
        assert r.sent == []
    asyncio.run(go())
