"""`testbed inspect`: a running lab as it is, read back from its nodes, not from the topology.

Per node, one shell command run through the node's access (so every backend answers the same way) reads
the interfaces and their addresses (``ip -j addr``), the qdiscs of the lab's interfaces with their counters
(``tc -j -s qdisc``, with netem's settings), the htb class's rate (``tc class show``, whose text carries what
``-j`` leaves out for htb), the iptables loss rule where netem is missing, and the
processes in the node's network namespace, each said to be the router (its process group is the one
``router.pid`` names in the node's work folder), traffic (``-m traffic``), a capture (tcpdump) or other.
Each direction of each link is then the shaping installed at its sender's egress (and loss at its
receiver's ingress), beside what the lab was built with.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from dataclasses import fields as dc_fields
from typing import Optional

from testbed import proc
from testbed.lab import state as labstate
from testbed.backends import Lab, get_backend
from testbed.links.shaping import CLASS_ID, LEAF_HANDLE
from testbed.spec.resolve import GilbertElliott, Reorder, Shaping

#: what runs on a node, by role
ROLES = ("router", "traffic", "capture", "other")

#: One run per node: markers ``@@<what> <dev>`` separate the outputs (args: the node's work folder, then its
#: lab interfaces). The processes are those whose network namespace is the shell's, except the shell itself.
NODE_SCRIPT = r"""
work=$1; shift
echo "@@addr"; ip -j addr show
for dev in "$@"; do
  echo "@@qdisc $dev"; tc -j -s qdisc show dev "$dev"
  echo "@@class $dev"; tc class show dev "$dev"
  echo "@@loss $dev"; iptables -w -t mangle -S "TBED-LOSS-$dev" 2>/dev/null
done
echo "@@routerpid"; cat "$work/router.pid" 2>/dev/null
echo "@@procs"
me=$(readlink /proc/self/ns/net); ino=${me#net:[}; ino=${ino%]}
for f in $(find /proc/[0-9]*/ns/net -maxdepth 0 -lname "net:?${ino}?" 2>/dev/null); do
  d=${f%/ns/net}; pid=${d#/proc/}
  [ "$pid" = "$$" ] && continue
  s=$(cat "$d/stat" 2>/dev/null) || continue
  s=${s##*) }; set -- $s
  args=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)
  [ -n "$args" ] && echo "$pid $3 $args"
done
true
"""


@dataclass
class Process:
    pid: int
    role: str  # one of ROLES
    command: str


@dataclass
class Interface:
    name: str
    addresses: list[str]
    up: bool
    #: "r2:eth1" for a lab link's end, None for the others (lo, the management interface)
    peer: Optional[str] = None
    link: Optional[int] = None
    qdiscs: list[dict] = field(default_factory=list)  # kind, handle, parent, sent bytes/packets, drops, backlog


@dataclass
class Direction:
    """One direction of a link: the shaping the lab was built with, and what the kernel has installed now
    (they differ after `testbed link` changed it, or where `--allow-missing` left something out)."""

    link: int
    sender: str
    receiver: str
    interface: str  # the sender's
    built: dict  # Shaping fields
    installed: dict  # Shaping fields read back
    as_built: bool
    built_text: str
    installed_text: str
    up: bool  # both ends' interfaces up
    sent_packets: Optional[int] = None
    drops: Optional[int] = None


@dataclass
class NodeView:
    name: str
    kind: str
    interfaces: list[Interface]
    processes: list[Process]
    error: Optional[str] = None  # the node could not be read


@dataclass
class LabView:
    name: str
    status: str
    backend: str
    spec: str
    holder: dict
    nodes: list[NodeView]
    directions: list[Direction]
    #: the routers `testbed up --routers` started (driver, client, per node), None without them
    routers: Optional[dict] = None

    def to_json(self) -> dict:
        return asdict(self)


# --- reading one node -------------------------------------------------------------------------------------------

def split_sections(out: str) -> dict[str, str]:
    """``@@what dev`` sections of the node script's output -> text, keyed ``what dev`` (or ``what``)."""
    sections: dict[str, list[str]] = {}
    key = None
    for line in out.splitlines():
        if line.startswith("@@"):
            key = line[2:].strip()
            sections[key] = []
        elif key is not None:
            sections[key].append(line)
    return {k: "\n".join(v) for k, v in sections.items()}


#: netem's limit when none is given (packets)
NETEM_DEFAULT_LIMIT = 1000


def tc_rate_bps(text: str) -> Optional[int]:
    """A rate as tc prints it (``10Mbit``, ``500Kbit``, ``1Gbit``, ``800bit``) in bits per second."""
    m = re.fullmatch(r"([\d.]+)([KMGT]?)(i?)bit", text.strip(), re.IGNORECASE)
    if not m:
        return None
    base = 1024 if m.group(3) else 1000
    power = "kmgt".find(m.group(2).lower()) + 1 if m.group(2) else 0
    return round(float(m.group(1)) * base ** power)


def iptables_loss_pct(rules: str) -> Optional[float]:
    """The loss a receiving interface's loss chain drops (``iptables -S`` of the chain), in percent."""
    m = re.search(r"--probability ([\d.]+)", rules)
    return round(float(m.group(1)) * 100, 4) if m else None


def _pct(options: dict, group: str, key: str) -> Optional[float]:
    """A fraction tc -j prints (0.01) as a percentage (1.0), None where it is absent or 0."""
    value = (options.get(group) or {}).get(key)
    return round(value * 100, 6) if value else None


def netem_shaping(options: dict) -> dict:
    """The :class:`Shaping` fields a netem's settings (its ``tc -j qdisc`` options) carry: delay, jitter and
    their correlation, loss (a rate, with its correlation, or a Gilbert-Elliott model), duplicate, reorder
    (with its gap and correlation), corrupt, limit (as ``queue_packets``, but not netem's default). The
    jitter's distribution is not among them: tc does not print it (``current_shaping`` keeps the recorded one)."""
    delay = options.get("delay") or {}
    fields: dict = {"delay_ns": round(delay["delay"] * 1e9) if delay.get("delay") else None,
                    "jitter_ns": round(delay["jitter"] * 1e9) if delay.get("jitter") else None,
                    "delay_correlation_pct": _pct(options, "delay", "correlation") if delay.get("jitter") else None,
                    "loss_pct": _pct(options, "loss-random", "loss"),
                    "loss_correlation_pct": _pct(options, "loss-random", "correlation"),
                    "duplicate_pct": _pct(options, "duplicate", "duplicate"),
                    "corrupt_pct": _pct(options, "corrupt", "corrupt")}
    if fields["loss_pct"] is None:
        fields["loss_correlation_pct"] = None
    ge = options.get("loss-gemodel")
    if ge:
        fields["loss_gemodel"] = GilbertElliott(*(round(ge[k] * 100, 6) for k in ("p", "r", "1-h", "1-k")))
    reorder = _pct(options, "reorder", "reorder")
    if reorder:
        gap = options.get("gap") or None
        fields["reorder"] = Reorder(reorder, gap if gap and gap > 1 else None,
                                    _pct(options, "reorder", "correlation"))
    limit = options.get("limit")
    fields["queue_packets"] = limit if limit and limit != NETEM_DEFAULT_LIMIT else None
    return fields


def installed_shaping(qdiscs: list[dict], class_text: str) -> Shaping:
    """The shaping one interface's egress really has (``tc -j qdisc`` and the htb class's text; loss without
    netem is the receiver's: iptables_loss_pct)."""
    fields: dict = {}
    m = re.search(rf"class htb {re.escape(CLASS_ID)} .*?\brate (\S+)", class_text)
    if m:
        fields["bw_bps"] = tc_rate_bps(m.group(1))
    leaf = next((q for q in qdiscs if q.get("handle") == LEAF_HANDLE), None)
    if leaf is not None and leaf.get("kind") == "pfifo":
        fields["queue_packets"] = (leaf.get("options") or {}).get("limit")
    netem = next((q for q in qdiscs if q.get("kind") == "netem"), None)
    if netem is not None:
        fields.update(netem_shaping(netem.get("options") or {}))
    return Shaping(**fields)


def appliance_shaping(lab) -> dict:
    """What the lab's impairment appliance has installed on each of its ports, read back from its kernel
    (testbed.links.appliance): ``(link index, the node the port leads to) -> Shaping``; {} without one."""
    from testbed.links.appliance import Appliance, ApplianceRecord

    record = lab.info.get("appliance")
    if not record:
        return {}
    appliance = Appliance(ApplianceRecord.from_json(record))
    if not appliance.alive():
        return {}
    ports = appliance.record.ports
    out = appliance.run([argv for p in ports for argv in (
        ["tc", "-j", "qdisc", "show", "dev", p.device], ["tc", "class", "show", "dev", p.device])])
    return {(p.link, p.node): installed_shaping(json.loads(out[2 * i] or "[]"), out[2 * i + 1])
            for i, p in enumerate(ports)}


def classify(pid: int, pgid: int, args: str, router_pid: Optional[int]) -> str:
    words = args.split()
    if router_pid is not None and (pid == router_pid or pgid == router_pid):
        return "router"
    if words and words[0].rsplit("/", 1)[-1] == "tcpdump":
        return "capture"
    if " -m traffic " in f" {args} ":
        return "traffic"
    return "other"


@dataclass
class NodeReading:
    """What the node script read on one node."""

    addresses: dict[str, tuple[list[str], bool]]  # ifname -> (CIDRs, up)
    qdiscs: dict[str, list[dict]]
    shaping: dict[str, Shaping]  # egress of each lab interface (loss: see receiver_loss)
    loss_rules: dict[str, str]  # ifname -> its ingress loss chain's rules
    processes: list[Process]


def read_node(access, ifnames: list[str]) -> NodeReading:
    out = access.run(["sh", "-c", NODE_SCRIPT, "testbed-inspect", access.work_dir, *ifnames], timeout=60).stdout
    sections = split_sections(out)
    addresses = {}
    for entry in json.loads(sections.get("addr") or "[]"):
        cidrs = [f"{a['local']}/{a['prefixlen']}" for a in entry.get("addr_info", []) if a.get("family") == "inet"]
        addresses[entry["ifname"]] = (cidrs, "UP" in entry.get("flags", []) and entry.get("operstate") != "DOWN")
    qdiscs, shaping, loss_rules = {}, {}, {}
    for dev in ifnames:
        raw = json.loads(sections.get(f"qdisc {dev}") or "[]")
        qdiscs[dev] = [{"kind": q.get("kind"), "handle": q.get("handle"), "parent": q.get("parent", "root"),
                        "options": q.get("options", {}), "sent_bytes": q.get("bytes"), "sent_packets": q.get("packets"),
                        "drops": q.get("drops"), "overlimits": q.get("overlimits"), "backlog_packets": q.get("qlen")}
                       for q in raw]
        loss_rules[dev] = sections.get(f"loss {dev}", "")
        shaping[dev] = installed_shaping(raw, sections.get(f"class {dev}", ""))
    words = (sections.get("routerpid") or "").split()
    router_pid = int(words[0]) if words and words[0].isdigit() else None
    processes = []
    for line in (sections.get("procs") or "").splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
            pid, pgid, args = int(parts[0]), int(parts[1]), parts[2].strip()
            processes.append(Process(pid, classify(pid, pgid, args, router_pid), args))
    return NodeReading(addresses, qdiscs, shaping, loss_rules, processes)


# --- the whole lab ----------------------------------------------------------------------------------------------

def lab_of(state: labstate.LabState) -> Lab:
    if not state.lab:
        raise RuntimeError(f"lab {state.name} is {state.status}: nothing to read yet")
    return Lab.from_json(state.lab)


def read_lab(state: labstate.LabState, only: Optional[set[str]] = None) -> LabView:
    """Read every node of a running lab, or the nodes ``only`` (in parallel); the directions of the links
    whose two ends were read."""
    lab = lab_of(state)
    backend = get_backend(lab.backend)
    ifnames = {n: [] for n in lab.nodes}
    for link in lab.links:
        ifnames[link.a.node].append(link.a.ifname)
        ifnames[link.b.node].append(link.b.ifname)

    def read(node: str):
        try:
            return node, read_node(backend.access(lab, node), ifnames[node]), None
        except Exception as exc:  # noqa: BLE001 - one node that cannot be read is said, not fatal
            return node, None, str(exc)

    readings = {node: (reading, error) for node, reading, error in
                proc.in_parallel(read, [n for n in lab.nodes if only is None or n in only])}
    peers = {}
    for link in lab.links:
        peers[(link.a.node, link.a.ifname)] = (f"{link.b.node}:{link.b.ifname}", link.index)
        peers[(link.b.node, link.b.ifname)] = (f"{link.a.node}:{link.a.ifname}", link.index)
    nodes = []
    for name, node in lab.nodes.items():
        if name not in readings:
            continue
        reading, error = readings[name]
        interfaces, processes = [], []
        if reading is not None:
            for ifname, (cidrs, up) in reading.addresses.items():
                peer, index = peers.get((name, ifname), (None, None))
                interfaces.append(Interface(ifname, cidrs, up, peer, index, reading.qdiscs.get(ifname, [])))
            processes = reading.processes
        nodes.append(NodeView(name, node.kind, interfaces, processes, error))
    directions = []
    carried = appliance_shaping(lab)
    for link in lab.links:
        for src, dst, built in ((link.a, link.b, link.shape_ab), (link.b, link.a, link.shape_ba)):
            sent, received = readings.get(src.node, (None,))[0], readings.get(dst.node, (None,))[0]
            if sent is None or received is None:
                continue
            installed = sent.shaping[src.ifname]
            in_appliance = carried.get((link.index, dst.node))
            if in_appliance is not None:  # what the impairment appliance installed on its port toward dst
                # (a netem limit there is the room its delay needs, not a queue that was asked)
                installed = replace(installed, **{f: getattr(in_appliance, f) for f in READ_BACK_PRECISION
                                                  if getattr(installed, f) is None and f != "queue_packets"})
            ingress_loss = iptables_loss_pct(received.loss_rules.get(dst.ifname, ""))
            if ingress_loss is not None:  # loss without netem: at the receiver's ingress
                installed = replace(installed, loss_pct=ingress_loss)
            leaf = next((q for q in sent.qdiscs[src.ifname] if q["handle"] == LEAF_HANDLE), None) or \
                next(iter(sent.qdiscs[src.ifname]), None)
            up = sent.addresses.get(src.ifname, ([], False))[1] and received.addresses.get(dst.ifname, ([], False))[1]
            directions.append(Direction(
                link.index, src.node, dst.node, src.ifname, asdict(built), asdict(installed),
                same_shaping(built, installed), built.describe(), installed.describe(), bool(up),
                leaf.get("sent_packets") if leaf else None, leaf.get("drops") if leaf else None))
    return LabView(state.name, state.status, lab.backend, state.spec_path, state.holder(), nodes, directions,
                   labstate.routers_shown(state.routers))


#: the fields read back, and how far a value read back may be from the one installed: tc prints a rate to 3-4
#: digits and times to 0.1 ms or 1 us, netem and iptables keep a probability to 2^-32 (a reorder or a loss
#: model: each of its fields). Not read back (tc does not print them, or not all): the jitter's distribution and
#: the AQM queue disciplines' parameters.
READ_BACK_PRECISION = {"bw_bps": 0.002, "delay_ns": 0.01, "jitter_ns": 0.01, "loss_pct": 0.001, "queue_packets": 0.0,
                       "delay_correlation_pct": 0.001, "loss_correlation_pct": 0.001, "loss_gemodel": 0.001,
                       "duplicate_pct": 0.001, "corrupt_pct": 0.001, "reorder": 0.001}


def _close(a, b, rel: float) -> bool:
    if is_dataclass(a) or is_dataclass(b):  # a reorder or a loss model: field by field
        if a is None or b is None:
            return a is None and b is None
        return all(_close(getattr(a, f.name), getattr(b, f.name), rel) for f in dc_fields(a))
    if not a or not b:
        return not a and not b
    return abs(a - b) <= rel * max(abs(a), abs(b))


def same_shaping(recorded: Shaping, installed: Shaping) -> bool:
    """Whether what is installed is ``recorded``, to the precision of the read-back."""
    return all(_close(getattr(recorded, f), getattr(installed, f), rel) for f, rel in READ_BACK_PRECISION.items())


def current_shaping(recorded: Shaping, installed: Shaping) -> Shaping:
    """The shaping a direction has now: each value as read back, or the recorded one where the read-back is
    that value to its precision (a rate of 12345678 bit/s reads back as 12345 kbit/s); the fields tc does not show
    (READ_BACK_PRECISION has not: the jitter's distribution, the AQM queue disciplines) as recorded."""
    return replace(recorded, **{f: getattr(recorded, f) if _close(getattr(recorded, f), getattr(installed, f), rel)
                                else getattr(installed, f) for f, rel in READ_BACK_PRECISION.items()})


# --- text ------------------------------------------------------------------------------------------------------

def render(view: LabView) -> list[str]:
    held = view.holder["text"]
    if not view.holder["alive"]:
        held += " - its holder is gone: `testbed clean` removes the lab"
    lines = [f"lab {view.name} ({view.backend}, {view.status}): held by {held}", f"  topology: {view.spec}"]
    if view.routers:
        lines.append(f"  routers started by `up --routers`: {view.routers['driver']} on "
                     f"{', '.join(view.routers['nodes'])}")
    for node in view.nodes:
        lines.append(f"node {node.name} ({node.kind})")
        if node.error:
            lines.append(f"  could not be read: {node.error}")
            continue
        for i in node.interfaces:
            if i.peer is None and i.name == "lo":
                continue
            to = f" -> {i.peer}" if i.peer else ""
            lines.append(f"  {i.name:8} {'up' if i.up else 'DOWN':4} {', '.join(i.addresses) or '-'}{to}")
        running = [p for p in node.processes if p.role != "other"]
        for p in running:
            lines.append(f"  {p.role:8} pid {p.pid}: {_short(p.command)}")
        others = len(node.processes) - len(running)
        if not running:
            lines.append("  no router, traffic or capture running")
        if others:
            lines.append(f"  {others} other process{'es' if others != 1 else ''} (--json lists them)")
    lines.append("links (shaping as installed, read back from tc and iptables):")
    for d in view.directions:
        mark = "" if d.as_built else f"   (built with: {d.built_text})"
        state = "" if d.up else " [DOWN]"
        counters = f"  sent {d.sent_packets} pkts, dropped {d.drops}" if d.sent_packets is not None else ""
        lines.append(f"  [{d.link}] {d.sender}->{d.receiver} ({d.interface}): "
                     f"{d.installed_text}{state}{counters}{mark}")
    return lines


def _short(command: str, width: int = 90) -> str:
    return command if len(command) <= width else command[:width - 3] + "..."


def states_to_inspect(lab: Optional[str], every: bool) -> list[labstate.LabState]:
    """The labs `inspect` shows: ``lab``, every lab (``every``), or the only one up."""
    if lab is not None:
        state = labstate.load(lab)
        if state is None:
            known = ", ".join(s.name for s in labstate.all_states()) or "none"
            raise LookupError(f"no lab named {lab!r} is up (labs up: {known})")
        return [state]
    states = [s for s in labstate.all_states() if s.status != "corrupt"]
    if len(states) > 1 and not every:
        raise LookupError(f"several labs are up ({', '.join(s.name for s in states)}): name one, or --all")
    return states

