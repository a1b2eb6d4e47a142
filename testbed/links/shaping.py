"""Link shaping with tc (and iptables where netem is missing), per direction of a link.

A direction A->B is shaped at A's egress: an htb class for bandwidth, with a leaf
qdisc for the queue (pfifo, or the ``qdisc`` asked: fq_codel, cake, red, pie) or for
netem's impairments (delay, jitter, loss, loss models, duplicate, reorder, corrupt;
where the kernel has netem). Their arguments are testbed.links.impairments'. Where netem is missing, loss is emulated with the iptables `statistic`
match on B's ingress (mangle PREROUTING), so that to the sender it looks exactly
like loss on the wire (a drop in the sender's OUTPUT chain would instead return
EPERM to the sending socket).

An interface shaped to a rate also gets ``gso_max_size`` 1500: the kernel then hands
htb one frame of at most 1500 bytes at a time, as a wire carries them. With the
default (64 KiB generic segmentation offload on veth) htb releases a 64 KiB burst at
once and makes everything behind it wait for the tokens it overdrew (measured: a
ping behind a paced TCP transfer on a 100 Mbit/s htb waited up to 3.4 ms, and 0.07 ms
with the cap; docs/benchmarks.md "Large messages").

Changes at run time keep the qdisc tree when its shape is unchanged (`tc class
change` / `tc qdisc change`), so packets already queued are not thrown away.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Optional

from testbed import proc
from testbed.kernel import FEATURE_HINTS, KernelCapabilities
from testbed.links.impairments import NETEM_FEATURES, netem_change_args, netem_impairment_args, queue_args
from testbed.spec.resolve import FEATURE_FIELDS, FEATURES, Shaping

if TYPE_CHECKING:
    from testbed.backends.base import NodeAccess

ROOT_HANDLE = "1:"
SHAPED_GSO_MAX_SIZE = 1500  # bytes: one frame per packet on a rate-shaped interface
CLASS_ID = "1:1"
LEAF_HANDLE = "10:"


class UnsupportedShaping(ValueError):
    """The kernel cannot do what a link asks for."""


@dataclass(frozen=True)
class TcPlan:
    """What to install for one direction, after matching the request to the kernel."""

    rate_bps: Optional[int]
    leaf: Optional[str]  # "netem", "pfifo", "fq_codel", "cake", "red", "pie" or None
    leaf_args: tuple[str, ...]
    iptables_loss_pct: Optional[float]
    dropped: tuple[str, ...] = field(default=())
    #: feature -> who installed it ("host kernel", or "appliance (user-mode Linux <version>)"); empty: all the host's
    providers: dict = field(default_factory=dict)
    #: the commands run inside the impairment appliance for this direction, and its port (testbed.links.appliance)
    appliance_commands: tuple[str, ...] = field(default=())
    appliance_port: Optional[str] = None
    #: the leaf's arguments for ``tc qdisc change`` where they are not ``leaf_args`` (a netem's:
    #: testbed.links.impairments.netem_change_args), and whether a tree of the same shape can be changed in place
    #: to this one at all (not a netem to a jitter without a table)
    leaf_change_args: Optional[tuple[str, ...]] = None
    in_place: bool = True

    @property
    def qdisc_kinds(self) -> list[str]:
        kinds = ["htb"] if self.rate_bps is not None else []
        if self.leaf:
            kinds.append(self.leaf)
        return kinds

    @property
    def tree(self) -> tuple[bool, Optional[str]]:
        """The shape of the qdisc tree; a change that keeps it can be applied in place."""
        return (self.rate_bps is not None, self.leaf)


def plan(shape: Shaping, caps: KernelCapabilities, *, allow_missing: bool = False,
         previous: Optional[Shaping] = None) -> TcPlan:
    """Turn a requested shape into tc/iptables settings this kernel can install.

    One leaf under the rate's htb class: netem with every netem feature (testbed.links.impairments.netem_args'
    features; a ``queue`` is then netem's limit), else the queue discipline (``queue_args``); plain loss without
    netem goes to iptables. Raises :class:`UnsupportedShaping` naming the missing feature, unless
    ``allow_missing`` is set, in which case the feature is left out and listed in ``dropped``.
    """
    dropped: list[str] = []
    for feature in (f for f in FEATURES if f in shape.features()):
        if caps.supports(feature):
            continue
        if not allow_missing:
            raise UnsupportedShaping(f"{feature}: {FEATURE_HINTS[feature]}")
        dropped.append(feature)
    kept = shape.without(dropped)
    queue = kept.queue_packets
    netem = netem_impairment_args(kept)
    if netem and caps.has_qdisc("netem"):
        if kept.qdisc is not None:
            raise UnsupportedShaping(f"{kept.qdisc.kind} with {', '.join(sorted(kept.features() & NETEM_FEATURES))}: "
                                     "on the host kernel a direction has one leaf qdisc, netem or the queue "
                                     "discipline; the impairment appliance does both (docs/impairments.md)")
        change = netem_change_args(kept, previous)
        return TcPlan(kept.bw_bps, "netem", tuple(netem + _opt_limit(queue)), None, tuple(dropped),
                      leaf_change_args=tuple(change + _opt_limit(queue)) if change is not None else None,
                      in_place=change is not None)
    iptables_loss = kept.loss_pct  # only plain loss is left here: the others need netem
    if kept.qdisc is not None:
        kind, args = queue_args(kept)
        return TcPlan(kept.bw_bps, kind, tuple(args), iptables_loss, tuple(dropped))
    if queue is not None and not caps.has_qdisc("pfifo"):  # netem's limit is a queue too
        return TcPlan(kept.bw_bps, "netem", ("limit", str(queue)), iptables_loss, tuple(dropped))
    if queue is not None:
        return TcPlan(kept.bw_bps, "pfifo", ("limit", str(queue)), iptables_loss, tuple(dropped))
    return TcPlan(kept.bw_bps, None, (), iptables_loss, tuple(dropped))


def _opt_limit(queue: Optional[int]) -> list[str]:
    return [] if queue is None else ["limit", str(queue)]


def as_installed(shape: Shaping, dropped: Iterable[str]) -> str:
    """What a direction got: ``shape`` without the features its plan left out (``--allow-missing``), and what
    was left out, e.g. ``20mbit queue 30 (left out, this kernel cannot: delay 5ms, jitter 1ms)``."""
    left_out = [f for f in FEATURES if f in set(dropped) and f in shape.features()]
    if not left_out:
        return shape.describe()
    asked = []
    for feature in left_out:
        text = Shaping(**{name: getattr(shape, name) for name in FEATURE_FIELDS[feature]}).describe()
        asked.append(f"{feature} {text}" if text[:1].isdigit() else text)
    return f"{shape.without(left_out).describe()} (left out, this kernel cannot: {', '.join(asked)})"


def htb_class_args(rate_bps: int) -> list[str]:
    """htb class parameters: a burst of 2 ms at the rate (at least two full frames)."""
    burst = max(3200, rate_bps // 8 // 500)
    quantum = max(1600, min(200_000, rate_bps // 8 // 1000))
    return [
        "rate", f"{rate_bps}bit", "ceil", f"{rate_bps}bit",
        "burst", str(burst), "cburst", str(burst), "quantum", str(quantum),
    ]


def loss_chain(ifname: str) -> str:
    return f"TBED-LOSS-{ifname}"


def rebuild_commands(dev: str, p: TcPlan) -> list[list[str]]:
    """The tc commands that install ``p`` on ``dev`` once its root qdisc is gone (the kernel's default back)."""
    cmds: list[list[str]] = []
    leaf_parent = ["root"]
    if p.rate_bps is not None:
        cmds.append(["ip", "link", "set", "dev", dev, "gso_max_size", str(SHAPED_GSO_MAX_SIZE)])
        cmds.append(["tc", "qdisc", "add", "dev", dev, "root", "handle", ROOT_HANDLE, "htb", "default", "1"])
        cmds.append(["tc", "class", "add", "dev", dev, "parent", ROOT_HANDLE, "classid", CLASS_ID, "htb",
                     *htb_class_args(p.rate_bps)])
        leaf_parent = ["parent", CLASS_ID]
    if p.leaf:
        cmds.append(["tc", "qdisc", "add", "dev", dev, *leaf_parent, "handle", LEAF_HANDLE, p.leaf, *p.leaf_args])
    return cmds


def _mangle(*args: str) -> list[str]:
    return ["iptables", "-w", "-t", "mangle", *args]


def loss_chain_commands(dst_if: str) -> list[list[str]]:
    """Create the receiving interface's loss chain and jump to it from PREROUTING."""
    chain = loss_chain(dst_if)
    return [_mangle("-N", chain), _mangle("-A", "PREROUTING", "-i", dst_if, "-j", chain)]


def loss_rule_command(dst_if: str, loss_pct: float) -> list[str]:
    return _mangle("-A", loss_chain(dst_if), "-m", "statistic", "--mode", "random",
                   "--probability", f"{loss_pct / 100:.6f}", "-j", "DROP")


@dataclass(frozen=True)
class ShapingCommands:
    """What installs one direction on interfaces that carry nothing of ours yet: commands for the sending
    node and for the receiving node, each ``(argv, may_fail)``."""

    plan: TcPlan
    sender: list[tuple[list[str], bool]]
    receiver: list[tuple[list[str], bool]]


def fresh_install(src_if: str, dst_if: str, shape: Shaping, caps: KernelCapabilities, *,
                  allow_missing: bool = False) -> ShapingCommands:
    """The commands :class:`DirectionShaper` would run to install ``shape`` on untouched interfaces, for a
    backend that installs them in one batch (the ssh backend, through Ansible)."""
    p = plan(shape, caps, allow_missing=allow_missing)
    # deleting the root qdisc of an interface that has the kernel's default fails harmlessly
    sender = [(["tc", "qdisc", "del", "dev", src_if, "root"], True)] + [(c, False) for c in rebuild_commands(src_if, p)]
    receiver = []
    if p.iptables_loss_pct is not None:
        receiver = [(c, False) for c in loss_chain_commands(dst_if)]
        receiver.append((loss_rule_command(dst_if, p.iptables_loss_pct), False))
    return ShapingCommands(p, sender, receiver)


class DirectionShaper:
    """Installs and changes the shaping of traffic leaving interface ``src_if`` of a node toward
    interface ``dst_if`` of its neighbour; commands run on the nodes through their access."""

    def __init__(self, src: "NodeAccess", src_if: str, dst: "NodeAccess", dst_if: str, caps: KernelCapabilities,
                 *, allow_missing: bool = False):
        self.src, self.src_if = src, src_if
        self.dst, self.dst_if = dst, dst_if
        self.caps = caps
        self.allow_missing = allow_missing

    def apply(self, shape: Shaping, previous: Optional[Shaping] = None) -> TcPlan:
        """Install ``shape``, replacing whatever is there (``previous``, if known), keeping the qdisc tree when
        possible."""
        new = plan(shape, self.caps, allow_missing=self.allow_missing, previous=previous)
        if self._installed_tree() == new.tree and new.tree != (False, None) and new.in_place:
            self._change_in_place(new)
        else:
            self._rebuild(new)
        self._set_loss(new.iptables_loss_pct)
        return new

    def install(self, shape: Shaping) -> TcPlan:
        """Install ``shape`` on an interface this lab just made (no qdisc, no loss rule of ours yet):
        :meth:`apply` without reading or removing what is there (three commands fewer per direction,
        which counts at a hundred routers)."""
        new = plan(shape, self.caps, allow_missing=self.allow_missing)
        commands = rebuild_commands(self.src_if, new)
        for argv in (c for c in commands if c[0] != "tc"):
            self.src.run(argv)
        tc_lines = [shlex.join(c[1:]) for c in commands if c[0] == "tc"]
        if tc_lines:  # one tc for all of them
            self.src.run(["tc", "-batch", "-"], input_text="\n".join(tc_lines) + "\n")
        if new.iptables_loss_pct is not None:
            self._set_loss(new.iptables_loss_pct)
        return new

    def clear(self) -> None:
        self._delete_root()
        self._set_loss(None)

    # -- tc -------------------------------------------------------------
    def _tc(self, *args: str) -> None:
        self.src.run(["tc", *args])

    def _installed_tree(self) -> tuple[bool, Optional[str]]:
        out = self.src.run(["tc", "-j", "qdisc", "show", "dev", self.src_if]).stdout
        qdiscs = json.loads(out or "[]")
        has_htb = any(q.get("kind") == "htb" and q.get("root") for q in qdiscs)
        leaf = next((q["kind"] for q in qdiscs if q.get("handle") == LEAF_HANDLE), None)
        return (has_htb, leaf)

    def _delete_root(self) -> None:
        result = self.src.run(["tc", "qdisc", "del", "dev", self.src_if, "root"], check=False)
        if result.returncode != 0 and "No such file" not in result.stderr and "Cannot delete qdisc with handle of zero" not in result.stderr:
            raise proc.CommandError(result.argv, result.returncode, result.stderr)

    def _rebuild(self, p: TcPlan) -> None:
        self._delete_root()
        for argv in rebuild_commands(self.src_if, p):
            self.src.run(argv)

    def _change_in_place(self, p: TcPlan) -> None:
        dev = self.src_if
        if p.rate_bps is not None:
            self._tc("class", "change", "dev", dev, "parent", ROOT_HANDLE, "classid", CLASS_ID, "htb",
                     *htb_class_args(p.rate_bps))
        if p.leaf:
            parent = ["parent", CLASS_ID] if p.rate_bps is not None else ["root"]
            args = p.leaf_change_args if p.leaf_change_args is not None else p.leaf_args
            self._tc("qdisc", "change", "dev", dev, *parent, "handle", LEAF_HANDLE, p.leaf, *args)

    # -- iptables loss on the receiving side ------------------------------
    def _ipt(self, *args: str, check: bool = True) -> proc.Result:
        return self.dst.run(["iptables", "-w", "-t", "mangle", *args], check=check)

    def _set_loss(self, loss_pct: Optional[float]) -> None:
        chain = loss_chain(self.dst_if)
        has_chain = self._ipt("-n", "-L", chain, check=False).returncode == 0
        if loss_pct is None:
            if has_chain:
                self._ipt("-F", chain)
            return
        if not has_chain:
            for argv in loss_chain_commands(self.dst_if):
                self.dst.run(argv)
        self._ipt("-F", chain)
        self.dst.run(loss_rule_command(self.dst_if, loss_pct))

    def set_link_state(self, up: bool) -> None:
        """Take the sending end's interface down or up."""
        self.src.run(["ip", "link", "set", "dev", self.src_if, "up" if up else "down"])
