"""The zenoh client (traffic/zenohclient.py) and the traffic processes with ``router.client: "zenoh"``,
against real stock Zenoh routers (``python -m zenohrouter``) on loopback: A <- B, publishers on A,
subscribers on B."""
from __future__ import annotations

import asyncio
import csv
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zenoh

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "zenohrouter"))

from routerlab import free_port  # noqa: E402  (tests/router, on sys.path through conftest.py)
from zenohlab import ROOT, ZenohLab, wait_for  # noqa: E402

from router.codec import CongestionControl, Priority, make_payload, unpack_payload_header  # noqa: E402
from traffic import zenohclient as zc  # noqa: E402
from traffic.logs import read_summary  # noqa: E402
from runfolder.trafficplan import parse_plan  # noqa: E402
from traffic.profiles import run_publisher  # noqa: E402

S = 1_000_000_000
MS = 1_000_000


@pytest.fixture
def chain(tmp_path):
    """Router A (a router port and a client port) and router B (a client port) connected to A."""
    lab = ZenohLab(tmp_path)
    try:
        a = lab.add("a", client_port=free_port(), router_port=free_port())
        b = lab.add("b", client_port=free_port(), connect=[a])
        lab.start()
        wait_for(lambda: "transport up router" in a.log() and "transport up router" in b.log(), 15, "the A-B link")
        yield lab, a, b
    finally:
        lab.cleanup()


async def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


async def _route_ready(pub_session, got, key: str) -> None:
    """Zenoh propagates a subscription to the other router asynchronously: probe until one arrives."""
    probe = pub_session.declare_publisher(key)
    deadline = time.monotonic() + 10
    while not any(s.key == key for s in got):
        assert time.monotonic() < deadline, "no route from A to B's subscriber within 10 s"
        await probe.put(b"probe")
        await asyncio.sleep(0.05)


def test_priority_and_congestion_control_mapping():
    assert zc.zenoh_priority(Priority.CONTROL) == zenoh.Priority.REAL_TIME  # Zenoh keeps Control for itself
    names = ["REAL_TIME", "INTERACTIVE_HIGH", "INTERACTIVE_LOW", "DATA_HIGH", "DATA", "DATA_LOW", "BACKGROUND"]
    assert [zc.zenoh_priority(p) for p in range(1, 8)] == [getattr(zenoh.Priority, n) for n in names]
    assert zc.zenoh_congestion_control(CongestionControl.BLOCK) == zenoh.CongestionControl.BLOCK
    assert zc.zenoh_congestion_control(CongestionControl.DROP) == zenoh.CongestionControl.DROP
    with pytest.raises(ValueError, match="not 0..7"):
        zc.zenoh_priority(8)


def test_slow_readers_are_refused_before_any_connection():
    with pytest.raises(zc.UnsupportedByZenohClient, match="slow reader"):
        asyncio.run(zc.connect("127.0.0.1", 9, slow_reader=True))


def test_an_unreachable_router_raises_at_once():
    async def main():
        t = time.monotonic()
        with pytest.raises(zenoh.ZError, match="Unable to connect"):
            await zc.connect("127.0.0.1", free_port(), timeout=2)
        assert time.monotonic() - t < 2

    asyncio.run(main())


def test_payloads_cross_two_routers_intact_with_their_qos(chain):
    _lab, a, b = chain
    flows = {  # flow id: (key, our priority, cc, express) -> what the sample says (priority, cc, express)
        1: (("t/rt", Priority.REAL_TIME, CongestionControl.BLOCK, True), (1, CongestionControl.BLOCK, True)),
        2: (("t/data", Priority.DATA_LOW, CongestionControl.DROP, False), (6, CongestionControl.DROP, False)),
        3: (("t/ctl", Priority.CONTROL, CongestionControl.DROP, False), (1, CongestionControl.DROP, False)),
        4: (("t/bg", Priority.BACKGROUND, CongestionControl.BLOCK, False), (7, CongestionControl.BLOCK, False)),
    }

    async def main():
        sub_s = await zc.connect("127.0.0.1", b.client_port, name="sub")
        got = []
        sub = await sub_s.declare_subscriber("t/**", callback=got.append)
        pub_s = await zc.connect("127.0.0.1", a.client_port, name="pub")
        assert pub_s.router_name and sub_s.router_name and pub_s.router_name != sub_s.router_name
        pubs = {fid: pub_s.declare_publisher(*spec) for fid, (spec, _) in flows.items()}
        # the zenoh publishers carry the mapped QoS
        assert pubs[1].zenoh.priority == zenoh.Priority.REAL_TIME
        assert pubs[1].zenoh.congestion_control == zenoh.CongestionControl.BLOCK
        assert pubs[2].zenoh.priority == zenoh.Priority.DATA_LOW
        assert pubs[2].zenoh.congestion_control == zenoh.CongestionControl.DROP
        assert pubs[3].zenoh.priority == zenoh.Priority.REAL_TIME
        assert pubs[4].zenoh.priority == zenoh.Priority.BACKGROUND
        await _route_ready(pub_s, got, "t/probe")
        got.clear()
        sent = {}
        for seq in range(60):
            for fid, pub in pubs.items():
                payload = make_payload(fid, seq, time.time_ns(), 100 + 97 * seq)
                assert await pub.put(payload) is True
                sent[(fid, seq)] = payload
            await asyncio.sleep(0.002)  # paced: a burst may overflow Zenoh's own queues (Drop flows lose then)
        blocking = [fid for fid, ((_k, _p, cc, _e), _) in flows.items() if cc == CongestionControl.BLOCK]

        def count(fid):
            return sum(1 for s in got if unpack_payload_header(s.payload) and unpack_payload_header(s.payload).flow_id == fid)

        await _until(lambda: all(count(fid) == 60 for fid in blocking), 15, "every Block message at B")
        n = -1
        while n != len(got):  # until nothing more comes for 0.3 s
            n = len(got)
            await asyncio.sleep(0.3)
        for sample in got:
            h = unpack_payload_header(sample.payload)
            assert h is not None, sample.payload[:24]
            assert sample.payload == sent[(h.flow_id, h.seq)]  # the very bytes, header first
            (key, *_), (prio, cc, express) = flows[h.flow_id]
            assert (sample.key, sample.priority, sample.congestion_control, sample.express) == (key, prio, cc, express)
            assert sample.recv_ns >= h.send_ns
        # per flow: in order, no duplicates; Block flows complete, Drop flows (nearly) so when paced
        for fid in flows:
            seqs = [unpack_payload_header(s.payload).seq for s in got if unpack_payload_header(s.payload).flow_id == fid]
            assert seqs == sorted(set(seqs))
            assert seqs == list(range(60)) if fid in blocking else len(seqs) >= 45, (fid, seqs)
        assert sub.received >= len(got)  # and the probes
        assert all((p.sent, p.dropped) == (60, 0) for p in pubs.values())
        with pytest.raises(zc.UnsupportedByZenohClient, match="the zenoh client does not do queries"):
            await sub_s.get("t/**")
        with pytest.raises(zc.UnsupportedByZenohClient, match="the zenoh client does not do queries"):
            await sub_s.declare_queryable("t/**", lambda q: [])
        await pub_s.close(5)
        await sub_s.close(5)
        assert pub_s.closed.is_set() and sub_s.closed.is_set() and pub_s.close_reason == "client closed the session"
        with pytest.raises(zc.ClosedError):
            await pubs[1].put(b"x" * 24)

    asyncio.run(main())


def test_a_lost_router_is_not_closed_zenoh_reconnects_and_puts_drop_meanwhile(chain):
    lab, a, b = chain

    async def main():
        sub_s = await zc.connect("127.0.0.1", b.client_port, name="sub", retry_max_s=0.5)
        got = []
        await sub_s.declare_subscriber("t/**", callback=got.append)
        pub_s = await zc.connect("127.0.0.1", a.client_port, name="pub")
        pub = pub_s.declare_publisher("t/x")
        await _route_ready(pub_s, got, "t/x")
        assert lab.stop(b) == 0  # the subscriber's router goes
        await _until(lambda: not sub_s.connected, 10, "the subscriber to see its router go")
        assert not sub_s.closed.is_set() and sub_s.losses == 1 and "zenoh reconnects" in sub_s.close_reason
        lab.spawn(b)
        lab.wait_ready(b)
        await _until(lambda: sub_s.connected, 15, "zenoh to reconnect the subscriber")
        got.clear()
        await _route_ready(pub_s, got, "t/x")  # its subscription was declared again by zenoh
        assert sub_s.losses == 1 and not sub_s.closed.is_set()
        await pub_s.close(5)
        await sub_s.close(5)

    asyncio.run(main())


def test_puts_while_disconnected_are_client_drops(chain):
    lab, a, _b = chain

    async def main():
        s = await zc.connect("127.0.0.1", a.client_port, name="pub", retry_max_s=0.5)
        pub = s.declare_publisher("t/x", Priority.DATA, CongestionControl.BLOCK)
        assert await pub.put(make_payload(1, 0, time.time_ns(), 64)) is True
        assert lab.stop(a) == 0
        await _until(lambda: not s.connected, 10, "the session to see its router go")
        assert await pub.put(make_payload(1, 1, time.time_ns(), 64)) is False
        assert pub.dropped == 1 and not s.closed.is_set()
        s.abort("test over")
        assert s.closed.is_set() and s.close_reason == "test over"

    asyncio.run(main())


# ------------------------------------------------------------------ every message handed over is accounted for


@pytest.fixture
def one_router(tmp_path):
    """One stock Zenoh router with a client port."""
    lab = ZenohLab(tmp_path)
    try:
        a = lab.add("a", client_port=free_port())
        lab.start()
        yield a
    finally:
        lab.cleanup()


class ListLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelname, record.getMessage()))

    def having(self, text: str):
        return [line for level, line in self.lines if text in line]


def list_logger(name: str) -> "tuple[logging.Logger, ListLog]":
    logger = logging.getLogger(f"test-zenoh-{name}-{time.monotonic_ns()}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = ListLog()
    logger.addHandler(handler)
    return logger, handler


class StuckPut:
    """Stands in for a zenoh publisher whose put blocks (a congested Block flow) until released."""

    def __init__(self, real) -> None:
        self.real = real
        self.entered = threading.Event()
        self.release = threading.Event()

    def put(self, payload) -> None:
        self.entered.set()
        self.release.wait(20)
        self.real.put(payload)

    def undeclare(self) -> None:
        self.real.undeclare()


class StuckPublishers:
    """Stands in for a session's zenoh session: its publishers' puts block (``StuckPut``)."""

    def __init__(self, real) -> None:
        self.real = real
        self.stuck = []

    def declare_publisher(self, *args, **kwargs) -> StuckPut:
        self.stuck.append(StuckPut(self.real.declare_publisher(*args, **kwargs)))
        return self.stuck[-1]

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_zenoh_put_errors_are_client_drops_and_logged_rate_limited(one_router):
    async def main():
        logger, log = list_logger("errors")
        s = await zc.connect("127.0.0.1", one_router.client_port, name="pub", logger=logger)
        pub = s.declare_publisher("t/err")
        ok = s.declare_publisher("t/ok")
        pub.zenoh.undeclare()  # every put on it raises ZError("Undeclared publisher")
        for seq in range(50):
            assert await pub.put(make_payload(1, seq, time.time_ns(), 64)) is True  # queued: put cannot know
            assert await ok.put(make_payload(2, seq, time.time_ns(), 64)) is True
        await s.flush(5)
        assert (pub.sent, pub.dropped) == (50, 50)
        assert pub.drops["put_error"] == 50 and pub.errors == 50 and "Undeclared publisher" in pub.last_error
        assert (pub.sent, pub.put_to_zenoh, pub.dropped, pub.dropped_after_put) == (50, 0, 50, 50)
        assert (ok.sent, ok.put_to_zenoh, ok.dropped) == (50, 50, 0)
        failed = log.having("publisher t/err: put failed (ZError: Undeclared publisher)")
        assert 1 <= len(failed) <= 3, log.lines  # rate-limited: the first at once, then once a second
        assert "dropped by the client" in failed[0]
        await s.close(5)
        assert sum(pub.drops.values()) == 50 and pub.put_to_zenoh == 0
        assert log.having("publisher t/err: 50 handed, 0 put to zenoh, 50 dropped by the client (put_error 50)")
        assert log.having("publisher t/ok: 50 handed, 50 put to zenoh, 0 dropped by the client")

    asyncio.run(main())


def test_messages_queued_at_abort_are_client_drops(one_router):
    async def main():
        logger, log = list_logger("abort")
        s = await zc.connect("127.0.0.1", one_router.client_port, name="pub", logger=logger)
        s.zenoh = StuckPublishers(s.zenoh)
        pub = s.declare_publisher("t/x", Priority.DATA, CongestionControl.BLOCK)
        stuck = pub.zenoh
        assert await pub.put(make_payload(1, 0, time.time_ns(), 64)) is True
        assert stuck.entered.wait(5)  # the thread is in zenoh's put with message 0
        for seq in range(1, 10):
            assert await pub.put(make_payload(1, seq, time.time_ns(), 64)) is True  # queued behind it
        s.abort("test over")
        # the nine queued and the one given up in its put: all dropped by the client, counted at once
        assert (pub.sent, pub.dropped) == (10, 10)
        assert pub.drops["discarded_at_abort"] == 10 and pub.dropped == 10 and pub.dropped_after_put == 10
        assert pub.put_to_zenoh == 0
        assert log.having("publisher t/x: 10 handed, 0 put to zenoh, 10 dropped by the client (discarded_at_abort 10)")
        stuck.release.set()  # the put returns (an error: the session is closed) -- not counted twice
        assert pub._join(5)
        assert (pub.sent, pub.put_to_zenoh, pub.dropped) == (10, 0, 10)
        with pytest.raises(zc.ClosedError):
            await pub.put(b"x" * 24)

    asyncio.run(main())


def test_messages_left_when_close_runs_out_of_time_are_client_drops(one_router):
    async def main():
        s = await zc.connect("127.0.0.1", one_router.client_port, name="pub")
        free = s.declare_publisher("t/y")
        s.zenoh = StuckPublishers(s.zenoh)
        pub = s.declare_publisher("t/x", Priority.DATA, CongestionControl.BLOCK)
        stuck = pub.zenoh
        for seq in range(5):
            assert await pub.put(make_payload(1, seq, time.time_ns(), 64)) is True
            assert await free.put(make_payload(2, seq, time.time_ns(), 64)) is True
        assert stuck.entered.wait(5)
        await s.close(0.3)
        assert (pub.sent, pub.dropped) == (5, 5)
        assert pub.drops["discarded_at_close"] == 5 and pub.put_to_zenoh == 0 and pub.dropped_after_put == 5
        assert (free.put_to_zenoh, free.dropped) == (5, 0)  # a close in time sends what was queued
        stuck.release.set()
        assert pub._join(5) and (pub.put_to_zenoh, pub.dropped) == (0, 5)

    asyncio.run(main())


def test_the_publisher_summary_counts_put_errors_as_client_drops(one_router, tmp_path, monkeypatch):
    """In the publisher process: messages whose zenoh put fails are in the send log and in
    ``dropped_by_client`` (by reason in ``client_drops``), and the log says so."""
    declare = zc.Publisher.__init__

    def broken(self, *args, **kwargs):
        declare(self, *args, **kwargs)
        if self.key == "z/bad":
            self.zenoh.undeclare()

    monkeypatch.setattr(zc.Publisher, "__init__", broken)
    logs = tmp_path / "traffic"
    t0 = time.time_ns() + S // 2
    plan = parse_plan(base("pub", "pub-a", one_router.client_port, t0, S, logs,
                           flows=[pub_flow("bad", 41, "z/bad", 100_000, 100, 10 * MS, [[0, S]]),
                                  pub_flow("good", 42, "z/good", 100_000, 100, 10 * MS, [[0, S]])]))
    logs.mkdir(parents=True)
    logger, log = list_logger("process")

    summary = asyncio.run(run_publisher(plan, logger, asyncio.Event()))
    assert summary["end"] == "completed"
    bad, good = summary["flows"]
    _, sent = rows(logs / "send-bad.csv")
    assert bad["sent"] == len(sent) > 10
    assert bad["dropped_by_client"] == bad["sent"] and bad["client_drops"]["put_error"] == bad["sent"]
    assert sum(bad["client_drops"].values()) == bad["dropped_by_client"]
    assert good["dropped_by_client"] == 0 and set(good["client_drops"].values()) == {0}
    assert log.having("publisher z/bad: put failed (ZError: Undeclared publisher)")
    assert log.having(f"publisher z/bad: {bad['sent']} handed, 0 put to zenoh, {bad['sent']} dropped by the client")


# ------------------------------------------------------------------ the traffic processes


def base(role, name, port, t0, end_ns, log_dir, **extra):
    return dict({"version": 1, "role": role, "name": name, "node": "b",
                 "router": {"host": "127.0.0.1", "port": port, "client": "zenoh"},
                 "t0_ns": t0, "end_ns": end_ns, "log_dir": str(log_dir)}, **extra)


def pub_flow(name, flow_id, key, rate, size, tick, phases, priority=5, cc="drop", express=False):
    return {"name": name, "flow_id": flow_id, "key": key, "priority": priority, "congestion_control": cc,
            "express": express, "size": size, "rate_bps": rate, "tick_ns": tick, "phases": phases, "burst": None}


def rows(path: Path):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    return r[0], [tuple(map(int, x)) for x in r[1:]]


def wait_for_line(path: Path, text: str, timeout: float) -> None:
    wait_for(lambda: path.exists() and text in path.read_text(errors="replace"), timeout,
             f"{text!r} in {path.name}")


def test_publisher_and_subscriber_processes_with_the_zenoh_client(chain, procs, tmp_path):
    _lab, a, b = chain
    logs = tmp_path / "traffic"
    t0 = time.time_ns() + 4 * S
    flows = [pub_flow("data", 21, "z/data", 400_000, 1000, 10 * MS, [[0, 3 * S]]),
             pub_flow("rt", 22, "z/rt", 200_000, 1250, 50 * MS, [[500 * MS, 3 * S]], priority=1, cc="block",
                      express=True)]
    sub = base("sub", "sub-b", b.client_port, t0, 4 * S, logs,
               flows=[{"name": f["name"], "flow_id": f["flow_id"], "key": f["key"]} for f in flows])
    pub = base("pub", "pub-a", a.client_port, t0, 3 * S, logs, flows=flows)
    procs.start(sub)
    wait_for_line(logs / "sub-b.log", "ready: subscribed", 15)
    procs.start(pub)
    assert procs.wait("pub-a", 30) == 0, procs.stderr("pub-a")
    assert procs.wait("sub-b", 30) == 0, procs.stderr("sub-b")
    assert "connected to router 127.0.0.1" in (logs / "pub-a.log").read_text()

    for flow in flows:
        header, sent = rows(logs / f"send-{flow['name']}.csv")
        assert header == ["seq", "send_ns", "size"]
        header, recv = rows(logs / f"recv-{flow['name']}-b.csv")
        assert header == ["seq", "send_ns", "recv_ns", "size"]
        assert len(sent) > 10
        assert [r[0] for r in sent] == list(range(len(sent)))
        # every message sent was received, once, with its send time and size
        assert sorted(r[0] for r in recv) == [r[0] for r in sent], flow["name"]
        by_seq = {r[0]: r for r in sent}
        for seq, send_ns, recv_ns, size in recv:
            assert (by_seq[seq][1], by_seq[seq][2]) == (send_ns, size) and size == flow["size"]
            assert recv_ns > send_ns
    summary = read_summary(str(logs / "pub-a.log"))
    assert summary["end"] == "completed" and summary["connections"] == 1 and summary["connection_losses"] == 0
    assert all(f["dropped_by_client"] == 0 for f in summary["flows"])
    sub_summary = read_summary(str(logs / "sub-b.log"))
    assert sub_summary["invalid"] == 0 and sub_summary["foreign"] == 0


def test_query_plans_are_refused_with_the_zenoh_client(tmp_path):
    plan = base("query", "qry-f", 7447, time.time_ns(), 10 * S, tmp_path,
                flows=[{"name": "f", "flow_id": 1, "key": "q/f", "priority": 3, "size": 64, "interval_ns": 10 * MS,
                        "timeout_ns": S, "consolidation": "first", "phases": [[0, S]]}])
    path = tmp_path / "q.json"
    path.write_text(json.dumps(plan))
    r = subprocess.run([sys.executable, "-m", "traffic", "query", "--plan", str(path)], cwd=str(ROOT),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "plan.router.client: the zenoh client does not do queries" in r.stderr


def test_a_subscriber_process_rides_out_a_router_restart(chain, procs, tmp_path):
    lab, a, b = chain
    logs = tmp_path / "traffic"
    t0 = time.time_ns() + 3 * S
    flow = pub_flow("data", 31, "z/data", 200_000, 500, 20 * MS, [[0, 5 * S]])
    sub = base("sub", "sub-b", b.client_port, t0, 6 * S, logs, retry_max_ns=500 * MS,
               flows=[{"name": "data", "flow_id": 31, "key": "z/data"}])
    pub = base("pub", "pub-a", a.client_port, t0, 5 * S, logs, flows=[flow])
    procs.start(sub)
    wait_for_line(logs / "sub-b.log", "ready: subscribed", 15)
    procs.start(pub)
    wait_for(lambda: time.time_ns() > t0 + 1500 * MS, 10, "the run clock at 1.5 s")
    assert lab.stop(b) == 0
    lab.spawn(b)
    lab.wait_ready(b)
    assert procs.wait("pub-a", 30) == 0, procs.stderr("pub-a")
    assert procs.wait("sub-b", 30) == 0, procs.stderr("sub-b")
    text = (logs / "sub-b.log").read_text()
    assert "was lost; zenoh reconnects" in text and "reconnected to router" in text
    summary = read_summary(str(logs / "sub-b.log"))
    assert summary["end"] == "completed" and summary["connections"] == 1 and summary["connection_losses"] == 1
    _, sent = rows(logs / "send-data.csv")
    _, recv = rows(logs / "recv-data-b.csv")
    late = [r for r in recv if r[1] > t0 + 3500 * MS]
    assert late, "nothing received after the router came back"
    assert len({r[0] for r in recv}) == len(recv) and {r[0] for r in recv} <= {r[0] for r in sent}
