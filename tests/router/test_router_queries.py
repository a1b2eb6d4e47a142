"""Queries end to end: real router processes on loopback, the client library's
``get`` and ``declare_queryable``.  The querier is on r1; queryables on r3 and r4,
both two hops away (r1 - r2 - r3, r2 - r4): equal distance, so r3 (by name) is
"nearest" for a ``first`` query."""
from __future__ import annotations

import asyncio
import time

import pytest

from router.keyexpr import KeyExprError
from traffic.client import connect


def _lab(cluster):
    for name in ("r1", "r2", "r3", "r4"):
        cluster.add(name)
    cluster.link("r1", "r2")
    cluster.link("r2", "r3")
    cluster.link("r2", "r4")
    cluster.start()
    cluster.wait_links()
    for name in ("r1", "r2", "r3", "r4"):  # routes over the whole lab (a queryable must be reachable)
        cluster.wait_event(name, "trees_recomputed", routers=4, links=3)
    return cluster


async def _serve(cluster, node, key, handler):
    session = await connect("127.0.0.1", cluster.routers[node].client_port, name=f"qbl-{node}")
    await session.declare_queryable(key, handler)
    # the querier's router knows of it once the LSP has flooded
    await asyncio.to_thread(cluster.wait_event, "r1", "subscriptions_updated", router=node, queryables=1)
    return session


async def _querier(cluster):
    return await connect("127.0.0.1", cluster.routers["r1"].client_port, name="querier")


def _answer(node, delay=0.0):
    async def handler(query):
        await asyncio.sleep(delay)
        return [("svc/x", f"{node}:{query.payload.decode()}".encode())]
    return handler


def test_replies_from_every_router_first_nearest_latest_newest_and_no_match_at_once(cluster):
    _lab(cluster)

    async def go():
        s3 = await _serve(cluster, "r3", "svc/**", _answer("r3"))
        s4 = await _serve(cluster, "r4", "svc/**", _answer("r4", delay=0.05))  # always the newer answer
        q = await _querier(cluster)
        try:
            every = await q.get("svc/x", timeout=5, consolidation="all", payload=b"hi")
            assert every.outcome == "ok" and every.served_by == ["r3", "r4"]
            assert sorted((r.replier, r.payload) for r in every) == [("r3", b"r3:hi"), ("r4", b"r4:hi")]
            first = await q.get("svc/**", timeout=5, consolidation="first", payload=b"1")
            assert first.outcome == "ok" and first.served_by == ["r3"] and [r.payload for r in first] == [b"r3:1"]
            assert first.retries == 0 and first.attempts == [["r3", "ok"]]
            latest = await q.get("svc/x", timeout=5, consolidation="latest", payload=b"2")
            assert latest.outcome == "ok" and latest.served_by == ["r3", "r4"]
            assert [(r.key, r.replier, r.payload) for r in latest] == [("svc/x", "r4", b"r4:2")], "per key the newest"
            t0 = time.monotonic()
            none = await q.get("other/**", timeout=5)
            assert none.outcome == "no_match" and list(none) == [] and time.monotonic() - t0 < 1.0
        finally:
            for s in (q, s3, s4):
                await s.close()
    asyncio.run(go())


def test_a_queryable_declared_or_withdrawn_after_a_query_counts_for_the_next_one(cluster):
    """The ingress keeps each key's serving routers between queries: a queryable declared or withdrawn
    elsewhere (its LSP floods; r4 becomes a serving router, then stops being one) must be seen by the very
    next query. (The moments inside one peer sync, and an LSP stored before the trees are recomputed:
    test_router_query_candidates.py.)"""
    _lab(cluster)

    async def go():
        s3 = await _serve(cluster, "r3", "svc/**", _answer("r3"))
        q = await _querier(cluster)
        try:
            assert (await q.get("late/x", timeout=5)).outcome == "no_match"  # "late/x": nobody, remembered
            assert (await q.get("svc/x", timeout=5)).served_by == ["r3"]
            s4 = await _serve(cluster, "r4", "late/**", _answer("r4"))
            found = await q.get("late/x", timeout=5, payload=b"now")
            assert found.outcome == "ok" and found.served_by == ["r4"] and [r.payload for r in found] == [b"r4:now"]
            queryable = next(iter(s4._queryables.values()))
            await queryable.undeclare()
            await asyncio.to_thread(cluster.wait_event, "r1", "subscriptions_updated", router="r4", queryables=0)
            t0 = time.monotonic()
            gone = await q.get("late/x", timeout=5)
            assert gone.outcome == "no_match" and time.monotonic() - t0 < 1.0  # not sent to r4 to fail there
            await s4.close()
        finally:
            for s in (q, s3):
                await s.close()
    asyncio.run(go())


def test_bad_input_refused_at_the_client_and_a_raising_queryable_answers_an_error(cluster):
    _lab(cluster)

    def broken(query):
        raise RuntimeError("no such sensor")

    async def go():
        s3 = await _serve(cluster, "r3", "svc/**", broken)
        q = await _querier(cluster)
        try:
            for bad in ("svc//x", "svc/a*b", ""):
                with pytest.raises(KeyExprError):
                    await q.get(bad)
            with pytest.raises(ValueError, match="consolidation"):
                await q.get("svc/x", consolidation="some")
            res = await q.get("svc/x", timeout=5, consolidation="first")
            assert res.outcome == "error" and "no such sensor" in res.reason and list(res) == []
            assert res.retries == 0, "an error reply is an answer: not retried elsewhere"
            for name in ("r1", "r2", "r3"):
                assert cluster.alive(name)
            again = await q.get("svc/x", timeout=5)
            assert again.outcome == "error", "the router and both sessions go on"
        finally:
            for s in (q, s3):
                await s.close()
    asyncio.run(go())


def test_a_killed_serving_router_fails_over_to_the_other_within_the_timeout(cluster):
    _lab(cluster)

    async def slow(query):
        await asyncio.sleep(0.5)
        return [("svc/x", b"r3")]

    async def go():
        s3 = await _serve(cluster, "r3", "svc/**", slow)
        s4 = await _serve(cluster, "r4", "svc/**", _answer("r4"))
        q = await _querier(cluster)
        try:
            t0 = time.monotonic()
            pending = asyncio.ensure_future(q.get("svc/x", timeout=4, consolidation="first", payload=b"f"))
            await asyncio.sleep(0.1)  # the query is at r3's queryable now
            cluster.kill("r3")
            res = await pending
            elapsed = time.monotonic() - t0
            assert res.outcome == "ok" and res.served_by == ["r4"], (res.outcome, res.attempts)
            assert [r.payload for r in res] == [b"r4:f"]
            assert res.retries == 1 and res.attempts[0][0] == "r3" and res.attempts[0][1] in ("timeout", "disconnect")
            assert elapsed < 4.0
            print("failover:", res.attempts, f"{elapsed:.3f} s")
            ev = await asyncio.to_thread(cluster.wait_event, "r1", "query_failover")
            assert ev["served_by"] == ["r4"] and ev["attempts"][-1] == ["r4", "ok"]
        finally:
            for s in (q, s3, s4):
                await s.close()
    asyncio.run(go())


def test_no_query_outlives_its_timeout_and_a_lost_router_ends_waiting_queries(cluster):
    _lab(cluster)

    async def never(query):
        await asyncio.sleep(30)
        return []

    async def go():
        s3 = await _serve(cluster, "r3", "svc/**", never)
        q = await _querier(cluster)
        try:
            t0 = time.monotonic()
            res = await q.get("svc/x", timeout=0.6)
            # the router's final word ends it (not the client's own 1 s grace)
            assert res.outcome == "timeout" and 0.55 < time.monotonic() - t0 < 0.9
            waiting = [asyncio.ensure_future(q.get("svc/x", timeout=20)) for _ in range(3)]
            await asyncio.sleep(0.2)
            t0 = time.monotonic()
            cluster.kill("r1")  # the querier's own router: every waiting query ends, none waits 20 s
            results = await asyncio.gather(*waiting)
            assert all(r.outcome == "shutdown" for r in results) and time.monotonic() - t0 < 5
        finally:
            for s in (q, s3):
                await s.close()
    asyncio.run(go())


def test_query_outcomes_and_channels_are_in_the_metrics(cluster):
    _lab(cluster)
    r1 = cluster.routers["r1"]

    async def go():
        s3 = await _serve(cluster, "r3", "svc/**", _answer("r3"))
        q = await _querier(cluster)
        try:
            assert (await q.get("svc/x", timeout=5)).outcome == "ok"
            assert (await q.get("none/x", timeout=5)).outcome == "no_match"
            metric = lambda name, **labels: asyncio.to_thread(r1.metric, name, **labels)  # noqa: E731
            assert await metric("router_queries_total", outcome="ok") == 1
            assert await metric("router_queries_total", outcome="no_match") == 1
            assert await metric("router_query_channels", router="r3") == 8
            assert await metric("router_query_outstanding", router="r3") == 0
        finally:
            for s in (q, s3):
                await s.close()
    asyncio.run(go())


def test_a_querier_that_leaves_frees_its_routers_channels_at_once(cluster):
    """12 queries to a queryable that takes 5 s: 8 outstanding at r3 (query_channels), 4 waiting; the
    querier leaves: its router ends them all (cancelled), so nobody else waits behind them."""
    _lab(cluster)
    r1 = cluster.routers["r1"]

    async def slow(query):
        await asyncio.sleep(5)
        return [("svc/x", b"late")]

    async def go():
        s3 = await _serve(cluster, "r3", "svc/**", slow)
        q = await _querier(cluster)
        metric = lambda name, **labels: asyncio.to_thread(r1.metric, name, **labels)  # noqa: E731
        try:
            pending = [asyncio.ensure_future(q.get("svc/x", timeout=10)) for _ in range(12)]
            await asyncio.sleep(0.3)
            assert await metric("router_query_outstanding", router="r3") == 8
            assert await metric("router_queries_waiting") == 4
            await q.close()
            assert all(r.outcome == "shutdown" for r in await asyncio.gather(*pending))
            await asyncio.sleep(0.3)
            assert await metric("router_query_outstanding", router="r3") == 0
            assert await metric("router_queries_waiting") == 0
            assert await metric("router_queries_total", outcome="cancelled") == 12
            other = await _querier(cluster)  # a new querier is not held up by the old one's queries
            t0 = time.monotonic()
            res = await other.get("svc/x", timeout=0.5)
            assert res.outcome == "timeout" and time.monotonic() - t0 < 0.9 and res.attempts == [["r3", "timeout"]]
            await other.close()
        finally:
            await s3.close()
    asyncio.run(go())


def test_a_payload_above_the_limit_is_refused_by_the_client_and_a_large_reply_is_an_error(cluster):
    _lab(cluster)

    async def big(query):
        return [("svc/x", bytes(64 * 1024 + 1))]

    async def go():
        s3 = await _serve(cluster, "r3", "svc/**", big)
        q = await _querier(cluster)
        try:
            with pytest.raises(ValueError, match="at most 65536 bytes"):
                await q.get("svc/x", payload=bytes(64 * 1024 + 1))
            res = await q.get("svc/x", timeout=5)
            assert res.outcome == "error" and "at most 65536 bytes" in res.reason
            assert all(cluster.alive(n) for n in ("r1", "r2", "r3"))
            assert not [e for e in cluster.routers["r1"].events() if e["event"] == "link_down"]
        finally:
            for s in (q, s3):
                await s.close()
    asyncio.run(go())
