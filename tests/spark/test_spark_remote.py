"""The analysis of one run on a standalone Spark cluster (`--master spark://…`) and through a Spark Connect server
(`--remote sc://…`, with the folder given as a `file://` URI) gives the summary.json of the local analysis,
every figure equal (the timings apart).

The run is the session's shared short diamond (tests/conftest.py short_diamond_run, analysed locally there), on
a copy; the servers (tests/spark/sparkservers.py: a master and two one-core workers; a Connect server on
local[2]) are started here and stopped however the test ends. Each analysis is a process of its own, as a user
runs it: a Connect client has no JVM of its own, and the servers import the analysis only from what the client
ships. Through Connect nothing may use an RDD or the SparkContext (they do not exist there): the test fails if
anything on the analysis path does.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runfolder.layout import LAYOUT
from tests.conftest import run_cli
from tests.realruns import copy_of, missing

from tests.spark.sparkservers import EXECUTOR_JAVA_OPTIONS_ARGS, connect_server, standalone_cluster

pytestmark = [pytest.mark.integration, pytest.mark.skipif(bool(missing()), reason=missing() or "ok")]


def _figures(run_dir: Path) -> dict:
    summary = json.loads((run_dir / LAYOUT.summary).read_text())
    summary.pop("timings_s")
    return summary


def test_a_standalone_cluster_gives_the_local_figures(short_diamond_run, tmp_path):
    rd = copy_of(short_diamond_run.run_dir, tmp_path)
    local = _figures(rd)
    (rd / LAYOUT.summary).unlink()
    work = tmp_path / "cluster"
    work.mkdir()
    with standalone_cluster(work) as master:
        done = subprocess.run([sys.executable, "-m", "spark", "analyze", str(rd), "--master", master],
                              capture_output=True, text=True, timeout=900,
                              env={**os.environ, "PYSPARK_SUBMIT_ARGS": EXECUTOR_JAVA_OPTIONS_ARGS})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"on {master}" in done.stdout
    assert _figures(rd) == local


def test_spark_connect_gives_the_local_figures_of_a_uri_folder(short_diamond_run, tmp_path):
    rd = copy_of(short_diamond_run.run_dir, tmp_path)
    local = _figures(rd)
    for rel in (LAYOUT.summary, LAYOUT.report):
        (rd / rel).unlink()
    work = tmp_path / "connect"
    work.mkdir()
    with connect_server(work) as remote:
        done = run_cli("analyze", rd.as_uri(), "--remote", remote, timeout=900)
    assert f"Spark Connect {remote}" in done.stdout
    assert _figures(rd) == local  # written back into the URI's folder
    assert (rd / LAYOUT.report).stat().st_size > 0
