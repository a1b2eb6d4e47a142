"""The Spark session of an analysis: local[*] by default, any master URL otherwise, or a Spark Connect
server (``sc://HOST:PORT``: no JVM in this process, the analysis' Spark work runs on the server's).

The console stays the user's: the JVM Spark starts (its startup banner, log4j's lines, the JVM's own warnings,
the Python workers it spawns) writes its standard output and error to a log file, by default
``spark.log`` in the system's temporary folder; ``testbed analyze`` gives the results folder's
``report/spark.log``. A session already running in the process (a test suite's, an earlier analysis's) is
reused as it is, its log where it was.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

__all__ = ["DRIVER_JAVA_OPTIONS", "RUNTIME_CONF", "get_spark", "DEFAULT_MASTER", "default_log_file", "is_connect"]

DEFAULT_MASTER = "local[*]"
_PACKAGES = ("router", "runfolder", "spark")


def default_log_file() -> Path:
    """Where the JVM's output goes when the caller names no file (this user's temporary folder)."""
    return Path(tempfile.gettempdir()) / f"testbed-spark-{os.getuid()}.log"


@contextlib.contextmanager
def _output_to(path: Path):
    """Standard output and error (file descriptors 1 and 2) appended to ``path`` meanwhile: a process started
    inside (the JVM) keeps them; Python's own are given back after."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = os.dup(1), os.dup(2)
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (log, *saved):
            os.close(fd)


#: The JVM started here compiles with the client compiler only (HotSpot's C1; C2, the optimising one, spends
#: more CPU compiling than an analysis runs long enough to win back). Measured cold on the 2-core VM
#: (docs/benchmarks.md, "The analysis' JVM"): an 18 s diamond's analysis took 44.6-46.0 s of CPU instead of
#: 78.5-94.0 s, a 10x synthetic run's 88 s instead of 123 s; the figures identical.
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"

#: the SQL settings of every analysis session (a local one, a cluster's, a Connect client's; the tests' too)
RUNTIME_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # a frame Arrow cannot convert raises (the caller decides), never silently made from rows (a Python RDD)
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    # adaptive execution coalesces a shuffle's partitions to its advisory size (64 MB), not to one per core: a
    # small run's aggregations run as one task each (docs/benchmarks.md, "Fewer Spark jobs and tasks")
    "spark.sql.adaptive.coalescePartitions.parallelismFirst": "false",
}


def frame_to_spark(spark, pdf, schema):
    """A pandas frame the driver holds as a Spark DataFrame, through Arrow, an empty one too (Spark would make
    an empty frame from rows: a Python RDD, which starts a Python worker). ``schema``: a StructType or DDL."""
    from pyspark.sql import types as T

    struct = schema if isinstance(schema, T.StructType) else T.StructType.fromDDL(schema)
    if len(pdf):
        return spark.createDataFrame(pdf[struct.names], struct)
    from pyspark.sql.pandas.types import to_arrow_schema

    return spark.createDataFrame(to_arrow_schema(struct).empty_table(), struct)


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect client's session (no SparkContext, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def get_spark(master: Optional[str] = None, app_name: str = "testbed-analyze", shuffle_partitions: int = 8,
              log_file: Optional[Path] = None, remote: Optional[str] = None, driver_memory: Optional[str] = None):
    """A SparkSession for analysis, the JVM's output going to ``log_file`` (default: :func:`default_log_file`);
    an already active session (a test suite's) is reused as is. ``remote`` (``sc://HOST:PORT``): a Spark
    Connect session instead (``master`` must then be None). ``driver_memory`` (``4g``): spark.driver.memory of
    a JVM started here."""
    if remote is not None:
        if master is not None:
            raise ValueError("give --master or --remote, not both")
        return _connect(remote, app_name, shuffle_partitions)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master is None or master.startswith("local"):
        # A local session needs no other interface; without this Spark warns about the hostname.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    master = master or DEFAULT_MASTER
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
    )
    if driver_memory is not None:
        builder = builder.config("spark.driver.memory", driver_memory)
    for key, value in RUNTIME_CONF.items():
        builder = builder.config(key, value)
    with _output_to(Path(log_file) if log_file is not None else default_log_file()):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if not master.startswith("local"):
        _ship_code(spark)
    return spark


def _connect(remote: str, app_name: str, shuffle_partitions: int):
    """A Spark Connect session to ``remote``, set up as a local one is (what the server lets a client set),
    with the analysis' code shipped for its Python workers."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(remote).appName(app_name).getOrCreate()
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for key, value in RUNTIME_CONF.items():
        spark.conf.set(key, value)
    _ship_code(spark)
    return spark


def _ship_code(spark) -> None:
    """On a cluster (or a Spark Connect server), executors need the codec, the results-folder package and the
    decoder: ship them as a zip (a temporary file, removed once uploaded to a Connect server, else when this
    process ends)."""
    root = Path(__file__).resolve().parent.parent
    fd, name = tempfile.mkstemp(prefix="testbed-analysis-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(name, "w") as zf:
        for pkg in _PACKAGES:
            for path in [*(root / pkg).rglob("*.py"), *(root / pkg).rglob("*.json")]:
                zf.write(path, path.relative_to(root))
    if is_connect(spark):
        try:
            spark.addArtifacts(name, pyfile=True)  # uploaded to the server now
        finally:
            os.unlink(name)
    else:
        # the driver serves the file to the executors as they start, for as long as the session lives
        atexit.register(Path(name).unlink, missing_ok=True)
        spark.sparkContext.addPyFile(name)
