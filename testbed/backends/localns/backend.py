"""What the Mininet and Docker backends share: every node is a network namespace of this machine,
named ``tbed-<lab>-<node>``, reached from here; links are veth pairs between them.

The kernel probe, the shapers (tc and iptables run in the node), the management path
(a veth per node to this machine, sshd on it) and the removal of leftovers after a crash
are the same for both; how a node is made and entered is each backend's own.
"""
from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from testbed import cgroups, kernel, proc, sweep
from testbed.lab import state as labstate
from testbed.backends.base import (NODE_ROOT, Backend, Lab, LabEnd, LabFault, LabLink, NodeAccess,  # noqa: F401
                                   node_work_dir)
from testbed.backends.localns import mgmt, netns
from testbed.links import appliance
from testbed.links.shaping import DirectionShaper


def probe_this_kernel() -> kernel.KernelCapabilities:
    """This machine's kernel, which the namespace nodes share, probed in a scratch namespace."""
    name = f"{netns.PREFIX}probe-{os.getpid()}"
    netns.add(name)
    try:
        proc.run(["ip", "link", "add", "name", "probe0", "type", "veth", "peer", "name", "probe1"], netns=name)
        proc.run(["ip", "link", "set", "probe0", "up"], netns=name)
        return kernel.probe_with(lambda argv: proc.run(argv, netns=name, check=False))
    finally:
        netns.kill_processes_in([name])
        netns.delete(name)


class NamespaceBackend(Backend):
    """Base of the namespace-based backends; subclasses make nodes and say how to enter one."""

    name = "namespace"
    carries_appliance = True

    @staticmethod
    def node_netns(lab: str, node: str) -> str:
        return netns.name_for(lab, node)

    def carry_through_appliance(self, lab: Lab, spec, record) -> None:
        """The veth of each link of ``record`` gives way to the appliance's two taps, under the same names, with
        the same addresses (testbed.links.appliance.start); the lab records its appliance."""
        carried = {p.link for p in record.ports}
        resolved = [link for link in spec.resolved_links() if link.index in carried]
        netns_of = {n: node.handle["netns"] for n, node in lab.nodes.items()}
        for link in resolved:
            proc.run(["ip", "link", "del", "dev", link.a.ifname], netns=netns_of[link.a.node])
        appliance.start(record)
        proc.in_parallel(lambda link: address_link(link, netns_of), resolved)
        lab.info["appliance"] = record.to_json()

    def faults(self, lab: Lab) -> list[LabFault]:
        """The lab's impairment appliance, if it has one and its processes are gone."""
        record = lab.info.get("appliance")
        if not record:
            return []
        running = appliance.Appliance(appliance.ApplianceRecord.from_json(record))
        if running.alive():
            return []
        return [LabFault("appliance", f"the impairment appliance {running.record.umid} (user-mode Linux, pid "
                         f"{running.record.pid}) died", running.console_log)]

    def probe(self) -> kernel.KernelCapabilities:
        """The nodes share this machine's kernel."""
        return probe_this_kernel()

    def shaper(self, lab: Lab, link: LabLink, sender: str, caps: kernel.KernelCapabilities,
               allow_missing: bool = False):
        """The node's end (DirectionShaper); for a link the appliance carries, that and the appliance's port
        toward the receiver (testbed.links.applianceshaper)."""
        src, dst = link.end(sender), link.other(sender)
        node_end = DirectionShaper(self.access(lab, src.node), src.ifname, self.access(lab, dst.node), dst.ifname,
                                   caps, allow_missing=allow_missing)
        record = lab.info.get("appliance")
        if not record or not any(p["link"] == link.index for p in record["ports"]):
            return node_end
        from testbed.links.applianceshaper import ApplianceDirectionShaper

        rec = appliance.ApplianceRecord.from_json(record)
        force = lab.info.get("impairments") == "appliance"
        return ApplianceDirectionShaper(node_end, appliance.Appliance(rec), rec.port(link.index, dst.node),
                                        rec.port(link.index, src.node), caps, force_appliance=force)

    def install_shaping(self, lab: Lab, caps: kernel.KernelCapabilities, allow_missing: bool = False) -> list[tuple]:
        """As every backend does, but the impairment appliance's part of every direction at once, as one
        ``tc -batch`` inside it (one request where ring50 through the appliance made 100, ~12 s)."""
        from testbed.links.applianceshaper import ApplianceDirectionShaper

        batch: list[list[str]] = []  # list.extend holds the GIL: safe from the shaping threads

        def install_one(shaper, shape):
            if isinstance(shaper, ApplianceDirectionShaper):
                return shaper.install(shape, appliance_batch=batch)
            return shaper.install(shape)

        installed = self._install_directions(lab, caps, allow_missing, install_one)
        if batch:
            appliance.Appliance(appliance.ApplianceRecord.from_json(lab.info["appliance"])).run_batch(batch)
        return installed

    def clocks(self, lab: Lab) -> dict:
        """The nodes read this machine's own kernel clock: no offset, no error."""
        from testbed.clocksync import same_host_reading

        return {n: same_host_reading(n) for n in lab.nodes}

    def management(self, lab: Lab) -> mgmt.LocalManagement:
        return mgmt.LocalManagement(lab, {n: self.access(lab, n) for n in lab.nodes})

    def leftovers(self, live_labs: set[str]) -> list[str]:
        """What :meth:`release_leftovers` would remove (a dry run)."""
        live_ns = _live_namespaces(live_labs)
        found = [f"namespace {n}" for n in netns.list_names() if n not in live_ns and not _live_probe(n)]
        found += [f"cgroup {n}" for n in _orphan_cgroups(live_ns)]
        found += [f"management interface {i}" for i in mgmt.leftover_interfaces(live_labs)]
        found += [f"SSH folder {f}" for f in mgmt.leftover_ssh_folders(live_labs)]
        found += [f"process {pid} (SSH connection master)" for pid in _ssh_mux_pids(exclude_labs=live_labs)]
        found += appliance.leftovers(live_labs)
        return found

    def release_leftovers(self, live_labs: set[str]) -> list[str]:
        """Namespaces of no live lab (with their processes), management interfaces, impairment appliances (their
        processes, taps and folders), SSH folders and connection multiplexers of labs that are gone."""
        live_ns = _live_namespaces(live_labs)
        removed: list[str] = []
        orphans = [n for n in netns.list_names() if n not in live_ns and not _live_probe(n)]
        groups = _orphan_cgroups(live_ns)
        if orphans or groups:
            removed += [f"process {pid}" for pid in release_namespaces(sorted({*orphans, *groups}))]
            removed += [f"namespace {n}" for n in orphans] + [f"cgroup {n}" for n in groups]
        removed += [f"management interface {i}" for i in mgmt.release_leftovers(live_labs)]
        removed += appliance.release_leftovers(live_labs)
        for pid in _ssh_mux_pids(exclude_labs=live_labs):
            try:
                os.kill(pid, signal.SIGTERM)
                removed.append(f"process {pid}")
            except ProcessLookupError:
                pass
        return removed


def release_appliance(plan: dict) -> list[str]:
    """Stop the lab's impairment appliance, if its plan has one (its taps go with it)."""
    record = plan.get("appliance")
    return appliance.stop(appliance.ApplianceRecord.from_json(record)) if record else []


def prepare_node_namespace(ns: str) -> None:
    """A new node's namespace: loopback up, and no kernel forwarding between its links, so the
    measured path is the router's path and nothing else."""
    proc.run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=0"], netns=ns)
    proc.run(["ip", "link", "set", "lo", "up"], netns=ns)


def address_link(link, netns_of: dict[str, str]) -> LabLink:
    """Give both ends of a resolved spec link (whose veth exists) their addresses, bring them up;
    the :class:`LabLink` that describes it. ``netns_of`` maps node -> namespace."""
    ends = []
    for end in (link.a, link.b):
        ns = netns_of[end.node]
        proc.run(["ip", "addr", "add", str(end.address), "dev", end.ifname], netns=ns)
        proc.run(["ip", "link", "set", end.ifname, "up"], netns=ns)
        ends.append(LabEnd(end.node, end.ifname, str(end.address)))
    return LabLink(link.index, ends[0], ends[1], link.weight, link.a.egress, link.b.egress)


def release_namespaces(names: list[str]) -> list[int]:
    """Kill every process of the nodes (in their namespaces or their cgroups, until none is left: see
    :func:`netns.kill_processes_in`), delete the namespaces (their interfaces go with them), then kill
    what entered meanwhile and remove the nodes' cgroups.

    The order closes the last gap: what enters a node through the testbed joins its cgroup first, then
    opens the namespace by name. The names are deleted before the cgroups: so a command that still
    found a name had joined a cgroup that still existed, and ``cgroup.kill`` gets it.

    Every namespace is tried; if some could not be deleted, the error names them all afterwards. If a
    process could not be killed, nothing is deleted (the names are what a later `clean` finds them by)
    and the error names the process.
    """
    from testbed.backends.base import BackendError

    # The namespaces are held open until the last sweep: a namespace freed once its name is deleted
    # gives its inode number back to the kernel, which hands it to the next namespace made (another
    # lab's node), whose processes the sweep by inode would then kill.
    held = netns.hold(names)
    try:
        inodes = {os.fstat(fd).st_ino for fd in held}
        try:
            killed = netns.kill_processes_in(names, inodes)
        except sweep.SweepError as exc:
            raise BackendError(f"{exc}; the namespaces are kept: run `testbed clean` again once it is dead") from exc
        errors = []
        for name in names:
            try:
                netns.delete(name)
            except proc.CommandError as exc:
                errors.append(str(exc))
        try:  # what entered after the last look (a `testbed exec` typed meanwhile), then each cgroup at once
            killed += netns.kill_processes_in(names, inodes)
            for name in names:
                killed += cgroups.kill(name)
        except (sweep.SweepError, OSError) as exc:
            errors.append(str(exc))
    finally:
        for fd in held:
            os.close(fd)
    if errors:
        raise BackendError("; ".join(errors))
    return sorted(set(killed))


def leftover_node_folders(live_labs: set[str]) -> list[Path]:
    """Node folders (under :data:`NODE_ROOT` on this machine) of labs that are not live."""
    root = Path(NODE_ROOT)
    return [f for f in sorted(root.iterdir()) if f.is_dir() and f.name not in live_labs] if root.is_dir() else []


def remove_node_folders(live_labs: set[str]) -> list[str]:
    removed = []
    for folder in leftover_node_folders(live_labs):
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    return removed


def _live_namespaces(live_labs: set[str]) -> set[str]:
    live: set[str] = set()
    for state in labstate.all_states():
        if state.name in live_labs:
            live.update(state.plan.get("netns", []))
    return live


def _orphan_cgroups(live_ns: set[str]) -> list[str]:
    """Node cgroups of no live lab (their namespace may be gone, a process that left it not)."""
    return [g for g in cgroups.names(netns.PREFIX) if g not in live_ns]


def _live_probe(name: str) -> bool:
    prefix = f"{netns.PREFIX}probe-"
    if not name.startswith(prefix) or not name[len(prefix):].isdigit():
        return False
    return labstate.process_start_ticks(int(name[len(prefix):])) is not None


def _ssh_mux_pids(exclude_labs: set[str]) -> list[int]:
    """SSH ControlMaster processes whose control socket lives in a lab's SSH folder."""
    prefix = str(mgmt.SSH_ROOT) + "/"
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("ssh: " + prefix) and "[mux]" in cmd:
            lab = cmd[len("ssh: " + prefix):].split("/", 1)[0]
            if lab not in exclude_labs:
                pids.append(int(entry.name))
    return pids
