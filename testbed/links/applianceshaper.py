"""The shaping of one direction of a link the impairment appliance carries: the one entry point (the same call
at build time and at run time) behind which each feature goes to its provider (testbed.links.provider).

The node's end gets what the host kernel provides (the rate and a pfifo queue: testbed.links.shaping); the
appliance gets the rest, on the egress of its port toward the receiving node:

* impairments only: ``netem`` at the root;
* a queue discipline of the appliance's (fq_codel, cake, red, pie): the rate comes with it, ``htb`` with the
  queue as its leaf, under ``netem`` when there are impairments too (netem's child: a packet is delayed, lost,
  reordered..., then waits for the rate in the queue, whose sojourn time an AQM measures).

A change that keeps the tree's shape is made in place (``tc qdisc change``, ``tc class change``), so packets
already queued stay (netem's with every setting given: impairments.netem_change_args); otherwise, and for a
jitter without a table, the tree is rebuilt.
"""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Optional

from testbed.kernel import KernelCapabilities
from testbed.links import impairments
from testbed.links.appliance import Appliance, Port, blocked_command
from testbed.links.provider import AQM_FEATURES, HOST, split
from testbed.links.shaping import DirectionShaper, TcPlan, htb_class_args
from testbed.spec.resolve import Shaping

NETEM_HANDLE = "1:"
#: the tree of a port with nothing of ours: (netem, rate, queue discipline)
BARE = (False, False, None)
RATE_HANDLE_UNDER_NETEM = "10:"


def appliance_tree(dev: str, shape: Shaping, previous: Optional[Shaping] = None
                   ) -> tuple[tuple, list[list[str]], Optional[list[list[str]]]]:
    """The qdisc tree for ``shape`` on the appliance's device ``dev``: its shape (to tell whether a change can
    be made in place), the commands that build it on a bare device, and those that change it in place from
    ``previous`` (None where netem cannot be changed in place to it: impairments.netem_change_args)."""
    netem = impairments.netem_args(shape)
    aqm = bool(shape.features() & AQM_FEATURES)
    rate = shape.bw_bps
    kind, qargs = impairments.queue_args(shape) if (aqm or rate) else (None, [])
    build: list[list[str]] = []
    change: list[list[str]] = []
    parent = ["root"]
    netem_change = impairments.netem_change_args(shape, previous) if netem else None
    if netem:
        build.append(["tc", "qdisc", "add", "dev", dev, "root", "handle", NETEM_HANDLE, "netem", *netem])
        change.append(["tc", "qdisc", "change", "dev", dev, "root", "handle", NETEM_HANDLE, "netem",
                       *(netem_change or []), "limit", str(impairments.tfifo_limit(shape))])
        parent = ["parent", "1:1"]
    if rate:
        top = RATE_HANDLE_UNDER_NETEM if netem else "1:"
        build.append(["tc", "qdisc", "add", "dev", dev, *parent, "handle", top, "htb", "default", "1"])
        build.append(["tc", "class", "add", "dev", dev, "parent", top, "classid", f"{top}1", "htb",
                      *htb_class_args(rate)])
        change.append(["tc", "class", "change", "dev", dev, "parent", top, "classid", f"{top}1", "htb",
                       *htb_class_args(rate)])
        parent = ["parent", f"{top}1"]
    if kind:
        handle = "20:" if rate else ("10:" if netem else "1:")
        build.append(["tc", "qdisc", "add", "dev", dev, *parent, "handle", handle, kind, *qargs])
        change.append(["tc", "qdisc", "change", "dev", dev, *parent, "handle", handle, kind, *qargs])
    return (bool(netem), bool(rate), kind), build, (None if netem and netem_change is None else change)


class ApplianceDirectionShaper:
    """Shapes traffic leaving a node on a link the appliance carries: ``node_end`` (the host kernel's part at the
    sending node) and ``port`` (the appliance's port toward the receiving node)."""

    def __init__(self, node_end: DirectionShaper, appliance: Appliance, port: Port, sender_port: Port,
                 caps: KernelCapabilities, *, force_appliance: bool = False):
        self.node_end = node_end
        self.appliance = appliance
        self.port = port
        self.sender_port = sender_port
        self.caps = caps
        self.force_appliance = force_appliance

    def install(self, shape: Shaping, appliance_batch: Optional[list] = None) -> TcPlan:
        """At build time: nothing of ours is installed yet on either side. With ``appliance_batch``, the
        appliance's commands (all ``tc``) are added to it instead, for the caller to run with those of the
        lab's other directions as one ``tc -batch`` (Appliance.run_batch: a process inside costs ~0.1 s)."""
        parts = split(shape, self.caps, self.force_appliance)
        host_plan = self.node_end.install(parts.host)
        _, build, _ = appliance_tree(self.port.device, parts.appliance)
        if appliance_batch is None:
            self.appliance.run(build)
        else:
            appliance_batch.extend(build)
        return self._plan(host_plan, parts, build)

    def apply(self, shape: Shaping, previous: Optional[Shaping] = None) -> TcPlan:
        """At run time: replace what is installed (``previous``, if known), in place where the trees keep their
        shape."""
        parts = split(shape, self.caps, self.force_appliance)
        before = split(previous, self.caps, self.force_appliance) if previous is not None else None
        host_plan = self.node_end.apply(parts.host, before.host if before else None)
        tree, build, change = appliance_tree(self.port.device, parts.appliance, before.appliance if before else None)
        installed = self._installed_tree()
        if installed == tree and tree != BARE and change is not None:
            commands = change
        elif installed == BARE:
            commands = build
        else:
            commands = [["tc", "qdisc", "del", "dev", self.port.device, "root"]] + build
        self.appliance.run(commands)
        return self._plan(host_plan, parts, commands)

    def clear(self) -> None:
        self.node_end.clear()
        if self._installed_tree() != BARE:
            self.appliance.run([["tc", "qdisc", "del", "dev", self.port.device, "root"]])

    def set_link_state(self, up: bool) -> None:
        """The sending node's end down or up; while it is down the appliance drops what would go to it (see
        appliance.blocked_command)."""
        if up:
            self.node_end.set_link_state(True)
            self.appliance.run([blocked_command(self.port, False)])
        else:
            self.appliance.run([blocked_command(self.port, True, drained=self.sender_port)])
            self.node_end.set_link_state(False)

    def _installed_tree(self) -> tuple:
        out = self.appliance.run([["tc", "-j", "qdisc", "show", "dev", self.port.device]])[0]
        qdiscs = [q for q in json.loads(out or "[]") if q.get("kind") not in ("ingress",)]
        kinds = {q.get("kind") for q in qdiscs}
        netem = "netem" in kinds
        rate = "htb" in kinds
        leaf = next((q["kind"] for q in qdiscs if q["kind"] not in ("netem", "htb", "noqueue", "pfifo_fast")
                     and not (q["kind"] == "pfifo" and q.get("handle") == "0:")), None)
        return (netem, rate, leaf)

    def _plan(self, host_plan: TcPlan, parts, commands: list[list[str]]) -> TcPlan:
        kernel = self.appliance.record.kernel
        providers = {f: ("host kernel" if p == HOST else f"appliance (user-mode Linux {kernel})")
                     for f, p in parts.providers.items()}
        return replace(host_plan, providers=providers,
                       appliance_commands=tuple(" ".join(c) for c in commands),
                       appliance_port=self.port.device)
