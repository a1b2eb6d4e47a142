"""Traffic processes on the nodes: started in the node's namespace, stopped with SIGTERM
(they flush their logs and exit), killed only if they do not stop in time."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from testbed import proc

STOP_TIMEOUT_S = 10.0


@dataclass
class TrafficProcess:
    name: str
    node: str
    netns: str
    argv: list[str]
    log: Path
    env: dict = field(default_factory=dict)
    role: str = "pub"
    flow_names: tuple[str, ...] = ()
    process: Optional[subprocess.Popen] = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class TrafficRunner:
    def __init__(self) -> None:
        self.processes: dict[str, TrafficProcess] = {}

    def start(self, p: TrafficProcess) -> None:
        if p.name in self.processes and self.processes[p.name].running:
            raise RuntimeError(f"traffic process {p.name} is already running")
        with open(p.log, "ab") as log:
            p.process = proc.spawn(p.argv, netns=p.netns, stdout=log, stderr=log, env={**os.environ, **p.env})
        self.processes[p.name] = p

    def stop(self, name: str) -> Optional[int]:
        p = self.processes.get(name)
        if p is None or not p.running:
            return None
        p.process.send_signal(signal.SIGTERM)
        try:
            return p.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.process.kill()
            return p.process.wait()

    def stop_all(self, drain_s: float = 0.5) -> None:
        """Stop publishers first, give messages in flight ``drain_s`` to arrive, then subscribers."""
        pubs = [n for n, p in self.processes.items() if p.role == "pub" and p.running]
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
