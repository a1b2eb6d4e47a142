"""The congestion story's figures of each run folder given (bench/wan_runs.sh): realtime latency, pub1's
reroute (onset -> detection -> first message on the new path), loss, verdict."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def ms(ns) -> str:
    return f"{ns / 1e6:.1f}" if ns is not None else "-"


def main(folders: list[str]) -> None:
    print(f"{'run':34} {'rt p50':>7} {'rt p99':>7} {'pub1 onset>detect':>17} {'detect>new path':>15} "
          f"{'reroute':>8} {'loss %':>7} verdict")
    for folder in folders:
        run = Path(folder)
        summary = json.loads((run / "report" / "summary.json").read_text())
        rt = next(p for p in summary["priorities"] if p["priority_name"] == "real_time")["latency"]
        pub1 = next((r for r in summary["reroutes"] if r["flow"] == "zpub.pub1"), {})
        verdict = summary.get("verdict", {}).get("passed")
        print(f"{run.parent.name:34} {rt['p50_ns'] / 1e6:7.1f} {rt['p99_ns'] / 1e6:7.1f} "
              f"{ms(pub1.get('detection_time_ns')):>17} {ms(pub1.get('reaction_time_ns')):>15} "
              f"{ms(pub1.get('reroute_time_ns')):>8} "
              f"{summary['overall']['loss_pct']:7.3f} {'PASS' if verdict else 'FAIL' if verdict is False else '-'}")


if __name__ == "__main__":
    main(sys.argv[1:])
