"""Whether this machine can run a topology, and why not (`testbed validate`): its kernel probed, never assumed
from its version, for the shaping the file asks for, and the estimate of what the run needs of the machine."""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Dict, List, Optional, Tuple

from testbed import kernel

__all__ = ["Here", "can_run_here"]


@dataclass(frozen=True)
class Here:
    """``checked``: whether the machine was looked at (``note`` says why not); ``problems``: why it cannot run
    the topology as written, each with its fix."""

    checked: bool
    problems: Tuple[str, ...] = ()
    note: str = ""

    def lines(self) -> List[str]:
        if not self.checked:
            return [f"this machine: not checked: {self.note}"]
        if not self.problems:
            return ["this machine: can run it (its kernel probed: every shaping the file asks for works; the "
                    "estimate of what the run needs fits)"]
        return ["this machine cannot run it as written:"] + [f"  {p}" for p in self.problems]

    def to_json(self) -> Dict[str, Any]:
        return {"checked": self.checked, "can_run": None if not self.checked else not self.problems,
                "problems": list(self.problems), "note": self.note}


def _some(items: List[str], shown: int = 3) -> str:
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")


def _is_root() -> bool:
    return os.geteuid() == 0


@lru_cache(maxsize=1)
def _this_kernel() -> kernel.KernelCapabilities:
    from testbed.doctor import probe_local_kernel

    return probe_local_kernel()


def can_run_here(spec, probe: Optional[Callable[[], kernel.KernelCapabilities]] = None) -> Here:
    """Whether the nodes of ``spec`` on its backend, built on this machine, get what the file asks for.
    ``probe``: this kernel's capabilities (default: probed once per process, in a scratch namespace)."""
    from testbed import machinefit
    from testbed.lab.capabilities import missing_capabilities

    if spec.backend == "ssh":
        return Here(False, note="the ssh backend's nodes are the inventory's lab machines: their kernels are "
                                "probed when the lab is built (`testbed up`/`run`)")
    if probe is None and not _is_root():
        return Here(False, note="probing this kernel needs root (sudo testbed validate FILE)")
    try:
        caps = (probe or _this_kernel)()
    except (RuntimeError, OSError) as exc:  # a command that failed (proc.CommandError), no namespaces here
        return Here(False, note=f"this kernel could not be probed: {exc}")
    from testbed.links import appliance
    from testbed.links.provider import appliance_links

    # the Mininet and Docker backends carry what this kernel lacks through the impairment appliance
    through_appliance = bool(appliance_links(spec, caps, spec.impairments == "appliance"))
    asked: Dict[str, List[str]] = {}
    for m in missing_capabilities(spec, caps, appliance=True):
        where = f"{m.link.split()[0]} {m.direction}"
        if "(scenario[" in m.link:
            where += " " + m.link[m.link.index("(scenario["):]
        asked.setdefault(m.feature, []).append(where)
    problems = [f"{feature} ({_some(where)}): this kernel cannot do it: {kernel.FEATURE_HINTS[feature]}; "
                "`run --allow-missing` builds it without" for feature, where in asked.items()]
    if through_appliance and not appliance.installed():
        problems.append(f"the impairment appliance (delay, jitter, loss models, AQM queues this kernel lacks) "
                        f"needs user-mode Linux: `{appliance.INSTALL_HINT}`")
    fit = machinefit.check(spec)
    if not fit.fits:
        problems += [f"{p} (`run --over-capacity` builds it anyway)" for p in fit.problems]
    return Here(True, tuple(problems))
