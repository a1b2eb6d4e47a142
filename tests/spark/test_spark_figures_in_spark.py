"""The per-message work moved from the driver into Spark (issue 30) gives the figures the driver's pandas gave.

The first-seen table per message and link direction (``latency.link_first_seen``) stays in Spark; the per-link
transit and per-hop delay percentiles are Spark aggregations of it (``percentile``: exact); the messages' paths
(with receivers, path name, completeness), the paths over time, the path counts, the runs of one path and each
reroute's losses, the offered load and the overloads' scan are computed in Spark too. The reference is the code
path these replaced, kept here as it was on main (fe14c69, 5bd07ad) where it differs: the first-seen table
collected with ``toPandas()`` and the figures computed from it with pandas (the steps that did not move,
``reroutes.path_name``, ``reroutes.reroutes_of_runs`` (the causes), ``onsets._overloads_of`` (the virtual queue),
are called, not copied). It is kept as code rather than as a stored summary.json because a real run's figures
differ from run to run: only the same run analysed both ways can be compared. Both analyses see the same results
folder; every figure of summary.json must be equal (the timings and the verdict, which holds them, apart), and so
must the per-message paths analyze wrote (parquet/message_paths) and the paths over time drawn from them.

The send and receive logs are read by Spark (``spark.trafficlogs``) and every figure of them is computed there
(first receipts, clock correction and RFC 3550 jitter per (flow, subscriber) in a grouped pandas UDF; percentiles,
pooled jitter, series per window, loss, throughput, slow subscribers' figures as Spark aggregations). Their
reference is the pandas path of main at 5bd07ad (tests/spark/pandas_reference.py ``Reference``): the logs read on
the driver with pandas (the problems it reported included), the figures computed from those frames, pooled over
the same flows as build_summary pooled them.

On the 1x synthetic diamond (spark.testing.diamond_run: 60 s, four flows, a reroute, an overload) and on a real
short diamond run (the session's shared one, tests/conftest.py short_diamond_run, on a copy; needs what `testbed
run` needs, skipped otherwise).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import List

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import DataFrame

from pandas_reference import Reference
from router.codec import FRAME_HEADER_SIZE, MESSAGE_HEADER_SIZE
from runfolder.layout import LAYOUT
from spark import analyze, latency, onsets, reroutes
from spark.cli import analyze_command
from spark.storage import ResultsStore
from spark.testing import diamond_run, write_run
from tests.realruns import copy_of, missing


class _Collected(pd.DataFrame):
    """The reference's first-seen table: collected, so there is nothing to unpersist."""

    def unpersist(self) -> "_Collected":
        return self


_LINK_FIRST_SEEN = latency.link_first_seen  # the reference replaces it while it runs


def reference_link_first_seen(observations: DataFrame, flows: DataFrame) -> pd.DataFrame:
    """The same table, collected (what the driver-side path did)."""
    seen = _LINK_FIRST_SEEN(observations, flows)
    collected = _Collected(seen.toPandas())
    seen.unpersist()
    return collected


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


def reference_message_paths(seen: pd.DataFrame, flows: List[dict], received: DataFrame,
                            _store: ResultsStore) -> pd.DataFrame:
    cols = reroutes.PATH_COLUMNS + ["arrivals"]
    s = seen.dropna(subset=["flow"])
    if s.empty:
        return pd.DataFrame(columns=cols)
    s = s.sort_values(["flow", "seq", "ts_ns"], kind="stable")
    s = s.assign(hop=s["src_node"] + ">" + s["dst_node"])
    per = s.groupby(["flow", "seq"], sort=True).agg(hops=("hop", list), first_ns=("ts_ns", "min"),
                                                    last_ns=("last_ns", "max")).reset_index()
    at_node = s["rx_ns"].fillna(s["ts_ns"])
    into = s.assign(_in=at_node).groupby(["flow", "seq", "dst_node"])["_in"].min()
    arrivals: dict = {}
    for (flow, seq, node), ns in into.items():
        arrivals.setdefault((flow, seq), {})[node] = ns
    per["arrivals"] = [arrivals.get((f, q), {}) for f, q in zip(per["flow"], per["seq"])]
    deliveries = received.select("flow", "seq", "node").toPandas()
    rec = deliveries.groupby(["flow", "seq"])["node"].agg(lambda x: sorted(set(x))).rename("receivers").reset_index()
    per = per.merge(rec, on=["flow", "seq"], how="left")
    per["receivers"] = per["receivers"].apply(lambda r: r if isinstance(r, list) else [])
    pub = {f["name"]: f.get("publisher") for f in flows}
    per["publisher"] = per["flow"].map(pub)
    per["path"] = per["hops"].apply(reroutes.path_name)
    per["complete"] = [reroutes._complete(h, p, r) for h, p, r in zip(per["hops"], per["publisher"],
                                                                     per["receivers"])]
    return per.astype({"seq": "int64", "first_ns": "int64", "last_ns": "int64"})[cols]


def reference_offered_load(sent: DataFrame, paths: pd.DataFrame, seen: pd.DataFrame,
                           flows: List[dict]) -> pd.DataFrame:
    """Every message offered to every link direction, with pandas (main 5bd07ad's place_offered)."""
    sent = sent.toPandas()
    cols = ["link", "src_node", "dst_node", "flow", "seq", "arrival_ns", "wire_bytes"]
    into = pd.DataFrame([(f, q, node, ns) for f, q, arrivals in paths[["flow", "seq", "arrivals"]].itertuples(
        index=False, name=None) for node, ns in arrivals.items()], columns=["flow", "seq", "src_node", "seen_in_ns"])
    links = seen.dropna(subset=["link"]).groupby(["src_node", "dst_node"])["link"].first().to_dict()
    if sent.empty or paths.empty or into.empty:
        return pd.DataFrame(columns=cols)
    complete = paths[paths["complete"].astype(bool)][["flow", "seq", "hops"]].sort_values("seq")
    meta = {f["name"]: f for f in flows}
    parts = []
    for flow, msgs in sent.sort_values("seq").groupby("flow", sort=True):
        ref = complete[complete["flow"] == flow]
        if ref.empty:
            continue
        ref = ref.rename(columns={"seq": "ref_seq"})[["ref_seq", "hops"]]
        m = msgs[["flow", "seq", "send_ns", "size"]].copy()
        m["ref_seq"] = m["seq"]
        back = pd.merge_asof(m, ref, on="ref_seq", direction="backward")
        fwd = pd.merge_asof(m, ref, on="ref_seq", direction="forward")
        back["hops"] = back["hops"].where(back["hops"].notna(), fwd["hops"])
        key = str((meta.get(flow) or {}).get("key") or "")
        body = back["size"].fillna(0).to_numpy(dtype="float64") + MESSAGE_HEADER_SIZE + len(key.encode()) \
            + FRAME_HEADER_SIZE
        back["wire_bytes"] = body + onsets.SEGMENT_HEADERS * np.ceil(body / onsets.SEGMENT_PAYLOAD)
        parts.append(back.dropna(subset=["hops"]))
    if not parts:
        return pd.DataFrame(columns=cols)
    per_msg = pd.concat(parts, ignore_index=True).explode("hops")
    per_msg[["src_node", "dst_node"]] = per_msg["hops"].str.split(">", n=1, expand=True)
    into = into.astype({"seq": "int64", "seen_in_ns": "Int64"})
    per_msg["seq"] = per_msg["seq"].astype("int64")
    per_msg["send_ns"] = per_msg["send_ns"].astype("int64")
    per_msg = per_msg.merge(into, on=["flow", "seq", "src_node"], how="left")
    delay = (per_msg["seen_in_ns"] - per_msg["send_ns"]).astype("float64").groupby(
        [per_msg["flow"], per_msg["src_node"]]).median()
    typical = (per_msg.set_index(["flow", "src_node"]).index.map(delay.to_dict()).to_series(index=per_msg.index)
               .fillna(0).round().astype("int64"))
    publisher = per_msg["flow"].map({n: f.get("publisher") for n, f in meta.items()})
    estimate = per_msg["send_ns"] + typical.where(per_msg["src_node"] != publisher, 0)
    per_msg["arrival_ns"] = per_msg["seen_in_ns"].fillna(estimate).astype("int64")
    per_msg["link"] = per_msg.set_index(["src_node", "dst_node"]).index.map(links)
    per_msg = per_msg.dropna(subset=["link"])
    per_msg["link"] = per_msg["link"].astype("int64")
    return per_msg[cols].sort_values(["link", "src_node", "arrival_ns"], kind="stable").reset_index(drop=True)


def reference_find_overloads(offered: pd.DataFrame, capacities, window_ns: int = onsets.ONSET_WINDOW_NS):
    out = []
    for (link, src, dst), g in offered.groupby(["link", "src_node", "dst_node"], sort=True):
        cap = capacities.get((int(link), src, dst))
        if cap is None or all(bps is None for _, bps in cap.steps):
            continue
        out.extend(onsets._overloads_of(int(link), src, dst, g["arrival_ns"].to_numpy(dtype="int64"),
                                        g["wire_bytes"].to_numpy(dtype="float64"), cap, window_ns))
    return sorted(out, key=lambda o: o.onset_ns)


def reference_path_runs(paths: pd.DataFrame, min_run: int = reroutes.MIN_RUN):
    """Per flow, its messages with a complete path as runs of (seq, path, first_ns, last_ns), blips merged."""
    out = {}
    for flow, group in paths[paths["complete"].astype(bool)].groupby("flow", sort=True):
        runs: list = []
        for item in zip(group["seq"].astype(int), group["path"], group["first_ns"].astype(int),
                        group["last_ns"].astype(int)):
            if runs and runs[-1][-1][1] == item[1]:
                runs[-1].append(item)
            else:
                runs.append([item])
        changed = True
        while changed and len(runs) >= 3:
            changed = False
            for i in range(1, len(runs) - 1):
                if len(runs[i]) < min_run and runs[i - 1][0][1] == runs[i + 1][0][1]:
                    runs[i - 1:i + 2] = [runs[i - 1] + runs[i + 1]]
                    changed = True
                    break
        out[str(flow)] = runs
    return out


def reference_flow_paths(paths: pd.DataFrame, min_run: int = reroutes.MIN_RUN):
    return {flow: [{"path": run[0][1], "messages": len(run)} for run in runs]
            for flow, runs in reference_path_runs(paths, min_run).items()}


def reference_detect_reroutes(paths: pd.DataFrame, events, lost: DataFrame, eps=(), overloads=(), link_ends=None,
                              sent: DataFrame = None, min_run: int = reroutes.MIN_RUN,
                              window_ns: int = onsets.ONSET_WINDOW_NS):
    """The reroutes from the per-message runs (the causes found by the same driver code), the losses counted
    with pandas."""
    lost, sent = lost.select("flow", "seq").toPandas(), sent.toPandas()
    item_runs = reference_path_runs(paths, min_run)
    runs = {flow: [reroutes.PathRun(run[0][1], len(run), min(run)[0], min(run)[2], max(run)[0],
                                    max(x[3] for x in run)) for run in flow_runs]
            for flow, flow_runs in item_runs.items()}
    out = reroutes.reroutes_of_runs(runs, events, eps, overloads, link_ends, window_ns)
    for r in out:
        flow_lost = lost[lost["flow"] == r.flow]["seq"]
        flow_sent = sent[sent["flow"] == r.flow].set_index("seq")["send_ns"]
        if r.onset_ns is not None and len(flow_sent):
            from_onset = flow_sent[(flow_sent.index < r.first_new_seq) & (flow_sent >= r.onset_ns)].index
            r.lost = int(flow_lost.isin(from_onset).sum())
        else:
            r.lost = int(((flow_lost > r.last_old_seq) & (flow_lost < r.first_new_seq)).sum())
    return out


def reference_path_series(paths: pd.DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    if paths.empty:
        return pd.DataFrame(columns=["flow", "window", "path", "messages"])
    p = paths[paths["complete"].astype(bool)].copy()
    p["window"] = (p["first_ns"] - t0_ns) // window_ns
    return p.groupby(["flow", "window", "path"]).size().reset_index(name="messages")


def reference_path_totals(paths: pd.DataFrame) -> dict:
    return {"messages_with_path": int(len(paths)),
            "complete": int(paths["complete"].sum()) if not paths.empty else 0}


def reference_receiver_branches(paths: pd.DataFrame) -> pd.DataFrame:
    return paths  # links_toward_subscribers takes the distinct ones itself


def reference_analysis(spark, rd: Path):
    """The driver-side pandas path's analysis, summary.json's figures (as JSON reads them back) and its
    per-message paths."""
    kept = []

    def message_paths(*args) -> pd.DataFrame:
        kept.append(reference_message_paths(*args))
        return kept[-1]

    with pytest.MonkeyPatch.context() as mp:
        Reference(spark).patch(mp)
        mp.setattr(latency, "link_first_seen", reference_link_first_seen)
        mp.setattr(latency, "link_transit", reference_link_transit)
        mp.setattr(latency, "hop_delays", reference_hop_delays)
        mp.setattr(reroutes, "message_paths", message_paths)
        mp.setattr(reroutes, "receiver_branches", reference_receiver_branches)
        mp.setattr(reroutes, "path_totals", reference_path_totals)
        mp.setattr(reroutes, "flow_paths", reference_flow_paths)
        mp.setattr(reroutes, "path_series", reference_path_series)
        mp.setattr(reroutes, "detect_reroutes", reference_detect_reroutes)
        mp.setattr(onsets, "offered_load", reference_offered_load)
        mp.setattr(onsets, "find_overloads", reference_find_overloads)
        a = analyze.analyze_run(spark, ResultsStore(str(rd), spark), 1.0)
    return a, json.loads(json.dumps(analyze.build_summary(a), default=analyze._clean)), kept[0]


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
    reference, summary, paths = reference_analysis(spark, rd)
    assert differences(ours, summary) == []
    # the per-message paths as analyze wrote them (parquet/message_paths), and the paths over time from them
    written = spark.read.parquet(str(rd / LAYOUT.parquet("message_paths")))
    assert _comparable(written.toPandas()) == _comparable(paths)
    series = reroutes.path_series(written, ours["t0_ns"], ours["window_ns"])
    assert len(series) and series.to_dict("records") == reference.path_series.to_dict("records")
    return ours


def _comparable(paths: pd.DataFrame) -> list:
    """One tuple per message, by flow and seq: lists for the arrays, a dict for the arrivals."""
    rows = []
    for r in paths.sort_values(["flow", "seq"]).itertuples(index=False):
        d = r._asdict()
        d["hops"], d["receivers"] = list(d["hops"]), list(d["receivers"])
        d["arrivals"] = {k: int(v) for k, v in dict(d["arrivals"]).items()}
        rows.append(tuple((k, d[k]) for k in reroutes.PATH_COLUMNS + ["arrivals"]))
    return rows


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
