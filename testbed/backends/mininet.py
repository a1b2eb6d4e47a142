"""Mininet backend: one Mininet host per node, point-to-point veth links, no switch, no controller.

Each host's network namespace is also given a name (`tbed-<lab>-<node>`, a bind
mount under /run/netns), so that other processes (`testbed exec`, `testbed down`,
`testbed clean`, the shaping code) can find it without the Mininet object.
"""
from __future__ import annotations

import sys
from testbed import netns, proc
from testbed.backends.base import Lab, LabEnd, LabLink, LabNode

MININET_HINT = (
    "Mininet's Python module is missing: install it with `apt-get install mininet` and run testbed "
    "with a Python that sees Debian's dist-packages (the README's setup makes such a virtualenv)"
)


class BackendError(RuntimeError):
    pass


def netns_name(lab: str, node: str) -> str:
    return f"{netns.PREFIX}{lab}-{node}"


class MininetBackend:
    name = "mininet"

    def __init__(self) -> None:
        self._net = None
        self._netns: list[str] = []

    def planned_netns(self, spec) -> list[str]:
        return [netns_name(spec.name, node) for node in spec.nodes]

    def up(self, spec) -> Lab:
        try:
            from mininet.link import Link
            from mininet.log import lg
            from mininet.net import Mininet
        except ImportError as exc:
            raise BackendError(f"{MININET_HINT} ({exc}; python is {sys.executable})") from exc

        lg.setLogLevel("warning")
        for name in self.planned_netns(spec):
            if netns.exists(name):
                raise BackendError(
                    f"network namespace {name} already exists: a lab named {spec.name!r} is up or was "
                    f"left behind; run `testbed down {spec.name}` or `testbed clean`"
                )
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
            ns = netns_name(spec.name, name)
            netns.attach(ns, host.pid)
            self._netns.append(ns)
            # The measured path must be the router's path: no kernel forwarding between links.
            proc.run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=0"], netns=ns)
            proc.run(["ip", "link", "set", "lo", "up"], netns=ns)
            nodes[name] = LabNode(name, spec.nodes[name].kind, ns, host.pid)

        links: list[LabLink] = []
        for link in resolved:
            ends = []
            for end in (link.a, link.b):
                ns = nodes[end.node].netns
                proc.run(["ip", "addr", "add", str(end.address), "dev", end.ifname], netns=ns)
                proc.run(["ip", "link", "set", end.ifname, "up"], netns=ns)
                ends.append(LabEnd(end.node, ns, end.ifname, str(end.address)))
            links.append(LabLink(link.index, ends[0], ends[1], link.weight,
                                 link.a.egress, link.b.egress))
        return Lab(spec.name, self.name, nodes, links)

    def down(self) -> None:
        """Stop Mininet's hosts, kill anything else left in the namespaces, delete them."""
        net, self._net = self._net, None
        errors: list[str] = []
        if net is not None:
            try:
                for host in net.hosts:
                    host.terminate()
            except Exception as exc:  # keep tearing down whatever happens
                errors.append(f"stopping Mininet hosts: {exc}")
        names, self._netns = self._netns, []
        release_namespaces(names)
        if errors:
            raise BackendError("; ".join(errors))


def release_namespaces(names: list[str]) -> list[int]:
    """Kill every process in the namespaces and delete them (their interfaces go with them).

    Every namespace is tried; if some could not be deleted, the error names them all afterwards.
    """
    killed = netns.kill_processes_in(names)
    errors = []
    for name in names:
        try:
            netns.delete(name)
        except proc.CommandError as exc:
            errors.append(str(exc))
    if errors:
        raise BackendError("; ".join(errors))
    return killed
