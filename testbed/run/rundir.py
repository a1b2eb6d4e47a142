"""The results folder of one run (docs/results.md; its paths are runfolder.layout's) and its append-only event
log."""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from runfolder.layout import LAYOUT


def new_run_id(spec_name: str, now_ns: int | None = None) -> str:
    now = datetime.fromtimestamp((now_ns or time.time_ns()) / 1e9, tz=timezone.utc)
    return f"{spec_name}-{now:%Y%m%dT%H%M%SZ}"


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically: a reader never sees half a file, a crash never leaves one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


class RunEvents:
    """`events.jsonl`: one JSON object per line, flushed at once (nothing lost on a crash)."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", buffering=1)

    def write(self, source: str, event: str, ts_ns: int | None = None, **fields: Any) -> dict:
        record = {"ts_ns": ts_ns if ts_ns is not None else time.time_ns(), "source": source, "event": event, **fields}
        line = json.dumps(record, default=str)
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")
                self._file.flush()
        return record

    def close(self) -> None:
        with self._lock:
            self._file.close()


class RunDir:
    def __init__(self, root: Path, run_id: str):
        root = Path(root).resolve()
        root.mkdir(parents=True, exist_ok=True)
        # Two runs started in the same second get -2, -3, ... (mkdir is the atomic claim).
        for n in range(1, 1000):
            self.run_id = run_id if n == 1 else f"{run_id}-{n}"
            self.path = root / self.run_id
            try:
                self.path.mkdir()
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"could not make a new run folder for {run_id} under {root}")
        for sub in LAYOUT.run_dirs:
            (self.path / sub).mkdir()
        self.events = RunEvents(self.path / LAYOUT.events)

    def __truediv__(self, other: str) -> Path:
        return self.path / other

    def node_dir(self, node: str) -> Path:
        d = self.path / LAYOUT.node_dir(node)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def copy_topology(self, spec_file: Path) -> None:
        shutil.copyfile(spec_file, self.path / LAYOUT.topology)


def node_results_dir(access, folder: str) -> str:
    """Where a run's ``folder`` (traffic, pcap ...) is written on a node, before it is fetched into the
    results folder: beside, not inside, what deployment installs in the node's work folder."""
    return f"{access.work_dir}/results/{folder}"
