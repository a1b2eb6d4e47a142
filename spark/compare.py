"""`testbed compare RUN_A RUN_B`: two analysed runs side by side (e.g. congestion-awareness on
and off): latency and loss per priority and per flow, reroutes — as a text table and one
self-contained `compare.html`."""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from router.codec import PRIORITY_NAMES

__all__ = ["Row", "PathRow", "compare_rows", "path_rows", "compare_command", "render_html"]

MS = 1e6


@dataclass(frozen=True)
class Row:
    group: str  # "priority", "flow", "run"
    name: str
    figure: str
    a: Optional[float]
    b: Optional[float]
    unit: str
    lower_is_better: bool = True

    @property
    def change(self) -> Optional[float]:
        if self.a is None or self.b is None:
            return None
        return self.b - self.a

    @property
    def verdict(self) -> str:
        if self.change is None or abs(self.change) < 1e-9:
            return ""
        better = (self.change < 0) == self.lower_is_better
        return "better" if better else "worse"


def _lat(entry: dict, key: str) -> Optional[float]:
    value = (entry.get("latency") or {}).get(key)
    return None if value is None else value / MS


def _jitter(entry: dict) -> Optional[float]:
    """The p99 of the RFC 3550 estimator over the run (summaries before testbed-summary/2: its last value)."""
    j = entry.get("jitter")
    value = j.get("p99_ns") if isinstance(j, dict) else entry.get("jitter_ns")
    return None if value is None else value / MS


def _figures() -> list[tuple[str, str, Callable[[dict], Optional[float]], bool]]:
    return [
        ("latency p50", "ms", lambda e: _lat(e, "p50_ns"), True),
        ("latency p99", "ms", lambda e: _lat(e, "p99_ns"), True),
        ("latency max", "ms", lambda e: _lat(e, "max_ns"), True),
        ("jitter p99", "ms", _jitter, True),
        ("loss", "%", lambda e: e.get("loss_pct"), True),
        ("delivered", "msgs", lambda e: e.get("delivered"), False),
        ("reroutes", "", lambda e: e.get("reroutes"), True),
    ]


def _priority_key(entry: dict) -> str:
    """A priority's name in the codec's spelling, also for summaries written before names were unified."""
    if isinstance(entry.get("priority"), int) and entry["priority"] in PRIORITY_NAMES:
        return PRIORITY_NAMES[entry["priority"]]
    return str(entry.get("priority_name"))


def compare_rows(a: dict, b: dict) -> list[Row]:
    rows: list[Row] = []
    for figure, unit, get, lower in _figures():
        rows.append(Row("run", "all traffic", figure, get(a["overall"]), get(b["overall"]), unit, lower))
    for group, key, list_key in (("priority", _priority_key, "priorities"), ("flow", lambda e: e["flow"], "flows")):
        entries_a = {key(e): e for e in a.get(list_key, [])}
        entries_b = {key(e): e for e in b.get(list_key, [])}
        for name in sorted(set(entries_a) | set(entries_b), key=str):
            ea, eb = entries_a.get(name, {}), entries_b.get(name, {})
            for figure, unit, get, lower in _figures():
                rows.append(Row(group, str(name), figure, get(ea) if ea else None, get(eb) if eb else None,
                                unit, lower))
    reroute_times = {}
    for label, summary in (("a", a), ("b", b)):
        times = [r["reroute_time_ns"] for r in summary.get("reroutes", []) if r.get("reroute_time_ns") is not None]
        reroute_times[label] = max(times) / MS if times else None
    rows.append(Row("run", "all traffic", "longest reroute time", reroute_times["a"], reroute_times["b"], "ms"))
    return rows


@dataclass(frozen=True)
class PathRow:
    """The paths one flow took in each run, in order (from summary ``flows[].paths``)."""

    flow: str
    a: Optional[tuple[str, ...]]
    b: Optional[tuple[str, ...]]

    @property
    def verdict(self) -> str:
        if self.a is None or self.b is None:
            return ""
        return "same" if self.a == self.b else "differs"


def _taken(entry: Optional[dict]) -> Optional[tuple[str, ...]]:
    if not entry or "paths" not in entry:
        return None  # not in that run, or a summary written before flows had their paths
    return tuple(p["path"] for p in entry["paths"])


def path_rows(a: dict, b: dict) -> list[PathRow]:
    """Per flow, the sequence of paths it took in A and in B (the same topology on two backends must agree)."""
    fa = {e["flow"]: e for e in a.get("flows", [])}
    fb = {e["flow"]: e for e in b.get("flows", [])}
    return [PathRow(name, _taken(fa.get(name)), _taken(fb.get(name))) for name in sorted(set(fa) | set(fb))]


def _fmt_paths(paths: Optional[tuple[str, ...]]) -> str:
    return "—" if paths is None else (" then ".join(paths) or "no complete path")


def _fmt(value: Optional[float], unit: str) -> str:
    if value is None:
        return "—"
    if unit in ("msgs", "") and float(value).is_integer():
        return f"{int(value)}"
    return f"{value:.3f}{' ' + unit if unit else ''}" if unit != "%" else f"{value:.3f}%"


def render_text(rows: list[Row], label_a: str, label_b: str, paths: tuple = ()) -> str:
    lines = [f"{'':10} {'':18} {'figure':22} {label_a[:24]:>24} {label_b[:24]:>24}  change"]
    for r in rows:
        lines.append(f"{r.group:10} {r.name[:18]:18} {r.figure:22} {_fmt(r.a, r.unit):>24} {_fmt(r.b, r.unit):>24}  "
                     f"{r.verdict}")
    for p in paths:
        lines.append(f"{'paths':10} {p.flow[:18]:18} {label_a[:10]:>10}: {_fmt_paths(p.a)}")
        lines.append(f"{'':10} {'':18} {label_b[:10]:>10}: {_fmt_paths(p.b)}  {p.verdict}")
    return "\n".join(lines)


def render_html(rows: list[Row], a: dict, b: dict, label_a: str, label_b: str, paths: tuple = ()) -> str:
    def cell(value: Optional[float], unit: str) -> str:
        return f"<td class='num'>{html.escape(_fmt(value, unit))}</td>"

    path_body = "".join(
        f"<tr class='{'worse' if p.verdict == 'differs' else ''}'><td>{html.escape(p.flow)}</td>"
        f"<td>{html.escape(_fmt_paths(p.a))}</td><td>{html.escape(_fmt_paths(p.b))}</td>"
        f"<td>{html.escape(p.verdict)}</td></tr>" for p in paths)

    body = []
    for r in rows:
        css = {"better": "better", "worse": "worse"}.get(r.verdict, "")
        body.append(f"<tr class='{css}'><td>{html.escape(r.group)}</td><td>{html.escape(r.name)}</td>"
                    f"<td>{html.escape(r.figure)}</td>{cell(r.a, r.unit)}{cell(r.b, r.unit)}"
                    f"<td>{html.escape(r.verdict)}</td></tr>")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>testbed: {html.escape(label_a)} vs {html.escape(label_b)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; }} td.num {{ text-align: right; font-family: monospace; }}
tr.better td:last-child {{ color: #070; }} tr.worse td:last-child {{ color: #a00; }}
</style></head><body>
<h1>Comparison</h1>
<p>A: <b>{html.escape(label_a)}</b> ({html.escape(str(a.get('run_id')))}) &nbsp; B: <b>{html.escape(label_b)}</b>
({html.escape(str(b.get('run_id')))}). "change" says whether B is better or worse than A.</p>
<table><tr><th>group</th><th>name</th><th>figure</th><th>A</th><th>B</th><th>change</th></tr>
{''.join(body)}
</table>
<h2>Paths</h2>
<p>The paths each flow took, in order (a run of messages on one path each).</p>
<table><tr><th>flow</th><th>A</th><th>B</th><th></th></tr>
{path_body}
</table></body></html>
"""


def load_summary(run_dir: str) -> dict:
    path = Path(run_dir) / "report" / "summary.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run `testbed analyze {run_dir}` first")
    return json.loads(path.read_text())


def compare_command(run_a: str, run_b: str, out: Optional[str] = None, label_a: Optional[str] = None,
                    label_b: Optional[str] = None) -> int:
    try:
        a, b = load_summary(run_a), load_summary(run_b)
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", flush=True)
        return 2
    label_a = label_a or a.get("run_id") or run_a
    label_b = label_b or b.get("run_id") or run_b
    rows = compare_rows(a, b)
    paths = tuple(path_rows(a, b))
    print(render_text(rows, label_a, label_b, paths))
    target = Path(out) if out else Path(run_b) / "report" / "compare.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_html(rows, a, b, label_a, label_b, paths))
    print(f"comparison: {target}")
    return 0
