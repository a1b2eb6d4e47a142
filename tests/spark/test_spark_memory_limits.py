"""A run too large for the driver's or the executors' memory ends `analyze` with one line (which stage, how much
it needed, which setting to raise), exit 2, never a JVM traceback (spark.memorylimits).

Provoked for real, cheaply and always the same way: a fresh `python -m spark analyze` of a small synthetic run
with spark.driver.maxResultSize at 1 KB, which the decoded captures' statistics exceed. The other kinds (heap
exhaustion in the driver or an executor, results lost, an executor killed for its memory) cannot be provoked
deterministically on a shared machine; their recognition is tested on Spark's own wording.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spark.memorylimits import memory_limit_line
from spark.testing import diamond_run, write_run


def test_results_beyond_the_drivers_limit_end_in_one_line(tmp_path):
    rd = write_run(diamond_run(duration_s=4.0), tmp_path)
    done = subprocess.run([sys.executable, "-m", "spark", "analyze", str(rd), "--master", "local[1]"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_SUBMIT_ARGS": "--conf spark.driver.maxResultSize=1k pyspark-shell"})
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stderr.strip().splitlines()
    assert len(said) == 1, done.stderr
    assert said[0].startswith("analyze: out of memory during 'ingest: decoding 8 pcaps': the results of ")
    assert "more than spark.driver.maxResultSize (1024.0 B); raise spark.driver.maxResultSize" in said[0]
    assert "Traceback" not in done.stdout and "at org.apache" not in done.stdout


TASK_FAILED = ("Job aborted due to stage failure: Task 3 in stage 7.0 failed 4 times, most recent failure: Lost task "
               "3.3 in stage 7.0 (TID 40) (10.0.0.5 executor 2): java.lang.OutOfMemoryError: Java heap space\n"
               "\tat java.base/java.util.Arrays.copyOf(Arrays.java:3537)")


@pytest.mark.parametrize("text, master, expected", [
    (TASK_FAILED, "spark://head:7077", "a task needed more than an executor's 2g heap (java.lang.OutOfMemoryError); "
                                       "raise spark.executor.memory"),
    (TASK_FAILED, "local[2]", "a task needed more than the driver's 1g heap (java.lang.OutOfMemoryError); raise "
                              "spark.driver.memory (--driver-memory, now 1g)"),
    ("An error occurred while calling o123.collectToPython.\n: java.lang.OutOfMemoryError: GC overhead limit exceeded",
     "spark://head:7077", "the driver needed more than the driver's 1g heap"),
    ("Job aborted due to stage failure: Task 0 in stage 4.0 failed 1 times: TaskResultLost (result lost from block "
     "manager)", "local[2]", "the driver could not keep its tasks' results (TaskResultLost) in its 1g heap; raise "
                             "spark.driver.memory"),
    ("Job aborted due to stage failure: Task 1 in stage 2.0 failed 4 times, most recent failure: ExecutorLostFailure "
     "(executor 1 exited caused by one of the running tasks) Reason: Command exited with code 52", "spark://h:7077",
     "an executor was lost running out of its 2g"),
    ("ExecutorLostFailure (executor 1 exited caused by one of the running tasks) Reason: Command exited with code "
     "137", "spark://h:7077", None),
    ("ExecutorLostFailure (executor 3 exited caused by one of the running tasks) Reason: Container killed by YARN for "
     "exceeding physical memory limits", "yarn", "an executor was lost running out of its 2g"),
])
def test_memory_limits_are_recognised_in_sparks_wording(text, master, expected):
    line = memory_limit_line(RuntimeError(text), "latency: percentiles", master, "1g", "2g")
    if expected is None:  # exit code 137 alone names no memory: a kill of any cause
        assert line is None
        return
    assert line is not None and line.startswith("analyze: out of memory during 'latency: percentiles': ")
    assert expected in line


def test_other_failures_are_not_memory_limits():
    assert memory_limit_line(RuntimeError("AnalysisException: [UNRESOLVED_COLUMN] `flow` cannot be resolved"),
                             "drops", "local[2]", "1g", "1g") is None
