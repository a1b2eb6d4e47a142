"""The per-message work moved from the driver into Spark (issue 30) gives the figures the driver's pandas gave.

The messages' rows (``spark.messagerows``: per message, on the executors, its transit and hop delays and its
path) stay in Spark; the per-link transit and per-hop delay percentiles are Spark aggregations of them
(``percentile``: exact), and the paths are one row per message. The reference is the code path these replaced,
kept here as it was on main (fe14c69) where it differs: the first-seen table per message and link direction made
by a Spark aggregation, collected with ``toPandas()``, and the figures computed from it with pandas (the steps that did not move, ``reroutes.with_receivers`` and ``onsets.place_offered``, are called,
not copied). It is kept as code rather than as a stored summary.json because a real run's figures differ from run
to run: only the same run analysed both ways can be compared. Both analyses see the same results folder; every
figure of summary.json must be equal (the timings and the verdict, which holds them, apart).

On the 1x synthetic diamond (spark.testing.diamond_run: 60 s, four flows, a reroute, an overload) and on a real
short diamond run (the session's shared one, tests/conftest.py short_diamond_run, on a copy; needs what `testbed
run` needs, skipped otherwise).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import List, Optional, Tuple

import pandas as pd
import pytest
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from runfolder.layout import LAYOUT
from spark import analyze, drops, latency, messagerows, reroutes
from spark.cli import analyze_command
from spark.storage import ResultsStore
from spark.testing import diamond_run, write_run
from tests.realruns import copy_of, missing


class _Collected:
    """The reference's first-seen table, collected, in the place of the messages' rows (both readers get it)."""

    def __init__(self, seen: pd.DataFrame):
        self.delays = self.paths = seen

    def release(self) -> None:
        pass


def reference_link_first_seen(spark, observations: DataFrame, flows: List[dict], _store, _count) -> _Collected:
    """Per message and link direction, first/last time seen and each capture side's time, by a Spark
    aggregation (main's ``latency.link_first_seen`` as at 7b7d0c2, before ``spark.messagerows``), collected (what
    the driver-side path did)."""
    names = spark.createDataFrame([(int(f["flow_id"]), f["name"]) for f in flows], "flow_id long, flow string")
    seen = (observations.where(F.col("src_node").isNotNull() & F.col("dst_node").isNotNull())
            .groupBy("flow_id", "seq", "link", "src_node", "dst_node")
            .agg(F.min("ts_ns").alias("ts_ns"), F.max("ts_ns").alias("last_ns"),
                 F.min(F.when(F.col("side") == "tx", F.col("ts_ns"))).alias("tx_ns"),
                 F.min(F.when(F.col("side") == "rx", F.col("ts_ns"))).alias("rx_ns"))
            .join(F.broadcast(names), "flow_id", "left"))
    return _Collected(seen.toPandas())


def _reference_delay_stats(d: pd.DataFrame, keys: List[str]) -> pd.DataFrame:
    cols = keys + ["messages", "p50_ns", "p99_ns", "max_ns"]
    if d.empty:
        return pd.DataFrame(columns=cols)
    g = d.groupby(keys, sort=True)["delay_ns"]
    out = pd.DataFrame({"messages": g.size(), "p50_ns": g.quantile(0.5), "p99_ns": g.quantile(0.99),
                        "max_ns": g.max()}).reset_index()
    return out[cols]


def reference_link_transit(seen: pd.DataFrame) -> pd.DataFrame:
    s = seen.dropna(subset=["tx_ns", "rx_ns"])
    return _reference_delay_stats(s.assign(delay_ns=s["rx_ns"] - s["tx_ns"]), ["link", "src_node", "dst_node"])


def reference_hop_delays(seen: pd.DataFrame) -> pd.DataFrame:
    a = seen[["flow", "flow_id", "seq", "src_node", "dst_node", "ts_ns"]]
    b = seen[["flow_id", "seq", "src_node", "dst_node", "ts_ns"]]
    m = a.merge(b, left_on=["flow_id", "seq", "dst_node"], right_on=["flow_id", "seq", "src_node"],
                suffixes=("_a", "_b"))
    m = m[m["src_node_a"] != m["dst_node_b"]]
    d = pd.DataFrame({"flow": m["flow"], "from_node": m["src_node_a"], "via_node": m["dst_node_a"],
                      "to_node": m["dst_node_b"], "delay_ns": m["ts_ns_b"] - m["ts_ns_a"]})
    return _reference_delay_stats(d, ["flow", "from_node", "via_node", "to_node"])


def reference_message_paths(seen: pd.DataFrame, flows: List[dict], deliveries: pd.DataFrame
                            ) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """The messages' paths and their arrivals at nodes (what ``onsets.place_offered`` reads)."""
    cols = reroutes.PATH_COLUMNS
    s = seen.dropna(subset=["flow"])
    at_node = s["rx_ns"].fillna(s["ts_ns"]) if "rx_ns" in s else s["ts_ns"]
    into = (s.assign(_in=at_node).groupby(["flow", "seq", "dst_node"], as_index=False)["_in"].min()
            .rename(columns={"dst_node": "src_node", "_in": "seen_in_ns"}))
    if s.empty:
        return pd.DataFrame(columns=cols), into
    s = s.sort_values(["flow", "seq", "ts_ns"], kind="stable")
    s = s.assign(hop=s["src_node"] + ">" + s["dst_node"])
    per = s.groupby(["flow", "seq"], sort=True).agg(hops=("hop", list), first_ns=("ts_ns", "min"),
                                                    last_ns=("last_ns", "max")).reset_index()
    return reroutes.with_receivers(per, flows, deliveries)[cols], into


def reference_link_delays(seen: pd.DataFrame):
    """The per-link transit, the per-hop delays and the link of each direction seen."""
    links = seen.dropna(subset=["link"]).groupby(["src_node", "dst_node"])["link"].min()
    return reference_link_transit(seen), reference_hop_delays(seen), links.to_dict()


class ReferenceLoss:
    """Where each lost delivery was last seen as main (a43905a) found it: a window over the candidate
    observations, joined back to the lost list (its code, copied)."""

    @staticmethod
    def patch(mp: pytest.MonkeyPatch) -> None:
        mp.setattr(drops, "lost_messages", ReferenceLoss.lost_messages)

    @staticmethod
    def lost_messages(spark, lost: pd.DataFrame, observations: DataFrame, flows: DataFrame,
                      toward: Optional[pd.DataFrame] = None) -> DataFrame:
        """main's drops.lost_messages: the lost list from the driver, the last seen by a window."""
        lost_df = spark.createDataFrame(
            [tuple(int(v) if k in ("seq", "send_ns") else v for k, v in zip(("flow", "node", "seq", "send_ns"), r))
             for r in lost[["flow", "node", "seq", "send_ns"]].itertuples(index=False, name=None)],
            "flow string, node string, seq long, send_ns long")
        keys = lost_df.select("flow", "seq").distinct().join(F.broadcast(flows.select("flow_id", "flow")), "flow")
        obs = observations.join(F.broadcast(keys), ["flow_id", "seq"])
        cand = lost_df.select("flow", "node", "seq").join(obs, ["flow", "seq"])
        toward = toward if toward is not None else pd.DataFrame(columns=["flow", "node", "src_node", "dst_node"])
        toward_df = spark.createDataFrame([tuple(r) for r in toward[["flow", "node", "src_node", "dst_node"]].itertuples(
            index=False, name=None)], "flow string, node string, src_node string, dst_node string")
        cand = (cand.join(F.broadcast(toward_df.withColumn("_toward", F.lit(True))),
                          ["flow", "node", "src_node", "dst_node"], "left")
                .join(F.broadcast(toward_df.select("flow", "node").distinct().withColumn("_known", F.lit(True))),
                      ["flow", "node"], "left")
                .where(F.col("_known").isNull() | F.col("_toward").isNotNull()))
        w = Window.partitionBy("flow", "node", "seq").orderBy(F.col("ts_ns").desc(), F.col("side").asc())
        last = (cand.withColumn("_n", F.row_number().over(w)).where("_n = 1")
                .select("flow", "node", "seq", F.col("link").alias("last_link"), F.col("src_node").alias("last_src"),
                        F.col("dst_node").alias("last_dst"), F.col("side").alias("last_side"),
                        F.col("ts_ns").alias("last_seen_ns")))
        out = lost_df.join(last, ["flow", "node", "seq"], "left")
        return out.withColumn(
            "last_seen",
            F.when(F.col("last_link").isNull(), F.lit(None)).otherwise(
                F.concat(F.col("last_src"), F.lit(">"), F.col("last_dst"), F.lit(" at "),
                         F.when(F.col("last_side") == "rx", F.col("last_dst")).otherwise(F.col("last_src")))))


def reference_summary(spark, rd: Path) -> dict:
    """summary.json's figures from the driver-side pandas path (as JSON reads them back)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(messagerows, "message_rows", reference_link_first_seen)
        mp.setattr(latency, "link_delays", reference_link_delays)
        mp.setattr(reroutes, "message_paths", reference_message_paths)
        ReferenceLoss.patch(mp)
        a = analyze.analyze_run(spark, ResultsStore(str(rd), spark), 1.0)
    return json.loads(json.dumps(analyze.build_summary(a), default=analyze._clean))


#: how far a nanosecond figure of the reference may be off by its float64 rounding (see differences)
NS_ROUNDING = 512


def differences(ours, theirs, where: str = "") -> List[str]:
    """Where two JSON values differ (at most the first 20 places)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        out = [f"{where}.{k}: only in {'ours' if k in ours else 'the reference'}" for k in ours.keys() ^ theirs.keys()]
        for k in ours.keys() & theirs.keys():
            out += differences(ours[k], theirs[k], f"{where}.{k}")
        return out[:20]
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return [f"{where}: {len(ours)} items, the reference {len(theirs)}"]
        return [d for i, (a, b) in enumerate(zip(ours, theirs)) for d in differences(a, b, f"{where}[{i}]")][:20]
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)) and not isinstance(ours, bool):
        # The two paths may differ only by float rounding: Spark's percentile and pandas' quantile interpolate
        # alike but in another order (the last bit of a p99), and the reference's toPandas() turns a
        # nanosecond column with a null into float64, which rounds a time of ~1.8e18 ns to 256 ns (twice that
        # in a difference of two). Nothing else is allowed: a figure in nanoseconds may differ by 512 ns at the
        # most, any other by a relative 1e-9.
        slack = NS_ROUNDING if where.endswith("_ns") else 0.0
        return [] if math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=slack) else [
            f"{where}: {ours!r}, the reference {theirs!r}"]
    return [] if ours == theirs else [f"{where}: {ours!r}, the reference {theirs!r}"]


def assert_figures_unchanged(spark, rd: Path) -> dict:
    """summary.json as `analyze` wrote it equals the reference's, figure by figure; returns it."""
    ours = json.loads((rd / LAYOUT.summary).read_text())
    for key in ("timings_s", "verdict"):  # the run's own timings, and the verdict that holds them
        ours.pop(key, None)
    assert differences(ours, reference_summary(spark, rd)) == []
    return ours


@pytest.fixture(scope="module")
def synthetic_1x(spark, tmp_path_factory) -> Path:
    rd = write_run(diamond_run(acks=True), tmp_path_factory.mktemp("runs"))
    assert analyze_command(str(rd)) == 0
    return rd


def test_synthetic_diamond_figures_are_unchanged(spark, synthetic_1x):
    s = assert_figures_unchanged(spark, synthetic_1x)
    # the moved figures are there to compare: per-link transit, per-hop delay, paths, the reroute, the overload
    assert s["links"] and s["hops"] and s["paths"]["complete"] > 0
    assert s["reroutes"] and s["overloads"]


@pytest.mark.integration
@pytest.mark.skipif(bool(missing()), reason=missing() or "ok")
def test_real_diamond_figures_are_unchanged(spark, short_diamond_run, tmp_path):
    rd = copy_of(short_diamond_run.run_dir, tmp_path)  # the reference's analysis writes parquet/ in its folder
    s = assert_figures_unchanged(spark, rd)
    assert s["links"] and s["hops"] and s["paths"]["complete"] > 0


def test_only_float_rounding_passes_for_equal():
    assert differences({"onset_ns": 1_800_000_000_000_000_000}, {"onset_ns": 1_800_000_000_000_000_256}) == []
    assert differences({"p99_ns": 5_000_000.0}, {"p99_ns": 5_000_512.0}) == []
    assert differences({"p99_ns": 5_000_000.0}, {"p99_ns": 5_001_000.0}) != []  # more than the rounding
    assert differences({"loss_pct": 0.5}, {"loss_pct": 0.5 * (1 + 1e-12)}) == []
    assert differences({"loss_pct": 0.5}, {"loss_pct": 0.5001}) != []
    assert differences({"ok": True}, {"ok": False}) != []
