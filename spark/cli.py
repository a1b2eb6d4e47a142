"""`testbed analyze` and `testbed check` as plain functions returning the exit status.

0: done / every expectation met; 1: an expectation (or the clock check) failed; 2: bad input (no such
results folder, unreadable expectations, no summary to check).

The clock check's threshold (``clock_error_max_share``): the argument if given, else the expectations file's
top-level ``clock_error_max_share``, else the topology's, else 10 % (spark.expectations).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional, Tuple

from runfolder.expectations import ExpectationError
from runfolder.layout import LAYOUT
from runfolder.wording import plural

__all__ = ["analyze_command", "check_command", "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT"]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _say(msg: str) -> None:
    print(msg, flush=True)


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def analyze_command(run_dir: str, master: Optional[str] = None, window_s: float = 1.0,
                    clock_error_max_share: Optional[float] = None, started: Optional[float] = None,
                    remote: Optional[str] = None, driver_memory: Optional[str] = None) -> int:
    """Ingest a results folder, write parquet/ and report/ (summary.json, report.html, whose verdicts include
    the clock check at ``clock_error_max_share``, default the topology's or 10 %). Progress lines count the
    seconds from ``started`` (a ``time.monotonic()``; default: now), so a run's analysis goes on counting the
    run's time. Spark's own output goes to report/spark.log (a URI's folder: the temporary folder's).
    ``master``: a Spark master URL (default local[*]); or ``remote``: a Spark Connect server (sc://HOST:PORT),
    whose own log has Spark's output. ``driver_memory``: spark.driver.memory (``4g``) of the JVM started here.
    A run too large for the driver's or the executors' memory ends with one line (spark.memorylimits), exit 2."""
    from .analyze import ElapsedLog
    from .memorylimits import memory_limit_line
    from .storage import ResultsStore, ResultsStoreError

    if window_s <= 0:
        _err("analyze: --window must be positive")
        return EXIT_BAD_INPUT
    if master is not None and remote is not None:
        _err("analyze: give --master or --remote, not both")
        return EXIT_BAD_INPUT
    if driver_memory is not None and remote is not None:
        _err("analyze: --driver-memory is the Spark Connect server's own setting, not --remote's")
        return EXIT_BAD_INPUT
    progress = ElapsedLog(_say, started)
    if "://" not in run_dir:
        try:
            ResultsStore(run_dir)
        except ResultsStoreError as err:
            _err(f"analyze: {err}")
            return EXIT_BAD_INPUT
    progress("starting Spark")
    from .session import default_log_file, get_spark

    log_file = default_log_file() if "://" in run_dir else Path(run_dir) / LAYOUT.spark_log
    spark = get_spark(master, log_file=log_file, remote=remote, driver_memory=driver_memory)
    on, log_text = (f"Spark Connect {remote}", "the server's own") if remote else (spark.sparkContext.master, log_file)
    progress(f"Spark {spark.version} on {on} (its log: {log_text})")
    limits = (_master_of(spark, remote), *_memory_settings(spark))
    try:
        return _analyze_folder(spark, run_dir, window_s, clock_error_max_share, progress)
    except Exception as err:  # noqa: BLE001 - only a memory limit is said in a line; anything else is raised
        line = memory_limit_line(err, progress.last, *limits)
        if line is None:
            raise
        _err(line)
        return EXIT_BAD_INPUT


def _master_of(spark, remote: Optional[str]) -> str:
    """Where the session's executors run (a memory-limit line names the setting that matters there): a
    Connect server's own master when it tells it (a server on local[*] has no executors of its own)."""
    if not remote:
        return spark.sparkContext.master
    try:
        return spark.conf.get("spark.master", remote)
    except Exception:  # noqa: BLE001 - a Connect server may not tell a static setting
        return remote


def _memory_settings(spark) -> Tuple[str, str]:
    """The session's spark.driver.memory and spark.executor.memory (Spark's default 1g when not set), as a
    memory-limit line names them."""
    def conf(key: str) -> str:
        try:
            return spark.conf.get(key, "1g")
        except Exception:  # noqa: BLE001 - a Connect server may not tell a static setting
            return "the server's setting"
    return conf("spark.driver.memory"), conf("spark.executor.memory")


def _analyze_folder(spark, run_dir: str, window_s: float, clock_error_max_share: Optional[float], progress) -> int:
    """analyze_command's work once Spark runs."""
    from .analyze import analyze_run, build_summary, write_json
    from .storage import ResultsStore, ResultsStoreError
    from .verdict import verdict_summary

    try:
        folder = ResultsStore(run_dir, spark)
    except ResultsStoreError as err:
        _err(f"analyze: {err}")
        return EXIT_BAD_INPUT
    analysis = analyze_run(spark, folder, window_s, progress)
    progress("report: summary.json, report.html")
    summary = build_summary(analysis)
    summary["timings_s"] = {k: round(v, 3) for k, v in analysis.timings.items()}
    verdicts, why_none = _verdicts_for_report(folder, summary, clock_error_max_share)
    summary["verdict"] = verdict_summary(verdicts, why_none)
    write_json(folder, LAYOUT.summary, summary)
    try:
        from .report import render_report

        folder.write_text(LAYOUT.report, render_report(analysis, summary, verdicts))
    except Exception as err:  # the numbers are written; a plotting failure must not hide them
        _err(f"analyze: report.html not written: {type(err).__name__}: {err}")
    for p in analysis.ingested.problems:
        _err(f"input {p}")
    o = summary["overall"]
    lat = o.get("latency") or {}
    p99 = lat.get("p99_ns")
    loss = "" if o["loss_pct"] is None else f" ({o['loss_pct']:.3f}% lost)"
    p99_text = "n/a" if p99 is None else f"{p99 / 1e6:.3f} ms"
    _say(f"analyzed {folder.uri()}: {o['sent']} sent, {o['delivered']}/{o['expected']} delivered{loss}, "
         f"p99 latency {p99_text}, {plural(o['reroutes'], 'reroute')}")
    progress(f"done: {folder.uri(LAYOUT.report_dir)}")
    return EXIT_OK


def _unmeasurable(folder) -> dict:
    """The expectations the run, shorter than its topology, could not measure (its manifest says which, and
    why); empty for a full run or without a readable manifest (the analysis reports that apart)."""
    from .expectations import shortened_expectations

    try:
        return shortened_expectations(folder.read_json(LAYOUT.manifest))
    except ValueError:
        return {}


def _verdicts_for_report(folder, summary: dict,
                         max_share: Optional[float] = None) -> Tuple[Optional[list], str]:
    """The topology's own expectations and the clock check, for summary.json's verdict and the report (check
    evaluates them again, and gates); None and why when the expectations cannot be read."""
    from .expectations import (DEFAULT_CLOCK_ERROR_MAX_SHARE, clock_check, clock_error_max_share, evaluate,
                               parse_expectations)

    try:
        text = folder.read_text(LAYOUT.topology)
        verdicts = [] if text is None else evaluate(parse_expectations(text, LAYOUT.topology), summary,
                                                    _unmeasurable(folder))
        if max_share is None and text is not None:
            max_share = clock_error_max_share(text, LAYOUT.topology)
        share = DEFAULT_CLOCK_ERROR_MAX_SHARE if max_share is None else max_share
        return verdicts + [clock_check(summary, share)], ""
    except ExpectationError as err:
        _err(f"analyze: no verdict: the expectations cannot be read: {err}")
        return None, f"the expectations cannot be read: {err}"


def check_command(run_dir: str, expect_file: Optional[str] = None, junit_path: Optional[str] = None,
                  clock_error_max_share: Optional[float] = None, show_input_problems: bool = True) -> int:
    """Evaluate expectations and the clock check against report/summary.json; print each with value, limit
    and margin (and the input problems the analysis found, unless ``show_input_problems`` is false: after
    ``analyze_command`` printed them)."""
    from .expectations import (CLOCK_METRIC, DEFAULT_CLOCK_ERROR_MAX_SHARE, clock_check, evaluate,
                               parse_expectations)
    from .expectations import clock_error_max_share as share_of
    from .junit import junit_xml
    from .storage import ResultsStore, ResultsStoreError

    spark = None
    if "://" in run_dir:
        from .session import get_spark

        spark = get_spark(None)
    try:
        folder = ResultsStore(run_dir, spark)
    except ResultsStoreError as err:
        _err(f"check: {err}")
        return EXIT_BAD_INPUT
    try:
        summary = folder.read_json(LAYOUT.summary)
    except ValueError as err:
        _err(f"check: {err}")
        return EXIT_BAD_INPUT
    if summary is None:
        _err(f"check: {folder.uri(LAYOUT.summary)} does not exist: run `testbed analyze {run_dir}` first")
        return EXIT_BAD_INPUT
    max_share = clock_error_max_share
    if max_share is not None and not 0 < max_share <= 1:
        _err(f"check: the clock error's share of the latency must be above 0 and at most 1, not {max_share}")
        return EXIT_BAD_INPUT
    try:
        topology = folder.read_text(LAYOUT.topology)
        if expect_file:
            try:
                with open(expect_file, encoding="utf-8") as fh:
                    text = fh.read()
            except OSError as err:
                _err(f"check: cannot read {expect_file}: {err.strerror}")
                return EXIT_BAD_INPUT
            expectations = parse_expectations(text, expect_file)
            if max_share is None:
                max_share = share_of(text, expect_file)
        else:
            if topology is None:
                _err("check: topology.yaml is missing from the results folder; give --expect FILE")
                return EXIT_BAD_INPUT
            expectations = parse_expectations(topology, LAYOUT.topology)
        if max_share is None and topology is not None:
            max_share = share_of(topology, LAYOUT.topology)
    except ExpectationError as err:
        _err(f"check: {err}")
        return EXIT_BAD_INPUT
    verdicts = evaluate(expectations, summary, _unmeasurable(folder))
    verdicts.append(clock_check(summary, DEFAULT_CLOCK_ERROR_MAX_SHARE if max_share is None else max_share))
    for v in verdicts:
        _say(v.message)
    problems = [f"{p['severity']}: {p['file']}: {p['problem']}" for p in summary.get("input", {}).get("problems", [])]
    for p in problems if show_input_problems else []:
        _err(f"input {p}")
    failed = [v for v in verdicts if not v.passed]
    xml = junit_xml(verdicts, summary.get("run_id") or "run", problems)
    folder.write_text(LAYOUT.junit, xml)
    folder.write_text(LAYOUT.check, json.dumps({"passed": not failed,
                                                       "verdicts": [v.as_dict() for v in verdicts]}, indent=1))
    if junit_path:
        with open(junit_path, "w", encoding="utf-8") as fh:
            fh.write(xml)
    expected = [v for v in verdicts if v.metric != CLOCK_METRIC]
    clock = verdicts[-1]
    clock_state = "not measured" if clock.skipped else "passed" if clock.passed else "FAILED"
    if not expected:
        _say(f"check: no expectations in {expect_file or 'the topology (no expect: section)'}; clock check "
             f"{clock_state}")
    else:
        unmeasured = sum(1 for v in expected if v.skipped)
        _say(f"check: {sum(1 for v in expected if v.passed and not v.skipped)} of "
             f"{plural(len(expected), 'expectation')} met"
             + (f", {unmeasured} not measurable (a shortened run)" if unmeasured else "")
             + f", clock check {clock_state}"
             + (f"; FAILED: {', '.join(v.expectation for v in failed)}" if failed else ""))
    return EXIT_FAILED if failed else EXIT_OK
