"""A night of a suite: check the machine, run every case × repetition in the night's shuffled order (each
a normal results folder, analysed and checked against its topology's expectations), append the figures to
the history, judge every case × metric against the baseline nights, and write the outputs."""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from runfolder.expectations import METRICS
from runfolder.layout import LAYOUT
from testbed.suite.night import NightState, Repetition, RepetitionResult
from testbed.suite.spec import Suite, SuiteCase, higher_is_worse

__all__ = ["NightOptions", "NightOutcome", "run_night", "preflight_cases", "figures_of", "history_rows",
           "Eta"]

#: what a repetition costs besides its traffic (lab, deployment, collection, analysis), before one is measured
FIRST_GUESS_OVERHEAD_S = 45.0


@dataclass
class NightOptions:
    results_root: Path
    history: str
    cases: Optional[set] = None
    machine: str = field(default_factory=socket.gethostname)
    master: Optional[str] = None
    measure_anyway: bool = False       # run the night even when its self-checks fail (it stays invalid)
    verbose: bool = False              # every repetition's own progress lines
    baseline_last: Optional[int] = None
    baseline_nights: Optional[list] = None
    baseline_revision: Optional[str] = None


@dataclass
class NightOutcome:
    state: NightState
    status: str                  # regression | pass | failed | invalid | interrupted
    summary: Optional[dict]
    messages: list


class Eta:
    """Time left: each pending repetition costs what its case's finished ones cost on average (or, before
    any of the case has run, the night's average per second of traffic times the case's duration)."""

    def __init__(self, suite: Suite):
        self.suite = suite
        self.walls: dict[str, list[float]] = {}

    def add(self, case: str, wall_s: float) -> None:
        self.walls.setdefault(case, []).append(wall_s)

    def cost(self, case: str) -> float:
        own = self.walls.get(case)
        if own:
            return sum(own) / len(own)
        duration_s = self.suite.cases[case].spec.duration / 1e9
        done = [(sum(w) / len(w), self.suite.cases[c].spec.duration / 1e9) for c, w in self.walls.items()]
        if done:
            per_traffic_s = sum(w for w, _ in done) / sum(d for _, d in done)
            return per_traffic_s * duration_s
        return duration_s + FIRST_GUESS_OVERHEAD_S

    def left_s(self, pending: list[Repetition]) -> float:
        return sum(self.cost(r.case) for r in pending)


def _fmt_s(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


def preflight_cases(suite: Suite, cases: list[str]) -> dict:
    """Each case's router driver, backend and the nodes' kernel, checked before anything is built (raises
    ``DriverError``, ``LabError`` or ``BackendError`` with the fix); case name -> capabilities."""
    from testbed.backends import BackendOptions
    from testbed.drivers import DriverError, preflight_driver
    from testbed.lab.session import preflight

    caps = {}
    for name in cases:
        case = suite.cases[name]
        try:
            preflight_driver(case.spec)
        except DriverError as exc:
            raise DriverError(f"case {name}: {exc}") from None
        options = BackendOptions.resolve(case.spec, spec_path=str(Path(case.topology_path).resolve()))
        caps[name], _ = preflight(case.spec, options, False)
    return caps


def figures_of(case: SuiteCase, summary: dict) -> dict:
    """The case's metrics measured in one repetition's ``summary.json`` (None: not measured)."""
    from spark.expectations import measure

    out = {}
    for metric in case.metrics:
        value, _ = measure(metric, summary)
        out[metric.key] = None if value is None else float(value)
    return out


def history_rows(suite: Suite, state: NightState, valid: bool, machine: str) -> list:
    """One history row per recorded repetition × metric (the schema of ``spark.history``)."""
    date = time.strftime("%Y-%m-%d", time.gmtime(state.started_ns / 1e9))
    rows = []
    for result in state.results.values():
        if not result.recorded or result.case not in suite.cases:
            continue
        for metric in suite.cases[result.case].metrics:
            rows.append({
                "suite": suite.name, "case": result.case, "metric": metric.metric, "target": metric.target,
                "key": metric.key, "value": result.figures.get(metric.key),
                "higher_is_worse": higher_is_worse(metric.metric), "repetition": result.number,
                "run_id": Path(result.run_dir).name if result.run_dir else "", "run_dir": result.run_dir or "",
                "night": state.night, "started_ns": state.started_ns, "date": date,
                "git_revision": state.git_revision, "router_version": state.router_version, "machine": machine,
                "variant": state.variant, "valid": valid, "expect_passed": bool(result.expect_passed)})
    return rows


def run_repetition(case: SuiteCase, rep: Repetition, state: NightState, caps, options: NightOptions,
                   say: Callable[[str], None]) -> RepetitionResult:
    """One repetition: a normal `testbed run` of the case's effective topology, analysed and checked."""
    from spark.compare import load_summary
    from testbed.run.analysis import analyze_and_check
    from testbed.run.context import RunOptions
    from testbed.run.experiment import run_experiment
    from testbed.run.progress import Progress

    topology = state.folder / "topologies" / f"{case.name}.yaml"
    started = time.monotonic()
    progress = Progress("human" if options.verbose else "quiet")
    run_options = RunOptions(results_root=state.folder / "runs", shortened=case.shortened)
    outcome = run_experiment(case.spec, topology, caps, run_options, progress)
    result = RepetitionResult(case.name, rep.number, str(outcome.run_dir), outcome.status, outcome.error)
    if outcome.status == "completed":
        with open(outcome.run_dir / "analysis.log", "w", encoding="utf-8") as log:
            verdict, error = analyze_and_check(outcome.run_dir, options.master, progress, log)
        result.analysis_error = error
        if error is None and verdict is not None:
            result.expect_passed = verdict
            result.figures = figures_of(case, load_summary(str(outcome.run_dir)))
    result.wall_s = round(time.monotonic() - started, 1)
    return result


def night_topologies(suite: Suite, cases: list[str]) -> dict:
    """Each distinct topology of these cases once, on each backend it runs on: name -> Spec (the self-checks
    verify their links)."""
    topologies: dict = {}
    for case in cases:
        spec = suite.cases[case].spec
        topologies.setdefault(spec.name if spec.backend == "mininet" else f"{spec.name} ({spec.backend})", spec)
    return topologies


def run_night(suite: Suite, state: NightState, options: NightOptions, caps: dict,
              say: Callable[[str], None]) -> NightOutcome:
    """Run (or resume) a night; never leaves ``night.json`` behind what was done. ``caps``: each case's
    capabilities (:func:`preflight_cases`, called before the night is created)."""
    from testbed.suite.selfcheck import check_night

    cases = sorted({r.case for r in state.order if options.cases is None or r.case in options.cases})
    for case in cases:
        path = state.folder / "topologies" / f"{case}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(suite.cases[case].topology_text)
    if state.checks is None:
        say(f"night {state.night}: checking the machine before measuring")
        check = check_night(suite.spec.checks, night_topologies(suite, cases), say)
        state.checks = check.to_json()
        state.save()
    valid = bool(state.checks["valid"])
    messages = list(state.checks.get("problems", []))
    if not valid and not options.measure_anyway:
        for problem in messages:
            say(f"invalid night: {problem}")
        return _finish(suite, state, options, valid, messages, say)
    pending = state.pending(set(cases))
    total = len([r for r in state.order if r.case in cases])
    eta = Eta(suite)
    for result in state.results.values():
        if result.recorded:
            eta.add(result.case, result.wall_s)
    say(f"{total - len(pending)} of {total} repetitions recorded; {len(pending)} to run, about "
        f"{_fmt_s(eta.left_s(pending))}")
    for i, rep in enumerate(pending):
        done = total - len(pending) + i
        say(f"[{done + 1}/{total}] {rep.label}: running ({suite.cases[rep.case].spec.duration / 1e9:g} s of traffic)")
        result = run_repetition(suite.cases[rep.case], rep, state, caps.get(rep.case), options, say)
        state.record(result)
        if result.status == "interrupted":
            say(f"interrupted during {rep.label}; what is recorded stays: resume with --resume")
            return NightOutcome(state, "interrupted", None, messages + [f"interrupted: {result.error}"])
        eta.add(rep.case, result.wall_s)
        say(f"[{done + 1}/{total}] {rep.label}: {_describe(result)} in {_fmt_s(result.wall_s)}; "
            f"about {_fmt_s(eta.left_s(pending[i + 1:]))} left")
    for r in sorted(state.results.values(), key=lambda r: (r.case, r.number)):
        if r.case not in cases:
            continue
        if not r.recorded:
            messages.append(f"{r.case}#{r.number} {r.status}: {r.error or r.analysis_error}")
        elif not r.expect_passed:
            messages.append(f"{r.case}#{r.number} missed its expectations: {'; '.join(missed_expectations(r.run_dir))}")
    return _finish(suite, state, options, valid, messages, say)


def missed_expectations(run_dir: str) -> list[str]:
    """The expectations a repetition missed, with what was measured (from its report/check.json)."""
    import json

    try:
        verdicts = json.loads((Path(run_dir) / LAYOUT.check).read_text())["verdicts"]
    except (OSError, ValueError, KeyError):
        return [f"see {run_dir}/{LAYOUT.check}"]
    return [f"{v['expectation']} (measured {fmt(v['metric'], v['measured'])})" for v in verdicts if not v["passed"]]


def fmt(metric: str, value) -> str:
    from spark.expectations import fmt_value

    return fmt_value(metric, value) if metric in METRICS else str(value)


def _describe(result: RepetitionResult) -> str:
    if result.status != "completed":
        return f"run {result.status}: {result.error}"
    if result.analysis_error:
        return f"analysis failed: {result.analysis_error}"
    return "expectations met" if result.expect_passed else "EXPECTATIONS FAILED"


def _finish(suite: Suite, state: NightState, options: NightOptions, valid: bool, messages: list,
            say: Callable[[str], None]) -> NightOutcome:
    from testbed.suite.outputs import judge_and_write

    rows = history_rows(suite, state, valid, options.machine)
    summary = judge_and_write(suite, state, rows, options, valid, messages, say)
    state.finished = True
    state.save()
    return NightOutcome(state, summary["status"], summary, messages)
