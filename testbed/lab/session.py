"""Bring a lab up from a spec (nodes, links, shaping, management access) and take it down again.

The capability check (testbed.lab.capabilities) runs before anything is built.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from testbed.backends import BackendError, BackendOptions, Lab, get_backend
from testbed.kernel import KernelCapabilities
from testbed.lab import state as labstate
from testbed.lab.capabilities import check_capabilities
from testbed.lab.errors import LabError
from testbed.lab.shape import shape_links
from testbed.lab.state import lab_in_use
from testbed.links import appliance
from testbed.links.appliance import require_installed
from testbed.links.provider import appliance_links


def preflight(spec, options: BackendOptions, allow_missing: bool):
    """Refuse before anything is built what the backend or the nodes' kernel cannot do (``LabError`` or
    ``BackendError``, with the fix; ApplianceMissing when links need the impairment appliance and user-mode
    Linux is not installed); returns the capabilities the backend probed and what would be left out
    (``allow_missing``)."""
    if labstate.load(spec.name) is not None:
        raise LabError(lab_in_use(spec.name))
    chosen = get_backend(options)
    chosen.check(spec)
    caps = chosen.probe()
    carries = appliance_usable(chosen, allow_missing)
    missing = check_capabilities(spec, caps, allow_missing, carries)
    if carries and appliance_links(spec, caps, options.force_appliance):
        require_installed()
    return caps, missing


def appliance_usable(backend, allow_missing: bool) -> bool:
    """Can links go through the impairment appliance? The backend must carry it (Mininet, Docker); user-mode
    Linux missing is an error (ApplianceMissing, with the install command) unless ``allow_missing``, which
    then leaves out what only the appliance could provide, as for any other missing capability."""
    return backend.carries_appliance and (appliance.installed() or not allow_missing)


def _resolve(make):
    """``make()``, its BackendError told as the LabError of a lab that cannot be built."""
    try:
        return make()
    except BackendError as exc:
        raise LabError(str(exc)) from exc


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
                 backend: "BackendOptions | str | None" = None, spec_path: str = "", management: bool = False,
                 run_dir: Optional[str] = None):
        self.spec = spec
        self.allow_missing = allow_missing
        #: the backend's options (a name, or None for the topology's `backend:`, is resolved with the topology's)
        self.options = backend if isinstance(backend, BackendOptions) else \
            _resolve(lambda: BackendOptions.resolve(spec, backend, spec_path=spec_path))
        self.backend = _resolve(lambda: get_backend(self.options))
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
        """The whole sequence, as `testbed up` and the tests want it: :meth:`build`, :meth:`shape`, then with
        ``management`` :meth:`start_management`; a failure removes everything again. (`testbed run` takes the
        same steps one phase each: testbed.run.phases.)"""
        self.build()
        try:
            self.shape()
            if self.with_management:
                self.start_management()
        except BaseException:
            self.close()
            raise
        return self.lab

    def build(self) -> Lab:
        """Nodes and links, addressed but not shaped, claimed in the lab state under this process first
        (LabError when the name is taken, or the backend or the kernel cannot do what the topology asks)."""
        _resolve(lambda: self.backend.check(self.spec))
        if self.caps is None:
            self.caps = self.backend.probe()
        check_capabilities(self.spec, self.caps, self.allow_missing,
                           appliance_usable(self.backend, self.allow_missing))
        plan = self.backend.plan(self.spec)
        record = self._appliance_record()
        if record is not None:
            plan["appliance"] = record.to_json()  # recorded before it boots, so `clean` finds it after a crash
        state = labstate.LabState.for_this_process(self.spec.name, self.spec_path, self.backend.name, plan)
        state.run_dir = self.run_dir
        try:
            state.claim()  # atomic: of two processes building a lab of the same name, one gets it
        except FileExistsError:
            raise LabError(lab_in_use(self.spec.name)) from None
        self.state = state
        try:
            self.lab = self.backend.up(self.spec)
            self.lab.info["impairments"] = self.options.impairments
            if record is not None:
                self.backend.carry_through_appliance(self.lab, self.spec, record)
        except BaseException:
            self.close()
            raise
        return self.lab

    def _appliance_record(self) -> "appliance.ApplianceRecord | None":
        """The impairment appliance this lab needs (testbed.links.provider), None when it needs none."""
        if not appliance_usable(self.backend, self.allow_missing):
            return None
        indices = set(appliance_links(self.spec, self.caps, self.options.force_appliance))
        if not indices:
            return None
        require_installed()
        ends = [(link.index, i, end.node, end.ifname, self.backend.node_netns(self.spec.name, end.node))
                for link in self.spec.resolved_links() if link.index in indices
                for i, end in enumerate((link.a, link.b))]
        return appliance.plan_appliance(self.spec.name, ends)

    def shape(self) -> None:
        """Every direction of every link shaped (testbed.lab.shape); then the lab is recorded as up, with what
        was installed, in its state."""
        shape_links(self._built(), self.backend, self.caps, self.allow_missing)
        self.state.status, self.state.lab = "up", self.lab.to_json()
        self.state.save()

    def start_management(self) -> None:
        """Management access to every node (for Ansible, the metrics scraper and the admin API)."""
        self.management = self.backend.management(self._built())
        self.management.start()

    def _built(self) -> Lab:
        if self.lab is None:
            raise LabError(f"lab {self.spec.name!r} is not built")
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
                    self._release()
            else:
                self._release()
        finally:
            if self.state is not None:
                labstate.remove(self.spec.name)
                self.state = None
            self.lab = None

    def _release(self) -> None:
        """The backend's one teardown (Backend.release), from the plan this lab's state recorded before building."""
        try:
            self.backend.let_go()
        finally:
            if self.state is not None:
                self.backend.release(self.spec.name, self.state.plan, self.lab.to_json() if self.lab else None)

    def __enter__(self) -> Lab:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
