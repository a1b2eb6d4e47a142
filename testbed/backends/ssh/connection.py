"""Direct SSH to a lab machine with paramiko, for the work where a playbook run is too heavy:
pre-flight checks, commands and files of a run, the clock exchange.

Host keys are checked against the inventory's ``UserKnownHostsFile`` (else
``~/.ssh/known_hosts``) and the system's file; an unknown or changed key refuses the
connection, unless checking was turned off explicitly (``--no-host-key-check``).
Commands that need root go through ``sudo -n`` when the login is not root.
One connection per machine is kept for the whole process and shared by its threads.
"""
from __future__ import annotations

import logging
import shlex
import socket
import threading
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

from testbed.backends.base import BackendError
from testbed.backends.ssh.inventory import InventoryHost
from testbed.proc import CommandError, Result

CONNECT_TIMEOUT_S = 10.0

# paramiko logs a failed connection with a traceback; the error we raise says it in one line
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class HostError(BackendError):
    """A lab machine cannot be reached or used; the message names it and says what to do."""


class _AcceptKey:  # a paramiko MissingHostKeyPolicy: checking was turned off on purpose
    def missing_host_key(self, client, hostname, key) -> None:
        return None


def connect(host: InventoryHost, *, check_host_keys: bool = True, timeout_s: float = CONNECT_TIMEOUT_S):
    """An open paramiko client to ``host`` (HostError with the fix when it cannot be had)."""
    import paramiko

    client = paramiko.SSHClient()
    where = f"{host.name} ({host.address}:{host.port})"
    if check_host_keys:
        for path in host.known_hosts_files:
            if Path(path).is_file():
                try:
                    client.load_host_keys(path) if path == host.known_hosts_files[0] \
                        else client.load_system_host_keys(path)
                except (OSError, paramiko.SSHException) as exc:
                    raise HostError(f"{where}: known hosts file {path} is unreadable: {exc}") from exc
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    else:
        client.set_missing_host_key_policy(_AcceptKey())
    key_hint = f"key {host.key_file}" if host.key_file else "its keys"
    try:
        client.connect(host.address, port=host.port, username=host.login, key_filename=host.key_file,
                       password=host.password, timeout=timeout_s, banner_timeout=timeout_s, auth_timeout=timeout_s,
                       allow_agent=host.key_file is None and host.password is None,
                       look_for_keys=host.key_file is None and host.password is None)
    except paramiko.BadHostKeyException as exc:
        raise HostError(f"{where}: its host key does not match the one in known_hosts ({exc}); if the machine was "
                        f"reinstalled, check its new fingerprint and replace the entry "
                        f"(`ssh-keygen -R {_known_name(host)}`)") from None
    except paramiko.AuthenticationException as exc:
        raise HostError(f"{where}: user {host.login} cannot log in with {key_hint} ({exc}); check ansible_user and "
                        f"ansible_ssh_private_key_file of {host.name} in the inventory (the public key must be in "
                        f"~{host.login}/.ssh/authorized_keys there)") from None
    except paramiko.SSHException as exc:
        if "not found in known_hosts" in str(exc):
            files = ", ".join(host.known_hosts_files) or "none"
            raise HostError(f"{where}: its host key is not known (looked in {files}): check its fingerprint and add "
                            f"it (`ssh-keyscan -p {host.port} {host.address} >> ~/.ssh/known_hosts`, or the file "
                            "the inventory's UserKnownHostsFile names), or pass --no-host-key-check "
                            "(recorded in the run's manifest)") from None
        if "protocol banner" in str(exc) or "No existing session" in str(exc):
            raise HostError(f"{where} does not answer as an SSH server ({exc}): check that the machine is up and "
                            f"sshd runs, and ansible_host/ansible_port of {host.name} in the inventory") from None
        raise HostError(f"{where}: SSH failed: {exc}") from None
    except (OSError, socket.timeout) as exc:
        raise HostError(f"{where} does not answer ({exc or type(exc).__name__}): check that the machine is up and "
                        f"sshd runs, and ansible_host/ansible_port of {host.name} in the inventory") from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(15)
    return client


def _known_name(host: InventoryHost) -> str:
    return host.address if host.port == 22 else f"[{host.address}]:{host.port}"


class SshHost:
    """Commands, byte streams and line channels on one lab machine, over one SSH connection."""

    def __init__(self, host: InventoryHost, *, check_host_keys: bool = True):
        self.host = host
        self.check_host_keys = check_host_keys
        self._client = None
        self._lock = threading.Lock()
        #: channels at once on the connection, below sshd's default MaxSessions (10)
        self._sessions = threading.BoundedSemaphore(8)

    @property
    def name(self) -> str:
        return self.host.name

    def client(self):
        with self._lock:
            transport = self._client.get_transport() if self._client is not None else None
            if transport is None or not transport.is_active():
                self._client = connect(self.host, check_host_keys=self.check_host_keys)
            return self._client

    def as_root(self, argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> str:
        """The command line that runs ``argv`` as root (with ``env``) on this machine."""
        envs = [f"{k}={v}" for k, v in (env or {}).items()]
        inner = (["env", *envs] if envs else []) + list(argv)
        if not self.host.needs_sudo:
            return shlex.join(inner)
        # passwordless sudo only (the pre-flight refuses a become password): nothing but the command's own
        # input ever goes to its stdin
        return shlex.join(["sudo", "-n", "-u", "root", "--", *inner])

    def run_bytes(self, command: str, *, input_bytes: Optional[bytes] = None, timeout: float = 60.0,
                  sink=None) -> tuple[int, bytes, bytes]:
        """Run a shell command line; returns (exit status, stdout, stderr). With ``sink`` (a binary file),
        stdout goes there instead (for large streams)."""
        import paramiko

        with self._sessions:  # sshd allows MaxSessions (10 by default) channels per connection
            try:
                channel = self.client().get_transport().open_session(timeout=CONNECT_TIMEOUT_S)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise CommandError([command], 255, f"on {self.name}: cannot open an SSH session: {exc}") from None
            return self._run_on(channel, command, input_bytes, timeout, sink)

    def _run_on(self, channel, command: str, input_bytes: Optional[bytes], timeout: float,
                sink) -> tuple[int, bytes, bytes]:
        import paramiko

        try:
            channel.settimeout(timeout)
            channel.exec_command(command)
            if input_bytes:
                channel.sendall(input_bytes)
            channel.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout
            while True:
                if channel.recv_ready():
                    chunk = channel.recv(65536)
                    if sink is not None:
                        sink.write(chunk)
                    else:
                        out += chunk
                    deadline = time.monotonic() + timeout  # the time-out is for silence, not for a long stream
                    continue
                if channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                    continue
                # the end: the command closed its output (EOF comes after all of it; the exit status
                # alone may come before the last of the output)
                if (channel.eof_received or channel.closed) and not channel.recv_ready() \
                        and not channel.recv_stderr_ready():
                    break
                if time.monotonic() > deadline:
                    raise CommandError([command], -1, f"on {self.name}: timed out after {timeout:g} s")
                time.sleep(0.002)
            # what arrived between the last read and the exit status
            while channel.recv_ready():
                chunk = channel.recv(65536)
                if sink is not None:
                    sink.write(chunk)
                else:
                    out += chunk
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
            return channel.recv_exit_status(), bytes(out), bytes(err)
        except socket.timeout:
            raise CommandError([command], -1, f"on {self.name}: timed out after {timeout:g} s") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise CommandError([command], 255, f"on {self.name}: the SSH connection failed: {exc}") from None
        finally:
            channel.close()

    def run(self, argv: Union[Sequence[str], str], *, root: bool = True, check: bool = True, timeout: float = 60.0,
            input_text: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> Result:
        """Run ``argv`` (or a shell command line) to completion, as root unless ``root`` is False."""
        if isinstance(argv, str):
            command = self.as_root(["sh", "-c", argv], env) if root else argv
            shown = [argv]
        else:
            command = self.as_root(argv, env) if root else shlex.join(list(argv))
            shown = list(argv)
        status, out, err = self.run_bytes(command, input_bytes=input_text.encode() if input_text is not None else None,
                                          timeout=timeout)
        result = Result(shown, status, out.decode(errors="replace"), _without_sudo_noise(err.decode(errors="replace")))
        if check and status != 0:
            raise CommandError([f"{self.name}:", *shown], status, result.stderr, result.stdout)
        return result

    def line_channel(self, command: str):
        """Start ``command`` (not as root) and talk to it line by line (testbed.clocksync.LineChannel)."""
        from testbed.clocksync import stream_channel

        channel = self.client().get_transport().open_session(timeout=CONNECT_TIMEOUT_S)
        channel.exec_command(command)
        return stream_channel(channel)

    def socket_line_channel(self, code: str, address: str, timeout_s: float = 5.0):
        """Start ``python -c code address`` on the machine (a one-connection TCP server that prints its port),
        connect to it directly and talk to it line by line: a path with fewer hops than the SSH channel
        (for the clock exchange). Raises OSError when it cannot be reached (a firewall, NAT)."""
        from testbed.clocksync import stream_channel

        channel = self.client().get_transport().open_session(timeout=CONNECT_TIMEOUT_S)
        channel.exec_command(shlex.join([self.host.python, "-c", code, address]))
        try:
            server = stream_channel(channel)
            try:
                port = int(server.read_line(timeout_s))
            except (TimeoutError, EOFError, ValueError) as exc:
                raise OSError(f"{self.name}: the clock server did not start: {exc}") from None
            sock = socket.create_connection((address, port), timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            channel.close()
            raise
        return _ClosingBoth(stream_channel(sock), channel)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


class _ClosingBoth:
    """A line channel that also closes the SSH channel of the server behind it."""

    def __init__(self, lines, server_channel):
        self.lines, self.server_channel = lines, server_channel

    def write_line(self, line: str) -> None:
        self.lines.write_line(line)

    def read_line(self, timeout: float) -> str:
        return self.lines.read_line(timeout)

    def close(self) -> None:
        self.lines.close()
        self.server_channel.close()


def _without_sudo_noise(stderr: str) -> str:
    """sudo's warning that the host name does not resolve is not the command's error."""
    return "\n".join(l for l in stderr.splitlines() if "unable to resolve host" not in l)


_POOL: dict[tuple, SshHost] = {}
_POOL_LOCK = threading.Lock()


def host_connection(host: InventoryHost, *, check_host_keys: bool = True) -> SshHost:
    """The one shared connection of this process to ``host``."""
    key = (host.name, host.address, host.port, host.login, check_host_keys)
    with _POOL_LOCK:
        conn = _POOL.get(key)
        if conn is None or conn.host != host:
            if conn is not None:  # the inventory changed what reaches the machine
                conn.close()
            conn = _POOL[key] = SshHost(host, check_host_keys=check_host_keys)
        return conn


def close_all() -> None:
    with _POOL_LOCK:
        for conn in _POOL.values():
            conn.close()
        _POOL.clear()
