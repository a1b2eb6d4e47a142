"""Query benchmarks: queries per second through one router and added latency per hop of a
query -- for this project's router and, as the reference, Zenoh's router. The harness is
``bench/router_bench.py``'s (its router launchers, the Zenoh router role, medians of
interleaved repetitions); only the querier and queryable roles are new.

    .venv/bin/python bench/query_bench.py --json result.json   # 3 interleaved repetitions, medians
    .venv/bin/python bench/query_bench.py --quick              # one short run of each case
    .venv/bin/python bench/query_bench.py --only ours          # skip the Zenoh reference

Cases (every role a separate OS process on loopback; querier on the first router of the
line, queryable on the last):

- ``throughput``: 1 router; the querier keeps ``--concurrency`` (16) queries outstanding
  (ours: 16 asyncio tasks each looping ``await session.get(key, consolidation="all")``;
  Zenoh: 16 threads each looping the sync ``session.get(key, target=ALL,
  consolidation=NONE)`` and iterating its replies to the end), for ``--duration`` s after
  a warm-up; completed queries/s, and the CPU share of the router and of both clients.
- ``latency_1`` / ``latency_2``: one query at a time (closed loop, ``--count`` after
  ``--warmup-count``) through a line of 1 and of 2 routers; the completion time of the
  query (call -> the final answer: ours ``get`` returns, Zenoh's reply iterator ends).
  Per hop added = 2 routers - 1 router: a query crosses the extra router twice (the
  query on its way out, the reply and the final on their way back).

The queryable answers at once with one reply of ``--size`` bytes that starts with the
traffic payload header, whose send_ns is the answer time: so the querier also splits the
completion time into query leg (call -> answer), reply leg (answer -> reply received) and
final leg (reply received -> query complete).

Also reported, to read the figures with: the router's CPU time per query in the throughput
case (its cost, whatever bounds the clients), the CPU share of every process of the case,
and how busy the whole machine was in the same window and how much of that was other work
(``machine_cpu_busy`` / ``other_cpu_busy``, in cores). ``failed`` counts queries that did
not end "ok" with exactly one reply (ours: also served by the last router); it must be 0.

Zenoh's querier uses the sync API from threads (one per outstanding query): issuing the
next ``get`` from the previous one's drop callback (``zenoh.handlers.Callback``) was
measured slower here (about 2 000 q/s at 16 outstanding vs 10 000-13 000 with threads).
Its ``get`` is sent with ``target=QueryTarget.ALL, consolidation=ConsolidationMode.NONE``,
the counterpart of our "all" (every matching queryable; replies as they come).

Read the latency figures with the machine in mind: on a VM whose vCPUs halt when idle, a
closed loop of one query pays a vCPU wake-up at every hand-off between processes (and
between Zenoh's own threads). With busy loops keeping both vCPUs awake, Zenoh's p50 fell
from about 320 to 200 µs (1 router) while ours did not move (about 400 µs); so
"other work" on the machine can make Zenoh faster, and the comparison of latencies
depends on how idle the machine is.

Each process is started in its own process group and dies with this one (PDEATHSIG);
every one is killed at the end of its case, also on failure.
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import router_bench as rb  # noqa: E402  (also puts the project root on sys.path)
from router_bench import PY, cpu_seconds, median_of, start_our_routers, start_zenoh_routers, zenoh_config  # noqa: E402

HERE = str(Path(__file__).resolve())
KEY = "bench/q"  # what the querier asks for
SERVE = "bench/**"  # what the queryable serves
QUERY_PAYLOAD = b"q" * 16


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the bench process goes, however it goes."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # not Linux: the try/finally kill still holds
        pass


class Procs(rb.Procs):
    """router_bench's process set (process groups, SIGKILL at stop_all), each child dying with us."""

    def start(self, args: List[str], **kw: Any) -> subprocess.Popen:
        kw.setdefault("preexec_fn", _die_with_parent)
        return super().start(args, **kw)


class Lines:
    """The stdout lines of a child, readable with a timeout."""

    def __init__(self, proc: subprocess.Popen, name: str) -> None:
        self.proc, self.name, self.q = proc, name, queue.Queue()  # type: ignore[var-annotated]
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.q.put(line.strip())
        self.q.put(None)

    def expect(self, word: str, timeout: float) -> None:
        try:
            line = self.q.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"{self.name}: no {word!r} within {timeout:.0f} s") from None
        if line != word:
            raise RuntimeError(f"{self.name}: expected {word!r}, got {line!r} (exit code {self.proc.poll()})")


def _hard_deadline(seconds: float) -> None:
    """A role never outlives this, whatever happens to the bench process."""
    signal.signal(signal.SIGALRM, lambda *_: os._exit(3))
    signal.alarm(max(1, int(seconds)))


def _answer_time(payload: bytes) -> Optional[int]:
    from router.codec import unpack_payload_header

    h = unpack_payload_header(payload)
    return h.send_ns if h is not None else None


# ---------------------------------------------------------------- roles (subprocesses)


def role_queryable(impl: str, port: int, size: int, life: float) -> None:
    """Answers every query at once with one reply: a traffic payload whose send_ns is now."""
    from router.codec import make_payload

    _hard_deadline(life)
    if impl == "ours":
        from traffic.client import connect

        def handler(query: Any) -> List[Any]:
            return [(query.key, make_payload(3, 0, time.time_ns(), size))]

        async def main() -> None:
            session = await connect("127.0.0.1", port, name="bench-queryable")
            await session.declare_queryable(SERVE, handler)
            print("ready", flush=True)
            await asyncio.sleep(life)

        asyncio.run(main())
    else:
        import zenoh

        session = zenoh.open(zenoh_config("client", connect=[f"tcp/127.0.0.1:{port}"]))

        def on_query(query: Any) -> None:
            with query:  # leaving it finalizes the query (ResponseFinal)
                query.reply(query.key_expr, make_payload(3, 0, time.time_ns(), size))

        session.declare_queryable(SERVE, on_query)
        print("ready", flush=True)
        time.sleep(life)
    os._exit(0)


class _Ours:
    """The project's client: ``await session.get`` in asyncio."""

    def __init__(self, port: int, replier: str) -> None:
        self.port, self.replier = port, replier

    async def open(self) -> None:
        from traffic.client import connect

        self.session = await connect("127.0.0.1", self.port, name="bench-querier")

    async def get(self) -> Dict[str, Any]:
        t_wall, t0 = time.time_ns(), time.perf_counter_ns()
        res = await self.session.get(KEY, timeout=5.0, consolidation="all", payload=QUERY_PAYLOAD)
        t1, t_end = time.perf_counter_ns(), time.time_ns()
        # answered by the queryable on the last router of the line, and nothing else
        ok = res.outcome == "ok" and len(res) == 1 and res.served_by == [self.replier]
        out = {"ok": ok, "total": t1 - t0, "outcome": res.outcome if ok or res.outcome != "ok" else f"served_by={res.served_by}",
               "replies": len(res)}
        if ok:
            ans = _answer_time(res[0].payload)
            if ans is not None:
                out.update(query_leg=ans - t_wall, reply_leg=res[0].recv_ns - ans, final_leg=t_end - res[0].recv_ns)
        return out


class _Zenoh:
    """Zenoh's sync client API: ``session.get`` returns a FIFO handler iterated to its end
    (the end of iteration is the query's final). Used from threads for concurrency."""

    def __init__(self, port: int) -> None:
        import zenoh

        self.zenoh = zenoh
        self.session = zenoh.open(zenoh_config("client", connect=[f"tcp/127.0.0.1:{port}"]))

    def get(self) -> Dict[str, Any]:
        z = self.zenoh
        t_wall, t0 = time.time_ns(), time.perf_counter_ns()
        replies, first_ns, payload = 0, 0, b""
        for reply in self.session.get(KEY, target=z.QueryTarget.ALL, consolidation=z.ConsolidationMode.NONE,
                                      payload=QUERY_PAYLOAD, timeout=5.0):
            if replies == 0:
                first_ns = time.time_ns()
            sample = reply.ok
            if sample is None:
                replies = -1000  # an error reply
                continue
            replies += 1
            payload = sample.payload.to_bytes()
        t1, t_end = time.perf_counter_ns(), time.time_ns()
        ok = replies == 1
        out = {"ok": ok, "total": t1 - t0, "outcome": "ok" if ok else "bad", "replies": replies}
        if ok:
            ans = _answer_time(payload)
            if ans is not None:
                out.update(query_leg=ans - t_wall, reply_leg=first_ns - ans, final_leg=t_end - first_ns)
        return out


def role_querier(impl: str, port: int, replier: str, mode: str, concurrency: int, warmup: float, duration: float,
                 warmup_count: int, count: int, out: str) -> None:
    """Waits until a query is answered (the queryable known to the querier's router), then
    measures; prints "start" and "end" around the measured part (the parent reads CPU times there)."""
    _hard_deadline(60 + warmup + duration + (warmup_count + count) * 0.1)
    result: Dict[str, Any] = {}

    def latency_result(samples: List[Dict[str, Any]]) -> None:
        result["failed"] = sum(1 for s in samples if not s["ok"])
        result["failures"] = sorted({f'{s["outcome"]}/{s["replies"]}' for s in samples if not s["ok"]})
        for field in ("total", "query_leg", "reply_leg", "final_leg"):
            vals = sorted(s[field] for s in samples if field in s)
            if vals:
                result[field] = vals

    if impl == "ours":
        client = _Ours(port, replier)

        async def main() -> None:
            await client.open()
            deadline = time.monotonic() + 30
            while not (await client.get())["ok"]:
                if time.monotonic() > deadline:
                    raise RuntimeError("no query answered within 30 s")
                await asyncio.sleep(0.05)
            if mode == "latency":
                for _ in range(warmup_count):
                    await client.get()
                print("start", flush=True)
                samples = [await client.get() for _ in range(count)]
                print("end", flush=True)
                latency_result(samples)
                return
            counts = {"ok": 0, "failed": 0}
            failures: set = set()
            stop = False

            async def worker() -> None:
                while not stop:
                    s = await client.get()
                    counts["ok" if s["ok"] else "failed"] += 1
                    if not s["ok"]:
                        failures.add(f'{s["outcome"]}/{s["replies"]}')

            tasks = [asyncio.get_running_loop().create_task(worker()) for _ in range(concurrency)]
            await asyncio.sleep(warmup)
            c0, t0 = dict(counts), time.monotonic()
            print("start", flush=True)
            await asyncio.sleep(duration)
            c1, t1 = dict(counts), time.monotonic()
            print("end", flush=True)
            stop = True
            await asyncio.wait(tasks, timeout=10)
            result.update(completed=c1["ok"] - c0["ok"], failed=c1["failed"] - c0["failed"],
                          failures=sorted(failures), window_s=t1 - t0)

        asyncio.run(main())
    else:
        client = _Zenoh(port)  # type: ignore[assignment]
        deadline = time.monotonic() + 30
        while not client.get()["ok"]:
            if time.monotonic() > deadline:
                raise RuntimeError("no query answered within 30 s")
            time.sleep(0.05)
        if mode == "latency":
            for _ in range(warmup_count):
                client.get()
            print("start", flush=True)
            samples = [client.get() for _ in range(count)]
            print("end", flush=True)
            latency_result(samples)
        else:
            done = [0] * concurrency
            bad = [0] * concurrency
            failures = set()
            stop = threading.Event()

            def worker(i: int) -> None:
                while not stop.is_set():
                    s = client.get()
                    if s["ok"]:
                        done[i] += 1
                    else:
                        bad[i] += 1
                        failures.add(f'{s["outcome"]}/{s["replies"]}')

            threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
            for t in threads:
                t.start()
            time.sleep(warmup)
            d0, b0, t0 = sum(done), sum(bad), time.monotonic()
            print("start", flush=True)
            time.sleep(duration)
            d1, b1, t1 = sum(done), sum(bad), time.monotonic()
            print("end", flush=True)
            stop.set()
            for t in threads:
                t.join(10)
            result.update(completed=d1 - d0, failed=b1 - b0, failures=sorted(failures), window_s=t1 - t0)
    Path(out).write_text(json.dumps(result))
    os._exit(0)


# ---------------------------------------------------------------- measurements


def machine_cpu() -> tuple:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + f[4]  # idle + iowait
    total = sum(f[:8])  # without guest time, which is counted in user already
    return total - idle, total


def _pct(vals: List[int], q: float) -> float:
    return round(vals[min(len(vals) - 1, int(len(vals) * q))] / 1000, 1)


def run_case(impl: str, n_routers: int, mode: str, opts: argparse.Namespace) -> Dict[str, Any]:
    procs = Procs()
    with tempfile.TemporaryDirectory(prefix="query-bench-") as tmpd:
        tmp = Path(tmpd)
        try:
            if impl == "ours":
                routers = start_our_routers(procs, n_routers, tmp, event_loop=opts.event_loop)
            else:
                routers = start_zenoh_routers(procs, n_routers, tmp)
            life = 120 + opts.warmup + opts.duration + (opts.warmup_count + opts.count) * 0.1
            qbl = procs.start([PY, HERE, "--role", "queryable", "--impl", impl, "--port", str(routers[-1]["client_port"]),
                               "--size", str(opts.size), "--life", str(life)], stdout=subprocess.PIPE, text=True)
            Lines(qbl, "queryable").expect("ready", 30)
            out = tmp / "querier.json"
            qr = procs.start([PY, HERE, "--role", "querier", "--impl", impl, "--port", str(routers[0]["client_port"]),
                              "--replier", f"r{n_routers - 1}",
                              "--mode", mode, "--concurrency", str(opts.concurrency), "--warmup", str(opts.warmup),
                              "--duration", str(opts.duration), "--warmup-count", str(opts.warmup_count),
                              "--count", str(opts.count), "--out", str(out)], stdout=subprocess.PIPE, text=True)
            lines = Lines(qr, "querier")
            pids = [r["pid"] for r in routers] + [qr.pid, qbl.pid]
            lines.expect("start", 45 + opts.warmup + opts.warmup_count * 0.1)
            cpu0, t0, m0 = [cpu_seconds(p) for p in pids], time.monotonic(), machine_cpu()
            lines.expect("end", 30 + opts.duration + opts.count * 0.1)
            cpu1, t1, m1 = [cpu_seconds(p) for p in pids], time.monotonic(), machine_cpu()
            if qr.wait(30) != 0:
                raise RuntimeError(f"querier exited with {qr.returncode}")
            data = json.loads(out.read_text())
        finally:
            procs.stop_all()
    wall = t1 - t0
    share = [round((c1 - c0) / wall, 2) for c0, c1 in zip(cpu0, cpu1)]
    res: Dict[str, Any] = {"impl": impl, "routers": n_routers, "mode": mode,
                           "router_cpu_share": round(sum(share[:n_routers]) / n_routers, 2),
                           "querier_cpu_share": share[-2], "queryable_cpu_share": share[-1],
                           "failed": data["failed"]}
    # the whole machine in the same window (1.00 = one core busy), and what of it was not this case's processes
    busy = (m1[0] - m0[0]) / max(1, m1[1] - m0[1]) * (os.cpu_count() or 1)
    res["machine_cpu_busy"] = round(busy, 2)
    res["other_cpu_busy"] = round(max(0.0, busy - sum(share)), 2)
    if data.get("failures"):
        res["failures"] = data["failures"]
    if mode == "throughput":
        res["completed"] = data["completed"]
        res["queries_per_s"] = int(data["completed"] / data["window_s"])
        if res["queries_per_s"]:  # router CPU time per query: the router's cost, whatever bounds the clients
            res["router_cpu_us_per_query"] = round(res["router_cpu_share"] / res["queries_per_s"] * 1e6, 1)
    else:
        tot = data.get("total", [])
        res["samples"] = len(tot)
        if tot:
            res.update(p50_us=_pct(tot, 0.5), p99_us=_pct(tot, 0.99), max_us=_pct(tot, 1.0))
        for leg in ("query_leg", "reply_leg", "final_leg"):
            if data.get(leg):
                res[f"{leg}_p50_us"] = _pct(data[leg], 0.5)
    return res


CASES = [("throughput", 1, "throughput"), ("latency_1_router", 1, "latency"), ("latency_2_routers", 2, "latency")]
KEEP = ("routers", "completed", "samples")


def summarize(runs: Dict[str, Dict[str, List[Dict[str, Any]]]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for impl, cases in runs.items():
        r: Dict[str, Any] = {}
        for name, rs in cases.items():
            if rs:
                r[name] = median_of(rs, keep=KEEP)
                r[name]["failed_total"] = sum(x["failed"] for x in rs)
        one, two = r.get("latency_1_router", {}), r.get("latency_2_routers", {})
        if "p50_us" in one and "p50_us" in two:
            r["per_hop_added_p50_us"] = round(two["p50_us"] - one["p50_us"], 1)
            r["per_hop_added_p99_us"] = round(two["p99_us"] - one["p99_us"], 1)
            # the same difference within each repetition (runs are paired by position)
            pairs = list(zip(cases["latency_1_router"], cases["latency_2_routers"]))
            r["per_hop_added_p50_us_runs"] = sorted(round(b["p50_us"] - a["p50_us"], 1) for a, b in pairs
                                                    if "p50_us" in a and "p50_us" in b)
        out[impl] = r
    return out


def _fmt(case: Dict[str, Any], key: str, fmt: str = "{:,.0f}") -> str:
    if key not in case:
        return "–"
    s = fmt.format(case[key]).replace(",", " ")
    vals = case.get(key + "_runs", [])
    if len(vals) > 1:
        s += " [" + "–".join(fmt.format(v).replace(",", " ") for v in (vals[0], vals[-1])) + "]"
    return s


def markdown(summary: Dict[str, Any], meta: Dict[str, Any]) -> str:
    impls = [i for i in ("ours", "zenoh") if i in summary]
    head = {"ours": "ours", "zenoh": "Zenoh router"}
    rows: List[List[str]] = []

    def row(label: str, cell) -> None:
        rows.append([label] + [cell(summary[i]) for i in impls])

    def case(name: str):
        return lambda s: s.get(name, {})

    row(f"queries/s, {meta['concurrency']} outstanding, 1 router",
        lambda s: _fmt(case("throughput")(s), "queries_per_s"))
    row("… router CPU time per query, µs", lambda s: _fmt(case("throughput")(s), "router_cpu_us_per_query", "{:.0f}"))
    row("… router CPU / querier CPU / queryable CPU (1.00 = one core)",
        lambda s: " / ".join(_fmt(case("throughput")(s), k, "{:.2f}")
                             for k in ("router_cpu_share", "querier_cpu_share", "queryable_cpu_share")))
    for name, label in (("latency_1_router", "1 router"), ("latency_2_routers", "2 routers")):
        row(f"query completion, {label}, p50 / p99 µs",
            lambda s, n=name: f'{_fmt(case(n)(s), "p50_us", "{:.0f}")} / {_fmt(case(n)(s), "p99_us", "{:.0f}")}')
        row(f"… legs p50 µs: query / reply / final, {label}",
            lambda s, n=name: " / ".join(_fmt(case(n)(s), f"{leg}_p50_us", "{:.0f}")
                                         for leg in ("query_leg", "reply_leg", "final_leg")))
        row(f"… router CPU, {label}", lambda s, n=name: _fmt(case(n)(s), "router_cpu_share", "{:.2f}"))
    row("**added per hop (2 routers − 1 router), p50**",
        lambda s: _fmt(s, "per_hop_added_p50_us", "{:.0f}") + " µs" if "per_hop_added_p50_us" in s else "–")
    row("added per hop, p99", lambda s: f'{s["per_hop_added_p99_us"]:.0f} µs' if "per_hop_added_p99_us" in s else "–")
    for name, label in (("throughput", "throughput"), ("latency_1_router", "latency 1 router"),
                        ("latency_2_routers", "latency 2 routers")):
        row(f"machine CPU busy / of it other work, {label} (cores of {meta['cpus']})",
            lambda s, n=name: f'{_fmt(case(n)(s), "machine_cpu_busy", "{:.2f}")} / {_fmt(case(n)(s), "other_cpu_busy", "{:.2f}")}')
    row("failed queries (all runs; must be 0)",
        lambda s: str(sum(s.get(n, {}).get("failed_total", 0) for n, _r, _m in CASES)))
    lines = ["| measure | " + " | ".join(head[i] for i in impls) + " |", "|---" * (len(impls) + 1) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--impl", default="ours", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="latency", help=argparse.SUPPRESS)
    parser.add_argument("--life", type=float, default=300, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    parser.add_argument("--replier", default="r0", help=argparse.SUPPRESS)
    parser.add_argument("--cases", default=",".join(c[0] for c in CASES), help="comma-separated subset of the cases")
    parser.add_argument("--size", type=int, default=64, help="reply payload bytes (query payload: 16)")
    parser.add_argument("--event-loop", default="asyncio", choices=["asyncio", "uvloop"],
                        help="our router's event loop (its event_loop setting; uvloop must be importable)")
    parser.add_argument("--concurrency", type=int, default=16, help="queries outstanding in the throughput case")
    parser.add_argument("--warmup", type=float, default=1.0, help="throughput warm-up, s")
    parser.add_argument("--duration", type=float, default=5.0, help="throughput measured window, s")
    parser.add_argument("--warmup-count", type=int, default=100, help="latency: queries before measuring")
    parser.add_argument("--count", type=int, default=1000, help="latency: queries measured")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved repetitions; medians reported")
    parser.add_argument("--quick", action="store_true", help="1 repetition, 2 s windows, 300 latency samples")
    parser.add_argument("--only", choices=["ours", "zenoh"], default=None)
    parser.add_argument("--json", default="", help="write the results here")
    args = parser.parse_args()
    if args.role == "queryable":
        return role_queryable(args.impl, args.port, args.size, args.life)
    if args.role == "querier":
        return role_querier(args.impl, args.port, args.replier, args.mode, args.concurrency, args.warmup, args.duration,
                            args.warmup_count, args.count, args.out)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so every started process is killed
    if args.quick:
        args.repeat, args.duration, args.warmup, args.count, args.warmup_count = 1, 2.0, 0.5, 300, 50
    impls = [args.only] if args.only else ["ours", "zenoh"]
    meta: Dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
                            "repeat": args.repeat, "concurrency": args.concurrency, "reply_size": args.size,
                            "query_payload_size": len(QUERY_PAYLOAD), "throughput_warmup_s": args.warmup,
                            "throughput_window_s": args.duration, "latency_warmup_count": args.warmup_count,
                            "latency_count": args.count,
                            "command": " ".join(sys.argv)}
    try:
        import importlib.metadata as md

        meta["zenoh_version"] = md.version("eclipse-zenoh")
    except Exception:
        pass
    runs: Dict[str, Dict[str, List[Dict[str, Any]]]] = {i: {name: [] for name, _n, _m in CASES} for i in impls}
    for rep in range(args.repeat):  # interleaved: slow drifts in machine load hit every case and both routers alike
        for impl in impls:
            for name, n, mode in CASES:
                if name not in args.cases.split(","):
                    continue
                res = run_case(impl, n, mode, args)
                runs[impl][name].append(res)
                print(json.dumps({"rep": rep, name: res}), file=sys.stderr, flush=True)
    meta["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary = summarize(runs)
    table = markdown(summary, meta)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": meta, "results": summary, "table": table}, indent=1))
    print(table)
    print(f"\nload average at start {meta['loadavg_at_start']}, at end {meta['loadavg_at_end']} "
          f"({meta['cpus']} CPUs); {args.repeat} repetition(s), medians [min–max]")


if __name__ == "__main__":
    main()
