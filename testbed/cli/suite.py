"""`testbed suite run|validate|trend`: nightly regression suites (docs/suites.md).

Exit status of `suite run`: 0 the night passed (no regression, every repetition met its expectations),
1 a regression, a repetition that failed or missed its expectations, or an interruption, 2 bad input,
3 the night is invalid (its self-checks failed: load, CPU steal or link shaping).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from testbed.cli.completion import suite_files
from testbed.cli.common import BAD_INPUT, FAILED, fail, need_root

suite_app = typer.Typer(help="Regression suites: repetitions, a history of nights and a statistical verdict.",
                        no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                        rich_markup_mode=None)

INVALID = 3  # `suite run` only: the night's self-checks failed


def _load(file: Path, router: Optional[List[str]] = None, repetitions: Optional[int] = None):
    from testbed.spec import SpecError
    from testbed.suite.spec import load_suite

    try:
        return load_suite(file, _router_settings(router or []), repetitions)
    except SpecError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(BAD_INPUT)


def _router_settings(items: List[str]) -> dict:
    from testbed.spec.overrides import RouterOverrideError, parse_router_settings

    try:
        return parse_router_settings(items, "--router-setting")
    except RouterOverrideError as exc:
        fail(str(exc), BAD_INPUT)


def _variant(items: List[str]) -> str:
    return ",".join(item.replace(" ", "") for item in sorted(items))


@suite_app.callback()
def suite() -> None:
    """Regression suites: repetitions, a history of nights and a statistical verdict."""


@suite_app.command()
def validate(file: Path = typer.Argument(..., help="Suite file (YAML).", autocompletion=suite_files)) -> None:
    """Check a suite file and every case's topology with its overrides; list what a night would run."""
    s = _load(file)
    for case in s.cases.values():
        typer.echo(f"{case.name}: {case.topology_path.name}, {case.repetitions} repetitions of "
                   f"{case.spec.duration / 1e9:g} s on {case.spec.backend}"
                   + (f", overrides {', '.join(case.overrides)}" if case.overrides else ""))
        for m in case.metrics:
            typer.echo(f"    {m.key}: minimum effect {m.min_effect.describe(_kind(m.metric))}")
        for line in _shortened_lines(case):
            typer.echo(f"    {line}")


def _shortened_lines(case) -> List[str]:
    """What a case's shorter duration leaves out of its topology (docs/spec.md "A shorter run")."""
    from runfolder.units import format_duration

    if case.shortened is None:
        return []
    return case.shortened.lines(f"case {case.name}'s duration {format_duration(case.shortened.duration_ns)}")


def _kind(metric: str) -> str:
    from runfolder.expectations import METRICS

    return METRICS[metric]


@suite_app.command()
def run(
    file: Path = typer.Argument(..., help="Suite file (YAML).", autocompletion=suite_files),
    results: Path = typer.Option(Path("results"), "--results",
                                 help="Root of the results: nights go to RESULTS/suites/<suite>/<night>/."),
    history: Optional[str] = typer.Option(None, "--history", help="History store: a folder or any "
                                          "Hadoop-compatible URI (default RESULTS/suites/<suite>/history)."),
    cases: Optional[str] = typer.Option(None, "--cases", help="Run only these cases (comma-separated)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the newest unfinished night of this suite, "
                                                        "skipping the repetitions it recorded."),
    night: Optional[Path] = typer.Option(None, "--night", help="With --resume: the night folder to continue."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would run, in order, and stop."),
    repetitions: Optional[int] = typer.Option(None, "--repetitions", help="Repetitions of every case instead "
                                                                          "of the suite's."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the shuffled order (default: random, "
                                                            "recorded)."),
    router: List[str] = typer.Option([], "--router-setting", help="KEY=VALUE: force a router setting on every case "
                                     "(a night against deliberately changed routers; recorded as its variant and "
                                     "never used as a baseline)."),
    machine: Optional[str] = typer.Option(None, "--machine", help="Machine name in the history (default: "
                                                                  "this host's name); baselines come from it."),
    baseline_last: Optional[int] = typer.Option(None, "--baseline-last", help="Baseline: the last N valid nights "
                                                                              "(default: the suite's)."),
    baseline_night: List[str] = typer.Option([], "--baseline-night", help="Baseline: these nights (repeat)."),
    baseline_revision: Optional[str] = typer.Option(None, "--baseline-revision",
                                                    help="Baseline: the nights of this git revision."),
    measure_anyway: bool = typer.Option(False, "--measure-anyway", help="Measure even if the self-checks fail "
                                                                        "(the night stays invalid)."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL for analysis and history."),
    verbose: bool = typer.Option(False, "--verbose", help="Every repetition's own progress lines too."),
    json_output: bool = typer.Option(False, "--json", help="Print suite-summary.json on stdout at the end."),
) -> None:
    """Run every case × repetition of a suite in shuffled order, then judge each metric against the baseline."""
    from testbed.suite.night import NightState, find_unfinished
    from testbed.suite.runner import NightOptions, run_night

    if repetitions is not None and repetitions < 1:
        fail("--repetitions must be at least 1", BAD_INPUT)
    s = _load(file, router, repetitions)
    wanted = None
    if cases:
        wanted = {c.strip() for c in cases.split(",") if c.strip()}
        unknown = wanted - set(s.cases)
        if unknown:
            fail(f"--cases: no case {', '.join(sorted(unknown))} in {file} (cases: {', '.join(s.cases)})", BAD_INPUT)
    if baseline_night and baseline_revision:
        fail("pin the baseline with --baseline-night or with --baseline-revision, not both", BAD_INPUT)
    if baseline_last is not None and baseline_last < 1:
        fail("--baseline-last must be at least 1", BAD_INPUT)
    if night and not resume:
        fail("--night is for --resume", BAD_INPUT)
    root = results / "suites" / s.name
    say = (lambda line: typer.echo(line, err=True)) if json_output else typer.echo
    for case in s.cases.values():  # before anything is built: what a shorter case leaves out
        if wanted is None or case.name in wanted:
            for line in _shortened_lines(case):
                say(line if line.startswith(" ") else f"warning: {line}")
    variant = _variant(router)
    if resume:
        folder = night or find_unfinished(root, s.name)
        if folder is None:
            fail(f"--resume: no unfinished night of suite {s.name} under {root}", BAD_INPUT)
        try:
            state = NightState.load(folder)
        except ValueError as exc:
            fail(str(exc), BAD_INPUT)
        if state.suite != s.name or state.variant != variant:
            fail(f"--resume: {folder} is a night of suite {state.suite!r}"
                  + (f" with --router-setting {state.variant}" if state.variant else "") + "; give the same suite and "
                  "--router-setting options", BAD_INPUT)
        unknown = {r.case for r in state.order} - set(s.cases)
        if unknown:
            fail(f"--resume: the suite file no longer has case {', '.join(sorted(unknown))} of {folder}", BAD_INPUT)
    elif dry_run:
        from testbed.suite.night import plan_order

        order = plan_order({n: c.repetitions for n, c in s.cases.items()}, seed if seed is not None else 0)
        state = None
    else:
        need_root()
        state = None
    planned = {n: c.repetitions for n, c in s.cases.items() if wanted is None or n in wanted}
    if dry_run:
        order = state.pending(wanted) if state else [r for r in order if wanted is None or r.case in wanted]
        for i, rep in enumerate(order, 1):
            case = s.cases[rep.case]
            typer.echo(f"{i:3}. {rep.label}: {case.topology_path.name}, {case.spec.duration / 1e9:g} s on "
                       f"{case.spec.backend}")
        typer.echo(f"{len(order)} repetitions" + ("" if state else f" (the order of seed {seed or 0}; "
                                                                   "a night draws its own seed unless --seed)"))
        from testbed.suite.dryrun import dry_run_lines
        from testbed.suite.runner import NightOptions as DryOptions

        dry = DryOptions(results_root=results, history=history or str((root / "history").resolve()),
                         baseline_last=baseline_last, baseline_nights=baseline_night or None,
                         baseline_revision=baseline_revision)
        if machine:
            dry.machine = machine
        for line in dry_run_lines(s, order, dry):
            typer.echo(line)
        raise typer.Exit(0)
    need_root()
    from testbed.backends import BackendError
    from testbed.drivers import DriverError
    from testbed.lab.errors import LabError
    from testbed.suite.runner import preflight_cases

    try:  # before the night exists: a case that cannot run here is bad input, and leaves nothing to resume
        caps = preflight_cases(s, sorted(planned if state is None else {r.case for r in state.pending(wanted)}))
    except (LabError, BackendError, DriverError) as exc:
        fail(str(exc), BAD_INPUT)
    options = NightOptions(results_root=results, history=history or str((root / "history").resolve()),
                           cases=wanted, measure_anyway=measure_anyway, verbose=verbose, master=master,
                           baseline_last=baseline_last, baseline_nights=baseline_night or None,
                           baseline_revision=baseline_revision)
    if machine:
        options.machine = machine
    _check_pinned_baseline(s, options, master)
    if state is None:
        state = NightState.create(root, s.name, str(file.resolve()), planned, variant, seed)
    else:
        from testbed.suite.night import current_revision

        if state.git_revision and current_revision() != state.git_revision:
            say(f"warning: the night started on revision {state.git_revision}; the checkout is now at "
                f"{current_revision()}: the rest of the night runs this code but is recorded under the night's")
    say(f"night {state.night} of suite {s.name} in {state.folder}" + (f" (variant {variant})" if variant else ""))
    try:
        outcome = run_night(s, state, options, caps, say)
    except (LabError, BackendError) as exc:
        fail(f"{exc} (the night stays in {state.folder}; resume with --resume)", FAILED)
    except ValueError as exc:  # a pinned baseline that does not exist, a history that cannot be read
        fail(f"{exc} (the night's repetitions are recorded in {state.folder}; resume with --resume)", FAILED)
    summary = outcome.summary
    if summary is not None:
        for j in summary["judgements"]:
            if j["status"] in ("regression", "improvement", "inconclusive"):
                say(f"{j['status'].upper():12} {j['case']}: {j['key']}: {j['reason']}")
        counts = summary["counts"]
        say(f"summary: {state.folder / 'suite-summary.json'}")
        if (state.folder / "trend.html").exists():
            say(f"trend:   {state.folder / 'trend.html'}")
        say(f"verdict: {summary['status'].upper()} ({counts['regression']} regressions, {counts['improvement']} "
            f"improvements, {counts['pass']} pass, {counts['inconclusive']} inconclusive"
            + (f"; {'; '.join(summary['problems'])}" if summary["problems"] else "") + ")")
        if json_output:
            typer.echo(json.dumps(summary, indent=1))
    code = {"pass": 0, "invalid": INVALID}.get(outcome.status, FAILED)
    raise typer.Exit(code)


def _check_pinned_baseline(s, options, master: Optional[str]) -> None:
    """A pinned baseline (nights or a revision, in the file or on the command line) must exist before the night
    runs for hours: checked against the history now (exit 2)."""
    base = s.spec.baseline
    nights = options.baseline_nights if (options.baseline_nights or options.baseline_revision) else base.nights
    revision = options.baseline_revision if (options.baseline_nights or options.baseline_revision) else base.revision
    if not nights and not revision:
        return
    from spark.history import read_history, select_baseline
    from spark.session import get_spark
    from testbed.suite.night import new_night_id

    try:
        history = read_history(get_spark(master), options.history, s.name)
        select_baseline(history, suite=s.name, before_night=new_night_id(), machine=options.machine, variant="",
                        pinned_nights=nights, pinned_revision=revision)
    except ValueError as exc:
        fail(f"the pinned baseline: {exc}", BAD_INPUT)


@suite_app.command()
def trend(
    history: str = typer.Argument(..., help="History store (folder or URI)."),
    suite_name: str = typer.Option(..., "--suite", help="Suite name."),
    night: Optional[str] = typer.Option(None, "--night", help="Night to highlight (default: the newest)."),
    summary: Optional[Path] = typer.Option(None, "--summary", help="That night's suite-summary.json, for its "
                                                                   "verdicts."),
    out: Path = typer.Option(Path("trend.html"), "--out", help="Where to write the page."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL."),
) -> None:
    """Render the trend page of a suite from its history alone."""
    from spark.history import read_history
    from spark.session import get_spark
    from spark.trend import write_trend

    try:
        df = read_history(get_spark(master), history, suite_name)
    except ValueError as exc:
        fail(str(exc), BAD_INPUT)
    if df.empty:
        fail(f"no nights of suite {suite_name} in {history}", BAD_INPUT)
    night = night or sorted(df["night"].unique())[-1]
    if night not in set(df["night"]):
        fail(f"no night {night} of suite {suite_name} in {history}", BAD_INPUT)
    judgements = []
    if summary:
        try:
            judgements = json.loads(summary.read_text())["judgements"]
        except (OSError, ValueError, KeyError) as exc:
            fail(f"--summary {summary}: {exc}", BAD_INPUT)
    write_trend(out, df, judgements, night, suite_name)
    typer.echo(f"trend: {out}")
