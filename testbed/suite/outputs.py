"""The end of a night: its figures appended to the history, every case × metric judged against the baseline
nights, and the outputs written into the night's folder: ``suite-summary.json``, ``junit.xml`` (a test case
per case × metric, and one per case for its topology's expectations) and ``trend.html``."""
from __future__ import annotations

import time
from typing import Callable
from xml.etree import ElementTree as ET

from testbed.run.rundir import write_json
from runfolder.expectations import METRICS

__all__ = ["judge_and_write", "suite_junit", "SUMMARY_SCHEMA", "night_status"]

SUMMARY_SCHEMA = "testbed-suite-summary/1"


def night_status(valid: bool, judgements: list, repetitions: list) -> str:
    """invalid (self-checks failed) | failed (a repetition did not run or missed its expectations) |
    regression | pass."""
    if not valid:
        return "invalid"
    if any(j["status"] == "regression" for j in judgements):
        return "regression"
    if any(not r["recorded"] or not r["expect_passed"] for r in repetitions):
        return "failed"
    return "pass"


def night_cases(state) -> list:
    """The cases the night planned (all of the suite's, or those of ``--cases``)."""
    return sorted({r.case for r in state.order})


def baseline_choice(suite, options) -> tuple:
    """(last nights, pinned nights, pinned revision) of the baseline: the command line's when it gives any,
    else the suite file's."""
    base = suite.spec.baseline
    if options.baseline_last or options.baseline_nights or options.baseline_revision:  # the command line wins
        return options.baseline_last or base.last_nights, options.baseline_nights, options.baseline_revision
    return base.last_nights, base.nights, base.revision


def judge_and_write(suite, state, rows: list, options, valid: bool, messages: list,
                    say: Callable[[str], None]) -> dict:
    from spark.history import append_night, read_history, select_baseline
    from spark.regression import judge_night, summarize
    from spark.session import get_spark
    from spark.trend import write_trend

    spark = get_spark(options.master)
    if rows:
        say(f"history: appending {len(rows)} figures of night {state.night} to {options.history}")
        append_night(spark, options.history, rows)
    history = read_history(spark, options.history, suite.name)
    judgements: list = []
    baseline: list = []
    if valid and rows:
        last, nights, revision = baseline_choice(suite, options)
        # the baseline is always the code as shipped (variant ""), on this machine
        baseline = select_baseline(history, suite=suite.name, before_night=state.night, machine=options.machine,
                                   variant="", last_nights=last, pinned_nights=nights, pinned_revision=revision)
        metrics = {(name, m.key): (m.min_effect, METRICS[m.metric])
                   for name in night_cases(state) for m in suite.cases[name].metrics}
        judgements = [j.to_json() for j in judge_night(history, state.night, metrics, baseline, suite.spec.alpha)]
    repetitions = [{"case": r.case, "repetition": r.number, "run_dir": r.run_dir, "status": r.status,
                    "error": r.error, "analysis_error": r.analysis_error, "expect_passed": r.expect_passed,
                    "recorded": r.recorded, "wall_s": r.wall_s, "figures": r.figures}
                   for r in sorted(state.results.values(), key=lambda r: (r.case, r.number))]
    status = night_status(valid, judgements, repetitions)
    summary = {
        "schema": SUMMARY_SCHEMA, "suite": suite.name, "suite_file": state.suite_file, "night": state.night,
        "started_ns": state.started_ns, "finished_ns": time.time_ns(), "status": status, "valid": valid,
        "variant": state.variant, "git_revision": state.git_revision, "router_version": state.router_version,
        "machine": options.machine, "seed": state.seed,
        "metrics": {name: [m.key for m in suite.cases[name].metrics] for name in night_cases(state)},
        "history": options.history, "baseline_nights": baseline, "alpha": suite.spec.alpha,
        "checks": state.checks, "problems": messages, "counts": summarize(judgements),
        "judgements": judgements, "repetitions": repetitions,
    }
    write_json(state.folder / "suite-summary.json", summary)
    (state.folder / "junit.xml").write_text(suite_junit(summary))
    if rows:  # a night that measured nothing (invalid) has nothing to add to the trend
        write_trend(state.folder / "trend.html", history, judgements, state.night, suite.name)
    return summary


def suite_junit(summary: dict) -> str:
    """A test case per case × metric (a regression fails; inconclusive and improvement pass with their reason
    in system-out; an invalid night skips them all) and one per case for its topology's expectations."""
    suites = ET.Element("testsuites", name=f"testbed suite {summary['suite']}")
    planned = summary.get("metrics") or {}
    cases = sorted(set(planned) | {r["case"] for r in summary["repetitions"]} | {j["case"] for j in summary["judgements"]})
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for case in cases:
        ts = ET.SubElement(suites, "testsuite", name=f"{summary['suite']}.{case}")
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        if not summary["valid"]:  # nothing judged: every metric the night planned is skipped, saying why
            for key in planned.get(case, []):
                tc = ET.SubElement(ts, "testcase", classname=f"{summary['suite']}.{case}", name=key)
                counts["tests"] += 1
                counts["skipped"] += 1
                ET.SubElement(tc, "skipped", message="invalid night: " + "; ".join(summary["problems"]))
        for j in (j for j in summary["judgements"] if j["case"] == case):
            tc = ET.SubElement(ts, "testcase", classname=f"{summary['suite']}.{case}", name=j["key"])
            counts["tests"] += 1
            if j["status"] == "regression":
                counts["failures"] += 1
                failure = ET.SubElement(tc, "failure", message=j["reason"], type="regression")
                failure.text = j["reason"]
            else:
                ET.SubElement(tc, "system-out").text = f"{j['status']}: {j['reason']}"
        reps = [r for r in summary["repetitions"] if r["case"] == case]
        tc = ET.SubElement(ts, "testcase", classname=f"{summary['suite']}.{case}", name="expectations")
        counts["tests"] += 1
        if not summary["valid"]:
            counts["skipped"] += 1
            ET.SubElement(tc, "skipped", message="invalid night: " + "; ".join(summary["problems"]))
        else:
            bad = [r for r in reps if not r["recorded"] or not r["expect_passed"]]
            if bad:
                counts["failures"] += 1
                text = "; ".join(f"#{r['repetition']}: " + (f"run {r['status']}: {r['error']}" if r["status"] != "completed"
                                                            else r["analysis_error"] or "expectations failed "
                                                            f"(see {r['run_dir']}/report/check.json)") for r in bad)
                ET.SubElement(tc, "failure", message=text, type="expectations").text = text
            else:
                ET.SubElement(tc, "system-out").text = f"{len(reps)} repetitions met their expectations"
        for k, v in counts.items():
            ts.set(k, str(v))
            totals[k] += v
    for k, v in totals.items():
        suites.set(k, str(v))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
