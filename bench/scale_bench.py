"""Scaling benchmark: `testbed run` on grids of N routers, per phase, and when routes converged.

    sudo .venv/bin/python bench/scale_bench.py [--sizes 12,25,50,100] [--duration 20] [--keep DIR]

For each N it writes a grid topology (rows x columns as square as N allows, 10 Mbit/s links,
a z_pub from corner to corner and a bulk flow beside it), runs `testbed run --json` on it and
reads the run's folder: the manifest's phases, the routers' events (routes converged = the
instant from which every router's latest route computation covers all N routers and every
link; measured from the start of the `deploy` phase and from the start of the run), the
Ansible tasks' durations, and the controller's CPU. Prints a Markdown table per N and one
summary table for docs/benchmarks.md ("Scale").
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from runfolder.layout import LAYOUT


def grid_shape(n: int) -> tuple[int, int]:
    """rows x columns with rows * columns == n, as square as possible (a prime n is 1 x n: a line)."""
    rows = int(math.isqrt(n))
    while n % rows:
        rows -= 1
    return rows, n // rows


def grid_topology(n: int, duration_s: float, capture: str = "all") -> str:
    rows, cols = grid_shape(n)
    name = lambda r, c: f"r{r}c{c}"  # noqa: E731
    nodes = [name(r, c) for r in range(rows) for c in range(cols)]
    links = []
    for r in range(rows):
        for c in range(cols):
            if c + 1 < cols:
                links.append((name(r, c), name(r, c + 1)))
            if r + 1 < rows:
                links.append((name(r, c), name(r + 1, c)))
    first, last = nodes[0], nodes[-1]
    lines = [f"name: grid{n}", f"description: {rows}x{cols} grid of routers (scale benchmark)",
             f"duration: {duration_s:g}s", "defaults:", "  link: {bw: 10mbit, queue: 100}", "nodes:"]
    lines += [f"  {node}: {{}}" for node in nodes]
    lines.append("links:")
    lines += [f"  - {{endpoints: [{a}, {b}]}}" for a, b in links]
    lines += ["traffic:",
              f"  - {{profile: zpub, node: {first}, subscribers: [{last}], start_delay: 2s, "
              f"pub1_stop: {duration_s * 0.5:g}s, pub2_start: {duration_s * 0.5:g}s}}",
              f"  - {{profile: constant, name: bulk, from: {first}, to: [{last}], rate: 4mbit, start: 2s}}",
              "capture:", f"  links: {capture}"]
    return "\n".join(lines) + "\n"


def converged_ns(run_dir: Path, n_routers: int, n_links: int) -> Optional[int]:
    """When the last router first computed routes over all routers and links (the lab fully known everywhere)."""
    firsts = []
    for events in sorted(run_dir.glob(LAYOUT.router_events("*"))):
        for line in events.read_text().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if (ev.get("event") == "trees_recomputed" and ev.get("routers") == n_routers
                    and ev.get("links") == n_links):
                firsts.append(ev["ts_ns"])
                break
        else:
            return None
    return max(firsts) if len(firsts) == n_routers else None


def ansible_tasks(run_dir: Path) -> dict[str, float]:
    """Seconds per task name summed over hosts, and the playbooks' wall times, from ansible-runner's events."""
    out: dict[str, float] = {}
    for job in run_dir.glob("ansible/**/job_events/*.json"):
        try:
            ev = json.loads(job.read_text())
        except (OSError, ValueError):
            continue
        data = ev.get("event_data", {})
        if ev.get("event") in ("runner_on_ok", "runner_on_failed") and data.get("duration"):
            out[data.get("task", "?")] = out.get(data.get("task", "?"), 0.0) + float(data["duration"])
    return out


def router_cores(run_dir: Path, traffic_start_ns: Optional[int]) -> Optional[float]:
    """Cores all routers kept busy during the traffic (router_cpu_seconds_total, first to last scrape)."""
    total = 0.0
    for path in run_dir.glob("metrics/*.jsonl"):
        points = []
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if traffic_start_ns and record["ts_ns"] < traffic_start_ns:
                continue
            points += [(record["ts_ns"], v) for name, _, v in record["samples"] if name == "router_cpu_seconds_total"]
        if len(points) >= 2:
            (t0, c0), (t1, c1) = points[0], points[-1]
            total += (c1 - c0) / ((t1 - t0) / 1e9) if t1 > t0 else 0.0
    return total or None


def run_one(n: int, duration_s: float, results: Path, topo_dir: Path, capture: str = "all") -> dict:
    rows, cols = grid_shape(n)
    n_links = rows * (cols - 1) + cols * (rows - 1)
    topo = topo_dir / f"grid{n}.yaml"
    topo.write_text(grid_topology(n, duration_s, capture))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    start_ns = time.time_ns()
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(topo), "--results", str(results),
                           "--json", "--quiet"], capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        refused = proc.stderr.strip().splitlines()
        return {"n": n, "error": f"exit {proc.returncode}: " + " ".join(l.strip() for l in refused[-4:])}
    run_dir = Path(outcome["run_dir"])
    manifest = json.loads((run_dir / LAYOUT.manifest).read_text())
    phases = {p["name"]: (p["end_ns"] - p["start_ns"]) / 1e9 for p in manifest.get("phases", []) if p.get("end_ns")}
    deploy_start = next((p["start_ns"] for p in manifest.get("phases", []) if p["name"] == "deploy"), None)
    conv = converged_ns(run_dir, n, n_links)
    return {
        "n": n, "grid": f"{rows}x{cols}", "links": n_links, "status": outcome.get("status"),
        "verdict": outcome.get("verdict"), "exit": proc.returncode, "wall_s": wall,
        "phases": phases,
        "converged_from_start_s": (conv - start_ns) / 1e9 if conv else None,
        "converged_from_deploy_s": (conv - deploy_start) / 1e9 if conv and deploy_start else None,
        "controller_cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "ansible_tasks_s": ansible_tasks(run_dir), "run_dir": str(run_dir),
        "router_cores": router_cores(run_dir, manifest.get("traffic_start_ns")),
    }


PLOTTED = ("lab", "deploy", "capture", "collect", "teardown")
#: the manifest's phases the "lab" column adds up: one phase "lab" until `testbed run` split it into lab,
#: shape and management (issue 28), so rows measured before and after compare
LAB_PHASES = ("lab", "shape", "management")


def phase_s(row: dict, name: str) -> Optional[float]:
    """Seconds of phase ``name`` in a row; "lab" is the lab built, shaped and given its management access."""
    phases = row["phases"]
    if name != "lab":
        return phases.get(name)
    parts = [phases[p] for p in LAB_PHASES if p in phases]
    return sum(parts) if parts else None


def _or_nan(value: Optional[float]) -> float:
    return float("nan") if value is None else value


def growth(rows: list[dict], value) -> float:
    """Exponent b of the least-squares fit value = a * N^b over the rows (1: linear)."""
    points = [(math.log(r["n"]), math.log(value(r))) for r in rows if "error" not in r and value(r)]
    if len(points) < 2:
        return float("nan")
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def plot(rows: list[dict], path: Path) -> None:
    """Seconds per phase and to convergence against N (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((r for r in rows if "error" not in r), key=lambda r: r["n"])
    ns = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for phase in PLOTTED:
        ax.plot(ns, [phase_s(r, phase) or 0.0 for r in rows], marker="o", label=phase)
    ax.plot(ns, [r["converged_from_start_s"] or float("nan") for r in rows], marker="s", color="black",
            linewidth=2, label="testbed run -> routes converged")
    ax.axhline(60, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("routers (grid)")
    ax.set_ylabel("seconds")
    ax.set_title("testbed run on 2 cores: cost against the number of routers")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="12,25,50,100")
    parser.add_argument("--duration", type=float, default=20)
    parser.add_argument("--keep", type=Path, help="keep the results folders here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--plot", type=Path, help="also draw the figures against N here (PNG)")
    parser.add_argument("--from-json", type=Path, nargs="*", help="plot and tabulate these measurements, run nothing")
    parser.add_argument("--capture", default="all", help="the grids' `capture: links:` (default all; e.g. '[0, 1]')")
    args = parser.parse_args()
    print(f"machine: {platform.node()} · {os.cpu_count()} cores · kernel {platform.release()} · "
          f"load average at start {os.getloadavg()[0]:.1f}\n")
    rows = [row for f in args.from_json or [] for row in json.loads(f.read_text())]
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        results = args.keep or Path(tmp) / "results"
        for n in ([] if args.from_json else (int(s) for s in args.sizes.split(","))):
            row = run_one(n, args.duration, results, Path(tmp), args.capture)
            rows.append(row)
            print(json.dumps(row, indent=1), flush=True)
        if args.json and not args.from_json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
    if args.plot:
        plot(rows, args.plot)
    names = ["lab", "deploy", "capture", "traffic", "collect", "teardown"]
    print("\n| N | grid | " + " | ".join(names) + " | converged (from start) | wall | controller CPU | "
          "routers' cores | verdict |")
    print("|---" * (len(names) + 7) + "|")
    for r in rows:
        if "error" in r:
            print(f"| {r['n']} | {r['error']} |")
            continue
        ph = " | ".join(f"{_or_nan(phase_s(r, k)):.1f}" for k in names)
        conv = f"{r['converged_from_start_s']:.1f}" if r["converged_from_start_s"] else "never"
        cores = f"{r['router_cores']:.2f}" if r.get("router_cores") else "-"
        print(f"| {r['n']} | {r['grid']} | {ph} | {conv} | {r['wall_s']:.1f} | {r['controller_cpu_s']:.1f} | "
              f"{cores} | {r['verdict']} |")
    ok = [r for r in rows if "error" not in r]
    print("\ngrowth exponent b of a*N^b (1 = linear): " + ", ".join(
        f"{k} {growth(ok, lambda r, k=k: phase_s(r, k)):.2f}" for k in PLOTTED)
        + f", converged {growth(ok, lambda r: r['converged_from_start_s']):.2f}")


if __name__ == "__main__":
    main()
