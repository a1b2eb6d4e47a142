"""The whole analysis of one results folder: ingest, latency, drops, reroutes, summary.json, report.html."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from runfolder.layout import LAYOUT
from runfolder.priorities import PRIORITY_LABELS as PRIORITY_NAMES

from . import drops, latency, messagerows, onsets, queries, resources, reroutes
from .clockcorrection import RunClocks, correct_latencies, flow_clock_errors, missing_nodes, read_clocks
from .bounds import lease_ns
from .ingest import Ingested, Problem, ingest
from .lossaccount import LossPart, account_losses
from .routerdriver import Availability, unavailable, unavailable_reason
from .session import frame_to_spark
from .storage import ResultsStore

__all__ = ["Analysis", "analyze_run", "build_summary", "SUMMARY_SCHEMA_ID", "PRIORITY_NAMES", "unavailable",
           "unavailable_reason"]

SUMMARY_SCHEMA_ID = "testbed-summary/6"
#: priority number -> name: the router codec's table, the one spelling of every priority a user reads


REROUTES_SCHEMA = ("flow string, time_ns long, old_path string, new_path string, last_old_seq long, "
                   "first_new_seq long, last_old_ns long, old_path_idle_ns long, lost long, cause string, "
                   "cause_link string, cause_detail string, onset_ns long, detection_ns long, detection_node string, "
                   "detection_event string, reroute_time_ns long, detection_time_ns long, reaction_time_ns long, "
                   "episode int")
OVERLOADS_SCHEMA = ("link int, src_node string, dst_node string, onset_ns long, end_ns long, cause string, "
                    "offered_bps double, capacity_bps double, peak_offered_bps double, busy_start_ns long")


@dataclass
class Analysis:
    """Everything computed from one run (pandas frames are small: aggregates, not messages)."""

    ingested: Ingested
    window_ns: int
    t0_ns: int
    latency: Dict[str, pd.DataFrame]
    jitter: pd.DataFrame          # per (flow, subscriber): the RFC 3550 estimator over the run
    jitter_samples: pd.DataFrame  # the estimator after every packet
    jitter_series: pd.DataFrame   # per flow and window
    latency_series: pd.DataFrame
    link_transit: pd.DataFrame
    hops: pd.DataFrame
    loss: pd.DataFrame
    loss_series: pd.DataFrame
    lost_by_last_seen: pd.DataFrame
    router_drops: pd.DataFrame
    paths: pd.DataFrame
    path_series: pd.DataFrame
    reroutes: List[reroutes.Reroute]
    episodes: List[reroutes.Episode]
    overloads: List[onsets.Overload]
    events: pd.DataFrame
    link_throughput: pd.DataFrame
    throughput: pd.DataFrame
    deliveries: pd.DataFrame      # first receipts; latency_ns corrected by the clocks, raw_latency_ns as logged
    resource_series: pd.DataFrame  # per node and scrape: queued bytes, control bytes, resident memory
    clocks: Optional[RunClocks] = None   # the manifest's clocks (None: not recorded)
    clock_errors: Dict[str, Optional[int]] = field(default_factory=dict)  # flow -> clock_error_ns
    timings: Dict[str, float] = field(default_factory=dict)
    queries: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per query (traffic/query-<flow>.csv)
    query_series: pd.DataFrame = field(default_factory=pd.DataFrame)  # per query flow and window
    query_phases: List[Dict[str, Any]] = field(default_factory=list)  # spans between the scenario's network changes
    loss_parts: List[LossPart] = field(default_factory=list)  # every lost delivery in one part (spark.lossaccount)


class ElapsedLog:
    """Progress lines stamped with the seconds since ``started`` (a ``time.monotonic()``, default now):
    ``[  12.3s] what``; ``last``: the last line's what (the stage in progress)."""

    def __init__(self, out: Callable[[str], None], started: Optional[float] = None):
        self.out = out
        self.t0 = time.monotonic() if started is None else started
        self.last = ""

    def __call__(self, msg: str) -> None:
        self.last = msg
        self.out(f"[{time.monotonic() - self.t0:6.1f}s] {msg}")


def analyze_run(spark: SparkSession, folder: ResultsStore, window_s: float = 1.0,
                progress: Callable[[str], None] = lambda m: None) -> Analysis:
    timings: Dict[str, float] = {}
    t = time.perf_counter()
    ing = ingest(spark, folder, progress)
    timings["ingest"] = time.perf_counter() - t
    window_ns = int(window_s * 1e9)
    t0 = ing.t0_ns or 0

    t = time.perf_counter()
    progress("latency: percentiles, jitter, time series, per-hop delay")
    received = ing.frames["received"]
    clocks, clock_problems = read_clocks(ing.manifest)
    ing.problems.extend(Problem("warning", LAYOUT.manifest, p) for p in clock_problems)
    for node, names in missing_nodes(ing.flows, clocks).items():
        ing.problems.append(Problem("warning", LAYOUT.manifest, f"clocks: no reading for node {node}: the latencies "
                                    f"of {', '.join(sorted(set(names)))} are not corrected and their clock error "
                                    "is unknown"))
    publishers = {f["name"]: f.get("publisher") for f in ing.flows}
    deliveries = correct_latencies(latency.first_deliveries(received), publishers, clocks)
    lat = latency.latency_table(deliveries)
    jit_samples = latency.jitter_samples(deliveries)
    jit = latency.jitter_table(deliveries, jit_samples)
    jit_series = latency.jitter_series(jit_samples, t0, window_ns)
    series = latency.latency_series(deliveries, t0, window_ns)
    obs = ing["observations"]
    rows = messagerows.message_rows(spark, obs, ing.flows, folder, sum(int(c.get("messages") or 0)
                                                                     for c in ing.captures))
    try:  # the messages' rows are held in Spark: released however this ends (the session is shared)
        transit, hops, link_of = latency.link_delays(rows.delays)
        timings["latency"] = time.perf_counter() - t

        t = time.perf_counter()
        progress("drops: loss per flow and window, duplicates, reordering, last link seen, router drops")
        # a subscriber whose receive log is missing or empty is left out (reported by ingest), not counted as loss
        problem_files = {p.file for p in ing.problems if p.severity == "error"}
        subs_with_logs = {f["name"]: [s for s in f.get("subscribers") or []
                                      if LAYOUT.recv_log(f["name"], s) not in problem_files]
                          for f in ing.flows if LAYOUT.send_log(f["name"]) not in problem_files}
        sent = ing.frames["sent"]
        expected = drops.expected_deliveries(sent, subs_with_logs)
        loss = drops.loss_table(expected, received, sent)
        loss_ser = drops.loss_series(expected, received, t0, window_ns)
        lost_pdf = drops.lost_list(expected, received)
        paths, arrivals = reroutes.message_paths(rows.paths, ing.flows, deliveries)
        toward = drops.links_toward_subscribers(paths)
        lost_seen = folder.collect_through_parquet(drops.lost_messages(spark, lost_pdf, obs, ing["flows"], toward),
                                                   LAYOUT.parquet("lost_messages"))
        lost_by = (lost_seen.assign(last_seen=lost_seen["last_seen"].where(lost_seen["last_seen"].notna(), None))
                   .groupby(["flow", "node", "last_seen"], dropna=False).size().reset_index(name="count")
                   .sort_values(["flow", "node", "count"], ascending=[True, True, False]))
        rdrops = drops.router_drops(ing.frames["metrics"])
        timings["drops"] = time.perf_counter() - t

        t = time.perf_counter()
        progress("reroutes: paths over time, overloads, path changes, onset/detection/reaction, episodes")
        events = ing.frames["events"]
        end_ns = (ing.manifest or {}).get("ended_ns")
        eps = reroutes.episodes(events, end_ns)
        capacities = onsets.link_capacities(ing.lab, ing.manifest, events)
        offered = onsets.place_offered(sent, paths, arrivals, link_of, ing.flows)
        overloads = onsets.find_overloads(offered, capacities)
        link_ends = {int(l["index"]): (l["a"]["node"], l["b"]["node"]) for l in (ing.lab or {}).get("links") or []
                     if isinstance(l, dict) and "index" in l and "a" in l and "b" in l}
        rr = reroutes.detect_reroutes(paths, events, lost_pdf, eps, overloads, link_ends, sent)
        loss_parts = account_losses(lost_seen, events, None if availability(ing).reason("metrics") else rdrops,
                                    link_ends, lease_ns(ing.manifest),
                                    int(end_ns or (sent["send_ns"].max() if len(sent) else 0)),
                                    publishers)
        pser = reroutes.path_series(paths, t0, window_ns)
        if not paths.empty and not folder.write_frame(LAYOUT.parquet("message_paths"), paths, reroutes.PATH_SCHEMA):
            frame_to_spark(spark, paths, reroutes.PATH_SCHEMA).write.mode("overwrite").parquet(
                folder.uri(LAYOUT.parquet("message_paths")))
        for name, schema, items in (("reroutes", REROUTES_SCHEMA, rr), ("overloads", OVERLOADS_SCHEMA, overloads)):
            frame_to_spark(spark, pd.DataFrame([i.as_dict() for i in items], dtype=object), schema).write.mode(
                "overwrite").parquet(folder.uri(LAYOUT.parquet(name)))
    finally:
        rows.release()
    timings["reroutes"] = time.perf_counter() - t

    t = time.perf_counter()
    lt = (ing["link_traffic"].where(F.col("side").isin("tx", "unknown") | F.col("side").isNull())
          .groupBy("link", "src_node", "dst_node", "second_ns").agg(F.sum("bytes").alias("bytes"))
          .toPandas().sort_values(["link", "src_node", "second_ns"]).reset_index(drop=True))
    thr = (deliveries.groupby("flow").agg(bytes=("size", "sum"), first_ns=("send_ns", "min"),
                                          last_ns=("send_ns", "max")).reset_index())
    timings["throughput"] = time.perf_counter() - t
    rseries = resources.node_series(ing.frames["metrics"])
    qlog = ing.frames.get("queries")
    qlog = qlog if qlog is not None else pd.DataFrame()
    if ing.query_flows:
        progress("queries: completion, outcomes, failovers, serving routers, per phase")
    return Analysis(ing, window_ns, t0, lat, jit, jit_samples, jit_series, series, transit, hops, loss, loss_ser,
                    lost_by, rdrops, paths, pser, rr, eps, overloads, events, lt, thr, deliveries, rseries, clocks,
                    flow_clock_errors(ing.flows, clocks), timings, qlog,
                    queries.query_series(qlog, t0, window_ns) if len(qlog) else pd.DataFrame(),
                    queries.phases(events, t0, end_ns), loss_parts)


# ---------------------------------------------------------------- summary.json


def _clean(v: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN to null."""
    if v is None:
        return None
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        v = v.item()
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


def _lat(row, clock_error_ns: Optional[int]) -> dict:
    keys = ["messages", "min_ns", "mean_ns", "p50_ns", "p95_ns", "p99_ns", "p999_ns", "max_ns"]
    out = {k: _clean(row[k]) for k in keys}
    out["messages"] = int(out["messages"] or 0)
    out["clock_error_ns"] = clock_error_ns
    return out


def _clock_error(errors: Dict[str, Optional[int]], flows: List[str]) -> Optional[int]:
    """The clock error bound of figures pooled over these flows: the largest of theirs (None if one is unknown)."""
    values = [errors.get(f) for f in flows]
    return None if not values or any(v is None for v in values) else max(values)


def _metrics_unnamed(metrics: pd.DataFrame) -> bool:
    """The routers' metrics were scraped but carry none of the names the router figures are read under
    (docs/metrics.md: drop counters, queued bytes, memory): another router's own names. Those figures are
    then not available, never 0. (No successful scrape at all is reported by ingest, as before.)"""
    if metrics is None or metrics.empty:
        return False
    ok = metrics[metrics["ok"].astype(bool)]
    return not ok.empty and not ok["metric"].isin(TESTBED_METRIC_NAMES).any()


#: the metric names summary.json's router figures are read under (router_drops, resources)
TESTBED_METRIC_NAMES = sorted(set(drops.DROP_METRICS) | set(resources.NODE_METRICS))


def availability(ing: Ingested) -> Availability:
    """What of the router's own figures the run gives: its driver's, less metrics under other names."""
    return Availability(ing.router_driver, _metrics_unnamed(ing.frames.get("metrics")))


def _router_section(ing: Ingested, available: Availability) -> dict:
    drv = ing.router_driver

    def part(what: str) -> dict:
        reason = available.reason(what)
        return {"available": reason is None, "reason": reason}

    return {"driver": drv.name, "wire": drv.wire, "client": drv.client, "recorded": drv.recorded,
            "metrics": part("metrics"), "events": part("events"), "admin": drv.admin,
            "observations": drv.observation_method}


def _header_search(captures: List[dict]) -> Optional[dict]:
    """The header search's counts over every capture (None when the captures were decoded as our frames)."""
    searched = [c for c in captures if c.get("method") == "header-search"]
    if not searched:
        return None
    keys = {"headers_found": "headers_found", "validated": "headers_validated", "rejected": "headers_rejected",
            "rejected_unknown_flow": "rejected_unknown_flow", "rejected_not_sent": "rejected_not_sent",
            "no_send_log": "headers_no_send_log", "in_holes": "headers_in_holes", "unfinished": "headers_unfinished"}
    return {k: int(sum(c.get(v) or 0 for c in searched)) for k, v in keys.items()}


def build_summary(a: Analysis) -> dict:
    ing = a.ingested
    man = ing.manifest or {}
    drv = ing.router_driver
    available = availability(ing)
    no_metrics, no_events = available.reason("metrics"), available.reason("events")
    flows_meta = {f["name"]: f for f in ing.flows}
    lat_flow = {r["flow"]: r for _, r in a.latency["flow"].iterrows()}
    lat_prio = {int(r["priority"]): r for _, r in a.latency["priority"].iterrows()}
    loss = {r["flow"]: r for _, r in a.loss.iterrows()}
    jit_samples = a.jitter_samples

    def jitter(flows_: List[str]) -> Optional[dict]:
        """The RFC 3550 estimator over the run, pooled over the subscribers of these flows."""
        s = jit_samples[jit_samples["flow"].isin(flows_)]
        return {k: _clean(v) for k, v in latency.jitter_stats(s).items()} if len(s) else None

    thr = {r["flow"]: r for _, r in a.throughput.iterrows()}
    rr_count: Dict[str, int] = {}
    for r in a.reroutes:
        rr_count[r.flow] = rr_count.get(r.flow, 0) + 1

    def counts(rows: List[dict]) -> dict:
        sent = sum(r.get("sent") or 0 for r in rows)
        exp = sum(r.get("expected") or 0 for r in rows)
        dl = sum(r.get("delivered") or 0 for r in rows)
        return {"sent": sent, "expected": exp, "delivered": dl, "lost": exp - dl,
                "loss_pct": 100.0 * (exp - dl) / exp if exp else None,
                "delivery_pct": 100.0 * dl / exp if exp else None,
                "duplicates": sum(r.get("duplicates") or 0 for r in rows),
                "reordered": sum(r.get("reordered") or 0 for r in rows)}

    taken = reroutes.flow_paths(a.paths)
    flows = []
    for name in sorted(flows_meta):
        meta = flows_meta[name]
        prio = int(meta.get("priority", 5))
        lr = loss.get(name)
        c = counts([{k: _clean(lr[k]) for k in ("sent", "expected", "delivered", "duplicates", "reordered")}]
                   if lr is not None else [])
        tr = thr.get(name)
        tput = None
        if tr is not None and _clean(tr["last_ns"]) and tr["last_ns"] > tr["first_ns"]:
            tput = float(tr["bytes"]) * 8e9 / float(tr["last_ns"] - tr["first_ns"])
        flows.append({
            "flow": name, "flow_id": int(meta["flow_id"]), "priority": prio, "priority_name": PRIORITY_NAMES[prio],
            "publisher": meta.get("publisher"), "subscribers": list(meta.get("subscribers") or []),
            **c,
            "latency": _lat(lat_flow[name], a.clock_errors.get(name)) if name in lat_flow else None,
            "jitter": jitter([name]),
            "throughput_bps": tput,
            "reroutes": rr_count.get(name, 0),
            "paths": taken.get(name, []),
            "slow_subscribers": slow_subscribers(meta, ing.frames.get("slow_received"), c["sent"], a.t0_ns),
        })
    priorities = []
    for prio in sorted({f["priority"] for f in flows}):
        members = [f for f in flows if f["priority"] == prio]
        priorities.append({"priority": prio, "priority_name": PRIORITY_NAMES[prio],
                           "flows": [f["flow"] for f in members], **counts(members),
                           "latency": _lat(lat_prio[prio], _clock_error(
                               a.clock_errors, [f["flow"] for f in members if f["latency"]]))
                           if prio in lat_prio else None,
                           "jitter": jitter([f["flow"] for f in members]),
                           "throughput_bps": sum(f["throughput_bps"] or 0 for f in members),
                           "reroutes": sum(f["reroutes"] for f in members)})
    all_lat = a.latency["all"]
    overall = {**counts(flows), "latency": _lat(all_lat.iloc[0], _clock_error(
                   a.clock_errors, [f["flow"] for f in flows if f["latency"]])) if not all_lat.empty else None,
               "jitter": jitter([f["flow"] for f in flows]),
               "throughput_bps": sum(f["throughput_bps"] or 0 for f in flows),
               "reroutes": len(a.reroutes)}
    # a traffic entry that makes several flows (zpub: <name>.pub1, .pub2, .realtime) can be named in
    # expectations by its own name: the group's figures are those of its flows together
    groups: Dict[str, List[dict]] = {}
    for f in flows:
        if "." in f["flow"]:
            groups.setdefault(f["flow"].rsplit(".", 1)[0], []).append(f)
    flow_groups = []
    for name, members in sorted(groups.items()):
        if name in flows_meta:
            continue
        names = [f["flow"] for f in members]
        d = a.deliveries[a.deliveries["flow"].isin(names)]
        flow_groups.append({"flow": name, "flows": names, **counts(members),
                            "latency": _lat(latency._stats(d["latency_ns"].to_numpy()), _clock_error(
                                a.clock_errors, [f["flow"] for f in members if f["latency"]])) if len(d) else None,
                            "jitter": jitter(names),
                            "throughput_bps": sum(f["throughput_bps"] or 0 for f in members),
                            "reroutes": sum(f["reroutes"] for f in members)})

    links = []
    for _, r in a.link_transit.iterrows():
        links.append({"link": int(r["link"]), "src_node": r["src_node"], "dst_node": r["dst_node"],
                      "messages": int(r["messages"]), "transit_p50_ns": _clean(r["p50_ns"]),
                      "transit_p99_ns": _clean(r["p99_ns"]), "transit_max_ns": _clean(r["max_ns"])})
    link_bytes = []
    if not a.link_throughput.empty:
        for (lk, s, d), g in a.link_throughput.groupby(["link", "src_node", "dst_node"], dropna=False):
            link_bytes.append({"link": _clean(lk), "src_node": s if isinstance(s, str) else None,
                               "dst_node": d if isinstance(d, str) else None, "bytes": int(g["bytes"].sum()),
                               "peak_bps": float(g["bytes"].max() * 8), "seconds": int(len(g))})
    episodes = []
    for ep in a.episodes:
        per_flow: Dict[str, int] = {}
        for r in a.reroutes:
            if r.episode == ep.index:
                per_flow[r.flow] = per_flow.get(r.flow, 0) + 1
        episodes.append({"index": ep.index, "start_ns": ep.start_ns, "end_ns": ep.end_ns, "opened_by": ep.opened_by,
                         "closed_by": ep.closed_by, "reroutes": per_flow})
    caps = [{k: _clean(c.get(k)) for k in ("capture", "node", "ifname", "link", "packets", "messages",
                                           "messages_hidden", "retransmitted_segments", "out_of_order_segments",
                                           "gap_bytes", "snap_truncated_bytes", "codec_errors", "truncated_file",
                                           "error", "packets_dropped_by_kernel", "method", "headers_found",
                                           "headers_validated", "headers_rejected", "headers_unfinished")}
            for c in ing.captures]
    return {
        "schema": SUMMARY_SCHEMA_ID,
        "run_id": man.get("run_id"),
        "run_status": man.get("status"),
        "t0_ns": a.t0_ns,
        "window_ns": a.window_ns,
        "input": {"problems": [p.__dict__ for p in ing.problems], "captures": caps},
        "clocks": a.clocks.summary() if a.clocks is not None else None,
        "router": _router_section(ing, available),
        "overall": overall,
        "flows": flows,
        "priorities": priorities,
        "flow_groups": flow_groups,
        "jitter_series": [{"flow": r["flow"], "window": int(r["window"]), "jitter_ns": _clean(r["jitter_ns"]),
                           "max_ns": _clean(r["max_ns"])} for _, r in a.jitter_series.iterrows()],
        "loss_accounting": {"lost": overall["lost"], "accounted": sum(p.lost for p in a.loss_parts),
                            "parts": [p.as_dict() for p in a.loss_parts]},
        "lost_by_last_seen": [{"flow": r["flow"], "node": r["node"],
                               "last_seen": r["last_seen"] if isinstance(r["last_seen"], str) else None,
                               "count": int(r["count"])} for _, r in a.lost_by_last_seen.iterrows()],
        "router_drops": unavailable(no_metrics) if no_metrics else [
            {"node": r["node"], "priority_name": r["priority_name"], "reason": r["reason"],
             "dropped": float(r["dropped"])} for _, r in a.router_drops.iterrows()],
        "resources": resources.summary(a.resource_series, a.events, a.t0_ns, available),
        "links": links,
        "link_traffic": link_bytes,
        "hops": [{"flow": r["flow"], "from_node": r["from_node"], "via_node": r["via_node"], "to_node": r["to_node"],
                  "messages": int(r["messages"]), "p50_ns": _clean(r["p50_ns"]), "p99_ns": _clean(r["p99_ns"]),
                  "max_ns": _clean(r["max_ns"])} for _, r in a.hops.iterrows()],
        "reroutes": [{k: _clean(v) for k, v in r.as_dict().items()} for r in a.reroutes],
        "overloads": [{k: _clean(v) for k, v in o.as_dict().items()} for o in a.overloads],
        "episodes": unavailable(no_events) if no_events else episodes,
        "queries": queries.query_summary(a.queries, ing.query_flows, a.query_phases) if ing.query_flows else None,
        "paths": {"messages_with_path": int(len(a.paths)),
                  "complete": int(a.paths["complete"].sum()) if not a.paths.empty else 0,
                  "method": drv.observation_method, "header_search": _header_search(ing.captures)},
    }


def slow_subscribers(flow: dict, received: Optional[pd.DataFrame], sent: int, t0_ns: int) -> List[dict]:
    """What each slow subscriber of ``flow`` (flows.json ``slow_subscribers``) received: kept apart from
    the flow's own figures, which are those of its ordinary subscribers."""
    out = []
    for s in flow.get("slow_subscribers") or []:
        r = received[(received["flow"] == flow["name"]) & (received["node"] == s["label"])] \
            if received is not None and len(received) else None
        got = int(r["seq"].nunique()) if r is not None else 0
        lat = latency._stats((r["recv_ns"] - r["send_ns"]).to_numpy()) if r is not None and got else {}
        out.append({"label": s["label"], "node": s["node"], "read_rate_bps": s.get("read_rate_bps"),
                    "from_ns": s.get("from_ns"), "received": got,
                    "delivery_pct": 100.0 * got / sent if sent else None,
                    "latency_p50_ns": lat.get("p50_ns"), "latency_p99_ns": lat.get("p99_ns"),
                    "last_recv_s": (int(r["recv_ns"].max()) - t0_ns) / 1e9 if r is not None and got else None})
    return out


def write_json(folder: ResultsStore, rel: str, data: dict) -> None:
    folder.write_text(rel, json.dumps(data, indent=1, sort_keys=False, default=_clean) + "\n")
