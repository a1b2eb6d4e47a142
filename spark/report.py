"""report.html: one self-contained file (plots are inline PNG, the topology inline SVG; no external URL)."""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from . import queries  # noqa: E402
from .analyze import PRIORITY_NAMES, Analysis  # noqa: E402
from .bounds import CLOCK_CHECK_WHY, failure_detection_bound  # noqa: E402
from .htmlpage import PLOT_CHECK_SCRIPT, escape, png  # noqa: E402
from .expectations import CLOCK_METRIC  # noqa: E402
from .routerdriver import unavailable_reason  # noqa: E402
from .verdict import VERDICT_CSS, verdict_banner  # noqa: E402

__all__ = ["render_report", "PLOT_IDS"]

#: ids of the plots every report has (each is an <img class="plot"> or <svg class="plot">)
PLOT_IDS = ["topology", "latency-cdf", "latency-series", "jitter-series", "link-throughput", "drops-series",
            "resources", "reroute-timeline"]

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ccc;padding-bottom:.2em}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}.pass{color:#176f2c;font-weight:600}.fail{color:#b00020;font-weight:600}
.warn{color:#8a5a00}.err{color:#b00020}img.plot{max-width:100%;display:block;margin:.5em 0}.note{color:#555;font-size:.9em}
"""



def _ms(ns) -> str:
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "–"
    return f"{ns / 1e6:.3f}"


def _secs(ns, t0: int):
    return (np.asarray(ns, dtype="float64") - t0) / 1e9


def _mark_events(ax, a: Analysis) -> None:
    ev = a.events
    if ev is None or ev.empty:
        return
    for ep in a.episodes:
        end = ep.end_ns if ep.end_ns is not None else (a.ingested.manifest or {}).get("ended_ns") or ep.start_ns
        ax.axvspan((ep.start_ns - a.t0_ns) / 1e9, (end - a.t0_ns) / 1e9, color="orange", alpha=0.12, lw=0)
    lo, hi = ax.get_xlim()
    for _, e in ev.iterrows():
        if e["source"] == "scenario":
            color, style = "red", "--"
        elif e["event"] in ("congestion_detected", "congestion_cleared", "weight_changed", "link_down", "link_up",
                            "link_closed"):
            color, style = "darkorange", ":"
        else:
            continue
        x = (e["ts_ns"] - a.t0_ns) / 1e9
        if lo <= x <= hi:
            ax.axvline(x, color=color, ls=style, lw=1)
            ax.annotate(e["event"], (x, 1), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        va="top", ha="right", color=color)


def _topology_svg(a: Analysis, summary: dict) -> str:
    lab = a.ingested.lab or {}
    nodes = list((lab.get("nodes") or {}).keys())
    links = lab.get("links") or []
    w, h, r = 640, 420, 150
    if not nodes:
        return ('<svg class="plot" id="topology" xmlns="http://www.w3.org/2000/svg" width="400" height="60">'
                '<text x="10" y="30">lab.json missing: no topology to draw</text></svg>')
    pos = {}
    nodes = _ring_order(nodes, [(l["a"]["node"], l["b"]["node"]) for l in links])
    for i, n in enumerate(nodes):
        ang = 2 * math.pi * i / len(nodes) + math.pi
        pos[n] = (w / 2 + r * 1.6 * math.cos(ang), h / 2 + r * math.sin(ang))
    traffic = {(t["link"]): 0 for t in summary.get("link_traffic", [])}
    for t in summary.get("link_traffic", []):
        traffic[t["link"]] = traffic.get(t["link"], 0) + t["bytes"]
    parts = [f'<svg class="plot" id="topology" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">']
    for link in links:
        a_n, b_n = link["a"]["node"], link["b"]["node"]
        if a_n not in pos or b_n not in pos:
            continue
        (x1, y1), (x2, y2) = pos[a_n], pos[b_n]
        mb = traffic.get(link["index"], 0) / 1e6
        parts.append(f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" stroke="#557" '
                     f'stroke-width="{1.5 + min(6.0, mb / 20):.1f}"/>')
        parts.append(f'<text x="{(x1 + x2) / 2:.0f}" y="{(y1 + y2) / 2 - 6:.0f}" text-anchor="middle" fill="#333">'
                     f'#{link["index"]} w{link.get("weight")} {mb:.1f} MB</text>')
        for end, (x, y), (ox, oy) in ((link["a"], (x1, y1), (x2, y2)), (link["b"], (x2, y2), (x1, y1))):
            tx, ty = x + (ox - x) * 0.22, y + (oy - y) * 0.22
            parts.append(f'<text x="{tx:.0f}" y="{ty + 14:.0f}" text-anchor="middle" fill="#777" font-size="10">'
                         f'{escape(end["ifname"])}</text>')
    for n, (x, y) in pos.items():
        parts.append(f'<circle cx="{x:.0f}" cy="{y:.0f}" r="22" fill="#dde8f7" stroke="#335"/>'
                     f'<text x="{x:.0f}" y="{y + 4:.0f}" text-anchor="middle" font-weight="bold">{escape(n)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _ring_order(nodes: List[str], edges: List[tuple]) -> List[str]:
    """Nodes in depth-first order (neighbours by name), so rings and diamonds go round the circle uncrossed."""
    adj: Dict[str, List[str]] = {n: [] for n in nodes}
    for a, b in edges:
        if a in adj and b in adj:
            adj[a].append(b)
            adj[b].append(a)
    order: List[str] = []
    seen = set()
    for start in sorted(nodes):
        stack = [start]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            order.append(n)
            stack.extend(sorted(adj[n], reverse=True))
    return order


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#777")


def _latency_cdf(a: Analysis, cdf: Dict[int, np.ndarray]) -> str:
    fig, ax = plt.subplots(figsize=(9, 4))
    for prio, values in sorted(cdf.items()):
        v = np.sort(values) / 1e6
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=PRIORITY_NAMES[prio])
    if not cdf:
        _empty(ax, "no message received")
    else:
        ax.set_xscale("log")
        ax.legend(title="priority")
    ax.set_xlabel("one-way latency (ms, log scale)")
    ax.set_ylabel("fraction of messages")
    ax.grid(alpha=0.3)
    return png(fig, "latency-cdf", "latency CDF per priority")


def _latency_series(a: Analysis) -> str:
    fig, ax = plt.subplots(figsize=(11, 4))
    s = a.latency_series
    if s.empty:
        _empty(ax, "no message received")
    else:
        w = a.window_ns / 1e9
        for prio, g in s.groupby("priority"):
            agg = g.groupby("window").agg(p99=("p99_ns", "max"), p50=("p50_ns", "median")).reset_index()
            x = agg["window"] * w
            line, = ax.plot(x, agg["p99"] / 1e6, label=f"{PRIORITY_NAMES[prio]} p99")
            ax.plot(x, agg["p50"] / 1e6, ls="--", color=line.get_color(), alpha=0.6, label=f"{PRIORITY_NAMES[prio]} p50")
        ax.set_yscale("log")
        ax.legend(fontsize=8, ncol=2)
        _mark_events(ax, a)
    ax.set_xlabel("time since traffic start (s)")
    ax.set_ylabel("latency per window (ms)")
    ax.grid(alpha=0.3)
    return png(fig, "latency-series", "latency time series per priority with events")


def _jitter_series(a: Analysis) -> str:
    fig, ax = plt.subplots(figsize=(11, 3.5))
    s = a.jitter_series
    if s.empty:
        _empty(ax, "fewer than two messages received per subscriber")
    else:
        w = a.window_ns / 1e9
        for flow, g in s.groupby("flow"):
            line, = ax.plot((g["window"] + 1) * w, g["jitter_ns"] / 1e6, label=flow, drawstyle="steps-pre")
            ax.plot((g["window"] + 0.5) * w, g["max_ns"] / 1e6, ".", color=line.get_color(), alpha=0.6)
        ax.legend(fontsize=8, ncol=2)
        _mark_events(ax, a)
    ax.set_xlabel("receive time since traffic start (s)")
    ax.set_ylabel("RFC 3550 jitter (ms)")
    ax.grid(alpha=0.3)
    return png(fig, "jitter-series", "RFC 3550 jitter per flow over time")


def _link_throughput(a: Analysis) -> str:
    fig, ax = plt.subplots(figsize=(11, 4))
    lt = a.link_throughput
    if lt.empty:
        _empty(ax, "no pcap traffic")
    else:
        for (lk, s, d), g in lt.groupby(["link", "src_node", "dst_node"], dropna=False):
            ax.plot(_secs(g["second_ns"], a.t0_ns), g["bytes"] * 8 / 1e6, label=f"#{lk} {s}>{d}", drawstyle="steps-post")
        ax.legend(fontsize=8, ncol=2)
        _mark_events(ax, a)
    ax.set_xlabel("time since traffic start (s)")
    ax.set_ylabel("Mbit/s on the wire")
    ax.grid(alpha=0.3)
    return png(fig, "link-throughput", "throughput per link direction")


def _drops_series(a: Analysis) -> str:
    fig, ax = plt.subplots(figsize=(11, 3.5))
    s = a.loss_series
    if s.empty or s["lost"].sum() == 0:
        _empty(ax, "no message lost")
        if not s.empty:
            ax.set_xlim(s["window"].min() * a.window_ns / 1e9, (s["window"].max() + 1) * a.window_ns / 1e9)
    else:
        w = a.window_ns / 1e9
        flows = sorted(s["flow"].unique())
        bottom = None
        windows = np.arange(s["window"].min(), s["window"].max() + 1)
        for f in flows:
            g = s[s["flow"] == f].set_index("window")["lost"].reindex(windows, fill_value=0)
            ax.bar(windows * w, g.values, width=w, align="edge", bottom=bottom, label=f)
            bottom = g.values if bottom is None else bottom + g.values
        ax.legend(fontsize=8)
    _mark_events(ax, a)
    ax.set_xlabel("send time since traffic start (s)")
    ax.set_ylabel("messages lost per window")
    ax.grid(alpha=0.3)
    return png(fig, "drops-series", "drops per window")


def _reroute_timeline(a: Analysis) -> str:
    ps = a.path_series
    flows = sorted(ps["flow"].unique()) if not ps.empty else []
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.6 * max(1, len(flows))))
    if not flows:
        _empty(ax, "no complete message path in the captures")
    else:
        paths = sorted(ps["path"].unique())
        colors = {p: plt.cm.tab10(i % 10) for i, p in enumerate(paths)}
        w = a.window_ns / 1e9
        for y, f in enumerate(flows):
            g = ps[ps["flow"] == f]
            dom = g.sort_values("messages").groupby("window").tail(1)
            for _, r in dom.iterrows():
                ax.broken_barh([(r["window"] * w, w)], (y - 0.35, 0.7), color=colors[r["path"]])
        for r in a.reroutes:
            if r.flow in flows:
                y = flows.index(r.flow)
                x = (r.time_ns - a.t0_ns) / 1e9
                ax.plot([x], [y], marker="v", color="black")
                det = None if r.detection_ns is None else (r.detection_ns - a.t0_ns) / 1e9
                if r.onset_ns is not None:
                    onset = (r.onset_ns - a.t0_ns) / 1e9
                    ax.plot([onset], [y + 0.4], marker="^", color="darkred")
                    ax.plot([onset, det if det is not None else x], [y + 0.4, y + 0.4], color="darkorange", lw=2)
                if det is not None:
                    ax.plot([det, x], [y + 0.4, y + 0.4], color="red", lw=2)
        ax.set_yticks(range(len(flows)))
        ax.set_yticklabels(flows)
        handles = [plt.Rectangle((0, 0), 1, 1, color=colors[p]) for p in paths]
        ax.legend(handles, paths, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        _mark_events(ax, a)
    ax.set_xlabel("time since traffic start (s)  (▲ onset; orange: onset to detection; red: detection to first "
                  "message on the new path ▼)")
    return png(fig, "reroute-timeline", "path of every flow over time with reroutes")


def _table(headers: List[str], rows: List[List], left: int = 1) -> str:
    out = ["<table><tr>"] + [f'<th class="{"l" if i < left else ""}">{escape(h)}</th>' for i, h in enumerate(headers)]
    out.append("</tr>")
    for row in rows:
        out.append("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{c if isinstance(c, _Raw) else escape(c)}</td>'
                                    for i, c in enumerate(row)) + "</tr>")
    out.append("</table>")
    return "".join(out)


class _Raw(str):
    pass


def render_report(a: Analysis, summary: dict, verdicts: Optional[list] = None,
                  latency_samples: Optional[Dict[int, np.ndarray]] = None) -> str:
    """The report as one HTML string. ``latency_samples``: priority -> latencies (ns) for the CDF."""
    if latency_samples is None:
        latency_samples = _latency_samples(a)
    run = summary.get("run_id") or "run"
    o = summary["overall"]
    # the verdict before anything else (spark/verdict.py)
    body: List[str] = [verdict_banner(verdicts, (summary.get("verdict") or {}).get("reason") or ""),
                       f"<h1>testbed report: {escape(run)}</h1>",
                       f'<p class="note">run status: {escape(summary.get("run_status"))}; times are seconds since traffic '
                       f'start; {o["sent"]} messages sent, {o["delivered"]} of {o["expected"]} deliveries made, '
                       f'{o["reroutes"]} reroutes.</p>', _router_note(summary)]
    if verdicts is not None:
        body.append("<h2>Expectations</h2>")
        if not any(v.metric != CLOCK_METRIC for v in verdicts):
            body.append("<p>No expectations in the topology.</p>")
        if verdicts:
            body.append(_table(["expectation", "verdict", "measured"], [
                [_with_bound(v.expectation, CLOCK_CHECK_WHY if v.metric == CLOCK_METRIC else None),
                 _Raw(_verdict_cell(v)), v.message.split(": ", 1)[-1]] for v in verdicts], left=3))
    probs = summary["input"]["problems"]
    body.append("<h2>Input</h2>")
    if probs:
        body.append("<ul>" + "".join(f'<li class="{"err" if p["severity"] == "error" else "warn"}">{escape(p["severity"])}: '
                                     f'{escape(p["file"])}: {escape(p["problem"])}</li>' for p in probs) + "</ul>")
    else:
        body.append("<p>Every file was read completely.</p>")
    if (summary.get("paths") or {}).get("header_search") is not None:
        body.append(_table(["capture", "packets", "headers found", "validated", "observed (messages)",
                            "unfinished", "rejected", "retransmitted", "out of order", "truncated"],
                           [[c["capture"], c["packets"], c.get("headers_found"), c.get("headers_validated"),
                             c["messages"], c.get("headers_unfinished"), c.get("headers_rejected"),
                             c["retransmitted_segments"], c["out_of_order_segments"],
                             "yes" if c["truncated_file"] else ""] for c in summary["input"]["captures"]]))
    else:
        body.append(_table(["capture", "packets", "messages", "hidden", "retransmitted", "out of order", "truncated"],
                           [[c["capture"], c["packets"], c["messages"], c["messages_hidden"],
                             c["retransmitted_segments"], c["out_of_order_segments"],
                             "yes" if c["truncated_file"] else ""] for c in summary["input"]["captures"]]))
    body.append("<h2>Topology</h2>" + _topology_svg(a, summary))
    body.append(_clocks_section(summary))
    body.append(_link_verification_section((a.ingested.manifest or {}).get("link_verification")))
    # where the nodes' clocks were measured, every latency figure is ± the flow's clock error
    clocked = bool((summary.get("clocks") or {}).get("measured"))
    clock_col = ["clock error ± ms"] if clocked else []

    def clock_cell(lat) -> list:
        if not clocked:
            return []
        err = (lat or {}).get("clock_error_ns")
        return ["–" if not lat else "unknown" if err is None else f"±{_ms(err)}"]

    body.append("<h2>Flows</h2>")
    body.append(_table(
        ["flow", "priority", "sent", "delivered", "lost %", "dup", "reord", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms",
         "max ms", *clock_col, "jitter p50 ms", "jitter p99 ms", "jitter max ms", "reroutes"],
        [[f["flow"], f["priority_name"], f["sent"], f"{f['delivered']}/{f['expected']}",
          "–" if f["loss_pct"] is None else f"{f['loss_pct']:.3f}", f["duplicates"], f["reordered"],
          *[_ms((f["latency"] or {}).get(k)) for k in ("p50_ns", "p95_ns", "p99_ns", "p999_ns", "max_ns")],
          *clock_cell(f["latency"]),
          *[_ms((f["jitter"] or {}).get(k)) for k in ("p50_ns", "p99_ns", "max_ns")], f["reroutes"]]
         for f in summary["flows"]], left=2))
    slow = [(f["flow"], s) for f in summary["flows"] for s in f.get("slow_subscribers") or []]
    if slow:
        body.append("<h3>Slow subscribers (apart from their flow's figures above)</h3>")
        body.append(_table(["flow", "subscriber", "node", "reads", "received", "of sent %", "p50 ms", "p99 ms",
                            "last received s"],
                           [[flow, s["label"], s["node"],
                             "nothing" if not s["read_rate_bps"] else f"{s['read_rate_bps'] / 1e3:g} kbit/s",
                             s["received"], "–" if s["delivery_pct"] is None else f"{s['delivery_pct']:.1f}",
                             _ms(s["latency_p50_ns"]), _ms(s["latency_p99_ns"]),
                             "–" if s["last_recv_s"] is None else f"{s['last_recv_s']:.3f}"] for flow, s in slow],
                           left=4))
    body.append("<h2>Latency</h2>")
    body.append(_table(["priority", "messages", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms", *clock_col,
                        "jitter p50 ms", "jitter p99 ms", "jitter max ms"],
                       [[p["priority_name"], (p["latency"] or {}).get("messages"),
                         *[_ms((p["latency"] or {}).get(k)) for k in ("p50_ns", "p95_ns", "p99_ns", "p999_ns", "max_ns")],
                         *clock_cell(p["latency"]),
                         *[_ms((p["jitter"] or {}).get(k)) for k in ("p50_ns", "p99_ns", "max_ns")]]
                        for p in summary["priorities"]]))
    if clocked:
        body.append('<p class="note">Latencies are corrected by the nodes\' clock offsets (section Clocks); each '
                    'figure is within ± its clock error of the true one: the publisher\'s clock bound plus the '
                    'subscriber\'s (the largest over the subscribers, and over the flows of a priority).</p>')
    body.append(_latency_cdf(a, latency_samples))
    body.append(_latency_series(a))
    body.append('<p class="note">Red dashed: scenario events; orange dotted: router events; shaded: congestion '
                'episodes.</p>')
    body.append(_jitter_series(a))
    body.append('<p class="note">Jitter: the RFC 3550 interarrival jitter estimator (J += (|D| − J)/16 per packet, '
                'in arrival order, per subscriber) over the run; the tables give its percentiles over every packet, '
                'the plot its value at the end of each window (line) and its maximum within the window (dots). '
                'The <code>jitter</code> expectation reads its p99.</p>')
    if summary["hops"]:
        body.append("<h3>Per-hop delay (first seen on one link to first seen on the next)</h3>")
        body.append(_table(["flow", "hop", "messages", "p50 ms", "p99 ms", "max ms"],
                           [[h["flow"], f"{h['from_node']}>{h['via_node']}>{h['to_node']}", h["messages"],
                             _ms(h["p50_ns"]), _ms(h["p99_ns"]), _ms(h["max_ns"])] for h in summary["hops"]], left=2))
    if summary["links"]:
        body.append("<h3>Link transit (sender's capture to receiver's capture)</h3>")
        body.append(_table(["link", "direction", "messages", "p50 ms", "p99 ms", "max ms"],
                           [[l["link"], f"{l['src_node']}>{l['dst_node']}", l["messages"], _ms(l["transit_p50_ns"]),
                             _ms(l["transit_p99_ns"]), _ms(l["transit_max_ns"])] for l in summary["links"]], left=2))
    body.append("<h2>Throughput per link</h2>" + _link_throughput(a))
    body.append("<h2>Drops</h2>" + _drops_series(a))
    body.append(_loss_accounting(summary))
    if summary["lost_by_last_seen"]:
        body.append("<h3>Where lost messages were last seen</h3>")
        body.append(_table(["flow", "subscriber", "last seen on its way there", "messages"],
                           [[r["flow"], r["node"], r["last_seen"] or "never seen on a captured link", r["count"]]
                            for r in summary["lost_by_last_seen"]], left=3))
    if unavailable_reason(summary["router_drops"]):
        body.append("<h3>Drops reported by the routers</h3>"
                    f'<p class="note">{escape(unavailable_reason(summary["router_drops"]))}</p>')
    elif summary["router_drops"]:
        body.append("<h3>Drops reported by the routers</h3>")
        body.append(_table(["node", "priority", "reason", "dropped"],
                           [[d["node"], d["priority_name"], d["reason"], f"{d['dropped']:g}"]
                            for d in summary["router_drops"] if d["dropped"]], left=3))
    body.append(_resources_section(a, summary))
    if summary.get("queries"):
        body.append(_queries_section(a, summary["queries"]))
    body.append("<h2>Reroutes</h2>" + _reroute_timeline(a))
    no_events = unavailable_reason((summary.get("router") or {}).get("events"))
    if summary["reroutes"]:
        def at(ns):
            return "–" if ns is None else f"{(ns - a.t0_ns) / 1e9:.3f}"

        body.append(_table(["flow", "old path", "new path", "cause", "onset s", "detection s", "first on new path s",
                            "reroute time ms", "detection time ms", "reaction time ms", "lost from onset",
                            "old path idle ms"],
                           [[r["flow"], r["old_path"], r["new_path"],
                             r["cause_detail"] or "no cause found",
                             at(r["onset_ns"]),
                             "not available" if no_events else
                             at(r["detection_ns"]) + (f" ({r['detection_node']}: {r['detection_event']})"
                                                      if r["detection_ns"] is not None else ""),
                             at(r["time_ns"]), _ms(r["reroute_time_ns"]), _with_bound(
                                 _ms(r["detection_time_ns"]), failure_detection_bound(r, a.ingested.manifest)),
                             _ms(r["reaction_time_ns"]), r["lost"], _ms(r["old_path_idle_ns"])]
                            for r in summary["reroutes"]], left=4))
        body.append('<p class="note">Onset: the cause — the first window in which the load offered to a link '
                    'exceeded its capacity (table below), or the scenario event (link_down, kill_router, ...). '
                    'Detection: the router\'s own report of it (congestion_detected, link_down). Reroute time = '
                    'onset to first message on the new path = detection time + reaction time.</p>')
        if no_events:
            body.append(f'<p class="note">Detection, and so detection and reaction times: {escape(no_events)} '
                        '(the reroutes and their onsets come from the captures and the scenario alone).</p>')
    else:
        body.append("<p>No flow changed path.</p>")
    if summary["overloads"]:
        body.append("<h3>Overloads (offered load above capacity)</h3>")
        body.append(_table(["link", "direction", "onset s", "last overloaded s", "cause", "capacity Mbit/s",
                            "offered Mbit/s (first window)", "peak offered Mbit/s"],
                           [[o["link"], f"{o['src_node']}>{o['dst_node']}", f"{(o['onset_ns'] - a.t0_ns) / 1e9:.3f}",
                             f"{(o['end_ns'] - a.t0_ns) / 1e9:.3f}",
                             "capacity lowered (set_link)" if o["cause"] == "set_link" else "load",
                             f"{o['capacity_bps'] / 1e6:.3f}", f"{o['offered_bps'] / 1e6:.3f}",
                             f"{o['peak_offered_bps'] / 1e6:.3f}"] for o in summary["overloads"]], left=2))
    if unavailable_reason(summary["episodes"]):
        body.append("<h3>Congestion episodes (as the routers reported them)</h3>"
                    f'<p class="note">{escape(unavailable_reason(summary["episodes"]))}</p>')
    elif summary["episodes"]:
        body.append("<h3>Congestion episodes (as the routers reported them)</h3>")
        body.append(_table(["episode", "start s", "end s", "opened by", "closed by", "reroutes"],
                           [[e["index"], f"{(e['start_ns'] - a.t0_ns) / 1e9:.3f}",
                             "–" if e["end_ns"] is None else f"{(e['end_ns'] - a.t0_ns) / 1e9:.3f}", e["opened_by"],
                             e["closed_by"] or "not cleared", ", ".join(f"{k}: {v}" for k, v in e["reroutes"].items())]
                            for e in summary["episodes"]]))
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>testbed report: "
            f"{escape(run)}</title><style>{_CSS}{VERDICT_CSS}</style></head><body>" + "\n".join(body) + PLOT_CHECK_SCRIPT
            + "</body></html>\n")


#: the plot of a run with query flows (beside PLOT_IDS, which every report has)
QUERY_PLOT_ID = "queries"


def _queries_plot(a: Analysis) -> str:
    """Each query at its send time: its completion time, coloured by the router that served it; timeouts and
    other ends marked at the time they took; the scenario's events as lines."""
    q = a.queries
    fig, ax = plt.subplots(figsize=(11, 4))
    if q.empty:
        _empty(ax, "no query logged")
    else:
        took = (q["done_ns"].astype("float64") - q["send_ns"].astype("float64")) / 1e6
        x = _secs(q["send_ns"].astype("float64"), a.t0_ns)
        ok = q["outcome"] == "ok"
        for served in sorted(set(q.loc[ok, "served_by"])):
            pick = ok & (q["served_by"] == served)
            failed_over = pick & queries.failed_over(q)
            ax.scatter(x[pick & ~failed_over], took[pick & ~failed_over], s=6, label=f"served by {served or '?'}")
            if failed_over.any():
                ax.scatter(x[failed_over], took[failed_over], s=28, marker="^", label=f"{served}: after a failover")
        for outcome, marker in (("timeout", "x"), ("error", "s"), ("no_match", "v"), ("shutdown", "D")):
            pick = q["outcome"] == outcome
            if pick.any():
                ax.scatter(x[pick], took[pick].fillna(0), s=20, marker=marker, color="red" if outcome == "timeout"
                           else "black", label=f"{outcome} ({int(pick.sum())})")
        ax.set_yscale("log")
        ax.legend(fontsize=8, ncol=3)
        _mark_events(ax, a)
    ax.set_xlabel("query sent at (s since traffic start)")
    ax.set_ylabel("completion (ms)")
    ax.grid(alpha=0.3)
    return png(fig, QUERY_PLOT_ID, "completion time of every query, by serving router, with the scenario's events")


def _queries_section(a: Analysis, section: dict) -> str:
    out = ["<h2>Queries</h2>", _queries_plot(a)]
    for f in section["flows"]:
        timeout = f["timeout_ns"] / 1e9 if f.get("timeout_ns") else None
        out.append(f"<h3>{escape(f['flow'])}: {escape(f.get('key'))} from {escape(f.get('querier'))} to "
                   f"{escape(', '.join(f.get('queryables') or []))}</h3>")
        out.append(f'<p class="note">consolidation {escape(f.get("consolidation"))}, timeout '
                   f'{"–" if timeout is None else f"{timeout:g} s"}; completion = done − sent of the queries that '
                   "ended ok; a failover is a query answered after more than one attempt; past timeout = ended more "
                   "than 100 ms after its timeout.</p>")
        rows = []
        for ph in f["phases"] + [dict(f, label="whole run", start_ns=a.t0_ns, end_ns=None)]:
            c = ph["completion"]
            rows.append([ph["label"], f"{(ph['start_ns'] - a.t0_ns) / 1e9:.3f}",
                         "end" if ph["end_ns"] is None else f"{(ph['end_ns'] - a.t0_ns) / 1e9:.3f}", ph["queries"],
                         ph["outcomes"]["ok"], ph["timeouts"], ph["failovers"], ph["past_timeout"],
                         _ms(c.get("p50_ns")), _ms(c.get("p99_ns")), _ms(c.get("max_ns")),
                         ", ".join(f"{k}: {v}" for k, v in ph["served_by"].items()) or "–"])
        out.append(_table(["phase", "from s", "to s", "queries", "ok", "timeouts", "failovers", "past timeout",
                           "p50 ms", "p99 ms", "max ms", "served by"], rows))
    return "\n".join(out)


def _mib(v) -> str:
    return "–" if v is None else f"{v / 2**20:.2f}"


def _resources_plot(a: Analysis, no_metrics: str = "") -> str:
    s = a.resource_series
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 5), sharex=True)
    if no_metrics:
        _empty(top, no_metrics)
        _empty(bottom, "")
    elif s.empty:
        _empty(top, "no resource metrics scraped")
        _empty(bottom, "")
    else:
        for node, g in s.groupby("node"):
            x = _secs(g["ts_ns"], a.t0_ns)
            top.plot(x, g["queued_bytes"] / 2**20, label=node, drawstyle="steps-post")
            bottom.plot(x, g["rss_bytes"] / 2**20, label=node)
        limits = s["queued_bytes_limit"].dropna()
        if len(limits):
            top.axhline(limits.max() / 2**20, color="grey", linestyle="--", linewidth=1, label="limit")
        top.legend(fontsize=8, ncol=4)
        _mark_events(top, a)
        _mark_events(bottom, a)
    top.set_ylabel("queued MiB")
    bottom.set_ylabel("resident MiB")
    bottom.set_xlabel("time since traffic start (s)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    return png(fig, "resources", "bytes queued and resident memory per router")


def _resources_section(a: Analysis, summary: dict) -> str:
    res = summary.get("resources") or {}
    gone = unavailable_reason(res)
    router = summary.get("router") or {}
    # the whole section gone: say each part's own reason
    no_metrics = (unavailable_reason(router.get("metrics")) or gone) if gone else unavailable_reason(res.get("nodes"))
    no_events = (unavailable_reason(router.get("events")) or gone) if gone else unavailable_reason(res.get("decisions"))
    out = ["<h2>Router resources and limits</h2>", _resources_plot(a, no_metrics or "")]
    if no_metrics:
        out.append(f'<p class="note">Queued bytes and memory: {escape(no_metrics)}.</p>')
    if no_events:
        out.append(f'<p class="note">Resource-limit decisions: {escape(no_events)}.</p>')
    nodes = res.get("nodes")
    if not no_metrics and isinstance(nodes, list) and nodes:
        out.append(_table(["router", "scrapes", "queued MiB max (running peak)", "queued limit MiB",
                           "control MiB max", "resident MiB first", "resident MiB max"],
                          [[n["node"], n["scrapes"], _mib(n["queued_bytes_max"]), _mib(n["queued_bytes_limit"]),
                            _mib(n["control_bytes_max"]), _mib(n["rss_bytes_first"]), _mib(n["rss_bytes_max"])]
                           for n in nodes]))
    if no_events:
        return "\n".join(out)
    decisions = res.get("decisions") or []
    if decisions:
        def detail(d: dict) -> str:
            keys = ("cause", "input_rate_bps", "input_rate_limit_bps", "queued_from_bytes", "sender_limit_bytes",
                    "stalled_ms", "stalled_reader_ms", "backlog_ms", "full_for_ms", "slow_reader_ms",
                    "declarations", "limit", "queued_to_bytes", "endpoint_limit_bytes", "duration_ms",
                    "dropped", "throttled_ms", "reason")
            return ", ".join(f"{k} {d[k]}" for k in keys if d.get(k) is not None)
        out.append("<h3>Resource-limit decisions (the routers' events)</h3>")
        out.append(_table(["s", "router", "event", "endpoint", "policy", "numbers"],
                          [[f"{d['t_s']:.3f}", d["node"], d["event"], d.get("endpoint") or "–",
                            d.get("policy") or "–", detail(d)] for d in decisions], left=6))
    else:
        out.append("<p>No router took a resource-limit decision (no noisy sender, no slow reader).</p>")
    return "\n".join(out)


def _router_note(summary: dict) -> str:
    """One line: which router ran, and where the per-link figures and the router's own figures come from."""
    router = summary.get("router") or {}
    if not router:
        return ""
    paths = summary.get("paths") or {}
    hs = paths.get("header_search")
    if hs is not None:
        how = (f"per-link observations from the traffic headers found in the reassembled TCP streams: "
               f"{hs['validated']} validated against the send logs, {hs['rejected']} candidates rejected "
               f"({hs['rejected_unknown_flow']} of unknown flows, {hs['rejected_not_sent']} not in a send log)"
               + (f", {hs['no_send_log']} of flows without a send log (queries)" if hs["no_send_log"] else "")
               + (f", {hs['in_holes']} touching bytes not captured" if hs["in_holes"] else "")
               + ", none of them counted")
    else:
        how = "per-link observations decoded from our router's frames"
    missing = [f"{label}: {r['reason']}" for label, r in (("Router metrics", router.get("metrics") or {}),
                                                         ("Router events", router.get("events") or {}))
               if r.get("available") is False and r.get("reason")]
    return (f'<p class="note">router driver {escape(router.get("driver"))} (wire {escape(router.get("wire"))}): '
            f'{escape(how)}.' + "".join(f" {escape(m)}." for m in missing) + "</p>")


#: how the report names each part of the lost deliveries (spark.lossaccount.PART_ORDER)
_LOSS_PARTS = {"killed_router": "in a killed router", "link_down": "on a link that went down",
               "router_drop": "dropped by a router", "never_seen": "never seen on a captured link",
               "on_the_wire": "on the wire", "unexplained": "unexplained"}


def _loss_accounting(summary: dict) -> str:
    """Where the lost messages went: every lost delivery in one part, the parts adding up to the total."""
    acc = summary.get("loss_accounting")
    if not acc or not acc["lost"]:
        return ""
    rows = [[_LOSS_PARTS.get(p["part"], p["part"]), p["where"] or "–", p["lost"], p["messages"], p["detail"]]
            for p in acc["parts"]]
    rows.append([_Raw("<b>total</b>"), "", acc["accounted"], "", f"of {acc['lost']} lost deliveries"])
    return ("<h3>Where the lost messages went</h3>" + _table(["part", "where", "lost deliveries", "messages",
                                                             "how it is known"], rows, left=2))


def _with_bound(figure: str, bound: Optional[str]) -> str:
    """A figure (or a check) and, beside it, what in the configuration bounds it or why it is there
    (spark/bounds.py)."""
    return _Raw(escape(figure) + (f'<br><span class="note">{escape(bound)}</span>' if bound else ""))


def _verdict_cell(v) -> str:
    if v.skipped:
        return '<span class="warn">NOT MEASURED</span>'
    return f'<span class="{"pass" if v.passed else "fail"}">{"PASS" if v.passed else "FAIL"}</span>'


def _us_or_ms(ns) -> str:
    if ns is None:
        return "–"
    return f"{ns / 1e6:.3f} ms" if abs(ns) >= 1e6 else f"{ns / 1e3:.1f} us"


def _clocks_section(summary: dict) -> str:
    """The nodes' clocks against the controller's (manifest clocks): offsets before/after, bound, drift."""
    clocks = summary.get("clocks")
    out = ["<h2>Clocks</h2>"]
    if not clocks:
        out.append("<p>The manifest has no clock readings (a run recorded without them): latencies are as the "
                   "nodes' clocks gave them, with no error bound.</p>")
        return "".join(out)
    if not clocks["measured"]:
        out.append("<p>Every node reads the controller's own kernel clock (same host): latencies need no "
                   "correction and carry no clock error.</p>")
    out.append(_table(["node", "method", "offset before", "offset after", "bound before", "bound after",
                       "bound (run)", "drift ppm", "how"],
                      [[n["node"], n["method"], _us_or_ms(n["offset_before_ns"]), _us_or_ms(n["offset_after_ns"]),
                        _us_or_ms(n["bound_before_ns"]), _us_or_ms(n["bound_after_ns"]), _us_or_ms(n["bound_ns"]),
                        "–" if n["drift_ppm"] is None else f"{n['drift_ppm']:+.3f}", n["detail"]]
                       for n in clocks["nodes"]], left=2))
    out.append('<p class="note">Offset: the node\'s clock minus the controller\'s, read before and after the run '
               '(chrony on both ends, or an NTP-style exchange over the management connection); the true offset is '
               'within ± the bound. Bound (run): the larger of the two bounds plus half the change of the offset, '
               'the uncertainty of the offset interpolated between the readings. Drift: the change over the time '
               'between the readings.</p>')
    return "".join(out)


def _check_figure(value, unit: str) -> str:
    """A link check's figure (testbed.links.verify.LinkCheck: measured, expected, low, high) in its unit."""
    if value is None:
        return "–"
    if unit == "bit/s":
        return f"{value / 1e6:.3f} Mbit/s"
    if unit == "ns":
        return f"{value / 1e6:.3f} ms"
    if unit == "%":
        return f"{value:.3g}%"
    return f"{value:.3g}"


def _link_verification_section(verification: Optional[dict]) -> str:
    """The data plane measured against the topology before traffic (manifest link_verification): one row per
    check of every direction, then what was not verified. Empty where the run did not verify its links."""
    if not verification:
        return ""
    out = ["<h2>Link verification</h2>",
           f'<p class="note">Before traffic, in {verification.get("seconds", 0):.1f} s: every direction measured '
           'against what the topology asks (docs/backends.md, data-plane verification); '
           + ("every check passed." if verification.get("ok") else
              "some missed: " + ("the run went on (--allow-deviation)." if verification.get("allowed_deviation")
                                 else "the run stopped there.")) + "</p>"]
    rows, notes = [], []
    for d in verification.get("links") or []:
        for c in d.get("checks") or []:
            unit = c.get("unit") or ""
            accepted = ("–" if c.get("low") is None else
                        f"{_check_figure(c['low'], unit)} – {_check_figure(c['high'], unit)}")
            if c.get("quantity") == "distribution" and (c.get("detail") or {}).get("p_value") is not None:
                accepted = f"p ≥ {c['detail']['alpha']:g} (p {c['detail']['p_value']:.2g})"
            way = " one way" if (c.get("detail") or {}).get("one_way") is True else ""
            rows.append([d.get("path"), f"{c.get('quantity')}{way}", _check_figure(c.get("measured"), unit),
                         _check_figure(c.get("expected"), unit), accepted,
                         _Raw('<span class="pass">ok</span>' if c.get("ok") else '<span class="fail">MISS</span>')])
        notes += [f"{d.get('path')}: {n}" for n in d.get("notes") or []]
    out.append(_table(["direction", "quantity", "measured", "expected", "accepted", "verdict"], rows, left=2))
    if notes:
        out.append('<ul class="note">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    return "".join(out)


def _latency_samples(a: Analysis) -> Dict[int, np.ndarray]:
    """Latencies (first receipts) per priority, for the CDF."""
    d = a.deliveries
    return {int(p): g["latency_ns"].to_numpy(dtype="float64") for p, g in d.groupby("priority")}
