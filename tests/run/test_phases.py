"""`testbed run`'s sequencer (testbed.run.experiment.run_phases) over a run context, without a lab: each phase's
undo is registered by the phase itself, so the teardown order follows from the order of the phases."""
import json

import pytest

from testbed.run.context import RunContext
from testbed.run.experiment import run_phases
from testbed.run.manifest import Manifest, ManifestWriter
from testbed.run.phases import RUN_PHASES, Phase
from testbed.run.rundir import RunDir


def _context(tmp_path) -> RunContext:
    run = RunDir(tmp_path, "phases-test")
    manifest = ManifestWriter(run / "manifest.json", Manifest(run.run_id, "t.yaml", {}, "mininet"))
    return RunContext(spec=None, spec_file=tmp_path / "t.yaml", caps=None, options=None, progress=None, run=run,
                      manifest=manifest, session=None, driver=None, guard=None)


class Step(Phase):
    """A phase that notes that it ran and registers an undo that notes its undoing (or fails)."""

    def __init__(self, name: str, log: list, fail: bool = False, undo_fails: bool = False, wanted: bool = True):
        self.name, self.log, self.fail, self.undo_fails, self._wanted = name, log, fail, undo_fails, wanted

    def wanted(self, ctx) -> bool:
        return self._wanted

    def run(self, ctx) -> None:
        self.log.append(self.name)
        ctx.undo(f"undo {self.name}", self._undo)
        if self.fail:
            raise RuntimeError(f"{self.name} failed")

    def _undo(self) -> None:
        self.log.append(f"undo {self.name}")
        if self.undo_fails:
            raise OSError(f"{self.name} could not be undone")


def test_the_teardown_is_the_phases_undone_in_reverse_up_to_the_one_that_failed(tmp_path):
    ctx, log = _context(tmp_path), []
    phases = (Step("lab", log), Step("shape", log), Step("verify", log, wanted=False),
              Step("deploy", log, fail=True), Step("traffic", log))
    with pytest.raises(RuntimeError, match="deploy failed"):
        run_phases(ctx, phases)
    ctx.teardown.close()
    assert log == ["lab", "shape", "deploy", "undo deploy", "undo shape", "undo lab"]
    recorded = json.loads((ctx.run / "manifest.json").read_text())["phases"]
    assert [(p["name"], p["ok"]) for p in recorded] == [("lab", True), ("shape", True), ("deploy", False)]
    assert recorded[-1]["error"] == "deploy failed"


def test_an_undo_that_fails_is_recorded_and_the_others_still_run(tmp_path):
    ctx, log = _context(tmp_path), []
    run_phases(ctx, (Step("lab", log), Step("capture", log, undo_fails=True), Step("traffic", log)))
    ctx.teardown.close()
    assert log == ["lab", "capture", "traffic", "undo traffic", "undo capture", "undo lab"]
    assert ctx.manifest.manifest.extra["teardown_errors"] == ["undo capture: capture could not be undone"]
    ctx.run.events.close()
    events = [json.loads(line) for line in (ctx.run / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "teardown_error"] == ["undo capture"]


def test_the_run_phases_in_their_order():
    assert [p.name for p in RUN_PHASES] == ["lab", "shape", "management", "verify", "clocks", "deploy", "capture",
                                           "traffic"]
