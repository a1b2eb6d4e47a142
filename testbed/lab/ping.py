"""`testbed ping LAB`: does every router reach every other through the router under test? A matrix.

Kernel forwarding is off in every node, so an ICMP ping only crosses one link; reachability across the lab is
the routers' work. The check is theirs too: on every router node at once, ``python -m traffic.ping`` (the
node's copy of traffic/, as deployed by `testbed up --routers`) opens a session to its router with the lab's
client library and pings every other router node by publish/subscribe (testbed/ping/<to>/<from>, answered on
testbed/pong/<from>/<to>), retrying until each answers or the time-out. Each cell is the first answer's round
trip, or unreachable.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Optional

from testbed import proc
from testbed.lab import state as labstate
from testbed.backends import get_backend
from testbed.lab.inspect import lab_of
from testbed.trafficplanner import env_for, in_code_dir


class PingRefused(ValueError):
    """No routers to ping through (exit 2): a lab of `testbed up` without `--routers`, or a run's lab."""


@dataclass
class PingMatrix:
    lab: str
    driver: str
    nodes: list[str]
    #: sender -> receiver -> round trip in ms (None: no answer)
    rtt_ms: dict[str, dict[str, Optional[float]]]
    #: a node whose check could not run, and why
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def unreachable(self) -> list[tuple[str, str]]:
        return [(a, b) for a in self.nodes for b in self.nodes
                if a != b and (self.rtt_ms.get(a) or {}).get(b) is None]

    @property
    def ok(self) -> bool:
        return not self.unreachable and not self.errors

    def to_json(self) -> dict:
        return {**asdict(self), "ok": self.ok, "unreachable": [list(p) for p in self.unreachable]}

    def lines(self) -> list[str]:
        pairs = len(self.nodes) * (len(self.nodes) - 1)
        verdict = "all reachable" if self.ok else f"{len(self.unreachable)} of {pairs} pairs unreachable"
        out = [f"ping lab {self.lab} through its {self.driver} routers ({len(self.nodes)} routers, {pairs} pairs): "
               f"{verdict}", "round trip in ms, from (row) to (column); x: no answer"]
        width = max([len(n) for n in self.nodes] + [7])
        out.append(" " * width + "".join(f"{n:>{width + 1}}" for n in self.nodes))
        for a in self.nodes:
            cells = []
            for b in self.nodes:
                value = None if a == b else (self.rtt_ms.get(a) or {}).get(b)
                cells.append("-" if a == b else "x" if value is None else f"{value:.1f}")
            out.append(f"{a:<{width}}" + "".join(f"{c:>{width + 1}}" for c in cells))
        for node, error in self.errors.items():
            out.append(f"{node}: {error}")
        return out


def ping_lab(state: labstate.LabState, timeout_s: float = 30.0) -> PingMatrix:
    lab = lab_of(state)
    if state.run_dir and state.owner_alive():
        raise PingRefused(f"lab {state.name} is held by {state.describe_holder()}: pinging would add traffic to "
                          "its experiment")
    if not state.routers:
        raise PingRefused(f"no router runs in lab {state.name}: it was built with shaped wires only; "
                          f"`testbed down {state.name}` and `testbed up --routers FILE`")
    routers = state.routers
    nodes = list(routers["nodes"])
    backend = get_backend(lab.backend)

    def check(node: str):
        info = routers["nodes"][node]
        argv = in_code_dir([info["python"], "-m", "traffic.ping", "--name", node,
                            "--peers", ",".join(n for n in nodes if n != node), "--router", info["client_address"],
                            "--client", routers["client"], "--timeout", f"{timeout_s:g}"], info["code_dir"])
        result = backend.access(lab, node).run(argv, check=False, timeout=timeout_s + 60,
                                               env=env_for(info["code_dir"]))
        try:
            return node, json.loads(result.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            return node, {"error": f"exit {result.returncode}: {(result.stderr or result.stdout).strip()[-500:]}"}

    answers = dict(proc.in_parallel(check, nodes))
    matrix = PingMatrix(lab.name, routers["driver"], nodes, {})
    for node, answer in answers.items():
        if "error" in answer:
            matrix.errors[node] = answer["error"]
        matrix.rtt_ms[node] = answer.get("rtt_ms") or {}
    return matrix
