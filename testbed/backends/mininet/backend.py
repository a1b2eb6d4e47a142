"""Mininet backend: one Mininet host per node, point-to-point veth links, no switch, no controller.

Each host's network namespace is also given a name (`tbed-<lab>-<node>`, a bind
mount under /run/netns), so that other processes (`testbed exec`, `testbed down`,
`testbed clean`, the shapers) can find it without the Mininet object. Mininet hosts
share this machine's file system: node access copies files, and what a node writes
under its work folder is on this machine (removed by `down` and `clean`).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Optional

from testbed import cgroups, proc
from testbed.backends.base import BackendError, Lab, LabNode
from testbed.backends.localns import netns
from testbed.backends.localns.access import NetnsAccess
from testbed.backends.localns.backend import (NODE_ROOT, NamespaceBackend, address_link, leftover_node_folders,
                                              node_work_dir, prepare_node_namespace, release_appliance,
                                              release_namespaces, remove_node_folders)

MININET_HINT = (
    "Mininet's Python module is missing: install it with `apt-get install mininet` and run testbed "
    "with a Python that sees Debian's dist-packages (the README's setup makes such a virtualenv)"
)


def _import_mininet():
    try:
        from mininet.link import Link
        from mininet.net import Mininet
    except ImportError as exc:
        raise BackendError(f"{MININET_HINT} ({exc}; python is {sys.executable})") from exc
    return Mininet, Link


class MininetBackend(NamespaceBackend):
    name = "mininet"

    def __init__(self) -> None:
        self._net = None

    def check(self, spec) -> None:
        _import_mininet()
        if not shutil.which("mnexec"):
            raise BackendError("Mininet's mnexec is missing: apt-get install mininet")
        for name in self.plan(spec)["netns"]:
            if netns.exists(name):
                raise BackendError(
                    f"network namespace {name} already exists: a lab named {spec.name!r} is up or was "
                    f"left behind; run `testbed down {spec.name}` or `testbed clean`")

    def plan(self, spec) -> dict:
        return {"netns": [netns.name_for(spec.name, node) for node in spec.nodes]}

    def versions(self) -> dict:
        try:
            from mininet.net import VERSION
        except ImportError:
            VERSION = None
        return {"mininet": VERSION}

    def up(self, spec) -> Lab:
        Mininet, Link = _import_mininet()
        from mininet.log import lg

        self.check(spec)
        lg.setLogLevel("warning")
        net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False, waitConnected=False)
        self._net = net
        hosts = {name: net.addHost(name, ip=None) for name in spec.nodes}
        resolved = spec.resolved_links()
        for link in resolved:
            net.addLink(hosts[link.a.node], hosts[link.b.node],
                        intfName1=link.a.ifname, intfName2=link.b.ifname, cls=Link)
        net.build()

        nodes: dict[str, LabNode] = {}
        for name, host in hosts.items():
            ns = netns.name_for(spec.name, name)
            # the node's cgroup (testbed.cgroups) holds its shell, so all that is started from it too
            cgroups.create(ns)
            cgroups.join(ns, host.pid)
            netns.attach(ns, host.pid)
            prepare_node_namespace(ns)
            nodes[name] = LabNode(name, spec.nodes[name].kind, {"netns": ns, "pid": host.pid})
        netns_of = {n: node.handle["netns"] for n, node in nodes.items()}
        links = proc.in_parallel(lambda link: address_link(link, netns_of), resolved)
        return Lab(spec.name, self.name, nodes, links, info=self.versions())

    def let_go(self) -> None:
        """Stop Mininet's host shells (this process's children); release removes the rest."""
        net, self._net = self._net, None
        if net is not None:
            for host in net.hosts:
                host.terminate()

    def release(self, lab_name: str, plan: dict, lab: Optional[dict]) -> list[str]:
        present = [n for n in plan.get("netns", []) if netns.exists(n)]
        appliance_removed = release_appliance(plan)
        # a node's cgroup may hold processes even when its namespace is gone
        removed = [f"process {pid}" for pid in release_namespaces(plan.get("netns", []))]
        removed += [f"namespace {n}" for n in present]
        folder = Path(NODE_ROOT) / lab_name
        if folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(f"node folder {folder}")
        return removed + appliance_removed

    def leftovers(self, live_labs: set[str]) -> list[str]:
        return super().leftovers(live_labs) + [f"node folder {f}" for f in leftover_node_folders(live_labs)]

    def release_leftovers(self, live_labs: set[str]) -> list[str]:
        removed = super().release_leftovers(live_labs)
        return removed + [f"node folder {f}" for f in remove_node_folders(live_labs)]

    def access(self, lab: Lab, node: str) -> NetnsAccess:
        return NetnsAccess(node, netns.handle_netns(lab.node(node)), node_work_dir(lab.name, node))
