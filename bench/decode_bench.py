"""pcap decode throughput (packets/s) of spark/pcap.py, the decoder the analysis runs on Spark's executors.

    .venv/bin/python bench/decode_bench.py                          # synthetic 60 s diamond pcaps, 2 worker processes
    .venv/bin/python bench/decode_bench.py --pcaps results/RUN/pcap # the pcaps of a real run (several --pcaps: each)
    .venv/bin/python bench/decode_bench.py --synthetic 10           # the synthetic diamond with 10x the bulk flow
    .venv/bin/python bench/decode_bench.py --baseline 5bd07ad       # and the decoder of that commit, interleaved
    .venv/bin/python bench/decode_bench.py --piece-mb 4             # pieces of 4 MB as the tasks (capture_pieces)
    .venv/bin/python bench/decode_bench.py --workers 1              # one core

Each task decodes one file (or one piece of a file) from disk through mmap, as ingest's tasks do; ``--workers``
processes take the tasks. Per input kind and decoder: packets decoded / wall time of the whole decode
(``packets_per_s``), and packets / CPU seconds of the tasks (``per_core_packets_per_s``: what one core does,
whatever else loads the machine). With ``--baseline`` the two decoders take turns, repetition by repetition.
Prints JSON.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path
from types import ModuleType
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runfolder.layout import LAYOUT  # noqa: E402
from spark import pcap as current  # noqa: E402
from spark.testing import diamond_run, write_run  # noqa: E402

DECODERS: Dict[str, ModuleType] = {"current": current}
Task = Tuple[str, str, Optional[object]]  # (decoder, path, piece or None)


def load_baseline(rev: str) -> ModuleType:
    """spark/pcap.py as it was at ``rev`` (git), as a module of its own."""
    source = subprocess.run(["git", "show", f"{rev}:spark/pcap.py"], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="decode-baseline-")) / "pcap_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("pcap_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pcap_baseline"] = module
    spec.loader.exec_module(module)
    return module


def _decode(task: Task):
    name, path, piece = task
    module = DECODERS[name]
    t = time.process_time()
    r = module.decode_pcap_file(path) if piece is None else module.decode_pcap_piece(path, piece)
    return r.stats.packets, r.stats.messages, time.process_time() - t, r.stats.error


def measure(tasks: List[Task], workers: int) -> dict:
    with get_context("fork").Pool(workers) as pool:
        pool.map(_decode, tasks[:1])  # warm the workers (page cache, imports)
        t = time.perf_counter()
        results = pool.map(_decode, tasks, chunksize=1)
        wall = time.perf_counter() - t
    packets = sum(r[0] for r in results)
    return {"packets": packets, "messages": sum(r[1] for r in results), "tasks": len(tasks), "wall_s": wall,
            "packets_per_s": packets / wall, "per_core_packets_per_s": packets / sum(r[2] for r in results),
            "errors": [r[3] for r in results if r[3]], "load_avg_1m": os.getloadavg()[0]}


def summary(runs: List[dict]) -> dict:
    return {"packets": runs[0]["packets"], "messages": runs[0]["messages"], "tasks": runs[0]["tasks"],
            "packets_per_s_median": round(statistics.median(r["packets_per_s"] for r in runs)),
            "packets_per_s_best": round(max(r["packets_per_s"] for r in runs)),
            "per_core_packets_per_s_median": round(statistics.median(r["per_core_packets_per_s"] for r in runs)),
            "load_avg_1m": [round(r["load_avg_1m"], 1) for r in runs], "errors": runs[0]["errors"]}


def inputs(args, tmp: Path) -> List[Tuple[str, List[str]]]:
    kinds = []
    for folder in args.pcaps or []:
        kinds.append((f"real: {folder}", sorted(str(p) for p in Path(folder).glob("*.pcap"))))
    for size in args.synthetic or ([] if args.pcaps else [1]):
        rd = write_run(diamond_run(name=f"diamond-{size}x", bulk_rate_hz=400.0 * size, snaplen=args.snaplen,
                                   acks=not args.no_acks), tmp)
        kinds.append((f"synthetic {size}x diamond (spark.testing.diamond_run, "
                      + ("data packets only)" if args.no_acks else "ACKs included)"),
                      sorted(str(p) for p in (rd / LAYOUT.pcap_dir).glob("*.pcap"))))
    return kinds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pcaps", action="append", help="folder of .pcap files (repeatable)")
    ap.add_argument("--synthetic", type=int, action="append",
                    help="a synthetic diamond with SIZE x the bulk flow (repeatable; default 1 without --pcaps)")
    ap.add_argument("--baseline", help="a git revision whose spark/pcap.py is measured too, interleaved")
    ap.add_argument("--piece-mb", type=float, help="tasks are pieces of about this many MB (current decoder only)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--snaplen", type=int, default=65535, help="snap length of the synthetic captures")
    ap.add_argument("--no-acks", action="store_true", help="synthetic captures without pure ACKs (every packet "
                                                           "carries data: the slowest case per packet)")
    args = ap.parse_args()
    if args.baseline:
        DECODERS["baseline"] = load_baseline(args.baseline)
    out = {"benchmark": "pcap decode", "workers": args.workers, "cpus": os.cpu_count(), "baseline": args.baseline,
           "piece_mb": args.piece_mb, "inputs": []}
    with tempfile.TemporaryDirectory(prefix="decode-bench-") as tmp:
        for kind, files in inputs(args, Path(tmp)):
            tasks: Dict[str, List[Task]] = {}
            for name in DECODERS:
                if args.piece_mb and name == "current":
                    tasks[name] = [(name, f, p) for f in files
                                   for p in current.capture_pieces(f, int(args.piece_mb * 1e6))]
                else:
                    tasks[name] = [(name, f, None) for f in files]
            runs: Dict[str, List[dict]] = {name: [] for name in DECODERS}
            for _ in range(args.repeat):
                for name in DECODERS:
                    runs[name].append(measure(tasks[name], args.workers))
            out["inputs"].append({"input": kind, "files": len(files),
                                  "bytes": sum(os.path.getsize(f) for f in files),
                                  **{name: summary(r) for name, r in runs.items()}})
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
