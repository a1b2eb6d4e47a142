"""The history store of the regression suites: Parquet per night, read back exactly, baseline selection."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd
import pytest

from spark.history import (HISTORY_COLUMNS, append_night, empty_history, history_nights, read_history,
                           select_baseline)

NIGHT_1 = "20261123T201500Z-3fa2c1"
NIGHT_2 = "20261124T201500Z-9b07de"
#: (metric, target, higher_is_worse, figures per repetition) shaped like the diamond topology's runs
FIGURES = {
    NIGHT_1: [("latency.p99", "priority realtime", True, [31.2e6, 27.9e6, 35.4e6]),
              ("loss", "flow bulk", True, [57.1, 58.4, 55.9]),
              ("reroute.time", "all flows", True, [0.41e9, None, 0.437e9])],
    NIGHT_2: [("latency.p99", "priority realtime", True, [29.8e6, 33.0e6, 30.5e6]),
              ("loss", "flow bulk", True, [56.6, 59.2, 57.7]),
              ("reroute.time", "all flows", True, [0.425e9, 0.402e9, 0.44e9])],
}


def night_rows(night: str, suite: str = "diamond-nightly", variant: str = "", valid: bool = True,
               machine: str = "lab-1", revision: str = "a1b2c3d4e5", figures: Optional[list] = None) -> list:
    started = {NIGHT_1: 1795464900 * 10**9, NIGHT_2: 1795551300 * 10**9}.get(night, 1795637700 * 10**9)
    rows = []
    for metric, target, worse, values in figures or FIGURES.get(night, FIGURES[NIGHT_1]):
        for rep, value in enumerate(values, start=1):
            run_id = f"{night[:15]}-diamond-r{rep}"
            rows.append({
                "suite": suite, "case": "diamond", "metric": metric, "target": target,
                "key": f"{metric} for {target}", "value": value, "higher_is_worse": worse, "repetition": rep,
                "run_id": run_id, "run_dir": f"/results/runs/{run_id}", "night": night, "started_ns": started,
                "date": night[:4] + "-" + night[4:6] + "-" + night[6:8], "git_revision": revision,
                "router_version": "0.7.1", "machine": machine, "variant": variant, "valid": valid,
                "expect_passed": rep != 2})
    return rows


def expected(rows: list) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))
    df["value"] = df["value"].astype("float64")
    df = df.astype({"repetition": "int64", "started_ns": "int64", "higher_is_worse": bool, "valid": bool,
                    "expect_passed": bool})
    return df.sort_values(["night", "case", "key", "repetition"]).reset_index(drop=True)


@pytest.mark.parametrize("as_uri", [False, True], ids=["folder", "file-uri"])
def test_two_nights_round_trip(spark, tmp_path: Path, as_uri: bool):
    uri = f"file://{tmp_path}/history" if as_uri else str(tmp_path / "history")
    written = append_night(spark, uri, night_rows(NIGHT_1))
    append_night(spark, uri, night_rows(NIGHT_2))
    assert written == f"{uri}/night={NIGHT_1}"
    assert (tmp_path / "history" / f"night={NIGHT_1}").is_dir()

    got = read_history(spark, uri)
    want = expected(night_rows(NIGHT_1) + night_rows(NIGHT_2))
    assert list(got.columns) == list(HISTORY_COLUMNS)
    pd.testing.assert_frame_equal(got, want, check_dtype=True)
    # the night id stays the string it was, not a number or a timestamp
    assert got["night"].map(type).eq(str).all()
    assert sorted(got["night"].unique()) == [NIGHT_1, NIGHT_2]
    assert got.loc[got["key"] == "reroute.time for all flows", "value"].isna().sum() == 1


def test_suite_filter_and_rerun_replaces(spark, tmp_path: Path):
    uri = str(tmp_path / "history")
    append_night(spark, uri, night_rows(NIGHT_1))
    append_night(spark, uri, night_rows(NIGHT_2, suite="other-suite"))
    # a resumed night is appended again with a 4th repetition: it replaces, never duplicates
    redo = night_rows(NIGHT_1, figures=[("latency.p99", "priority realtime", True, [31.2e6, 27.9e6, 35.4e6,
                                                                                    30.1e6])])
    append_night(spark, uri, redo)

    mine = read_history(spark, uri, "diamond-nightly")
    pd.testing.assert_frame_equal(mine, expected(redo))
    assert len(read_history(spark, uri)) == len(redo) + len(night_rows(NIGHT_2))
    assert read_history(spark, uri, "no-such-suite").empty


def test_missing_store_is_empty(spark, tmp_path: Path):
    for uri in (str(tmp_path / "nothing-yet"), f"file://{tmp_path}/nothing-yet"):
        got = read_history(spark, uri)
        assert got.empty and list(got.columns) == list(HISTORY_COLUMNS)
        pd.testing.assert_frame_equal(got, empty_history())


def test_unreadable_store_names_the_uri(spark, tmp_path: Path):
    store = tmp_path / "history" / f"night={NIGHT_1}"
    store.mkdir(parents=True)
    (store / "part-0000.parquet").write_text("not parquet at all")
    with pytest.raises(ValueError, match="cannot read the history at .*history") as err:
        read_history(spark, str(tmp_path / "history"))
    assert "not a Parquet file" in str(err.value) and "\tat " not in str(err.value)  # no Java stack


def test_bad_rows_are_rejected(spark, tmp_path: Path):
    uri = str(tmp_path / "history")
    with pytest.raises(ValueError, match="2 nights .*append one night at a time"):
        append_night(spark, uri, night_rows(NIGHT_1) + night_rows(NIGHT_2))
    with pytest.raises(ValueError, match="no history rows"):
        append_night(spark, uri, [])
    row = dict(night_rows(NIGHT_1)[0])
    del row["machine"]
    with pytest.raises(ValueError, match="missing machine"):
        append_night(spark, uri, [row])
    with pytest.raises(ValueError, match="git_revision is empty"):
        append_night(spark, uri, [dict(night_rows(NIGHT_1)[0], git_revision=None)])
    assert not (tmp_path / "history").exists()


# --- baseline selection (pure pandas) ---------------------------------------------------------------------

NIGHTS = [f"202611{day:02d}T201500Z-{day:06x}" for day in range(10, 20)]


def history(**per_night) -> pd.DataFrame:
    """Ten nights of one suite; keyword ``n<i>=dict(...)`` changes night i's row fields."""
    rows = []
    for i, night in enumerate(NIGHTS):
        fields = {"valid": True, "variant": "", "machine": "lab-1", "revision": f"rev{i:02d}aaaa"}
        fields.update(per_night.get(f"n{i}", {}))
        rows += night_rows(night, figures=FIGURES[NIGHT_1][:1], **fields)
    return expected(rows)


def test_baseline_last_nights():
    df = history()
    assert select_baseline(df, suite="diamond-nightly", before_night=NIGHTS[7], last_nights=5) == NIGHTS[2:7]
    assert select_baseline(df, suite="diamond-nightly", before_night=NIGHTS[2]) == NIGHTS[:2]
    assert select_baseline(df, suite="diamond-nightly", before_night=NIGHTS[0]) == []
    assert select_baseline(df, suite="other", before_night=NIGHTS[9]) == []
    assert select_baseline(empty_history(), suite="diamond-nightly", before_night=NIGHTS[9]) == []


def test_baseline_skips_invalid_other_variant_and_machine():
    df = history(n6={"valid": False}, n5={"variant": "congestion_aware=false"}, n4={"machine": "lab-2"})
    got = select_baseline(df, suite="diamond-nightly", before_night=NIGHTS[8], machine="lab-1", last_nights=3)
    assert got == [NIGHTS[2], NIGHTS[3], NIGHTS[7]]
    # without a machine, every machine counts
    assert select_baseline(df, suite="diamond-nightly", before_night=NIGHTS[8], last_nights=3) == \
        [NIGHTS[3], NIGHTS[4], NIGHTS[7]]
    # a variant night is compared with nights of the same variant only
    assert select_baseline(df, suite="diamond-nightly", before_night=NIGHTS[9],
                           variant="congestion_aware=false") == [NIGHTS[5]]


def test_baseline_pinned_nights():
    df = history(n3={"valid": False})
    assert select_baseline(df, suite="diamond-nightly", before_night=NIGHTS[9],
                           pinned_nights=[NIGHTS[4], NIGHTS[1]]) == [NIGHTS[1], NIGHTS[4]]
    with pytest.raises(ValueError) as err:
        select_baseline(df, suite="diamond-nightly", before_night=NIGHTS[9],
                        pinned_nights=["20261101T201500Z-000000"])
    assert "20261101T201500Z-000000 is not in the history" in str(err.value)
    assert NIGHTS[0] in str(err.value) and NIGHTS[9] in str(err.value)  # lists the known nights
    with pytest.raises(ValueError, match=f"{NIGHTS[3]} is invalid"):
        select_baseline(df, suite="diamond-nightly", before_night=NIGHTS[9], pinned_nights=[NIGHTS[3]])
    with pytest.raises(ValueError, match="is not before tonight"):
        select_baseline(df, suite="diamond-nightly", before_night=NIGHTS[5], pinned_nights=[NIGHTS[5]])


def test_baseline_pinned_revision():
    df = history(n2={"revision": "cafe1234"}, n5={"revision": "cafe1234"}, n6={"revision": "cafe1234",
                                                                                "valid": False})
    assert select_baseline(df, suite="diamond-nightly", before_night=NIGHTS[9],
                           pinned_revision="cafe") == [NIGHTS[2], NIGHTS[5]]
    with pytest.raises(ValueError, match="no usable night .* ran git revision 'beef'.*rev00aaaa"):
        select_baseline(df, suite="diamond-nightly", before_night=NIGHTS[9], pinned_revision="beef")


def test_history_nights():
    df = history(n1={"valid": False, "variant": "congestion_aware=false"})
    nights = history_nights(df)
    assert list(nights["night"]) == NIGHTS
    assert list(nights.columns) == ["night", "started_ns", "date", "git_revision", "router_version", "machine",
                                    "variant", "valid"]
    assert nights.loc[1, "variant"] == "congestion_aware=false" and not nights.loc[1, "valid"]
    assert nights["valid"].sum() == 9
    assert history_nights(empty_history()).empty
