"""Impairment appliance benchmark (issue 29): what carrying a link through the appliance costs.

    sudo .venv/bin/python bench/appliance_bench.py [--backend mininet] [--repeat 3] [--seconds 5]
        [--aggregate 2,4] [--packets 2000] [--through 'delay: 1us' --through 'delay: 5ms' ...]
        [--ring topologies/ring50.yaml] [--skip-links] [--skip-ring] [--json FILE]

For each link configuration given by ``--through`` (default: the sweep THROUGH_SWEEP, from the smallest delay
there is to a wide-area one, and an impairment without any delay), in a lab of its own:

* ceiling per link: iperf3 TCP goodput across one link carried by the appliance with that configuration
  (``delay: 0ms`` is no feature at all, so such a link stays a plain veth: ``delay: 1us`` is the smallest
  delay that puts a link through the appliance), beside the same on a plain veth (first lab only);
* aggregate: N such links at once (one iperf3 per link, each between its own pair of nodes), the sum of
  their goodputs, and the appliance's CPU over that time (utime + stime of its host processes, read
  from /proc) per Gbit received (the receiving interfaces' byte counters, frames included);
* latency: one-way delay (the meter's datagrams carry their send time; the nodes share this machine's clock)
  p50/p99 through the appliance minus the same across a plain veth (the configured delay included: at
  ``delay: 1us`` and without delay this is what the appliance adds at delay ~0);
* ring50 with every link ``delay: 5ms`` (through the appliance: 100 ports) beside the plain ring50:
  bring-up (LabSession.open) and tear-down (close).

Each measurement runs ``--repeat`` times; the tables give the median and the range, and the load average
at its start. Prints Markdown tables for docs/benchmarks.md ("Impairment appliance"). Needs root and
user-mode Linux (`apt-get install user-mode-linux kmod`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from testbed.backends import get_backend
from testbed.lab.session import LabSession
from testbed.links import appliance
from testbed.links.measure import EndAccess, tcp_goodput, udp_arrivals
from testbed.spec import load_spec, load_spec_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_bench import machine, open_and_close  # noqa: E402

#: the smallest impairment that puts a link through the appliance (``delay: 0ms`` is no feature)
THROUGH = "delay: 1us"
#: the link configurations measured by default: the appliance's cost per packet depends on the delay (below
#: ~0.1 ms each packet is released by a timer interrupt of its own; above, one interrupt releases many), and
#: a link whose impairments need no delay (a loss too rare to matter here) releases each packet at once
THROUGH_SWEEP = ("delay: 1us", "delay: 100us", "delay: 1ms", "delay: 5ms", "delay: 20ms", "loss: 0.0001%")
LAB = "appbench"


def pairs_topology(carried: int, plain: int, through: str = THROUGH) -> str:
    """``carried`` links through the appliance with ``through`` (pairs c<i>a-c<i>b) and ``plain`` veths
    (p<i>a-p<i>b)."""
    pairs = [(f"c{i}", through) for i in range(carried)] + [(f"p{i}", "") for i in range(plain)]
    nodes = "".join(f"  {k}a: {{}}\n  {k}b: {{}}\n" for k, _ in pairs)
    links = "".join(f"  - {{endpoints: [{k}a, {k}b]{', ' + extra if extra else ''}}}\n" for k, extra in pairs)
    return f"name: {LAB}\nimpairments: appliance\nnodes:\n{nodes}links:\n{links}"


def delayed_ring(text: str, delay: str = "5ms") -> str:
    """The ring's topology text with every link given ``delay`` (through the appliance), under its own name."""
    out = []
    for line in text.splitlines():
        if line.startswith("name: "):
            line = f"{line}d{delay.rstrip('ms')}\nimpairments: appliance"
        elif line.lstrip().startswith("- {endpoints:"):
            line = line.rstrip().rstrip("}") + f", delay: {delay}}}"
        out.append(line)
    return "\n".join(out) + "\n"


def ends(session: LabSession, key: str) -> tuple[EndAccess, EndAccess]:
    link = session.lab.find_link(f"{key}a-{key}b")
    return EndAccess(session.access(link.a.node), link.a), EndAccess(session.access(link.b.node), link.b)


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def cell(s: dict, scale: float = 1.0, digits: int = 0) -> str:
    return f"{s['median'] * scale:.{digits}f} ({s['min'] * scale:.{digits}f}–{s['max'] * scale:.{digits}f})"


def load() -> float:
    return os.getloadavg()[0]


def appliance_cpu_s(umid: str) -> float:
    """CPU seconds (user + system) of the appliance's host processes so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in appliance.processes_of(umid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / ticks


def rx_bytes(ep: EndAccess) -> int:
    return int(ep.access.run(["cat", f"/sys/class/net/{ep.end.ifname}/statistics/rx_bytes"]).stdout)


def at_once(jobs: list[Callable[[], float]]) -> list[float]:
    """Run ``jobs`` in threads at the same time; their results in order (the first error is raised)."""
    results: list[Optional[float]] = [None] * len(jobs)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            results[i] = jobs[i]()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results  # type: ignore[return-value]


def goodputs(session: LabSession, keys: list[str], seconds: float) -> dict:
    """TCP goodput of each link of ``keys`` at once; with the appliance's CPU and the bytes received."""
    pairs = [ends(session, k) for k in keys]
    umid = appliance.umid_for(session.spec.name)
    rx0 = [rx_bytes(dst) for _, dst in pairs]
    cpu0, t0 = appliance_cpu_s(umid), time.monotonic()
    bps = at_once([lambda s=src, d=dst: tcp_goodput(s, d, seconds=seconds).bits_per_second for src, dst in pairs])
    cpu1, t1 = appliance_cpu_s(umid), time.monotonic()
    received_bits = 8 * sum(rx_bytes(dst) - r for (_, dst), r in zip(pairs, rx0))
    return {"bps": bps, "sum_bps": sum(bps), "wall_s": t1 - t0, "appliance_cpu_s": cpu1 - cpu0,
            "received_gbit": received_bits / 1e9}


def one_way_ms(session: LabSession, key: str, packets: int) -> list[float]:
    src, dst = ends(session, key)
    udp_arrivals(src, dst, 3, interval_ms=20.0, settle_s=0.3)  # neighbours resolved before measuring
    return [(arrived - sent) / 1e6 for _, arrived, sent in udp_arrivals(src, dst, packets, interval_ms=1.0)]


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def measure_links(backend: str, repeat: int, seconds: float, aggregate: list[int], packets: int,
                  through: str = THROUGH, plain: bool = True) -> dict:
    """Ceiling, aggregate, CPU and added latency of links configured with ``through``, in one lab (the
    appliance boots once); the plain veths' goodputs too if ``plain``."""
    n = max(aggregate + [1])
    caps = get_backend(backend).probe()
    session = LabSession(load_spec_text(pairs_topology(n, n, through), filename=f"{LAB}.yaml"), caps, backend=backend)
    out: dict = {"ceiling": {}, "aggregate": {}, "latency": {}}
    session.open()
    try:
        kinds = (("appliance", "c"), ("veth", "p")) if plain else (("appliance", "c"),)
        for kind, prefix in kinds:
            runs = []
            for _ in range(repeat):
                runs.append((load(), goodputs(session, [f"{prefix}0"], seconds)))
            out["ceiling"][kind] = {"load": [r[0] for r in runs], "bps": summary([r[1]["sum_bps"] for r in runs]),
                                    "runs": [r[1] for r in runs]}
        for k in aggregate:
            for kind, prefix in kinds:
                runs = [(load(), goodputs(session, [f"{prefix}{i}" for i in range(k)], seconds))
                        for _ in range(repeat)]
                row = {"load": [r[0] for r in runs], "bps": summary([r[1]["sum_bps"] for r in runs]),
                       "runs": [r[1] for r in runs]}
                if kind == "appliance":
                    row["cpu_s_per_gbit"] = summary([r[1]["appliance_cpu_s"] / r[1]["received_gbit"]
                                                     for r in runs])
                    row["cores"] = summary([r[1]["appliance_cpu_s"] / r[1]["wall_s"] for r in runs])
                out["aggregate"].setdefault(k, {})[kind] = row
        runs = []
        for _ in range(repeat):
            before = load()
            through, plain = one_way_ms(session, "c0", packets), one_way_ms(session, "p0", packets)
            runs.append({"load": before, "appliance_p50_ms": statistics.median(through),
                         "appliance_p99_ms": p99(through), "veth_p50_ms": statistics.median(plain),
                         "veth_p99_ms": p99(plain), "received": [len(through), len(plain)]})
        out["latency"] = {
            "runs": runs, "load": [r["load"] for r in runs],
            **{key: summary([r[key] for r in runs]) for key in runs[0] if key.endswith("_ms")},
            "added_p50_ms": summary([r["appliance_p50_ms"] - r["veth_p50_ms"] for r in runs]),
            "added_p99_ms": summary([r["appliance_p99_ms"] - r["veth_p99_ms"] for r in runs]),
        }
    finally:
        session.close()
    return out


def measure_ring(path: str, backend: str, repeat: int) -> dict:
    """Bring-up and tear-down of the ring as it is and with every link through the appliance, interleaved."""
    text = Path(path).read_text()
    specs = {"plain": load_spec(path), "delay 5ms": load_spec_text(delayed_ring(text), filename=path)}
    caps = get_backend(backend).probe()  # as `testbed run` does, before building
    runs: dict = {name: [] for name in specs}
    for _ in range(repeat):
        for name, spec in specs.items():
            before = load()
            up, down = open_and_close(spec, caps, backend)
            runs[name].append({"load": before, "up_s": up, "down_s": down})
    return {name: {"nodes": len(specs[name].nodes), "links": len(specs[name].links), "runs": r,
                   "up_s": summary([x["up_s"] for x in r]), "down_s": summary([x["down_s"] for x in r])}
            for name, r in runs.items()}


def loads(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


def configured_delay_ns(through: str) -> int:
    """The delay a link configuration (``delay: 5ms``, ``loss: 1%``) asks for, 0 if none."""
    spec = load_spec_text(pairs_topology(1, 0, through), filename=f"{LAB}.yaml")
    return spec.resolved_links()[0].a.egress.delay_ns or 0


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def tables(result: dict) -> None:
    by_config = result.get("links")
    if by_config:
        sizes = sorted({int(k) for m in by_config.values() for k in m["aggregate"]})
        most = str(max(sizes)) if sizes else None
        print("\n### Ceiling per link and in aggregate, by link configuration "
              "(TCP goodput, Mbit/s, median (range))\n")
        print("| link configuration | 1 link | " + " | ".join(f"{k} links at once" for k in sizes)
              + f" | appliance CPU s per Gbit ({most} links) | appliance cores busy ({most} links) "
              "| one-way p50 / p99 (ms) | load average at each run |")
        print("|---|---|" + "---|" * len(sizes) + "---|---|---|---|")
        for through, m in by_config.items():
            agg = m["aggregate"]
            cpu = agg[most]["appliance"] if most else None
            lat = m["latency"]
            print(f"| {through} | {cell(m['ceiling']['appliance']['bps'], 1e-6)} | "
                  + " | ".join(cell(agg[str(k)]["appliance"]["bps"], 1e-6) for k in sizes)
                  + (f" | {cell(cpu['cpu_s_per_gbit'], 1, 2)} | {cell(cpu['cores'], 1, 2)}" if cpu else " | | ")
                  + f" | {lat['appliance_p50_ms']['median']:.3f} / {lat['appliance_p99_ms']['median']:.3f}"
                  + f" | {loads(m['ceiling']['appliance']['load'])} |")
        first = next(iter(by_config.values()))
        if "veth" in first["ceiling"]:
            print(f"| plain veth | {cell(first['ceiling']['veth']['bps'], 1e-6)} | "
                  + " | ".join(cell(first["aggregate"][str(k)]["veth"]["bps"], 1e-6) for k in sizes)
                  + f" | | | {first['latency']['veth_p50_ms']['median']:.3f} / "
                    f"{first['latency']['veth_p99_ms']['median']:.3f}"
                  + f" | {loads(first['ceiling']['veth']['load'])} |")
        for label, target, value in (
                (">= 500 Mbit/s per link", 500e6, lambda m: m["ceiling"]["appliance"]["bps"]["median"]),
                (">= 1 Gbit/s in aggregate", 1e9,
                 lambda m: max(a["appliance"]["bps"]["median"] for a in m["aggregate"].values()))):
            met = [t for t, m in by_config.items() if value(m) >= target]
            missed = [t for t, m in by_config.items() if value(m) < target]
            print(f"\ntarget {label}: met for {', '.join(met) or 'none'}; missed for {', '.join(missed) or 'none'}")
        print("\n### One-way delay the appliance adds beyond the configured one (ms, median (range) of the runs' "
              "percentiles)\n")
        print("| link configuration | p50 added | p99 added | load average at each run |")
        print("|---|---|---|---|")
        for through, m in by_config.items():
            lat, configured_ms = m["latency"], configured_delay_ns(through) / 1e6
            beyond = {k: {s: v - configured_ms for s, v in lat[k].items() if s != "runs"}
                      for k in ("added_p50_ms", "added_p99_ms")}
            print(f"| {through} | {cell(beyond['added_p50_ms'], 1, 3)} | {cell(beyond['added_p99_ms'], 1, 3)} | "
                  f"{loads(lat['load'])} |")
        print("\n(through the appliance minus across a plain veth, minus the configured delay; at delay ~0 (1us, "
              "or no delay) this is the latency added at delay 0: target <= 0.3 ms p50)")
    ring = result.get("ring")
    if ring:
        print("\n### ring50: bring-up and tear-down (s, median (range))\n")
        print("| ring | nodes | links | bring-up | tear-down | load average at each run |")
        print("|---|---|---|---|---|---|")
        for name, row in ring.items():
            print(f"| {name} | {row['nodes']} | {row['links']} | {cell(row['up_s'], 1, 2)} | "
                  f"{cell(row['down_s'], 1, 2)} | {loads([r['load'] for r in row['runs']])} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="mininet")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5, help="iperf3 seconds per flow (after 1 s omitted)")
    parser.add_argument("--aggregate", default="2,4", help="numbers of links at once")
    parser.add_argument("--packets", type=int, default=2000, help="datagrams per one-way delay measurement")
    parser.add_argument("--through", action="append",
                        help="a link configuration to measure (repeatable; default: the sweep "
                             f"{'; '.join(THROUGH_SWEEP)})")
    parser.add_argument("--ring", default="topologies/ring50.yaml")
    parser.add_argument("--skip-ring", action="store_true")
    parser.add_argument("--skip-links", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()
    appliance.require_installed()
    result = {"machine": machine(), "appliance_kernel": appliance.kernel_version(), "backend": args.backend,
              "command": " ".join(sys.argv), "load_at_start": load(), "repeat": args.repeat,
              "through": args.through or list(THROUGH_SWEEP)}
    print(f"machine: {result['machine']} · appliance kernel {result['appliance_kernel']} · backend {args.backend}"
          f" · load average at start {result['load_at_start']:.1f}")
    if not args.skip_links:
        aggregate = [int(k) for k in args.aggregate.split(",") if k]
        result["links"] = {}
        for i, through in enumerate(result["through"]):
            print(f"measuring links with {through} ...", file=sys.stderr, flush=True)
            result["links"][through] = json.loads(json.dumps(  # the keys as in the JSON file
                measure_links(args.backend, args.repeat, args.seconds, aggregate, args.packets, through,
                              plain=i == 0)))
    if not args.skip_ring:
        result["ring"] = measure_ring(args.ring, args.backend, args.repeat)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    tables(result)


if __name__ == "__main__":
    main()
