"""What a kernel can do for link shaping: the capabilities a backend's probe found by trying.

Every backend probes the kernel its nodes run on (see its ``probe()``); nothing is assumed
from the kernel version. The probe itself is :func:`probe_with`, given a way to run
commands in a scratch network namespace of that kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from testbed.links.impairments import FEATURE_QDISC

if TYPE_CHECKING:
    from testbed.proc import Result


#: qdisc kinds the project can use, with the arguments that make a valid probe.
QDISC_PROBES: dict[str, list[str]] = {
    "htb": ["htb", "default", "1"],
    "tbf": ["tbf", "rate", "1mbit", "burst", "10kb", "latency", "50ms"],
    "netem": ["netem", "delay", "1ms"],
    "pfifo": ["pfifo", "limit", "10"],
    "bfifo": ["bfifo", "limit", "10000"],
    "fq_codel": ["fq_codel", "limit", "100"],
    "cake": ["cake", "rtt", "100ms"],
    "red": ["red", "limit", "400000", "avpkt", "1000", "bandwidth", "10mbit"],
    "pie": ["pie", "limit", "100"],
}

#: Shaping features a topology can ask for, and how to obtain each when missing.
FEATURE_HINTS: dict[str, str] = {
    "delay": "needs the netem qdisc: load it with `modprobe sch_netem` (Debian/Ubuntu: "
    "`apt-get install linux-modules-extra-$(uname -r)`) or use a kernel built with CONFIG_NET_SCH_NETEM",
    "jitter": "needs the netem qdisc: `modprobe sch_netem` (package linux-modules-extra-$(uname -r))",
    "loss": "needs the netem qdisc or the iptables `statistic` match: `apt-get install iptables` "
    "and `modprobe xt_statistic`, or `modprobe sch_netem`",
    "bw": "needs the htb qdisc: `modprobe sch_htb` (CONFIG_NET_SCH_HTB)",
    "queue": "needs the pfifo qdisc: `modprobe sch_fifo` (CONFIG_NET_SCH_FIFO)",
    "loss_model": "needs the netem qdisc: `modprobe sch_netem` (package linux-modules-extra-$(uname -r))",
    "duplicate": "needs the netem qdisc: `modprobe sch_netem` (package linux-modules-extra-$(uname -r))",
    "reorder": "needs the netem qdisc: `modprobe sch_netem` (package linux-modules-extra-$(uname -r))",
    "corrupt": "needs the netem qdisc: `modprobe sch_netem` (package linux-modules-extra-$(uname -r))",
    "fq_codel": "needs the fq_codel qdisc: `modprobe sch_fq_codel` (CONFIG_NET_SCH_FQ_CODEL)",
    "cake": "needs the cake qdisc: `modprobe sch_cake` (CONFIG_NET_SCH_CAKE)",
    "red": "needs the red qdisc: `modprobe sch_red` (CONFIG_NET_SCH_RED)",
    "pie": "needs the pie qdisc: `modprobe sch_pie` (CONFIG_NET_SCH_PIE)",
}


@dataclass(frozen=True)
class KernelCapabilities:
    qdiscs: dict[str, bool]
    iptables_statistic: bool
    errors: dict[str, str] = field(default_factory=dict)

    def has_qdisc(self, kind: str) -> bool:
        return self.qdiscs.get(kind, False)

    @property
    def loss_method(self) -> str | None:
        """How loss is emulated here: 'netem', 'iptables', or None when impossible."""
        if self.has_qdisc("netem"):
            return "netem"
        if self.iptables_statistic:
            return "iptables"
        return None

    def supports(self, feature: str) -> bool:
        """Can a link ask for ``feature`` (testbed.spec.resolve.FEATURES) on this kernel? Through the qdisc that
        provides it (testbed.links.impairments.FEATURE_QDISC); loss also through iptables, a queue limit also
        through netem's."""
        if feature == "loss":
            return self.loss_method is not None
        if feature == "queue":
            return self.has_qdisc("pfifo") or self.has_qdisc("netem")
        if feature not in FEATURE_QDISC:
            raise ValueError(f"unknown shaping feature {feature!r}")
        return self.has_qdisc(FEATURE_QDISC[feature])

    def to_json(self) -> dict:
        return {
            "qdiscs": dict(self.qdiscs),
            "iptables_statistic": self.iptables_statistic,
            "loss_method": self.loss_method,
            "errors": dict(self.errors),
        }


def probe_with(run: Callable[[list[str]], "Result"]) -> KernelCapabilities:
    """Probe every qdisc kind and the iptables statistic match with ``run`` (argv -> Result, never raising
    for a non-zero exit), which runs commands in a scratch network namespace that has a veth pair
    ``probe0``/``probe1``."""
    qdiscs: dict[str, bool] = {}
    errors: dict[str, str] = {}
    for kind, args in QDISC_PROBES.items():
        result = run(["tc", "qdisc", "add", "dev", "probe0", "root", *args])
        qdiscs[kind] = result.returncode == 0
        if result.returncode != 0:
            errors[kind] = result.stderr.strip()
        run(["tc", "qdisc", "del", "dev", "probe0", "root"])
    stat_rule = ["-m", "statistic", "--mode", "random", "--probability", "0.5", "-j", "DROP"]
    result = run(["iptables", "-t", "mangle", "-A", "PREROUTING", "-i", "probe0", *stat_rule])
    statistic = result.returncode == 0
    if not statistic:
        errors["iptables_statistic"] = result.stderr.strip()
    return KernelCapabilities(qdiscs=qdiscs, iptables_statistic=statistic, errors=errors)
