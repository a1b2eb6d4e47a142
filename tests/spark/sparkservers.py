"""Spark servers on this machine for the tests and bench/ (PySpark's own distribution: its ``bin/spark-class``
and ``bin/spark-submit``): a standalone cluster (a master and workers) and a Spark Connect server.

Each process is started in a session of its own and stopped with its whole process group (the executors and
Python workers it started) when the ``with`` block ends, however it ends; a process that does not come up in
time is stopped too, and the error quotes its log.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, List

import pyspark

from spark.session import DRIVER_JAVA_OPTIONS

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT_S = 240  # a JVM's start on a loaded 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _env(work: Path) -> dict:
    """The servers' environment: without PYTHONPATH, so that their Python workers import the analysis only from
    what the client ships (spark.session). The master's and workers' JVMs compile as an analysis' own does
    (spark.session.DRIVER_JAVA_OPTIONS: they live as briefly)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_DIRS": str(work), "SPARK_WORKER_DIR": str(work),
            "SPARK_DAEMON_JAVA_OPTS": DRIVER_JAVA_OPTIONS}


#: what an analysis run on these servers adds to its own Spark configuration (PYSPARK_SUBMIT_ARGS): the
#: executors the workers start compile as the analysis' driver does
EXECUTOR_JAVA_OPTIONS_ARGS = f"--conf spark.executor.extraJavaOptions={DRIVER_JAVA_OPTIONS} pyspark-shell"


def _stop(proc: subprocess.Popen) -> None:
    """The process and its group (what it started): TERM, then KILL after 30 s."""
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def _process(argv: List[str], log: Path, work: Path, ready: Callable[[], bool], what: str) -> Iterator[None]:
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=_env(work), start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                state = f"exited {proc.returncode}" if proc.poll() is not None else f"not up in {START_TIMEOUT_S} s"
                raise RuntimeError(f"{what} {state}; its log ({log}) ends:\n" + log.read_text(errors="replace")[-3000:])
            time.sleep(0.5)
        yield
    finally:
        _stop(proc)


@contextlib.contextmanager
def connect_server(work: Path, master: str = "local[2]") -> Iterator[str]:
    """A Spark Connect server on ``master``; yields its ``sc://`` address."""
    port = free_port()
    argv = [str(SPARK_HOME / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name", "testbed-connect", "--master", master, "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", "spark.ui.enabled=false",
            "--driver-java-options", DRIVER_JAVA_OPTIONS]
    with _process(argv, work / "connect.log", work, lambda: _listening(port), "the Spark Connect server"):
        yield f"sc://127.0.0.1:{port}"


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as reply:
            return int(json.load(reply).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


@contextlib.contextmanager
def standalone_cluster(work: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> Iterator[str]:
    """A standalone master and ``workers`` workers (``cores`` and ``memory`` each); yields the master's URL once
    every worker has registered."""
    port, ui_port = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    with contextlib.ExitStack() as stack:
        stack.enter_context(_process(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(ui_port)], work / "master.log", work,
            lambda: _listening(port) and _listening(ui_port), "the Spark master"))
        for i in range(workers):
            worker_dir = work / f"worker{i}"
            worker_dir.mkdir(exist_ok=True)
            stack.enter_context(_process(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores",
                 str(cores), "--memory", memory, "--webui-port", str(free_port()), "--work-dir", str(worker_dir)],
                work / f"worker{i}.log", work, lambda n=i: _alive_workers(ui_port) > n, f"Spark worker {i}"))
        yield url
