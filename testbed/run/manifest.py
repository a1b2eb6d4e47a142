"""`manifest.json`: what ran, on what, how, and how it ended — rewritten at every phase change."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, Optional

from testbed import __version__
from testbed.run.rundir import write_json

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Phase:
    name: str
    start_ns: int
    end_ns: Optional[int] = None
    ok: Optional[bool] = None
    error: Optional[str] = None


@dataclass
class Manifest:
    run_id: str
    spec_file: str
    spec: dict
    backend: str
    #: the backend's versions and, for Docker, the node image and its id
    backend_info: dict = field(default_factory=dict)
    status: str = "running"
    error: Optional[str] = None
    versions: dict = field(default_factory=dict)
    git_revision: Optional[str] = None
    git_dirty: Optional[bool] = None
    kernel: str = field(default_factory=platform.release)
    capabilities: dict = field(default_factory=dict)
    shaping: list = field(default_factory=list)
    options: dict = field(default_factory=dict)
    phases: list[Phase] = field(default_factory=list)
    started_ns: int = field(default_factory=time.time_ns)
    ended_ns: Optional[int] = None
    traffic_start_ns: Optional[int] = None
    #: each node's clock offset to the controller before and after the traffic (runfolder.records.clocks_json)
    clocks: dict = field(default_factory=dict)
    #: the data plane measured against the topology before traffic (testbed.links.verify), when verified
    link_verification: Optional[dict] = None
    #: the router under test: name, client, wire, metrics/events/admin, settings_ignored (testbed.drivers)
    router_driver: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


class ManifestWriter:
    """Owns the manifest of a run and writes it (atomically) whenever something changes."""

    def __init__(self, path: Path, manifest: Manifest):
        self.path = path
        self.manifest = manifest
        manifest.versions = collect_versions()
        manifest.git_revision, manifest.git_dirty = git_revision()
        self.save()

    def save(self) -> None:
        write_json(self.path, self.manifest.to_json())

    def update(self, **fields: Any) -> None:
        for key, value in fields.items():
            setattr(self.manifest, key, value)
        self.save()

    @contextmanager
    def phase(self, name: str) -> Iterator[Phase]:
        p = Phase(name, time.time_ns())
        self.manifest.phases.append(p)
        self.save()
        try:
            yield p
        except BaseException as exc:
            p.ok, p.error = False, str(exc) or type(exc).__name__
            raise
        else:
            p.ok = True
        finally:
            p.end_ns = time.time_ns()
            self.save()

    def finish(self, status: str, error: Optional[str] = None) -> None:
        self.update(status=status, error=error, ended_ns=time.time_ns())


def _pkg_version(name: str) -> Optional[str]:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _tool_version(argv: list[str]) -> Optional[str]:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else None


def collect_versions() -> dict:
    return {
        "testbed": __version__,
        "python": sys.version.split()[0],
        "iproute2": _tool_version(["ip", "-V"]),
        "tcpdump": _tool_version(["tcpdump", "--version"]),
        "ansible_runner": _pkg_version("ansible-runner"),
        "ansible_core": _pkg_version("ansible-core"),
        "prometheus_client": _pkg_version("prometheus-client"),
    }


def git_revision() -> tuple[Optional[str], Optional[bool]]:
    if not (REPO_ROOT / ".git").exists():
        return None, None
    env = {**os.environ, "GIT_DIR": str(REPO_ROOT / ".git"), "GIT_WORK_TREE": str(REPO_ROOT)}
    git = ["git", "-c", f"safe.directory={REPO_ROOT}"]  # root running on a checkout owned by someone else
    try:
        rev = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, env=env, timeout=10)
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, env=env, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    if rev.returncode != 0:
        return None, None
    return rev.stdout.strip(), bool(dirty.stdout.strip())
