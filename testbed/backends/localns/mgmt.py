"""Management access to a lab's nodes: a private point-to-point path per node, and sshd on it.

Every node gets a veth pair: ``mgmt0`` inside its namespace, ``tbm<hash><index>`` in
the root namespace, with a /30 from ``100.100.0.0/16`` (root end ``.1``, node end
``.2``). Inside the node there is only the connected /30 route — no default route —
so a node cannot reach another node's management address; a root-namespace iptables
chain (``TBED-MGMT``, jumped to from ``FORWARD``) drops anything arriving on or
leaving through a ``tbm+`` interface, so that holds even when the root namespace
forwards. The routers bind their data listeners to data-link addresses and only their
metrics endpoint to the management address, so nothing is ever routed over it.

Each lab takes an aligned block of /30s that overlaps no address or route already in
the root namespace under ``100.100.0.0/16`` (chosen under a file lock in
``/run/testbed``, so concurrent labs never collide).

:class:`SshAccess` runs one sshd per node inside its namespace, listening only on
the node's management address, with a host key and a client key made for this run;
``known_hosts`` is written from the generated host keys so clients check them.
"""
from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Optional

from testbed import proc
from testbed.backends.base import Management
from testbed.backends.localns.netns import handle_netns

MGMT_NET = ipaddress.IPv4Network("100.100.0.0/16")
HOST_PREFIX = "tbm"
NODE_IFNAME = "mgmt0"
CHAIN = "TBED-MGMT"
LOCK_DIR = Path(os.environ.get("TESTBED_RUN_DIR", "/run/testbed"))
SSH_ROOT = LOCK_DIR / "ssh"
SSHD = "/usr/sbin/sshd"


class MgmtError(RuntimeError):
    """Management access could not be set up (the message says what and where)."""


def lab_tag(lab_name: str) -> str:
    """Six hex digits identifying a lab in root-namespace interface names."""
    return hashlib.sha1(lab_name.encode()).hexdigest()[:6]


def host_ifname(lab_name: str, index: int) -> str:
    name = f"{HOST_PREFIX}{lab_tag(lab_name)}{index}"
    if len(name) > 15:
        raise MgmtError(f"lab {lab_name!r} has too many nodes for management interface names ({name})")
    return name


@contextmanager
def _lock() -> Iterator[None]:
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_DIR / "mgmt.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass(frozen=True)
class MgmtLink:
    node: str
    netns: str
    host_ifname: str  # root-namespace end
    host_address: str  # CIDR, e.g. 100.100.0.1/30
    node_address: str  # CIDR of mgmt0 in the node, e.g. 100.100.0.2/30

    @property
    def node_ip(self) -> str:
        return str(ipaddress.ip_interface(self.node_address).ip)


# --- the root namespace's view of 100.100.0.0/16 ----------------------------------

def _root_ifnames() -> list[str]:
    out = proc.run(["ip", "-j", "link", "show"]).stdout
    return [link["ifname"] for link in json.loads(out or "[]")]


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Addresses and routes in the root namespace that fall inside MGMT_NET."""
    used: list[ipaddress.IPv4Network] = []
    for link in json.loads(proc.run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]"):
        for a in link.get("addr_info", []):
            used.append(ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network)
    for route in json.loads(proc.run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]"):
        dst = route.get("dst")
        if not dst or dst == "default":
            continue
        try:
            used.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
        except ValueError:
            continue
    return [n for n in used if n.overlaps(MGMT_NET)]


def allocate_block(count: int, used: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """The first aligned block of MGMT_NET holding ``count`` /30s that overlaps nothing in ``used``."""
    size = 4 * max(count, 1)
    prefix = 32 - (size - 1).bit_length()
    if prefix < MGMT_NET.prefixlen:
        raise MgmtError(f"{count} nodes need more management addresses than {MGMT_NET} holds")
    for block in MGMT_NET.subnets(new_prefix=prefix):
        if not any(block.overlaps(u) for u in used):
            return block
    raise MgmtError(f"no free block of {size} addresses left in {MGMT_NET} (other labs use it); "
                    "run `testbed clean` to remove leftovers")


# --- the iptables chain -----------------------------------------------------------

def _ensure_chain(netns: Optional[str] = None) -> None:
    """Idempotently install ``FORWARD -j TBED-MGMT`` with drops for ``tbm+`` (root namespace unless ``netns``)."""
    def ipt(*args: str) -> list[str]:
        return ["iptables", "-w", *args]

    if not proc.succeeds(ipt("-n", "-L", CHAIN), netns=netns):
        proc.run(ipt("-N", CHAIN), netns=netns)
    for rule in (["-i", f"{HOST_PREFIX}+", "-j", "DROP"], ["-o", f"{HOST_PREFIX}+", "-j", "DROP"]):
        if not proc.succeeds(ipt("-C", CHAIN, *rule), netns=netns):
            proc.run(ipt("-A", CHAIN, *rule), netns=netns)
    if not proc.succeeds(ipt("-C", "FORWARD", "-j", CHAIN), netns=netns):
        proc.run(ipt("-I", "FORWARD", "1", "-j", CHAIN), netns=netns)


def _remove_chain_if_unused() -> None:
    """Remove the chain when no management interface of any lab is left."""
    if any(n.startswith(HOST_PREFIX) for n in _root_ifnames()):
        return
    while proc.succeeds(["iptables", "-w", "-C", "FORWARD", "-j", CHAIN]):
        proc.run(["iptables", "-w", "-D", "FORWARD", "-j", CHAIN])
    if proc.succeeds(["iptables", "-w", "-n", "-L", CHAIN]):
        proc.run(["iptables", "-w", "-F", CHAIN])
        proc.run(["iptables", "-w", "-X", CHAIN])


def chain_present() -> bool:
    return proc.succeeds(["iptables", "-w", "-n", "-L", CHAIN])


# --- management network -----------------------------------------------------------

class ManagementNetwork:
    """The management path of one lab: ``setup()`` builds it, ``teardown()`` removes it.

    ``to_json()`` records the interface names so that ``testbed clean`` can remove
    them after a crash (:func:`release_leftovers` also finds them by name prefix).
    """

    def __init__(self, lab, nodes: Optional[list[str]] = None):
        self.lab = lab
        self.nodes = list(nodes) if nodes is not None else list(lab.nodes)
        self.links: dict[str, MgmtLink] = {}

    def setup(self) -> dict[str, str]:
        """Create every node's management path; returns ``{node: management IP}``."""
        try:
            with _lock():
                block = allocate_block(len(self.nodes), _used_networks())
                subnets = block.subnets(new_prefix=30)
                _ensure_chain()
                existing = set(_root_ifnames())
                taken = sorted(existing & {host_ifname(self.lab.name, i) for i in range(len(self.nodes))})
                if taken:
                    raise MgmtError(f"management interface(s) {', '.join(taken)} already exist (lab "
                                    f"{self.lab.name!r} left behind?); run `testbed clean`")
                proc.in_parallel(lambda job: self._add(*job),
                                 [(index, node, next(subnets)) for index, node in enumerate(self.nodes)])
                self.links = {node: self.links[node] for node in self.nodes}  # in node order
        except BaseException:
            self.teardown()
            raise
        return self.ips()

    def _add(self, index: int, node: str, subnet: ipaddress.IPv4Network) -> None:
        ns = handle_netns(self.lab.node(node))
        hostif = host_ifname(self.lab.name, index)
        host_ip, node_ip = list(subnet.hosts())[:2]
        link = MgmtLink(node, ns, hostif, f"{host_ip}/30", f"{node_ip}/30")
        self.links[node] = link  # before it exists: teardown removes what a failure half-made
        proc.run(["ip", "link", "add", hostif, "type", "veth", "peer", "name", NODE_IFNAME, "netns", ns])
        proc.run(["ip", "addr", "add", link.host_address, "dev", hostif])
        proc.run(["ip", "link", "set", hostif, "up"])
        # IPv4 only: no IPv6 link-local path between a node and the root namespace.
        proc.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{hostif}.disable_ipv6=1"], check=False)
        proc.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{NODE_IFNAME}.disable_ipv6=1"], netns=ns, check=False)
        proc.run(["ip", "addr", "add", link.node_address, "dev", NODE_IFNAME], netns=ns)
        proc.run(["ip", "link", "set", NODE_IFNAME, "up"], netns=ns)

    def ips(self) -> dict[str, str]:
        return {node: link.node_ip for node, link in self.links.items()}

    def teardown(self) -> None:
        """Remove the root-namespace ends (their peers go with them) and the chain if unused."""
        errors = []
        with _lock():
            present = set(_root_ifnames())
            for link in list(self.links.values()):
                if link.host_ifname in present:
                    try:
                        proc.run(["ip", "link", "del", link.host_ifname])
                    except proc.CommandError as exc:
                        errors.append(str(exc))
            self.links = {}
            _remove_chain_if_unused()
        if errors:
            raise MgmtError("; ".join(errors))

    def to_json(self) -> dict:
        return {"lab": self.lab.name, "links": {n: asdict(l) for n, l in self.links.items()}}


def leftover_interfaces(live_lab_names: set[str]) -> list[str]:
    """Root-namespace ``tbm*`` interfaces of ours that belong to no live lab."""
    live_tags = {lab_tag(name) for name in live_lab_names}
    return [name for name in _root_ifnames()
            if re.fullmatch(rf"{HOST_PREFIX}[0-9a-f]{{6}}\d+", name)
            and name[len(HOST_PREFIX):len(HOST_PREFIX) + 6] not in live_tags]


def release_leftovers(live_lab_names: set[str]) -> list[str]:
    """Remove root-namespace ``tbm*`` interfaces that belong to no live lab; returns their names.

    The node-side end disappears with the node's namespace (and the sshd inside it with the
    processes `testbed clean` kills there). The ``TBED-MGMT`` chain is removed once no
    management interface is left, and the SSH key folders (``/run/testbed/ssh/<lab>``) of
    labs that are not live are deleted.
    """
    removed = []
    with _lock():
        for name in leftover_interfaces(live_lab_names):
            proc.run(["ip", "link", "del", name], check=False)
            removed.append(name)
        _remove_chain_if_unused()
    for folder in leftover_ssh_folders(live_lab_names):
        shutil.rmtree(folder, ignore_errors=True)
    return removed


def leftover_ssh_folders(live_lab_names: set[str]) -> list[Path]:
    """SSH key folders (``/run/testbed/ssh/<lab>``) of labs that are not live."""
    if not SSH_ROOT.is_dir():
        return []
    return [f for f in sorted(SSH_ROOT.iterdir()) if f.is_dir() and f.name not in live_lab_names]


# --- sshd per node ----------------------------------------------------------------

SSHD_CONFIG = """\
# sshd for testbed node {node} (lab {lab}); made for this run only
ListenAddress {ip}
Port 22
HostKey {host_key}
PidFile {pidfile}
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes yes
UseDNS no
PrintMotd no
X11Forwarding no
AllowAgentForwarding no
AllowTcpForwarding no
PermitTunnel no
MaxStartups 100:30:200
MaxSessions 64
LogLevel ERROR
Subsystem sftp internal-sftp
"""


def ssh_common_args(known_hosts: Path) -> str:
    return " ".join(shlex.quote(a) for a in (
        "-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
    ))


def _keygen(path: Path, comment: str) -> None:
    proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


@dataclass
class SshAccess(Management):
    """One sshd per node on its management address, with keys made for this run.

    ``hosts`` maps node -> management IP; clients log in as ``user`` with ``private_key``
    and check host keys against ``known_hosts``. The keys and configs are made in ``dir``
    on this machine and put at the same path on every node (the node's own sshd reads them).
    """

    lab_name: str
    hosts: dict[str, str]
    nodes: dict  # node -> NodeAccess
    dir: Path
    user: str = "root"
    started: bool = False

    @classmethod
    def for_lab(cls, lab, mgmt_ips: dict[str, str], accesses: dict, dir: Optional[Path] = None) -> "SshAccess":
        base = Path(dir) if dir is not None else SSH_ROOT / lab.name
        return cls(lab.name, dict(mgmt_ips), {n: accesses[n] for n in mgmt_ips}, base)

    @property
    def private_key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def control_dir(self) -> Path:
        return self.dir / "cp"

    def pidfile(self, node: str) -> Path:
        return self.dir / f"sshd-{node}.pid"

    def start(self, timeout_s: float = 30.0) -> None:
        """Generate keys, write configs and known_hosts, start sshd in every node, wait until each listens."""
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True, mode=0o700)
        os.chmod(self.dir, 0o700)
        self.control_dir.mkdir(mode=0o700)
        _keygen(self.private_key, f"testbed-{self.lab_name}-client")
        (self.dir / "authorized_keys").write_text(Path(f"{self.private_key}.pub").read_text())
        os.chmod(self.dir / "authorized_keys", 0o600)

        def host_key_line(item) -> str:
            node, ip = item
            host_key = self.dir / f"host-{node}"
            _keygen(host_key, f"testbed-{self.lab_name}-{node}")
            kind, key = Path(f"{host_key}.pub").read_text().split()[:2]
            cfg = self.dir / f"sshd-{node}.conf"
            cfg.write_text(SSHD_CONFIG.format(node=node, lab=self.lab_name, ip=ip, host_key=host_key,
                                              pidfile=self.pidfile(node), authorized_keys=self.dir / "authorized_keys"))
            return f"{ip} {kind} {key}"

        known = proc.in_parallel(host_key_line, list(self.hosts.items()))
        self.known_hosts.write_text("\n".join(known) + "\n")
        self.started = True
        proc.in_parallel(self._start_sshd, list(self.nodes.items()))
        deadline = time.monotonic() + timeout_s
        for node, ip in self.hosts.items():
            while not _listening(ip, 22):
                if time.monotonic() > deadline:
                    log = self.nodes[node].run(["cat", str(self.dir / f"sshd-{node}.log")], check=False)
                    detail = log.stdout.strip()[-500:] or "no log"
                    raise MgmtError(f"sshd on node {node} ({ip}) is not accepting connections after "
                                    f"{timeout_s:g} s: {detail}")
                time.sleep(0.05)

    def _start_sshd(self, item) -> None:
        node, access = item
        if access.run(["test", "-x", SSHD], check=False).returncode != 0:
            raise MgmtError(f"node {node} has no {SSHD}: install openssh-server there")
        # Only what this node's sshd reads: not the client's key nor the other nodes' host keys.
        for name in (f"sshd-{node}.conf", f"host-{node}", f"host-{node}.pub", "authorized_keys"):
            access.put(self.dir / name, str(self.dir / name))
        access.run(["mkdir", "-p", "-m", "0755", "/run/sshd"])  # sshd's privilege separation directory
        cfg = self.dir / f"sshd-{node}.conf"
        # Check the config first: sshd's own message is clearer than a timeout.
        access.run([SSHD, "-t", "-f", str(cfg)])
        access.run([SSHD, "-f", str(cfg), "-E", str(self.dir / f"sshd-{node}.log")])

    def ssh_args(self) -> list[str]:
        """Options for ``ssh`` that use this run's key and known_hosts (host keys checked)."""
        return ["-i", str(self.private_key), "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                "-o", "GlobalKnownHostsFile=/dev/null"]

    def run(self, node: str, command: str, timeout_s: float = 30.0) -> "subprocess.CompletedProcess[str]":
        """Run a shell command on ``node`` over SSH (host key checked; reuses Ansible's control socket)."""
        argv = ["ssh", *self.ssh_args(), "-o", "ControlMaster=auto", "-o", "ControlPersist=300s",
                "-o", f"ControlPath={self.control_dir}/%C", f"{self.user}@{self.hosts[node]}", command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)

    def inventory_vars(self, node: str) -> dict:
        """Ansible variables that reach ``node`` over its management address with this run's keys."""
        return {"ansible_host": self.hosts[node], "ansible_user": self.user,
                "ansible_ssh_private_key_file": str(self.private_key),
                "ansible_ssh_common_args": ssh_common_args(self.known_hosts),
                "ansible_python_interpreter": "/usr/bin/python3"}

    def close_connections(self) -> None:
        """Ask every SSH connection master (Ansible's ControlPersist) for this lab to exit."""
        if not self.control_dir.is_dir():
            return
        for node, ip in self.hosts.items():
            try:
                subprocess.run(["ssh", "-o", f"ControlPath={self.control_dir}/%C", "-O", "exit", f"{self.user}@{ip}"],
                               capture_output=True, timeout=5, stdin=subprocess.DEVNULL)
            except (OSError, subprocess.TimeoutExpired):
                pass

    def close(self) -> None:
        """The management interface of the lab: :meth:`stop`."""
        self.stop()

    def stop(self) -> None:
        """Close connection masters, stop every sshd (by pid file, on its node) and delete the keys."""
        self.close_connections()
        if self.started:
            for node, access in self.nodes.items():
                pidfile = shlex.quote(str(self.pidfile(node)))
                try:
                    access.run(["sh", "-c", f"pid=$(cat {pidfile} 2>/dev/null) && grep -q sshd /proc/$pid/cmdline "
                                            f"2>/dev/null && kill $pid"], check=False, timeout=10)
                except proc.CommandError:
                    pass  # the node is gone already: so is its sshd
        if self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)
        self.started = False

    def to_json(self) -> dict:
        return {"lab": self.lab_name, "hosts": self.hosts, "dir": str(self.dir), "user": self.user}


class LocalManagement(Management):
    """The management access of a lab of local namespaces: the path (:class:`ManagementNetwork`)
    and sshd on it (:class:`SshAccess`). ``start()`` builds both; ``close()`` removes both."""

    def __init__(self, lab, accesses: dict):
        self.lab = lab
        self.accesses = accesses
        self.network = ManagementNetwork(lab)
        self.ssh: Optional[SshAccess] = None

    @property
    def hosts(self) -> dict[str, str]:
        return self.network.ips()

    def start(self) -> None:
        ips = self.network.setup()
        self.ssh = SshAccess.for_lab(self.lab, ips, self.accesses)
        self.ssh.start()

    def inventory_vars(self, node: str) -> dict:
        return self._ssh().inventory_vars(node)

    def run(self, node: str, command: str, timeout_s: float = 30.0) -> "subprocess.CompletedProcess[str]":
        return self._ssh().run(node, command, timeout_s)

    def machine_entries(self) -> Optional[dict[str, list[str]]]:
        """node -> the argv prefix that runs a command in it from this machine, when every node shares this
        machine's files and process IDs (namespaces of a Mininet lab): deployment then works once per
        machine (playbooks/up-machine.yml). None when nodes have their own (Docker containers)."""
        if self.accesses and all(a.shares_machine for a in self.accesses.values()):
            return {n: a.exec_argv([]) for n, a in self.accesses.items()}
        return None

    @property
    def control_dir(self) -> Optional[Path]:
        return self.ssh.control_dir if self.ssh else None

    def _ssh(self) -> SshAccess:
        if self.ssh is None:
            raise MgmtError(f"management access of lab {self.lab.name!r} is not started")
        return self.ssh

    def close(self) -> None:
        errors = []
        for step in ((self.ssh.stop if self.ssh else None), self.network.teardown):
            if step is None:
                continue
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - remove the rest whatever happens
                errors.append(str(exc))
        if errors:
            raise MgmtError("; ".join(errors))

    def to_json(self) -> dict:
        return {**self.network.to_json(), "ssh": self.ssh.to_json() if self.ssh else None}


def _listening(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=0.5):
            return True
    except OSError:
        return False
