"""The whole suite in two pytest processes at once (test.sh with no arguments): the lab tests, one after
another as always, and beside them, at the lowest CPU priority, the test files listed here.

A file belongs here only if its tests need no lab (no namespace, container, tc, sshd, root probe or shared
real run), write nothing another test reads (no shared cache, fixed port or fixed path) and measure no time
or rate (they may be starved of CPU while a lab test runs). The lab tests wait on traffic most of the time,
so these use the otherwise idle cores. A file not listed runs with the lab tests: the safe default.
A test here that asks for a lab fixture fails, naming this file (see tests/conftest.py).
"""
from __future__ import annotations

import os
from pathlib import Path

#: the environment variable test.sh sets to choose a partition: "beside" (the files below) or "labs" (the rest)
PARTITION_ENV = "TESTBED_TEST_PARTITION"

BESIDE_LABS = (
    # the analysis on synthetic runs and on the real runs stored under tests/spark/data
    "tests/spark/test_spark_bounds.py",
    "tests/spark/test_spark_console_real_run.py",
    "tests/spark/test_spark_drops.py",
    "tests/spark/test_spark_episodes.py",
    "tests/spark/test_spark_history.py",
    "tests/spark/test_spark_history_local.py",
    "tests/spark/test_spark_jitter.py",
    "tests/spark/test_spark_large_run_shortcuts.py",
    "tests/spark/test_spark_limits_real_run.py",
    "tests/spark/test_spark_lossaccount.py",
    "tests/spark/test_spark_memory_limits.py",
    "tests/spark/test_spark_messagerows.py",
    "tests/spark/test_spark_onsets.py",
    "tests/spark/test_spark_pcap_batches.py",
    "tests/spark/test_spark_pcap_decode.py",
    "tests/spark/test_spark_priorities.py",
    "tests/spark/test_spark_queries.py",
    "tests/spark/test_spark_queries_real_run.py",
    "tests/spark/test_spark_regression.py",
    "tests/spark/test_spark_report.py",
    "tests/spark/test_spark_report_links.py",
    "tests/spark/test_spark_reroute_causes.py",
    "tests/spark/test_spark_reroute_real_events.py",
    "tests/spark/test_spark_resources.py",
    "tests/spark/test_spark_router_driver.py",
    "tests/spark/test_spark_ship_code.py",
    "tests/spark/test_spark_shortened_verdict.py",
    "tests/spark/test_spark_streamsearch.py",
    "tests/spark/test_spark_streamsearch_real_run.py",
    "tests/spark/test_spark_suite_real_history.py",
    "tests/spark/test_spark_synthetic_pcaps.py",
    "tests/spark/test_spark_trend.py",
    "tests/spark/test_spark_verdict_real_run.py",
    # the dissector on stored and synthetic frames
    "tests/wireshark/test_wireshark_frames.py",
    "tests/wireshark/test_wireshark_retransmissions.py",
    "tests/wireshark/test_wireshark_tables.py",
    # topology files
    "tests/spec/test_spec_cli_validate.py",
    "tests/spec/test_spec_fuzz.py",
    "tests/spec/test_spec_impairments.py",
    "tests/spec/test_spec_limits.py",
    "tests/spec/test_spec_malformed.py",
    "tests/spec/test_spec_overrides.py",
    "tests/spec/test_spec_rates_and_hints.py",
    "tests/spec/test_spec_reachability.py",
    "tests/spec/test_spec_resolve.py",
    "tests/test_import_graph.py",
)

ROOT = Path(__file__).resolve().parents[1]


def partition() -> str:
    """"beside", "labs", or "" (the whole suite in this one process); anything else is refused."""
    value = os.environ.get(PARTITION_ENV, "")
    if value not in ("", "beside", "labs"):
        raise ValueError(f"{PARTITION_ENV}={value!r}: use 'beside', 'labs' or leave it unset")
    return value


def missing_files() -> list[str]:
    """Listed files that do not exist (renamed or removed; tests/test_partition.py fails on any): the list
    must follow."""
    return [f for f in BESIDE_LABS if not (ROOT / f).is_file()]


def runs_beside(path: Path) -> bool:
    try:
        return path.resolve().relative_to(ROOT).as_posix() in BESIDE_LABS
    except ValueError:
        return False
