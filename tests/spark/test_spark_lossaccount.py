"""Each part of the lost-delivery accounting (spark.lossaccount) on hand-made last sightings: a run with a
link_down and a killed router in one is not among the real fixtures (the real diamond's own accounting adds up:
test_spark_real_run.py). Every lost delivery lands in exactly one part and the parts add up."""
from __future__ import annotations

import json

import pandas as pd

from spark.lossaccount import PART_ORDER, account_losses

S = 10**9
LINKS = {1: ("r1", "r2"), 2: ("r1", "r3"), 3: ("r2", "r4"), 4: ("r3", "r4")}
COLUMNS = ["flow", "node", "seq", "send_ns", "last_link", "last_src", "last_dst", "last_side", "last_seen_ns"]


def _lost(rows):
    return pd.DataFrame(rows, columns=COLUMNS)


def _events(rows):
    return pd.DataFrame([{"ts_ns": t, "source": "scenario", "node": None, "event": ev, "at_ns": t, "link": link,
                          "neighbour": None, "fields": json.dumps(fields)} for t, ev, link, fields in rows])


def test_every_lost_delivery_in_one_part():
    events = _events([(10 * S, "link_down", 3, {}), (12 * S, "link_up", 3, {}),
                      (20 * S, "kill_router", None, {"node": "r3"}), (25 * S, "restart_router", None, {"node": "r3"})])
    drops = pd.DataFrame([("r2", "data", "queue_full", 2.0)], columns=["node", "priority_name", "reason", "dropped"])
    lost = _lost([
        ("f", "r4", 1, 9 * S, 3, "r2", "r4", "tx", int(9.5 * S)),    # left r2 over r2-r4 half a second before it went down
        ("f", "r4", 2, 11 * S, 3, "r2", "r4", "tx", 11 * S),        # ... while it was down
        ("f", "r4", 3, 19 * S, 2, "r1", "r3", "rx", int(19.5 * S)),  # arrived at r3 just before it was killed
        ("f", "r4", 4, 21 * S, 2, "r1", "r3", "tx", 21 * S),        # sent toward r3 while it was down
        ("f", "r4", 5, 30 * S, 1, "r1", "r2", "rx", 30 * S),        # arrived at r2, which counted 2 drops
        ("f", "r5", 5, 30 * S, 1, "r1", "r2", "rx", 30 * S),        # the same message, another subscriber
        ("f", "r4", 6, 31 * S, 1, "r1", "r2", "rx", 31 * S),
        ("f", "r4", 7, 32 * S, 1, "r1", "r2", "rx", 32 * S),        # r2's drops are used up: unexplained
        ("f", "r4", 8, 33 * S, None, None, None, None, None),       # never seen
        ("f", "r4", 9, 34 * S, 4, "r3", "r4", "tx", 34 * S),        # left r3 over r3-r4, link up: on the wire
    ])
    parts = account_losses(lost, events, drops, LINKS, lease_ns=3 * S, end_ns=40 * S)
    got = [(p.part, p.where, p.lost, p.messages) for p in parts]
    assert got == [("killed_router", "r3", 2, 2), ("link_down", "r2-r4", 2, 2), ("router_drop", "r2", 3, 2),
                   ("never_seen", None, 1, 1), ("on_the_wire", "r3-r4", 1, 1), ("unexplained", "r2", 1, 1)]
    assert sum(p.lost for p in parts) == len(lost)
    assert [p.part for p in parts] == sorted((p.part for p in parts), key=PART_ORDER.index)
    assert parts[2].detail == "dropped by r2, which counted 2 queue_full"
    assert parts[-1].detail == "arrived at r2, which counted 2 drops in all, fewer than the messages lost there"


def test_never_seen_messages_go_to_their_publishers_router_drops():
    """A message its publisher's router dropped was never seen on a link: matched to that router's drops
    (a real run with link_down r2-r4 and kill_router r3: r1 counted 931 no_route drops, 931 never seen)."""
    drops = pd.DataFrame([("r1", "all", "no_route", 2.0)], columns=["node", "priority_name", "reason", "dropped"])
    lost = _lost([("f", "r4", s, s * S, None, None, None, None, None) for s in range(3)])
    parts = account_losses(lost, _events([]), drops, LINKS, 3 * S, 10 * S, publishers={"f": "r1"})
    assert [(p.part, p.where, p.lost) for p in parts] == [("router_drop", "r1", 2), ("never_seen", None, 1)]


def test_without_the_routers_counters_what_arrived_is_unexplained():
    lost = _lost([("f", "r4", 1, S, 1, "r1", "r2", "rx", S)])
    parts = account_losses(lost, _events([]), None, LINKS, lease_ns=3 * S, end_ns=10 * S)
    assert [(p.part, p.where, p.lost) for p in parts] == [("unexplained", "r2", 1)]
    assert parts[0].detail == "arrived at r2; its drop counters are not available"
    assert account_losses(_lost([]), _events([]), None, LINKS, 3 * S, 10 * S) == []


def test_a_restarted_router_is_down_until_it_was_ready_not_only_until_its_restart_began():
    """``restart_router``'s ts_ns is when the restart began (the phase after it starts there), its ``ready_ns``
    when the router was ready: a message sent toward it in between was lost to the killed router."""
    lost = _lost([("f", "r4", 1, 26 * S, 2, "r1", "r3", "tx", 26 * S)])
    restarted = [(20 * S, "kill_router", None, {"node": "r3"}),
                 (25 * S, "restart_router", None, {"node": "r3", "ready_ns": 27 * S})]
    parts = account_losses(lost, _events(restarted), None, LINKS, lease_ns=3 * S, end_ns=40 * S)
    assert [(p.part, p.where) for p in parts] == [("killed_router", "r3")]
    restarted[1][3].pop("ready_ns")  # a run recorded before ready_ns: down until the restart's ts_ns
    parts = account_losses(lost, _events(restarted), None, LINKS, lease_ns=3 * S, end_ns=40 * S)
    assert [p.part for p in parts] != ["killed_router"]
