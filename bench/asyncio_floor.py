"""What a Python process on asyncio costs per message before any router logic: the floor under the
router's added latency per hop and its CPU per message at a low rate (issue 32).

A client sends 64-byte messages at ``--rate`` per second over loopback TCP and waits for each to come
back; the server is, in turn:

- ``blocking``: a thread in ``recv`` / ``send`` (no event loop: what a wake-up and two system calls cost);
- ``asyncio-protocol``: an ``asyncio.Protocol`` whose ``data_received`` writes the bytes back (the
  cheapest asyncio server: one event-loop turn per message);
- ``asyncio-streams``: ``StreamReader.read`` / ``StreamWriter.write`` in a task (a future and a task
  step more per message).

For each: the round-trip time's median and 99th percentile (after a warm-up) and the server's CPU time
per message (``getrusage`` of the server process). Rounds interleave the servers, medians over rounds.

    .venv/bin/python bench/asyncio_floor.py                 # 3 rounds of 3 000 messages at 1 000/s
    .venv/bin/python bench/asyncio_floor.py --rounds 1 --count 1000

The server is a forked child of this process, killed at the end of its case.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import statistics
import sys
import time
from typing import Dict, List

SERVERS = ("blocking", "asyncio-protocol", "asyncio-streams")
MESSAGE = b"x" * 64


def _serve(kind: str, listener: socket.socket, report: int) -> None:
    """In the child: serve one connection until it closes, then write the CPU seconds used to ``report``."""
    start = resource.getrusage(resource.RUSAGE_SELF)

    def done() -> None:
        end = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (end.ru_utime - start.ru_utime) + (end.ru_stime - start.ru_stime)
        os.write(report, json.dumps({"cpu_s": cpu}).encode())
        os._exit(0)

    if kind == "blocking":
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            data = conn.recv(65536)
            if not data:
                done()
            conn.send(data)

    async def main() -> None:
        closed = asyncio.get_running_loop().create_future()
        if kind == "asyncio-protocol":
            class Echo(asyncio.Protocol):
                def connection_made(self, transport):  # type: ignore[override]
                    self.transport = transport

                def data_received(self, data: bytes) -> None:
                    self.transport.write(data)

                def connection_lost(self, exc) -> None:  # type: ignore[override]
                    closed.set_result(None)
            await asyncio.get_running_loop().create_server(Echo, sock=listener)
        else:
            async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                while data := await reader.read(65536):
                    writer.write(data)
                closed.set_result(None)
            await asyncio.start_server(echo, sock=listener)
        await closed
    asyncio.run(main())
    done()


def run_case(kind: str, count: int, rate: float, warmup: int) -> Dict[str, float]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            _serve(kind, listener, write_end)
        finally:
            os._exit(1)
    os.close(write_end)
    listener.close()
    try:
        conn = socket.create_connection(("127.0.0.1", port))
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts: List[int] = []
        t0 = time.monotonic()
        for i in range(warmup + count):
            sent = time.perf_counter_ns()
            conn.send(MESSAGE)
            got = 0
            while got < len(MESSAGE):
                data = conn.recv(65536)
                if not data:
                    raise RuntimeError(f"the {kind} server closed the connection after {i} messages")
                got += len(data)
            rtts.append(time.perf_counter_ns() - sent)
            delay = t0 + (i + 1) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        conn.close()
        report = json.loads(os.read(read_end, 4096) or b"{}")
    finally:
        os.close(read_end)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    measured = sorted(rtts[warmup:])
    return {"rtt_p50_us": round(statistics.median(measured) / 1000, 1),
            "rtt_p99_us": round(measured[int(0.99 * (len(measured) - 1))] / 1000, 1),
            # the whole connection's CPU (warm-up included) over every message it echoed
            "server_cpu_us_per_msg": round(report.get("cpu_s", float("nan")) / (warmup + count) * 1e6, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=3000, help="messages measured per case and round")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--rate", type=float, default=1000.0, help="messages per second")
    args = parser.parse_args()
    if args.rounds < 1 or args.count < 1 or args.rate <= 0:
        parser.error("--rounds and --count must be >= 1 and --rate > 0")
    runs: Dict[str, List[Dict[str, float]]] = {k: [] for k in SERVERS}
    load = os.getloadavg()[0]
    for _ in range(args.rounds):
        for kind in SERVERS:
            runs[kind].append(run_case(kind, args.count, args.rate, args.warmup))
            print(json.dumps({kind: runs[kind][-1]}), file=sys.stderr, flush=True)
    out = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "loadavg_at_start": load,
                       "loadavg_at_end": os.getloadavg()[0]},
           "rounds": args.rounds, "count": args.count, "rate": args.rate,
           "medians": {kind: {m: statistics.median(r[m] for r in rs) for m in rs[0]} for kind, rs in runs.items()},
           "runs": runs}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
