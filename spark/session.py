"""The Spark session of an analysis: local[*] by default, any master URL otherwise."""
from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

__all__ = ["get_spark", "DEFAULT_MASTER"]

DEFAULT_MASTER = "local[*]"
_PACKAGES = ("router", "spark")


def get_spark(master: Optional[str] = None, app_name: str = "testbed-analyze", shuffle_partitions: int = 8):
    """A SparkSession for analysis; an already active session (a test suite's) is reused as is."""
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
    spark = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    if not master.startswith("local"):
        _ship_code(spark)
    return spark


def _ship_code(spark) -> None:
    """On a cluster, executors need the codec and the decoder: ship them as a zip."""
    root = Path(__file__).resolve().parent.parent
    fd, name = tempfile.mkstemp(prefix="testbed-analysis-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(name, "w") as zf:
        for pkg in _PACKAGES:
            for path in [*(root / pkg).rglob("*.py"), *(root / pkg).rglob("*.json")]:
                zf.write(path, path.relative_to(root))
    spark.sparkContext.addPyFile(name)
