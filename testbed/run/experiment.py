"""One experiment, as data flows in DESIGN.md: lab -> shape -> management -> verify links -> clocks ->
deploy -> capture -> traffic + scenario (+ metrics) -> collect -> teardown, into a complete results folder.

:func:`run_experiment` runs the phases of testbed.run.phases in order over one run context
(testbed.run.context.RunContext). Whatever happens — a failed phase, Ctrl-C, SIGTERM — everything that was
set up is taken down again in reverse order (each phase registered its own undo), the manifest says how the
run ended, and every file already written stays.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from runfolder.layout import LAYOUT
from testbed import kernel
from testbed.backends import BackendOptions
from testbed.lab.session import LabSession
from testbed.run.context import RunContext, RunOptions
from testbed.run.manifest import Manifest, ManifestWriter
from testbed.run.phases import RUN_PHASES, Phase
from testbed.run.progress import Progress
from testbed.run.rundir import RunDir, new_run_id
from testbed.run.signals import Interrupted, interrupt_guard


@dataclass
class RunOutcome:
    run_dir: Path
    status: str  # completed | failed | interrupted
    error: Optional[str]
    teardown_errors: tuple[str, ...] = ()
    #: the run failed on its input, not on the machine: a router exited at its start (exit 2)
    bad_input: bool = False


def run_experiment(spec, spec_file: Path, caps: kernel.KernelCapabilities, options: RunOptions,
                   progress: Progress) -> RunOutcome:
    """Run one experiment; never raises for what happens after the results folder exists."""
    from testbed.deploy.runner import DeployError
    from testbed.drivers import driver_for

    if options.duration_s:
        spec = spec.model_copy(update={"duration": int(options.duration_s * 1e9)})
    driver = driver_for(spec)
    run = RunDir(options.results_root, new_run_id(spec.name))
    session = LabSession(spec, caps, allow_missing=options.allow_missing, backend=options.backend,
                         spec_path=str(spec_file), management=True, run_dir=str(run.path.resolve()))
    run.copy_topology(spec_file)
    manifest = _new_manifest(spec, spec_file, caps, options, run, session.options, driver)
    progress.phase("results", str(run.path))
    ignored = driver.settings_ignored(spec)
    if ignored:
        progress.phase("router", f"warning: the {driver.name} driver does not apply these router settings of the "
                                 f"topology: {', '.join(ignored)} (recorded in manifest.json router_driver)")
    status, error, bad_input = "failed", None, False
    with interrupt_guard() as guard:
        ctx = RunContext(spec, spec_file, caps, options, progress, run, manifest, session, driver, guard)
        try:
            run_phases(ctx, RUN_PHASES)
            status = "completed"
        except Interrupted as exc:
            status, error = "interrupted", str(exc)
            progress.phase("interrupted", f"{exc}; stopping traffic, flushing captures, tearing down")
        except Exception as exc:  # noqa: BLE001 - the run fails, the folder stays consistent
            status, error = "failed", str(exc)
            bad_input = isinstance(exc, DeployError) and exc.router_exited
            progress.phase("failed", str(exc))
        finally:
            guard.disarm()
            run.events.write("orchestrator", "run_end", status=status, error=error)
            try:
                ctx.teardown.close()
            finally:
                manifest.finish(status, error)
                run.events.close()
    return RunOutcome(run.path, status, error, tuple(manifest.manifest.extra.get("teardown_errors", ())),
                      bad_input=bad_input)


def run_phases(ctx: RunContext, phases: "tuple[Phase, ...]") -> None:
    """Each phase this run wants, in order, as a manifest phase of its name; the first that raises ends the
    sequence (what the phases before it registered is undone by ``ctx.teardown``, in reverse)."""
    for phase in phases:
        if phase.wanted(ctx):
            with ctx.manifest.phase(phase.name):
                phase.run(ctx)


def _new_manifest(spec, spec_file: Path, caps: kernel.KernelCapabilities, options: RunOptions, run: RunDir,
                  chosen: BackendOptions, driver) -> ManifestWriter:
    """The run's manifest as it starts: the topology as resolved, the options, the backend and the driver."""
    from testbed.spec.cli_validate import resolved_json

    manifest = ManifestWriter(run / LAYOUT.manifest, Manifest(
        run.run_id, str(spec_file), {k: v for k, v in resolved_json(spec).items() if k != "ok"},
        chosen.name, capabilities=caps.to_json(),
        options={"allow_missing": options.allow_missing, "scrape_interval_s": options.scrape_interval_s,
                 "duration_ns": int(spec.duration), "backend": chosen.name, "image": chosen.image,
                 "inventory": chosen.inventory, "keep_addresses": chosen.keep_addresses,
                 "host_key_checking": chosen.check_host_keys, "verify_links": options.verify_links,
                 "allow_deviation": options.allow_deviation}))
    manifest.update(router_driver=driver.describe(spec))
    if options.shortened is not None:
        manifest.manifest.extra["shortened"] = options.shortened.to_json()
    return manifest
