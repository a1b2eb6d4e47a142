"""What the phases of one run share: its inputs, its results folder and manifest, and what each phase
leaves for the next (the lab, node access, the routers' endpoints ...), with the undo stack every phase
registers its own teardown on (testbed.run.phases)."""
from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from testbed import kernel
from testbed.backends import BackendOptions, Lab, NodeAccess
from testbed.drivers import RouterDriver
from testbed.lab.session import LabSession
from testbed.machinefit import Fit
from testbed.run.manifest import ManifestWriter
from testbed.run.progress import Progress
from testbed.run.rundir import RunDir
from testbed.run.signals import InterruptGuard

if TYPE_CHECKING:  # deployment's modules are imported when a run deploys
    from testbed.deploy.deployer import Deployer, RouterEndpoint
    from testbed.spec.topology import Spec


@dataclass
class RunOptions:
    """How to run: what `testbed run`'s options (or a suite's case) ask beside the topology."""

    results_root: Path = Path("results")
    allow_missing: bool = False
    scrape_interval_s: float = 1.0
    duration_s: Optional[float] = None  # override the spec's duration
    #: the backend and its options, resolved from the command line and the topology (None: the topology's)
    backend: Optional[BackendOptions] = None
    #: measure every link on the data plane against the topology before traffic (None: on the ssh backend, and
    #: on every backend where a link asks for impairments)
    verify_links: Optional[bool] = None
    allow_deviation: bool = False  # a link that misses is a warning, not an error
    #: seconds each router may take to answer after its start (None: from the estimate, at least 30)
    ready_timeout_s: Optional[float] = None
    #: what the run needs of this machine against what it has (None on lab machines)
    machine_fit: Optional[Fit] = None
    #: what a shortened run leaves out of the topology (testbed.spec.shortened.Shortening): recorded in the
    #: manifest, where the check finds the expectations it cannot measure
    shortened: Optional[Any] = None


@dataclass
class RunContext:
    """One run: set up by :func:`testbed.run.experiment.run_experiment`, filled in phase by phase."""

    spec: Spec
    spec_file: Path
    caps: kernel.KernelCapabilities
    options: RunOptions
    progress: Progress
    run: RunDir
    manifest: ManifestWriter
    session: LabSession
    driver: RouterDriver
    guard: InterruptGuard
    #: the undo of every phase, run in reverse when the run ends however it ends
    teardown: ExitStack = field(default_factory=ExitStack)
    # -- left by the phases ------------------------------------------------------------
    lab: Optional[Lab] = None
    access: dict[str, NodeAccess] = field(default_factory=dict)
    clocks_before: dict = field(default_factory=dict)
    deployer: Optional[Deployer] = None
    endpoints: dict[str, RouterEndpoint] = field(default_factory=dict)

    @property
    def duration_ns(self) -> int:
        return int(self.spec.duration)

    def python_of(self, node: str) -> str:
        """The node's python3, as its management access says."""
        return self.session.management.inventory_vars(node).get("ansible_python_interpreter", "python3")

    def undo(self, what: str, fn: Callable, *args) -> None:
        """Register a teardown step: run at the end; if it fails, why is recorded and the others go on."""
        self.teardown.callback(self.best_effort, what, fn, *args)

    def undo_phase(self, name: str, fn: Callable, *args) -> None:
        """Register a teardown step that is a phase of its own in the progress and the manifest."""
        self.teardown.callback(self._phase_step, name, fn, *args)

    def best_effort(self, what: str, fn: Callable, *args) -> None:
        """A teardown step: run it, and if it fails, record why and carry on with the others."""
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - teardown must go on
            message = f"{what}: {exc}"
            self.manifest.manifest.extra.setdefault("teardown_errors", []).append(message)
            self.run.events.write("orchestrator", "teardown_error", step=what, error=str(exc))
            try:
                print(f"warning: {message}", file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass

    def _phase_step(self, name: str, fn: Callable, *args) -> None:
        try:
            self.progress.phase(name)
            with self.manifest.phase(name):
                fn(*args)
        except BaseException as exc:  # noqa: BLE001
            self.best_effort(name, _raise, exc)


def _raise(exc: BaseException) -> None:
    raise exc
