"""Traffic processes on the nodes: started through each node's access, stopped with SIGTERM
(they flush their logs and exit), killed only if they do not stop in time. Their logs stay
on the node until :meth:`TrafficRunner.fetch_logs` brings them into the results folder."""
from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from testbed.proc import stop_process

STOP_TIMEOUT_S = 10.0


@dataclass
class TrafficProcess:
    name: str
    node: str
    access: Any  # the node's NodeAccess
    argv: list[str]
    log: str  # on the node
    env: dict = field(default_factory=dict)
    role: str = "pub"
    flow_names: tuple[str, ...] = ()
    process: Any = None  # the NodeProcess once started
    #: how long it may take to exit after SIGTERM before it is killed (a querier waits for its queries)
    stop_timeout_s: float = STOP_TIMEOUT_S

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class TrafficRunner:
    def __init__(self) -> None:
        self.processes: dict[str, TrafficProcess] = {}

    def start(self, p: TrafficProcess) -> None:
        if p.name in self.processes and self.processes[p.name].running:
            raise RuntimeError(f"traffic process {p.name} is already running")
        p.process = p.access.spawn(p.argv, log=p.log, env=p.env)
        self.processes[p.name] = p

    def stop(self, name: str) -> Optional[int]:
        p = self.processes.get(name)
        if p is None or p.process is None:
            return None
        return stop_process(p.process, p.stop_timeout_s)

    def stop_all(self, drain_s: float = 0.5) -> None:
        """Stop the senders (publishers, queriers) first, give messages in flight ``drain_s`` to arrive,
        then the receivers (subscribers, queryables): a querier waits for its outstanding queries
        while the queryables can still answer them."""
        pubs = [n for n, p in self.processes.items() if p.role in ("pub", "query") and p.running]
        for n in pubs:
            self.signal_stop(n)
        for n in pubs:
            self.stop(n)
        if pubs and any(p.running for p in self.processes.values()):
            time.sleep(drain_s)
        for n in list(self.processes):
            self.stop(n)

    def signal_stop(self, name: str) -> None:
        """Ask a process to stop (SIGTERM: it flushes its logs and exits) without waiting for it."""
        p = self.processes.get(name)
        if p is not None and p.running:
            p.process.send_signal(signal.SIGTERM)

    def exit_codes(self) -> dict[str, Optional[int]]:
        return {n: (p.process.poll() if p.process else None) for n, p in self.processes.items()}
