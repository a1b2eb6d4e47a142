"""pcap decode throughput (packets/s) of spark/pcap.py, the decoder the analysis runs one task per file.

    .venv/bin/python bench/decode_bench.py                 # synthetic 60 s diamond pcaps, 2 worker processes
    .venv/bin/python bench/decode_bench.py --pcaps DIR     # the pcaps of a real run (results/<run>/pcap)
    .venv/bin/python bench/decode_bench.py --workers 1     # one core

Files are read into memory first (as Spark's tasks do), then decoded by ``--workers`` processes, one
file per task; the figure is packets decoded / wall time of the decode. Prints JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runfolder.layout import LAYOUT  # noqa: E402
from spark.pcap import decode_pcap  # noqa: E402
from spark.testing import diamond_run, write_run  # noqa: E402


def _decode(path: str):
    data = Path(path).read_bytes()
    t = time.perf_counter()
    r = decode_pcap(data)
    return r.stats.packets, r.stats.messages, time.perf_counter() - t, r.stats.error


def measure(files, workers: int) -> dict:
    ctx = get_context("fork")
    with ctx.Pool(workers) as pool:
        pool.map(_decode, files[:1])  # warm the workers (imports)
        t = time.perf_counter()
        results = pool.map(_decode, files, chunksize=1)
        wall = time.perf_counter() - t
    packets = sum(r[0] for r in results)
    return {"packets": packets, "messages": sum(r[1] for r in results), "wall_s": wall,
            "packets_per_s": packets / wall, "per_core_packets_per_s": packets / sum(r[2] for r in results),
            "errors": [r[3] for r in results if r[3]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pcaps", help="folder of .pcap files (default: a synthetic 60 s diamond run)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--snaplen", type=int, default=65535, help="snap length of the synthetic captures")
    ap.add_argument("--no-acks", action="store_true", help="synthetic captures without pure ACKs (every packet "
                                                           "carries data: the slowest case per packet)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="decode-bench-") as tmp:
        if args.pcaps:
            files = sorted(str(p) for p in Path(args.pcaps).glob("*.pcap"))
            source = f"real: {args.pcaps}"
        else:
            rd = write_run(diamond_run(snaplen=args.snaplen, acks=not args.no_acks), Path(tmp))
            files = sorted(str(p) for p in (rd / LAYOUT.pcap_dir).glob("*.pcap"))
            source = ("synthetic 60 s diamond (spark.testing.diamond_run, "
                      + ("data packets only)" if args.no_acks else "ACKs included)"))
        runs = [measure(files, args.workers) for _ in range(args.repeat)]
    best = max(runs, key=lambda r: r["packets_per_s"])
    out = {"benchmark": "pcap decode", "source": source, "files": len(files), "workers": args.workers,
           "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0],
           "packets": best["packets"], "messages": best["messages"],
           "packets_per_s_median": statistics.median(r["packets_per_s"] for r in runs),
           "packets_per_s_best": best["packets_per_s"],
           "per_core_packets_per_s_median": statistics.median(r["per_core_packets_per_s"] for r in runs),
           "target_packets_per_s": 150_000, "errors": best["errors"]}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
