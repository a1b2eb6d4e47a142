"""How `analyze` grows with the run: synthetic diamond runs at 1x, 10x, 100x, 300x the bulk flow's rate.

    .venv/bin/python bench/analyze_growth.py                      # 1x, 10x, 100x, 300x (disk allowing)
    .venv/bin/python bench/analyze_growth.py --sizes 1,10         # only these
    .venv/bin/python bench/analyze_growth.py --keep DIR           # keep the runs in DIR (and reuse them there)

Each size is `spark.testing.diamond_run` with the bulk flow at 400 x size msg/s (the other flows as they are),
analysed by a fresh `python -m spark analyze RUN --master local[2]` process. Every ~0.2 s the resident memory
of that process tree is read from /proc: the driver's Python (the process started), the JVM (its java
descendants) and Spark's Python workers (the JVM's python descendants). Prints a Markdown table (wall time,
peaks, the phases' timings from summary.json) and the growth exponent: the slope of log(time) over
log(messages) between the sizes that completed. A size whose run would not fit on the disk (its pcaps
estimated from the 1x run's, times two for Parquet and headroom) is skipped with the reason printed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runfolder.layout import LAYOUT  # noqa: E402
from spark.testing import diamond_run, write_run  # noqa: E402

BASE_BULK_HZ = 400.0
#: pcap bytes of the 1x run (measured; used to estimate a size's disk needs before writing it)
PCAP_BYTES_1X = 70e6
SAMPLE_S = 0.2
#: the synthetic writer's peak resident memory per pcap byte (it streams each capture through a spill file and
#: holds per message only what the simulation hands on: measured 49 MB at 1x, 210 MB at 10x)
WRITER_MEMORY_PER_PCAP_BYTE = 0.3


@dataclass
class Peaks:
    """The largest resident set seen of each part of the analysis' process tree, in bytes."""

    driver: int = 0
    jvm: int = 0
    workers: int = 0
    samples: int = 0


def _children() -> Dict[int, List[int]]:
    out: Dict[int, List[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        out.setdefault(ppid, []).append(int(d))
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def sample_tree(root: int, peaks: Peaks) -> None:
    """One reading: the driver is ``root``; java processes below it are the JVM; python below a JVM are workers."""
    kids = _children()
    jvm = workers = 0
    todo = [(c, False) for c in kids.get(root, [])]
    while todo:
        pid, under_jvm = todo.pop()
        name = _name(pid)
        if name == "java":
            jvm += _rss(pid)
            under_jvm = True
        elif under_jvm and name.startswith("python"):
            workers += _rss(pid)
        todo.extend((c, under_jvm) for c in kids.get(pid, []))
    peaks.driver = max(peaks.driver, _rss(root))
    peaks.jvm = max(peaks.jvm, jvm)
    peaks.workers = max(peaks.workers, workers)
    peaks.samples += 1


@dataclass
class Result:
    size: int
    messages: int = 0
    pcap_bytes: int = 0
    seconds: Optional[float] = None
    peaks: Peaks = field(default_factory=Peaks)
    exit_code: Optional[int] = None
    failure: str = ""
    phases: Dict[str, float] = field(default_factory=dict)
    #: progress line (what the analysis said it was doing) -> (seconds stamped at its start, peaks meanwhile)
    steps: Dict[str, Tuple[float, Peaks]] = field(default_factory=dict)
    skipped: str = ""


def _run_dir(size: int, root: Path) -> Path:
    """The size's run in ``root`` (written by a process of its own, whose memory is given back after)."""
    name = f"diamond-{size}x"
    rd = root / name
    if (rd / LAYOUT.manifest).exists():
        return rd
    shutil.rmtree(rd, ignore_errors=True)
    subprocess.run([sys.executable, __file__, "--write", str(size), "--keep", str(root)], cwd=ROOT, check=True)
    return rd


def write_size(size: int, root: Path) -> Path:
    return write_run(diamond_run(name=f"diamond-{size}x", bulk_rate_hz=BASE_BULK_HZ * size, acks=True), root)


def _available_memory() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def too_large(size: int, root: Path) -> str:
    """Why this size's run cannot be written here ("" when it can): the disk (its pcaps, twice for Parquet and
    headroom) or the memory of the synthetic writer (``WRITER_MEMORY_PER_PCAP_BYTE``)."""
    pcaps = PCAP_BYTES_1X * size
    free, mem = shutil.disk_usage(root).free, _available_memory()
    if 2 * pcaps > 0.8 * free:
        return f"needs ~{2 * pcaps / 1e9:.0f} GB of disk, {free / 1e9:.0f} GB free"
    if WRITER_MEMORY_PER_PCAP_BYTE * pcaps > 0.8 * mem:
        return (f"writing it needs ~{WRITER_MEMORY_PER_PCAP_BYTE * pcaps / 1e9:.0f} GB of memory "
                f"(the synthetic writer's simulation), {mem / 1e9:.0f} GB available")
    return ""


def _messages(rd: Path) -> int:
    """Messages sent (the send logs' data rows)."""
    n = 0
    for p in (rd / LAYOUT.traffic_dir).glob("*"):
        if p.is_file() and p.name.startswith(LAYOUT.send_prefix):
            with p.open("rb") as f:
                n += sum(1 for _ in f) - 1
    return n


def analyse(rd: Path, master: str) -> Result:
    shutil.rmtree(rd / LAYOUT.parquet_dir, ignore_errors=True)
    shutil.rmtree(rd / LAYOUT.report_dir, ignore_errors=True)
    res = Result(size=0)
    log = rd.parent / f"{rd.name}-analyze.log"
    t = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "spark", "analyze", str(rd), "--master", master],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                sample_tree(proc.pid, res.peaks)
                step = _current_step(log)
                if step is not None:
                    sample_tree(proc.pid, res.steps.setdefault(step[1], (step[0], Peaks()))[1])
                done.wait(SAMPLE_S)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        res.exit_code = proc.wait()
        done.set()
        watcher.join()
    res.seconds = time.monotonic() - t
    if res.exit_code != 0:
        res.failure = f"exit {res.exit_code} after {res.seconds:.1f} s: {_failure(log)}"
    else:
        summary = json.loads((rd / LAYOUT.summary).read_text())
        res.phases = {k: round(v, 1) for k, v in (summary.get("timings_s") or {}).items()}
    return res


def _failure(log: Path) -> str:
    """Where the analysis failed and why, from its output: the innermost frame of the analysis' own code and
    Spark's cause (``Caused by:``) or the last error line."""
    lines = log.read_text(errors="replace").strip().splitlines()
    frames = [ln.strip() for ln in lines if ln.strip().startswith("File ") and "/spark/" in ln]
    causes = [ln.split("most recent failure: ")[-1] for ln in lines if ln.startswith("Caused by:")] or \
        [ln for ln in lines if "Error" in ln][-1:] or lines[-1:]
    where = frames[-1].split("/spark/")[-1].replace('", line ', ":").replace(", in ", " in ") if frames else ""
    return f"in spark/{where}: {causes[0][:200]}" if where else causes[0][:200]


def _current_step(log: Path) -> Optional[Tuple[float, str]]:
    """The analysis' last progress line (``[  12.3s] ingest: decoding 8 pcaps``): its seconds and what it says
    it is doing (up to the colon)."""
    last = None
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("[") and "s] " in line:
            stamp, what = line[1:].split("s] ", 1)
            try:
                last = (float(stamp), what.split(" (")[0][:60])
            except ValueError:
                continue
    return last


def steps_table(res: Result) -> str:
    """Per progress step of one size: when it started, how long it took, the peaks while it ran."""
    lines = [f"{res.size}×, by step:", "", "| step | from (s) | seconds | driver Python peak | JVM peak | "
             "Python workers peak |",
             "|---|---|---|---|---|---|"]
    starts = sorted(res.steps.items(), key=lambda kv: kv[1][0])
    for i, (what, (at, peaks)) in enumerate(starts):
        end = starts[i + 1][1][0] if i + 1 < len(starts) else res.seconds or at
        lines.append(f"| {what} | {at:.1f} | {end - at:.1f} | {_mb(peaks.driver)} | {_mb(peaks.jvm)} | "
                     f"{_mb(peaks.workers)} |")
    return "\n".join(lines)


def growth_exponent(results: List[Result]) -> Optional[float]:
    """Least-squares slope of log(seconds) over log(messages) of the completed sizes."""
    pts = [(math.log(r.messages), math.log(r.seconds)) for r in results
           if r.exit_code == 0 and r.seconds and r.messages]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


def _mb(b: int) -> str:
    return f"{b / 2**20:,.0f} MB".replace(",", " ")


def table(results: List[Result]) -> str:
    lines = ["| size | messages | pcaps | analyze | driver Python peak | JVM peak | Python workers peak | phases (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.skipped:
            lines.append(f"| {r.size}× | | | skipped: {r.skipped} | | | | |")
            continue
        took = f"{r.seconds:.1f} s" if r.exit_code == 0 else f"**failed** ({r.failure})"
        phases = ", ".join(f"{k} {v}" for k, v in r.phases.items())
        lines.append(f"| {r.size}× | {r.messages:,} | {_mb(r.pcap_bytes)} | {took} | ".replace(",", " ")
                     + f"{_mb(r.peaks.driver)} | {_mb(r.peaks.jvm)} | {_mb(r.peaks.workers)} | {phases} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,10,100,300", help="comma-separated multiples of the 1x bulk rate")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--keep", help="folder to write the runs in and keep them (reused when already there)")
    ap.add_argument("--write", type=int, metavar="SIZE", help=argparse.SUPPRESS)  # _run_dir's own process
    args = ap.parse_args()
    if args.write:
        write_size(args.write, Path(args.keep))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="analyze-growth-"))
    root.mkdir(parents=True, exist_ok=True)
    results: List[Result] = []
    try:
        for size in sizes:
            why = "" if (root / f"diamond-{size}x" / LAYOUT.manifest).exists() else too_large(size, root)
            if why:
                results.append(Result(size=size, skipped=why))
                print(f"{size}x: skipped: {why}", flush=True)
                continue
            t = time.monotonic()
            rd = _run_dir(size, root)
            print(f"{size}x: run written in {time.monotonic() - t:.0f} s", flush=True)
            res = analyse(rd, args.master)
            res.size = size
            res.messages = _messages(rd)
            res.pcap_bytes = sum(p.stat().st_size for p in (rd / LAYOUT.pcap_dir).glob("*") if p.is_file())
            results.append(res)
            print(f"{size}x: {res.seconds:.1f} s, exit {res.exit_code}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (1 min) at the "
          f"end; master {args.master}; RSS sampled every {SAMPLE_S} s")
    print()
    print(table(results))
    for r in results:
        if r.steps:
            print()
            print(steps_table(r))
    slope = growth_exponent(results)
    print()
    print(f"growth exponent (log-log slope of time over messages): {slope:.2f}" if slope is not None
          else "growth exponent: needs two completed sizes")
    return 0 if all(r.exit_code == 0 for r in results if not r.skipped) else 1


if __name__ == "__main__":
    sys.exit(main())
