"""Benchmark (not a test): RealTime latency behind a saturated Data flow when the
bottleneck is BELOW the router (in the network, not the router's pacing), with
and without TCP_NOTSENT_LOWAT on router links.

    a --(TCP)--> slow proxy (10 Mbit/s, 64 KiB receive buffer) --> b

The proxy plays the role of a shaped link: the router's writer is not paced, so
without the option the kernel send buffer of a's socket absorbs the Data
backlog (megabytes) and RealTime waits behind it; with it, the backlog stays in
a's priority queues where strict priority lets RealTime overtake.

usage: python tests/router/bench_notsent_lowat.py [seconds]
"""
from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from clients import probe_until_received, subscribe  # noqa: E402
from routerlab import RouterCluster, free_port  # noqa: E402
from test_router_qos import finish, kill_all, start_flood  # noqa: E402

RATE_BPS = 10_000_000


def run_proxy(listen_port: int, target_port: int, stop: threading.Event) -> None:
    async def pump_slow(reader, writer):
        budget, last = 0.0, time.monotonic()
        while True:
            data = await reader.read(4096)
            if not data:
                break
            now = time.monotonic()
            budget = min(budget + (now - last) * RATE_BPS / 8, 16384)
            last = now
            budget -= len(data)
            if budget < 0:
                await asyncio.sleep(-budget * 8 / RATE_BPS)
            writer.write(data)
            await writer.drain()
        writer.close()

    async def pump(reader, writer):
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        writer.close()

    async def handle(reader, writer):
        ur, uw = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(pump_slow(reader, uw), pump(ur, writer), return_exceptions=True)

    async def main():
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # a shallow "link"
        sock.bind(("127.0.0.1", listen_port))
        srv = await asyncio.start_server(handle, sock=sock)
        while not stop.is_set():
            await asyncio.sleep(0.1)
        srv.close()

    asyncio.run(main())


def measure(lowat: int, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = RouterCluster(Path(tmp))
        stop = threading.Event()
        try:
            cfg = dict(tcp_notsent_lowat=lowat, congestion_aware=False)
            cluster.add("a", **cfg)
            cluster.add("b", **cfg)
            pport = free_port()
            th = threading.Thread(target=run_proxy, args=(pport, cluster.routers["b"].router_port, stop), daemon=True)
            th.start()
            time.sleep(0.3)
            cluster.routers["a"].config["neighbours"].append({"name": "b", "address": "127.0.0.1", "port": pport})
            cluster.start()
            cluster.wait_links()
            procs: List[subprocess.Popen] = []

            async def scenario():
                a, b = cluster.routers["a"], cluster.routers["b"]
                s, _, rec = await subscribe(b.client_port, "q/**", "sub")
                await probe_until_received(a.client_port, "q/probe", [rec])
                try:
                    # Data: 12 Mbit/s into the 10 Mbit/s link; RealTime: 50 msg/s
                    data = start_flood(a.client_port, "q/data", 5, "drop", 1000, int(1500 * seconds), 1500, 1, procs)
                    await asyncio.sleep(1.0)
                    rt = start_flood(a.client_port, "q/rt", 1, "block", 64, int(50 * (seconds - 2)), 50, 2, procs)
                    await asyncio.to_thread(finish, rt, 120)
                    await asyncio.to_thread(finish, data, 120)
                    await asyncio.sleep(1.0)
                finally:
                    kill_all(procs)
                    await s.close()
                return rec

            rec = asyncio.run(scenario())
            lat = sorted((r[2] - r[1]) / 1e6 for r in rec.flows[2])
            return {"tcp_notsent_lowat": lowat, "rt_received": len(lat),
                    "rt_p50_ms": round(statistics.median(lat), 2),
                    "rt_p99_ms": round(lat[int(0.99 * (len(lat) - 1))], 2), "rt_max_ms": round(lat[-1], 2)}
        finally:
            stop.set()
            cluster.cleanup()




if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    for lowat in (0, 32768, 16384):
        print(json.dumps(measure(lowat, secs)), flush=True)
