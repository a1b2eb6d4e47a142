"""Does a suite catch a regression, and how often does it cry wolf? (docs/benchmarks.md, "Regression suites")

Runs NIGHTS nights of a suite with identical code into a fresh history, then one night against routers made
worse on purpose (``--router-setting congestion_aware=false`` by default), each with the real `testbed suite run`.

Reports:
* per night, every case × metric verdict (nights 2.. are judged against the earlier ones);
* the false-positive rate of the identical nights: verdicts "regression" or "improvement" among them;
* the false-positive rate over simulated nights: every identical repetition pooled per metric, then SPLITS
  random splits into a "tonight" of R repetitions against a baseline of the others, each metric judged alone
  (``judge``: the p-value without the night's Benjamini-Hochberg correction, and without the between-nights
  rule, which needs real nights) — so a harsher test than a real night's;
* whether the injected night is flagged, with the metric, the effect and the p-value;
* the run-to-run spread of every metric (coefficient of variation over the identical repetitions) and the
  wall time of each night.

    sudo .venv/bin/python bench/suite_bench.py [--suite suites/smoke.yaml] [--nights 4] [--repetitions 5]
           [--inject congestion_aware=false] [--out bench-out/suite] [--rejudge]

``--rejudge`` runs nothing: it judges the nights already in OUT again with the current verdict code.

Needs root (it runs labs). Takes about (NIGHTS + 1) × REPETITIONS × a minute with the smoke suite.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spark.regression import judge  # noqa: E402
from runfolder.expectations import METRICS  # noqa: E402
from testbed.suite.spec import higher_is_worse, load_suite  # noqa: E402


def run_night(suite: Path, out: Path, history: Path, repetitions: int, router: list[str]) -> dict:
    argv = [str(ROOT / ".venv" / "bin" / "testbed"), "suite", "run", str(suite), "--results", str(out),
            "--history", str(history), "--repetitions", str(repetitions), "--machine", "bench", "--json"]
    for item in router:
        argv += ["--router-setting", item]
    started = time.monotonic()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=None, text=True)
    wall = time.monotonic() - started
    try:
        summary = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"suite run exited {proc.returncode} without a summary: {proc.stdout[-2000:]}")
    summary["bench_wall_s"] = round(wall, 1)
    summary["bench_exit"] = proc.returncode
    return summary


def pooled(nights: list[dict], case: str, key: str) -> list[float]:
    """Every measured value of (case, key) over the nights' recorded repetitions."""
    values = [r["figures"].get(key) for n in nights for r in n["repetitions"] if r["case"] == case and r["recorded"]]
    return [v for v in values if v is not None]


def simulated_false_positives(suite, nights: list[dict], repetitions: int, splits: int, alpha: float,
                              seed: int = 1) -> dict:
    """Pool the identical nights' repetitions per (case, key); judge random splits as nights."""
    rng = random.Random(seed)
    out = {}
    for case in suite.cases.values():
        for metric in case.metrics:
            values = pooled(nights, case.name, metric.key)
            if len(values) < repetitions + 3:
                continue
            flagged = 0
            for i in range(splits):
                shuffled = values[:]
                rng.shuffle(shuffled)
                j = judge(shuffled[:repetitions], shuffled[repetitions:], metric.min_effect,
                          higher_is_worse(metric.metric), alpha, metric_kind=METRICS[metric.metric], seed=i)
                flagged += j.status in ("regression", "improvement")
            out[f"{case.name}: {metric.key}"] = {"splits": splits, "flagged": flagged, "rate": flagged / splits,
                                                  "values": len(values)}
    return out


def spread(suite, nights: list[dict]) -> dict:
    out = {}
    for case in suite.cases.values():
        for metric in case.metrics:
            values = pooled(nights, case.name, metric.key)
            if len(values) >= 2:
                mean = statistics.fmean(values)
                out[f"{case.name}: {metric.key}"] = {
                    "n": len(values), "median": statistics.median(values), "min": min(values), "max": max(values),
                    "cv": statistics.stdev(values) / mean if mean else None}
    return out


def rejudge(suite, history_uri: str, machine: str = "bench") -> dict:
    """Every night of the history judged again with this code, each against the valid as-shipped nights
    before it (as `suite run` chooses them), so figures measured once can be judged by the verdict as it is
    now: night id -> judgements."""
    from spark.history import history_nights, read_history, select_baseline
    from spark.regression import judge_night
    from spark.session import get_spark

    history = read_history(get_spark(), history_uri, suite.name)
    metrics = {(c.name, m.key): (m.min_effect, METRICS[m.metric]) for c in suite.cases.values() for m in c.metrics}
    out = {}
    for night in history_nights(history)["night"]:
        baseline = select_baseline(history, suite=suite.name, before_night=night, machine=machine, variant="",
                                   last_nights=suite.spec.baseline.last_nights)
        out[night] = [j.to_json() for j in judge_night(history, night, metrics, baseline, suite.spec.alpha)] \
            if baseline else []
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=Path, default=ROOT / "suites" / "smoke.yaml")
    ap.add_argument("--nights", type=int, default=4)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--inject", action="append", default=None, help="KEY=VALUE router setting of the bad night")
    ap.add_argument("--splits", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-out" / "suite")
    ap.add_argument("--rejudge", action="store_true", help="Run nothing: judge the nights already in OUT again "
                                                            "with this code (the last one is the injected night).")
    args = ap.parse_args()
    inject = args.inject or ["congestion_aware=false"]
    suite = load_suite(args.suite)
    args.out.mkdir(parents=True, exist_ok=True)
    history = args.out / "history"
    if args.rejudge:
        folders = sorted((args.out / "suites" / suite.name).glob("*/suite-summary.json"))
        summaries = [json.loads(f.read_text()) for f in folders]
        verdicts = rejudge(suite, str(history))
        for summary in summaries:
            summary["judgements"] = verdicts.get(summary["night"], [])
            summary["bench_wall_s"], summary["bench_exit"] = None, None
        nights, bad = summaries[:-1], summaries[-1]
    else:
        nights = []
        for n in range(args.nights):
            print(f"identical night {n + 1} of {args.nights}", flush=True)
            nights.append(run_night(args.suite, args.out, history, args.repetitions, []))
        print(f"injected night: --router-setting {' '.join(inject)}", flush=True)
        bad = run_night(args.suite, args.out, history, args.repetitions, inject)
    identical = [j for n in nights[1:] for j in n["judgements"]]
    flagged = [j for j in identical if j["status"] in ("regression", "improvement")]
    result = {
        "suite": suite.name, "nights": args.nights, "repetitions": args.repetitions, "inject": inject,
        "night_walls_s": [n["bench_wall_s"] for n in nights + [bad]],
        "night_repetition_walls_s": [[r["wall_s"] for r in n["repetitions"]] for n in nights + [bad]],
        "night_status": [n["status"] for n in nights + [bad]],
        "identical_judgements": len(identical), "identical_flagged": len(flagged),
        "identical_false_positive_rate": len(flagged) / len(identical) if identical else None,
        "identical_flags": [{k: j[k] for k in ("case", "key", "status", "reason")} for j in flagged],
        "simulated": simulated_false_positives(suite, nights, args.repetitions, args.splits, suite.spec.alpha),
        "spread": spread(suite, nights),
        "injected": [{k: j.get(k) for k in ("case", "key", "status", "effect", "effect_kind", "p_value", "q_value",
                                               "tonight_median", "baseline_median", "reason")}
                     for j in bad["judgements"]],
        "injected_status": bad["status"], "injected_exit": bad["bench_exit"],
        "night_folders": [n["night"] for n in nights + [bad]],
    }
    sims = result["simulated"].values()
    result["simulated_false_positive_rate"] = (sum(s["flagged"] for s in sims) / sum(s["splits"] for s in sims)
                                               if sims else None)
    (args.out / ("suite_rejudge.json" if args.rejudge else "suite_bench.json")).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("spread", "simulated")}, indent=1))
    print("spread:", json.dumps(result["spread"], indent=1))
    print("simulated:", json.dumps(result["simulated"], indent=1))


if __name__ == "__main__":
    main()
