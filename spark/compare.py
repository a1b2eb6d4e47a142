"""`testbed compare RUN_A RUN_B [RUN_C ...]`: two or more analysed runs side by side (e.g. our router with
congestion-awareness on and off, and stock Zenoh, on the same scenario): latency and loss per priority and per
flow, reroutes, the paths each flow took — as a text table, JSON and one self-contained `compare.html`.

The first run is the reference: every other run gets a change column against it (better / worse; no verdict for
a change within the tolerance: :data:`RELATIVE_TOLERANCE` of the reference's value or the unit's
:data:`ABSOLUTE_TOLERANCE`, whichever is larger, nor for figures that are neither, such as reroutes). A figure a
run's summary does not provide (a section marked ``{"available": false, "reason": ...}``, e.g. from a router that
exports no metrics, or a key an older summary lacks) is "n/a" with its reason, never 0; "—" is a figure with
nothing to measure (a flow not in that run, a run without reroutes).
"""
from __future__ import annotations

import html
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from router.codec import PRIORITY_NAMES
from runfolder.layout import LAYOUT
from runfolder.units import format_duration

from .routerdriver import read_router_driver, unavailable_reason

__all__ = ["Figure", "Row", "PathRow", "RunInfo", "CompareError", "compare_rows", "path_rows", "run_info",
           "scenario_warnings", "load_summary", "render_text", "render_html", "render_json", "compare_runs",
           "compare_command"]

MS = 1e6
EXIT_OK, EXIT_BAD_INPUT = 0, 2
#: a change smaller than this share of the reference's value gets no verdict (run-to-run noise) ...
RELATIVE_TOLERANCE = 0.02
#: ... nor one smaller than this, in the figure's unit (ms; % points; messages and counts: any change counts)
ABSOLUTE_TOLERANCE = {"ms": 0.1, "%": 0.1, "MB": 1.0, "msgs": 0.0, "": 0.0}
#: why a run of our router with congestion-awareness off has no congestion episodes to count
MONITOR_OFF = "congestion monitor off (congestion_aware: false)"


class CompareError(ValueError):
    """Bad input to compare (exit 2), with a message a user can act on."""


# -- one figure of one run ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One figure of one run: a value; or none, with ``reason`` when the run's summary does not provide it
    ("n/a") and without one when there was nothing to measure ("—")."""

    value: Optional[float] = None
    reason: Optional[str] = None

    @property
    def available(self) -> bool:
        return self.reason is None


NOTHING = Figure()


def _lookup(entry: dict, *keys: str, scale: float = 1.0) -> Figure:
    """``entry[k1][k2]...`` as a Figure: n/a with the reason where a level is marked unavailable or the key is
    not in this summary at all; nothing where the summary says null (nothing measured)."""
    node: Any = entry
    for key in keys:
        reason = unavailable_reason(node)
        if reason:
            return Figure(None, reason)
        if node is None:
            return NOTHING
        if not isinstance(node, dict) or key not in node:
            return Figure(None, f"no {'.'.join(keys)} in this run's summary")
        node = node[key]
    reason = unavailable_reason(node)
    if reason:
        return Figure(None, reason)
    if node is None:
        return NOTHING
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        return Figure(None, f"{'.'.join(keys)} is {node!r} in this run's summary, not a number")
    return Figure(float(node) / scale)


def _jitter(entry: dict) -> Figure:
    """The p99 of the RFC 3550 estimator over the run (summaries before testbed-summary/2: its last value)."""
    if "jitter" not in entry and "jitter_ns" in entry:
        return _lookup(entry, "jitter_ns", scale=MS)
    return _lookup(entry, "jitter", "p99_ns", scale=MS)


FigureGetter = Callable[[dict], Figure]


def _figures() -> list[tuple[str, str, FigureGetter, bool]]:
    return [
        ("latency p50", "ms", lambda e: _lookup(e, "latency", "p50_ns", scale=MS), True),
        ("latency p99", "ms", lambda e: _lookup(e, "latency", "p99_ns", scale=MS), True),
        ("latency max", "ms", lambda e: _lookup(e, "latency", "max_ns", scale=MS), True),
        ("jitter p99", "ms", _jitter, True),
        ("loss", "%", lambda e: _lookup(e, "loss_pct"), True),
        ("delivered", "msgs", lambda e: _lookup(e, "delivered"), False),
        # rerouting is how a congestion-aware router wins: more is neither better nor worse
        ("reroutes", "", lambda e: _lookup(e, "reroutes"), None),
    ]


# -- rows -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One figure of one group (the run, a priority, a flow) in every run; ``values[0]`` is the reference."""

    group: str  # "run", "priority", "flow"
    name: str
    figure: str
    values: tuple[Figure, ...]
    unit: str
    lower_is_better: Optional[bool] = True  # None: neither (no verdict: reroutes, congestion episodes)

    def change_of(self, i: int) -> Optional[float]:
        """Run ``i`` minus the reference; None when either has no value."""
        ref, other = self.values[0].value, self.values[i].value
        return None if ref is None or other is None else other - ref

    @property
    def tolerance(self) -> Optional[float]:
        """The largest change that gets no verdict (None without a reference value)."""
        ref = self.values[0].value
        if ref is None:
            return None
        return max(RELATIVE_TOLERANCE * abs(ref), ABSOLUTE_TOLERANCE.get(self.unit, 0.0))

    def verdict_of(self, i: int) -> str:
        change = self.change_of(i)
        if change is None or self.lower_is_better is None or abs(change) <= (self.tolerance or 0.0) + 1e-9:
            return ""
        return "better" if (change < 0) == self.lower_is_better else "worse"

    @property
    def changes(self) -> tuple[Optional[float], ...]:
        return tuple(self.change_of(i) for i in range(1, len(self.values)))

    @property
    def verdicts(self) -> tuple[str, ...]:
        return tuple(self.verdict_of(i) for i in range(1, len(self.values)))

    # two runs: A (the reference) and B
    @property
    def a(self) -> Optional[float]:
        return self.values[0].value

    @property
    def b(self) -> Optional[float]:
        return self.values[1].value

    @property
    def change(self) -> Optional[float]:
        return self.change_of(1)

    @property
    def verdict(self) -> str:
        return self.verdict_of(1)


def _priority_key(entry: dict) -> str:
    """A priority's name in the codec's spelling, also for summaries written before names were unified."""
    if isinstance(entry.get("priority"), int) and entry["priority"] in PRIORITY_NAMES:
        return PRIORITY_NAMES[entry["priority"]]
    return str(entry.get("priority_name"))


def _entries(summary: dict, list_key: str, key: Callable[[dict], str]) -> tuple[dict, Optional[str]]:
    """The entries of a list section by name, or the reason the summary gives for not having it."""
    section = summary.get(list_key)
    reason = unavailable_reason(section)
    if reason:
        return {}, reason
    if section is None and list_key not in summary:
        return {}, f"no {list_key} in this run's summary"
    return {key(e): e for e in section or []}, None


def _reroutes_reason(summary: dict) -> Optional[str]:
    return unavailable_reason(summary.get("reroutes"))


def _figure_in(summary: dict, entry: Optional[dict], section_reason: Optional[str], figure: str,
               get: FigureGetter) -> Figure:
    if section_reason:
        return Figure(None, section_reason)
    if entry is None:
        return NOTHING  # not in that run
    reroutes_reason = _reroutes_reason(summary)
    if figure == "reroutes" and reroutes_reason:
        return Figure(None, reroutes_reason)  # counts come from the same analysis: never a 0 that means "unknown"
    return get(entry)


def _missing(summary: dict, key: str) -> Figure:
    schema = summary.get("schema")
    return Figure(None, f"no {key} in this run's summary{f' ({schema})' if schema else ''}")


def _section(summary: dict, key: str) -> tuple[Any, Optional[Figure]]:
    """A top-level section, or the Figure to show instead (n/a: marked unavailable or not in this summary)."""
    if key not in summary:
        return None, _missing(summary, key)
    reason = unavailable_reason(summary[key])
    return summary[key], (Figure(None, reason) if reason else None)


def _longest_reroute(summary: dict) -> Figure:
    reroutes, instead = _section(summary, "reroutes")
    if instead:
        return instead
    times = [r["reroute_time_ns"] for r in reroutes or [] if r.get("reroute_time_ns") is not None]
    return Figure(max(times) / MS) if times else NOTHING


def _episodes(summary: dict, run: Optional["RunInfo"] = None) -> Figure:
    """How many congestion episodes the routers' events tell of (from the event log); n/a for our router with
    congestion-awareness off (its monitor does not run: 0 would say it found none)."""
    if run is not None and run.congestion_aware == "off":
        return Figure(None, MONITOR_OFF)
    episodes, instead = _section(summary, "episodes")
    return instead or Figure(float(len(episodes or [])))


def _router_drops(summary: dict, priority: Optional[str] = None) -> Figure:
    """Messages the routers dropped (their metrics), in all or of one priority (per-node reasons such as
    no_route count in all only)."""
    drops, instead = _section(summary, "router_drops")
    if instead:
        return instead
    return Figure(float(sum(d.get("dropped") or 0 for d in drops or []
                            if priority is None or d.get("priority_name") == priority)))


def _router_memory(summary: dict) -> Figure:
    """The largest resident memory of any router (its metrics), MB."""
    resources, instead = _section(summary, "resources")
    if instead:
        return instead
    return _lookup(resources, "rss_bytes_max", scale=1e6)


def _run_extras() -> list[tuple[str, str, Callable[[dict, Optional["RunInfo"]], Figure], Optional[bool]]]:
    return [
        ("longest reroute time", "ms", lambda s, _run: _longest_reroute(s), True),
        ("congestion episodes", "", _episodes, None),
        ("router drops", "msgs", lambda s, _run: _router_drops(s), True),
        ("router memory max", "MB", lambda s, _run: _router_memory(s), True),
    ]


def compare_rows(*summaries: dict, runs: Sequence["RunInfo"] = ()) -> list[Row]:
    """Every figure of every group, one value per summary (the first is the reference); ``runs``: what the
    runs' manifests say (:func:`run_info`, in the same order), where a figure depends on it."""
    if len(summaries) < 2:
        raise CompareError("compare needs two or more runs")
    infos: list[Optional[RunInfo]] = list(runs) if runs else [None] * len(summaries)
    rows: list[Row] = []
    overall = [(s.get("overall") if isinstance(s.get("overall"), dict) else None,
                unavailable_reason(s.get("overall"))
                or (None if "overall" in s else "no overall in this run's summary"))
               for s in summaries]
    for figure, unit, get, lower in _figures():
        values = tuple(_figure_in(s, entry, reason, figure, get) for s, (entry, reason) in zip(summaries, overall))
        rows.append(Row("run", "all traffic", figure, values, unit, lower))
    for figure, unit, get_run, lower in _run_extras():
        rows.append(Row("run", "all traffic", figure, tuple(get_run(s, r) for s, r in zip(summaries, infos)), unit,
                        lower))
    for group, key, list_key in (("priority", _priority_key, "priorities"), ("flow", lambda e: e["flow"], "flows")):
        per_run = [_entries(s, list_key, key) for s in summaries]
        names = sorted(set().union(*(entries for entries, _ in per_run)), key=str)
        for name in names:
            for figure, unit, get, lower in _figures():
                values = tuple(_figure_in(s, entries.get(name), reason, figure, get)
                               for s, (entries, reason) in zip(summaries, per_run))
                rows.append(Row(group, str(name), figure, values, unit, lower))
            if group == "priority":
                rows.append(Row(group, str(name), "router drops",
                                tuple(Figure(None, reason) if reason else
                                      NOTHING if name not in entries else _router_drops(s, str(name))
                                      for s, (entries, reason) in zip(summaries, per_run)), "msgs"))
    return rows


@dataclass(frozen=True)
class PathRow:
    """The paths one flow took in each run, in order (from summary ``flows[].paths``); ``reasons[i]`` says why
    run ``i`` has none when its summary does not provide them."""

    flow: str
    paths: tuple[Optional[tuple[str, ...]], ...]
    reasons: tuple[Optional[str], ...] = field(default=())

    def reason_of(self, i: int) -> Optional[str]:
        return self.reasons[i] if i < len(self.reasons) else None

    def verdict_of(self, i: int) -> str:
        ref, other = self.paths[0], self.paths[i]
        if ref is None or other is None:
            return ""
        return "same" if ref == other else "differs"

    @property
    def verdicts(self) -> tuple[str, ...]:
        return tuple(self.verdict_of(i) for i in range(1, len(self.paths)))

    @property
    def a(self) -> Optional[tuple[str, ...]]:
        return self.paths[0]

    @property
    def b(self) -> Optional[tuple[str, ...]]:
        return self.paths[1]

    @property
    def verdict(self) -> str:
        return self.verdict_of(1)


def _taken(entry: Optional[dict], section_reason: Optional[str]) -> tuple[Optional[tuple[str, ...]], Optional[str]]:
    if section_reason:
        return None, section_reason
    if not entry:
        return None, None  # not in that run
    if "paths" not in entry:
        return None, "no flows[].paths in this run's summary"
    reason = unavailable_reason(entry["paths"])
    if reason:
        return None, reason
    return tuple(p["path"] for p in entry["paths"] or []), None


def path_rows(*summaries: dict) -> list[PathRow]:
    """Per flow, the sequence of paths it took in each run (the same topology on two backends must agree)."""
    per_run = [_entries(s, "flows", lambda e: e["flow"]) for s in summaries]
    names = sorted(set().union(*(entries for entries, _ in per_run)), key=str)
    rows = []
    for name in names:
        taken = [_taken(entries.get(name), reason) for entries, reason in per_run]
        rows.append(PathRow(name, tuple(t for t, _ in taken), tuple(r for _, r in taken)))
    return rows


# -- the runs: labels and scenarios -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunInfo:
    """One run as compare shows it."""

    run_dir: str
    run_id: str
    label: str
    router_driver: Optional[str]  # "testbed" for runs from before router drivers; None without a manifest
    congestion_aware: Optional[str]  # "on", "off", "mixed" (per node), None when unknown or not our router
    topology: Optional[str]
    schema: Optional[str]
    manifest: Optional[dict] = field(default=None, repr=False, compare=False)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def summary_problems(summary: Any) -> list[str]:
    """What in a summary compare cannot read (its shape, not its schema version: older summaries lack keys,
    which compare shows as n/a): every section and entry compare reads must be of the right kind."""
    if not isinstance(summary, dict):
        return [f"it is {_kind(summary)}, not an object"]
    problems: list[str] = []

    def section(key: str, kind: type) -> Any:
        value = summary.get(key)
        if value is None or unavailable_reason(value):
            return None
        if not isinstance(value, kind):
            problems.append(f"{key} is {_kind(value)}, not {_kind(kind())}")
            return None
        return value

    def entries(key: str, value: Any, needs: tuple[str, ...] = ()) -> list:
        good = []
        for i, entry in enumerate(value or []):
            if not isinstance(entry, dict):
                problems.append(f"{key}[{i}] is {_kind(entry)}, not an object")
            elif needs and not any(isinstance(entry.get(n), (str, int)) and not isinstance(entry.get(n), bool)
                                   for n in needs):
                problems.append(f"{key}[{i}] has no {' or '.join(repr(n) for n in needs)}")
            else:
                good.append(entry)
        return good

    for key in ("overall", "resources", "router"):
        section(key, dict)
    entries("priorities", section("priorities", list), ("priority", "priority_name"))
    for key in ("reroutes", "router_drops", "episodes"):
        entries(key, section(key, list))
    for i, flow in enumerate(entries("flows", section("flows", list), ("flow",))):
        paths = flow.get("paths")
        if paths is None or unavailable_reason(paths):
            continue
        if not isinstance(paths, list):
            problems.append(f"flows[{i}].paths is {_kind(paths)}, not a list")
            continue
        for j, p in enumerate(paths):
            if not isinstance(p, dict) or not isinstance(p.get("path"), str):
                problems.append(f"flows[{i}].paths[{j}] is not {{path, messages}}")
    return problems


def load_summary(run_dir: str) -> dict:
    """A run's summary.json; CompareError (naming the file) when the path is not a results folder (neither
    manifest.json nor report/summary.json in it), the run is not analysed, or its summary is not JSON or not of
    the shape compare reads."""
    folder = Path(run_dir)
    path = folder / LAYOUT.summary
    if not folder.is_dir() or not (path.exists() or (folder / LAYOUT.manifest).exists()):
        why = "does not exist" if not folder.exists() else "is not a folder" if not folder.is_dir() else \
            "has neither manifest.json nor report/summary.json"
        raise CompareError(f"{run_dir} is not a results folder ({why}): give a run's folder, "
                           "results/<run-id>")
    if not path.exists():
        raise CompareError(f"{path} does not exist: run `testbed analyze {run_dir}` first")
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CompareError(f"{path} is not readable JSON ({exc}): run `testbed analyze {run_dir}` again") from None
    problems = summary_problems(summary)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CompareError(f"{path} is not a testbed summary compare can read: {problems[0]}{more}: run "
                           f"`testbed analyze {run_dir}` again")
    return summary


def _load_manifest(run_dir: str) -> Optional[dict]:
    try:
        manifest = json.loads((Path(run_dir) / LAYOUT.manifest).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _resolved_spec(manifest: Optional[dict]) -> dict:
    spec = (manifest or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def _topology(manifest: Optional[dict]) -> dict:
    """The topology as written, from the resolved spec of the manifest (``spec.spec``)."""
    spec = _resolved_spec(manifest).get("spec")
    return spec if isinstance(spec, dict) else {}


def _driver_name(manifest: Optional[dict], summary: dict) -> Optional[str]:
    """The run's router driver as analysis reads it from the manifest (:func:`spark.routerdriver.read_router_driver`),
    else the summary's ``router.driver``; "testbed" (our router) for a manifest from before drivers; None with
    neither."""
    if manifest is not None:
        driver, _problems = read_router_driver(manifest)
        if driver.recorded:
            return driver.name
    router = summary.get("router")
    if isinstance(router, dict) and router.get("driver"):
        return str(router["driver"])
    return "testbed" if manifest is not None else None


def _congestion_aware(manifest: Optional[dict]) -> Optional[str]:
    settings = _resolved_spec(manifest).get("router_settings")
    if not isinstance(settings, dict):
        return None
    states = {s.get("congestion_aware") for s in settings.values() if isinstance(s, dict)} - {None}
    if not states:
        return None
    return ("on" if states == {True} else "off") if len(states) == 1 else "mixed"


def _duration(manifest: Optional[dict]) -> Optional[str]:
    """How long the run was asked to last: run --duration (manifest options), else the topology's."""
    options = (manifest or {}).get("options")
    ns = options.get("duration_ns") if isinstance(options, dict) else None
    if isinstance(ns, (int, float)) and ns > 0:
        return format_duration(int(ns))
    written = _topology(manifest).get("duration")
    return None if written is None else str(written)


def _backend(manifest: Optional[dict]) -> Optional[str]:
    backend = (manifest or {}).get("backend") or ((manifest or {}).get("options") or {}).get("backend")
    return str(backend) if backend else None


def _label_parts(manifest: Optional[dict], driver: Optional[str], aware: Optional[str]) -> list[Optional[str]]:
    """What a default label may name, in order: topology, router driver, congestion-awareness (our router),
    backend, duration."""
    return [_topology(manifest).get("name"), driver, None if aware is None else f"aware {aware}",
            _backend(manifest), _duration(manifest)]


def _default_labels(run_ids: list[str], manifests: list[Optional[dict]], drivers: list[Optional[str]],
                    aware: list[Optional[str]]) -> list[str]:
    """Each run named by what differs between the runs (of topology, router, congestion-awareness, backend,
    duration: "aware on" / "aware off" for two runs of our router, "testbed aware off" / "zenoh" when the router
    differs too); a run without a manifest, or when nothing of these differs, by its run id."""
    parts = [_label_parts(m, d, a) if m is not None else None for m, d, a in zip(manifests, drivers, aware)]
    known = [p for p in parts if p is not None]
    differs = [i for i in range(len(known[0]) if known else 0) if len({p[i] for p in known}) > 1]
    labels = []
    for run_id, p in zip(run_ids, parts):
        words = [p[i] for i in differs if p[i]] if p is not None else []
        labels.append(" ".join(words) or run_id)
    return labels


def _unique(labels: list[str], run_ids: list[str]) -> list[str]:
    """Default labels made unique: a repeated one gets its run id, and a number if that is not enough."""
    counts = {label: labels.count(label) for label in labels}
    labels = [f"{label} ({run_id})" if counts[label] > 1 and run_id != label else label
              for label, run_id in zip(labels, run_ids)]
    seen: dict[str, int] = {}
    unique = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        unique.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return unique


def run_info(run_dirs: Sequence[str], summaries: Sequence[dict],
             labels: Optional[Sequence[Optional[str]]] = None) -> list[RunInfo]:
    """Each run's label (given, else derived from its manifest: router driver, congestion-awareness for our
    router, else its run id) and what compare shows about it."""
    manifests = [_load_manifest(d) for d in run_dirs]
    run_ids = [str(s.get("run_id") or (m or {}).get("run_id") or Path(d).name)
               for d, s, m in zip(run_dirs, summaries, manifests)]
    drivers = [_driver_name(m, s) for m, s in zip(manifests, summaries)]
    aware = [_congestion_aware(m) if driver == "testbed" else None for m, driver in zip(manifests, drivers)]
    derived = _unique(_default_labels(run_ids, manifests, drivers, aware), run_ids)
    given = list(labels) if labels else [None] * len(run_dirs)
    chosen = [g or d for g, d in zip(given, derived)]
    if len(set(chosen)) != len(chosen):
        repeated = sorted({label for label in chosen if chosen.count(label) > 1})
        raise CompareError(f"labels must differ: {', '.join(repr(r) for r in repeated)} names more than one run")
    return [RunInfo(d, r, label, drv, a, _topology(m).get("name"), s.get("schema"), m)
            for d, r, label, drv, a, m, s in zip(run_dirs, run_ids, chosen, drivers, aware, manifests, summaries)]


def _traffic_names(traffic: Any) -> dict[str, Any]:
    return {str(t.get("name") or t.get("profile") or i): t for i, t in enumerate(traffic or []) if isinstance(t, dict)}


def scenario_differences(reference: Optional[dict], other: Optional[dict]) -> list[str]:
    """What makes two runs not the same scenario, from their manifests' resolved specs (nothing when either has
    no manifest: nothing to tell)."""
    ref, oth = _topology(reference), _topology(other)
    if not ref or not oth:
        return []
    found = []
    if ref.get("name") != oth.get("name"):
        found.append(f"topology name ({ref.get('name')} vs {oth.get('name')})")
    if (ref.get("traffic") or []) != (oth.get("traffic") or []):
        a, b = _traffic_names(ref.get("traffic")), _traffic_names(oth.get("traffic"))
        detail = [f"{n} only in the reference" for n in a if n not in b]
        detail += [f"{n} not in the reference" for n in b if n not in a]
        detail += [f"{n} differs" for n in a if n in b and a[n] != b[n]]
        found.append(f"traffic ({'; '.join(detail)})" if detail else "traffic")
    if (ref.get("scenario") or []) != (oth.get("scenario") or []):
        found.append(f"scenario ({len(ref.get('scenario') or [])} vs {len(oth.get('scenario') or [])} timeline "
                     "entries)" if len(ref.get("scenario") or []) != len(oth.get("scenario") or []) else "scenario")
    return found


def _named(run: RunInfo) -> str:
    return run.label if run.run_id in run.label else f"{run.label} ({run.run_id})"


def scenario_warnings(runs: Sequence[RunInfo]) -> list[str]:
    """One line per run that is not the same scenario as the reference, naming what differs."""
    ref = runs[0]
    warnings = []
    for run in runs[1:]:
        differs = scenario_differences(ref.manifest, run.manifest)
        if differs:
            warnings.append(f"{_named(run)} is not the same scenario as {_named(ref)}: "
                            f"{', '.join(differs)} differ{'s' if len(differs) == 1 else ''}")
    return warnings


# -- rendering ------------------------------------------------------------------------------------------------------


def _fmt_value(value: Optional[float], unit: str) -> str:
    if value is None:
        return "—"
    if unit in ("msgs", "") and float(value).is_integer():
        return f"{int(value)}"
    return f"{value:.3f}{' ' + unit if unit else ''}" if unit != "%" else f"{value:.3f}%"


def _fmt_change(change: Optional[float], unit: str) -> str:
    if change is None:
        return ""
    # a change of a percentage is in percentage points
    text = f"{abs(change):.3f} pt" if unit == "%" else _fmt_value(abs(change), unit)
    return ("+" if change >= 0 else "−") + text


def _change_text(r: Row, i: int) -> str:
    """Run ``i``'s change against the reference with its verdict (``−53.380 pt better``), on the console and the
    page alike; empty without a verdict."""
    verdict = r.verdict_of(i)
    return f"{_fmt_change(r.change_of(i), r.unit)} {verdict}".strip() if verdict else ""


def tolerance_text() -> str:
    """What gets no verdict, in words (under the table and on the page)."""
    floors = " / ".join(f"{v:g} {'percentage point' if u == '%' else u}" for u, v in ABSOLUTE_TOLERANCE.items() if v)
    return (f"no verdict for a change within {RELATIVE_TOLERANCE:.0%} of the reference's value or {floors}, "
            "whichever is larger, nor for reroutes or congestion episodes (neither better nor worse)")


def _fmt_paths(paths: Optional[tuple[str, ...]]) -> str:
    return "—" if paths is None else (" then ".join(paths) or "no complete path")


class _Notes:
    """The reasons behind "n/a", numbered once each per run (footnotes of the table)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def mark(self, label: str, reason: str) -> int:
        if (label, reason) not in self.items:
            self.items.append((label, reason))
        return self.items.index((label, reason)) + 1


def _cell_text(fig: Figure, unit: str, label: str, notes: _Notes) -> str:
    if fig.reason is not None:
        return f"n/a[{notes.mark(label, fig.reason)}]"
    return _fmt_value(fig.value, unit)


def _letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"R{i + 1}"


def render_text(rows: Sequence[Row], runs: Sequence[RunInfo], paths: Sequence[PathRow] = ()) -> str:
    """The table (the reference first, a change column per other run), each flow's paths per run, and the
    reasons behind every "n/a" as numbered notes. Two runs: columns named by their labels; more: by letter
    (A the reference), with a legend."""
    labels = [r.label for r in runs]
    notes = _Notes()
    cells = [[_cell_text(v, r.unit, label, notes) for v, label in zip(r.values, labels)] for r in rows]
    lines = []
    if len(runs) == 2:
        heads, change_heads = labels, ["change"]
    else:
        heads = [_letter(i) for i in range(len(runs))]
        change_heads = [f"{h} vs A" for h in heads[1:]]
        lines += [f"{h}: {r.label}{'' if r.run_id in r.label else f' ({r.run_id})'}"
                  f"{'  (the reference)' if i == 0 else ''}" for i, (h, r) in enumerate(zip(heads, runs))]
    widths = [max([12, len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]
    changes = [[_change_text(r, i) for i in range(1, len(runs))] for r in rows]
    change_widths = [max([7, len(h)] + [len(c[i]) for c in changes]) for i, h in enumerate(change_heads)]
    head = f"{'':10} {'':18} {'figure':22} " + " ".join(f"{h:>{w}}" for h, w in zip(heads, widths))
    lines.append((head + "  " + "  ".join(f"{h:{w}}" for h, w in zip(change_heads, change_widths))).rstrip())
    for r, c, changed in zip(rows, cells, changes):
        line = f"{r.group:10} {r.name[:18]:18} {r.figure:22} " + " ".join(f"{v:>{w}}" for v, w in zip(c, widths))
        lines.append((line + "  " + "  ".join(f"{v:{w}}" for v, w in zip(changed, change_widths))).rstrip())
    label_width = max(10, *(len(label) for label in labels))
    for p in paths:
        for i, label in enumerate(labels):
            reason = p.reason_of(i)
            taken = f"n/a[{notes.mark(label, reason)}]" if reason else _fmt_paths(p.paths[i])
            lead = f"{'paths':10} {p.flow[:18]:18}" if i == 0 else f"{'':10} {'':18}"
            lines.append(f"{lead} {label:>{label_width}}: {taken}  {p.verdict_of(i) if i else ''}".rstrip())
    for n, (label, reason) in enumerate(notes.items, 1):
        lines.append(f"[{n}] n/a in {label}: {reason}")
    lines.append(tolerance_text())
    return "\n".join(lines)


def render_json(rows: Sequence[Row], runs: Sequence[RunInfo], paths: Sequence[PathRow] = (),
                warnings: Sequence[str] = (), html_path: Optional[str] = None) -> dict:
    """Every run's figures; values in the row's unit (ms, %, messages), null with ``reason`` where a run's
    summary does not provide the figure, null without one where there was nothing to measure."""
    labels = [r.label for r in runs]

    def figure(fig: Figure) -> dict:
        return {"value": fig.value, "available": fig.available, "reason": fig.reason}

    return {
        "reference": labels[0],
        "runs": [{"label": r.label, "run_id": r.run_id, "run_dir": r.run_dir, "router_driver": r.router_driver,
                  "congestion_aware": r.congestion_aware, "topology": r.topology, "summary_schema": r.schema}
                 for r in runs],
        "warnings": list(warnings),
        "figures": [{"group": r.group, "name": r.name, "figure": r.figure, "unit": r.unit,
                     "lower_is_better": r.lower_is_better, "tolerance": r.tolerance,
                     "runs": {label: figure(v) for label, v in zip(labels, r.values)},
                     "changes": {label: {"change": r.change_of(i), "verdict": r.verdict_of(i)}
                                 for i, label in enumerate(labels) if i}} for r in rows],
        "paths": [{"flow": p.flow,
                   "runs": {label: {"paths": list(p.paths[i]) if p.paths[i] is not None else None,
                                    "available": p.reason_of(i) is None, "reason": p.reason_of(i)}
                            for i, label in enumerate(labels)},
                   "verdicts": {label: p.verdict_of(i) for i, label in enumerate(labels) if i}} for p in paths],
        "html": html_path,
    }


def render_html(rows: Sequence[Row], runs: Sequence[RunInfo], paths: Sequence[PathRow] = (),
                warnings: Sequence[str] = ()) -> str:
    labels = [r.label for r in runs]
    esc = html.escape
    notes = _Notes()

    def value_cell(fig: Figure, unit: str, label: str) -> str:
        if fig.reason is not None:
            n = notes.mark(label, fig.reason)
            return f"<td class='num na' title='{esc(fig.reason, quote=True)}'>n/a<sup>{n}</sup></td>"
        return f"<td class='num'>{esc(_fmt_value(fig.value, unit))}</td>"

    def change_cell(r: Row, i: int) -> str:
        return f"<td class='{r.verdict_of(i)}'>{esc(_change_text(r, i))}</td>"

    body = "".join(
        f"<tr><td>{esc(r.group)}</td><td>{esc(r.name)}</td><td>{esc(r.figure)}</td>"
        + "".join(value_cell(v, r.unit, label) for v, label in zip(r.values, labels))
        + "".join(change_cell(r, i) for i in range(1, len(runs))) + "</tr>\n" for r in rows)

    def path_cell(p: PathRow, i: int) -> str:
        reason = p.reason_of(i)
        if reason:
            n = notes.mark(labels[i], reason)
            return f"<td class='na' title='{esc(reason, quote=True)}'>n/a<sup>{n}</sup></td>"
        verdict = p.verdict_of(i) if i else ""
        tag = f" <span class='tag'>({esc(verdict)})</span>" if verdict else ""
        return f"<td class='{'worse' if verdict == 'differs' else ''}'>{esc(_fmt_paths(p.paths[i]))}{tag}</td>"

    path_body = "".join(f"<tr><td>{esc(p.flow)}</td>" + "".join(path_cell(p, i) for i in range(len(runs)))
                        + "</tr>\n" for p in paths)
    run_list = "".join(
        f"<li><b>{esc(r.label)}</b>{' (reference)' if i == 0 else ''}: run {esc(r.run_id)}"
        f"{', router ' + esc(r.router_driver) if r.router_driver else ''}"
        f"{', congestion-aware ' + esc(r.congestion_aware) if r.congestion_aware else ''}"
        f"{', topology ' + esc(r.topology) if r.topology else ''}</li>" for i, r in enumerate(runs))
    heads = "".join(f"<th>{esc(label)}</th>" for label in labels)
    change_heads = "".join(f"<th>change<br>{esc(label)}</th>" for label in labels[1:])
    warning_html = "".join(f"<p class='warning'>warning: {esc(w)}</p>" for w in warnings)
    notes_html = "".join(f"<li value='{n}'>n/a in <b>{esc(label)}</b>: {esc(reason)}</li>"
                         for n, (label, reason) in enumerate(notes.items, 1))
    title = " vs ".join(labels)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>testbed: {esc(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; }} td.num {{ text-align: right; font-family: monospace; }}
td.num, td.better, td.worse {{ white-space: nowrap; }} td.better {{ color: #070; }} td.worse {{ color: #a00; }}
td.na {{ color: #777; }} .tag {{ color: #555; }}
p.warning {{ background: #fff3cd; border: 1px solid #e0c36a; padding: 4px 8px; }}
</style></head><body>
<h1>Comparison</h1>
<ul>{run_list}</ul>
{warning_html}<p>Each "change" column says whether that run is better or worse than the reference, the first run
(by how much, in the figure's unit); {esc(tolerance_text())}. "n/a": the run's summary does not provide the
figure (the note says why); "—": nothing to measure (not in that run, or no reroute).</p>
<table><tr><th>group</th><th>name</th><th>figure</th>{heads}{change_heads}</tr>
{body}</table>
<h2>Paths</h2>
<p>The paths each flow took in each run, in order (a run of messages on one path each); "same" / "differs"
against the reference.</p>
<table><tr><th>flow</th>{heads}</tr>
{path_body}</table>
<h2>Notes</h2>
<ol>{notes_html or '<li>none</li>'}</ol>
</body></html>
"""


# -- the command ----------------------------------------------------------------------------------------------------


def _choose_labels(count: int, labels: Optional[Sequence[str]], label_a: Optional[str],
                   label_b: Optional[str]) -> Optional[list[Optional[str]]]:
    if labels and (label_a or label_b):
        raise CompareError("give either --label (once per run) or --label-a/--label-b, not both")
    if labels:
        if len(labels) != count:
            raise CompareError(f"--label given {len(labels)} time{'s' if len(labels) != 1 else ''} for {count} runs: "
                               "give one per run, in the order of the runs")
        return list(labels)
    if label_a or label_b:
        return [label_a, label_b] + [None] * (count - 2)
    return None


def compare_runs(run_dirs: Sequence[str], out: Optional[str] = None, labels: Optional[Sequence[str]] = None,
                 label_a: Optional[str] = None, label_b: Optional[str] = None, as_json: bool = False) -> int:
    """Compare two or more analysed runs, the first the reference; print the table (or JSON with
    ``as_json``) and write compare.html (``out``, default: the current folder's compare.html, never inside a
    run's folder unless asked). Exit 0, or 2 on bad input."""
    try:
        if len(run_dirs) < 2:
            raise CompareError(f"compare needs two or more analysed runs, got {len(run_dirs)}")
        chosen = _choose_labels(len(run_dirs), labels, label_a, label_b)
        summaries = [load_summary(run_dir) for run_dir in run_dirs]
        runs = run_info(run_dirs, summaries, chosen)
    except CompareError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    warnings = scenario_warnings(runs)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    rows = compare_rows(*summaries, runs=runs)
    paths = path_rows(*summaries)
    target = Path(out) if out else Path.cwd() / "compare.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_html(rows, runs, paths, warnings))
    if as_json:
        print(json.dumps(render_json(rows, runs, paths, warnings, str(target)), indent=2), flush=True)
    else:
        print(render_text(rows, runs, paths), flush=True)
        print(f"comparison: {target}", flush=True)
    return EXIT_OK


def compare_command(run_a: str, run_b: str, out: Optional[str] = None, label_a: Optional[str] = None,
                    label_b: Optional[str] = None) -> int:
    """Two runs (kept for callers of the two-run form): ``compare_runs([run_a, run_b], ...)``."""
    return compare_runs([run_a, run_b], out=out, label_a=label_a, label_b=label_b)
