"""One-way latency: percentiles per flow and priority, RFC 3550 jitter, time series, per-hop delay."""
from __future__ import annotations

from typing import Dict, List, Optional

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

__all__ = ["first_deliveries", "latency_table", "jitter_table", "latency_series", "hop_delays", "link_transit",
           "PERCENTILES", "rfc3550_jitter", "link_first_seen"]

#: name -> quantile; names are those of the expectation metrics (latency.p50 ...)
PERCENTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99, "p999": 0.999}


def first_deliveries(received: DataFrame) -> DataFrame:
    """One row per (flow, node, seq): the first time it was received, with ``latency_ns``."""
    w = Window.partitionBy("flow", "node", "seq").orderBy("recv_ns")
    return (received.withColumn("_n", F.row_number().over(w)).where("_n = 1").drop("_n")
            .withColumn("latency_ns", F.col("recv_ns") - F.col("send_ns")))


def _stats(df: DataFrame, keys: List[str]) -> pd.DataFrame:
    qs = list(PERCENTILES.values())
    agg = df.groupBy(*keys).agg(
        F.count("*").alias("messages"),
        F.expr(f"percentile(latency_ns, array({', '.join(map(str, qs))}))").alias("_q"),
        F.max("latency_ns").alias("max_ns"),
        F.min("latency_ns").alias("min_ns"),
        F.avg("latency_ns").alias("mean_ns"),
    )
    for i, name in enumerate(PERCENTILES):
        agg = agg.withColumn(f"{name}_ns", F.col("_q")[i])
    return agg.drop("_q").toPandas()


def latency_table(deliveries: DataFrame) -> Dict[str, pd.DataFrame]:
    """Percentiles (exact) per flow, per priority and overall, in one pass (rollup priority > flow)."""
    qs = list(PERCENTILES.values())
    agg = deliveries.rollup("priority", "flow").agg(
        F.count("*").alias("messages"),
        F.expr(f"percentile(latency_ns, array({', '.join(map(str, qs))}))").alias("_q"),
        F.max("latency_ns").alias("max_ns"),
        F.min("latency_ns").alias("min_ns"),
        F.avg("latency_ns").alias("mean_ns"),
        F.grouping_id().alias("_level"),
    )
    for i, name in enumerate(PERCENTILES):
        agg = agg.withColumn(f"{name}_ns", F.col("_q")[i])
    pdf = agg.drop("_q").toPandas()
    return {
        "flow": pdf[pdf["_level"] == 0].drop(columns="_level").reset_index(drop=True),
        "priority": pdf[pdf["_level"] == 1].drop(columns=["_level", "flow"]).reset_index(drop=True),
        "all": pdf[pdf["_level"] == 3].drop(columns=["_level", "flow", "priority"]).assign(all="all")
        .reset_index(drop=True),
    }


def rfc3550_jitter(send_ns, recv_ns) -> float:
    """RFC 3550 6.4.1 interarrival jitter J after the last packet, packets in arrival order (ns).

    J += (|D(i-1,i)| - J) / 16, D being the difference of the transit times of consecutive packets.
    (The reference for ``jitter_table``, which computes the same value in Spark.)
    """
    j = 0.0
    prev = None
    for s, r in zip(send_ns, recv_ns):
        transit = r - s
        if prev is not None:
            j += (abs(transit - prev) - j) / 16.0
        prev = transit
    return j


def jitter_table(deliveries: DataFrame) -> pd.DataFrame:
    """Jitter per (flow, subscriber node), packets in arrival order (duplicates excluded).

    The recurrence unrolls to J_n = 1/16 * sum_k (15/16)^(n-k) * D_k (J_0 = 0), which is a plain
    aggregate once each packet knows its rank k and D_k.
    """
    w = Window.partitionBy("flow", "node").orderBy("recv_ns", "seq")
    d = (deliveries.select("flow", "node", "priority", "seq", "recv_ns", "latency_ns")
         .withColumn("_k", F.row_number().over(w))
         .withColumn("_d", F.abs(F.col("latency_ns") - F.lag("latency_ns").over(w))))
    g = d.groupBy("flow", "node", "priority").agg(
        F.count("*").alias("messages"), F.max("_k").alias("_n"),
        F.collect_list(F.struct("_k", "_d")).alias("_kd"))
    g = g.withColumn("jitter_ns", F.aggregate(
        F.filter("_kd", lambda x: x["_d"].isNotNull()), F.lit(0.0).cast("double"),
        lambda acc, x: acc + x["_d"] * F.pow(F.lit(15.0 / 16.0), F.col("_n") - x["_k"]) / 16.0))
    return g.select("flow", "node", "priority", "jitter_ns", "messages").toPandas()


def latency_series(deliveries: DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    """Per priority and flow and window (by receive time): count, p50, p99, max."""
    return (deliveries.withColumn("window", F.floor((F.col("recv_ns") - F.lit(t0_ns)) / F.lit(window_ns)))
            .groupBy("priority", "flow", "window")
            .agg(F.count("*").alias("messages"),
                 F.expr("percentile(latency_ns, array(0.5, 0.99))").alias("_q"),
                 F.max("latency_ns").alias("max_ns"))
            .withColumn("p50_ns", F.col("_q")[0]).withColumn("p99_ns", F.col("_q")[1]).drop("_q")
            .orderBy("priority", "flow", "window").toPandas())


def link_first_seen(observations: DataFrame) -> DataFrame:
    """Per message and link direction: first time seen (either capture side)."""
    return (observations.where(F.col("src_node").isNotNull() & F.col("dst_node").isNotNull())
            .groupBy("flow_id", "seq", "link", "src_node", "dst_node")
            .agg(F.min("ts_ns").alias("ts_ns"),
                 F.min(F.when(F.col("side") == "tx", F.col("ts_ns"))).alias("tx_ns"),
                 F.min(F.when(F.col("side") == "rx", F.col("ts_ns"))).alias("rx_ns")))


def link_transit(observations: DataFrame, seen: Optional[DataFrame] = None) -> pd.DataFrame:
    """Per link direction: time from the sender's capture to the receiver's capture."""
    seen = link_first_seen(observations) if seen is None else seen
    seen = seen.where(F.col("tx_ns").isNotNull() & F.col("rx_ns").isNotNull())
    d = seen.withColumn("delay_ns", F.col("rx_ns") - F.col("tx_ns"))
    return (d.groupBy("link", "src_node", "dst_node")
            .agg(F.count("*").alias("messages"),
                 F.expr("percentile(delay_ns, array(0.5, 0.99))").alias("_q"),
                 F.max("delay_ns").alias("max_ns"))
            .withColumn("p50_ns", F.col("_q")[0]).withColumn("p99_ns", F.col("_q")[1]).drop("_q")
            .orderBy("link", "src_node").toPandas())


def hop_delays(observations: DataFrame, flows: DataFrame, seen: Optional[DataFrame] = None) -> pd.DataFrame:
    """Per flow and pair of consecutive links u->v, v->w: delay from first seen on the first to the second.

    That is the time the message spent crossing v (plus the second link's
    capture position); only messages seen on both links count.
    """
    seen = link_first_seen(observations) if seen is None else seen
    a = seen.alias("a")
    b = seen.alias("b")
    pairs = a.join(b, (F.col("a.flow_id") == F.col("b.flow_id")) & (F.col("a.seq") == F.col("b.seq"))
                   & (F.col("a.dst_node") == F.col("b.src_node")) & (F.col("a.src_node") != F.col("b.dst_node")))
    d = pairs.select(F.col("a.flow_id").alias("flow_id"), F.col("a.src_node").alias("from_node"),
                     F.col("a.dst_node").alias("via_node"), F.col("b.dst_node").alias("to_node"),
                     (F.col("b.ts_ns") - F.col("a.ts_ns")).alias("delay_ns"))
    d = d.join(flows.select("flow_id", "flow"), "flow_id", "left")
    return (d.groupBy("flow", "from_node", "via_node", "to_node")
            .agg(F.count("*").alias("messages"),
                 F.expr("percentile(delay_ns, array(0.5, 0.99))").alias("_q"),
                 F.max("delay_ns").alias("max_ns"))
            .withColumn("p50_ns", F.col("_q")[0]).withColumn("p99_ns", F.col("_q")[1]).drop("_q")
            .orderBy("flow", "from_node", "via_node").toPandas())
