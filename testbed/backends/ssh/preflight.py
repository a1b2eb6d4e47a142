"""Before anything changes on a lab machine: can we reach it, become root, run what the testbed
runs there, and touch exactly the interfaces the topology names?

Every machine is checked (in parallel) and every problem reported at once, each naming the
machine and the fix; nothing is changed on any machine by these checks. What they read —
the data interfaces' qdiscs, addresses and up/down state — is the record that `down` and
`clean` restore.
"""
from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

from testbed.backends.base import BackendError
from testbed.backends.ssh import hoststate
from testbed.backends.ssh.connection import HostError, SshHost
from testbed.proc import CommandError

MIN_PYTHON = (3, 9)
#: what the testbed runs as root on every machine (tc: shaping; tcpdump: captures; ip: addresses;
#: setsid/tar: processes and files); iptables only where loss is emulated without netem
TOOLS = ("ip", "tc", "tcpdump", "setsid", "tar", "iptables")


@dataclass
class HostFacts:
    node: str
    host: str
    python: str = ""
    kernel: str = ""
    tools: dict = field(default_factory=dict)  # tool -> path
    #: the interfaces the SSH connection uses (never shaped, never touched) and its two addresses
    management_interfaces: list = field(default_factory=list)
    management_addresses: list = field(default_factory=list)
    #: data interface -> recorded state (hoststate.snapshot)
    interfaces: dict = field(default_factory=dict)


def check_host(node: str, conn: SshHost, ifnames: list[str], keep_addresses: bool) -> tuple[HostFacts, list[str]]:
    """Facts of one machine and the problems found (each a sentence naming the machine and the fix)."""
    host = conn.host
    where = f"{node} (host {host.name}, {host.address})"
    facts = HostFacts(node, host.name)
    if host.password and not host.key_file:
        return facts, [f"{where}: logs in with a password (ansible_password); the testbed needs key-based SSH, so that "
                       f"no password is written into a run's files: set ansible_ssh_private_key_file for {host.name}"]
    if host.needs_sudo:
        if host.become_password:
            return facts, [f"{where}: the testbed needs passwordless sudo on lab machines (ansible_become_password is "
                           f"not supported: it would be written into a run's files): give {host.login} NOPASSWD sudo "
                           f"(`{host.login} ALL=(ALL) NOPASSWD: ALL` in /etc/sudoers.d/testbed)"]
        if host.become_user != "root":
            return facts, [f"{where}: ansible_become_user is {host.become_user!r}; the testbed needs root (tc, ip, "
                           f"tcpdump): set it to root for {host.name}"]
        if host.become_method != "sudo":
            return facts, [f"{where}: become method {host.become_method!r} is not supported; the testbed uses sudo "
                           f"(set ansible_become_method=sudo for {host.name})"]
    try:
        conn.client()
    except HostError as exc:
        return facts, [str(exc) if node == host.name else f"node {node}: {exc}"]
    if host.needs_sudo:
        r = conn.run(["true"], check=False, timeout=20)
        if r.returncode != 0:
            detail = (r.stderr or r.stdout).strip().splitlines()
            return facts, [f"{where}: user {host.login} cannot run commands as root with sudo "
                           f"({detail[-1] if detail else 'exit ' + str(r.returncode)}): give {host.login} "
                           f"passwordless sudo (`{host.login} ALL=(ALL) NOPASSWD: ALL` in /etc/sudoers.d/testbed)"]
    problems: list[str] = []
    r = conn.run([host.python, "-c", "import sys; print('%d.%d.%d' % tuple(sys.version_info[:3]))"], root=False,
                 check=False, timeout=20)
    version = r.stdout.strip()
    if r.returncode != 0 or not re.fullmatch(r"\d+\.\d+\.\d+", version):
        problems.append(f"{where}: {host.python} does not run ({(r.stderr or r.stdout).strip()[-200:]}): install "
                        f"python3 (3.9 or newer) or point ansible_python_interpreter of {host.name} at one")
    else:
        facts.python = version
        if tuple(int(x) for x in version.split(".")[:2]) < MIN_PYTHON:
            problems.append(f"{where}: {host.python} is Python {version}; the testbed needs "
                            f"{'.'.join(map(str, MIN_PYTHON))} or newer (routers and traffic run with it): install "
                            f"a newer python3, or point ansible_python_interpreter of {host.name} at one")
    script = 'for t in "$@"; do printf "%s %s\\n" "$t" "$(command -v "$t")"; done'
    for line in conn.run(["sh", "-c", script, "sh", *TOOLS], timeout=20).stdout.splitlines():
        tool, _, path = line.partition(" ")
        facts.tools[tool] = path.strip()
    missing = [t for t in TOOLS if not facts.tools.get(t) and t != "iptables"]
    if missing:
        packages = {"ip": "iproute2", "tc": "iproute2", "tcpdump": "tcpdump", "setsid": "util-linux", "tar": "tar"}
        problems.append(f"{where}: {', '.join(missing)} not found (as root): install "
                        f"{' '.join(sorted({packages[t] for t in missing}))} there")
    facts.kernel = conn.run(["uname", "-r"], root=False, timeout=20).stdout.strip()
    try:
        facts.management_interfaces, facts.management_addresses = management_path(conn)
        links = {l["ifname"]: l for l in json.loads(conn.run(["ip", "-j", "link", "show"], timeout=20).stdout or "[]")}
        records = hoststate.read_host_records(conn)
        chains = conn.run(["sh", "-c", "iptables -w -t mangle -S 2>/dev/null | grep -o 'TBED-LOSS-[^ ]*' | sort -u; "
                                       "true"], timeout=20).stdout.split()
    except (CommandError, json.JSONDecodeError) as exc:
        return facts, problems + [f"{where}: cannot list its interfaces: {exc}"]
    for lab, record in sorted(records.items()):
        owner = record.get("controller", "?")
        problems.append(f"{where}: holds lab {lab!r} (from controller {owner}), not yet put back: if it is not running "
                        f"any more, `testbed clean --inventory INVENTORY` on {owner} restores the machine first")
    if chains and not records:
        problems.append(f"{where}: has the testbed's iptables chains {', '.join(chains)} but no lab record: remove "
                        f"them (`iptables -t mangle -F CHAIN; iptables -t mangle -X CHAIN`, after the PREROUTING jump)")
    # a data interface that is the management interface's VLAN parent, bond or bridge shares its fate
    shared = set(facts.management_interfaces)
    for name in list(facts.management_interfaces):
        link = links.get(name, {})
        shared.update(x for x in (link.get("link"), link.get("master")) if x)
    shared.update(n for n, l in links.items() if l.get("master") in facts.management_interfaces)
    present = [i for i in ifnames if i in links]
    for ifname in ifnames:
        if ifname not in links:
            problems.append(f"{where}: has no interface {ifname} (it has {', '.join(sorted(links))}): correct the "
                            f"link endpoint {node}:{ifname} in the topology")
        elif ifname in shared:
            what = "carries" if ifname in facts.management_interfaces else "shares a device with"
            problems.append(f"{where}: {ifname} {what} the SSH connection (management: "
                            f"{', '.join(facts.management_interfaces)}); the testbed never shapes, readdresses or "
                            f"takes it down: cable the data link to another interface")
    if present:
        facts.interfaces = hoststate.snapshot(conn, present)
        for ifname in present:
            state = facts.interfaces[ifname]
            if not state["up"]:
                problems.append(f"{where}: interface {ifname} is down: bring it up (`ip link set {ifname} up`) and "
                                "check its cable")
            problems += [f"{where}: {p}" for p in hoststate.restorable(node, ifname, state, keep_addresses)]
    return facts, problems


def management_path(conn: SshHost) -> tuple[list[str], list[str]]:
    """The interfaces of the machine that the SSH connection arrives on and leaves by, and the two addresses of
    the connection (the controller's, the machine's): a data subnet must contain neither."""
    out = conn.run("echo $SSH_CONNECTION", root=False, timeout=20).stdout.split()
    if len(out) < 4:
        return [], []
    client, server = out[0], out[2]
    names = set()
    for argv in (["ip", "-j", "addr", "show", "to", server], ["ip", "-j", "route", "get", client]):
        for entry in json.loads(conn.run(argv, timeout=20, check=False).stdout or "[]"):
            name = entry.get("ifname") or entry.get("dev")
            if name:
                names.add(name)
    return sorted(names), [client, server]


def preflight(conns: dict[str, SshHost], interfaces: dict[str, list[str]], keep_addresses: bool,
              inventory_path: str) -> dict[str, HostFacts]:
    """Check every node's machine; BackendError listing every problem when any is found."""
    def one(node: str) -> tuple[HostFacts, list[str]]:
        try:
            return check_host(node, conns[node], interfaces.get(node, []), keep_addresses)
        except (CommandError, HostError) as exc:
            return HostFacts(node, conns[node].name), [f"{node} (host {conns[node].name}): {exc}"]

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(conns)))) as pool:
        results = dict(zip(conns, pool.map(one, conns)))
    problems = [p for _, (_, ps) in results.items() for p in ps]
    if problems:
        head = f"the lab machines of inventory {inventory_path} are not ready (nothing was changed on any of them):"
        raise BackendError("\n  ".join([head, *problems]))
    return {node: facts for node, (facts, _) in results.items()}


