"""The impairment appliance: Debian's user-mode Linux kernel, run as a process of ours, that carries the links
needing qdiscs this machine's kernel lacks (netem, fq_codel, cake, red, pie).

One appliance per lab. Each link it carries has two ports: a tap device per end, created by the appliance's
kernel (its vector driver, ``transport=tap``), then moved into the node's namespace under the link end's name
(address and MTU as a veth end would have, offloads off). The ports are named on the kernel's command line; those
beyond what it holds (4096 bytes, ~100 ports) are plugged in through its management console once it has booted.
Inside, the two ports of a link are joined by tc (an ingress qdisc, a matchall filter, ``mirred egress redirect`` to
the other port), and each direction's impairment qdiscs sit on the egress of the port that leads to the receiving
node. Only the appliance's kernel touches packets: its user space is slow (~45 us per system call) and runs nothing
but tc.

It boots from the host's own file system, read-only (hostfs), with ``appliance_init.sh`` as PID 1, and loads
its qdisc modules from ``/usr/lib/uml/modules``. Its control channel is a folder of request files it mounts
from the host (hostfs): a request is a script ``<tag>.req``, answered by ``<tag>.out`` and ``<tag>.rc``; a line
written to a FIFO held as its serial line 1 (the doorbell) wakes the init at once (no SSH, no daemon), so any
process of ours — the run, `testbed link` from another shell — changes a link at run time through
:meth:`Appliance.run`.

The appliance's name (``umid``) is recorded in the lab state before it boots; :func:`stop` finds its
processes by that name, so `down`, the end of a run and `clean` after a kill -9 remove it (its taps go with
its process) and its folder.

This kernel: Debian's user-mode Linux 6.1 cannot save a process's full register state on a CPU whose XSAVE
area is larger than it expects (AVX-512/AMX): the host refuses its PTRACE_SETREGSET (EFAULT) and the first
process inside dies. :func:`_without_xstate_ptrace` makes the host answer its probe for that interface with
an error, so it falls back to the FXSAVE interface (x87/SSE state), and the appliance's processes are told
through GLIBC_TUNABLES not to use AVX (whose state that interface does not carry): a process inside gets the
upper halves of its ymm registers back as zeros after a page fault, and as its handler left them after a signal.
Turning the AVX features off is not enough for glibc's memcpy/memmove, which choose their AVX version by the
AVX_Fast_Unaligned_Load preference (set from the CPU at start, left set by ``-AVX,-AVX2``): a copy of 32 bytes
or more whose store faulted (the first write to a page, as to every page after a fork) wrote zeros over 16 of
each 32 bytes. The init's own strings came out cut short (its ready line read ``6.1.176 mo`` with one link),
python could not start inside, and the forked child that writes a request's answer copies its strings the same
way (a CI run found a request's ``.rc`` without its ``.out``). :data:`NO_AVX` turns that preference off too.
"""
from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from testbed.links.impairments import FEATURE_QDISC

#: Debian's user-mode Linux kernel (TESTBED_UML_KERNEL names another, e.g. a missing one in the tests)
UML_KERNEL = os.environ.get("TESTBED_UML_KERNEL", "/usr/bin/linux.uml")
UML_MODULES = Path("/usr/lib/uml/modules")
INSTALL_HINT = "apt-get install user-mode-linux kmod"
INIT_SCRIPT = Path(__file__).resolve().parent / "appliance_init.sh"
#: what the appliance can install, as the qdisc kinds of testbed.kernel (answered without booting it)
APPLIANCE_QDISCS = ("htb", "netem", "pfifo", "bfifo", "tbf", "fq_codel", "cake", "red", "pie")
#: those built into its kernel (sch_fifo); each other kind is the module sch_<kind>
BUILT_IN_QDISCS = ("pfifo", "bfifo")
#: the modules the appliance loads at boot: every qdisc it offers, and what joins its ports (an ingress qdisc,
#: a matchall filter, the mirred redirect and the drop of a link end that is down)
QDISC_MODULES = tuple(f"sch_{kind}" for kind in APPLIANCE_QDISCS if kind not in BUILT_IN_QDISCS) + (
    "sch_ingress", "act_mirred", "act_gact", "cls_matchall")
#: the shaping features the appliance provides (the rate and a pfifo queue stay at the nodes' end:
#: testbed.links.provider)
APPLIANCE_FEATURES = frozenset(f for f, kind in FEATURE_QDISC.items()
                               if kind in APPLIANCE_QDISCS and f not in ("bw", "queue"))
#: glibc inside the appliance must not use AVX (see the module's docstring): neither the AVX features nor the
#: preference that makes memcpy/memmove AVX copies (AVX_Fast_Unaligned_Load, which -AVX,-AVX2 leave set)
NO_AVX = "glibc.cpu.hwcaps=-AVX,-AVX2,-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-EVEX,-AVX_Fast_Unaligned_Load"
MEMORY = "128M"
#: the appliance runs under the real-time round-robin policy: netem releases a delayed packet from a timer, and
#: a timer of the appliance's kernel fires only once the host schedules its process; as an ordinary process
#: on a busy machine that waited ~0.4 ms (ping p50 20.8 ms through 2 x 10 ms), at this priority ~0.1 ms. The
#: host's real-time throttling (95% of each second) leaves the other processes their share.
APPLIANCE_RT_PRIORITY = 10
#: user-mode Linux refuses a command line longer than COMMAND_LINE_SIZE (4096 bytes, ~100 ports): the ports
#: beyond this budget are plugged in through its management console once it has booted
COMMAND_LINE_BUDGET = 4096 - 256
_MCONSOLE_MAGIC = 0xCAFEBABE
#: where the appliance sees its control folder (appliance_init.sh mounts it there)
CONTROL_MOUNT = "/run/ctl"
BOOT_TIMEOUT_S = 30.0
#: how often a request's wait checks that the appliance still runs
LIVENESS_CHECK_S = 0.5
COMMAND_TIMEOUT_S = 30.0
UMID_PREFIX = "tbed-"
#: the appliance's folders: its FIFOs, lock and console log
APPLIANCE_ROOT_ENV = "TESTBED_APPLIANCE_DIR"


#: the markers of a request's script between the outputs of its commands (Appliance.run)
_DONE = "@@tbed-done"
_FAILED = "@@tbed-failed "


def _request_named(commands: Sequence[Sequence[str]]) -> str:
    """A request's commands in words, for an error: the first, and how many more."""
    more = f" and {len(commands) - 1} more" if len(commands) > 1 else ""
    return f"`{shlex.join(commands[0])}`{more}"


class ApplianceError(RuntimeError):
    """The appliance could not boot, died, or refused a command."""


class ApplianceMissing(ApplianceError):
    """User-mode Linux is not installed (exit 2 with the install command)."""


def appliance_root() -> Path:
    return Path(os.environ.get(APPLIANCE_ROOT_ENV, "/run/testbed/appliance"))


def installed() -> bool:
    return os.access(UML_KERNEL, os.X_OK) and UML_MODULES.is_dir() and shutil.which("modprobe") is not None


def require_installed() -> None:
    if not installed():
        raise ApplianceMissing(f"the impairment appliance needs Debian's user-mode Linux: `{INSTALL_HINT}` "
                               f"({UML_KERNEL} and its modules in {UML_MODULES})")


def kernel_version() -> Optional[str]:
    """The appliance kernel's version (the name of its modules' folder), without booting it."""
    if not UML_MODULES.is_dir():
        return None
    versions = sorted(p.name for p in UML_MODULES.iterdir() if p.is_dir())
    return versions[-1] if versions else None


def umid_for(lab: str) -> str:
    return f"{UMID_PREFIX}{lab}"


#: the first letters of every tap an appliance creates on this machine
TAP_PREFIX = "tbu"


def tap_prefix(lab: str) -> str:
    """The first letters of the taps of lab ``lab``'s appliance (how `clean` tells whose a tap is)."""
    return f"{TAP_PREFIX}{hashlib.sha1(lab.encode()).hexdigest()[:5]}"


def tap_name(lab: str, link: int, end: int) -> str:
    """A host-unique name (at most 15 characters) for the tap of end ``end`` (0 or 1) of link ``link``: the
    appliance's kernel creates it under this name before it is moved into the node and renamed."""
    return f"{tap_prefix(lab)}{link}{'ab'[end]}"


@dataclass(frozen=True)
class Port:
    """One end of a link carried by the appliance: the tap ``tap`` is ``vec<index>`` inside it and
    ``ifname`` in node ``node``'s namespace ``netns``."""

    link: int
    end: int  # 0: the link's a end, 1: its b end
    node: str
    ifname: str
    netns: str
    tap: str
    index: int

    @property
    def device(self) -> str:
        """The port's device inside the appliance."""
        return f"vec{self.index}"


def port_spec(port: Port) -> str:
    """The appliance kernel's description of a port (on its command line, or to its management console)."""
    return f"{port.device}:transport=tap,ifname={port.tap}"


@dataclass
class ApplianceRecord:
    """What the lab state records of its appliance, before it boots (so `clean` finds it after a crash)."""

    lab: str
    umid: str
    dir: str
    ports: list[Port] = field(default_factory=list)
    kernel: Optional[str] = None
    pid: Optional[int] = None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "ApplianceRecord":
        return cls(**{**data, "ports": [Port(**p) for p in data.get("ports", [])]})

    def port(self, link: int, node: str) -> Port:
        for p in self.ports:
            if p.link == link and p.node == node:
                return p
        raise KeyError(f"the appliance carries no end of link {link} at node {node!r}")


def plan_appliance(lab: str, ends: Sequence[tuple[int, int, str, str, str]]) -> ApplianceRecord:
    """The record of an appliance for lab ``lab`` carrying the link ends ``(link, end, node, ifname, netns)``."""
    ports = [Port(link, end, node, ifname, ns, tap_name(lab, link, end), i)
             for i, (link, end, node, ifname, ns) in enumerate(ends)]
    return ApplianceRecord(lab, umid_for(lab), str(appliance_root() / lab), ports, kernel_version())


# -- the host's side of the XSAVE work-around ----------------------------------------------------------------

_PTRACE_GETREGSET, _PTRACE_SETREGSET, _NT_X86_XSTATE = 0x4204, 0x4205, 0x202
_SYS_PTRACE, _AUDIT_ARCH_X86_64, _EIO = 101, 0xC000003E, 5


def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def _appliance_child() -> None:
    """In the appliance's process before exec: the XSAVE work-around, its own session, the real-time policy."""
    _without_xstate_ptrace()


def _without_xstate_ptrace() -> None:
    """In the child, before exec: a seccomp filter that answers ptrace(PTRACE_GET/SETREGSET, NT_X86_XSTATE)
    with EIO and lets every other system call through (see the module's docstring)."""
    ld, jeq, ret = 0x20, 0x15, 0x06
    allow, errno_eio = 0x7FFF0000, 0x00050000 | _EIO
    program = [
        _bpf(ld, 0, 0, 4), _bpf(jeq, 1, 0, _AUDIT_ARCH_X86_64), _bpf(ret, 0, 0, allow),
        _bpf(ld, 0, 0, 0), _bpf(jeq, 1, 0, _SYS_PTRACE), _bpf(ret, 0, 0, allow),
        _bpf(ld, 0, 0, 16), _bpf(jeq, 2, 0, _PTRACE_GETREGSET), _bpf(jeq, 1, 0, _PTRACE_SETREGSET),
        _bpf(ret, 0, 0, allow),
        _bpf(ld, 0, 0, 32), _bpf(jeq, 0, 1, _NT_X86_XSTATE), _bpf(ret, 0, 0, errno_eio), _bpf(ret, 0, 0, allow),
    ]
    filters = ctypes.create_string_buffer(b"".join(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program), ctypes.cast(filters, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
    os.setsid()  # its own session: a terminal's signals to the run do not reach it
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(APPLIANCE_RT_PRIORITY))
    except OSError:
        pass  # no real-time budget here (e.g. a cgroup without one): it runs as an ordinary process


# -- the running appliance --------------------------------------------------------------------------------------

class Appliance:
    """A booted appliance (or one to boot) with its control channel."""

    def __init__(self, record: ApplianceRecord):
        self.record = record
        self.dir = Path(record.dir)
        self._seq = 0

    @property
    def console_log(self) -> Path:
        return self.dir / "console.log"

    def command_line(self, doorbell_fd: int) -> list[str]:
        """The kernel's command line, with the ports that fit on it (:meth:`plugged_later`: the others); its
        serial line 1 reads the doorbell's FIFO, open as ``doorbell_fd`` (the same number in the appliance's
        process: a descriptor moved in the child before exec would be closed by Popen's close_fds, which runs
        after preexec_fn, and commands would wait for the init's 1 s poll)."""
        return [UML_KERNEL, *self._settings(doorbell_fd), *(port_spec(p) for p in self._ports_on_command_line())]

    def _settings(self, doorbell_fd: int) -> list[str]:
        return [f"mem={MEMORY}", f"umid={self.record.umid}", f"uml_dir={self.dir}",
                "root=/dev/root", "rootfstype=hostfs", "rootflags=/", "ro", f"init={INIT_SCRIPT}",
                f"GLIBC_TUNABLES={NO_AVX}", f"TBED_UML_MODULES={UML_MODULES}",
                f"TBED_UML_QDISCS={','.join(QDISC_MODULES)}", f"TBED_CONTROL_DIR={self.control_dir}",
                "con0=null,fd:2", "con=null", "ssl=null", f"ssl1=fd:{doorbell_fd},null"]

    def _ports_on_command_line(self) -> list[Port]:
        used = sum(len(arg) + 1 for arg in self._settings(0))  # the budget's margin holds the fd's digits
        fitting = []
        for p in self.record.ports:
            used += len(port_spec(p)) + 1
            if used > COMMAND_LINE_BUDGET:
                break
            fitting.append(p)
        return fitting

    def plugged_later(self) -> list[Port]:
        """The ports that do not fit on the kernel's command line: plugged in through its management console
        once it has booted (:meth:`boot`)."""
        return self.record.ports[len(self._ports_on_command_line()):]

    def _mconsole(self, command: str, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
        """One command of user-mode Linux's management console (its socket in the appliance's folder); its
        answer. A datagram: magic, version, length, then the command (at most 512 bytes)."""
        data = command.encode()
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(f"\0tbed-mconsole-{os.getpid()}-{time.monotonic_ns()}")  # abstract: nothing to remove
            sock.settimeout(timeout_s)
            try:
                sock.sendto(struct.pack("III512s", _MCONSOLE_MAGIC, 2, len(data), data),
                            str(self.dir / self.record.umid / "mconsole"))
                reply = sock.recv(12 + 512)
            except OSError as exc:
                raise ApplianceError(f"the appliance {self.record.umid}'s management console did not answer "
                                     f"`{command}`: {exc}") from None
        err, _more, length = struct.unpack("III", reply[:12])
        answer = reply[12:12 + length].rstrip(b"\0").decode(errors="replace")
        if err:
            raise ApplianceError(f"the appliance {self.record.umid} refused `{command}`: {answer}")
        return answer

    def _plug_in(self, ports: Sequence[Port]) -> None:
        """Add ``ports`` to the booted appliance and bring them up (which creates their taps on the host)."""
        for p in ports:
            self._mconsole(f"config {port_spec(p)}")
        self.run_batch([["ip", "link", "set", "dev", p.device, "up"] for p in ports])

    @property
    def _doorbell(self) -> Path:
        return self.dir / "doorbell"

    def _ring(self) -> None:
        try:
            fd = os.open(self._doorbell, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return  # no appliance holds it: the wait for the answer says so
        try:
            os.write(fd, b"\n")
        except BlockingIOError:
            pass  # a full doorbell still rings
        finally:
            os.close(fd)

    @property
    def control_dir(self) -> Path:
        """The control channel: requests and answers (see appliance_init.sh)."""
        return self.dir / "control"

    def boot(self, timeout_s: float = BOOT_TIMEOUT_S) -> None:
        """Start the appliance's kernel and wait until its init answers on the control channel."""
        require_installed()
        self.control_dir.mkdir(parents=True, exist_ok=True)
        if not self._doorbell.exists():
            os.mkfifo(self._doorbell, 0o600)
        bell = os.open(self._doorbell, os.O_RDWR)  # held by the appliance as its serial line 1
        try:
            with open(self.console_log, "wb") as log:
                process = subprocess.Popen(self.command_line(bell), stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=log, pass_fds=(bell,), preexec_fn=_appliance_child,
                                           close_fds=True)
        finally:
            os.close(bell)
        self.record.pid = process.pid
        said = self._wait_for(self.control_dir / "ready", timeout_s, process)
        ready = said.split()
        if not ready or ready[1:2] != ["modules=0"]:
            tail = self._console_tail()  # read before stop(), which removes the folder with its console log
            stop(self.record)
            if not ready[1:2] or not re.fullmatch(r"modules=\d+", ready[1]):
                raise ApplianceError(f"the appliance's init announced itself with a garbled line {said!r} (not "
                                     f"'<kernel> modules=<status> <errors>'): its user space corrupts what it "
                                     f"copies (docs/impairments.md, the AVX work-around: GLIBC_TUNABLES){tail}")
            raise ApplianceError(f"the appliance could not load its qdisc modules: {' '.join(ready[2:])}{tail}")
        self.record.kernel = ready[0]
        try:
            self._plug_in(self.plugged_later())
        except ApplianceError:
            stop(self.record)
            raise

    def _wait_for(self, path: Path, timeout_s: float, process: Optional[subprocess.Popen] = None) -> str:
        """The content of ``path`` once the appliance has written it."""
        end = time.monotonic() + timeout_s
        pause = 0.001
        next_check = time.monotonic() + LIVENESS_CHECK_S
        while not path.exists():
            if process is not None and process.poll() is not None:
                raise ApplianceError(f"the appliance {self.record.umid} exited with {process.returncode} "
                                     f"while booting{self._console_tail()}")
            if process is None and time.monotonic() > next_check:  # a dead appliance answers nothing
                if not self.alive():
                    raise ApplianceError(f"the impairment appliance {self.record.umid} is not running (its "
                                         f"console log: {self.console_log}){self._console_tail()}")
                next_check = time.monotonic() + LIVENESS_CHECK_S
            if time.monotonic() > end:
                alive = "" if self.alive() else " (it is not running)"
                raise ApplianceError(f"the appliance {self.record.umid} did not answer within {timeout_s:g} s"
                                     f"{alive}{self._console_tail()}")
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        return path.read_text()

    def _console_tail(self, lines: int = 15) -> str:
        try:
            text = self.console_log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        useful = [line for line in text if not line.startswith(" [<")]
        return "; its console ended with:\n  " + "\n  ".join(useful[-lines:]) if useful else ""

    def run(self, commands: Sequence[Sequence[str]], timeout_s: float = COMMAND_TIMEOUT_S) -> list[str]:
        """Run ``commands`` (argv lists, e.g. tc) inside the appliance, one after the other, stopping at the
        first that fails (ApplianceError with its output); the output of each. They go as one request (a
        process started inside costs ~0.1 s: its user space is slow)."""
        if not commands:
            return []
        script = "".join(f"{shlex.join(argv)} || {{ echo {_FAILED}{i} $?; exit 1; }}\necho {_DONE}\n"
                          for i, argv in enumerate(commands))
        lock = os.open(self.dir / "control.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._seq += 1
            tag = self.control_dir / f"{os.getpid()}-{time.monotonic_ns()}-{self._seq}"
            tmp = tag.with_suffix(".tmp")
            tmp.write_text(script)
            tmp.rename(tag.with_suffix(".req"))
            self._ring()
            request = f"request {tag.name} ({_request_named(commands)})"
            try:
                status = self._wait_for(tag.with_suffix(".rc"), timeout_s).strip()
                try:
                    text = tag.with_suffix(".out").read_text(errors="replace")
                except FileNotFoundError:
                    raise ApplianceError(f"the appliance answered {request} with exit status {status or '(none)'} "
                                         f"but wrote no output "
                                         f"({tag.with_suffix('.out')} is missing){self._console_tail()}") from None
            finally:
                for suffix in (".req", ".out", ".rc"):
                    tag.with_suffix(suffix).unlink(missing_ok=True)
        finally:
            os.close(lock)
        outputs = text.split(_DONE + "\n")
        if _FAILED in outputs[-1]:
            before, failed = outputs[-1].rsplit(_FAILED, 1)
            try:
                index, rc = (int(x) for x in failed.split())
            except ValueError:
                raise ApplianceError(f"the appliance's answer to {request} has a garbled failure mark "
                                     f"{failed.strip()!r}{self._console_tail()}") from None
            raise ApplianceError(f"in the appliance: `{shlex.join(commands[index])}` failed (exit {rc}): "
                                 f"{before.strip() or 'no output'}")
        if len(outputs) <= len(commands):  # a command's end never written, and no failure either
            said = "; ".join(o.strip() for o in outputs if o.strip())[-500:] or "no output"
            raise ApplianceError(f"the appliance's answer to {request} ends after {len(outputs) - 1} of its "
                                 f"{len(commands)} commands (exit status {status or '(none)'}): {said}"
                                 f"{self._console_tail()}")
        return [o.rstrip("\n") for o in outputs[:len(commands)]]

    def run_batch(self, commands: Sequence[Sequence[str]], timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        """Run ``commands``, all of one program that reads a batch file (``tc``, ``ip``), as one process inside
        the appliance (``<program> -batch``): hundreds of them cost what one does, where one process each would
        take ~0.1 s each (200 to join ring50's ports: 8 to over 30 s on a busy machine)."""
        if not commands:
            return
        programs = {argv[0] for argv in commands}
        if len(programs) != 1:
            raise ValueError(f"one program per batch, not {sorted(programs)}")
        name = f"{os.getpid()}-{time.monotonic_ns()}.batch"
        batch = self.control_dir / name
        batch.write_text("".join(shlex.join(argv[1:]) + "\n" for argv in commands))
        try:
            self.run([[programs.pop(), "-batch", f"{CONTROL_MOUNT}/{name}"]], timeout_s)
        except ApplianceError as exc:  # name the command that failed (the program says its line)
            line = re.search(rf"{re.escape(name)}:(\d+)", str(exc))
            if line and 0 < int(line.group(1)) <= len(commands):
                failed = commands[int(line.group(1)) - 1]
                raise ApplianceError(f"in the appliance: `{shlex.join(failed)}`{self._port_named(failed)} failed "
                                     f"(one of a batch of {len(commands)}): {exc}") from None
            raise
        finally:
            batch.unlink(missing_ok=True)

    def _port_named(self, argv: Sequence[str]) -> str:
        """`` (the port toward r2:eth1, link 3)`` for a command on one of the appliance's ports, else ``""``."""
        port = next((p for p in self.record.ports if p.device in argv), None)
        return f" (the port toward {port.node}:{port.ifname}, link {port.link})" if port else ""

    def alive(self) -> bool:
        return bool(processes_of(self.record.umid))



def appliance_groups(prefix: str = UMID_PREFIX) -> dict[str, list[int]]:
    """Every running appliance of ours: umid -> its processes."""
    found: dict[str, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not cmdline or not (cmdline[0].endswith(b"linux.uml") or cmdline[0] == UML_KERNEL.encode()):
            continue
        for arg in cmdline:
            if arg.startswith(f"umid={prefix}".encode()):
                found.setdefault(arg.decode()[5:], []).append(int(entry.name))
    return found


def processes_of(umid: str) -> list[int]:
    """The host processes of the appliance named ``umid`` (its kernel and the processes it runs inside)."""
    return appliance_groups(umid).get(umid, [])


def stop(record: ApplianceRecord, timeout_s: float = 5.0) -> list[str]:
    """Kill the appliance (its taps vanish with it) and remove its folder; what was removed, in words."""
    removed = []
    pids = processes_of(record.umid)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    end = time.monotonic() + timeout_s
    while processes_of(record.umid) and time.monotonic() < end:
        time.sleep(0.05)
    if pids:
        removed.append(f"impairment appliance {record.umid} ({len(pids)} processes)")
    # its taps go once the kernel has closed them, a moment after its processes: those still in this machine's
    # namespace (not yet moved into a node) are waited for, then deleted
    taps = [p.tap for p in record.ports]
    while any(Path(f"/sys/class/net/{t}").exists() for t in taps) and time.monotonic() < end:
        time.sleep(0.05)
    for tap in taps:
        if Path(f"/sys/class/net/{tap}").exists():
            subprocess.run(["ip", "link", "del", "dev", tap], capture_output=True, check=False)
            removed.append(f"tap {tap}")
    folder = Path(record.dir)
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(f"appliance folder {folder}")
    return removed


def _orphan_umids(live_labs: set[str]) -> list[str]:
    """Running appliances of no live lab (their umids)."""
    live = {umid_for(lab) for lab in live_labs}
    return sorted(umid for umid in appliance_groups() if umid not in live)


def leftover_taps(live_labs: set[str]) -> list[str]:
    """Taps of ours in this machine's own namespace that no live lab's appliance is about to move (a crash
    between the appliance creating them and moving them into the nodes; moved ones go with the nodes)."""
    live = [tap_prefix(lab) for lab in live_labs]
    return sorted(name for name in (p.name for p in Path("/sys/class/net").iterdir())
                  if name.startswith(TAP_PREFIX) and not any(name.startswith(prefix) for prefix in live))


def leftover_folders(live_labs: set[str]) -> list[Path]:
    """Appliance folders (:func:`appliance_root`) of labs that are not live."""
    root = appliance_root()
    return sorted(f for f in root.iterdir() if f.is_dir() and f.name not in live_labs) if root.is_dir() else []


def release_leftovers(live_labs: set[str]) -> list[str]:
    """Stop every appliance of no live lab, then delete the taps and folders of ours no live lab owns; what was
    removed, in words."""
    from testbed import proc

    removed: list[str] = []
    for umid in _orphan_umids(live_labs):
        lab = umid[len(UMID_PREFIX):]
        removed += stop(ApplianceRecord(lab, umid, str(appliance_root() / lab)))
    for tap in leftover_taps(live_labs):
        if proc.run(["ip", "link", "del", "dev", tap], check=False).returncode == 0:
            removed.append(f"tap {tap}")
    for folder in leftover_folders(live_labs):
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(f"appliance folder {folder}")
    return removed


def leftovers(live_labs: set[str]) -> list[str]:
    """What :func:`release_leftovers` would remove (a dry run)."""
    return [f"impairment appliance {umid}" for umid in _orphan_umids(live_labs)] + \
        [f"tap {tap}" for tap in leftover_taps(live_labs)] + \
        [f"appliance folder {folder}" for folder in leftover_folders(live_labs)]


def host_commands(record: ApplianceRecord) -> list[tuple[list[str], Optional[str]]]:
    """On this machine, once the appliance is up: each tap into its node's namespace under the link end's
    name, up, with generic offloads off (the appliance's vector driver takes whole frames; a 64 KiB segment handed
    to it would be dropped or sent as one, which measured 0.5 Mbit/s of TCP instead of 690); as ``(argv, input)``
    pairs: one ``ip -batch`` moves every tap, then one shell per namespace renames and sets up its taps, and only
    then one per namespace brings them up (two processes per node, not five per tap: ring50 has 100)."""
    by_netns: dict[str, list[Port]] = {}
    for p in record.ports:
        by_netns.setdefault(p.netns, []).append(p)
    commands: list[tuple[list[str], Optional[str]]] = [
        (["ip", "-batch", "-"], "".join(f"link set dev {p.tap} netns {p.netns}\n" for p in record.ports))]
    for netns, ports in by_netns.items():
        script = "".join(
            f"ip link set dev {p.tap} name {p.ifname} && "
            f"ethtool -K {p.ifname} tx off tso off gso off gro off && "
            # no traffic of its own (IPv6 neighbour discovery) before both ends of its link are up
            f"sysctl -q -w net.ipv6.conf.{p.ifname}.disable_ipv6=1 || exit 1\n" for p in ports)
        commands.append((["ip", "netns", "exec", netns, "sh", "-c", script], None))
    for netns, ports in by_netns.items():
        commands.append((["ip", "-n", netns, "-batch", "-"], "".join(f"link set dev {p.ifname} up\n" for p in ports)))
    return commands


def redirect_command(port: Port, toward: Port) -> list[str]:
    """Inside the appliance: what arrives on ``port`` goes out of ``toward`` (a matchall filter of preference 2)."""
    return ["tc", "filter", "add", "dev", port.device, "parent", "ffff:", "protocol", "all", "pref", "2",
            "matchall", "action", "mirred", "egress", "redirect", "dev", toward.device]


def blocked_command(port: Port, blocked: bool, drained: Optional[Port] = None) -> list[str]:
    """Inside the appliance: what arrives on ``port`` dropped (a matchall filter of preference 1, ahead of the
    redirect), then, given ``drained``, a wait (at most 5 s) until that port's egress has sent what its qdiscs
    still held; or, unblocked, that filter removed (if there). The appliance must never send to a tap that is
    down: its vector driver stalls for good on such a write (seen once in three bring-ups), so a link end's tap
    goes down only after nothing more goes to it, and the drop is lifted only once it is up again."""
    if not blocked:
        return ["sh", "-c", f"tc filter del dev {port.device} parent ffff: protocol all pref 1 2>/dev/null; true"]
    script = (f"tc filter replace dev {port.device} parent ffff: protocol all pref 1 matchall action drop")
    if drained is not None:
        script += (f" && for i in $(seq 100); do tc -s qdisc show dev {drained.device} | "
                   f"grep -q 'backlog [1-9]' || break; sleep 0.05; done")
    return ["sh", "-c", script]


def join_commands(record: ApplianceRecord) -> list[list[str]]:
    """Inside the appliance: the two ports of each link joined both ways (ingress, matchall, mirred)."""
    by_link: dict[int, list[Port]] = {}
    for p in record.ports:
        by_link.setdefault(p.link, []).append(p)
    commands = []
    for link, ports in sorted(by_link.items()):
        if len(ports) != 2:
            raise ApplianceError(f"link {link} has {len(ports)} ports in the appliance, not 2")
        for here, there in (ports, ports[::-1]):
            commands.append(["tc", "qdisc", "add", "dev", here.device, "handle", "ffff:", "ingress"])
            commands.append(redirect_command(here, there))
    return commands


def start(record: ApplianceRecord) -> Appliance:
    """Boot the appliance of ``record``, join its ports and move their taps into the nodes' namespaces (whose
    veth ends of these links must be gone); the running appliance. Stops it again on failure."""
    from testbed import proc

    appliance = Appliance(record)
    try:
        appliance.boot()
        appliance.run_batch(join_commands(record))
        for argv, input_text in host_commands(record):
            proc.run(argv, input_text=input_text)
    except BaseException:
        stop(record)
        raise
    return appliance
