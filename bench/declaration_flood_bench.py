"""A declaration flood (issue 26): one client sends N DECLARE frames (distinct literal keys) as fast as
its socket takes them, to the first router of a line of routers, while a healthy publisher (on the
first router) and subscriber (on the last) exchange a paced flow.  Measured: the healthy subscriber's
rate in the window after the flood starts against its rate before it, whether any healthy session's
lease expired, what became of the flooder (refused at the limit, or every key accepted and, on a line,
known at the far end: the time that took), how many link-state packets the flood cost, and the first
router's resident memory before and after.

    .venv/bin/python bench/declaration_flood_bench.py                       # 1 router, default limit
    .venv/bin/python bench/declaration_flood_bench.py --limit 30000         # limit raised above the flood
    .venv/bin/python bench/declaration_flood_bench.py --routers 10 --limit 30000

Every router is its own process on loopback (tests/router/routerlab.py), killed at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "router"))

from router.codec import CongestionControl, FrameKind, Priority, encode_frame, encode_json_frame, make_payload  # noqa: E402
from router.limits import DEFAULT_DECLARATIONS_PER_CLIENT  # noqa: E402
from routerlab import RouterCluster  # noqa: E402
from traffic.client import connect  # noqa: E402

HEALTHY_KEY = "healthy/feed"


class Flooder(threading.Thread):
    """A raw client that says HELLO, sends ``n`` DECLARE frames back to back, then keeps its session
    alive with keep-alives (and reads what the router sends) until ``stop``; ``closed_by_router`` is
    set when the router closes it (the CLOSE's text is in ``received``)."""

    def __init__(self, port: int, n: int, name: str = "flooder") -> None:
        super().__init__(daemon=True)
        self.port, self.n, self.name_ = port, n, name
        self.stop = threading.Event()
        self.sent_at_ns = 0
        self.done_at_ns = 0
        self.closed_by_router = False
        self.received = bytearray()

    def run(self) -> None:
        frames = b"".join(encode_json_frame(FrameKind.DECLARE, {"id": i, "key": f"flood/{self.name_}/k{i}"})
                          for i in range(self.n))
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
            sock.sendall(encode_json_frame(FrameKind.HELLO, {"role": "client", "name": self.name_}))
            self.sent_at_ns = time.time_ns()
            reader = threading.Thread(target=self._read, args=(sock,), daemon=True)
            reader.start()
            try:
                sock.sendall(frames)
                self.done_at_ns = time.time_ns()
                keepalive = encode_frame(FrameKind.KEEPALIVE)
                while not self.stop.wait(0.25):
                    sock.sendall(keepalive)
            except OSError:
                pass
            self.stop.wait(2)
            reader.join(2)

    def _read(self, sock: socket.socket) -> None:
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    self.closed_by_router = True
                    return
                if len(self.received) < 1 << 20:
                    self.received += chunk
        except OSError:
            return


def _rss(cluster: RouterCluster, name: str) -> Optional[float]:
    """The router's RSS from its metrics; None when it does not answer within 5 s (a stalled router)."""
    try:
        return cluster.routers[name].metric("router_resident_memory_bytes")
    except OSError:
        return None


async def _healthy_pair(pub_port: int, sub_port: int, rate: int, seconds: float, flood_after_s: float,
                        start_flood: Callable[[], None]) -> Dict[str, Any]:
    """The healthy publisher and subscriber, paced at ``rate``; ``start_flood`` is called ``flood_after_s``
    after publishing starts."""
    sub = await connect("127.0.0.1", sub_port, name="healthy-sub")
    arrivals: List[int] = []
    await sub.declare_subscriber(HEALTHY_KEY, callback=lambda s: arrivals.append(s.recv_ns))
    pub = await connect("127.0.0.1", pub_port, name="healthy-pub")
    publisher = pub.declare_publisher(HEALTHY_KEY, priority=Priority.DATA, congestion_control=CongestionControl.DROP)
    await asyncio.sleep(1.0)  # the subscription reaches the first router
    t0 = time.time_ns()
    sent = 0
    flood_at = None
    per_tick, tick = max(1, rate // 200), 0.005
    end = time.monotonic() + seconds
    errors = []
    while time.monotonic() < end:
        if flood_at is None and time.time_ns() - t0 >= flood_after_s * 1e9:
            flood_at = time.time_ns()
            start_flood()
        try:
            for _ in range(per_tick):
                await publisher.put(make_payload(1, sent, time.time_ns(), 1024))
                sent += 1
        except ConnectionError as exc:
            errors.append(str(exc))
            break
        await asyncio.sleep(tick)
    await asyncio.sleep(0.5)
    reasons = [s.close_reason for s in (pub, sub) if s.pipeline.closed]
    await pub.close(2)
    await sub.close(2)
    return {"t0_ns": t0, "flood_at_ns": flood_at, "sent": sent, "arrivals": arrivals, "errors": errors,
            "closed": reasons}


def run_flood(tmp: Path, routers: int = 1, declarations: int = 20_000, limit: Optional[int] = None,
              rate: int = 500, before_s: float = 2.0, window_s: float = 2.0) -> Dict[str, Any]:
    """One flood; ``limit`` None keeps the router's default declarations_per_client."""
    cluster = RouterCluster(tmp)
    names = [f"r{i}" for i in range(routers)]
    overrides: Dict[str, Any] = {"lease_ms": 3000, "keepalive_ms": 750}
    if limit is not None:
        overrides["limits"] = {"declarations_per_client": limit}
    try:
        for name in names:
            cluster.add(name, **overrides)
        for a, b in zip(names, names[1:]):
            cluster.link(a, b)
        cluster.start()
        cluster.wait_links(30)
        first, last = cluster.routers[names[0]], cluster.routers[names[-1]]
        rss_before = _rss(cluster, names[0])
        flooder = Flooder(first.client_port, declarations)
        pair = asyncio.run(_healthy_pair(first.client_port, last.client_port, rate, before_s + window_s + 1.0,
                                         before_s, flooder.start))
        flooded = flooder.sent_at_ns or pair["flood_at_ns"]
        # the flooder's keys known at the far end (or refused)
        converged_s = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            refused = [e for e in first.events() if e["event"] == "declarations_refused"]
            if refused:
                break
            seen = [e for e in last.events() if e["event"] == "subscriptions_updated" and e["router"] == names[0]
                    and e["subscriptions"] >= declarations]
            if seen:
                converged_s = (seen[0]["ts_ns"] - flooded) / 1e9
                break
            time.sleep(0.1)
        rss_after = _rss(cluster, names[0])
        flooder.stop.set()
        flooder.join(5)
        lsps = sum(1 for e in first.events() if e["event"] == "subscriptions_updated" and e["router"] == names[0]
                   and e["ts_ns"] >= flooded)
        t0, arrivals = pair["t0_ns"], pair["arrivals"]
        before = sum(1 for t in arrivals if t0 <= t < t0 + before_s * 1e9) / before_s
        during = sum(1 for t in arrivals if flooded <= t < flooded + window_s * 1e9) / window_s
        lease = [e for r in cluster.routers.values() for e in r.events()
                 if e["event"] == "client_disconnected" and "lease expired" in e.get("reason", "")
                 and e["client"].startswith("healthy")]
        return {
            "routers": routers, "declarations": declarations,
            "limit": limit if limit is not None else DEFAULT_DECLARATIONS_PER_CLIENT,
            "healthy_before_msg_s": round(before, 1), "healthy_during_msg_s": round(during, 1),
            "ratio": round(during / before, 3) if before else None,
            "healthy_lease_expired": len(lease) + sum("lease expired" in r for r in pair["closed"]),
            "healthy_errors": pair["errors"],
            "flooder_refused": bool(refused), "refused_event": refused[0] if refused else None,
            "flooder_close_text": bytes(flooder.received[-400:]).decode("utf-8", "replace"),
            "declare_send_s": round((flooder.done_at_ns - flooder.sent_at_ns) / 1e9, 3) if flooder.done_at_ns else None,
            "converged_s": round(converged_s, 3) if converged_s is not None else None,
            "lsps_originated": lsps,
            "rss_before_mb": round(rss_before / 2**20, 1) if rss_before else None,
            "rss_after_mb": round(rss_after / 2**20, 1) if rss_after else None,
        }
    finally:
        cluster.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--routers", type=int, default=1)
    ap.add_argument("--declarations", type=int, default=20_000)
    ap.add_argument("--limit", type=int, default=None, help="declarations_per_client (default: the router's)")
    ap.add_argument("--rate", type=int, default=500, help="healthy flow, messages/s of 1 KiB")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = run_flood(Path(tmp), args.routers, args.declarations, args.limit, args.rate)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
