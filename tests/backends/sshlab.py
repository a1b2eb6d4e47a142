"""A small lab of "real machines" that the testbed did not create, reachable only over SSH.

It is the test fixture of the ``ssh`` backend: four hosts ``r1``..``r4`` cabled as
``topologies/diamond.yaml`` (r1:eth1-r2:eth1, r2:eth2-r4:eth1, r1:eth2-r3:eth1,
r3:eth2-r4:eth2), each a network namespace with

* data interfaces (veth pairs) that are up and carry addresses of the machine's own
  (``172.31.<link>.<1|2>/24``, as a lab admin would have set them), loopback up;
* a management interface ``mgmt0``: a veth to the root namespace with a /30 of
  ``198.18.0.0/15`` (never the testbed's ``100.100.0.0/16``); there is no route between hosts;
* its own sshd on the management address, port 22, started in a private mount namespace
  where ``/var/lib/testbed``, ``/tmp`` and the user's home are fresh tmpfs mounts: what is
  written on a host is seen neither by the controller nor by the other hosts;
* an unprivileged user (``tbfix<tag>``) who logs in with an ed25519 key made here and has
  passwordless sudo (``/etc/sudoers.d/sshlab-<tag>``).

Names carry a tag of six hex digits, unique per fixture instance: namespaces
``sshfx<tag>-r1``, root-side management interfaces ``sfx<tag><i>``, user ``tbfix<tag>``,
sudoers file ``sshlab-<tag>``, folder ``/run/sshlab/<tag>`` (keys, configs, inventories,
and ``owner.json`` naming the process that owns them). None of them looks like the testbed's
own (``tbed-``, ``tbm``, ``/run/testbed``), so its cleaner never touches them, and
:func:`release_leftover_fixtures` removes those of dead test processes.

Per host, :class:`HostVariant` makes the host bad in one way, for the backend's bad-input tests:
no sudo, an old python3, a missing tool, a data interface down, a qdisc set by the admin.

sshd runs with ``UsePAM no`` (it then checks accounts itself; the user's password is ``*``:
none, yet not locked) and curve25519 key exchange only (the post-quantum default costs a third
of a second of CPU per connection on a small machine); sudo goes through PAM as Debian sets it
up (``use_pty``, ``secure_path``). ``UsePAM yes`` works too on a machine without systemd, but
where systemd runs, pam_systemd would start a ``systemd --user`` outside the lab's namespaces.

Limits: the hosts share the controller's kernel, /usr, /etc and /run (only /tmp,
/var/lib/testbed and the home are private), so "installing" anything on a host installs it
everywhere; the hostname is the controller's; sudo's timestamp and the user's account are shared.
"""
from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Optional, Sequence, Union

import pytest
import yaml

HOSTS = ("r1", "r2", "r3", "r4")
#: the data cabling of topologies/diamond.yaml: (host, interface, host, interface) per link
LINKS = (("r1", "eth1", "r2", "eth1"), ("r2", "eth2", "r4", "eth1"),
         ("r1", "eth2", "r3", "eth1"), ("r3", "eth2", "r4", "eth2"))

ROOT = Path("/run/sshlab")
NS_PREFIX = "sshfx"
VETH_PREFIX = "sfx"
USER_PREFIX = "tbfix"
SUDOERS_DIR = Path("/etc/sudoers.d")
SUDOERS_PREFIX = "sshlab-"
MGMT_RANGE = ipaddress.IPv4Network("198.18.0.0/15")
MGMT_IFNAME = "mgmt0"
#: folders that are a fresh tmpfs on every host (the user's home is one too)
PRIVATE_DIRS = {"/var/lib/testbed": "0755", "/tmp": "1777"}
#: where a missing tool is hidden: sudo's secure_path and a login shell's PATH
TOOL_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/games")
SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
BUILD_TIMEOUT_S = 10.0

_TAG_COUNTER = itertools.count()
_TAG_RE = "[0-9a-f]{6}"


class SshLabError(RuntimeError):
    """The fixture could not build or remove its lab (the message says what failed)."""


# --- what a test asks for --------------------------------------------------------------

Names = Union[str, Sequence[str], None]


def _names(value: Names) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True)
class HostVariant:
    """How one host differs from a good lab machine.

    ``no_sudo``: sudo refuses the user on this host ("a password is required"): an empty folder is
    bind-mounted over ``/etc/sudoers.d`` in the host's mount namespace; the user still logs in.

    ``python_version`` (``"3.8.10"``): the target of ``/usr/bin/python3`` is, in the host's mount
    namespace, a launcher that parses the command line as CPython does, answers ``-V``/``-VV``/
    ``--version`` itself, and runs ``-c``, ``-m``, a script or stdin in the real interpreter after
    setting ``sys.version_info``, ``sys.version`` (so ``platform.python_version()``),
    ``sys.hexversion`` and ``sys.implementation.version``; Ansible's facts say 3.8.10 too. Limits:
    the language and standard library are still the real ones (3.11 syntax runs); ``sysconfig``,
    ``sys.implementation.cache_tag``, C extensions and the ``python3.11`` name tell the truth;
    tracebacks show a runpy frame; ``-i`` with a script is not emulated.

    ``missing_tool`` (a name or several): the tool does not exist on this host, for the user and
    under sudo's ``secure_path`` alike: each PATH folder holding it is covered by a read-only overlay
    with a whiteout for it (``command -v``, ``ls`` and exec all fail). Those folders are read-only there.

    ``interface_down`` (a name or several): the data interface is down (its peer then has no carrier).

    ``qdisc``: ``{interface: "pfifo limit 500"}``, a root qdisc the admin set (``tc qdisc replace``).
    """

    no_sudo: bool = False
    python_version: Optional[str] = None
    missing_tool: Names = None
    interface_down: Names = None
    qdisc: Mapping[str, str] = field(default_factory=dict)

    @property
    def missing_tools(self) -> tuple[str, ...]:
        return _names(self.missing_tool)

    @property
    def interfaces_down(self) -> tuple[str, ...]:
        return _names(self.interface_down)


class HostProcess(NamedTuple):
    """A process living in a host's network namespace."""

    pid: int
    cmdline: str


@dataclass(frozen=True)
class LabHost:
    """One lab machine as the fixture built it."""

    name: str
    netns: str
    mgmt_ip: str  # the host's end of its management /30 (``ansible_host``)
    root_ifname: str  # root-namespace end of its management veth
    root_ip: str  # the controller's end of the /30
    data: Mapping[str, str]  # data interface -> the admin's address (CIDR)


# --- small helpers ----------------------------------------------------------------------

def _run(argv: Sequence[str], *, check: bool = True, timeout: float = 30.0,
         input_text: Optional[str] = None) -> subprocess.CompletedProcess[str]:
    """Run a command; raise :class:`SshLabError` with its message if ``check`` and it fails."""
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                            input=input_text, stdin=None if input_text is not None else subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise SshLabError(f"`{shlex.join(argv)}` failed (exit {result.returncode}): "
                          f"{(result.stderr or result.stdout).strip() or 'no output'}")
    return result


def _run_account_tool(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """useradd/userdel, tried again while another process holds the lock of /etc/passwd or /etc/group."""
    deadline = time.monotonic() + 10
    while True:
        result = _run(argv, check=False)
        if "lock" not in result.stderr or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if check and result.returncode != 0:
        raise SshLabError(f"`{shlex.join(argv)}` failed (exit {result.returncode}): {result.stderr.strip()}")
    return result


def _keygen(path: Path, comment: str) -> None:
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


def _start_ticks(pid: int) -> Optional[int]:
    """A process's start time in clock ticks since boot (None if there is no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _netns_inode(name: str) -> Optional[int]:
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except FileNotFoundError:
        return None


def _pids(match: Callable[[Path], bool]) -> list[int]:
    """PIDs (other than ours) of the live processes for which ``match(/proc/PID)`` holds (zombies,
    which nothing can kill and which wait for their parent, are left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if match(entry) and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def _pids_in_netns(inodes: set[int]) -> list[int]:
    return _pids(lambda p: os.stat(p / "ns" / "net").st_ino in inodes)


def _pids_of_uid(uid: int) -> list[int]:
    return _pids(lambda p: os.stat(p).st_uid == uid)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _kill_all(find: Callable[[], list[int]], grace_s: float = 1.0) -> None:
    """SIGTERM what ``find`` returns, then SIGKILL what is still there, until nothing is."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in find():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while find() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not find():
            return


def _user_uid(user: str) -> Optional[int]:
    import pwd

    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


@contextmanager
def _root_lock() -> Iterator[None]:
    """Serialises management-address choice between fixtures of every process."""
    ROOT.mkdir(mode=0o755, parents=True, exist_ok=True)
    with open(ROOT / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Addresses and routes of the root namespace that fall in :data:`MGMT_RANGE`."""
    used: list[ipaddress.IPv4Network] = []
    for link in json.loads(_run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]"):
        for a in link.get("addr_info", []):
            used.append(ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network)
    for route in json.loads(_run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]"):
        dst = route.get("dst", "default")
        if dst != "default":
            try:
                used.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
            except ValueError:
                continue
    return [n for n in used if n.overlaps(MGMT_RANGE)]


def free_subnets(count: int, used: Sequence[ipaddress.IPv4Network]) -> list[ipaddress.IPv4Network]:
    """The first ``count`` /30s of :data:`MGMT_RANGE` that overlap nothing in ``used``."""
    candidates = (s for s in MGMT_RANGE.subnets(new_prefix=30) if not any(s.overlaps(u) for u in used))
    free = list(itertools.islice(candidates, count))
    if len(free) < count:
        raise SshLabError(f"no {count} free /30s left in {MGMT_RANGE}")
    return free


# --- names of one fixture instance -----------------------------------------------------

def data_addresses(host: str) -> dict[str, str]:
    """``{interface: CIDR}``: the addresses the lab's admin gave ``host``'s data interfaces
    (``172.31.<link number>.<1 for the link's first end, 2 for its second>/24``)."""
    found = {}
    for number, (a, a_if, b, b_if) in enumerate(LINKS, start=1):
        found.update({ifname: f"172.31.{number}.{last}/24"
                      for end, ifname, last in ((a, a_if, 1), (b, b_if, 2)) if end == host})
    return found


def netns_name(tag: str, host: str) -> str:
    return f"{NS_PREFIX}{tag}-{host}"


def veth_name(tag: str, index: int) -> str:
    return f"{VETH_PREFIX}{tag}{index}"


def user_name(tag: str) -> str:
    return f"{USER_PREFIX}{tag}"


def sudoers_path(tag: str) -> Path:
    return SUDOERS_DIR / f"{SUDOERS_PREFIX}{tag}"


def _claim_tag() -> tuple[str, Path]:
    """A fresh tag and its folder, created atomically (first thing made, last removed)."""
    ROOT.mkdir(mode=0o755, parents=True, exist_ok=True)
    os.chmod(ROOT, 0o755)
    for _ in range(1000):
        seed = f"{os.getpid()}-{next(_TAG_COUNTER)}-{time.time_ns()}"
        tag = hashlib.sha1(seed.encode()).hexdigest()[:6]
        folder = ROOT / tag
        taken = (_netns_inode(netns_name(tag, HOSTS[0])) is not None or _user_uid(user_name(tag)) is not None)
        if taken:
            continue
        try:
            folder.mkdir(mode=0o755)
        except FileExistsError:
            continue
        owner = {"pid": os.getpid(), "start_ticks": _start_ticks(os.getpid())}
        (folder / "owner.json").write_text(json.dumps(owner) + "\n")
        return tag, folder
    raise SshLabError(f"could not find a free fixture tag under {ROOT}")


# --- the fake python --------------------------------------------------------------------

#: Runs inside the real interpreter (as its ``-c`` program): says the fake version, then runs what
#: the original command line asked for (``-c``, ``-m``, a script, or stdin) as CPython would.
_FAKE_RUNNER = r'''
def _fake_python(version, long_version):
    import collections, os, sys
    info = collections.namedtuple("version_info", "major minor micro releaselevel serial")(*version, "final", 0)
    type(info).__repr__ = lambda self: ("sys.version_info(major=%d, minor=%d, micro=%d, releaselevel=%r, "
                                        "serial=%d)" % tuple(self))
    sys.version_info = info
    sys.version = long_version
    sys.hexversion = (version[0] << 24) | (version[1] << 16) | (version[2] << 8) | 0xF0
    sys.implementation.version = info
    main = sys.modules["__main__"].__dict__
    main.pop("_fake_python", None)
    safe_path = getattr(sys.flags, "safe_path", sys.flags.isolated)  # no script folder in sys.path
    mode, target, *args = sys.argv[1:]
    if mode == "-c":
        sys.argv = ["-c", *args]
        exec(compile(target, "<string>", "exec"), main)
    elif mode == "-m":
        import runpy
        sys.argv = ["-m", *args]
        if not safe_path:
            sys.path[0] = os.getcwd()
        runpy._run_module_as_main(target)
    elif mode == "file":
        import runpy
        sys.argv = [target, *args]
        if not safe_path:
            sys.path[0] = os.path.dirname(os.path.realpath(target))
        runpy.run_path(target, run_name="__main__")
    else:
        sys.argv = [target, *args]
        if sys.stdin.isatty():
            import code
            code.interact(banner="Python " + long_version, exitmsg="")
        else:
            exec(compile(sys.stdin.read(), "<stdin>", "exec"), main)
'''

#: ``/usr/bin/python3`` of a host with ``python_version``: parses the command line like CPython,
#: answers -V/--version itself, and runs everything else through the real interpreter and the runner.
_FAKE_LAUNCHER = r'''#!{real} -IS
"""Python {version} as far as version queries go: a stand-in made by the test fixture
tests/backends/sshlab.py. It runs the real interpreter ({real}) with sys.version_info,
sys.version and sys.hexversion patched; -V, -VV and --version answer {version}."""
import os
import sys

REAL = {real!r}
SHORT = "Python {version}"
LONG = {long!r}
RUNNER = {runner!r}


def parse(argv):
    """(interpreter options, mode, target, arguments) of a python3 command line, or None."""
    opts = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--version":
            return opts, "version", "V", []
        if arg == "--":
            i += 1
            break
        if arg == "-" or not arg.startswith("-"):
            break
        if arg.startswith("--"):
            opts.append(arg)
            i += 1
            continue
        j = 1
        while j < len(arg):
            flag = arg[j]
            if flag == "V":
                return opts, "version", arg[j:], []
            if flag in "cm":
                value = arg[j + 1:]
                if value:
                    return opts, "-" + flag, value, argv[i + 1:]
                if i + 1 >= len(argv):
                    return None
                return opts, "-" + flag, argv[i + 1], argv[i + 2:]
            if flag in "WX":
                value = arg[j + 1:]
                if not value:
                    i += 1
                    if i >= len(argv):
                        return None
                    value = argv[i]
                opts += ["-" + flag, value]
                break
            if flag in "h?":
                return None
            opts.append("-" + flag)
            j += 1
        i += 1
    if i >= len(argv):
        return opts, "stdin", "", []
    if argv[i] == "-":
        return opts, "stdin", "-", argv[i + 1:]
    return opts, "file", argv[i], argv[i + 1:]


parsed = parse(sys.argv[1:])
if parsed is None:
    os.execv(REAL, [sys.argv[0], *sys.argv[1:]])
opts, mode, target, args = parsed
if mode == "version":
    print(LONG.replace("\n", "") if target.startswith("VV") else SHORT)
    sys.exit(0)
code = RUNNER + "\n_fake_python(" + repr(tuple({numbers!r})) + ", " + repr(LONG) + ")\n"
os.execv(REAL, [sys.argv[0], *opts, "-c", code, mode, target, *args])
'''


def fake_python_source(real: str, version: str) -> str:
    """The launcher that stands in for python3 ``version`` (``"X.Y.Z"``), running ``real`` underneath."""
    numbers = tuple(int(n) for n in version.split("."))
    if len(numbers) != 3:
        raise ValueError(f"python_version must be X.Y.Z, not {version!r}")
    long = f"{version} (default, Nov 22 2023, 10:22:35) \n[GCC 9.4.0]"
    return (_FAKE_LAUNCHER.replace("{real!r}", repr(real)).replace("{real}", real)
            .replace("{version}", version).replace("{long!r}", repr(long))
            .replace("{runner!r}", repr(_FAKE_RUNNER)).replace("{numbers!r}", repr(numbers)))


# --- sshd ----------------------------------------------------------------------------------

_SSHD_CONFIG = """\
# sshd of lab machine {host} (test fixture sshlab {tag}); Debian's defaults otherwise
ListenAddress {ip}
Port 22
HostKey {host_key}
PidFile {pidfile}
AuthorizedKeysFile {keys_dir}/%u
PermitRootLogin no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes yes
UseDNS no
# curve25519 only: the post-quantum exchange costs a third of a second of CPU per connection here
KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org
PrintMotd no
PrintLastLog no
AcceptEnv LANG LC_*
Subsystem sftp {sftp}
"""


# --- the lab -------------------------------------------------------------------------------

class SshLab:
    """Four lab machines reachable over SSH; ``build()`` (or ``with``) makes them, ``close()`` removes all.

    After ``build()``: ``hosts`` (name -> :class:`LabHost`), ``user``, ``private_key``,
    ``known_hosts``, ``inventory_ini`` and ``inventory_yaml`` (the default inventories).
    """

    def __init__(self, variants: Optional[Mapping[str, Union[HostVariant, Mapping[str, Any]]]] = None) -> None:
        unknown = set(variants or {}) - set(HOSTS)
        if unknown:
            raise ValueError(f"no such host(s) in the lab: {sorted(unknown)} (hosts: {', '.join(HOSTS)})")
        self.variants: dict[str, HostVariant] = {
            h: v if isinstance(v, HostVariant) else HostVariant(**v) for h, v in (variants or {}).items()}
        self.tag = ""
        self.dir = Path()
        self.hosts: dict[str, LabHost] = {}
        self._sshd: dict[str, subprocess.Popen] = {}
        self._spare_keys = itertools.count()

    # -- names and paths --

    @property
    def user(self) -> str:
        return user_name(self.tag)

    @property
    def private_key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def inventory_ini(self) -> Path:
        return self.dir / "inventory.ini"

    @property
    def inventory_yaml(self) -> Path:
        return self.dir / "inventory.yaml"

    def variant(self, host: str) -> HostVariant:
        return self.variants.get(host, HostVariant())

    def _host_dir(self, host: str) -> Path:
        return self.dir / host

    @property
    def _home(self) -> Path:
        return self.dir / "home"

    @property
    def _keys_dir(self) -> Path:
        return self.dir / "authorized_keys"

    # -- building --

    def __enter__(self) -> "SshLab":
        return self.build()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def build(self) -> "SshLab":
        """Make everything; on any failure, remove what was made and raise."""
        self.tag, self.dir = _claim_tag()
        try:
            self._make_keys()
            self._make_user()
            self._make_namespaces()
            self._make_data_links()
            self._make_management()
            self._write_known_hosts()
            self._apply_interface_variants()
            self._start_sshds()
            self._wait_for_sshds()
            self._wait_for_settled_links()
            self.write_inventory(self.inventory_ini, "ini")
            self.write_inventory(self.inventory_yaml, "yaml")
        except BaseException:
            self.close()
            raise
        return self

    def _make_keys(self) -> None:
        """The user's key pair, and a host key per host."""
        _keygen(self.private_key, f"{self.user}@controller")
        self._keys_dir.mkdir(mode=0o755)
        for host in HOSTS:
            self._host_dir(host).mkdir(mode=0o755)
            _keygen(self._host_key(host), f"root@{host}")

    def _host_key(self, host: str) -> Path:
        return self._host_dir(host) / "ssh_host_ed25519_key"

    def _write_known_hosts(self) -> None:
        """``known_hosts`` with every host's key under its management address."""
        lines = []
        for host in HOSTS:
            kind, key = Path(f"{self._host_key(host)}.pub").read_text().split()[:2]
            lines.append(f"{self.hosts[host].mgmt_ip} {kind} {key}")
        self.known_hosts.write_text("\n".join(lines) + "\n")

    def _make_user(self) -> None:
        """The lab's login user (password '*': no password, yet not locked) and its sudoers file."""
        _run_account_tool(["useradd", "--create-home", "--home-dir", str(self._home), "--shell", "/bin/bash",
                           "--password", "*", "--comment", f"testbed ssh lab fixture {self.tag}", self.user])
        key = Path(f"{self.private_key}.pub").read_text()
        (self._keys_dir / self.user).write_text(key)
        os.chmod(self._keys_dir / self.user, 0o644)
        draft = self.dir / "sudoers"
        draft.write_text(f"# test fixture sshlab {self.tag}\n{self.user} ALL=(ALL:ALL) NOPASSWD: ALL\n")
        os.chmod(draft, 0o440)
        _run(["visudo", "-cf", str(draft)])
        shutil.move(str(draft), sudoers_path(self.tag))
        (self.dir / "no-sudoers.d").mkdir(mode=0o755)

    def _make_namespaces(self) -> None:
        """A namespace per host, loopback up; its interfaces skip IPv6 duplicate address detection,
        so their link-local addresses are final at once (as on a machine that has been up for long)."""
        for host in HOSTS:
            ns = netns_name(self.tag, host)
            _run(["ip", "netns", "add", ns])
            _run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.accept_dad=0",
                  "net.ipv6.conf.default.accept_dad=0"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def _make_data_links(self) -> None:
        """The diamond's veth pairs, each end up with the admin's address."""
        for a, a_if, b, b_if in LINKS:
            _run(["ip", "link", "add", "name", a_if, "netns", netns_name(self.tag, a), "type", "veth",
                  "peer", "name", b_if, "netns", netns_name(self.tag, b)])
            for host, ifname in ((a, a_if), (b, b_if)):
                ns = netns_name(self.tag, host)
                _run(["ip", "-n", ns, "addr", "add", data_addresses(host)[ifname], "dev", ifname])
                _run(["ip", "-n", ns, "link", "set", ifname, "up"])

    def _make_management(self) -> None:
        """A management veth per host with a free /30 (chosen and taken under a lock shared by all fixtures)."""
        with _root_lock():
            subnets = free_subnets(len(HOSTS), _used_networks())
            for index, (host, subnet) in enumerate(zip(HOSTS, subnets)):
                self.hosts[host] = self._add_management(index, host, subnet)

    def _add_management(self, index: int, host: str, subnet: ipaddress.IPv4Network) -> LabHost:
        """Host end ``mgmt0`` with the /30's second address, root end ``sfx<tag><index>`` with its first."""
        ns, root_if = netns_name(self.tag, host), veth_name(self.tag, index)
        root_ip, host_ip = (str(a) for a in list(subnet.hosts())[:2])
        _run(["ip", "link", "add", "name", root_if, "type", "veth", "peer", "name", MGMT_IFNAME, "netns", ns])
        # IPv4 only: no link-local IPv6 path between a host and the controller
        _run(["sysctl", "-q", "-w", f"net.ipv6.conf.{root_if}.disable_ipv6=1"])
        _run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"net.ipv6.conf.{MGMT_IFNAME}.disable_ipv6=1"])
        for prefix, ifname, address in ((["ip"], root_if, root_ip), (["ip", "-n", ns], MGMT_IFNAME, host_ip)):
            _run([*prefix, "addr", "add", f"{address}/30", "dev", ifname])
            _run([*prefix, "link", "set", ifname, "up"])
        return LabHost(host, ns, host_ip, root_if, root_ip, data_addresses(host))

    def _apply_interface_variants(self) -> None:
        for host, variant in self.variants.items():
            ns = netns_name(self.tag, host)
            for ifname in variant.interfaces_down:
                _run(["ip", "-n", ns, "link", "set", ifname, "down"])
            for ifname, spec in variant.qdisc.items():
                _run(["tc", "-n", ns, "qdisc", "replace", "dev", ifname, "root", *shlex.split(spec)])

    def _start_sshds(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
        for folder in PRIVATE_DIRS:
            Path(folder).mkdir(parents=True, exist_ok=True)  # mount points (never removed: shared)
        for host in HOSTS:
            config = self._host_dir(host) / "sshd_config"
            config.write_text(_SSHD_CONFIG.format(
                host=host, tag=self.tag, ip=self.hosts[host].mgmt_ip,
                host_key=self._host_key(host), pidfile=self._host_dir(host) / "sshd.pid",
                keys_dir=self._keys_dir, sftp=SFTP_SERVER if os.path.exists(SFTP_SERVER) else "internal-sftp"))
            script = " && ".join([*self._mount_commands(host),
                                  shlex.join(["exec", SSHD, "-D", "-f", str(config),
                                              "-E", str(self._host_dir(host) / "sshd.log")])])
            argv = ["ip", "netns", "exec", netns_name(self.tag, host),
                    "unshare", "--mount", "--propagation", "private", "sh", "-c", script]
            with open(self._host_dir(host) / "start.log", "w") as log:
                self._sshd[host] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                                    start_new_session=True)

    def _mount_commands(self, host: str) -> list[str]:
        """Shell commands run in the host's private mount namespace before its sshd starts."""
        home = str(self._home)
        commands = [shlex.join(["mount", "-t", "tmpfs", "-o", f"mode={mode}", "tmpfs", folder])
                    for folder, mode in PRIVATE_DIRS.items()]
        commands += [shlex.join(["mount", "-t", "tmpfs", "-o", "mode=0700", "tmpfs", home]),
                     shlex.join(["cp", "-a", "/etc/skel/.", home]),
                     shlex.join(["chown", "-R", f"{self.user}:{self.user}", home])]
        variant = self.variant(host)
        if variant.no_sudo:
            commands.append(shlex.join(["mount", "--bind", str(self.dir / "no-sudoers.d"), str(SUDOERS_DIR)]))
        for index, folder in enumerate(self._tool_folders(variant.missing_tools)):
            commands.append(self._hide_tools_command(host, index, folder, variant.missing_tools))
        if variant.python_version:  # after the overlays, which would hide its bind mount
            commands += self._fake_python_commands(host, variant.python_version)
        return commands

    def _fake_python_commands(self, host: str, version: str) -> list[str]:
        """Bind the real interpreter aside, and the launcher over it (the target of /usr/bin/python3)."""
        real_path = os.path.realpath("/usr/bin/python3")
        aside = self._host_dir(host) / "python3-real"
        launcher = self._host_dir(host) / "python3-fake"
        aside.touch()
        launcher.write_text(fake_python_source(str(aside), version))
        os.chmod(launcher, 0o755)
        return [shlex.join(["mount", "--bind", real_path, str(aside)]),
                shlex.join(["mount", "--bind", str(launcher), real_path])]

    @staticmethod
    def _tool_folders(tools: Sequence[str]) -> list[str]:
        """The real folders of the PATHs that hold any of ``tools``."""
        folders = {os.path.realpath(d) for d in TOOL_DIRS
                   for tool in tools if os.path.lexists(os.path.join(d, tool))}
        return sorted(folders)

    def _hide_tools_command(self, host: str, index: int, folder: str, tools: Sequence[str]) -> str:
        """An overlay of ``folder`` with a whiteout (a 0:0 character device) for each of ``tools``."""
        whiteouts = self._host_dir(host) / f"whiteout{index}"
        whiteouts.mkdir(mode=0o755)
        for tool in tools:
            if os.path.lexists(os.path.join(folder, tool)):
                os.mknod(whiteouts / tool, 0o600 | stat.S_IFCHR, os.makedev(0, 0))
        return shlex.join(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={whiteouts}:{folder}", folder])

    def _wait_for_sshds(self) -> None:
        deadline = time.monotonic() + BUILD_TIMEOUT_S
        for host, server in self._sshd.items():
            while not _answers_ssh(self.hosts[host].mgmt_ip):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SshLabError(f"sshd of {host} is not accepting connections: {self._sshd_log(host)}")
                time.sleep(0.01)

    def _wait_for_settled_links(self) -> None:
        """Wait until the kernel is done with the data interfaces (carrier, IPv6 link-local addresses),
        so that snapshots taken from now on change only when someone changes the lab."""
        deadline = time.monotonic() + BUILD_TIMEOUT_S
        while not all(self._settled(host) for host in HOSTS):
            if time.monotonic() > deadline:
                raise SshLabError("the data interfaces did not settle (carrier, IPv6 link-local addresses)")
            time.sleep(0.02)

    def _settled(self, host: str) -> bool:
        links = json.loads(_run(["ip", "-n", self.hosts[host].netns, "-j", "addr", "show"]).stdout or "[]")
        for link in links:
            if link["ifname"] not in self.hosts[host].data:
                continue
            addresses = link.get("addr_info", [])
            if any(a.get("tentative") for a in addresses):
                return False
            if self._has_carrier(host, link["ifname"]) and (
                    link["operstate"] != "UP" or not any(a["family"] == "inet6" for a in addresses)):
                return False
        return True

    def _has_carrier(self, host: str, ifname: str) -> bool:
        """True if both ends of the data link at ``host``:``ifname`` are meant to be up."""
        for a, a_if, b, b_if in LINKS:
            if (host, ifname) in ((a, a_if), (b, b_if)):
                return a_if not in self.variant(a).interfaces_down and b_if not in self.variant(b).interfaces_down
        raise KeyError(f"{host} has no data interface {ifname}")

    def _sshd_log(self, host: str) -> str:
        texts = [(self._host_dir(host) / name).read_text(errors="replace").strip()
                 for name in ("start.log", "sshd.log") if (self._host_dir(host) / name).exists()]
        return " | ".join(t for t in texts if t)[-1000:] or "no log"

    # -- inventories --

    def inventory_vars(self, host: str) -> dict[str, Any]:
        """The Ansible variables that reach ``host``, as an Ansible user writes them."""
        return {"ansible_host": self.hosts[host].mgmt_ip, "ansible_user": self.user,
                "ansible_ssh_private_key_file": str(self.private_key), "ansible_become": True,
                "ansible_python_interpreter": "/usr/bin/python3",
                "ansible_ssh_common_args": f"-o UserKnownHostsFile={self.known_hosts}"}

    def write_inventory(self, path: Union[str, Path], fmt: str = "ini",
                        overrides: Optional[Mapping[str, Mapping[str, Any]]] = None,
                        extra_hosts: Optional[Mapping[str, Mapping[str, Any]]] = None,
                        group: Optional[str] = "lab") -> Path:
        """An inventory of the lab's hosts (``fmt`` "ini" or "yaml") in group ``group`` (None: ungrouped).

        ``overrides`` changes variables per host (a value of None drops the variable);
        ``extra_hosts`` adds hosts with the variables given (e.g. an unreachable address).
        """
        unknown = set(overrides or {}) - set(HOSTS)
        if unknown:
            raise ValueError(f"overrides for hosts not in the lab: {sorted(unknown)}")
        hosts: dict[str, dict[str, Any]] = {}
        for host in HOSTS:
            merged = {**self.inventory_vars(host), **(overrides or {}).get(host, {})}
            hosts[host] = {k: v for k, v in merged.items() if v is not None}
        hosts.update({name: dict(variables) for name, variables in (extra_hosts or {}).items()})
        text = _inventory_ini(hosts, group) if fmt == "ini" else _inventory_yaml(hosts, group) if fmt == "yaml" else None
        if text is None:
            raise ValueError(f"inventory format must be 'ini' or 'yaml', not {fmt!r}")
        path = Path(path)
        path.write_text(f"# lab machines of test fixture sshlab {self.tag} (tests/backends/sshlab.py)\n{text}")
        return path

    def spare_key(self) -> Path:
        """A new ed25519 private key that no host accepts (for wrong-key tests)."""
        path = self.dir / f"spare_key{next(self._spare_keys)}"
        _keygen(path, "not-authorised")
        return path

    # -- looking at the lab from the test side --

    def ssh(self, host: str, command: str, *, user: Optional[str] = None, key: Optional[Path] = None,
            timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on ``host`` over SSH from the controller, host key checked."""
        argv = ["ssh", "-i", str(key or self.private_key), "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=5",
                f"{user or self.user}@{self.hosts[host].mgmt_ip}", command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def run(self, host: str, argv: Sequence[str], *, check: bool = False, timeout: float = 30.0,
            host_fs: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as root directly in ``host`` (not over SSH): in its network namespace and, with
        ``host_fs``, its mount namespace too (its own /tmp, /var/lib/testbed, variants), else the controller's."""
        if host_fs:
            server = self._sshd[host]
            if server.poll() is not None:
                raise SshLabError(f"the sshd of {host} has exited: its mount namespace is gone")
            full = ["nsenter", "-t", str(server.pid), "-m", "-n", "--wd=/", "--", *argv]
        else:
            full = ["ip", "netns", "exec", netns_name(self.tag, host), *argv]
        return _run(full, check=check, timeout=timeout)

    def snapshot(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{host: {interface: {"qdisc": tc -j qdisc show, "addr": ip -j addr show}}}`` of every data interface."""
        state: dict[str, dict[str, dict[str, Any]]] = {}
        for host, lab_host in self.hosts.items():
            state[host] = {}
            for ifname in lab_host.data:
                qdisc = _run(["tc", "-n", lab_host.netns, "-j", "qdisc", "show", "dev", ifname]).stdout
                addr = _run(["ip", "-n", lab_host.netns, "-j", "addr", "show", "dev", ifname]).stdout
                state[host][ifname] = {"qdisc": json.loads(qdisc or "[]"), "addr": json.loads(addr or "[]")}
        return state

    def processes(self, host: str) -> list[HostProcess]:
        """Processes in ``host``'s network namespace other than its listening sshd (live SSH sessions
        show as ``sshd: <user>...``)."""
        inode = _netns_inode(netns_name(self.tag, host))
        if inode is None:
            return []
        listener = self._sshd[host].pid if host in self._sshd else -1
        return [HostProcess(pid, _cmdline(pid)) for pid in sorted(_pids_in_netns({inode}))
                if pid != listener and _cmdline(pid)]

    # -- removing --

    def close(self) -> None:
        """Remove everything this lab made, whatever state it is in; raise at the end if something stays."""
        if not self.tag:
            return
        self._stop_sshds()
        problems = release_fixture(self.tag)
        if problems:
            raise SshLabError(f"sshlab {self.tag}: could not remove: {'; '.join(problems)}")

    def _stop_sshds(self) -> None:
        """Stop (and reap: they are our children) the listening sshds."""
        for server in self._sshd.values():
            if server.poll() is None:
                server.terminate()
        for server in self._sshd.values():
            try:
                server.wait(timeout=2)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=5)
        self._sshd = {}


def _answers_ssh(ip: str) -> bool:
    """True once something on ``ip``:22 sends an SSH banner."""
    try:
        with socket.create_connection((ip, 22), timeout=0.5) as conn:
            conn.settimeout(1.0)
            return conn.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def _inventory_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return shlex.quote(str(value))


def _inventory_ini(hosts: Mapping[str, Mapping[str, Any]], group: Optional[str]) -> str:
    lines = [f"[{group}]"] if group else []
    for host, variables in hosts.items():
        lines.append(" ".join([host, *(f"{k}={_inventory_value(v)}" for k, v in variables.items())]))
    return "\n".join(lines) + "\n"


def _inventory_yaml(hosts: Mapping[str, Mapping[str, Any]], group: Optional[str]) -> str:
    entries = {host: dict(variables) for host, variables in hosts.items()}
    tree = {"all": {"children": {group: {"hosts": entries}}}} if group else {"all": {"hosts": entries}}
    return yaml.safe_dump(tree, sort_keys=False, default_flow_style=False)


# --- removal, also of what dead test processes left ----------------------------------------

def release_fixture(tag: str) -> list[str]:
    """Remove every trace of fixture ``tag`` (processes, namespaces, veths, user, sudoers, folder).

    Returns what could not be removed, with the errors met (empty when all went, also when a
    concurrent release removed some of it first).
    """
    problems: list[str] = []
    namespaces = [netns_name(tag, h) for h in HOSTS]
    inodes = {i for i in (_netns_inode(n) for n in namespaces) if i is not None}
    uid = _user_uid(user_name(tag))
    _kill_all(lambda: _pids_in_netns(inodes) + (_pids_of_uid(uid) if uid is not None else []))
    for index in range(len(HOSTS)):
        if Path(f"/sys/class/net/{veth_name(tag, index)}").exists():
            _collect(problems, ["ip", "link", "del", veth_name(tag, index)])
    for name in namespaces:
        if _netns_inode(name) is not None:
            _collect(problems, ["ip", "netns", "del", name])
    if uid is not None:
        _collect(problems, ["userdel", "--force", "--remove", user_name(tag)], ok_codes=(0, 6, 12))
    sudoers_path(tag).unlink(missing_ok=True)
    shutil.rmtree(ROOT / tag, ignore_errors=True)
    left = _traces(tag)
    return [f"{what} still exists" for what in left] + problems if left else []


def _collect(problems: list[str], argv: Sequence[str], ok_codes: Sequence[int] = (0,)) -> None:
    """Run ``argv``; note its error in ``problems`` unless it exits with one of ``ok_codes``."""
    result = _run_account_tool(argv, check=False) if argv[0] == "userdel" else _run(argv, check=False)
    if result.returncode not in ok_codes:
        problems.append(f"`{shlex.join(argv)}`: {result.stderr.strip()}")


def _traces(tag: str) -> list[str]:
    """What of fixture ``tag`` exists on this machine."""
    found = [f"namespace {netns_name(tag, h)}" for h in HOSTS if _netns_inode(netns_name(tag, h)) is not None]
    found += [f"interface {veth_name(tag, i)}" for i in range(len(HOSTS))
              if Path(f"/sys/class/net/{veth_name(tag, i)}").exists()]
    if _user_uid(user_name(tag)) is not None:
        found.append(f"user {user_name(tag)}")
    if sudoers_path(tag).exists():
        found.append(f"sudoers file {sudoers_path(tag)}")
    if (ROOT / tag).exists():
        found.append(f"folder {ROOT / tag}")
    return found


def _owner_alive(tag: str, ours_too: bool = False) -> bool:
    """True if fixture ``tag``'s folder names a process that is still running (other than this
    one, with ``ours_too``)."""
    try:
        owner = json.loads((ROOT / tag / "owner.json").read_text())
    except (FileNotFoundError, ValueError):
        # no folder: its owner removed it last (or never made anything); a folder without its
        # record yet: being claimed right now
        return (ROOT / tag).is_dir() and time.time() - (ROOT / tag).stat().st_mtime < 10
    if ours_too and owner["pid"] == os.getpid():
        return False
    return _start_ticks(owner["pid"]) == owner["start_ticks"]


def fixture_tags() -> set[str]:
    """Tags of every fixture that has left anything on this machine (live or not)."""
    import pwd

    tags = {p.name for p in ROOT.iterdir() if re.fullmatch(_TAG_RE, p.name)} if ROOT.is_dir() else set()
    if Path("/run/netns").is_dir():
        tags |= {m.group(1) for n in os.listdir("/run/netns")
                 if (m := re.fullmatch(f"{NS_PREFIX}({_TAG_RE})-r\\d", n))}
    tags |= {m.group(1) for n in os.listdir("/sys/class/net") if (m := re.fullmatch(f"{VETH_PREFIX}({_TAG_RE})\\d", n))}
    tags |= {m.group(1) for u in pwd.getpwall() if (m := re.fullmatch(f"{USER_PREFIX}({_TAG_RE})", u.pw_name))}
    if SUDOERS_DIR.is_dir():
        tags |= {m.group(1) for n in os.listdir(SUDOERS_DIR) if (m := re.fullmatch(f"{SUDOERS_PREFIX}({_TAG_RE})", n))}
    return tags


def leftover_fixtures(ours_too: bool = False) -> list[str]:
    """What :func:`release_leftover_fixtures` would remove (a dry run)."""
    return [t for tag in sorted(fixture_tags()) if not _owner_alive(tag, ours_too) for t in _traces(tag)]


def release_leftover_fixtures(ours_too: bool = False) -> list[str]:
    """Remove what fixtures of dead test processes left behind; returns what was found.

    With ``ours_too``, also the fixtures of this process that were not closed (for a check at
    the end of a test session, when none may be open any more).
    """
    found = []
    for tag in sorted(fixture_tags()):
        if _owner_alive(tag, ours_too):
            continue
        found += _traces(tag)
        problems = release_fixture(tag)
        if problems:
            raise SshLabError(f"leftover sshlab {tag}: could not remove: {'; '.join(problems)}")
    return found


# --- pytest ---------------------------------------------------------------------------------

def missing_requirements() -> str:
    """Why the fixture cannot be built here ('' when it can)."""
    if os.geteuid() != 0:
        return "needs root: network namespaces, users, sudoers and mounts"
    needed = {SSHD: "openssh-server", "/usr/bin/ssh": "openssh-client", "/usr/bin/sudo": "sudo",
              "/usr/bin/unshare": "util-linux", "/usr/bin/nsenter": "util-linux", "/usr/sbin/useradd": "passwd"}
    missing = sorted({pkg for path, pkg in needed.items() if not os.path.exists(path)})
    return f"needs {', '.join(missing)} (apt-get install {' '.join(missing)}; scripts/setup.sh does)" if missing else ""


@pytest.fixture
def ssh_lab() -> Iterator[Callable[..., SshLab]]:
    """A factory of lab machines: ``ssh_lab(r3=HostVariant(no_sudo=True))`` builds an :class:`SshLab`;
    every lab built is removed after the test, even when it fails. Skips when the machine cannot."""
    why = missing_requirements()
    if why:
        pytest.skip(why)
    release_leftover_fixtures()
    labs: list[SshLab] = []

    def build(**variants: Union[HostVariant, Mapping[str, Any]]) -> SshLab:
        lab = SshLab(variants)
        labs.append(lab)
        return lab.build()

    yield build
    problems = []
    for lab in labs:
        try:
            lab.close()
        except SshLabError as exc:
            problems.append(str(exc))
    if problems:
        raise SshLabError("; ".join(problems))
