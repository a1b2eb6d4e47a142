"""Node access to a container: commands run in all of its namespaces with ``nsenter``, files are
copied through ``/proc/<pid>/root``.

``nsenter`` rather than ``docker exec``: a command costs a few milliseconds instead of an
engine round trip (bring-up runs hundreds of ``tc`` commands), and a long-running process
stays a child of ours that we can signal and wait for. It needs the engine on this machine,
as the links (veths between the containers' namespaces) do anyway.

Entering the PID namespace makes ``nsenter`` fork: the program is its child. Signals go to
that child (``nsenter`` itself does not pass them on); ``wait`` waits for ``nsenter``, which
ends as its child does.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence

from testbed import proc
from testbed.backends.localns.access import copy_path, open_log

#: The environment of every command run in a node: the image's, not this machine's.
NODE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
            "LANG": "C.UTF-8"}


class NsenterProcess:
    """A program started in a container through ``nsenter``; signals reach the program itself."""

    def __init__(self, popen: subprocess.Popen):
        self.popen = popen
        self._child: Optional[int] = None

    @property
    def pid(self) -> Optional[int]:
        """The program's PID in this machine's PID namespace (None once it has ended)."""
        if self._child is None:
            deadline = time.monotonic() + 5.0
            while self._child is None and self.popen.poll() is None and time.monotonic() < deadline:
                try:
                    kids = Path(f"/proc/{self.popen.pid}/task/{self.popen.pid}/children").read_text().split()
                except OSError:
                    kids = []
                if kids:
                    self._child = int(kids[0])
                else:
                    time.sleep(0.002)
        return self._child

    def poll(self) -> Optional[int]:
        return self.popen.poll()

    def wait(self, timeout: Optional[float] = None) -> int:
        return self.popen.wait(timeout)

    def send_signal(self, sig: int) -> None:
        if self.popen.poll() is not None:
            return
        target = self.pid
        try:
            os.kill(target, sig) if target else self.popen.send_signal(sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ContainerAccess:
    """Node access to the container whose init process is ``pid`` (in this machine's PID namespace)."""

    shares_machine = False  # its files are the container's own
    shares_clock = True  # a container reads this machine's kernel clock

    def __init__(self, node: str, pid: int, work_dir: str):
        self.node = node
        self.pid = pid
        self.work_dir = work_dir

    def _enter(self, argv: Sequence[str]) -> list[str]:
        return ["nsenter", "--target", str(self.pid), "--mount", "--uts", "--ipc", "--net", "--pid", "--", *argv]

    def host_path(self, remote: str) -> Path:
        """The node's absolute path ``remote`` as seen from this machine (absolute symlinks inside the
        node are not followed correctly this way: use real paths such as /run, not /var/run)."""
        if not remote.startswith("/"):
            raise ValueError(f"node paths must be absolute: {remote!r}")
        return Path(f"/proc/{self.pid}/root{remote}")

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0,
            input_text: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> proc.Result:
        return proc.run(self._enter(argv), check=check, timeout=timeout, input_text=input_text,
                        env={**NODE_ENV, **(env or {})})

    def spawn(self, argv: Sequence[str], *, log: Optional[str] = None,
              env: Optional[Mapping[str, str]] = None) -> NsenterProcess:
        out = open_log(self.host_path(log) if log else None)
        try:
            return NsenterProcess(proc.spawn(self._enter(argv), stdout=out, stderr=out, env={**NODE_ENV, **(env or {})}))
        finally:
            if out is not subprocess.DEVNULL:
                out.close()

    def put(self, local: Path, remote: str) -> None:
        copy_path(Path(local), self.host_path(remote))

    def fetch(self, remote: str, local: Path) -> None:
        copy_path(self.host_path(remote), Path(local))

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        return self._enter(argv)
