"""What the phases of one run share: its inputs, its results folder and manifest, and what each phase
leaves for the next (the lab, node access, the routers' endpoints ...), with the undo stack every phase
registers its own teardown on (testbed.run.phases)."""
from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from testbed import kernel
from testbed.backends import Lab, NodeAccess
from testbed.lab.session import LabSession
from testbed.run.manifest import ManifestWriter
from testbed.run.progress import Progress
from testbed.run.rundir import RunDir
from testbed.run.signals import InterruptGuard


@dataclass
class RunContext:
    """One run: set up by :func:`testbed.run.experiment.run_experiment`, filled in phase by phase."""

    spec: Any
    spec_file: Path
    caps: kernel.KernelCapabilities
    options: Any  # testbed.run.experiment.RunOptions
    progress: Progress
    run: RunDir
    manifest: ManifestWriter
    session: LabSession
    driver: Any  # testbed.drivers.RouterDriver
    guard: InterruptGuard
    #: the undo of every phase, run in reverse when the run ends however it ends
    teardown: ExitStack = field(default_factory=ExitStack)
    # -- left by the phases ------------------------------------------------------------
    lab: Optional[Lab] = None
    access: dict[str, NodeAccess] = field(default_factory=dict)
    clocks_before: dict = field(default_factory=dict)
    deployer: Any = None  # testbed.deploy.deployer.Deployer
    endpoints: dict = field(default_factory=dict)  # node -> RouterEndpoint

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
