"""Before a night measures anything it checks the machine it runs on: the load (other work would slow
the routers and widen every figure), the CPU time a hypervisor steals, and, on the data plane, every
link of every case's topology (goodput within ±10 %, loss and delay, with :mod:`testbed.links.verify`).
A night that fails one of these is invalid: neither pass nor fail, and never a baseline.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

__all__ = ["CpuSample", "read_cpu", "steal_share", "load_per_cpu", "wait_for_quiet", "NightCheck", "check_night"]


@dataclass(frozen=True)
class CpuSample:
    """The aggregate ``cpu`` line of /proc/stat: total jiffies and stolen jiffies."""

    total: int
    steal: int


def read_cpu(path: str = "/proc/stat") -> CpuSample:
    with open(path, encoding="ascii") as fh:
        for line in fh:
            if line.startswith("cpu "):
                values = [int(v) for v in line.split()[1:]]
                # user nice system idle iowait irq softirq steal guest guest_nice; guest time is also in user
                total = sum(values[:8])
                return CpuSample(total, values[7] if len(values) > 7 else 0)
    raise RuntimeError(f"{path} has no aggregate cpu line")


def steal_share(before: CpuSample, after: CpuSample) -> float:
    """Percentage of CPU time stolen between two samples."""
    total = after.total - before.total
    return 100.0 * (after.steal - before.steal) / total if total > 0 else 0.0


def load_per_cpu(path: str = "/proc/loadavg") -> float:
    with open(path, encoding="ascii") as fh:
        load1 = float(fh.read().split()[0])
    return load1 / max(1, os.cpu_count() or 1)


def wait_for_quiet(limit: float, settle_s: float, *, read_load: Callable[[], float] = load_per_cpu,
                   sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                   say: Callable[[str], None] = lambda line: None) -> tuple[float, float]:
    """Wait (up to ``settle_s``) for the 1-minute load per CPU to fall to ``limit``: a suite started right
    after other work sees that work in the average for a minute or two. Returns (load, seconds waited)."""
    start = clock()
    load = read_load()
    said = 0.0
    while load > limit and clock() - start < settle_s:
        if clock() - said >= 30:
            say(f"load {load:.2f} per CPU is above {limit:g}: waiting up to {settle_s - (clock() - start):.0f} s "
                "for it to settle")
            said = clock()
        sleep(5)
        load = read_load()
    return load, clock() - start


@dataclass
class NightCheck:
    """What the night found about itself; ``valid`` only when every part passed."""

    load_per_cpu: float
    load_limit: float
    waited_s: float
    steal_pct: float
    steal_limit_pct: float
    links: dict = field(default_factory=dict)   # topology name -> {ok, failures, seconds}
    problems: list = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {**asdict(self), "valid": self.valid}


def check_night(checks, topologies: dict, say: Callable[[str], None], *, steal_sample_s: float = 5.0,
                verify: Optional[Callable[[object], dict]] = None) -> NightCheck:
    """Run the suite's ``checks`` (``NightChecks``). ``topologies``: name -> Spec of every distinct topology
    the night runs; ``verify(spec)`` measures its links (default: :func:`verify_topology`)."""
    load, waited = wait_for_quiet(checks.load_per_cpu_max, checks.settle / 1e9, say=say)
    before = read_cpu()
    time.sleep(steal_sample_s)
    steal = steal_share(before, read_cpu())
    result = NightCheck(round(load, 3), checks.load_per_cpu_max, round(waited, 1), round(steal, 3), checks.steal_max)
    if load > checks.load_per_cpu_max:
        result.problems.append(f"the machine is busy: 1-minute load {load:.2f} per CPU after waiting "
                               f"{waited:.0f} s (limit {checks.load_per_cpu_max:g})")
    if steal > checks.steal_max:
        result.problems.append(f"the hypervisor steals {steal:.1f}% of the CPU time (limit {checks.steal_max:g}%)")
    say(f"load {load:.2f} per CPU (limit {checks.load_per_cpu_max:g}), CPU steal {steal:.2f}% "
        f"(limit {checks.steal_max:g}%)")
    if checks.verify_links and not result.problems:
        verify = verify or verify_topology
        for name, spec in topologies.items():
            say(f"verifying the links of {name}: goodput within ±10%, loss and delay")
            try:
                report = verify(spec)
            except Exception as exc:  # noqa: BLE001 - a lab that cannot be built to be measured fails the check
                report = {"ok": False, "failures": [f"the lab could not be measured: {exc}"], "seconds": None}
            result.links[name] = report
            if not report["ok"]:
                result.problems.append(f"{name}: links miss their shaping: {'; '.join(report['failures'])}")
    return result


def verify_topology(spec) -> dict:
    """Bring the topology's lab up (no routers), measure every link against its shaping, take it down."""
    from testbed.lab.session import LabSession
    from testbed.links.verify import verify_links

    started = time.monotonic()
    session = LabSession(spec, spec_path=f"<suite self-check of {spec.name}>")
    try:
        lab = session.open()
        report = verify_links(lab, session.access)
    finally:
        session.close()
    return {"ok": report.ok, "failures": report.failures(), "seconds": round(time.monotonic() - started, 1),
            "report": report.to_json()}
