"""``testbed validate FILE [--json]``: check a topology file and show what it resolves to."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, TextIO

from runfolder import units
from .errors import SpecError
from .loader import load_spec
from .models import QueryFlow, SetLinkEvent, ZpubFlow
from .resolve import FEATURES, event_shaping
from .shortened import Shortening, shorten
from .topology import Spec

__all__ = ["validate_command", "shortening", "summary_lines", "resolved_json", "CAPABILITY_NOTES"]

#: What each shaping feature (testbed.spec.resolve.FEATURES) needs from the kernel, for humans.
CAPABILITY_NOTES: Dict[str, str] = {
    "bw": "bw (htb/tbf)",
    "delay": "delay (netem)",
    "jitter": "jitter (netem)",
    "loss": "loss (netem, or iptables statistic)",
    "loss_model": "loss model (netem)",
    "duplicate": "duplicate (netem)",
    "reorder": "reorder (netem)",
    "corrupt": "corrupt (netem)",
    "queue": "queue (qdisc limit)",
    "fq_codel": "fq_codel (qdisc)",
    "cake": "cake (qdisc)",
    "red": "red (qdisc)",
    "pie": "pie (qdisc)",
}


def validate_command(file: Path, json_output: bool = False, out: TextIO = None, err: TextIO = None,
                     duration_ns: Optional[int] = None) -> int:
    """Validate ``file``; print a summary (or JSON) and return 0, or print problems and return 2.
    ``duration_ns``: also list what a run of that length leaves out (``validate --duration``)."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        spec = load_spec(file)
    except SpecError as error:
        for problem in error.problems:
            print(problem, file=err)
        if json_output:
            json.dump({"ok": False, "problems": [vars(p) for p in error.problems]}, out, indent=2)
            out.write("\n")
        return 2
    from testbed.drivers import preflight_problems, resolve_paths

    from testbed.runhere import can_run_here

    spec = resolve_paths(spec, Path(file).resolve().parent)
    problems = preflight_problems(spec)
    if problems:
        for problem in problems:
            print(f"{file}: router driver {spec.router.driver}: {problem}", file=err)
        if json_output:
            json.dump({"ok": False, "problems": [{"file": str(file), "message": p} for p in problems]}, out, indent=2)
            out.write("\n")
        return 2
    shortened = shortening(spec, file, duration_ns)
    here = can_run_here(spec)
    if json_output:
        resolved = resolved_json(spec)
        resolved["this_machine"] = here.to_json()
        if shortened is not None:
            resolved["shortened"] = shortened.to_json()
        json.dump(resolved, out, indent=2)
        out.write("\n")
    else:
        for line in summary_lines(spec) + here.lines():
            print(line, file=out)
        if shortened is not None:
            for line in shortened.lines(f"--duration {units.format_duration(shortened.duration_ns)}"):
                print(line, file=out)
    return 0


def shortening(spec: Spec, file: Path, duration_ns: Optional[int]) -> Optional[Shortening]:
    """What a run of ``duration_ns`` leaves out of the topology ``file`` (None: no duration, or not shorter)."""
    if duration_ns is None:
        return None
    return shorten(spec, duration_ns, str(file), Path(file).read_text(encoding="utf-8"))


def resolved_json(spec: Spec) -> Dict[str, Any]:
    """The spec as written (parsed units), plus everything resolution adds."""
    return {
        "ok": True,
        "spec": spec.model_dump(mode="json", by_alias=True),
        "routers": spec.routers(),
        "hosts": spec.hosts(),
        "router_settings": {n: spec.router_settings(n).model_dump(mode="json") for n in spec.routers()},
        "links": [link.to_dict() for link in spec.resolved_links()],
        "captured_links": spec.captured_links(),
        "features": sorted(spec.features()),
    }


def summary_lines(spec: Spec) -> List[str]:
    fmt = units.format_duration
    routers, hosts, links = spec.routers(), spec.hosts(), spec.resolved_links()
    lines = [f"{spec.name}: {len(routers)} routers, {len(hosts)} hosts, {len(links)} links, run {fmt(spec.duration)}"]
    lines.append(f"router under test: {spec.router.driver} (docs/drivers.md)")
    if spec.description:
        lines.append(f"  {spec.description.strip()}")
    lines.append("links:")
    for link in links:
        lines.append(f"  [{link.index}] {link.describe()}")
    if spec.traffic:
        lines.append("traffic:")
        for flow in spec.traffic:
            if isinstance(flow, ZpubFlow):
                lines.append(f"  {flow.name}: zpub {flow.node} -> {', '.join(flow.subscribers)} "
                             f"{units.format_bandwidth(flow.rate)} every {fmt(flow.tick)} "
                             f"(pub1 {fmt(flow.start_delay)}-{fmt(flow.pub1_stop)}, pub2 from {fmt(flow.pub2_start)})")
            elif isinstance(flow, QueryFlow):
                lines.append(f"  {flow.name}: query {flow.from_} -> {', '.join(q.node for q in flow.queryables)} "
                             f"{flow.per_second:g}/s on {flow.key_expr}, timeout {fmt(flow.timeout)}, "
                             f"{flow.consolidation}, priority {flow.priority.label}")
            else:
                lines.append(f"  {flow.name}: {flow.profile} {flow.from_} -> {', '.join(flow.to)} "
                             f"{units.format_bandwidth(flow.rate)} priority {flow.priority.label}")
    if spec.scenario:
        lines.append("scenario:")
        for event in sorted(spec.scenario, key=lambda e: e.at):
            target = getattr(event, "link", None) or getattr(event, "flow", None) or getattr(event, "node", None)
            detail = ""
            if isinstance(event, SetLinkEvent):
                shaping = egress_shaping_text(event)
                detail = f" {shaping}" + (f" (egress of {event.node})" if event.node else "")
            lines.append(f"  at {fmt(event.at)}: {event.action} {target}{detail}")
    captured = spec.captured_links()
    lines.append(f"capture: {len(captured)} of {len(links)} links, snaplen {spec.capture.snaplen}")
    if spec.expect:
        lines.append("expect:")
        lines.extend(f"  {exp.describe()}" for exp in spec.expect)
    used = spec.features()
    needs = ", ".join(CAPABILITY_NOTES[f] for f in FEATURES if f in used)
    lines.append(f"kernel features needed: {needs or 'none (no shaping)'}")
    return lines


def egress_shaping_text(event: SetLinkEvent) -> str:
    return event_shaping(event).describe()
