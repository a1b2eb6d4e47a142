"""Install the shaping of every direction of every link of a lab, and record what was installed."""
from __future__ import annotations

import shlex

from testbed.backends import Backend, Lab
from testbed.kernel import KernelCapabilities
from testbed.lab.errors import LabError
from testbed.links.shaping import UnsupportedShaping, rebuild_commands


def shape_links(lab: Lab, backend: Backend, caps: KernelCapabilities, allow_missing: bool) -> None:
    """Install the shaping of every direction of every link; record what was installed.

    How is the backend's (``Backend.install_shaping``: each direction through its shaper, or all in one batch)."""
    lab.applied = []
    try:
        installed = backend.install_shaping(lab, caps, allow_missing)
    except UnsupportedShaping as exc:
        raise LabError(str(exc)) from exc
    for link, src, dst, plan in installed:
        lab.applied.append({
            "link": link.index,
            "direction": f"{src}->{dst}",
            "qdiscs": plan.qdisc_kinds,
            "iptables_loss_pct": plan.iptables_loss_pct,
            "dropped": list(plan.dropped),
            "providers": plan.providers or {f: "host kernel" for f in _asked(link, src) if f not in plan.dropped},
            # the host kernel's part, as commands on the sending node (testbed.links.shaping)
            "commands": [shlex.join(c) for c in rebuild_commands(link.end(src).ifname, plan)],
            "appliance": {"port": plan.appliance_port, "commands": list(plan.appliance_commands)}
            if plan.appliance_port else None,
        })


def _asked(link, sender: str) -> list[str]:
    """The features the direction leaving ``sender`` asks for."""
    shape = link.shape_ab if link.a.node == sender else link.shape_ba
    return sorted(shape.features())
