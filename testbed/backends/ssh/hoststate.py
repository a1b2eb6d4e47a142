"""What a lab machine's data interfaces looked like before the testbed touched them, and how
to put them back exactly so.

Recorded before any change, per data interface: ``tc -j qdisc show``, ``ip -j addr show``
and the link's up/down flag. The record is kept in the controller's lab state and, as
``/var/lib/testbed/labs/<lab>.json``, on the machine itself, so `testbed clean --inventory`
can restore a machine even when the controller's state is gone.

Restoring deletes the root qdisc (the kernel puts its default back), removes the testbed's
iptables chains, puts back the IPv4 addresses in their order with their attributes, and
the up/down state; IPv6 addresses are never touched. Only what can be put back exactly
is accepted: an interface with a qdisc someone configured, or an IPv4 address from DHCP,
is refused before anything changes (see :func:`restorable`).
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Optional

from testbed import sweep
from testbed.backends.ssh.access import LAB_ENV, NODE_ENV
from testbed.proc import CommandError
from testbed.links.shaping import loss_chain

LABS_DIR = "/var/lib/testbed/labs"
#: ingress/clsact qdiscs hang off this parent; the testbed never touches them
_INGRESS_PARENT = "ffff:fff1"


def host_record_path(lab: str) -> str:
    return f"{LABS_DIR}/{lab}.json"


def snapshot(conn, ifnames: list[str]) -> dict[str, dict]:
    """``{ifname: {"qdisc": [...], "addr": {...}, "up": bool}}`` read on the machine now."""
    script = "for i in \"$@\"; do echo \"== $i\"; tc -j qdisc show dev \"$i\"; echo; ip -j addr show dev \"$i\"; " \
             "echo; ip -j -4 route show dev \"$i\"; echo; done"
    out = conn.run(["sh", "-c", script, "sh", *ifnames], timeout=30).stdout
    result: dict[str, dict] = {}
    for block in out.split("== ")[1:]:
        name, _, rest = block.partition("\n")
        lines = [l for l in rest.splitlines() if l.strip()]
        qdisc = json.loads(lines[0]) if lines else []
        addr = json.loads(lines[1]) if len(lines) > 1 else []
        routes = json.loads(lines[2]) if len(lines) > 2 else []
        link = addr[0] if addr else {}
        result[name.strip()] = {"qdisc": qdisc, "addr": link, "routes": routes, "up": "UP" in link.get("flags", [])}
    return result


def restorable(node: str, ifname: str, state: dict, keep_addresses: bool) -> list[str]:
    """Why this interface could not be put back exactly as it is (empty: it can)."""
    problems = []
    for q in state["qdisc"]:
        if q.get("parent") == _INGRESS_PARENT or q.get("kind") in ("ingress", "clsact"):
            continue
        if q.get("handle") not in ("0:", None):
            where = "root" if q.get("root") else f"parent {q.get('parent')}"
            problems.append(f"{node}:{ifname} has a qdisc someone configured ({q.get('kind')} {q.get('handle')} "
                            f"{where}), which the testbed could not put back: remove it (`tc qdisc del dev "
                            f"{ifname} root` on {node}) or use another interface")
            break
    if not keep_addresses:
        for r in state.get("routes", []):
            if r.get("protocol") != "kernel":
                via = f" via {r['gateway']}" if r.get("gateway") else ""
                problems.append(f"{node}:{ifname} carries a route someone set ({r.get('dst')}{via}), which replacing "
                                "the interface's addresses would delete: move it to another interface, or pass "
                                "--keep-addresses to run on the machines' own addresses")
                break
        for a in state["addr"].get("addr_info", []):
            if a.get("family") == "inet" and a.get("dynamic"):
                problems.append(f"{node}:{ifname} has an address from DHCP ({a['local']}/{a['prefixlen']}), which "
                                "the testbed could not put back as it was: give the interface a static address, or "
                                "pass --keep-addresses to run on the machines' own addresses")
    return problems


def ipv4_addresses(state: dict) -> list[dict]:
    return [a for a in state["addr"].get("addr_info", []) if a.get("family") == "inet"]


def _addr_add(ifname: str, a: dict) -> list[str]:
    argv = ["ip", "addr", "add", f"{a['local']}/{a['prefixlen']}"]
    if a.get("address") and a["address"] != a["local"]:
        argv += ["peer", f"{a['address']}/{a['prefixlen']}"]
    if a.get("broadcast"):
        argv += ["broadcast", a["broadcast"]]
    if a.get("scope"):
        argv += ["scope", str(a["scope"])]
    if a.get("label") and a["label"] != ifname:
        argv += ["label", a["label"]]
    if a.get("noprefixroute"):
        argv.append("noprefixroute")
    for life in ("valid_life_time", "preferred_life_time"):
        value = a.get(life)
        if value is not None and value != 4294967295:
            argv += [life.replace("_life_time", "_lft"), str(value)]
    return [*argv, "dev", ifname]


def restore_commands(ifname: str, state: dict, keep_addresses: bool) -> list[str]:
    """Shell commands that put ``ifname`` back as ``state`` recorded it (each tolerant of being run twice)."""
    chain = loss_chain(ifname)
    cmds = [
        # the testbed's loss emulation on this interface (iptables statistic match)
        f"while iptables -w -t mangle -D PREROUTING -i {shlex.quote(ifname)} -j {chain} 2>/dev/null; do :; done",
        f"iptables -w -t mangle -F {chain} 2>/dev/null; iptables -w -t mangle -X {chain} 2>/dev/null; true",
        f"tc qdisc del dev {shlex.quote(ifname)} root 2>/dev/null; true",
    ]
    if not keep_addresses:
        cmds.append(f"ip -4 addr flush dev {shlex.quote(ifname)}")
        cmds += [shlex.join(_addr_add(ifname, a)) for a in ipv4_addresses(state)]
    cmds.append(f"ip link set dev {shlex.quote(ifname)} {'up' if state['up'] else 'down'}")
    return cmds


def differences(node: str, before: dict[str, dict], now: dict[str, dict]) -> list[str]:
    """Where an interface is not as recorded (empty when all are)."""
    diffs = []
    for ifname, was in before.items():
        is_ = now.get(ifname)
        if is_ is None:
            diffs.append(f"{node}:{ifname} is gone")
            continue
        if _comparable_qdiscs(was["qdisc"]) != _comparable_qdiscs(is_["qdisc"]):
            diffs.append(f"{node}:{ifname} qdiscs {_kinds(is_['qdisc'])}, were {_kinds(was['qdisc'])}")
        if _addrs(was) != _addrs(is_):
            diffs.append(f"{node}:{ifname} addresses {_addrs(is_)}, were {_addrs(was)}")
        if _routes(was) != _routes(is_):
            diffs.append(f"{node}:{ifname} routes {_routes(is_)}, were {_routes(was)}")
        if was["up"] != is_["up"]:
            diffs.append(f"{node}:{ifname} is {'up' if is_['up'] else 'down'}, was {'up' if was['up'] else 'down'}")
    return diffs


def _comparable_qdiscs(qdiscs: list[dict]) -> list[tuple]:
    return [(q.get("kind"), q.get("handle"), q.get("parent"), bool(q.get("root")),
             json.dumps(q.get("options", {}), sort_keys=True)) for q in qdiscs]


def _kinds(qdiscs: list[dict]) -> str:
    return ",".join(f"{q.get('kind')} {q.get('handle')}" for q in qdiscs) or "none"


def _routes(state: dict) -> list[str]:
    return sorted(f"{r.get('dst')} via {r.get('gateway', '-')} proto {r.get('protocol', '-')}"
                  for r in state.get("routes", []))


def _addrs(state: dict) -> list[str]:
    return [f"{a['local']}/{a['prefixlen']}" for a in ipv4_addresses(state)]


# --- processes of ours ---------------------------------------------------------------


def stop_processes(conn, python: str, lab: str, node: str, folder: str) -> list[int]:
    """Kill every process of ours on the machine (run as root with python3 there): those whose environment
    carries the lab's and node's markers (every process started through node access, and all it started:
    the environment is inherited, whatever namespace a child moves to or whoever adopts it), or whose
    command line names something under the node's work folder ``folder``. Repeated until none is left:
    SIGTERM, 2 s, then freeze and SIGKILL (testbed.sweep, whose source runs on the machine). Returns the
    pids signalled; a CommandError names the processes that could not be killed."""
    source = Path(sweep.__file__).read_text()
    marks = [f"{LAB_ENV}={lab}", f"{NODE_ENV}={node}"]
    # the source goes on stdin (not -c): a failure's message names the command, not 7 KB of Python
    out = conn.run([python, "-", folder, *marks], input_text=source, timeout=sweep.DEADLINE_S + 30).stdout.split()
    return [int(p) for p in out]


def write_host_record(conn, lab: str, record: dict) -> None:
    conn.run(["sh", "-c", f'mkdir -p {LABS_DIR} && umask 077 && cat > "$1.tmp" && mv "$1.tmp" "$1"', "sh",
              host_record_path(lab)], input_text=json.dumps(record))


def read_host_records(conn) -> dict[str, dict]:
    """The lab records kept on the machine, by lab name."""
    out = conn.run(["sh", "-c", f'for f in {LABS_DIR}/*.json; do [ -f "$f" ] && {{ echo "== $f"; cat "$f"; echo; }}; '
                                'done; true'], timeout=30).stdout
    records = {}
    for block in out.split("== ")[1:]:
        path, _, body = block.partition("\n")
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            continue
        records[data.get("lab") or path.rsplit("/", 1)[-1][:-5]] = data
    return records


def remove_host_record(conn, lab: str) -> None:
    conn.run(["rm", "-f", host_record_path(lab)], check=False)


def restore_node(conn, python: str, lab: str, node: str, work_dir: str, interfaces: dict[str, dict],
                 keep_addresses: bool) -> tuple[list[str], list[str]]:
    """Stop our processes, put every data interface back, remove the node's folder and record.

    Returns (what was done, differences left) — the differences are checked after restoring.
    """
    done = [f"process {pid} on {node}" for pid in stop_processes(conn, python, lab, node, work_dir)]
    for ifname, state in interfaces.items():
        script = "\n".join(restore_commands(ifname, state, keep_addresses))
        try:
            conn.run(["sh", "-c", script], timeout=60)
        except CommandError as exc:
            raise CommandError([f"{node}: restore {ifname}"], exc.returncode, exc.stderr) from None
        done.append(f"interface {node}:{ifname} restored")
    # the node's folder, and the lab's folder above it once no other node of the lab uses this machine
    conn.run(["sh", "-c", 'rm -rf "$1"; rmdir "$(dirname "$1")" 2>/dev/null; true', "sh", work_dir], check=False)
    left = differences(node, interfaces, snapshot(conn, list(interfaces)))
    if not left:
        remove_host_record(conn, lab)
    return done, left


def first_ipv4(state: dict) -> Optional[str]:
    """The interface's first global IPv4 address as CIDR (for --keep-addresses)."""
    for a in ipv4_addresses(state):
        if a.get("scope", "global") == "global":
            return f"{a['local']}/{a['prefixlen']}"
    return None
