"""Sent against received: loss per flow and window, duplicates, reordering, where each lost message was
last seen, and the drops the routers reported themselves."""
from __future__ import annotations

from typing import Dict, List

import pandas as pd
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

__all__ = ["expected_deliveries", "loss_table", "loss_series", "lost_messages", "router_drops", "DROP_METRICS"]

#: router counter -> drop reason
DROP_METRICS = {
    "router_queue_dropped_messages_total": "queue_full",
    "router_no_route_messages_total": "no_route",
    "router_ttl_expired_messages_total": "ttl_expired",
    "router_links_closed_block_total": "link_closed_block",
}


def expected_deliveries(spark: SparkSession, sent: DataFrame, flows: DataFrame, subscribers_with_logs: Dict[str, List[str]]
                        ) -> DataFrame:
    """(flow, node, seq, send_ns) for every message and every subscriber whose receive log exists."""
    rows = [(f, n) for f, nodes in subscribers_with_logs.items() for n in nodes]
    subs = spark.createDataFrame(rows, "flow string, node string")
    return sent.join(F.broadcast(subs), "flow")


def loss_table(expected: DataFrame, received: DataFrame, sent: DataFrame) -> pd.DataFrame:
    """Per flow: sent, expected deliveries, delivered (unique), lost, loss %, duplicates, reordered."""
    uniq = received.select("flow", "node", "seq").distinct()
    delivered = expected.join(uniq, ["flow", "node", "seq"], "left_semi").groupBy("flow").agg(
        F.count("*").alias("delivered"))
    exp = expected.groupBy("flow").agg(F.count("*").alias("expected"))
    snt = sent.groupBy("flow", "priority").agg(F.count("*").alias("sent"))
    dup = received.groupBy("flow", "node", "seq").count().where("count > 1").groupBy("flow").agg(
        F.sum(F.col("count") - 1).alias("duplicates"))
    # reordered: received after a higher seq of the same flow had already arrived at that node
    w = Window.partitionBy("flow", "node").orderBy("recv_ns", "seq").rowsBetween(Window.unboundedPreceding, -1)
    reo = (received.withColumn("_max_before", F.max("seq").over(w))
           .where(F.col("seq") < F.col("_max_before")).groupBy("flow").agg(F.count("*").alias("reordered")))
    out = (snt.join(exp, "flow", "left").join(delivered, "flow", "left").join(dup, "flow", "left")
           .join(reo, "flow", "left").fillna(0, ["expected", "delivered", "duplicates", "reordered"]))
    pdf = out.toPandas()
    pdf["lost"] = pdf["expected"] - pdf["delivered"]
    pdf["loss_pct"] = [100.0 * lost / e if e else None for lost, e in zip(pdf["lost"], pdf["expected"])]
    pdf["delivery_pct"] = [100.0 * d / e if e else None for d, e in zip(pdf["delivered"], pdf["expected"])]
    return pdf.sort_values("flow").reset_index(drop=True)


def loss_series(expected: DataFrame, received: DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    """Per flow and window of send time: expected deliveries, delivered, lost."""
    uniq = received.select("flow", "node", "seq").distinct().withColumn("_got", F.lit(1))
    d = expected.join(uniq, ["flow", "node", "seq"], "left")
    return (d.withColumn("window", F.floor((F.col("send_ns") - F.lit(t0_ns)) / F.lit(window_ns)))
            .groupBy("flow", "window")
            .agg(F.count("*").alias("expected"), F.count("_got").alias("delivered"))
            .withColumn("lost", F.col("expected") - F.col("delivered"))
            .orderBy("flow", "window").toPandas())


def lost_messages(expected: DataFrame, received: DataFrame, observations: DataFrame, flows: DataFrame) -> DataFrame:
    """Every lost (flow, node, seq) with where it was last seen on a link (null: never seen in any capture).

    ``last_seen``: ``"r1>r2 at r2"`` (arrived at r2 and went no further that we saw),
    ``"r1>r2 at r1"`` (left r1, never seen arriving at r2).
    """
    lost = expected.join(received.select("flow", "node", "seq"), ["flow", "node", "seq"], "left_anti")
    obs = observations.join(flows.select("flow_id", "flow"), "flow_id")
    w = Window.partitionBy("flow", "seq").orderBy(F.col("ts_ns").desc(), F.col("side").asc())
    last = (obs.withColumn("_n", F.row_number().over(w)).where("_n = 1")
            .select("flow", "seq", F.col("link").alias("last_link"), F.col("src_node").alias("last_src"),
                    F.col("dst_node").alias("last_dst"), F.col("side").alias("last_side"),
                    F.col("ts_ns").alias("last_seen_ns")))
    out = lost.join(last, ["flow", "seq"], "left")
    return out.withColumn(
        "last_seen",
        F.when(F.col("last_link").isNull(), F.lit(None)).otherwise(
            F.concat(F.col("last_src"), F.lit(">"), F.col("last_dst"), F.lit(" at "),
                     F.when(F.col("last_side") == "rx", F.col("last_dst")).otherwise(F.col("last_src")))))


def router_drops(metrics: DataFrame) -> pd.DataFrame:
    """Increase of every drop counter over the run, per node, priority and reason (counter resets handled)."""
    names = list(DROP_METRICS)
    m = metrics.where(F.col("ok") & F.col("metric").isin(names))
    m = m.withColumn("series", F.to_json(F.col("labels")))
    w = Window.partitionBy("node", "metric", "series").orderBy("ts_ns")
    m = m.withColumn("_prev", F.lag("value").over(w))
    m = m.withColumn("_inc", F.when(F.col("_prev").isNull(), F.lit(0.0))
                     .when(F.col("value") >= F.col("_prev"), F.col("value") - F.col("_prev"))
                     .otherwise(F.col("value")))  # reset: the counter restarted at 0
    reason = F.create_map(*[x for k, v in DROP_METRICS.items() for x in (F.lit(k), F.lit(v))])
    out = (m.withColumn("reason", reason[F.col("metric")])
           .withColumn("priority_name", F.coalesce(F.col("labels")["priority_name"], F.lit("all")))
           .withColumn("peer", F.col("labels")["peer"])
           .groupBy("node", "priority_name", "reason").agg(F.sum("_inc").alias("dropped")))
    return out.orderBy("node", "priority_name", "reason").toPandas()
