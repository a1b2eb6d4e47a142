"""Node access for nodes that are network namespaces of this machine.

:class:`NetnsAccess` is a namespace that shares this machine's file system (a Mininet host):
commands run with ``ip netns exec``, files are copied. The Docker backend's nodes have a file
system of their own and are reached with ``nsenter`` instead (testbed.backends.docker.access).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Mapping, Optional, Sequence

from testbed import proc


def copy_path(src: Path, dest: Path) -> None:
    """Copy a file or a folder with their modes (replacing what is at ``dest``), parents created; nothing when
    they are the same."""
    src, dest = Path(src), Path(dest)
    if not src.exists():
        raise FileNotFoundError(f"{src} does not exist")
    if dest.exists() and src.resolve() == dest.resolve():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dest, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dest)  # with its mode: a private key must stay 0600


def open_log(path: Optional[Path]):
    """A file to append a process's output to (parents created), or DEVNULL."""
    if path is None:
        return subprocess.DEVNULL
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "ab")


class NetnsAccess:
    """A node that is the named network namespace ``netns`` and shares this machine's files."""

    #: its files and process IDs are this machine's (deployment may share one copy of the code between nodes)
    shares_machine = True
    #: it reads this machine's kernel clock (times taken on two such nodes compare: one-way delay)
    shares_clock = True

    def __init__(self, node: str, netns: str, work_dir: str):
        self.node = node
        self.netns = netns
        self.work_dir = work_dir

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0,
            input_text: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> proc.Result:
        return proc.run(argv, netns=self.netns, check=check, timeout=timeout, input_text=input_text,
                        env={**os.environ, **env} if env else None)

    def spawn(self, argv: Sequence[str], *, log: Optional[str] = None,
              env: Optional[Mapping[str, str]] = None) -> subprocess.Popen:
        out = open_log(Path(log) if log else None)
        try:
            return proc.spawn(argv, netns=self.netns, stdout=out, stderr=out, env={**os.environ, **(env or {})})
        finally:
            if out is not subprocess.DEVNULL:
                out.close()

    def put(self, local: Path, remote: str) -> None:
        copy_path(Path(local), Path(remote))

    def fetch(self, remote: str, local: Path) -> None:
        copy_path(Path(remote), Path(local))

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        return proc.in_netns(self.netns, argv)
