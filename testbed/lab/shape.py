"""Install the shaping of every direction of every link of a lab, and record what was installed."""
from __future__ import annotations

from testbed import proc
from testbed.backends import Lab
from testbed.kernel import KernelCapabilities
from testbed.lab.errors import LabError
from testbed.links.shaping import UnsupportedShaping


def shape_links(lab: Lab, backend, caps: KernelCapabilities, allow_missing: bool) -> None:
    """Install the shaping of every direction of every link; record what was installed.

    A backend with ``install_shaping`` installs all directions in one batch (the ssh backend, through
    Ansible); the others through each direction's shaper."""
    lab.applied = []
    batch = getattr(backend, "install_shaping", None)
    if batch is not None:
        try:
            installed = batch(lab, caps, allow_missing)
        except UnsupportedShaping as exc:
            raise LabError(str(exc)) from exc
    else:
        def install(direction):
            link, src, dst, shape = direction
            shaper = backend.shaper(lab, link, src.node, caps, allow_missing=allow_missing)
            try:
                return link, src.node, dst.node, getattr(shaper, "install", shaper.apply)(shape)
            except UnsupportedShaping as exc:
                raise LabError(f"link {link.label} ({src.node}->{dst.node}): {exc}") from exc

        # every direction's commands are its own interface's: many at once
        installed = proc.in_parallel(install, [d for link in lab.links for d in (
            (link, link.a, link.b, link.shape_ab), (link, link.b, link.a, link.shape_ba))])
    for link, src, dst, plan in installed:
        lab.applied.append({
            "link": link.index,
            "direction": f"{src}->{dst}",
            "qdiscs": plan.qdisc_kinds,
            "iptables_loss_pct": plan.iptables_loss_pct,
            "dropped": list(plan.dropped),
        })
