"""Bring a lab up from a spec (nodes, links, shaping, management access) and take it down again.

The capability check runs before anything is built: a topology that asks for
shaping the kernel cannot do is refused with the link and the missing piece named,
unless ``allow_missing`` is set, in which case the lab records what it left out.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from testbed import labstate, proc
from testbed.backends import BackendError, Lab, get_backend
from testbed.kernel import FEATURE_HINTS, KernelCapabilities
from testbed.shaping import UnsupportedShaping


class LabError(RuntimeError):
    """Bad input or an environment problem that stops a lab from being built."""


@dataclass(frozen=True)
class MissingCapability:
    link: str
    direction: str
    feature: str

    def message(self) -> str:
        return f"link {self.link} ({self.direction}) asks for {self.feature}, which this kernel cannot do: " \
               f"{FEATURE_HINTS[self.feature]}"


def link_label(link) -> str:
    return f"links[{link.index}] {link.a.node}:{link.a.ifname}<->{link.b.node}:{link.b.ifname}"


def missing_capabilities(spec, caps: KernelCapabilities) -> list[MissingCapability]:
    """Every shaping feature the links, or the scenario's `set_link` events, ask for and the kernel lacks."""
    from testbed.spec.models import SetLinkEvent
    from testbed.spec.resolve import Shaping

    missing = []
    links = spec.resolved_links()
    for link in links:
        for src, dst in ((link.a, link.b), (link.b, link.a)):
            for feature in sorted(src.egress.required_capabilities()):
                if not caps.supports(feature):
                    missing.append(MissingCapability(link_label(link), f"{src.node}->{dst.node}", feature))
    for i, event in enumerate(spec.scenario):
        if not isinstance(event, SetLinkEvent):
            continue
        link = links[spec.link_index(event.link)]
        asked = Shaping(bw_bps=event.bw, delay_ns=event.delay, jitter_ns=event.jitter, loss_pct=event.loss,
                        queue_packets=event.queue).required_capabilities()
        direction = f"{event.node}->" if event.node else "both directions"
        for feature in sorted(asked):
            if not caps.supports(feature):
                missing.append(MissingCapability(f"{link_label(link)} (scenario[{i}] at {event.at / 1e9:g}s)",
                                                 direction, feature))
    return missing


def check_capabilities(spec, caps: KernelCapabilities, allow_missing: bool) -> list[MissingCapability]:
    missing = missing_capabilities(spec, caps)
    if missing and not allow_missing:
        lines = "\n".join(f"  {m.message()}" for m in missing)
        raise LabError(
            f"topology {spec.name!r} asks for shaping this kernel cannot do:\n{lines}\n"
            "Install what is named above, or pass --allow-missing to build the lab without it "
            "(what was left out is recorded in the lab state and the run manifest)."
        )
    return missing


def shape_links(lab: Lab, backend, caps: KernelCapabilities, allow_missing: bool) -> None:
    """Install the shaping of every direction of every link; record what was installed.

    A backend with ``install_shaping`` installs all directions in one batch (the ssh backend, through
    Ansible); the others through each direction's shaper."""
    lab.applied = []
    batch = getattr(backend, "install_shaping", None)
    if batch is not None:
        try:
            installed = batch(lab, caps, allow_missing)
        except UnsupportedShaping as exc:
            raise LabError(str(exc)) from exc
    else:
        def install(direction):
            link, src, dst, shape = direction
            shaper = backend.shaper(lab, link, src.node, caps, allow_missing=allow_missing)
            try:
                return link, src.node, dst.node, getattr(shaper, "install", shaper.apply)(shape)
            except UnsupportedShaping as exc:
                raise LabError(f"link {link.label} ({src.node}->{dst.node}): {exc}") from exc

        # every direction's commands are its own interface's: many at once
        installed = proc.in_parallel(install, [d for link in lab.links for d in (
            (link, link.a, link.b, link.shape_ab), (link, link.b, link.a, link.shape_ba))])
    for link, src, dst, plan in installed:
        lab.applied.append({
            "link": link.index,
            "direction": f"{src}->{dst}",
            "qdiscs": plan.qdisc_kinds,
            "iptables_loss_pct": plan.iptables_loss_pct,
            "dropped": list(plan.dropped),
        })


def lab_in_use(name: str) -> str:
    """Why a lab name cannot be taken, and what to do (never advice that would stop someone's live lab)."""
    existing = labstate.load(name)
    if existing is None or existing.owner_alive():
        owner = f" by process {existing.owner_pid}" if existing is not None else ""
        return (f"lab {name!r} is in use{owner} (`testbed up` or a running `testbed run`): wait for it, "
                f"`testbed down {name}` if it is yours and no longer needed, or give this topology another `name`")
    return f"lab {name!r} was left behind by a process that died; run `testbed clean` first"


def backend_for(spec, backend: Optional[str] = None, image: Optional[str] = None, *,
                inventory: Optional[str] = None, keep_addresses: bool = False, check_host_keys: bool = True,
                spec_path: str = ""):
    """The backend a lab uses: ``backend`` (from `--backend`) or the topology's `backend:`; likewise the image
    (Docker) and the inventory (ssh; the topology's `inventory:` is relative to the topology file)."""
    name = backend or spec.backend
    # The file's `image:` is the Docker backend's: a run of the same file on Mininet ignores it
    # (an explicit --image with Mininet is refused by get_backend); likewise its `inventory:`.
    if name == "ssh" and not inventory and spec.inventory:
        base = Path(spec_path).parent if spec_path else Path.cwd()
        inventory = str(base / spec.inventory)
    try:
        return get_backend(name, image=image or (spec.image if name == "docker" else None),
                           inventory=inventory if name == "ssh" else None, keep_addresses=keep_addresses,
                           check_host_keys=check_host_keys)
    except BackendError as exc:
        raise LabError(str(exc)) from exc


def preflight(spec, backend: Optional[str], image: Optional[str], spec_path: Path, allow_missing: bool, *,
              inventory: Optional[str] = None, keep_addresses: bool = False, check_host_keys: bool = True):
    """Refuse before anything is built what the backend or the nodes' kernel cannot do (``LabError`` or
    ``BackendError``, with the fix); returns the capabilities the backend probed and what would be left
    out (``allow_missing``)."""
    if labstate.load(spec.name) is not None:
        raise LabError(lab_in_use(spec.name))
    if inventory and (backend or spec.backend) != "ssh":
        raise LabError("--inventory is for the ssh backend only: add --backend ssh")
    chosen = backend_for(spec, backend, image, spec_path=str(Path(spec_path).resolve()), inventory=inventory,
                         keep_addresses=keep_addresses, check_host_keys=check_host_keys)
    chosen.check(spec)
    caps = chosen.probe()
    return caps, check_capabilities(spec, caps, allow_missing)


class LabSession:
    """Builds a lab with its backend and, with ``management=True``, its management access too;
    ``close()`` removes everything in reverse, even after a failure.

    This is the one "lab, then its management access" sequence: `testbed run`, the tests and
    the benchmarks all use it. The lab is registered in the lab state folder under this
    process's PID, with what the backend is about to create, before anything is built, so
    `testbed exec` finds it and `testbed clean` leaves it alone while this process lives (and
    removes exactly it if this process dies hard).
    """

    def __init__(self, spec, caps: Optional[KernelCapabilities] = None, *, allow_missing: bool = False,
                 backend: Optional[str] = None, image: Optional[str] = None, spec_path: str = "",
                 management: bool = False, run_dir: Optional[str] = None, inventory: Optional[str] = None,
                 keep_addresses: bool = False, check_host_keys: bool = True):
        self.spec = spec
        self.allow_missing = allow_missing
        self.backend = backend_for(spec, backend, image, inventory=inventory, keep_addresses=keep_addresses,
                                   check_host_keys=check_host_keys, spec_path=spec_path)
        self.caps = caps
        self.spec_path = spec_path
        self.with_management = management
        self.run_dir = run_dir
        self.lab: Lab | None = None
        self.management = None
        self.state: labstate.LabState | None = None

    def access(self, node: str):
        """Node access to ``node`` of the open lab."""
        if self.lab is None:
            raise LabError(f"lab {self.spec.name!r} is not open")
        return self.backend.access(self.lab, node)

    def open(self) -> Lab:
        try:
            self.backend.check(self.spec)
        except BackendError as exc:
            raise LabError(str(exc)) from exc
        if self.caps is None:
            self.caps = self.backend.probe()
        check_capabilities(self.spec, self.caps, self.allow_missing)
        state = labstate.LabState.for_this_process(self.spec.name, self.spec_path, self.backend.name,
                                                   self.backend.plan(self.spec))
        state.run_dir = self.run_dir
        try:
            state.claim()  # atomic: of two processes building a lab of the same name, one gets it
        except FileExistsError:
            raise LabError(lab_in_use(self.spec.name)) from None
        self.state = state
        try:
            self.lab = self.backend.up(self.spec)
            shape_links(self.lab, self.backend, self.caps, self.allow_missing)
            self.state.status, self.state.lab = "up", self.lab.to_json()
            self.state.save()
            if self.with_management:
                self.management = self.backend.management(self.lab)
                self.management.start()
        except BaseException:
            self.close()
            raise
        return self.lab

    def close(self) -> None:
        try:
            if self.state is not None:
                self.state.status = "stopping"
                self.state.save()
            if self.management is not None:
                management, self.management = self.management, None
                try:
                    management.close()
                finally:
                    self.backend.down()
            else:
                self.backend.down()
        finally:
            if self.state is not None:
                labstate.remove(self.spec.name)
                self.state = None
            self.lab = None

    def __enter__(self) -> Lab:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
