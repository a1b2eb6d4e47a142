"""A stuck subscriber beside a healthy one (issue 26): one router process with the router's defaults
(its config has only node, listen addresses, metrics and event log: no limits), a raw publisher
process of 4 KiB messages (pre-encoded frames, flat out or paced), a raw counting subscriber process, and, in the second half of each pair of runs, a
subscriber of the same key whose client never reads its socket.  Measured: the healthy subscriber's
rate in the 2 s after publishing starts, without and with the stuck one, for Drop and for Block, and
what the router did with the stuck one (event and metric).

    .venv/bin/python bench/stuck_reader_bench.py                  # publisher flat out, 3 pairs each
    .venv/bin/python bench/stuck_reader_bench.py --rate 20000     # publisher paced (msg/s)
    .venv/bin/python bench/stuck_reader_bench.py --limits '{"client": {"stalled_reader_ms": null}}'  # rule off

Every process is killed at the end (the router by its process group, tests/router/routerlab.py).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "router"))

from router.codec import (  # noqa: E402
    FRAME_HEADER, FRAME_HEADER_SIZE, MESSAGE_HEADER, MESSAGE_HEADER_SIZE, CongestionControl, FrameKind, Priority,
    encode_data_frame, encode_frame, encode_json_frame, encode_message, make_payload,
)
from routerlab import RouterCluster  # noqa: E402

KEY = "bench/stuck"
WINDOW_S = 2.0


def _hello(port: int, name: str, declare: bool) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(encode_json_frame(FrameKind.HELLO, {"role": "client", "name": name})
                 + (encode_json_frame(FrameKind.DECLARE, {"id": 1, "key": KEY}) if declare else b""))
    return sock


def _publisher(port: int, cc: int, seconds: float, size: int, rate: Optional[int], started) -> None:
    """A raw client writing pre-encoded DATA frames of ``size``-byte messages (15 to a frame) as fast as its
    socket takes them, or at ``rate`` msg/s: the router, not the client library, is what is measured."""
    sock = _hello(port, "pub", declare=False)
    per_frame = 15
    msg = encode_message(KEY, make_payload(1, 0, time.time_ns(), size), Priority.DATA, cc)
    frame = encode_data_frame([msg] * per_frame, Priority.DATA)
    time.sleep(0.5)
    started.value = time.time_ns()
    t0 = time.monotonic()
    sent = 0
    try:
        while (now := time.monotonic()) < t0 + seconds:
            sock.sendall(frame)
            sent += per_frame
            if rate:
                ahead = sent / rate - (now - t0)
                if ahead > 0.001:
                    time.sleep(ahead)
    except OSError:
        pass
    sock.close()


def _subscriber(port: int, seconds: float, started, result) -> None:
    """A raw client counting the messages it receives in the window after the publisher started."""
    sock = _hello(port, "healthy", declare=True)
    sock.settimeout(0.25)
    keepalive = encode_frame(FrameKind.KEEPALIVE)
    buf = bytearray()
    counted = 0
    end = time.monotonic() + seconds
    last_keepalive = time.monotonic()
    while time.monotonic() < end:
        if time.monotonic() - last_keepalive > 0.5:
            sock.sendall(keepalive)
            last_keepalive = time.monotonic()
        try:
            chunk = sock.recv(1 << 20)
        except socket.timeout:
            continue
        if not chunk:
            break
        now = time.time_ns()
        buf += chunk
        pos = 0
        while len(buf) - pos >= FRAME_HEADER_SIZE:
            _magic, kind, _flags, length = FRAME_HEADER.unpack_from(buf, pos)
            if len(buf) - pos - FRAME_HEADER_SIZE < length:
                break
            body_end = pos + FRAME_HEADER_SIZE + length
            if kind == FrameKind.DATA and started.value and started.value <= now < started.value + WINDOW_S * 1e9:
                off = pos + FRAME_HEADER_SIZE
                while off < body_end:
                    _f, _t, _o, keylen, paylen = MESSAGE_HEADER.unpack_from(buf, off)
                    off += MESSAGE_HEADER_SIZE + keylen + paylen
                    counted += 1
            pos = body_end
        del buf[:pos]
    result.value = counted / WINDOW_S
    sock.close()


def _stuck(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(encode_json_frame(FrameKind.HELLO, {"role": "client", "name": "stuck"})
                 + encode_json_frame(FrameKind.DECLARE, {"id": 1, "key": KEY}))
    return sock


def measure_pair(cc: int, limits: Optional[Dict[str, Any]], tmp: Path, rate: Optional[int] = None,
                 size: int = 4096) -> Dict[str, Any]:
    """The healthy rate alone and beside a stuck subscriber, each with a fresh router."""
    out: Dict[str, Any] = {}
    for with_stuck in (False, True):
        cluster = RouterCluster(tmp / f"{cc}-{with_stuck}-{time.monotonic_ns()}")
        cluster.tmp.mkdir(parents=True)
        extra = {"lease_ms": 3000, "keepalive_ms": 750}
        if limits is not None:
            extra["limits"] = limits
        router = cluster.add("r", **extra)
        stuck = None
        try:
            cluster.start()
            started, result = mp.Value("q", 0), mp.Value("d", 0.0)
            sub = mp.Process(target=_subscriber, args=(router.client_port, WINDOW_S + 4.0, started, result))
            sub.start()
            time.sleep(1.0)
            if with_stuck:
                stuck = _stuck(router.client_port)
                time.sleep(0.3)
            pub = mp.Process(target=_publisher, args=(router.client_port, cc, WINDOW_S + 0.5, size, rate, started))
            pub.start()
            pub.join(30)
            healthy = [e for e in router.admin("limits")["endpoints"] if e["endpoint"].startswith("healthy@")]
            out["healthy_stalled_max_ms_" + ("with_stuck" if with_stuck else "alone")] = \
                healthy[0].get("stalled_max_ms") if healthy else None
            sub.join(30)
            for p in (pub, sub):
                if p.is_alive():
                    p.kill()
            key = "with_stuck" if with_stuck else "alone"
            out[key] = round(result.value, 1)
            if with_stuck:
                ev = [e for e in router.events() if e["event"] == "slow_reader"]
                out["slow_reader_event"] = {k: ev[0].get(k) for k in ("cause", "policy", "stalled_ms")} if ev else None
                out["metric_slow_readers"] = router.metric("router_slow_readers_total")
        finally:
            if stuck is not None:
                stuck.close()
            cluster.cleanup()
    out["ratio"] = round(out["with_stuck"] / out["alone"], 3) if out["alone"] else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--rate", type=int, default=None, help="publisher pace, msg/s (default: flat out)")
    ap.add_argument("--limits", default=None, help="the router's limits object as JSON (default: none)")
    ap.add_argument("--cc", choices=["drop", "block"], action="append", help="only these (default: both)")
    args = ap.parse_args()
    limits = json.loads(args.limits) if args.limits else None
    results: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cc in (("drop", CongestionControl.DROP), ("block", CongestionControl.BLOCK)):
            if args.cc and name not in args.cc:
                continue
            runs = [measure_pair(cc, limits, Path(tmp), args.rate) for _ in range(args.pairs)]
            results[name] = {"runs": runs, "median_ratio": statistics.median(r["ratio"] for r in runs)}
            print(name, json.dumps(runs), file=sys.stderr)
    print(json.dumps({"rate": args.rate, "limits": limits, **results}, indent=1))


if __name__ == "__main__":
    main()
