"""`testbed doctor`: what this machine can do for the testbed, and how to get what is missing."""
from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
from dataclasses import asdict, dataclass
from typing import Callable, Optional

from testbed import kernel, proc


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: Optional[str] = None
    required: bool = False


def _tool(name: str, package: str, *, required: bool = False, version_args: tuple[str, ...] = ("--version",)) -> Check:
    path = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if not path:
        return Check(name, False, "not found", f"apt-get install -y {package}", required)
    result = proc.run([path, *version_args], check=False, timeout=20)
    text = (result.stdout or result.stderr).strip().splitlines()
    return Check(name, True, f"{path}: {text[0] if text else 'present'}", None, required)


def _qdisc_checks(caps: kernel.KernelCapabilities) -> list[Check]:
    uses = {
        "htb": "bandwidth",
        "tbf": "bandwidth (alternative)",
        "pfifo": "queue limit in packets",
        "bfifo": "queue limit in bytes",
        "netem": "delay, jitter, loss",
    }
    checks = []
    for kind, use in uses.items():
        ok = caps.has_qdisc(kind)
        detail = f"qdisc {kind} ({use}): " + ("works" if ok else caps.errors.get(kind, "missing"))
        fix = None if ok else (kernel.FEATURE_HINTS["delay"] if kind == "netem" else f"modprobe sch_{kind}")
        checks.append(Check(f"qdisc {kind}", ok, detail, fix, required=kind == "htb"))
    checks.append(Check(
        "iptables statistic", caps.iptables_statistic,
        "iptables -m statistic (loss without netem): " + ("works" if caps.iptables_statistic else
                                                          caps.errors.get("iptables_statistic", "missing")),
        None if caps.iptables_statistic else "apt-get install -y iptables && modprobe xt_statistic",
    ))
    return checks


def _mininet() -> Check:
    spec = importlib.util.find_spec("mininet")
    if spec is None:
        return Check("mininet", False, "Python module not importable by this Python",
                     "apt-get install -y mininet, then use the README's setup (a virtualenv that sees it)", True)
    if not shutil.which("mnexec"):
        return Check("mininet", False, "mnexec not found", "apt-get install -y mininet", True)
    return Check("mininet", True, f"module at {os.path.dirname(spec.origin or '')}", None, True)


def _docker() -> list[Check]:
    """The Docker backend: an engine that answers, and the node image of the current recipe."""
    from testbed.backends.docker.engine import docker_client, docker_status
    from testbed.backends.docker.image import ImageError, default_image_ref, find_image

    engine = docker_status()
    checks = [Check("docker engine", engine.ok, engine.detail, engine.fix),
              _tool("debootstrap", "debootstrap", version_args=("--version",))]
    if not engine.ok:
        return checks + [Check("docker node image", False, "needs the Docker engine", engine.fix)]
    try:
        ref = default_image_ref()
        client = docker_client(timeout=10.0)
        try:
            image = find_image(client, ref)
        finally:
            client.close()
    except ImageError as exc:
        return checks + [Check("docker node image", False, str(exc), "testbed image build --mirror URL --suite NAME")]
    if image is None:
        return checks + [Check("docker node image", False, f"{ref} not built yet",
                               "testbed image build (offline, a few minutes; ./scripts/setup.sh does it)")]
    size = int(image.attrs.get("Size", 0)) / 1e6
    return checks + [Check("docker node image", True, f"{ref} ({image.id[:19]}, {size:.0f} MB)")]


def _java() -> Check:
    check = _tool("java", "openjdk-17-jre-headless", version_args=("-version",))
    if not check.ok:
        return check
    found = re.search(r'version "(\d+)', check.detail)
    if found and int(found.group(1)) < 17:
        return Check("java", False, f"{check.detail} (PySpark 4 needs Java 17 or later)",
                     "apt-get install -y openjdk-17-jre-headless")
    return check


def _pyspark() -> Check:
    spec = importlib.util.find_spec("pyspark")
    if spec is None:
        return Check("pyspark", False, "not installed in this Python", "pip install 'pyspark>=4,<5' 'pandas<3'")
    from importlib.metadata import version

    return Check("pyspark", True, f"pyspark {version('pyspark')}")


def _root() -> Check:
    ok = os.geteuid() == 0
    return Check("root", ok, "running as root" if ok else f"running as uid {os.geteuid()}",
                 None if ok else "run testbed as root (namespaces, tc and iptables need it)", True)


def _probe_local_kernel() -> kernel.KernelCapabilities:
    """This machine's kernel, which the Mininet and Docker nodes share."""
    from testbed.backends.localns.backend import NamespaceBackend

    return NamespaceBackend().probe()


def run_checks(probe: Callable[[], kernel.KernelCapabilities] = _probe_local_kernel) -> list[Check]:
    checks = [_root(), Check("kernel", True, f"{platform.system()} {platform.release()}")]
    if os.geteuid() == 0:
        try:
            checks += _qdisc_checks(probe())
        except proc.CommandError as exc:
            checks.append(Check("qdisc probe", False, f"could not probe: {exc}", "install iproute2", True))
    else:
        checks.append(Check("qdisc probe", False, "needs root to create a scratch namespace", "run as root", True))
    checks += [
        _tool("ip", "iproute2", required=True, version_args=("-V",)),
        _tool("tc", "iproute2", required=True, version_args=("-V",)),
        _mininet(),
        _tool("tcpdump", "tcpdump"),
        _tool("iperf3", "iperf3"),
        _tool("sshd", "openssh-server", version_args=("-V",)),
        *_docker(),
        _java(),
        _pyspark(),
    ]
    return checks


def as_json(checks: list[Check]) -> dict:
    return {"ok": all(c.ok for c in checks if c.required), "checks": [asdict(c) for c in checks]}
