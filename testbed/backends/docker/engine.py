"""The Docker engine, driven with the Docker SDK for Python: a client, or one line saying how to get one.

The engine is the one at ``DOCKER_HOST`` (default: the local socket ``/var/run/docker.sock``).
When it cannot be reached, :func:`docker_client` looks at why — SDK missing, Docker not
installed, engine not running, socket not ours to use — and says what to do about it.
"""
from __future__ import annotations

import os
import shutil
import socket
from dataclasses import dataclass
from typing import Optional

DEFAULT_SOCKET = "/var/run/docker.sock"
SDK_REQUIREMENT = "docker>=7,<8"
#: How to start an engine; ./scripts/setup.sh starts it this way where none runs (see docs/docker-image.md).
START_FIX = ("start it: ./scripts/setup.sh does, or `nohup dockerd --bridge=none --iptables=false "
             "--ip6tables=false --ip-forward=false >/var/log/testbed-dockerd.log 2>&1 &`, "
             "or `systemctl start docker`")
INSTALL_FIX = "apt-get install docker.io, then start the engine (./scripts/setup.sh does both)"


class DockerUnavailable(RuntimeError):
    """No Docker engine can be used from here. ``str()`` is one line: the problem, then the fix."""

    def __init__(self, problem: str, fix: str):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}: {fix}")


@dataclass(frozen=True)
class EngineStatus:
    """For `testbed doctor`."""

    ok: bool
    detail: str
    fix: Optional[str] = None


def docker_client(timeout: float = 60.0):
    """A ``docker.DockerClient`` of the engine at ``DOCKER_HOST`` that answered a ping.

    ``timeout`` bounds each API call (seconds). Raises :class:`DockerUnavailable`.
    """
    try:
        import docker
        import requests
    except ImportError:
        raise DockerUnavailable("the Docker SDK for Python is not installed in this Python",
                                f"run ./scripts/setup.sh (or pip install '{SDK_REQUIREMENT}')") from None
    try:
        client = docker.DockerClient.from_env(timeout=timeout)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise _why_unreachable(exc) from exc
    return client


def engine_versions(client) -> dict[str, str]:
    """The engine's version, its API version and the SDK's version (for the run manifest)."""
    import docker

    version = client.version()
    return {"docker_engine": str(version.get("Version", "unknown")),
            "docker_api": str(version.get("ApiVersion", client.api.api_version)),
            "docker_sdk": docker.__version__}


def docker_status() -> EngineStatus:
    """Whether an engine answers here, with its versions, or what is wrong and the fix."""
    try:
        client = docker_client(timeout=10.0)
    except DockerUnavailable as exc:
        return EngineStatus(False, exc.problem, exc.fix)
    try:
        v = engine_versions(client)
    finally:
        client.close()
    return EngineStatus(True, f"engine {v['docker_engine']} (API {v['docker_api']}) at {engine_address()}, "
                              f"SDK {v['docker_sdk']}")


def engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"


def dockerd_path() -> Optional[str]:
    """Where the engine's program is installed (``/usr/sbin`` is not on every user's PATH)."""
    found = shutil.which("dockerd")
    if found:
        return found
    return next((p for p in ("/usr/sbin/dockerd", "/usr/bin/dockerd", "/usr/local/bin/dockerd")
                 if os.access(p, os.X_OK)), None)


def _why_unreachable(exc: BaseException) -> DockerUnavailable:
    address = engine_address()
    reason = _first_line(exc)
    if not address.startswith("unix://"):
        return DockerUnavailable(f"cannot reach the Docker engine at DOCKER_HOST={address} ({reason})",
                                 "check that it runs there, or unset DOCKER_HOST to use this machine's engine")
    if dockerd_path() is None:
        client_only = " (only its client is)" if shutil.which("docker") else ""
        return DockerUnavailable(f"Docker is not installed here{client_only}", INSTALL_FIX)
    path = address[len("unix://"):]
    via = " named by DOCKER_HOST" if "DOCKER_HOST" in os.environ else ""
    if not os.path.exists(path):
        return DockerUnavailable(f"the Docker engine is not running (no socket {path}{via})", START_FIX)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5.0)
            sock.connect(path)
    except PermissionError:
        return DockerUnavailable(f"no permission to use the Docker socket {path}",
                                 "run as root (the testbed needs root anyway) or join the docker group")
    except (ConnectionRefusedError, FileNotFoundError):
        return DockerUnavailable(f"the Docker engine is not running (socket {path}{via} refuses connections)",
                                 START_FIX)
    except OSError as err:
        return DockerUnavailable(f"cannot connect to the Docker socket {path} ({err})", START_FIX)
    return DockerUnavailable(f"the Docker engine at {path} does not answer ({reason})",
                             f"see its log (/var/log/testbed-dockerd.log if setup started it) or restart it; {START_FIX}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."
