"""`python -m traffic.ping`: which other routers' nodes this node reaches through the router under test
(`testbed ping`, run on every router node at once).

Each process opens a session to its node's router (the lab's client library), subscribes to
``testbed/ping/<me>/*`` (pings to it, each answered on ``testbed/pong/<sender>/<me>``) and to
``testbed/pong/<me>/*`` (the answers to its own), and pings every peer every ``--interval`` until each has
answered or ``--timeout`` has passed: a ping sent before the peer's subscription has reached this router is not
delivered, so it is sent again. It goes on answering others until nobody has pinged it for ``--linger``
seconds, then prints one JSON line: ``{"node": me, "rtt_ms": {peer: round trip of the first answer, or null}}``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from types import SimpleNamespace
from typing import Dict, Optional

from .sessions import open_session

PING, PONG = "testbed/ping", "testbed/pong"


async def ping(me: str, peers: list[str], host: str, port: int, client: str, timeout_s: float,
               interval_s: float, linger_s: float) -> Dict[str, Optional[float]]:
    deadline = time.monotonic() + timeout_s
    plan = SimpleNamespace(client=client, host=host, port=port, name=f"ping-{me}", retry_max_ns=2_000_000_000)
    session = await open_session(plan, timeout=max(1.0, min(10.0, timeout_s)))
    rtt: Dict[str, Optional[float]] = {p: None for p in peers}
    pinged = {"last": time.monotonic()}
    answers: list = []
    pongs = {p: session.declare_publisher(f"{PONG}/{p}/{me}") for p in peers}
    pings = {p: session.declare_publisher(f"{PING}/{p}/{me}") for p in peers}

    def on_ping(sample) -> None:
        sender = sample.key.rsplit("/", 1)[-1]
        pinged["last"] = time.monotonic()
        if sender in pongs:
            answers.append((sender, sample.payload))

    def on_pong(sample) -> None:
        peer = sample.key.rsplit("/", 1)[-1]
        sent_ns = json.loads(sample.payload)["sent_ns"]
        if peer in rtt and rtt[peer] is None:
            rtt[peer] = round((time.time_ns() - sent_ns) / 1e6, 3)

    await session.declare_subscriber(f"{PING}/{me}/*", callback=on_ping)
    await session.declare_subscriber(f"{PONG}/{me}/*", callback=on_pong)
    try:
        next_ping = 0.0
        while time.monotonic() < deadline:
            while answers:
                sender, payload = answers.pop(0)
                await pongs[sender].put(payload)
            now = time.monotonic()
            waiting = [p for p, v in rtt.items() if v is None]
            if not waiting and now - pinged["last"] > linger_s:
                break
            if waiting and now >= next_ping:
                for p in waiting:
                    await pings[p].put(json.dumps({"sent_ns": time.time_ns()}).encode())
                next_ping = now + interval_s
            await asyncio.sleep(0.01)
    finally:
        await session.close(timeout=2.0)
    return rtt


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m traffic.ping", description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="this node")
    parser.add_argument("--peers", required=True, help="the other router nodes, comma-separated")
    parser.add_argument("--router", required=True, help="HOST:PORT of this node's router client port")
    parser.add_argument("--client", default="testbed", help="client library: testbed or zenoh")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--linger", type=float, default=2.0)
    args = parser.parse_args(argv)
    host, _, port = args.router.rpartition(":")
    peers = [p for p in args.peers.split(",") if p]
    try:
        rtt = asyncio.run(ping(args.name, peers, host, int(port), args.client, args.timeout, args.interval,
                               args.linger))
    except (OSError, asyncio.TimeoutError, ValueError) as exc:
        print(json.dumps({"node": args.name, "error": f"cannot reach this node's router at {args.router}: {exc}"}))
        return 1
    print(json.dumps({"node": args.name, "rtt_ms": rtt}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
