from __future__ import annotations

import pytest

from router.codec import CodecError
from router.linkstate import LinkStateDatabase, LinkStatePacket
from router.routing import RoutingTable, TreeSetSpec
from router.trees import shortest_path_tree


def lsdb_of(links, subs=None, extra=None):
    db = LinkStateDatabase()
    nodes = {n for edge in links for n in edge[:2]}
    per = {n: {} for n in nodes}
    for a, b, w in links:
        per[a][b] = w
        per[b][a] = w
    for n in nodes:
        db.update(LinkStatePacket(n, 1, per[n], tuple((subs or {}).get(n, ())), (extra or {}).get(n, {})))
    return db


def test_spt_uses_weights_and_breaks_ties_by_name():
    adj = lsdb_of([("a", "b", 100), ("a", "c", 100), ("b", "d", 100), ("c", "d", 100)]).edges()
    t = shortest_path_tree(adj, "a")
    assert t.parent == {"a": None, "b": "a", "c": "a", "d": "b"}
    adj = lsdb_of([("a", "b", 100), ("a", "c", 100), ("b", "d", 300), ("c", "d", 100)]).edges()
    assert shortest_path_tree(adj, "a").parent["d"] == "c"


def test_one_sided_link_is_ignored():
    db = LinkStateDatabase()
    db.update(LinkStatePacket("a", 1, {"b": 100}))
    db.update(LinkStatePacket("b", 1, {}))
    assert db.edges() == {"a": {}, "b": {}}


def test_lsdb_keeps_newest_sequence():
    db = LinkStateDatabase()
    assert db.update(LinkStatePacket("a", 5, {}))
    assert not db.update(LinkStatePacket("a", 4, {"b": 1}))
    assert db.update(LinkStatePacket("a", 6, {"b": 1}))
    assert db.get("a").links == {"b": 1}


def test_next_hops_only_toward_matching_subscribers():
    # line a - b - c, and a - d
    db = lsdb_of([("a", "b", 100), ("b", "c", 100), ("a", "d", 100)], subs={"c": ["x/**"], "d": ["y"]})
    rt = RoutingTable("a")
    rt.recompute(db)
    assert rt.next_hops(5, "a", "x/1") == ("b",)
    assert rt.next_hops(5, "a", "y") == ("d",)
    assert rt.next_hops(5, "a", "z") == ()
    rb = RoutingTable("b")
    rb.recompute(db)
    assert rb.next_hops(5, "a", "x/1") == ("c",)
    assert rb.next_hops(5, "a", "y") == ()  # d is not below b in a's tree
    assert rb.next_hops(5, "c", "y") == ("a",)


def test_second_tree_set_with_its_own_weights():
    extra = {"a": {"data": {"b": 1000}}, "b": {"data": {"a": 1000}}}
    db = lsdb_of([("a", "b", 100), ("a", "c", 100), ("b", "d", 100), ("c", "d", 100)], subs={"d": ["k"]},
                 extra=extra)
    rt = RoutingTable("a", [TreeSetSpec("control", "", frozenset(range(0, 4))),
                            TreeSetSpec("data", "data", frozenset(range(4, 8)))])
    rt.recompute(db)
    assert rt.next_hops(1, "a", "k") == ("b",)
    assert rt.next_hops(5, "a", "k") == ("c",)


def test_lsp_json_validation():
    lsp = LinkStatePacket("a", 3, {"b": 100}, ("k/**",))
    assert LinkStatePacket.from_json(lsp.to_json()) == lsp
    with pytest.raises(CodecError):
        LinkStatePacket.from_json({"origin": "a", "seq": 1, "links": {"b": 0}})
    with pytest.raises(CodecError):
        LinkStatePacket.from_json({"origin": "a"})
