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
from testbed.links import appliance
from testbed.links.provider import NODE_FEATURES
from testbed.spec.resolve import FEATURES


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: Optional[str] = None
    required: bool = False
    #: what this machine cannot do while this optional check fails (None: what ``_COSTS`` says for its name, if
    #: anything)
    cost: Optional[str] = None
    #: a shaping feature's check: who can provide it here, ``{"host kernel": bool, "appliance": bool}``
    providers: Optional[dict] = None


def _tool(name: str, package: str, *, required: bool = False, version_args: tuple[str, ...] = ("--version",)) -> Check:
    path = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if not path:
        return Check(name, False, "not found", f"apt-get install -y {package}", required)
    result = proc.run([path, *version_args], check=False, timeout=20)
    text = (result.stdout or result.stderr).strip().splitlines()
    return Check(name, True, f"{path}: {text[0] if text else 'present'}", None, required)


def shaping_cost(caps: kernel.KernelCapabilities, uml: bool = False) -> Optional[str]:
    """What topologies this kernel cannot shape, from what its probe found, and what the impairment appliance
    provides instead where user-mode Linux is installed (``uml``) (None: every shaping key works on the host)."""
    lacking = [f for f in ("bw", "delay", "jitter", "loss", "queue") if not caps.supports(f)]
    from_appliance = [f for f in lacking if uml and f in appliance.APPLIANCE_FEATURES]
    missing = [f for f in lacking if f not in from_appliance]
    notes = []
    if missing:
        notes.append(f"{_words(missing)} unavailable "
                     "(a topology that uses them is refused; `run --allow-missing` leaves them out)")
    if from_appliance:
        notes.append(f"{_words(from_appliance)} from the impairment appliance ({_uml()}, a process per lab; "
                     "docs/impairments.md)")
    if not caps.has_qdisc("netem") and caps.supports("loss"):
        notes.append("loss through the iptables statistic match, at the receiver")
    if not caps.has_qdisc("pfifo") and caps.supports("queue"):
        notes.append("queue limits through netem's limit")
    return "; ".join(notes) or None


def _uml() -> str:
    version = appliance.kernel_version()
    return f"user-mode Linux {version}" if version else "user-mode Linux"


def _words(names: list[str]) -> str:
    return " and ".join(names) if len(names) <= 2 else ", ".join(names)


def feature_providers(caps: kernel.KernelCapabilities, uml: bool) -> dict[str, dict[str, bool]]:
    """Each shaping feature (testbed.spec.resolve.FEATURES): can the host kernel provide it, can the impairment
    appliance (user-mode Linux installed, ``uml``; the rate and a pfifo queue stay at the node's end of a link it
    carries, testbed.links.provider)."""
    return {f: {"host kernel": caps.supports(f),
                "appliance": uml and (f in appliance.APPLIANCE_FEATURES or f in NODE_FEATURES)}
            for f in FEATURES}


def _feature_checks(caps: kernel.KernelCapabilities, uml: bool) -> list[Check]:
    """One line per shaping feature with its two providers; one that neither provides says how to get it."""
    checks = []
    for feature, providers in feature_providers(caps, uml).items():
        detail = ", ".join(f"{who}: {'yes' if ok else 'no'}" for who, ok in providers.items())
        fix = None
        if not any(providers.values()):
            fix = appliance.INSTALL_HINT if feature in appliance.APPLIANCE_FEATURES else kernel.FEATURE_HINTS[feature]
        checks.append(Check(f"feature {feature}", any(providers.values()), detail, fix, providers=providers))
    return checks


def _appliance_check(caps: kernel.KernelCapabilities) -> Check:
    """The impairment appliance: installed, its kernel's version; without it, what the host alone lacks."""
    if appliance.installed():
        provides = ", ".join(f for f in FEATURES if f in appliance.APPLIANCE_FEATURES)
        return Check("impairment appliance", True, f"{_uml()} ({appliance.UML_KERNEL}): {provides}")
    lacking = [f for f in FEATURES if f in appliance.APPLIANCE_FEATURES and not caps.supports(f)]
    cost = "no `impairments: appliance` (the same impairments on every machine)"
    if lacking:
        cost = f"{_words(lacking)} unavailable; {cost}"
    return Check("impairment appliance", False,
                 f"user-mode Linux not installed ({appliance.UML_KERNEL} and its modules in {appliance.UML_MODULES})",
                 appliance.INSTALL_HINT, cost=cost)


def _qdisc_checks(caps: kernel.KernelCapabilities, uml: bool = False) -> list[Check]:
    uses = {
        "htb": "bandwidth",
        "tbf": "bandwidth (alternative)",
        "pfifo": "queue limit in packets",
        "bfifo": "queue limit in bytes",
        "netem": "delay, jitter, loss",
    }
    checks = []
    cost = shaping_cost(caps, uml)
    for kind, use in uses.items():
        ok = caps.has_qdisc(kind)
        detail = f"qdisc {kind} ({use}): " + ("works" if ok else caps.errors.get(kind, "missing"))
        fix = None if ok else (kernel.FEATURE_HINTS["delay"] if kind == "netem" else f"modprobe sch_{kind}")
        checks.append(Check(f"qdisc {kind}", ok, detail, fix, required=kind == "htb",
                            cost=cost if kind in ("netem", "pfifo") else None))
    checks.append(Check(
        "iptables statistic", caps.iptables_statistic,
        "iptables -m statistic (loss without netem): " + ("works" if caps.iptables_statistic else
                                                          caps.errors.get("iptables_statistic", "missing")),
        None if caps.iptables_statistic else "apt-get install -y iptables && modprobe xt_statistic",
        cost=None if caps.has_qdisc("netem") else cost,
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


def probe_local_kernel() -> kernel.KernelCapabilities:
    """This machine's kernel, which the Mininet and Docker nodes share."""
    from testbed.backends.localns.backend import probe_this_kernel

    return probe_this_kernel()


def run_checks(probe: Callable[[], kernel.KernelCapabilities] = probe_local_kernel) -> list[Check]:
    checks = [_root(), Check("kernel", True, f"{platform.system()} {platform.release()}")]
    if os.geteuid() == 0:
        try:
            caps = probe()
            uml = appliance.installed()
            checks += _qdisc_checks(caps, uml) + [_appliance_check(caps)] + _feature_checks(caps, uml)
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


#: what an optional check that fails costs, by check name (the kernel's checks carry their own, from the probe)
_COSTS = {
    "tcpdump": "no packet captures (a topology's default `capture: {links: all}` needs them; without them, no "
               "reroute or path figures)",
    "iperf3": "only bench/'s iperf3 figures (runs verify links with the built-in probe)",
    "sshd": "no `run` on mininet or docker (their nodes are reached over an sshd each)",
    "docker engine": "no docker backend",
    "debootstrap": "`testbed image build` cannot make the docker node image",
    "docker node image": "no docker backend until `testbed image build`",
    "java": "no analysis here: runs end without report or verdict (`testbed analyze` them where Java and PySpark are)",
    "pyspark": "no analysis here: runs end without report or verdict (`testbed analyze` them where Java and PySpark "
               "are)",
}


def costs(checks: list[Check]) -> list[tuple[str, str]]:
    """``(what is missing, what that costs)`` for every failed optional check that costs something, each cost
    once (the netem and pfifo checks share the kernel's)."""
    out: list[tuple[str, str]] = []
    for c in checks:
        cost = c.cost or _COSTS.get(c.name)
        if c.ok or c.required or not cost:
            continue
        name = c.name.replace("qdisc ", "")
        same = next((i for i, (_, seen) in enumerate(out) if seen == cost), None)
        if same is None:
            out.append((name, cost))
        else:
            out[same] = (f"{out[same][0]}, {name}", cost)
    return out


def verdict_lines(checks: list[Check]) -> list[str]:
    """The last lines of `doctor`: not ready (a required check failed), ready without what is missing and what
    that costs, or ready."""
    if not as_json(checks)["ok"]:
        return ["not ready: fix the FAIL lines above"]
    missing = costs(checks)
    if not missing:
        return ["ready"]
    return [f"ready, without {missing[0][0]}: {missing[0][1]}"] + \
        [f"       without {name}: {cost}" for name, cost in missing[1:]]


def as_json(checks: list[Check]) -> dict:
    report = {"ok": all(c.ok for c in checks if c.required), "checks": [asdict(c) for c in checks]}
    report["without"] = [{"missing": name, "cost": cost} for name, cost in costs(checks)] if report["ok"] else []
    return report
