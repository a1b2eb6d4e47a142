"""A topology as a containerlab lab (`testbed export --to containerlab`): a ``*.clab.yml`` with its nodes and
links (the interface names as our lab builds them) and a shell script of ``containerlab tools netem set``
commands (https://containerlab.dev/cmd/tools/netem/set/) that gives each direction of each link its delay,
jitter, loss, rate and corruption once the lab is deployed. What netem set cannot express (queue limits, queue
disciplines, duplication, reordering, loss models, jitter distributions and correlations) is named in a comment
beside the command; what containerlab has no place for (weights, traffic, scenario, expectations, the router
under test) in the file's header."""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import List

from runfolder.units import format_duration, format_percent
from testbed.spec import ResolvedEnd, Shaping, Spec

#: the node image of the exported lab when the topology names none: any Linux with iproute2
DEFAULT_IMAGE = "debian:bookworm-slim"


@dataclass(frozen=True)
class ClabExport:
    clab_yaml: str
    netem_script: str


def _netem_flags(shaping: Shaping) -> List[str]:
    """``--delay 5ms --jitter 1ms --loss 0.5 --rate 10000 --corruption 0.1``: what netem set can give."""
    flags: List[str] = []
    if shaping.delay_ns:
        flags += ["--delay", format_duration(shaping.delay_ns)]
    if shaping.jitter_ns:
        flags += ["--jitter", format_duration(shaping.jitter_ns)]
    if shaping.loss_pct and shaping.loss_gemodel is None:
        flags += ["--loss", f"{shaping.loss_pct:g}"]
    if shaping.bw_bps:
        flags += ["--rate", str(max(1, round(shaping.bw_bps / 1000)))]  # kbit/s
    if shaping.corrupt_pct:
        flags += ["--corruption", f"{shaping.corrupt_pct:g}"]
    return flags


def _not_expressible(shaping: Shaping) -> List[str]:
    pct = format_percent
    left = []
    if shaping.queue_packets:
        left.append(f"queue {shaping.queue_packets}")
    if shaping.qdisc is not None:
        left.append(shaping.qdisc.describe())
    if shaping.jitter_distribution:
        left.append(f"distribution {shaping.jitter_distribution}")
    if shaping.delay_correlation_pct:
        left.append(f"delay correlation {pct(shaping.delay_correlation_pct)}")
    if shaping.loss_gemodel is not None:
        left.append(f"loss {shaping.loss_gemodel.describe()}")
    elif shaping.loss_correlation_pct:
        left.append(f"loss correlation {pct(shaping.loss_correlation_pct)}")
    if shaping.duplicate_pct:
        left.append(f"duplicate {pct(shaping.duplicate_pct)}")
    if shaping.reorder is not None and shaping.reorder.pct:
        left.append(shaping.reorder.describe())
    return left


def _direction(end: ResolvedEnd, other: ResolvedEnd, index: int) -> List[str]:
    what = f"# link {index}, {end.node} -> {other.node}: {end.egress.describe()}"
    left = _not_expressible(end.egress)
    if left:
        what += f" (netem set cannot: {', '.join(left)})"
    flags = _netem_flags(end.egress)
    if not flags:
        return [what]
    node = f'"$NODE_PREFIX-{end.node}"'
    return [what, f"containerlab tools netem set -n {node} -i {end.ifname} {' '.join(map(shlex.quote, flags))}"]


def export_containerlab(spec: Spec, source: str, image: str = "") -> ClabExport:
    """The containerlab file and the netem script of ``spec`` (read from ``source``, named in the comments)."""
    links = spec.resolved_links()
    left_out = [what for what, present in (
        ("weight", any(link.weight != 100 for link in links)), ("traffic", spec.traffic),
        ("scenario", spec.scenario), ("expect", spec.expect), ("router settings", True)) if present]
    script_name = f"{spec.name}.netem.sh"
    clab = [f"# Exported by `testbed export --to containerlab` from {source}.",
            f"# Shaping: run {script_name} (beside this file) after `containerlab deploy`.",
            f"# Not exported (containerlab has no place for it): {', '.join(left_out)}.",
            f"name: {spec.name}",
            "topology:",
            "  defaults:",
            "    kind: linux",
            f"    image: {json.dumps(image or spec.image or DEFAULT_IMAGE)}",
            "  nodes:"]
    clab += [f"    {node}: {{}}" + ("  # a host in the topology" if spec.nodes[node].kind == "host" else "")
             for node in spec.nodes]
    if links:
        clab.append("  links:")
        clab += [f"    - endpoints: [{json.dumps(str(link.a))}, {json.dumps(str(link.b))}]" for link in links]
    script = ["#!/bin/sh",
              f"# The shaping of {spec.name} (from {source}) on its containerlab lab, each direction of each link on",
              "# the interface it leaves by: `containerlab tools netem set` (delay, jitter, loss %, rate in kbit/s,",
              "# corruption %). Run it after `containerlab deploy`, as root.",
              "set -e",
              f'NODE_PREFIX="${{NODE_PREFIX:-clab-{spec.name}}}"  # containerlab names a node\'s container '
              "clab-<lab>-<node>"]
    for link in links:
        script += _direction(link.a, link.b, link.index) + _direction(link.b, link.a, link.index)
    return ClabExport("\n".join(clab) + "\n", "\n".join(script) + "\n")
