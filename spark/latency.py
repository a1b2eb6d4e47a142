"""One-way latency: percentiles per flow and priority, RFC 3550 jitter, time series, per-hop delay."""
from __future__ import annotations

from typing import Dict, List, Optional

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

__all__ = ["first_deliveries", "latency_table", "jitter_table", "latency_series", "hop_delays", "link_transit",
           "PERCENTILES", "rfc3550_jitter"]

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
    """Percentiles (exact) per flow, per priority and overall."""
    return {
        "flow": _stats(deliveries, ["flow", "priority"]),
        "priority": _stats(deliveries, ["priority"]),
        "all": _stats(deliveries.withColumn("all", F.lit("all")), ["all"]),
    }


def rfc3550_jitter(send_ns, recv_ns) -> (float, float):
    """RFC 3550 6.4.1 interarrival jitter over packets in arrival order: (final J, mean of J) in ns."""
    j = 0.0
    total = 0.0
    prev = None
    n = 0
    for s, r in zip(send_ns, recv_ns):
        transit = r - s
        if prev is not None:
            d = abs(transit - prev)
            j += (d - j) / 16.0
            total += j
            n += 1
        prev = transit
    return j, (total / n if n else 0.0)


def _jitter_group(pdf: pd.DataFrame) -> pd.DataFrame:
    pdf = pdf.sort_values(["recv_ns", "seq"])
    final, mean = rfc3550_jitter(pdf["send_ns"].tolist(), pdf["recv_ns"].tolist())
    return pd.DataFrame({"flow": [pdf["flow"].iloc[0]], "node": [pdf["node"].iloc[0]],
                         "priority": [int(pdf["priority"].iloc[0])], "jitter_ns": [final],
                         "jitter_mean_ns": [mean], "messages": [len(pdf)]})


def jitter_table(deliveries: DataFrame) -> pd.DataFrame:
    """Jitter per (flow, subscriber node), packets taken in arrival order (duplicates excluded)."""
    return (deliveries.select("flow", "node", "priority", "seq", "send_ns", "recv_ns")
            .groupBy("flow", "node")
            .applyInPandas(_jitter_group, "flow string, node string, priority int, jitter_ns double, "
                                          "jitter_mean_ns double, messages long")
            .toPandas())


def latency_series(deliveries: DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    """Per priority and flow and window (by receive time): count, p50, p99, max."""
    return (deliveries.withColumn("window", F.floor((F.col("recv_ns") - F.lit(t0_ns)) / F.lit(window_ns)))
            .groupBy("priority", "flow", "window")
            .agg(F.count("*").alias("messages"),
                 F.expr("percentile(latency_ns, array(0.5, 0.99))").alias("_q"),
                 F.max("latency_ns").alias("max_ns"))
            .withColumn("p50_ns", F.col("_q")[0]).withColumn("p99_ns", F.col("_q")[1]).drop("_q")
            .orderBy("priority", "flow", "window").toPandas())


def _link_first_seen(observations: DataFrame) -> DataFrame:
    """Per message and link direction: first time seen (either capture side)."""
    return (observations.where(F.col("src_node").isNotNull() & F.col("dst_node").isNotNull())
            .groupBy("flow_id", "seq", "link", "src_node", "dst_node")
            .agg(F.min("ts_ns").alias("ts_ns"),
                 F.min(F.when(F.col("side") == "tx", F.col("ts_ns"))).alias("tx_ns"),
                 F.min(F.when(F.col("side") == "rx", F.col("ts_ns"))).alias("rx_ns")))


def link_transit(observations: DataFrame) -> pd.DataFrame:
    """Per link direction: time from the sender's capture to the receiver's capture."""
    seen = _link_first_seen(observations).where(F.col("tx_ns").isNotNull() & F.col("rx_ns").isNotNull())
    d = seen.withColumn("delay_ns", F.col("rx_ns") - F.col("tx_ns"))
    return (d.groupBy("link", "src_node", "dst_node")
            .agg(F.count("*").alias("messages"),
                 F.expr("percentile(delay_ns, array(0.5, 0.99))").alias("_q"),
                 F.max("delay_ns").alias("max_ns"))
            .withColumn("p50_ns", F.col("_q")[0]).withColumn("p99_ns", F.col("_q")[1]).drop("_q")
            .orderBy("link", "src_node").toPandas())


def hop_delays(observations: DataFrame, flows: DataFrame) -> pd.DataFrame:
    """Per flow and pair of consecutive links u->v, v->w: delay from first seen on the first to the second.

    That is the time the message spent crossing v (plus the second link's
    capture position); only messages seen on both links count.
    """
    seen = _link_first_seen(observations)
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
