"""A lab's state on disk, so that `exec`, `down` and `clean` find it from another shell.

Every lab has one, whether a background holder (`testbed up`) or the process running
an experiment owns it. The owner is recorded by PID and start time, so a reused PID
is never taken for a live owner, and `testbed clean` never touches a live lab.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional


def state_root() -> Path:
    return Path(os.environ.get("TESTBED_STATE_DIR", "/run/testbed/labs"))


def process_start_ticks(pid: int) -> Optional[int]:
    """The start time of a live ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat).

    None when there is no such process or it is a zombie (dead, not yet reaped).
    """
    if pid <= 0:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass
class LabState:
    name: str
    status: str  # building | up | failed | stopping
    owner_pid: int
    owner_started: Optional[int]
    spec_path: str
    backend: str
    #: what the backend said ``up`` would create, recorded before building (for `clean`)
    plan: dict
    lab: Optional[dict] = None
    #: the results folder of the run that owns the lab, if a run does (salvaged by `clean` after a crash)
    run_dir: Optional[str] = None
    error: Optional[str] = None
    created_ns: int = field(default_factory=time.time_ns)
    #: the routers `testbed up --routers` started (testbed.lab.routers.LabRouters.start), None without them
    routers: Optional[dict] = None

    @classmethod
    def for_this_process(cls, name: str, spec_path: str, backend: str, plan: dict) -> "LabState":
        return cls(name, "building", os.getpid(), process_start_ticks(os.getpid()), spec_path, backend, plan)

    @property
    def dir(self) -> Path:
        return state_root() / self.name

    def claim(self) -> None:
        """Take the lab's name for this process: create its state folder, failing with FileExistsError if
        it exists (another process has it, even one that started a moment ago), then save the state."""
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        self.dir.mkdir(mode=0o700)
        self.save()

    def save(self) -> None:
        """Write the state (it holds the routers' admin token) readable by its owner alone: the file 0600 in a
        folder 0700, whatever the umask; the lab's folder is this state's alone."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)  # a folder made by an older testbed, or before the umask was applied
        tmp = self.dir / f"state.json.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a left-over tmp file keeps its old mode under O_CREAT
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(asdict(self), indent=2))
        os.replace(tmp, self.dir / "state.json")

    def owner_alive(self) -> bool:
        ticks = process_start_ticks(self.owner_pid)
        return ticks is not None and ticks == self.owner_started

    @property
    def run_id(self) -> Optional[str]:
        """The id of the run that owns the lab (its results folder's name), None for a lab of `testbed up`."""
        return Path(self.run_dir).name if self.run_dir else None

    def holder(self) -> dict:
        """Who holds the lab, as JSON: `up` (a holder process) or `run` (with the run's id and results folder)."""
        return {"kind": "run" if self.run_dir else "up", "pid": self.owner_pid, "alive": self.owner_alive(),
                "run_id": self.run_id, "run_dir": self.run_dir, "text": self.describe_holder()}

    def describe_holder(self) -> str:
        """Who holds the lab, in words."""
        if self.run_dir:
            return f"run {self.run_id} (process {self.owner_pid}; results in {self.run_dir})"
        return f"`testbed up` (holder process {self.owner_pid})"


def load(name: str) -> Optional[LabState]:
    path = state_root() / name / "state.json"
    try:
        return LabState(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, TypeError) as exc:
        raise RuntimeError(f"lab state {path} is unreadable ({exc}); `testbed clean` removes it") from exc


def lab_names() -> list[str]:
    """The name of every lab with a state folder, sorted (anyone may list them; only root reads a state)."""
    root = state_root()
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def all_states() -> list[LabState]:
    """Every lab with a state folder; unreadable ones come back with status 'corrupt' and no owner."""
    states = []
    for name in lab_names():
        try:
            s = load(name)
        except RuntimeError:
            s = None
        states.append(s if s is not None else LabState(name, "corrupt", 0, None, "", "", {}))
    return states


def remove(name: str) -> None:
    d = state_root() / name
    if d.is_dir():
        for f in d.iterdir():
            f.unlink()
        d.rmdir()


HOLDER_MODULE = "testbed.lab.holder"


def process_is_holder(pid: int) -> bool:
    """Is ``pid`` a `testbed up` lab holder process?"""
    if pid <= 0:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return HOLDER_MODULE.encode() in cmdline


def routers_shown(routers: Optional[dict]) -> Optional[dict]:
    """``LabState.routers`` as commands print it (``up --json``, ``inspect --json``): each router's admin
    token masked, since what they print ends up in logs and bug reports (the state file is 0600 for it)."""
    if not routers:
        return routers
    nodes = {n: {**entry, "endpoint": {**entry["endpoint"], "admin_token": "***"}}
             if isinstance(entry.get("endpoint"), dict) and "admin_token" in entry["endpoint"] else entry
             for n, entry in routers.get("nodes", {}).items()}
    return {**routers, "nodes": nodes}


def lab_in_use(name: str) -> str:
    """Why a lab name cannot be taken, and what to do (never advice that would stop someone's live lab)."""
    existing = load(name)
    if existing is None or existing.owner_alive():
        owner = f" by process {existing.owner_pid}" if existing is not None else ""
        return (f"lab {name!r} is in use{owner} (`testbed up` or a running `testbed run`): wait for it, "
                f"`testbed down {name}` if it is yours and no longer needed, or give this topology another `name`")
    return f"lab {name!r} was left behind by a process that died; run `testbed clean` first"
