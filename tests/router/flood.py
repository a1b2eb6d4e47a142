"""Helper process for QoS tests (not a test): publish N messages with traffic
payload headers at a target rate, then print a JSON summary on stdout.

usage: python flood.py PORT KEY PRIORITY drop|block SIZE COUNT RATE FLOW [express]
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from router.codec import CongestionControl, make_payload  # noqa: E402
from traffic.client import connect  # noqa: E402


async def main() -> None:
    port, key, prio, cc, size, count, rate, flow = sys.argv[1:9]
    express = len(sys.argv) > 9 and sys.argv[9] == "express"
    session = await connect("127.0.0.1", int(port), name=f"flood{flow}")
    pub = session.declare_publisher(key, priority=int(prio),
                                    congestion_control=CongestionControl.BLOCK if cc == "block" else CongestionControl.DROP,
                                    express=express)
    interval = 1.0 / float(rate)
    start = time.monotonic()
    accepted = 0
    for seq in range(int(count)):
        target = start + seq * interval
        delay = target - time.monotonic()
        if delay > 0.001:
            await asyncio.sleep(delay)
        if await pub.put(make_payload(int(flow), seq, time.time_ns(), int(size))):
            accepted += 1
    await session.flush(30)
    await asyncio.sleep(0.2)
    print(json.dumps({"flow": int(flow), "sent": int(count), "accepted": accepted,
                      "client_dropped": pub.dropped, "duration_s": time.monotonic() - start}), flush=True)
    await session.close(timeout=60)
    print("close reason:", session.close_reason, file=sys.stderr)


asyncio.run(main())
