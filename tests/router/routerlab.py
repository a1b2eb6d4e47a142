"""RouterCluster: real router processes on loopback, killed (process groups) at cleanup."""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]


_HANDED_OUT: set = set()


def free_port() -> int:
    """A free port below the kernel's ephemeral range (32768+), so that outgoing
    connections made meanwhile cannot take it before the router binds it."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20000, 32000)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port in 20000..32000")


@dataclass
class RouterProc:
    name: str
    config: Dict[str, Any]
    config_path: Path
    events_path: Path
    stderr_path: Path
    router_port: int
    client_port: int
    metrics_port: int
    proc: Optional[subprocess.Popen] = None

    def events(self) -> List[Dict[str, Any]]:
        if not self.events_path.exists():
            return []
        out = []
        for line in self.events_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of samples of ``name`` whose labels include ``labels``."""
        total = 0.0
        for line in self.metrics_text().splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            sample, _, value = line.rpartition(" ")
            mname, _, lbl = sample.partition("{")
            if mname != name:
                continue
            got = dict(kv.split("=", 1) for kv in lbl.rstrip("}").split(",") if "=" in kv)
            got = {k: v.strip('"') for k, v in got.items()}
            if all(got.get(k) == v for k, v in labels.items()):
                total += float(value)
        return total

    def admin(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/admin/{path}", timeout=5) as r:
            return json.loads(r.read())


@dataclass
class RouterCluster:
    tmp: Path
    routers: Dict[str, RouterProc] = field(default_factory=dict)
    defaults: Dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, **overrides: Any) -> RouterProc:
        rp, cp, mp = free_port(), free_port(), free_port()
        cfg: Dict[str, Any] = {
            "node": name,
            "router_listen": [f"127.0.0.1:{rp}"],
            "client_listen": [f"127.0.0.1:{cp}"],
            "neighbours": [],
            "metrics_listen": f"127.0.0.1:{mp}",
            "event_log": str(self.tmp / f"{name}.events.jsonl"),
            "lease_ms": 1000,
            "keepalive_ms": 250,
            "reconnect_initial_ms": 50,
            "reconnect_max_ms": 500,
            "log_level": "INFO",
        }
        cfg.update(self.defaults)
        cfg.update(overrides)
        r = RouterProc(name, cfg, self.tmp / f"{name}.json", self.tmp / f"{name}.events.jsonl",
                       self.tmp / f"{name}.stderr", rp, cp, mp)
        self.routers[name] = r
        return r

    def link(self, a: str, b: str, weight: int = 100, capacity_bps: Optional[int] = None, **extra: Any) -> None:
        """``a`` dials ``b``; ``extra``: more neighbour keys (e.g. ``link_capacity_bps``)."""
        nb: Dict[str, Any] = {"name": b, "address": "127.0.0.1", "port": self.routers[b].router_port,
                              "weight": weight}
        if capacity_bps:
            nb["capacity_bps"] = capacity_bps
        nb.update(extra)
        self.routers[a].config["neighbours"].append(nb)

    def start(self, name: Optional[str] = None) -> None:
        for r in ([self.routers[name]] if name else list(self.routers.values())):
            r.config_path.write_text(json.dumps(r.config, indent=1))
            with open(r.stderr_path, "ab") as stderr:
                r.proc = subprocess.Popen(
                    [sys.executable, "-m", "router", "--config", str(r.config_path)],
                    cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
                )
        for r in ([self.routers[name]] if name else list(self.routers.values())):
            self.wait_event(r.name, "ready", timeout=15)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        r = self.routers[name]
        if r.proc is not None and r.proc.poll() is None:
            try:
                os.killpg(r.proc.pid, sig)
            except ProcessLookupError:
                pass
            if sig in (signal.SIGKILL, signal.SIGTERM):
                r.proc.wait(10)

    def wait_event(self, name: str, event: str, timeout: float = 10.0, after_ns: int = 0, **match: Any) -> Dict[str, Any]:
        deadline = time.monotonic() + timeout
        r = self.routers[name]
        while time.monotonic() < deadline:
            for ev in r.events():
                if ev.get("event") == event and ev["ts_ns"] >= after_ns and all(ev.get(k) == v for k, v in match.items()):
                    return ev
            if r.proc is not None and r.proc.poll() is not None:
                raise AssertionError(f"router {name} exited with {r.proc.returncode}: {r.stderr_path.read_text()[-2000:]}")
            time.sleep(0.02)
        raise AssertionError(f"router {name}: no {event} {match} within {timeout}s")

    def wait_links(self, timeout: float = 15.0) -> None:
        """Wait until every configured link is up at both ends."""
        for r in self.routers.values():
            for nb in r.config["neighbours"]:
                self.wait_event(r.name, "link_up", timeout=timeout, neighbour=nb["name"])
                self.wait_event(nb["name"], "link_up", timeout=timeout, neighbour=r.name)

    def alive(self, name: str) -> bool:
        p = self.routers[name].proc
        return p is not None and p.poll() is None

    def cleanup(self) -> None:
        for r in self.routers.values():
            if r.proc is None:
                continue
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(r.proc.pid, sig)
                except ProcessLookupError:
                    pass
            try:
                r.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
