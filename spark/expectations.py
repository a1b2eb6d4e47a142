"""The topology's ``expect:`` entries (or a separate file) evaluated against ``summary.json``.

What each metric reads (docs/reports.md, "Expectations"): ``jitter`` is the p99 over the run of the RFC 3550
jitter estimator (``jitter.p99_ns``), not its final value; ``reroute.time``, ``detection.time`` and
``reaction.time`` are the slowest reroute's onset -> first message on the new path, onset -> the router's
detection, and detection -> first message on the new path; ``reroute.lost`` counts from the onset.

Besides the expectations, every check ends with the **clock check** (``clock_check``): the error the nodes'
clocks may add to a flow's latencies (``latency.clock_error_ns``) must not exceed a share (default 10 %,
the topology's ``clock_error_max_share``) of that flow's latency p50.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

import yaml

from runfolder import expectations as grammar
from runfolder import units
from runfolder.expectations import METRICS, Expectation, ExpectationError
from runfolder.priorities import Priority
from runfolder.units import UnitError, parse_percent
from runfolder.wording import plural

from .routerdriver import unavailable_reason

__all__ = ["Verdict", "parse_expectations", "evaluate", "shortened_expectations", "measure", "fmt_value",
           "clock_check", "clock_error_max_share", "parse_max_share",
           "DEFAULT_CLOCK_ERROR_MAX_SHARE", "CLOCK_ERROR_MAX_SHARE_KEY", "CLOCK_METRIC"]



def parse_expectations(data: Any, source: str) -> List[Expectation]:
    """A YAML list of expectations, or ``{expect: [...]}`` (a whole topology file works too)."""
    if isinstance(data, str):
        try:
            data = yaml.safe_load(data)
        except yaml.YAMLError as err:
            raise ExpectationError(f"{source}: not YAML: {err}") from None
    if data is None:
        return []
    if isinstance(data, dict):
        data = data.get("expect") or []
    if not isinstance(data, list):
        raise ExpectationError(f"{source}: expected a list of expectations or a mapping with 'expect:'")
    try:
        return grammar.parse_expectations(data)
    except ExpectationError as err:
        raise ExpectationError(f"{source}: {err}") from None


def fmt_value(metric: str, value: Optional[float]) -> str:
    if value is None:
        return "not measured"
    kind = METRICS.get(metric)
    if kind == "duration":
        v = abs(value)
        sign = "-" if value < 0 else ""
        if v >= 1e9:
            return f"{sign}{v / 1e9:.3f}s"
        if v >= 1e6:
            return f"{sign}{v / 1e6:.3f}ms"
        if v >= 1e3:
            return f"{sign}{v / 1e3:.1f}us"
        return f"{sign}{v:.0f}ns"
    if kind == "percent":
        return f"{value:.3f}%"
    if kind == "bandwidth":
        return f"{value / 1e6:.3f}mbit"
    if kind == "size":
        return f"{value / 2**20:.3f}MiB"
    return f"{value:g}"


@dataclass
class Verdict:
    expectation: str        # the compact form, e.g. "latency.p99 <= 50ms for priority realtime"
    metric: str
    op: str
    limit: float
    measured: Optional[float]
    passed: bool
    margin: Optional[float]  # how far inside the limit (positive) or past it (negative), in the metric's unit
    message: str
    skipped: bool = False    # not measured, and not a failure (the clock check of a run without clock readings)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


#: reroute spans (docs/reports.md): metric -> (reroutes[] field, what it spans)
_SPANS = {"reroute.time": ("reroute_time_ns", "onset to first message on the new path"),
          "detection.time": ("detection_time_ns", "onset to the router's detection"),
          "reaction.time": ("reaction_time_ns", "detection to first message on the new path")}

#: router resource metrics -> (summary.json resources key, what it is)
_RESOURCES = {"router.queued_bytes": ("queued_bytes_max", "most bytes queued in one router (its running peak)"),
              "router.memory": ("rss_bytes_max", "largest resident memory of a router at a scrape"),
              "limits.noisy_senders": ("noisy_senders", "noisy senders the routers named"),
              "limits.slow_readers": ("slow_readers", "slow readers the routers named"),
              "limits.disconnects": ("disconnects", "endpoints the resource limits disconnected")}

_LAT = {"latency.p50": "p50_ns", "latency.p95": "p95_ns", "latency.p99": "p99_ns", "latency.p999": "p999_ns",
        "latency.max": "max_ns", "latency.mean": "mean_ns"}


def _scope(exp: Expectation, summary: dict) -> Tuple[Optional[dict], List[str], str]:
    """(the summary entry the expectation is about, the flows it covers, a description), or None entry."""
    flows = summary.get("flows", [])
    if exp.flow:
        names = [f["flow"] for f in flows if f["flow"] == exp.flow or f["flow"].startswith(exp.flow + ".")]
        entry = next((f for f in flows if f["flow"] == exp.flow), None)
        if entry is None:  # a zpub entry's own name: its flows together
            entry = next((g for g in summary.get("flow_groups", []) if g["flow"] == exp.flow), None)
        return entry, names, f"flow {exp.flow}"
    if exp.priority is not None:
        p = int(exp.priority)
        entry = next((x for x in summary.get("priorities", []) if x["priority"] == p), None)
        return entry, [f["flow"] for f in flows if f["priority"] == p], f"priority {Priority(p).label}"
    return summary.get("overall"), [f["flow"] for f in flows], "all flows"


def measure(exp: Expectation, summary: dict) -> Tuple[Optional[float], str]:
    """The measured value (None when it cannot be measured) and a note saying what it is or why not."""
    entry, flow_names, what = _scope(exp, summary)
    m = exp.metric
    if m in _LAT or m in ("jitter", "loss", "delivery", "drops", "throughput"):
        if entry is None:
            return None, f"no {what} in this run"
        if m in _LAT:
            v = (entry.get("latency") or {}).get(_LAT[m])
            return v, f"{what}: {(entry.get('latency') or {}).get('messages', 0)} messages received" if v is not None \
                else f"{what}: no message received"
        if m == "jitter":
            j = entry.get("jitter")
            if not j:
                return None, f"{what}: fewer than two messages received by any subscriber, so no jitter"
            return j["p99_ns"], (f"{what}: p99 over the run of the RFC 3550 jitter estimator ({j['samples']} "
                                 f"values; p50 {fmt_value(m, j['p50_ns'])}, max {fmt_value(m, j['max_ns'])})")
        if m == "loss":
            return entry.get("loss_pct"), f"{what}: {entry.get('lost')} of {entry.get('expected')} deliveries lost"
        if m == "delivery":
            return entry.get("delivery_pct"), f"{what}: {entry.get('delivered')} of {entry.get('expected')} delivered"
        if m == "drops":
            return entry.get("lost"), f"{what}: deliveries lost"
        if m == "throughput":
            return entry.get("throughput_bps"), f"{what}: received payload bits per second while sending"
    if m in _RESOURCES:
        res = summary.get("resources")
        if not res:
            return None, "no resources section in this summary (analysed before testbed-summary/4)"
        key, what_it_is = _RESOURCES[m]
        gone = unavailable_reason(res.get(key)) if not unavailable_reason(res) else (
            # the whole section: say the part this metric needs
            unavailable_reason((summary.get("router") or {}).get("metrics" if m.startswith("router.") else "events"))
            or unavailable_reason(res))
        if gone:  # the router driver gives no metrics (queued bytes, memory) or no event log (decisions)
            return None, f"{what_it_is}: {gone}"
        v = res.get(key)
        if v is None:
            return None, f"{what_it_is}: not in the routers' metrics"
        where = ""
        if m in ("router.queued_bytes", "router.memory"):
            field = "queued_bytes_max" if m == "router.queued_bytes" else "rss_bytes_max"
            top = max((n for n in res.get("nodes", []) if n.get(field) is not None), key=lambda n: n[field],
                      default=None)
            where = f" (router {top['node']})" if top else ""
        elif res.get("decisions"):
            named = sorted({f"{d.get('endpoint')} at {d.get('node')}" for d in res["decisions"]
                            if d["event"] == {"limits.noisy_senders": "noisy_sender",
                                              "limits.slow_readers": "slow_reader",
                                              "limits.disconnects": "disconnected"}[m]})
            where = f": {', '.join(named)}" if named else ""
        return float(v), f"{what_it_is}{where}"
    if m.startswith("query."):
        return _measure_query(exp, summary)
    reroutes = [r for r in summary.get("reroutes", []) if r["flow"] in flow_names]
    if m == "reroutes":
        return float(len(reroutes)), f"{what}: {len(reroutes)} path changes"
    if m in _SPANS:
        key, span = _SPANS[m]
        times = [r[key] for r in reroutes if r.get(key) is not None]
        no_events = _no_router_events(summary)
        if no_events and key != "reroute_time_ns":  # detection is the router's own event
            return None, f"{what}: {span}: {no_events}"
        if not reroutes:
            return None, f"{what}: no reroute happened, so there is no {m}"
        if not times:
            why = ("no onset (overload, failure or scenario event) was found before them" if key != "reaction_time_ns"
                   else "no router event reported their cause")
            return None, f"{what}: {plural(len(reroutes), 'reroute')} but {why}, so no {m}"
        slowest = max((r for r in reroutes if r.get(key) is not None), key=lambda r: r[key])
        note = f"{what}: {span}, slowest of {plural(len(times), 'reroute')} ({slowest['flow']}: {slowest.get('cause')}"
        if slowest.get("cause_link"):
            note += f" on {slowest['cause_link']}"
        note += ")" + (f"; {len(reroutes) - len(times)} without one" if len(times) < len(reroutes) else "")
        return float(max(times)), note
    if m == "reroute.lost":
        if not reroutes:
            return None, f"{what}: no reroute happened"
        return float(max(r["lost"] for r in reroutes)), f"{what}: most deliveries lost in one reroute"
    if m == "reroutes_per_episode":
        eps = summary.get("episodes", [])
        gone = unavailable_reason(eps) or _no_router_events(summary)
        if gone:  # episodes are the routers' reports of congestion
            return None, f"congestion episodes: {gone}"
        if not eps:
            return None, ("no congestion episode in the events (router congestion_detected/congestion_cleared or "
                          "weight_changed to/from 65535)")
        worst, where = 0, ""
        for ep in eps:
            for flow, n in (ep.get("reroutes") or {}).items():
                if flow in flow_names and n > worst:
                    worst, where = n, f" (flow {flow} in episode {ep['index']})"
        return float(worst), f"{what}: most reroutes of one flow in one of {plural(len(eps), 'episode')}{where}"
    return None, f"metric {m} is not computed by this analysis"


def _no_router_events(summary: dict) -> Optional[str]:
    """Why the routers' own events are not available (their driver provides no event log), else None."""
    events = (summary.get("router") or {}).get("events") or {}
    return unavailable_reason(events)


_QUERY_COMPLETION = {"query.p50": "p50_ns", "query.p99": "p99_ns", "query.max": "max_ns"}


def _measure_query(exp: Expectation, summary: dict) -> Tuple[Optional[float], str]:
    """A query metric of one query flow (``for flow``) or of all of them together."""
    section = summary.get("queries")
    if not section or not section.get("flows"):
        return None, "no query flow in this run"
    if exp.flow:
        entry = next((f for f in section["flows"] if f["flow"] == exp.flow), None)
        if entry is None:
            return None, f"no query flow {exp.flow} (query flows: {', '.join(f['flow'] for f in section['flows'])})"
        what = f"query flow {exp.flow}"
    else:
        entry, what = section["overall"], "all query flows"
    m = exp.metric
    if m in _QUERY_COMPLETION:
        done = entry["completion"]
        v = done.get(_QUERY_COMPLETION[m])
        return v, (f"{what}: completion of the {done['messages']} of {entry['queries']} queries that ended ok"
                   if v is not None else f"{what}: no query ended ok")
    key = m.split(".", 1)[1]
    notes = {"timeouts": "queries that ended by their timeout", "failovers": "queries answered after a failover "
             "(more than one attempt)", "past_timeout": "queries that ended more than 100 ms after their timeout"}
    served = ", ".join(f"{k}: {v}" for k, v in entry.get("served_by", {}).items())
    return float(entry[key]), f"{what}: {notes[key]}, of {entry['queries']} (served by {served or 'none'})"


def _compare(op: str, value: float, limit: float) -> Tuple[bool, float]:
    if op == "<=":
        return value <= limit, limit - value
    if op == "<":
        return value < limit, limit - value
    if op == ">=":
        return value >= limit, value - limit
    if op == ">":
        return value > limit, value - limit
    return value == limit, -abs(value - limit)


def evaluate(expectations: List[Expectation], summary: dict,
             unmeasurable: Optional[Mapping[str, str]] = None) -> List[Verdict]:
    """Each expectation against ``summary``. ``unmeasurable``: expectations (compact form) that the run, shorter
    than its topology, could not measure, and why (:func:`shortened_expectations`): skipped, "not measurable",
    neither a pass nor a failure of the router."""
    out = []
    for exp in expectations:
        text = exp.describe()
        if text in (unmeasurable or {}):
            out.append(Verdict(text, exp.metric, exp.op, float(exp.value), None, True, None,
                               f"SKIP {text}: not measurable: {unmeasurable[text]}", skipped=True))
            continue
        value, note = measure(exp, summary)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            out.append(Verdict(text, exp.metric, exp.op, exp.value, None, False, None,
                               f"FAIL {text}: not measured: {note}"))
            continue
        ok, margin = _compare(exp.op, float(value), float(exp.value))
        shown = fmt_value(exp.metric, value)
        limit = fmt_value(exp.metric, exp.value)
        if ok:
            msg = f"PASS {text}: measured {shown} (limit {limit}, margin {fmt_value(exp.metric, margin)}; {note})"
        else:
            msg = (f"FAIL {text}: measured {shown}, past the limit {limit} by "
                   f"{fmt_value(exp.metric, abs(margin))} ({note})")
        out.append(Verdict(text, exp.metric, exp.op, float(exp.value), float(value), ok, margin, msg))
    return out


def shortened_expectations(manifest: Optional[dict]) -> Dict[str, str]:
    """The expectations a run shorter than its topology could not measure, and why, as its manifest records
    them before anything was built (``extra.shortened``, testbed/spec/shortened.py); empty for a full run."""
    shortened = ((manifest or {}).get("extra") or {}).get("shortened") or {}
    if not shortened.get("unmeasurable"):
        return {}
    run = units.format_duration(int(shortened["duration_ns"]))
    full = units.format_duration(int(shortened["topology_duration_ns"]))
    return {text: f"{why} (the run lasted {run}, not the topology's {full})"
            for text, why in shortened["unmeasurable"].items()}


# ---------------------------------------------------------------- the clock check

#: the share of a flow's latency p50 that the clocks' error may reach before the check fails
DEFAULT_CLOCK_ERROR_MAX_SHARE = 0.1
#: the topology's top-level key for it: a percentage above 0, e.g. ``15%`` (docs/spec.md)
CLOCK_ERROR_MAX_SHARE_KEY = "clock_error_max_share"
CLOCK_METRIC = "clock_error_share"


def parse_max_share(value: Any, source: str) -> float:
    """A ``clock_error_max_share`` as the topology writes it (a percentage above 0, e.g. ``15%``, as the spec
    reads it) -> the share (0.15)."""
    try:
        percent = parse_percent(value)
    except UnitError as err:
        raise ExpectationError(f"{source}: {CLOCK_ERROR_MAX_SHARE_KEY}: {err}") from None
    if percent <= 0:
        raise ExpectationError(f"{source}: {CLOCK_ERROR_MAX_SHARE_KEY}: the clock check needs a share above 0%, "
                               "e.g. 10%")
    return percent / 100


def clock_error_max_share(data: Any, source: str) -> Optional[float]:
    """The topology's ``clock_error_max_share`` (YAML text or parsed mapping) as a share (``15%`` -> 0.15), or
    None when it has none."""
    if isinstance(data, str):
        try:
            data = yaml.safe_load(data)
        except yaml.YAMLError as err:
            raise ExpectationError(f"{source}: not YAML: {err}") from None
    if not isinstance(data, dict) or data.get(CLOCK_ERROR_MAX_SHARE_KEY) is None:
        return None
    return parse_max_share(data[CLOCK_ERROR_MAX_SHARE_KEY], source)


def _pct(x: float) -> str:
    return f"{x * 100:.3f}%"


def clock_check(summary: dict, max_share: float = DEFAULT_CLOCK_ERROR_MAX_SHARE) -> Verdict:
    """Whether the nodes' clocks are good enough for the latencies measured: for every flow with a latency,
    ``latency.clock_error_ns / latency.p50_ns <= max_share``; the verdict gives the worst flow. Passes,
    saying "same host", when every node reads the controller's clock; is skipped ("not measured", not a
    failure) for a run without clock readings; fails for a flow whose clock error is unknown (a node without
    a reading) or whose p50 is not positive."""
    text = f"clock error <= {max_share * 100:g}% of latency p50"

    def verdict(measured, passed, margin, message, skipped=False) -> Verdict:
        return Verdict(text, CLOCK_METRIC, "<=", max_share, measured, passed, margin, message, skipped)

    if "clocks" not in summary:
        return verdict(None, True, None, f"SKIP {text}: not measured: this summary.json was written before clocks "
                       "were analysed (run `testbed analyze` again)", skipped=True)
    clocks = summary["clocks"]
    if not clocks:
        return verdict(None, True, None, f"SKIP {text}: not measured: the manifest has no clock readings (a run "
                       "recorded without them); latencies are as the nodes' clocks gave them", skipped=True)
    if not clocks.get("measured"):
        return verdict(0.0, True, max_share, f"PASS {text}: same host: every node reads the controller's clock "
                       "(clock error 0)")
    flows = [f for f in summary.get("flows", []) if f.get("latency")]
    if not flows:
        return verdict(None, True, None, f"SKIP {text}: not measured: no message received, so no latency to "
                       "compare the clock error with", skipped=True)
    unknown = [f["flow"] for f in flows if f["latency"].get("clock_error_ns") is None]
    if unknown:
        return verdict(None, False, None, f"FAIL {text}: not measured: no clock reading for a node of "
                       f"{'flow' if len(unknown) == 1 else 'flows'} "
                       f"{', '.join(unknown)} (see the input problems)")
    bad = [f for f in flows if not (f["latency"].get("p50_ns") or 0) > 0]
    if bad:
        f = bad[0]
        return verdict(None, False, None, f"FAIL {text}: flow {f['flow']}: latency p50 "
                       f"{fmt_value('latency.p50', f['latency'].get('p50_ns'))} is not positive after the clock "
                       f"correction (clock error ±{fmt_value('latency.p50', f['latency']['clock_error_ns'])})")
    shares = {f["flow"]: f["latency"]["clock_error_ns"] / f["latency"]["p50_ns"] for f in flows}
    worst = max(flows, key=lambda f: (shares[f["flow"]], f["flow"]))
    share = shares[worst["flow"]]
    lat = worst["latency"]
    note = (f"worst flow {worst['flow']}: clock error ±{fmt_value('latency.p50', lat['clock_error_ns'])} against "
            f"p50 {fmt_value('latency.p50', lat['p50_ns'])}; largest node bound "
            f"{fmt_value('latency.p50', clocks.get('max_bound_ns'))}")
    margin = max_share - share
    if share <= max_share:
        return verdict(share, True, margin, f"PASS {text}: measured {_pct(share)} (limit {_pct(max_share)}, margin "
                       f"{_pct(margin)}; {note})")
    return verdict(share, False, margin, f"FAIL {text}: measured {_pct(share)}, past the limit {_pct(max_share)} by "
                   f"{_pct(-margin)} ({note}): the clocks are too uncertain for these latencies")
