"""Stock Zenoh routers (``python -m zenohrouter``) as real processes on loopback, for tests.

    lab = ZenohLab(tmp_path)
    a = lab.add("a", client_port=free_port(), router_port=free_port())
    b = lab.add("b", client_port=free_port(), connect=[a])
    lab.start()               # waits for each one's ready line
    ...
    lab.cleanup()             # SIGKILL to whatever is still running (process groups)
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from testbed.proc import kill_tree

ROOT = Path(__file__).resolve().parents[2]
READY = "zenohrouter ready"


def router_config(listen: Sequence[str], connect: Sequence[str] = (), **extra: Any) -> Dict[str, Any]:
    """The config the orchestrator writes for one node (as the report to it recommends)."""
    conf: Dict[str, Any] = {
        "mode": "router",
        "listen": {"endpoints": list(listen)},
        "connect": {"endpoints": list(connect),
                    "retry": {"period_init_ms": 100, "period_max_ms": 1000, "period_increase_factor": 2}},
        "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}, "delay": 0},
        "transport": {"link": {"tx": {"lease": 3000, "keep_alive": 4}}},
    }
    conf.update(extra)
    return conf


@dataclass
class ZenohRouterProc:
    name: str
    config: Dict[str, Any]
    config_path: Path
    log_path: Path
    client_port: int
    router_port: Optional[int]
    proc: Optional[subprocess.Popen] = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class ZenohLab:
    tmp: Path
    python: str = sys.executable
    env: Optional[Dict[str, str]] = None
    cwd: Path = ROOT
    routers: Dict[str, ZenohRouterProc] = field(default_factory=dict)

    def add(self, name: str, client_port: int, router_port: Optional[int] = None,
            connect: Sequence[ZenohRouterProc] = ()) -> ZenohRouterProc:
        listen = [f"tcp/127.0.0.1:{client_port}"]
        if router_port is not None:
            listen.insert(0, f"tcp/127.0.0.1:{router_port}")
        config = router_config(listen, [f"tcp/127.0.0.1:{r.router_port}" for r in connect])
        path = self.tmp / f"zenoh-{name}.json5"
        path.write_text(json.dumps(config, indent=2) + "\n")
        r = ZenohRouterProc(name, config, path, self.tmp / f"zenoh-{name}.log", client_port, router_port)
        self.routers[name] = r
        return r

    def spawn(self, r: ZenohRouterProc) -> subprocess.Popen:
        with open(r.log_path, "ab") as log:
            r.proc = subprocess.Popen([self.python, "-m", "zenohrouter", "--config", str(r.config_path),
                                       "--log-level", "info"], cwd=str(self.cwd), stdout=log, stderr=log,
                                      env=self.env, start_new_session=True)
        return r.proc

    def wait_ready(self, r: ZenohRouterProc, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if READY in r.log():
                return
            if r.proc is not None and r.proc.poll() is not None:
                raise RuntimeError(f"zenohrouter {r.name} exited with {r.proc.returncode}:\n{r.log()}")
            time.sleep(0.02)
        raise RuntimeError(f"zenohrouter {r.name} not ready after {timeout}s:\n{r.log()}")

    def start(self) -> None:
        for r in self.routers.values():
            self.spawn(r)
            self.wait_ready(r)

    def stop(self, r: ZenohRouterProc, timeout: float = 10.0) -> int:
        """SIGTERM, then its exit status."""
        assert r.proc is not None
        r.proc.send_signal(signal.SIGTERM)
        return r.proc.wait(timeout)

    def cleanup(self) -> None:
        for r in self.routers.values():
            if r.proc is not None and r.proc.poll() is None:
                kill_tree(r.proc.pid)
                r.proc.wait(10)


def wait_for(predicate, timeout: float, what: str, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
