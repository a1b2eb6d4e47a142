"""Sent against received: loss per flow and window, duplicates, reordering, where each lost message was
last seen (a Spark join against the observations), and the drops the routers reported themselves."""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from router.codec import PRIORITY_NAMES

from .session import frame_to_spark

__all__ = ["expected_deliveries", "loss_table", "loss_series", "lost_list", "lost_messages", "router_drops",
           "links_toward_subscribers", "DROP_METRICS"]

#: router counter -> drop reason
DROP_METRICS = {
    "router_queue_dropped_messages_total": "queue_full",
    "router_no_route_messages_total": "no_route",
    "router_ttl_expired_messages_total": "ttl_expired",
    "router_links_closed_block_total": "link_closed_block",
    # messages of a noisy sender dropped on arrival (label reason="noisy_sender"); the slow_reader series of
    # the same counter is left out: those drops are already in router_queue_dropped_messages_total
    "router_limit_dropped_messages_total": "noisy_sender",
}


def expected_deliveries(sent: pd.DataFrame, subscribers_with_logs: Dict[str, List[str]]) -> pd.DataFrame:
    """(flow, node, seq, send_ns, priority) for every message and every subscriber whose receive log exists."""
    subs = pd.DataFrame([(f, n) for f, nodes in subscribers_with_logs.items() for n in nodes],
                        columns=["flow", "node"])
    return sent.merge(subs, on="flow")[["flow", "node", "seq", "send_ns", "priority"]]


def _marked(expected: pd.DataFrame, received: pd.DataFrame) -> pd.DataFrame:
    got = received[["flow", "node", "seq"]].drop_duplicates().assign(_got=True)
    m = expected.merge(got, on=["flow", "node", "seq"], how="left")
    m["_got"] = m["_got"].notna()
    return m


def loss_table(expected: pd.DataFrame, received: pd.DataFrame, sent: pd.DataFrame) -> pd.DataFrame:
    """Per flow: sent, expected deliveries, delivered (unique), lost, loss %, duplicates, reordered.

    Reordered: a message received after a higher sequence number of the same flow had already
    arrived at that node (counted once per late message).
    """
    m = _marked(expected, received)
    exp = m.groupby("flow").agg(expected=("seq", "size"), delivered=("_got", "sum"))
    snt = sent.groupby("flow").agg(sent=("seq", "size"), priority=("priority", "first"))
    dup = (received.groupby(["flow", "node", "seq"]).size() - 1).groupby("flow").sum().rename("duplicates")
    reo = {}
    for (flow, _node), g in received.sort_values(["recv_ns", "seq"], kind="stable").groupby(["flow", "node"]):
        seq = g["seq"].to_numpy()
        before = np.maximum.accumulate(np.concatenate([[-1], seq[:-1]]))
        reo[flow] = reo.get(flow, 0) + int((seq < before).sum())
    out = snt.join(exp, how="left").join(dup, how="left")
    out["reordered"] = pd.Series(reo, dtype="int64")
    out = out.fillna({"expected": 0, "delivered": 0, "duplicates": 0, "reordered": 0}).reset_index()
    for c in ("sent", "expected", "delivered", "duplicates", "reordered"):
        out[c] = out[c].astype("int64")
    out["lost"] = out["expected"] - out["delivered"]
    out["loss_pct"] = [100.0 * lost / e if e else None for lost, e in zip(out["lost"], out["expected"])]
    out["delivery_pct"] = [100.0 * d / e if e else None for d, e in zip(out["delivered"], out["expected"])]
    return out.sort_values("flow").reset_index(drop=True)


def loss_series(expected: pd.DataFrame, received: pd.DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    """Per flow and window of send time: expected deliveries, delivered, lost."""
    cols = ["flow", "window", "expected", "delivered", "lost"]
    if expected.empty:
        return pd.DataFrame(columns=cols)
    m = _marked(expected, received)
    m["window"] = (m["send_ns"] - t0_ns) // window_ns
    out = m.groupby(["flow", "window"]).agg(expected=("seq", "size"), delivered=("_got", "sum")).reset_index()
    out["delivered"] = out["delivered"].astype("int64")
    out["lost"] = out["expected"] - out["delivered"]
    return out[cols]


def lost_list(expected: pd.DataFrame, received: pd.DataFrame) -> pd.DataFrame:
    m = _marked(expected, received)
    return m[~m["_got"]][["flow", "node", "seq", "send_ns"]].reset_index(drop=True)


def links_toward_subscribers(paths: pd.DataFrame) -> pd.DataFrame:
    """(flow, node, src_node, dst_node): every link direction a message crossed on its way from the publisher
    to subscriber ``node``, over the messages that reached it (the branch of the flow's tree toward it)."""
    cols = ["flow", "node", "src_node", "dst_node"]
    if paths.empty:
        return pd.DataFrame(columns=cols)
    rows = set()
    distinct = paths.assign(_r=paths["receivers"].apply(tuple), _h=paths["hops"].apply(lambda h: tuple(sorted(h))))
    for flow, publisher, hops, receivers in distinct[["flow", "publisher", "_h", "_r"]].drop_duplicates().itertuples(
            index=False, name=None):
        parent = _tree_parents(publisher, hops)
        for node in receivers:
            v = node
            while v in parent:
                u = parent[v]
                rows.add((flow, node, u, v))
                v = u
    return pd.DataFrame(sorted(rows), columns=cols)


def _tree_parents(root: Optional[str], hops) -> Dict[str, str]:
    """Breadth-first from ``root`` over the hops ``u>v``: node -> the node it was reached from."""
    adj: Dict[str, List[str]] = {}
    for h in hops:
        u, v = h.split(">")
        adj.setdefault(u, []).append(v)
    parent: Dict[str, str] = {}
    todo = [root]
    seen = {root}
    while todo:
        u = todo.pop(0)
        for v in sorted(adj.get(u, ())):
            if v not in seen:
                seen.add(v)
                parent[v] = u
                todo.append(v)
    return parent


def lost_messages(spark: SparkSession, lost: pd.DataFrame, observations: DataFrame, flows: DataFrame,
                  toward: Optional[pd.DataFrame] = None) -> DataFrame:
    """Every lost (flow, node, seq) with where it was last seen on its way to that subscriber (null: never seen
    in any capture on that way).

    ``toward`` (``links_toward_subscribers``): the link directions on the way to each subscriber; only those
    observations count for a loss at that subscriber, so a message lost on one branch of a tree is not
    blamed on another branch that carried it further. A subscriber no message ever reached has no known way:
    every observation of the message counts. ``last_seen``: ``"r1>r2 at r2"`` (arrived at r2 and was seen no
    further), ``"r1>r2 at r1"`` (left r1, never seen arriving at r2). One aggregation per lost delivery over its
    message's observations (``min_by``), not a window and a join back to the lost list: two Spark jobs less.
    """
    # the driver's frames go to Spark through Arrow (rows would be a Python RDD: a Python worker to start)
    lost_df = frame_to_spark(
        spark, lost[["flow", "node", "seq", "send_ns"]].astype({"seq": "int64", "send_ns": "int64"}),
        "flow string, node string, seq long, send_ns long")
    keys = lost_df.select("flow", "seq").distinct().join(F.broadcast(flows.select("flow_id", "flow")), "flow")
    obs = observations.join(F.broadcast(keys), ["flow_id", "seq"]).select(
        "flow", "seq", "link", "src_node", "dst_node", "side", "ts_ns")
    toward = toward if toward is not None else pd.DataFrame(columns=["flow", "node", "src_node", "dst_node"])
    toward_df = frame_to_spark(spark, toward[["flow", "node", "src_node", "dst_node"]].astype(object),
                               "flow string, node string, src_node string, dst_node string")
    known = frame_to_spark(  # subscribers with a known way
        spark, toward[["flow", "node"]].drop_duplicates().astype(object).assign(_known=True),
        "flow string, node string, _known boolean")
    # every lost delivery with its message's observations (none: one row of nulls), those off the way to its
    # subscriber ordered nowhere; the last one seen (latest, ties by side) is the least of (-ts_ns, side)
    cand = (lost_df.join(obs, ["flow", "seq"], "left")
            .join(F.broadcast(toward_df.withColumn("_toward", F.lit(True))),
                  ["flow", "node", "src_node", "dst_node"], "left")
            .join(F.broadcast(known), ["flow", "node"], "left"))
    counts = F.col("ts_ns").isNotNull() & (F.col("_known").isNull() | F.col("_toward").isNotNull())
    last = F.min_by(F.struct(F.col("link").alias("last_link"), F.col("src_node").alias("last_src"),
                             F.col("dst_node").alias("last_dst"), F.col("side").alias("last_side"),
                             F.col("ts_ns").alias("last_seen_ns")),
                    F.when(counts, F.struct(-F.col("ts_ns"), F.col("side"))))
    out = (cand.groupBy("flow", "node", "seq").agg(F.first("send_ns").alias("send_ns"), last.alias("_last"))
           .select("flow", "node", "seq", "send_ns", "_last.*"))
    return out.withColumn(
        "last_seen",
        F.when(F.col("last_link").isNull(), F.lit(None)).otherwise(
            F.concat(F.col("last_src"), F.lit(">"), F.col("last_dst"), F.lit(" at "),
                     F.when(F.col("last_side") == "rx", F.col("last_dst")).otherwise(F.col("last_src")))))


def _priority_name(labels: dict) -> str:
    """The codec's name of a sample's priority (from its ``priority`` number), ``all`` for per-link counters."""
    prio = labels.get("priority")
    if prio is not None and str(prio).isdigit() and int(prio) in PRIORITY_NAMES:
        return PRIORITY_NAMES[int(prio)]
    return labels.get("priority_name", "all")


def router_drops(metrics: pd.DataFrame) -> pd.DataFrame:
    """Increase of every drop counter over the run, per node, priority and reason.

    The first scrape is the baseline; a value lower than the previous one is a counter that restarted
    (router restart, connection re-opened) and counts from 0.
    """
    cols = ["node", "priority_name", "reason", "dropped"]
    m = metrics[metrics["ok"].astype(bool) & metrics["metric"].isin(list(DROP_METRICS))]
    noisy = np.array([(l or {}).get("reason") == "noisy_sender" for l in m["labels"]], dtype=bool)
    m = m[(m["metric"] != "router_limit_dropped_messages_total").to_numpy() | noisy]
    if m.empty:
        return pd.DataFrame(columns=cols)
    m = m.assign(series=[tuple(sorted((l or {}).items())) for l in m["labels"]],
                 priority_name=[_priority_name(l or {}) for l in m["labels"]],
                 reason=m["metric"].map(DROP_METRICS))
    rows = []
    for (node, _metric, _series, prio, reason), g in m.sort_values("ts_ns").groupby(
            ["node", "metric", "series", "priority_name", "reason"], sort=False):
        v = g["value"].to_numpy(dtype="float64")
        inc = np.diff(v)
        total = float(np.where(inc >= 0, inc, v[1:]).sum()) if len(v) > 1 else 0.0
        rows.append((node, prio, reason, total))
    out = pd.DataFrame(rows, columns=cols)
    return out.groupby(["node", "priority_name", "reason"], as_index=False)["dropped"].sum().sort_values(
        ["node", "priority_name", "reason"]).reset_index(drop=True)
