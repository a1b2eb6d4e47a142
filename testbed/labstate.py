"""A lab's state on disk, so that `exec`, `down` and `clean` find it from another shell."""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional


def state_root() -> Path:
    return Path(os.environ.get("TESTBED_STATE_DIR", "/run/testbed/labs"))


@dataclass
class LabState:
    name: str
    status: str  # building | up | failed | stopping
    holder_pid: int
    spec_path: str
    netns: list[str]
    lab: Optional[dict] = None
    error: Optional[str] = None
    created_ns: int = field(default_factory=time.time_ns)

    @property
    def dir(self) -> Path:
        return state_root() / self.name

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, self.dir / "state.json")

    def holder_alive(self) -> bool:
        return process_is_holder(self.holder_pid)


def load(name: str) -> Optional[LabState]:
    path = state_root() / name / "state.json"
    try:
        return LabState(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, TypeError) as exc:
        raise RuntimeError(f"lab state {path} is unreadable ({exc}); `testbed clean` removes it") from exc


def all_states() -> list[LabState]:
    root = state_root()
    if not root.is_dir():
        return []
    states = []
    for d in sorted(root.iterdir()):
        try:
            s = load(d.name)
        except RuntimeError:
            s = LabState(d.name, "corrupt", 0, "", [])
        if s is not None:
            states.append(s)
        elif d.is_dir():  # a folder without a state file: a holder that died while starting
            states.append(LabState(d.name, "corrupt", 0, "", []))
    return states


def remove(name: str) -> None:
    d = state_root() / name
    if d.is_dir():
        for f in d.iterdir():
            f.unlink()
        d.rmdir()


HOLDER_MODULE = "testbed.labd"


def process_is_holder(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return HOLDER_MODULE.encode() in cmdline
