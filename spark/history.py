"""The history of a regression suite: one row per night × repetition × metric, stored as Parquet.

Layout: ``<uri>/night=<night id>/part-*.parquet``, one folder per night, written with mode overwrite so that
re-running or resuming a night replaces its rows instead of adding them again. ``uri`` is a local folder or
any URI Spark's Hadoop file systems know (``file:///...``, ``hdfs://...``, ``s3a://...``). The ``night``
column lives only in the folder name (Spark's partition column); it is read back as a string with the
schema, so a night id like ``20261123T201500Z-3fa2c1`` is never taken for a number or a timestamp.

The baseline of a night (``select_baseline``) is chosen from this history: the last valid nights of the
same suite, variant and machine, or nights pinned by id or by git revision.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import pandas as pd

__all__ = ["HISTORY_COLUMNS", "HISTORY_SCHEMA", "NIGHT_COLUMNS", "append_night", "read_history", "read_local_history",
           "history_nights", "select_baseline", "empty_history"]

#: (name, Python type of a row's value, may be None)
_FIELDS: Tuple[Tuple[str, type, bool], ...] = (
    ("suite", str, False),
    ("case", str, False),
    ("metric", str, False),
    ("target", str, False),
    ("key", str, False),
    ("value", float, True),
    ("higher_is_worse", bool, False),
    ("repetition", int, False),
    ("run_id", str, False),
    ("run_dir", str, False),
    ("night", str, False),
    ("started_ns", int, False),
    ("date", str, False),
    ("git_revision", str, False),
    ("router_version", str, False),
    ("machine", str, False),
    ("variant", str, False),
    ("valid", bool, False),
    ("expect_passed", bool, False),
)

HISTORY_COLUMNS: Tuple[str, ...] = tuple(name for name, _, _ in _FIELDS)
#: the columns of ``history_nights``: what is known about a night as a whole
NIGHT_COLUMNS: Tuple[str, ...] = ("night", "started_ns", "date", "git_revision", "router_version", "machine",
                                  "variant", "valid")
_SORT = ["night", "case", "key", "repetition"]
_PANDAS_DTYPES: Dict[str, str] = {
    name: {str: "object", float: "float64", bool: "bool", int: "int64"}[kind] for name, kind, _ in _FIELDS}


def _spark_schema():
    from pyspark.sql.types import (BooleanType, DoubleType, IntegerType, LongType, StringType, StructField,
                                   StructType)

    spark_type = {"value": DoubleType(), "repetition": IntegerType(), "started_ns": LongType()}
    return StructType([
        StructField(name, spark_type.get(name, BooleanType() if kind is bool else StringType()), nullable=True)
        for name, kind, _ in _FIELDS])


HISTORY_SCHEMA = _spark_schema()


def empty_history() -> pd.DataFrame:
    """A history without rows: the columns and dtypes of ``read_history``."""
    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in _PANDAS_DTYPES.items()})


def _night_path(uri: str, night: str) -> str:
    return f"{uri.rstrip('/')}/night={night}"


def _coerce(row: Mapping[str, Any], index: int) -> Tuple[Any, ...]:
    """One row as a tuple in column order, with the types of the schema; a bad row raises ValueError."""
    missing = [c for c in HISTORY_COLUMNS if c not in row]
    unknown = sorted(set(row) - set(HISTORY_COLUMNS))
    if missing or unknown:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(unknown)}"] if unknown else [])
        raise ValueError(f"history row {index}: {'; '.join(parts)} (columns: {', '.join(HISTORY_COLUMNS)})")
    out = []
    for name, kind, nullable in _FIELDS:
        value = row[name]
        if value is None or (kind is float and isinstance(value, float) and math.isnan(value)):
            if not nullable:
                raise ValueError(f"history row {index}: {name} is empty (only value may be None; "
                                 f"use \"\" for an unknown text)")
            out.append(None)
            continue
        try:
            if kind is bool:
                if not isinstance(value, bool) and type(value).__name__ != "bool_":
                    raise TypeError(f"{value!r} is not a bool")
                out.append(bool(value))
            elif kind is int:
                if isinstance(value, bool) or int(value) != value:
                    raise TypeError(f"{value!r} is not an integer")
                out.append(int(value))
            elif kind is float:
                out.append(float(value))
            else:
                if not isinstance(value, str):
                    raise TypeError(f"{value!r} is not a string")
                out.append(value)
        except (TypeError, ValueError) as err:
            raise ValueError(f"history row {index}: {name}: {err}") from None
    return tuple(out)


def append_night(spark, uri: str, rows: List[Dict[str, Any]]) -> str:
    """Write one night's rows to ``<uri>/night=<night>/`` (replacing that night if it was written before);
    returns the path written. All rows must belong to the same night."""
    if not rows:
        raise ValueError(f"no history rows to append to {uri}: a night needs at least one figure")
    nights = sorted({str(r.get("night")) for r in rows})
    if len(nights) != 1:
        raise ValueError(f"history rows of {len(nights)} nights ({', '.join(nights)}) given at once: "
                         "append one night at a time")
    night = nights[0]
    if not night or night == "None" or any(c in night for c in "/=\\") or night != night.strip():
        raise ValueError(f"night id {night!r} cannot name a history folder (no '/', '=', '\\' or spaces)")
    data = [_coerce(r, i) for i, r in enumerate(rows)]
    keep = [i for i, c in enumerate(HISTORY_COLUMNS) if c != "night"]
    from pyspark.sql.types import StructType

    schema = StructType([f for f in HISTORY_SCHEMA.fields if f.name != "night"])
    path = _night_path(uri, night)
    try:
        df = spark.createDataFrame([tuple(t[i] for i in keep) for t in data], schema)
        df.coalesce(1).write.mode("overwrite").parquet(path)
    except Exception as err:  # noqa: BLE001 - any Spark/Hadoop failure, reported with the URI
        raise ValueError(f"cannot write night {night} to the history at {uri}: {_short(err)}") from err
    return path


def _short(err: Exception, lines: int = 4) -> str:
    """The message of a Spark/Java error without its stack frames."""
    text = [ln.strip() for ln in str(err).splitlines()]
    text = [ln for ln in text if ln and not ln.startswith(("at ", "...", "JVM stacktrace"))]
    return " | ".join(text[:lines]) or type(err).__name__


def _is_missing_path(err: Exception) -> bool:
    condition = ""
    for getter in ("getCondition", "getErrorClass"):
        try:
            condition = getattr(err, getter)() or ""
        except Exception:  # noqa: BLE001 - older or newer pyspark without that getter
            continue
        if condition:
            break
    return condition == "PATH_NOT_FOUND" or "Path does not exist" in str(err)


def read_history(spark, uri: str, suite: Optional[str] = None) -> pd.DataFrame:
    """Every row of the history at ``uri`` (of ``suite`` if given) with columns ``HISTORY_COLUMNS``, sorted
    by night, case, key, repetition. A store that does not exist yet gives an empty frame."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    try:
        df = spark.read.schema(HISTORY_SCHEMA).option("basePath", uri).parquet(uri)
        if suite is not None:
            df = df.filter(F.col("suite") == suite)
        pdf = df.select(*HISTORY_COLUMNS).toPandas()
    except AnalysisException as err:
        if _is_missing_path(err):
            return empty_history()
        raise ValueError(f"cannot read the history at {uri}: {_short(err)}") from err
    except Exception as err:  # noqa: BLE001 - any Spark/Hadoop failure, reported with the URI
        raise ValueError(f"cannot read the history at {uri}: {_short(err)}") from err
    return _as_history(pdf, uri)


def read_local_history(folder: str, suite: Optional[str] = None) -> pd.DataFrame:
    """The history in a local folder read without Spark (pyarrow; for a quick look such as ``suite run
    --dry-run``), as :func:`read_history` gives it. A folder that does not exist gives an empty frame."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    if not Path(folder).is_dir():
        return empty_history()
    try:
        dataset = ds.dataset(folder, format="parquet",
                             partitioning=ds.partitioning(pa.schema([("night", pa.string())]), flavor="hive"))
        pdf = dataset.to_table().to_pandas()
    except (OSError, ValueError, pa.ArrowException) as err:
        raise ValueError(f"cannot read the history at {folder}: {err}") from err
    if pdf.empty or not set(HISTORY_COLUMNS) <= set(pdf.columns):
        return empty_history()
    if suite is not None:
        pdf = pdf[pdf["suite"] == suite]
    return _as_history(pdf[list(HISTORY_COLUMNS)].reset_index(drop=True), folder)


def _as_history(pdf: pd.DataFrame, uri: str) -> pd.DataFrame:
    """Rows read from the store with the history's types, sorted; empty values where none may be refused."""
    if pdf.empty:
        return empty_history()
    for name, dtype in _PANDAS_DTYPES.items():
        if pdf[name].isna().any() and dtype != "float64":
            raise ValueError(f"history at {uri}: column {name} has empty values (a file not written by "
                             "append_night?)")
        pdf[name] = pdf[name].astype(dtype)
    return pdf.sort_values(_SORT, kind="mergesort").reset_index(drop=True)


def history_nights(df: pd.DataFrame) -> pd.DataFrame:
    """One row per night (``NIGHT_COLUMNS``), sorted by night; a night is valid only if all its rows are."""
    if df.empty:
        return pd.DataFrame({c: pd.Series([], dtype=_PANDAS_DTYPES[c]) for c in NIGHT_COLUMNS})
    first = [c for c in NIGHT_COLUMNS if c not in ("night", "valid")]
    grouped = df.groupby("night", sort=True)
    out = grouped[first].first()
    out["valid"] = grouped["valid"].all().astype(bool)
    return out.reset_index()[list(NIGHT_COLUMNS)]


def select_baseline(df: pd.DataFrame, *, suite: str, before_night: str, machine: Optional[str] = None,
                    variant: str = "", last_nights: int = 5, pinned_nights: Optional[Sequence[str]] = None,
                    pinned_revision: Optional[str] = None) -> List[str]:
    """The night ids tonight (``before_night``) is compared with, oldest first.

    Candidates are the valid nights of ``suite`` with the same ``variant`` (and ``machine`` if given) that
    come strictly before ``before_night``. From them: the ``pinned_nights`` (each must be a candidate, else
    ValueError saying why and listing the known nights), or every night whose git revision starts with
    ``pinned_revision`` (ValueError if none), or else the last ``last_nights``. No candidate gives ``[]``.
    """
    if pinned_nights and pinned_revision:
        raise ValueError("pin the baseline with nights or with a revision, not both")
    if last_nights < 1:
        raise ValueError(f"last_nights is {last_nights}: the baseline needs at least one night")
    nights = history_nights(df[df["suite"] == suite]) if not df.empty else history_nights(df)
    nights = nights.set_index("night", drop=False)

    def why_not(night: str) -> Optional[str]:
        if night not in nights.index:
            return "is not in the history"
        row = nights.loc[night]
        if night >= before_night:
            return f"is not before tonight ({before_night})"
        if row["variant"] != variant:
            return f"ran variant {row['variant'] or '(as shipped)'!r}, tonight runs {variant or '(as shipped)'!r}"
        if machine is not None and row["machine"] != machine:
            return f"ran on machine {row['machine']!r}, tonight on {machine!r}"
        if not row["valid"]:
            return "is invalid (its self-checks failed)"
        return None

    candidates = [n for n in nights.index if why_not(n) is None]
    if pinned_nights:
        problems = [f"{n} {why_not(n)}" for n in pinned_nights if why_not(n) is not None]
        if problems:
            known = ", ".join(nights.index) or "none"
            raise ValueError(f"baseline night {'; '.join(problems)} (suite {suite}; known nights: {known}; "
                             f"usable: {', '.join(candidates) or 'none'})")
        return sorted(set(pinned_nights))
    if pinned_revision:
        chosen = [n for n in candidates if str(nights.loc[n, "git_revision"]).startswith(pinned_revision)]
        if not chosen:
            revisions = sorted({f"{nights.loc[n, 'git_revision'] or '(unknown)'} ({n})" for n in candidates})
            raise ValueError(f"no usable night of suite {suite} ran git revision {pinned_revision!r} "
                             f"(usable nights: {', '.join(revisions) or 'none'})")
        return chosen
    return candidates[-last_nights:]
