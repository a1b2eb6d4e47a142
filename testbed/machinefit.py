"""What a topology needs of this machine when all its nodes live on it (Mininet, Docker), against what
the machine has: checked before anything is built, so that a lab too large fails at once with the
numbers instead of minutes later under swap or with processes refused.

The per-unit figures were measured on this project's machine kind (docs/benchmarks.md, "Scale"): a
router's resident memory in a 100-router grid (median 34 MiB), tcpdump with its capture ring, sshd, a
traffic process (a Python client), the CPU a router takes to start (about 0.3 s; a hundred on two
cores took 15 s) and the share of a core a running router keeps busy (0.8 %: two hundred routers on two
cores flapped their links).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

MIB = 1 << 20
#: resident memory per process kind, bytes (measured; rounded up)
ROUTER_BYTES = 40 * MIB
CAPTURE_BYTES = 12 * MIB  # tcpdump (8 MiB) and its kernel ring
SSHD_BYTES = 8 * MIB
TRAFFIC_BYTES = 32 * MIB
#: the orchestrator, Ansible and the analysis' Spark driver, once
FIXED_BYTES = 1536 * MIB
#: CPU seconds a router takes from its start to answering (Python, asyncio, prometheus-client)
ROUTER_START_CPU_S = 0.3
#: cores a running router keeps busy (keep-alives, link monitoring, scrapes): 0.82 cores for the 100 routers of
#: a 10x10 grid with two flows and a scrape a second (median router 0.0067, the busiest 0.034)
ROUTER_RUN_CORES = 0.008
#: share of the cores the routers may need together: past it their keep-alives go late under the rest of the run
#: (traffic, captures, scrapes) and links flap (200 routers on 2 cores: 3188 lease expiries, up after 157 s)
ROUTER_CORE_SHARE = 0.5
#: share of the available memory and of the free process IDs a lab may plan to take
USABLE_SHARE = 0.8
#: processes of the machine's own per node (namespace holder; a container's init)
PER_NODE_PROCESSES = 1


@dataclass(frozen=True)
class Need:
    """What a topology's run takes of the machine its nodes share."""

    routers: int
    nodes: int
    captures: int
    traffic_processes: int
    memory_bytes: int
    processes: int
    start_cpu_s: float
    run_cores: float

    def describe(self) -> str:
        return (f"{self.routers} routers, {self.nodes} nodes, {self.captures} captured interfaces, about "
                f"{self.traffic_processes} traffic processes: {self.memory_bytes / MIB:,.0f} MiB of memory, "
                f"{self.processes} processes, about {self.start_cpu_s:.0f} CPU-seconds to start the routers and "
                f"{self.run_cores:.1f} cores to keep them running")


@dataclass(frozen=True)
class Machine:
    cores: int
    available_bytes: int
    free_pids: int

    @classmethod
    def this(cls) -> "Machine":
        return cls(os.cpu_count() or 1, _mem_available(), _free_pids())


@dataclass(frozen=True)
class Fit:
    need: Need
    machine: Machine
    problems: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.problems

    def start_wall_s(self) -> float:
        """About how long the routers take to start, all at once on this machine's cores."""
        return self.need.start_cpu_s / max(1, self.machine.cores)

    def to_json(self) -> dict:
        return {"need": vars(self.need), "machine": vars(self.machine), "problems": list(self.problems),
                "start_wall_s": round(self.start_wall_s(), 1)}


def traffic_processes(spec) -> int:
    """About how many traffic processes the run starts: a publisher per flow (three for a z_pub) and a
    subscriber per receiving node and slow subscriber; a querier per query flow and a queryable per node
    that answers it."""
    count = 0
    for flow in spec.traffic:
        if getattr(flow, "profile", "") == "zpub":
            count += 3 + len(flow.subscribers)
        elif getattr(flow, "profile", "") == "query":
            count += 1 + len(flow.queryables)
        else:
            count += 1 + len(flow.to) + len(getattr(flow, "slow_subscribers", []))
    return count


def need_of(spec) -> Need:
    routers = len(spec.routers())
    nodes = len(spec.nodes)
    captures = 2 * len(spec.captured_links())
    traffic = traffic_processes(spec)
    memory = (FIXED_BYTES + routers * ROUTER_BYTES + nodes * SSHD_BYTES + captures * CAPTURE_BYTES
              + traffic * TRAFFIC_BYTES)
    processes = routers + nodes * (1 + PER_NODE_PROCESSES) + captures + traffic
    return Need(routers, nodes, captures, traffic, memory, processes, routers * ROUTER_START_CPU_S,
                routers * ROUTER_RUN_CORES)


def check(spec, machine: Optional[Machine] = None) -> Fit:
    """``spec``'s need against ``machine`` (default: this one); a problem per resource that does not fit."""
    machine = machine or Machine.this()
    need = need_of(spec)
    problems = []
    usable_memory = int(machine.available_bytes * USABLE_SHARE)
    if need.memory_bytes > usable_memory:
        problems.append(
            f"memory: the run needs about {need.memory_bytes / MIB:,.0f} MiB ({need.routers} routers x "
            f"{ROUTER_BYTES // MIB} MiB, {need.captures} captures x {CAPTURE_BYTES // MIB} MiB, {need.nodes} "
            f"sshd x {SSHD_BYTES // MIB} MiB, {need.traffic_processes} traffic processes x "
            f"{TRAFFIC_BYTES // MIB} MiB, {FIXED_BYTES // MIB} MiB for the orchestrator) but "
            f"{USABLE_SHARE:.0%} of the {machine.available_bytes / MIB:,.0f} MiB available is "
            f"{usable_memory / MIB:,.0f} MiB")
    usable_cores = machine.cores * ROUTER_CORE_SHARE
    if need.run_cores > usable_cores:
        problems.append(
            f"CPU: {need.routers} routers keep about {need.run_cores:.1f} cores busy ({ROUTER_RUN_CORES} each, "
            f"measured) but only {ROUTER_CORE_SHARE:.0%} of this machine's {machine.cores} cores, {usable_cores:g}, "
            f"can be theirs before their keep-alives go late and links flap (at most about "
            f"{int(usable_cores / ROUTER_RUN_CORES)} routers here)")
    usable_pids = int(machine.free_pids * USABLE_SHARE)
    if need.processes > usable_pids:
        problems.append(
            f"processes: the run starts about {need.processes} processes but {USABLE_SHARE:.0%} of the "
            f"{machine.free_pids} free process IDs is {usable_pids} (raise kernel.pid_max, or capture fewer links)")
    return Fit(need, machine, problems)


def _mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _free_pids() -> int:
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            pid_max = int(f.read())
        with open("/proc/sys/kernel/threads-max") as f:
            threads_max = int(f.read())
    except (OSError, ValueError):
        return 1 << 15
    running = sum(1 for name in os.listdir("/proc") if name.isdigit())
    return max(0, min(pid_max, threads_max) - running)
