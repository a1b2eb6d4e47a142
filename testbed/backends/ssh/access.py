"""Node access to a lab machine over SSH: commands as root (sudo), long-running processes that
outlive the SSH session and can be found again, files as tar streams.

Every process started here carries ``TESTBED_LAB``/``TESTBED_NODE`` in its environment and
keeps its pid and exit status in a folder under the node's work folder, so that a process
of this controller (or a later `testbed clean`) can signal, wait for and stop it.
"""
from __future__ import annotations

import io
import signal as signals
import subprocess
import tarfile
import tempfile
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Mapping, Optional, Sequence

from testbed import proc
from testbed.backends.localns.access import copy_path
from testbed.backends.ssh.connection import SshHost

#: environment markers of every process of ours on a lab machine
LAB_ENV, NODE_ENV = "TESTBED_LAB", "TESTBED_NODE"

# Started as root: runs "$@" in a new session, detached from the SSH session, its output to the
# log, its pid and (when it ends) its exit status in the process folder; prints the pid.
_SPAWN = r'''
d="$1"; log="$2"; shift 2
mkdir -p "$d"
if [ -n "$log" ]; then mkdir -p "$(dirname "$log")"; else log=/dev/null; fi
setsid sh -c '
d="$1"; log="$2"; shift 2
echo $$ >"$d/wpid"
"$@" >>"$log" 2>&1 </dev/null &
c=$!
echo $c >"$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid"
wait $c
echo $? >"$d/status.tmp" && mv "$d/status.tmp" "$d/status"
' sh "$d" "$log" "$@" >/dev/null 2>&1 </dev/null &
i=0
while [ ! -s "$d/pid" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
cat "$d/pid"
'''

# The process's state: "status N" once it ended, else "running" while it or its wrapper (which writes
# the status when it ends) lives, else "gone" (both were killed, e.g. by `testbed clean`).
_POLL = r'''
d="$1"
if [ -s "$d/status" ]; then echo "status $(cat "$d/status")"; exit 0; fi
for f in pid wpid; do
  p=$(cat "$d/$f" 2>/dev/null)
  if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then echo running; exit 0; fi
done
if [ -s "$d/status" ]; then echo "status $(cat "$d/status")"; else echo gone; fi
'''


class SshProcess:
    """A process started by :meth:`SshNodeAccess.spawn` on a lab machine."""

    def __init__(self, conn: SshHost, pid: int, proc_dir: str, argv: Sequence[str]):
        self.conn, self.pid, self.proc_dir, self.args = conn, pid, proc_dir, list(argv)
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is not None:
            return self.returncode
        out = self.conn.run(["sh", "-c", _POLL, "sh", self.proc_dir], timeout=20).stdout.strip()
        if out.startswith("status "):
            status = int(out.split()[1])
            self.returncode = -(status - 128) if status > 128 else status  # as subprocess: -N for signal N
        elif out == "gone":  # its wrapper was killed too (e.g. by `testbed clean`)
            self.returncode = -signals.SIGKILL
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            self.conn.run(["kill", f"-{int(sig)}", str(self.pid)], check=False, timeout=20)

    def terminate(self) -> None:
        self.send_signal(signals.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signals.SIGKILL)


class SshNodeAccess:
    """How the run reaches one node that is a lab machine (see testbed.backends.base.NodeAccess)."""

    shares_machine = False  # a machine of its own
    shares_clock = False  # its own clock: one-way delays would hold the clocks' offset

    def __init__(self, node: str, lab: str, conn: SshHost, work_dir: str, ssh_command: Sequence[str]):
        self.node, self.lab, self.conn, self.work_dir = node, lab, conn, work_dir
        self._ssh_command = list(ssh_command)

    def _marks(self, env: Optional[Mapping[str, str]]) -> dict[str, str]:
        return {LAB_ENV: self.lab, NODE_ENV: self.node, **(env or {})}

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0,
            input_text: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> proc.Result:
        return self.conn.run(argv, check=check, timeout=timeout, input_text=input_text,
                             env=self._marks(env) if env else None)

    def spawn(self, argv: Sequence[str], *, log: Optional[str] = None,
              env: Optional[Mapping[str, str]] = None) -> SshProcess:
        proc_dir = f"{self.work_dir}/.proc/{uuid.uuid4().hex[:12]}"
        out = self.conn.run(["sh", "-c", _SPAWN, "sh", proc_dir, log or "", *argv], env=self._marks(env),
                            timeout=30).stdout.strip()
        if not out.isdigit():
            raise proc.CommandError([f"{self.node}:", *argv], 1, f"did not start (no pid after 10 s): {out!r}")
        return SshProcess(self.conn, int(out), proc_dir, argv)

    def put(self, local: Path, remote: str) -> None:
        local = Path(local)
        if not local.exists():
            raise FileNotFoundError(f"{local} does not exist")
        target = PurePosixPath(remote)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(str(local), arcname=target.name)
        command = self.conn.as_root(["sh", "-c", 'mkdir -p "$1" && tar -x --no-same-owner -C "$1" -f -', "sh",
                                     str(target.parent)])
        status, _, err = self.conn.run_bytes(command, input_bytes=buffer.getvalue(), timeout=300)
        if status != 0:
            raise proc.CommandError([f"{self.node}:", "put", str(local), remote], status, err.decode(errors="replace"))

    def fetch(self, remote: str, local: Path) -> None:
        source = PurePosixPath(remote)
        command = self.conn.as_root(["sh", "-c", '[ -e "$1/$2" ] || { echo "no such file: $1/$2" >&2; exit 3; }; '
                                                 'tar -c -C "$1" -f - "$2"', "sh", str(source.parent), source.name])
        with tempfile.TemporaryDirectory(prefix="testbed-fetch-") as scratch:
            archive = Path(scratch) / "fetch.tar"
            with open(archive, "wb") as sink:
                status, _, err = self.conn.run_bytes(command, timeout=1800, sink=sink)
            if status == 3:
                raise FileNotFoundError(f"{self.node}: {remote} does not exist")
            if status != 0:
                raise proc.CommandError([f"{self.node}:", "fetch", remote], status, err.decode(errors="replace"))
            unpacked = Path(scratch) / "unpacked"
            unpacked.mkdir()
            with tarfile.open(archive) as tar:
                _extract(tar, unpacked)
            copy_path(unpacked / source.name, Path(local))

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        inner = self.conn.as_root(list(argv))
        return [*self._ssh_command, "-t", inner]


def _extract(tar: tarfile.TarFile, dest: Path) -> None:
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is not None:
        tar.extractall(dest, filter="data")
    else:  # pragma: no cover - Pythons without extraction filters
        for member in tar.getmembers():
            if member.name.startswith("/") or ".." in PurePosixPath(member.name).parts:
                raise ValueError(f"unsafe path in fetched archive: {member.name}")
        tar.extractall(dest)


def ssh_command(host, *, check_host_keys: bool = True) -> list[str]:
    """The ``ssh`` command line that reaches ``host`` as the inventory says (for `testbed exec`)."""
    argv = ["ssh", "-p", str(host.port)]
    if host.key_file:
        argv += ["-i", host.key_file, "-o", "IdentitiesOnly=yes"]
    argv += list(host.ssh_args)
    if not check_host_keys:
        argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    return [*argv, f"{host.login}@{host.address}"]
