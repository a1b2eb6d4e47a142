"""The pandas path of the send and receive logs' figures as it was on main at 5bd07ad (issue 30 moved it into
Spark): the reference tests/spark/test_spark_figures_in_spark.py and test_spark_trafficlogs.py compare with.
Kept as it was on purpose, not as a second definition of anything: the analysis does not import it."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import DataFrame

from runfolder.layout import LAYOUT
from runfolder.records import RECV_HEADER, SEND_HEADER
from spark import analyze, drops, ingest, latency
from spark.clockcorrection import correct_latencies
from spark.ingest import _read_csv_log, exact_ints
from spark.problems import Problem
from spark.storage import ResultsStore
from spark.trafficlogs import RECEIVED_SCHEMA, SENT_SCHEMA, Logs


def reference_read_logs(folder: ResultsStore, flows: List[dict], kind: str, problems: List[Problem]) -> pd.DataFrame:
    """The logs read on the driver with pandas (ingest._read_logs as it was)."""
    cols = (SEND_HEADER if kind == "send" else RECV_HEADER).split(",")
    target = (SENT_SCHEMA if kind == "send" else RECEIVED_SCHEMA).names
    expected: Dict[str, Tuple[dict, Optional[str]]] = {}
    slow_names = {LAYOUT.recv_log_name(f["name"], s["label"]) for f in flows for s in f.get("slow_subscribers") or []}
    for f in flows:
        if kind == "send":
            expected[LAYOUT.send_log_name(f["name"])] = (f, None)
        elif kind == "slow":
            for s in f.get("slow_subscribers") or []:
                expected[LAYOUT.recv_log_name(f["name"], s["label"])] = (f, s["label"])
        else:
            for sub in f.get("subscribers") or []:
                expected[LAYOUT.recv_log_name(f["name"], sub)] = (f, sub)
    prefix = LAYOUT.send_prefix if kind == "send" else LAYOUT.recv_prefix
    present = set(folder.list(LAYOUT.traffic_dir, ".csv", prefix=prefix))
    parts = []
    for name, (f, sub) in sorted(expected.items()):
        rel = LAYOUT.traffic_file(name)
        if name not in present:
            problems.append(Problem("error", rel, "missing: " + (
                "nothing known about what this flow sent" if kind == "send"
                else f"what {sub} received from {f['name']} is unknown (left out of loss and latency)")))
            continue
        read = _read_csv_log(folder, rel, cols, problems)
        if read is None:
            continue
        df, lines = read
        num = pd.DataFrame({c: exact_ints(df[c]) for c in cols})
        ok = num[[c for c in cols if c != "size"]].notna().all(axis=1)
        bad = lines - int(ok.sum())
        if bad > 0:
            problems.append(Problem("warning", rel,
                                    f"{bad} unreadable lines skipped (a line cut by an interrupted write?)"))
        num = num[ok].astype("Int64").astype("int64", errors="ignore")
        num["flow"], num["flow_id"], num["priority"] = f["name"], int(f["flow_id"]), int(f.get("priority", 5))
        if kind != "send":
            num["node"] = sub
        parts.append(num)
    others = slow_names if kind == "recv" else ({n for n in present if n not in slow_names} if kind == "slow" else set())
    for name in sorted(present - set(expected) - others):
        problems.append(Problem("warning", LAYOUT.traffic_file(name), "not a flow in flows.json: ignored"))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in ("flow", "node") else
                                          ("int32" if c == "priority" else "int64")) for c in target})
    out = pd.concat(parts, ignore_index=True)
    for c in ("seq", "send_ns", "recv_ns", "flow_id"):
        if c in out:
            out[c] = out[c].astype("int64")
    out["size"] = out["size"].astype("Int64")
    out["priority"] = out["priority"].astype("int32")
    return out[target]


def reference_first_deliveries(received: pd.DataFrame) -> pd.DataFrame:
    d = received.sort_values(["recv_ns", "seq"], kind="stable").drop_duplicates(["flow", "node", "seq"])
    d = d.assign(latency_ns=d["recv_ns"] - d["send_ns"])
    return d.reset_index(drop=True)


def reference_grouped(d: pd.DataFrame, keys: List[str]) -> pd.DataFrame:
    rows = []
    for key, g in d.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(keys, key)), **latency._stats(g["latency_ns"].to_numpy())})
    return pd.DataFrame(rows, columns=keys + ["messages", "min_ns", "mean_ns", "p50_ns", "p95_ns", "p99_ns",
                                              "p999_ns", "max_ns"])


def reference_jitter_samples(deliveries: pd.DataFrame) -> pd.DataFrame:
    cols = ["flow", "node", "priority", "recv_ns", "jitter_ns"]
    parts = []
    for (flow, node), g in deliveries.groupby(["flow", "node"], sort=True):
        g = g.sort_values(["recv_ns", "seq"], kind="stable")
        est = latency.jitter_estimates(g["latency_ns"].to_numpy())
        if len(est):
            parts.append(pd.DataFrame({"flow": flow, "node": node, "priority": int(g["priority"].iloc[0]),
                                       "recv_ns": g["recv_ns"].to_numpy()[1:], "jitter_ns": est}))
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def reference_jitter_stats(samples: pd.DataFrame) -> dict:
    v = samples["jitter_ns"].to_numpy(dtype="float64")
    out = {"samples": int(len(v))}
    for name, q in zip(latency.JITTER_STATS, np.percentile(v, [q * 100 for q in latency.JITTER_STATS.values()])):
        out[f"{name}_ns"] = float(q)
    out["max_ns"] = float(v.max())
    out["last_ns"] = float(samples.sort_values("recv_ns", kind="stable").groupby(["flow", "node"])["jitter_ns"]
                           .last().max())
    return out


def reference_jitter_series(samples: pd.DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    cols = ["flow", "window", "jitter_ns", "max_ns"]
    if samples.empty:
        return pd.DataFrame(columns=cols)
    s = samples.assign(window=(samples["recv_ns"] - t0_ns) // window_ns).sort_values("recv_ns", kind="stable")
    last = s.groupby(["flow", "window", "node"])["jitter_ns"].last().groupby(["flow", "window"]).max()
    top = s.groupby(["flow", "window"])["jitter_ns"].max()
    return pd.DataFrame({"jitter_ns": last, "max_ns": top}).reset_index()[cols]


def reference_latency_series(deliveries: pd.DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    cols = ["priority", "flow", "window", "messages", "p50_ns", "p99_ns", "max_ns"]
    if deliveries.empty:
        return pd.DataFrame(columns=cols)
    d = deliveries.assign(window=(deliveries["recv_ns"] - t0_ns) // window_ns)
    g = d.groupby(["priority", "flow", "window"], sort=True)["latency_ns"]
    return pd.DataFrame({"messages": g.size(), "p50_ns": g.quantile(0.5), "p99_ns": g.quantile(0.99),
                         "max_ns": g.max()}).reset_index()[cols]


def reference_marked(expected: pd.DataFrame, received: pd.DataFrame) -> pd.DataFrame:
    got = received[["flow", "node", "seq"]].drop_duplicates().assign(_got=True)
    m = expected.merge(got, on=["flow", "node", "seq"], how="left")
    m["_got"] = m["_got"].notna()
    return m


def reference_loss_table(expected: pd.DataFrame, received: pd.DataFrame, sent: pd.DataFrame) -> pd.DataFrame:
    m = reference_marked(expected, received)
    exp = m.groupby("flow").agg(expected=("seq", "size"), delivered=("_got", "sum"))
    snt = sent.groupby("flow").agg(sent=("seq", "size"), priority=("priority", "first"),
                                   last_send_ns=("send_ns", "max"))  # summary's end of run when the manifest has none
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


def reference_loss_series(expected: pd.DataFrame, received: pd.DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    cols = ["flow", "window", "expected", "delivered", "lost"]
    if expected.empty:
        return pd.DataFrame(columns=cols)
    m = reference_marked(expected, received)
    m["window"] = (m["send_ns"] - t0_ns) // window_ns
    out = m.groupby(["flow", "window"]).agg(expected=("seq", "size"), delivered=("_got", "sum")).reset_index()
    out["delivered"] = out["delivered"].astype("int64")
    out["lost"] = out["expected"] - out["delivered"]
    return out[cols]


class Reference:
    """The pandas path, plugged into ``analyze_run`` where the Spark one is: it reads the logs into the frames it
    keeps (``frames``) and answers every call of the moved code from them (the Spark arguments are not read)."""

    def __init__(self, spark):
        self.spark = spark
        self.frames: Dict[str, pd.DataFrame] = {}
        self.flows: List[dict] = []
        self.deliveries = pd.DataFrame()
        self.samples = pd.DataFrame()
        self.expected = pd.DataFrame()

    def patch(self, mp: pytest.MonkeyPatch) -> None:
        mp.setattr(ingest, "read_logs", self.read_logs)
        mp.setattr(latency, "first_deliveries", self.first_deliveries)
        for name in ("delivery_stats", "latency_table", "jitter_table", "pooled_jitter", "latency_cdf", "throughput",
                     "jitter_series", "latency_series"):
            mp.setattr(latency, name, getattr(self, name))
        for name in ("expected_deliveries", "loss_series", "loss_table", "lost_list"):
            mp.setattr(drops, name, getattr(self, name))
        mp.setattr(analyze, "slow_receipts", self.slow_receipts)

    def _spark(self, pdf: pd.DataFrame, schema) -> DataFrame:
        rows = [tuple(None if pd.isna(v) else (int(v) if isinstance(v, (np.integer, int)) else v) for v in r)
                for r in pdf[schema.names].astype(object).itertuples(index=False, name=None)]
        return self.spark.createDataFrame(rows, schema)

    def read_logs(self, spark, folder: ResultsStore, flows: List[dict], problems: List[Problem]) -> Logs:
        self.flows = flows
        for table, kind in (("sent", "send"), ("received", "recv"), ("slow_received", "slow")):
            self.frames[table] = reference_read_logs(folder, flows, kind, problems)
        sent = self.frames["sent"]
        return Logs(self._spark(sent, SENT_SCHEMA), self._spark(self.frames["received"], RECEIVED_SCHEMA),
                    self._spark(self.frames["slow_received"], RECEIVED_SCHEMA),
                    int(sent["send_ns"].min()) if len(sent) else None)

    def first_deliveries(self, _received: DataFrame, publishers, clocks) -> DataFrame:
        self.deliveries = correct_latencies(reference_first_deliveries(self.frames["received"]), publishers, clocks)
        self.samples = reference_jitter_samples(self.deliveries)
        return self.spark.createDataFrame(self.deliveries[["flow", "node", "seq"]].astype(object),
                                          "flow string, node string, seq long")

    def delivery_stats(self, _deliveries: DataFrame, groups: Dict[str, List[str]]) -> Dict[str, List[str]]:
        return groups

    def _flow_sets(self, groups: Dict[str, List[str]]) -> Dict[tuple, List[str]]:
        """(kind, key) -> the flows build_summary pooled for it on 5bd07ad."""
        names = sorted(f["name"] for f in self.flows)
        prio = {f["name"]: int(f.get("priority", 5)) for f in self.flows}
        sets = {("flow", n): [n] for n in names}
        sets.update({("priority", str(p)): [n for n in names if prio[n] == p] for p in set(prio.values())})
        sets[("all", "all")] = names
        sets.update({("group", g): m for g, m in groups.items()})
        return sets

    def latency_table(self, groups) -> Dict[str, pd.DataFrame]:
        d = self.deliveries
        out = {"flow": reference_grouped(d, ["flow", "priority"]), "priority": reference_grouped(d, ["priority"]),
               "all": reference_grouped(d.assign(all="all"), ["all"])}
        rows = [{"group": g, **latency._stats(d[d["flow"].isin(m)]["latency_ns"].to_numpy())}
                for g, m in groups.items() if d["flow"].isin(m).any()]
        out["group"] = pd.DataFrame(rows, columns=["group"] + list(out["all"].columns[1:]))
        return out

    def jitter_table(self, _groups) -> pd.DataFrame:
        cols = ["flow", "node", "priority", "messages", "samples", "p50_ns", "p95_ns", "p99_ns", "max_ns", "last_ns"]
        counts = self.deliveries.groupby(["flow", "node"]).size()
        rows = [{"flow": flow, "node": node, "priority": int(g["priority"].iloc[0]),
                 "messages": int(counts[(flow, node)]), **reference_jitter_stats(g)}
                for (flow, node), g in self.samples.groupby(["flow", "node"], sort=True)]
        return pd.DataFrame(rows, columns=cols)

    def pooled_jitter(self, groups) -> Dict[tuple, dict]:
        s = self.samples
        out = {}
        for key, flows in self._flow_sets(groups).items():
            pooled = s[s["flow"].isin(flows)] if len(s) else s
            if len(pooled):
                out[key] = reference_jitter_stats(pooled)
        return out

    def latency_cdf(self, _groups) -> Dict[int, np.ndarray]:
        return {int(p): np.percentile(g["latency_ns"].to_numpy(dtype="float64"),
                                      [q * 100 for q in latency.CDF_QUANTILES])
                for p, g in self.deliveries.groupby("priority")}

    def throughput(self, _groups) -> pd.DataFrame:
        return (self.deliveries.groupby("flow").agg(bytes=("size", "sum"), first_ns=("send_ns", "min"),
                                                    last_ns=("send_ns", "max")).reset_index())

    def jitter_series(self, _deliveries, t0_ns: int, window_ns: int) -> pd.DataFrame:
        return reference_jitter_series(self.samples, t0_ns, window_ns)

    def latency_series(self, _deliveries, t0_ns: int, window_ns: int) -> pd.DataFrame:
        return reference_latency_series(self.deliveries, t0_ns, window_ns)

    def expected_deliveries(self, spark, sent: DataFrame, subscribers_with_logs: Dict[str, List[str]]) -> DataFrame:
        subs = pd.DataFrame([(f, n) for f, nodes in subscribers_with_logs.items() for n in nodes],
                            columns=["flow", "node"])
        self.expected = self.frames["sent"].merge(subs, on="flow")[["flow", "node", "seq", "send_ns", "priority"]]
        return self.spark.createDataFrame([], "flow string, node string, seq long, send_ns long, priority int")

    def loss_series(self, _marked, t0_ns: int, window_ns: int) -> pd.DataFrame:
        return reference_loss_series(self.expected, self.frames["received"], t0_ns, window_ns)

    def loss_table(self, _series, _received, _sent) -> pd.DataFrame:
        return reference_loss_table(self.expected, self.frames["received"], self.frames["sent"])

    def lost_list(self, _marked) -> DataFrame:
        m = reference_marked(self.expected, self.frames["received"])
        return self.spark.createDataFrame(m[~m["_got"]][["flow", "node", "seq", "send_ns"]].astype(object),
                                          "flow string, node string, seq long, send_ns long")

    def slow_receipts(self, _slow) -> pd.DataFrame:
        """What slow_subscribers computed from the slow subscribers' frame."""
        rows = []
        for (flow, node), r in self.frames["slow_received"].groupby(["flow", "node"]):
            lat = latency._stats((r["recv_ns"] - r["send_ns"]).to_numpy())
            rows.append((flow, node, int(r["seq"].nunique()), lat["p50_ns"], lat["p99_ns"], int(r["recv_ns"].max())))
        return pd.DataFrame(rows, columns=analyze.SLOW_COLUMNS)

