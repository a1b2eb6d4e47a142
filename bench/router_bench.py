"""Router benchmarks: throughput through one router, added latency per hop,
idle RSS -- for this project's router and, as the reference, Zenoh's router
(``eclipse-zenoh`` opened in router mode, Zenoh Python clients on both sides).

    .venv/bin/python bench/router_bench.py > result.json    # everything, 3 interleaved runs, medians
    .venv/bin/python bench/router_bench.py --quick          # one short run of each
    .venv/bin/python bench/router_bench.py --only ours      # skip the Zenoh reference
    .venv/bin/python bench/router_bench.py --only ours --quick --profile docs/img   # + py-spy flame graphs
    .venv/bin/python bench/router_bench.py --cases latency --repeat 9               # per hop, more rounds

Our router runs each case on asyncio's standard loop (``ours``) and, where uvloop is importable, on
uvloop too (``ours_uvloop``; the router's ``event_loop`` setting); the rounds interleave the variants
(ours, ours on uvloop, Zenoh), so slow drifts in the machine's load hit them alike.

With ``--profile DIR`` py-spy (``pip install py-spy``) samples our router during each
throughput case's traffic and writes ``DIR/router-profile-<case>.svg``; the case's figures are
then perturbed by the sampling and are not comparable with unprofiled runs.

Every process is a separate OS process on loopback; all are killed at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable
HERE = str(Path(__file__).resolve())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Procs:
    def __init__(self) -> None:
        self.procs: List[subprocess.Popen] = []

    def start(self, args: List[str], **kw: Any) -> subprocess.Popen:
        p = subprocess.Popen(args, start_new_session=True, cwd=str(ROOT), **kw)
        self.procs.append(p)
        return p

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(10)
        self.procs.clear()


# ---------------------------------------------------------------- routers


def start_our_routers(procs: Procs, n: int, tmp: Path, metrics: bool = False,
                      event_loop: str = "asyncio") -> List[Dict[str, Any]]:
    """A line of n routers on ``event_loop`` (the router's setting); returns [{pid, client_port, metrics_port}]."""
    ports = [(free_port(), free_port(), free_port()) for _ in range(n)]
    out = []
    for i in range(n):
        cfg: Dict[str, Any] = {"node": f"r{i}", "router_listen": [f"127.0.0.1:{ports[i][0]}"],
                               "client_listen": [f"127.0.0.1:{ports[i][1]}"],
                               "event_log": str(tmp / f"r{i}.events"), "log_level": "WARNING",
                               "event_loop": event_loop,
                               "neighbours": [] if i == 0 else [{"name": f"r{i-1}", "address": "127.0.0.1",
                                                                 "port": ports[i - 1][0]}]}
        if metrics:
            cfg["metrics_listen"] = f"127.0.0.1:{ports[i][2]}"
        path = tmp / f"r{i}.json"
        path.write_text(json.dumps(cfg))
        p = procs.start([PY, "-m", "router", "--config", str(path)], stderr=subprocess.DEVNULL)
        wait_port(ports[i][1])
        out.append({"pid": p.pid, "client_port": ports[i][1], "metrics_port": ports[i][2]})
    time.sleep(1.0)  # links up, link-state exchanged
    return out


def start_zenoh_routers(procs: Procs, n: int, tmp: Path) -> List[Dict[str, Any]]:
    ports = [free_port() for _ in range(n)]
    out = []
    for i in range(n):
        connect = [f"tcp/127.0.0.1:{ports[i - 1]}"] if i else []
        p = procs.start([PY, HERE, "--role", "zenoh-router", "--port", str(ports[i]), "--connect", json.dumps(connect)],
                        stderr=subprocess.DEVNULL)
        wait_port(ports[i])
        out.append({"pid": p.pid, "client_port": ports[i]})
    time.sleep(1.0)
    return out


def zenoh_config(mode: str, listen: Optional[int] = None, connect: Optional[List[str]] = None):
    import zenoh

    conf = zenoh.Config()
    conf.insert_json5("mode", json.dumps(mode))
    conf.insert_json5("scouting/multicast/enabled", "false")
    if listen is not None:
        conf.insert_json5("listen/endpoints", json.dumps([f"tcp/127.0.0.1:{listen}"]))
    if connect:
        conf.insert_json5("connect/endpoints", json.dumps(connect))
    return conf


# ---------------------------------------------------------------- roles (subprocesses)


def role_zenoh_router(port: int, connect: List[str]) -> None:
    import zenoh

    session = zenoh.open(zenoh_config("router", listen=port, connect=connect))
    try:
        while True:
            time.sleep(3600)
    finally:
        session.close()


def role_sub(impl: str, port: int, key: str, duration: float, out: str) -> None:
    """Count messages per 0.1 s bucket and collect latencies from the payload header."""
    from router.codec import unpack_payload_header

    counts: Dict[int, int] = {}
    lat: List[int] = []
    start = time.monotonic()

    def on_payload(payload: bytes) -> None:
        now = time.time_ns()
        b = int((time.monotonic() - start) * 10)
        counts[b] = counts.get(b, 0) + 1
        h = unpack_payload_header(payload)
        if h is not None and h.flow_id == 2:
            lat.append(now - h.send_ns)

    if impl == "ours":
        from traffic.client import connect

        async def main() -> None:
            session = await connect("127.0.0.1", port, name="bench-sub")
            await session.declare_subscriber(key, callback=lambda s: on_payload(s.payload))
            print("ready", flush=True)
            await asyncio.sleep(duration)

        asyncio.run(main())
    else:
        import zenoh

        session = zenoh.open(zenoh_config("client", connect=[f"tcp/127.0.0.1:{port}"]))
        session.declare_subscriber(key, lambda s: on_payload(s.payload.to_bytes()))
        print("ready", flush=True)
        time.sleep(duration)
    Path(out).write_text(json.dumps({"counts": counts, "lat_ns": lat}))
    os._exit(0)


def role_pub(impl: str, port: int, key: str, size: int, duration: float, rate: float) -> None:
    """rate 0 = as fast as possible (Block congestion control), else paced with flow id 2."""
    from router.codec import make_payload

    fixed = make_payload(1, 0, 0, size)
    if impl == "ours":
        from traffic.client import CongestionControl, connect

        async def main() -> None:
            session = await connect("127.0.0.1", port, name="bench-pub")
            pub = session.declare_publisher(key, congestion_control=CongestionControl.BLOCK)
            end = time.monotonic() + duration
            if rate == 0:
                put = pub.put
                while time.monotonic() < end:
                    for _ in range(1000):
                        await put(fixed)
            else:
                seq = 0
                start = time.monotonic()
                while time.monotonic() < end:
                    await pub.put(make_payload(2, seq, time.time_ns(), size))
                    seq += 1
                    delay = start + seq / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
            await session.close()

        asyncio.run(main())
    else:
        import zenoh

        session = zenoh.open(zenoh_config("client", connect=[f"tcp/127.0.0.1:{port}"]))
        pub = session.declare_publisher(key, congestion_control=zenoh.CongestionControl.BLOCK)
        end = time.monotonic() + duration
        if rate == 0:
            while time.monotonic() < end:
                for _ in range(1000):
                    pub.put(fixed)
        else:
            seq = 0
            start = time.monotonic()
            while time.monotonic() < end:
                pub.put(make_payload(2, seq, time.time_ns(), size))
                seq += 1
                delay = start + seq / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        time.sleep(0.5)
        session.close()
    os._exit(0)


def _raw_session(port: int, name: str) -> socket.socket:
    from router.codec import FrameKind, decode_frames, encode_json_frame

    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(encode_json_frame(FrameKind.HELLO, {"role": "client", "name": name}))
    buf = b""
    while not decode_frames(buf)[0]:
        buf += sock.recv(4096)
    return sock


def role_raw_pub(port: int, key: str, size: int, duration: float) -> None:
    """Minimal-CPU publisher: writes one pre-encoded 500-message DATA frame over and over."""
    from router.codec import CongestionControl, encode_data_frame, encode_message, make_payload

    sock = _raw_session(port, "raw-pub")
    msg = encode_message(key, make_payload(1, 0, 0, size), 5, CongestionControl.BLOCK)
    per_frame = max(1, min(500, 60000 // len(msg)))
    frame = encode_data_frame([msg] * per_frame, 5)
    end = time.monotonic() + duration
    while time.monotonic() < end:
        sock.sendall(frame)
    sock.close()
    os._exit(0)


def role_raw_sub(port: int, key: str, duration: float, out: str) -> None:
    """Minimal-CPU subscriber: counts messages from frame and message headers only."""
    from router.codec import (FRAME_HEADER, FRAME_HEADER_SIZE, MESSAGE_HEADER, MESSAGE_HEADER_SIZE, FrameKind,
                              encode_frame, encode_json_frame)

    sock = _raw_session(port, "raw-sub")
    sock.sendall(encode_json_frame(FrameKind.DECLARE, {"id": 1, "key": key}))
    keepalive = encode_frame(FrameKind.KEEPALIVE)
    print("ready", flush=True)
    counts: Dict[int, int] = {}
    start = time.monotonic()
    last_ka = start
    buf = bytearray()
    sock.settimeout(0.5)
    while time.monotonic() - start < duration:
        try:
            chunk = sock.recv(1 << 20)
        except socket.timeout:
            chunk = b""
        now = time.monotonic()
        if now - last_ka > 0.5:
            sock.sendall(keepalive)
            last_ka = now
        buf += chunk
        off = 0
        n = 0
        while len(buf) - off >= FRAME_HEADER_SIZE:
            _m, kind, _f, length = FRAME_HEADER.unpack_from(buf, off)
            if len(buf) - off - FRAME_HEADER_SIZE < length:
                break
            if kind == FrameKind.DATA:
                p = off + FRAME_HEADER_SIZE
                end = p + length
                while p < end:
                    _fl, _t, _o, kl, pl = MESSAGE_HEADER.unpack_from(buf, p)
                    p += MESSAGE_HEADER_SIZE + kl + pl
                    n += 1
            off += FRAME_HEADER_SIZE + length
        del buf[:off]
        b = int((now - start) * 10)
        counts[b] = counts.get(b, 0) + n
    Path(out).write_text(json.dumps({"counts": counts, "lat_ns": []}))
    os._exit(0)


# ---------------------------------------------------------------- measurements


def uvloop_version() -> Optional[str]:
    """uvloop's version where it is importable (our routers then run on it in the ``ours_uvloop`` cases)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.__version__


def start_profiler(procs: Procs, pid: int, duration: float, svg: Path) -> subprocess.Popen:
    """py-spy sampling ``pid`` for ``duration`` seconds into the flame graph ``svg`` (idle time left out)."""
    spy = Path(PY).with_name("py-spy")
    return procs.start([str(spy), "record", "--pid", str(pid), "--duration", str(max(1, int(duration))),
                        "--rate", "250", "--nonblocking", "--format", "flamegraph", "-o", str(svg)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_flow(impl: str, n_routers: int, size: int, rate: float, duration: float, raw: bool = False,
             profile_svg: Optional[Path] = None, event_loop: str = "asyncio") -> Dict[str, Any]:
    procs = Procs()
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        try:
            if impl == "ours":
                routers = start_our_routers(procs, n_routers, tmp, event_loop=event_loop)
            else:
                routers = start_zenoh_routers(procs, n_routers, tmp)
            out = tmp / "sub.json"
            sub = procs.start([PY, HERE, "--role", "raw-sub" if raw else "sub", "--impl", impl, "--port", str(routers[-1]["client_port"]),
                               "--key", "bench/**", "--duration", str(duration + 3), "--out", str(out)],
                              stdout=subprocess.PIPE, text=True)
            assert sub.stdout is not None and sub.stdout.readline().strip() == "ready"
            time.sleep(1.0)  # subscription propagated
            cpu0 = [cpu_seconds(r["pid"]) for r in routers]
            t0 = time.monotonic()
            pub = procs.start([PY, HERE, "--role", "raw-pub" if raw else "pub", "--impl", impl, "--port", str(routers[0]["client_port"]),
                               "--key", "bench/data", "--size", str(size), "--duration", str(duration),
                               "--rate", str(rate)])
            spy = start_profiler(procs, routers[0]["pid"], duration, profile_svg) if profile_svg else None
            pub.wait(duration + 60)
            wall = time.monotonic() - t0
            cpu = [cpu_seconds(r["pid"]) - c for r, c in zip(routers, cpu0)]
            sub.wait(duration + 60)
            if spy is not None:
                spy.wait(30)
            data = json.loads(out.read_text())
        finally:
            procs.stop_all()
    counts = {int(k): v for k, v in data["counts"].items()}
    result: Dict[str, Any] = {"impl": impl, "clients": "raw" if raw else "library", "routers": n_routers, "size": size,
                              "router_cpu_share": round(sum(cpu) / wall / n_routers, 2)}
    if rate == 0:
        # steady state: skip the first second of traffic and the tail
        buckets = sorted(counts)
        if buckets:
            first = buckets[0] + 10
            last = buckets[-1] - 5
            window = [counts.get(b, 0) for b in range(first, last)]
            result["msgs_per_s"] = int(sum(window) / (len(window) / 10)) if window else 0
            share = sum(cpu) / wall / n_routers  # unrounded: the figure the target is about
            if share > 0:
                result["msgs_per_router_cpu_s"] = int(result["msgs_per_s"] / share)
    else:
        lat = sorted(data["lat_ns"])[200:]
        lat.sort()
        if lat:
            result.update({"samples": len(lat), "p50_us": round(lat[len(lat) // 2] / 1000, 1),
                           "p99_us": round(lat[int(len(lat) * 0.99)] / 1000, 1),
                           "mean_us": round(statistics.mean(lat) / 1000, 1)})
    return result


def idle_rss(impl: str, event_loop: str = "asyncio") -> Dict[str, Any]:
    """RSS of an idle router; ours with its metrics endpoint open and scraped once."""
    import urllib.request

    procs = Procs()
    with tempfile.TemporaryDirectory() as tmpd:
        try:
            if impl == "ours":
                routers = start_our_routers(procs, 1, Path(tmpd), metrics=True, event_loop=event_loop)
                urllib.request.urlopen(f"http://127.0.0.1:{routers[0]['metrics_port']}/metrics", timeout=5).read()
            else:
                routers = start_zenoh_routers(procs, 1, Path(tmpd))
            time.sleep(2.0)
            return {"impl": impl, "idle_rss_mb": round(rss_kb(routers[0]["pid"]) / 1024, 1)}
        finally:
            procs.stop_all()


def median_of(runs: List[Dict[str, Any]], keep: tuple = ("routers", "size")) -> Dict[str, Any]:
    """The first run's fields, each number replaced by its median over ``runs`` (and the sorted
    values as ``<field>_runs``); the fields in ``keep`` describe the case and are left as they are."""
    out = dict(runs[0])
    for k, v in runs[0].items():
        if isinstance(v, (int, float)) and k not in keep:
            vals = sorted(r[k] for r in runs if k in r)
            out[k] = vals[len(vals) // 2]
            out[k + "_runs"] = vals
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role")
    parser.add_argument("--impl", default="ours")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--connect", default="[]")
    parser.add_argument("--key", default="bench/**")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=0)
    parser.add_argument("--out", default="")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=["ours", "zenoh"], default=None)
    parser.add_argument("--no-uvloop", action="store_true", help="our router on asyncio's standard loop only")
    parser.add_argument("--cases", choices=["all", "throughput", "latency"], default="all",
                        help="only the throughput cases, or only the two latency cases (per hop; idle RSS too)")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="py-spy flame graphs of our router in the throughput cases, into DIR")
    args = parser.parse_args()
    if args.role == "zenoh-router":
        return role_zenoh_router(args.port, json.loads(args.connect))
    if args.role == "raw-pub":
        return role_raw_pub(args.port, args.key, args.size, args.duration)
    if args.role == "raw-sub":
        return role_raw_sub(args.port, args.key, args.duration, args.out)
    if args.role == "sub":
        return role_sub(args.impl, args.port, args.key, args.duration, args.out)
    if args.role == "pub":
        return role_pub(args.impl, args.port, args.key, args.size, args.duration, args.rate)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so every started process is killed
    dur = 3.0 if args.quick else 6.0
    repeat = 1 if args.quick else args.repeat
    impls = [args.only] if args.only else ["ours", "zenoh"]
    results: Dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                                           "loadavg_at_start": os.getloadavg()[0]},
                               "repeat": repeat, "duration_s": dur}
    # (name in the results, implementation, our router's event loop)
    variants = []
    if "ours" in impls:
        variants.append(("ours", "ours", "asyncio"))
        if not args.no_uvloop and uvloop_version():
            variants.append(("ours_uvloop", "ours", "uvloop"))
            results["machine"]["uvloop"] = uvloop_version()
    if "zenoh" in impls:
        variants.append(("zenoh", "zenoh", "asyncio"))

    def cases_of(impl: str) -> List[tuple]:
        cases = [(f"throughput_{size}", dict(n_routers=1, size=size, rate=0, raw=False)) for size in (64, 1024)]
        if impl == "ours":  # the router alone: clients that cost almost no CPU
            cases += [(f"throughput_raw_{size}", dict(n_routers=1, size=size, rate=0, raw=True)) for size in (64, 1024)]
        latency = [(f"latency_{n}_routers", dict(n_routers=n, size=64, rate=1000, raw=False)) for n in (1, 2)]
        return {"all": cases + latency, "throughput": cases, "latency": latency}[args.cases]

    runs: Dict[str, Dict[str, List[Dict[str, Any]]]] = {
        name: {case: [] for case, _ in cases_of(impl)} for name, impl, _loop in variants}
    for _ in range(repeat):  # interleaved, so slow drifts in machine load hit every variant and case alike
        for name, impl, loop in variants:
            for case, kw in cases_of(impl):
                svg = None
                if args.profile is not None and impl == "ours" and kw["rate"] == 0:
                    svg = args.profile / f"router-profile-{name.replace('_', '-')}-{case.replace('_', '-')}.svg"
                res = run_flow(impl, kw["n_routers"], kw["size"], kw["rate"], dur, raw=kw["raw"], profile_svg=svg,
                               event_loop=loop)
                runs[name][case].append(res)
                print(json.dumps({name: {case: res}}), file=sys.stderr, flush=True)
    for name, impl, loop in variants:
        r: Dict[str, Any] = {case: median_of(rs) for case, rs in runs[name].items()}
        one, two = r.get("latency_1_routers", {}), r.get("latency_2_routers", {})
        if "p50_us" in one and "p50_us" in two:
            r["per_hop_added_p50_us"] = round(two["p50_us"] - one["p50_us"], 1)
            r["per_hop_added_p99_us"] = round(two["p99_us"] - one["p99_us"], 1)
            # the same difference within each round (the two cases run back to back): its spread says how
            # far the medians' difference above can be trusted on this machine
            r["per_hop_added_p50_us_rounds"] = [round(b["p50_us"] - a["p50_us"], 1) for a, b in
                                                zip(runs[name]["latency_1_routers"], runs[name]["latency_2_routers"])
                                                if "p50_us" in a and "p50_us" in b]
        r["idle"] = idle_rss(impl, loop)
        results[name] = r
    results["machine"]["loadavg_at_end"] = os.getloadavg()[0]
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
