"""The ssh backend: the nodes are real lab machines from an Ansible inventory, cabled together.

Nothing is created: ``up`` gives the data interfaces the topology's addresses (or keeps the
machines' own), ``release`` puts every data interface back exactly as it was recorded before
anything changed, and stops every process of ours. Interfaces the topology does not name
are never touched, and the interface carrying the SSH connection is never shaped.
See docs/lab-hardware.md.
"""
from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from testbed import kernel
from testbed.backends.base import Backend, BackendError, Lab, LabEnd, LabLink, LabNode, node_work_dir
from testbed.backends.options import BackendOptions
from testbed.backends.ssh import hoststate
from testbed.backends.ssh.access import SshNodeAccess, ssh_command
from testbed.backends.ssh.connection import SshHost, host_connection
from testbed.backends.ssh.inventory import InventoryHost, load_inventory, node_hosts
from testbed.backends.ssh.preflight import HostFacts, preflight
from testbed.proc import CommandError, Result
from testbed.links.shaping import DirectionShaper

NO_INVENTORY = ("the ssh backend needs an Ansible inventory of the lab machines: pass --inventory FILE or put "
                "`inventory: FILE` in the topology (see docs/lab-hardware.md)")


def _parallel(fn, items: list) -> list:
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(items)))) as pool:
        return list(pool.map(fn, items))


class SshBackend(Backend):
    """Lab machines reached over SSH (paramiko for direct work, Ansible for deployment)."""

    name = "ssh"

    def __init__(self, options: BackendOptions = BackendOptions("ssh")):
        self.options = options
        self.inventory_path = str(Path(options.inventory).resolve()) if options.inventory else None
        self._hosts: Optional[dict[str, InventoryHost]] = None  # node -> host
        self._facts: Optional[dict[str, HostFacts]] = None
        self._lab: Optional[Lab] = None
        self._plan: Optional[dict] = None
        #: `clean --inventory --all`: also labs that other controllers recorded on the machines
        self.clean_all_controllers = False

    # -- the machines ------------------------------------------------------------------
    def _inventory(self, path: Optional[str] = None) -> dict[str, InventoryHost]:
        path = path or self.inventory_path
        if not path:
            raise BackendError(NO_INVENTORY)
        return load_inventory(path)

    def _conn(self, host: InventoryHost, check_host_keys: Optional[bool] = None) -> SshHost:
        return host_connection(host, check_host_keys=self.options.check_host_keys if check_host_keys is None
                               else check_host_keys)

    @staticmethod
    def _data_interfaces(spec) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {n: [] for n in spec.nodes}
        for link in spec.resolved_links():
            for end in (link.a, link.b):
                found[end.node].append(end.ifname)
        return found

    def check(self, spec) -> None:
        inventory = self._inventory()
        self._hosts = node_hosts(spec, inventory, self.inventory_path)
        conns = {n: self._conn(h) for n, h in self._hosts.items()}
        off = [h.name for h in self._hosts.values() if h.host_key_checking_off]
        if off and self.options.check_host_keys:
            raise BackendError(f"the inventory turns host key checking off for {', '.join(off)} "
                               "(StrictHostKeyChecking=no or ansible_host_key_checking=false): remove that, or pass "
                               "--no-host-key-check so that the run records it")
        self._facts = preflight(conns, self._data_interfaces(spec), self.options.keep_addresses, self.inventory_path)
        if self.options.keep_addresses:
            self._check_own_addresses(spec)
        else:
            self._check_subnets_spare_management(spec)

    def _check_subnets_spare_management(self, spec) -> None:
        """A data subnet holding the controller's or a machine's SSH address would take the connection over."""
        problems = []
        for link in spec.resolved_links():
            net = ipaddress.ip_interface(str(link.a.address)).network
            for node, facts in self._facts.items():
                for address in facts.management_addresses:
                    if ipaddress.ip_address(address) in net:
                        problems.append(f"link {link.a.node}:{link.a.ifname}-{link.b.node}:{link.b.ifname} would get "
                                        f"{net}, which holds {address}, an address of the SSH connection to {node}: "
                                        "give the topology another `defaults.address_pool` (or the link `addresses`)")
        if problems:
            raise BackendError("\n  ".join(["the topology's addresses would cut the machines off:", *problems]))

    def _check_own_addresses(self, spec) -> None:
        problems = []
        for link in spec.resolved_links():
            ends = [(e.node, e.ifname, hoststate.first_ipv4(self._facts[e.node].interfaces[e.ifname]))
                    for e in (link.a, link.b)]
            missing = [f"{n}:{i}" for n, i, a in ends if a is None]
            if missing:
                problems.append(f"--keep-addresses: {', '.join(missing)} has no IPv4 address of its own")
                continue
            nets = {ipaddress.ip_interface(a).network for _, _, a in ends}
            if len(nets) != 1:
                problems.append(f"--keep-addresses: {ends[0][0]}:{ends[0][1]} {ends[0][2]} and {ends[1][0]}:{ends[1][1]} "
                                f"{ends[1][2]} are not in one subnet, so the routers could not peer over the link")
        if problems:
            raise BackendError("\n  ".join(["the machines' own addresses cannot be used:", *problems]))

    def _ready(self, spec) -> None:
        if self._facts is None:
            self.check(spec)

    def probe(self) -> kernel.KernelCapabilities:
        """Every machine's kernel, in a scratch namespace of its own; a feature counts only if all have it."""
        if self._hosts is None:
            raise BackendError("the ssh backend probes the machines after `check`")
        names = sorted(self._hosts)
        results = _parallel(lambda n: _probe_host(self._conn(self._hosts[n])), names)
        qdiscs = {k: all(r.qdiscs.get(k, False) for r in results) for k in kernel.QDISC_PROBES}
        errors = {f"{n}: {k}": v for n, r in zip(names, results) for k, v in r.errors.items()}
        return kernel.KernelCapabilities(qdiscs, all(r.iptables_statistic for r in results), errors)

    def plan(self, spec) -> dict:
        """What will change, and every data interface as it is now (recorded before any change)."""
        self._ready(spec)
        return {
            "inventory": self.inventory_path,
            "keep_addresses": self.options.keep_addresses,
            "check_host_keys": self.options.check_host_keys,
            "hosts": {n: h.name for n, h in self._hosts.items()},
            "work_dirs": {n: node_work_dir(spec.name, n) for n in self._hosts},
            "before": {n: f.interfaces for n, f in self._facts.items()},
        }

    # -- up / down -------------------------------------------------------------------
    def up(self, spec) -> Lab:
        self._ready(spec)
        self._plan = self.plan(spec)
        links = spec.resolved_links()
        lab_links = []
        for link in links:
            ends = []
            for end in (link.a, link.b):
                address = str(end.address)
                if self.options.keep_addresses:
                    address = hoststate.first_ipv4(self._facts[end.node].interfaces[end.ifname])
                ends.append(LabEnd(end.node, end.ifname, address))
            lab_links.append(LabLink(link.index, ends[0], ends[1], link.weight, link.a.egress, link.b.egress))
        nodes = {n: LabNode(n, spec.nodes[n].kind, {"host": h.name, "address": h.address})
                 for n, h in self._hosts.items()}
        self._lab = Lab(spec.name, self.name, nodes, lab_links, info=self._info())

        def configure(node: str) -> None:
            conn = self._conn(self._hosts[node])
            hoststate.write_host_record(conn, spec.name, self._host_record(spec.name, node))
            for link in lab_links:
                for end in (link.a, link.b):
                    if end.node != node:
                        continue
                    if not self.options.keep_addresses:
                        conn.run(["ip", "-4", "addr", "flush", "dev", end.ifname])
                        conn.run(["ip", "addr", "add", end.address, "dev", end.ifname])
                    conn.run(["ip", "link", "set", "dev", end.ifname, "up"])

        errors = [e for e in _parallel(lambda n: _error_of(configure, n), sorted(nodes)) if e]
        if errors:
            raise BackendError("could not configure the lab machines: " + "; ".join(errors))
        return self._lab

    def _host_record(self, lab: str, node: str) -> dict:
        return {"lab": lab, "node": node, "controller": socket.gethostname(), "work_dir": node_work_dir(lab, node),
                "keep_addresses": self.options.keep_addresses, "python": self._hosts[node].python,
                "interfaces": self._plan["before"][node]}

    def _info(self) -> dict:
        return {"inventory": self.inventory_path, "keep_addresses": self.options.keep_addresses,
                "check_host_keys": self.options.check_host_keys,
                "hosts": {n: {"host": f.host, "address": self._hosts[n].address, "port": self._hosts[n].port,
                              "user": self._hosts[n].login, "python": f.python, "kernel": f.kernel,
                              "management_interfaces": f.management_interfaces}
                          for n, f in self._facts.items()}}

    def release(self, lab_name: str, plan: dict, lab: Optional[dict]) -> list[str]:
        """Stop our processes and put every data interface back as recorded, on every machine."""
        if not plan.get("before"):
            return []
        inventory = self._inventory(self.inventory_path or plan.get("inventory"))
        check = plan.get("check_host_keys", True) and self.options.check_host_keys

        def one(node: str) -> tuple[list[str], list[str]]:
            host = inventory.get(plan["hosts"][node])
            if host is None:
                return [], [f"{node}: host {plan['hosts'][node]} is not in the inventory any more"]
            conn = self._conn(host, check)
            try:
                done, left = hoststate.restore_node(conn, host.python, lab_name, node, plan["work_dirs"][node],
                                                    plan["before"][node], plan.get("keep_addresses", False))
            except (CommandError, BackendError, OSError, KeyError, ValueError) as exc:
                return [], [f"{node}: {exc}"]
            return done, left

        results = _parallel(one, sorted(plan["before"]))
        done = [d for r in results for d in r[0]]
        left = [d for r in results for d in r[1]]
        if left:
            raise BackendError(f"lab {lab_name}: not everything could be put back: {'; '.join(left)}")
        return done

    def leftovers(self, live_labs: set[str]) -> list[str]:
        """Labs recorded on the inventory's machines that no live lab owns (only with an inventory)."""
        if not self.inventory_path:
            return []
        found = []
        for host in self._inventory().values():
            try:
                records = hoststate.read_host_records(self._conn(host))
            except (CommandError, BackendError) as exc:
                found.append(f"host {host.name}: cannot be checked ({exc})")
                continue
            found += [f"lab {lab} on host {host.name} (interfaces {', '.join(r.get('interfaces', {}))})"
                      for lab, r in records.items() if lab not in live_labs and self._ours(r)]
        return found

    def _ours(self, record: dict) -> bool:
        """A lab recorded on a machine by this controller (another controller's lab may be running: it is
        that controller's to clean, or everyone's with --all)."""
        return self.clean_all_controllers or record.get("controller") in (None, socket.gethostname())

    def release_leftovers(self, live_labs: set[str]) -> list[str]:
        """Put back the interfaces and stop the processes of labs recorded on the machines that no live lab owns."""
        if not self.inventory_path:
            return []
        removed, problems = [], []
        for host in self._inventory().values():
            try:
                conn = self._conn(host)
                records = hoststate.read_host_records(conn)
            except (CommandError, BackendError) as exc:
                problems.append(f"host {host.name}: {exc}")
                continue
            removed += _remove_dead_probes(conn)
            for lab, record in records.items():
                if lab in live_labs or not self._ours(record):
                    continue
                try:
                    done, left = hoststate.restore_node(conn, record.get("python") or host.python, lab,
                                                        record["node"], record["work_dir"], record["interfaces"],
                                                        record.get("keep_addresses", False))
                except (CommandError, BackendError, OSError, KeyError, ValueError) as exc:
                    problems.append(f"host {host.name}, lab {lab}: {exc}")
                    continue
                removed += done
                problems += left
        if problems:
            raise BackendError("; ".join(problems))
        return removed

    # -- access --------------------------------------------------------------------------
    def _host_of(self, lab: Lab, node: str) -> tuple[InventoryHost, bool]:
        name = lab.node(node).handle["host"]
        check = lab.info.get("check_host_keys", True) and self.options.check_host_keys
        if self._hosts is not None and node in self._hosts:
            return self._hosts[node], check
        inventory = self._inventory(self.inventory_path or lab.info.get("inventory"))
        if name not in inventory:
            raise BackendError(f"host {name} of node {node} is not in inventory {lab.info.get('inventory')}")
        return inventory[name], check

    def access(self, lab: Lab, node: str) -> SshNodeAccess:
        host, check = self._host_of(lab, node)
        return SshNodeAccess(node, lab.name, self._conn(host, check), node_work_dir(lab.name, node),
                             ssh_command(host, check_host_keys=check))

    def install_shaping(self, lab: Lab, caps: kernel.KernelCapabilities, allow_missing: bool = False) -> list[tuple]:
        """Install every direction's shaping at once through Ansible (playbooks/shape.yml): the commands
        :class:`DirectionShaper` would run, computed by testbed.links.shaping; returns (link, sender, receiver, plan)."""
        import tempfile

        from testbed.deploy.inventory import write_inventory
        from testbed.deploy.runner import DeployError, run_playbook
        from testbed.links.shaping import UnsupportedShaping, fresh_install

        per_host: dict[str, list[dict]] = {n: [] for n in lab.nodes}
        installed = []
        for link in lab.links:
            for src, dst, shape in ((link.a, link.b, link.shape_ab), (link.b, link.a, link.shape_ba)):
                try:
                    cmds = fresh_install(src.ifname, dst.ifname, shape, caps, allow_missing=allow_missing)
                except UnsupportedShaping as exc:
                    raise UnsupportedShaping(f"link {link.label} ({src.node}->{dst.node}): {exc}") from None
                per_host[src.node] += [{"argv": a, "may_fail": f} for a, f in cmds.sender]
                per_host[dst.node] += [{"argv": a, "may_fail": f} for a, f in cmds.receiver]
                installed.append((link, src.node, dst.node, cmds.plan))
        management = self.management(lab)
        management.start()
        inventory = {"all": {"hosts": {n: {**management.inventory_vars(n), "testbed_shaping": per_host[n]}
                                       for n in lab.nodes}}}
        try:
            with tempfile.TemporaryDirectory(prefix=f"testbed-shape-{lab.name}-") as scratch:
                path = write_inventory(Path(scratch) / "inventory.json", inventory)
                run_playbook("shape.yml", inventory=path, private_data_dir=Path(scratch) / "ansible", extravars={},
                             forks=len(lab.nodes), control_dir=management.control_dir, timeout_s=300)
        except DeployError as exc:
            raise BackendError(f"shaping the lab machines failed: {exc}") from None
        finally:
            management.close()
        return installed

    def shaper(self, lab: Lab, link: LabLink, sender: str, caps: kernel.KernelCapabilities,
               allow_missing: bool = False) -> DirectionShaper:
        src, dst = link.end(sender), link.other(sender)
        return DirectionShaper(self.access(lab, src.node), src.ifname, self.access(lab, dst.node), dst.ifname,
                               caps, allow_missing=allow_missing)

    def management(self, lab: Lab) -> "SshManagement":
        from testbed.backends.ssh.management import SshManagement

        hosts = {n: self._host_of(lab, n)[0] for n in lab.nodes}
        check = lab.info.get("check_host_keys", True) and self.options.check_host_keys
        return SshManagement(lab, hosts, check_host_keys=check)

    def clocks(self, lab: Lab) -> dict:
        """Every machine's offset to this one: chrony where both ends are synchronised, else an NTP-style
        exchange (testbed.clocksync) with a clock server on the machine's management address, reached directly
        over TCP (fewer hops, a tighter bound) or, where that cannot be reached, through the SSH channel."""
        from testbed.clocksync import (CHRONY_TRACKING_ARGV, CLOCK_SERVER_CODE, clock_loop_command,
                                       local_chrony_tracking, read_clock)

        controller = local_chrony_tracking()

        def one(node: str):
            host, check = self._host_of(lab, node)
            conn = self._conn(host, check)
            tracking = None
            if controller is not None:
                r = conn.run(CHRONY_TRACKING_ARGV, root=False, check=False, timeout=10)
                tracking = r.stdout if r.returncode == 0 and r.stdout.strip() else None
            path = {}

            def open_channel(command: str):
                try:
                    channel = conn.socket_line_channel(CLOCK_SERVER_CODE, host.ip())
                    path["over"] = "TCP to the management address"
                    return channel
                except OSError as exc:
                    path["over"] = f"the SSH channel (TCP to the management address failed: {exc})"
                    return conn.line_channel(command)

            def exchange(controller_tracking, node_tracking):
                return read_clock(node, controller_tracking=controller_tracking, node_tracking=node_tracking,
                                  open_channel=open_channel, command=clock_loop_command(host.python),
                                  rounds=CLOCK_ROUNDS)

            reading = exchange(controller, tracking)
            if reading.method == "chrony":  # both bounds hold: keep the tighter (a LAN exchange often is)
                measured = exchange(None, None)
                if measured.bound_ns < reading.bound_ns:
                    reading = type(reading)(**{**measured.to_json(), "detail": (
                        f"{measured.detail}; tighter than chrony's bound of {reading.bound_ns / 1e3:.1f} us")})
            if path:
                reading = type(reading)(**{**reading.to_json(), "detail": f"{reading.detail}; over {path['over']}"})
            return reading

        nodes = sorted(lab.nodes)
        return dict(zip(nodes, _parallel(one, nodes)))

    def versions(self) -> dict:
        import paramiko

        return {"paramiko": paramiko.__version__,
                "hosts": {n: {"kernel": f.kernel, "python": f.python} for n, f in (self._facts or {}).items()}}


#: rounds of the clock exchange (the one with the smallest round trip is kept)
CLOCK_ROUNDS = 32

def _error_of(fn, *args) -> str:
    try:
        fn(*args)
        return ""
    except (CommandError, BackendError, OSError) as exc:
        return f"{args[0] if args else ''}: {exc}"


def _remove_dead_probes(conn: SshHost) -> list[str]:
    """Scratch namespaces of kernel probes that this controller's dead processes left on the machine."""
    from testbed.lab.state import process_start_ticks

    prefix = "tbprobe-"
    names = [line.split()[0] for line in conn.run(["ip", "netns", "list"], check=False, timeout=20).stdout.splitlines()
             if line.startswith(prefix)]
    gone = []
    for name in names:
        pid, _, host = name[len(prefix):].partition("-")
        if host == conn.name and pid.isdigit() and process_start_ticks(int(pid)) is None:
            conn.run(["ip", "netns", "del", name], check=False, timeout=20)
            gone.append(f"namespace {name} on {conn.name}")
    return gone


def _probe_host(conn: SshHost) -> kernel.KernelCapabilities:
    """The machine's shaping capabilities, tried in a scratch namespace (removed after)."""
    ns = f"tbprobe-{os.getpid()}-{conn.name}"  # a machine may be shared by several nodes' probes

    def run(argv: list[str]) -> Result:
        return conn.run(["ip", "netns", "exec", ns, *argv], check=False, timeout=30)

    conn.run(["ip", "netns", "add", ns])
    try:
        conn.run(["ip", "netns", "exec", ns, "ip", "link", "add", "name", "probe0", "type", "veth", "peer", "name",
                  "probe1"])
        conn.run(["ip", "netns", "exec", ns, "ip", "link", "set", "probe0", "up"])
        return kernel.probe_with(run)
    finally:
        conn.run(["ip", "netns", "del", ns], check=False)
