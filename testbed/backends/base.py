"""What every backend offers: the lab it builds, access to each node, and the backend interface.

A backend (Mininet, Docker, ...) makes nodes and links and knows how to reach them; it knows
nothing of routers or traffic. Everything outside a backend package talks to a node only
through its :class:`NodeAccess` (run a command, start a process, put and fetch files, the
Ansible variables that reach it) and shapes a link end only through the backend's shaper,
so no other part assumes that a node is a local namespace or shares this machine's files.

A lab is described by plain data (:class:`Lab`, JSON in the lab state and ``lab.json``):
each node carries a backend-owned ``handle`` (what the backend needs to find the node again
from any process: a namespace name, a container id ...) that nothing else reads.
"""
from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from abc import ABC, abstractmethod
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from testbed import proc
from testbed.kernel import KernelCapabilities
from testbed.proc import Result
from testbed.spec.resolve import Shaping


#: Where a node's files for a lab live, on the node (on disk: pcaps grow fast): <NODE_ROOT>/<lab>/<node>
NODE_ROOT = "/var/lib/testbed/nodes"


def node_work_dir(lab: str, node: str) -> str:
    """The folder on a node, private to ``lab``, where runs put and write their files."""
    return f"{NODE_ROOT}/{lab}/{node}"


class BackendError(RuntimeError):
    """A backend cannot do what was asked; the message says what to do about it."""


@dataclass(frozen=True)
class LabFault:
    """A part of a lab, other than a node's processes, that died while the lab is up and without which its links
    do not carry what the topology says (e.g. the impairment appliance): a run ends on it."""

    part: str  # what kind of part, a short word (e.g. "appliance"): its log's name in a results folder
    what: str  # the part, named, and what happened to it (e.g. "the impairment appliance tbed-lab ... died")
    #: a log of it on this machine, gone once the lab is removed (a run copies it into its results folder)
    log: Optional[Path] = None


@dataclass(frozen=True)
class LabNode:
    name: str
    kind: str  # "router" or "host"
    handle: dict = field(default_factory=dict)  # backend-owned, JSON-serialisable


@dataclass(frozen=True)
class LabEnd:
    node: str
    ifname: str
    address: str  # CIDR, e.g. "10.10.0.1/30"

    @property
    def ip(self) -> str:
        return str(ipaddress.ip_interface(self.address).ip)


@dataclass(frozen=True)
class LabLink:
    index: int
    a: LabEnd
    b: LabEnd
    weight: int
    shape_ab: Shaping  # traffic a -> b, shaped at a's egress
    shape_ba: Shaping

    @property
    def label(self) -> str:
        return f"{self.a.node}:{self.a.ifname}<->{self.b.node}:{self.b.ifname}"

    def end(self, node: str) -> LabEnd:
        if node == self.a.node:
            return self.a
        if node == self.b.node:
            return self.b
        raise KeyError(f"link {self.label} has no end on node {node!r}")

    def other(self, node: str) -> LabEnd:
        return self.b if self.end(node) is self.a else self.a


@dataclass
class Lab:
    name: str
    backend: str
    nodes: dict[str, LabNode]
    links: list[LabLink]
    #: what shaping was really installed per direction, and anything left out
    applied: list[dict] = field(default_factory=list)
    #: the backend's own facts for the manifest (versions, image id ...)
    info: dict = field(default_factory=dict)

    def node(self, name: str) -> LabNode:
        try:
            return self.nodes[name]
        except KeyError:
            raise KeyError(f"lab {self.name!r} has no node {name!r} (nodes: {', '.join(self.nodes)})") from None

    def find_link(self, ref: "int | str") -> LabLink:
        """A link by index, or by `a-b` / `a:eth1-b:eth1` naming its two ends."""
        if isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()):
            i = int(ref)
            if not 0 <= i < len(self.links):
                raise KeyError(f"lab {self.name!r} has no link {i} (links 0..{len(self.links) - 1})")
            return self.links[i]
        left, sep, right = str(ref).partition("-")
        if not sep:
            raise KeyError(f"link reference {ref!r} is neither an index nor 'a-b'")
        matches = [link for link in self.links if _end_matches(link, left, right) or _end_matches(link, right, left)]
        if len(matches) != 1:
            what = "no link" if not matches else "several links"
            raise KeyError(f"lab {self.name!r} has {what} matching {ref!r}")
        return matches[0]

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "backend": self.backend,
            "info": self.info,
            "nodes": {n.name: {"kind": n.kind, "handle": n.handle} for n in self.nodes.values()},
            "links": [
                {
                    "index": link.index,
                    "weight": link.weight,
                    "a": asdict(link.a),
                    "b": asdict(link.b),
                    "shape_ab": asdict(link.shape_ab),
                    "shape_ba": asdict(link.shape_ba),
                }
                for link in self.links
            ],
            "applied": self.applied,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Lab":
        nodes = {name: LabNode(name, v["kind"], dict(v.get("handle") or {})) for name, v in data["nodes"].items()}
        links = [
            LabLink(
                index=d["index"],
                a=LabEnd(d["a"]["node"], d["a"]["ifname"], d["a"]["address"]),
                b=LabEnd(d["b"]["node"], d["b"]["ifname"], d["b"]["address"]),
                weight=d["weight"],
                shape_ab=Shaping.from_dict(d["shape_ab"]),
                shape_ba=Shaping.from_dict(d["shape_ba"]),
            )
            for d in data["links"]
        ]
        return cls(data["name"], data["backend"], nodes, links, list(data.get("applied", [])),
                   dict(data.get("info") or {}))


def _end_matches(link: LabLink, left: str, right: str) -> bool:
    def match(end: LabEnd, ref: str) -> bool:
        node, _, ifname = ref.partition(":")
        return end.node == node and (not ifname or end.ifname == ifname)

    return match(link.a, left) and match(link.b, right)


class NodeProcess(Protocol):
    """A long-running process on a node, started by :meth:`NodeAccess.spawn`."""

    def poll(self) -> Optional[int]:
        """Its exit status, or None while it runs."""

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait for it to end (raises subprocess.TimeoutExpired after ``timeout``)."""

    def send_signal(self, sig: int) -> None:
        """Signal the process itself (not a wrapper around it)."""

    def kill(self) -> None:
        """SIGKILL the process."""


class NodeAccess(Protocol):
    """How everything outside a backend reaches one node."""

    node: str
    #: a folder on the node, private to this lab, where runs may put and write files
    work_dir: str
    #: the node's files and process IDs are this machine's (a namespace of a Mininet lab): deployment may share
    #: one copy of the code between such nodes
    shares_machine: bool
    #: the node reads this machine's kernel clock (a namespace, a container): a time taken on it compares with
    #: one taken on another such node, so a one-way delay is measured directly
    shares_clock: bool

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0,
            input_text: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> Result:
        """Run a command on the node to completion (raises testbed.proc.CommandError when ``check``)."""

    def spawn(self, argv: Sequence[str], *, log: Optional[str] = None,
              env: Optional[Mapping[str, str]] = None) -> NodeProcess:
        """Start a long-running command on the node; its stdout and stderr go to ``log`` (a path on the node)."""

    def put(self, local: Path, remote: str) -> None:
        """Copy a local file or folder to ``remote`` on the node (parents created)."""

    def fetch(self, remote: str, local: Path) -> None:
        """Copy a file or folder of the node to ``local`` on this machine (parents created)."""

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        """The command line that runs ``argv`` on the node interactively (for `testbed exec`)."""


class Shaper(Protocol):
    """Installs and changes the shaping of one direction of one link (see testbed.links.shaping)."""

    def install(self, shape: Shaping) -> Any:
        """Install ``shape`` on an interface the lab just made (nothing of ours on it yet)."""

    def apply(self, shape: Shaping, previous: Optional[Shaping] = None) -> Any:
        """Install ``shape``, replacing whatever is there (``previous``, the shaping installed now, if known):
        a scenario's `set_link`, `testbed link`."""

    def set_link_state(self, up: bool) -> None:
        ...


class Management(ABC):
    """Management access to a lab's nodes (for Ansible, metrics scraping and the admin API).

    It never carries data traffic: it reaches each node from the controller, not the nodes
    from each other. The optional parts have defaults here: a backend overrides them when it has them.
    """

    #: node -> the address the controller reaches it on
    hosts: dict[str, str]
    #: where Ansible keeps its SSH connection masters for this lab (None: Ansible's own default)
    control_dir: Optional[Path] = None

    @abstractmethod
    def start(self) -> None:
        ...

    @abstractmethod
    def inventory_vars(self, node: str) -> dict[str, Any]:
        """Ansible variables that reach ``node`` (ansible_host, user, key, ssh args, python)."""

    @abstractmethod
    def run(self, node: str, command: str, timeout_s: float = 30.0):
        """Run a shell command on ``node`` over the management path (returns CompletedProcess)."""

    @abstractmethod
    def close(self) -> None:
        ...

    @abstractmethod
    def to_json(self) -> dict:
        ...

    def machine_entries(self) -> Optional[dict[str, list[str]]]:
        """node -> the argv prefix that runs a command in it from this machine, when every node shares this
        machine's files and process IDs: deployment then works once for the machine (playbooks/*-machine.yml).
        None (the default): the nodes are deployed one by one."""
        return None


class Backend(ABC):
    """Where nodes live. Chosen by name (`--backend`, or `backend:` in the topology), built from its
    :class:`~testbed.backends.options.BackendOptions` by :func:`testbed.backends.get_backend`.

    The abstract methods are what every backend must do; the others have defaults a backend may override.
    """

    name: str = ""

    @abstractmethod
    def check(self, spec) -> None:
        """Refuse, before anything is built, what this backend cannot do here (BackendError with the fix)."""

    @abstractmethod
    def probe(self) -> KernelCapabilities:
        """What the nodes' kernel can do for shaping, found by trying it."""

    @abstractmethod
    def plan(self, spec) -> dict:
        """What ``up`` will create, as JSON (recorded in the lab state before building, for `clean`)."""

    @abstractmethod
    def up(self, spec) -> Lab:
        """Create nodes and links (addresses assigned, interfaces up, not yet shaped)."""

    @abstractmethod
    def release(self, lab_name: str, plan: dict, lab: Optional[dict]) -> list[str]:
        """Remove a lab, everything ``up`` created, from what its lab state records (:meth:`plan`, and the lab
        if it was built); returns what was removed. The one teardown: the process that built the lab calls it
        (testbed.lab.session.LabSession.close, after :meth:`let_go`), and so do `testbed down` and
        `testbed clean` from another process after its owner died."""

    @abstractmethod
    def leftovers(self, live_labs: set[str]) -> list[str]:
        """Describe anything of this backend's that belongs to no live lab (for `clean`)."""

    @abstractmethod
    def release_leftovers(self, live_labs: set[str]) -> list[str]:
        """Remove what :meth:`leftovers` lists; returns what was removed."""

    @abstractmethod
    def access(self, lab: Lab, node: str) -> NodeAccess:
        ...

    @abstractmethod
    def shaper(self, lab: Lab, link: LabLink, sender: str, caps: KernelCapabilities,
               allow_missing: bool = False) -> Shaper:
        """The shaper of traffic leaving ``sender`` on ``link``."""

    @abstractmethod
    def management(self, lab: Lab) -> Management:
        """Management access to every node of ``lab`` (not yet started)."""

    @abstractmethod
    def versions(self) -> dict:
        """Versions of what this backend drives, for the run manifest."""

    @abstractmethod
    def clocks(self, lab: Lab) -> dict:
        """Each node's clock offset to this machine's and its error bound (runfolder.records.ClockReading by
        node)."""

    #: whether this backend can carry links through the impairment appliance (testbed.links.appliance)
    carries_appliance: bool = False

    def carry_through_appliance(self, lab: Lab, spec, record) -> None:
        """Put the links of ``record`` (an appliance.ApplianceRecord) through the impairment appliance: boot it,
        replace the links' ends by its taps (same names and addresses). Only backends with
        :attr:`carries_appliance` do."""
        raise BackendError(f"the {self.name} backend cannot use the impairment appliance")

    def faults(self, lab: Lab) -> list[LabFault]:
        """The parts of ``lab`` that died (a run watches them during its traffic). The default: none to watch."""
        return []

    def let_go(self) -> None:
        """Drop what this backend object holds of the lab it built in this process (e.g. Mininet's host
        shells), just before :meth:`release` removes the lab. The default: nothing held."""

    def install_shaping(self, lab: Lab, caps: KernelCapabilities, allow_missing: bool = False) -> list[tuple]:
        """Install the shaping of every direction of every link of a lab just built; returns
        ``(link, sender, receiver, plan)`` per direction. The default: each direction through its
        :meth:`shaper`, many at once (every direction's commands are its own interface's); a backend
        that can batch them (the ssh backend, through Ansible) overrides it. Shaping the kernel cannot do
        raises testbed.links.shaping.UnsupportedShaping (a ValueError), here with the link and direction
        named in front of the shaper's reason."""
        return self._install_directions(lab, caps, allow_missing, lambda shaper, shape: shaper.install(shape))

    def _install_directions(self, lab: Lab, caps: KernelCapabilities, allow_missing: bool,
                            install_one: Callable[[Any, Shaping], Any]) -> list[tuple]:
        """:meth:`install_shaping`'s work: ``install_one(shaper, shape)`` for every direction, many at once."""
        def install(direction):
            link, src, dst, shape = direction
            shaper = self.shaper(lab, link, src.node, caps, allow_missing=allow_missing)
            try:
                return link, src.node, dst.node, install_one(shaper, shape)
            except ValueError as exc:  # the same error (type, traceback), told for this direction
                exc.args = (f"link {link.label} ({src.node}->{dst.node}): {exc}",)
                raise

        return proc.in_parallel(install, [d for link in lab.links for d in (
            (link, link.a, link.b, link.shape_ab), (link, link.b, link.a, link.shape_ba))])
