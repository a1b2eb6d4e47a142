"""A night's folder and its state file: what was planned, in which order, and what each repetition gave.

    results/suites/<suite>/<night>/
        night.json           the plan (order, seed), the self-check, one entry per finished repetition
        topologies/<case>.yaml   each case's effective topology (the overrides merged in)
        runs/<run-id>/       one normal results folder per repetition
        suite-summary.json, junit.xml, trend.html   the night's outputs

``night.json`` is rewritten atomically after every repetition, so a night stopped at any point (Ctrl-C,
a crash, a reboot) resumes with ``--resume`` from what is recorded.
"""
from __future__ import annotations

import json
import random
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from testbed.run.rundir import write_json

__all__ = ["Repetition", "RepetitionResult", "NightState", "new_night_id", "plan_order", "find_unfinished"]

STATE_FILE = "night.json"


def new_night_id(now_ns: Optional[int] = None) -> str:
    """``20261123T201500Z-3fa2c1``: sorts by start time; the suffix keeps two nights started the same second
    apart."""
    now = time.gmtime((now_ns or time.time_ns()) / 1e9)
    return time.strftime("%Y%m%dT%H%M%SZ", now) + "-" + secrets.token_hex(3)


@dataclass(frozen=True)
class Repetition:
    case: str
    number: int  # 1-based

    @property
    def label(self) -> str:
        return f"{self.case}#{self.number}"


def plan_order(repetitions: dict[str, int], seed: int) -> list[Repetition]:
    """Every case × repetition in a shuffled order (seeded, so a resumed night keeps it): a drift of the
    machine over the night then spreads over every case instead of falling on the last one."""
    order = [Repetition(case, n) for case, count in repetitions.items() for n in range(1, count + 1)]
    random.Random(seed).shuffle(order)
    return order


@dataclass
class RepetitionResult:
    case: str
    number: int
    run_dir: Optional[str]
    status: str                    # completed | failed | interrupted
    error: Optional[str] = None
    expect_passed: Optional[bool] = None   # None: not analysed
    analysis_error: Optional[str] = None
    wall_s: float = 0.0
    figures: dict = field(default_factory=dict)  # metric key -> value (None: not measured)

    @property
    def recorded(self) -> bool:
        """Complete and analysed: a resumed night does not run it again."""
        return self.status == "completed" and self.expect_passed is not None


@dataclass
class NightState:
    folder: Path
    suite: str
    night: str
    started_ns: int
    seed: int
    variant: str
    suite_file: str
    order: list[Repetition]
    results: dict[str, RepetitionResult] = field(default_factory=dict)  # Repetition.label -> result
    checks: Optional[dict] = None
    finished: bool = False
    git_revision: str = ""      # the code the night runs (recorded when it starts; a resume keeps it)
    router_version: str = ""

    @classmethod
    def create(cls, root: Path, suite: str, suite_file: str, repetitions: dict[str, int], variant: str,
               seed: Optional[int] = None) -> "NightState":
        night = new_night_id()
        seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        folder = root / night
        folder.mkdir(parents=True, exist_ok=False)
        state = cls(folder, suite, night, time.time_ns(), seed, variant, suite_file, plan_order(repetitions, seed),
                    git_revision=current_revision(), router_version=current_router_version())
        state.save()
        return state

    @classmethod
    def load(cls, folder: Path) -> "NightState":
        path = folder / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read the night's state ({exc})") from None
        results = {label: RepetitionResult(**r) for label, r in data.get("results", {}).items()}
        return cls(folder, data["suite"], data["night"], data["started_ns"], data["seed"], data["variant"],
                   data["suite_file"], [Repetition(r["case"], r["number"]) for r in data["order"]], results,
                   data.get("checks"), data.get("finished", False), data.get("git_revision", ""),
                   data.get("router_version", ""))

    def to_json(self) -> dict:
        return {"suite": self.suite, "night": self.night, "started_ns": self.started_ns, "seed": self.seed,
                "variant": self.variant, "suite_file": self.suite_file,
                "order": [asdict(r) for r in self.order], "checks": self.checks, "finished": self.finished,
                "git_revision": self.git_revision, "router_version": self.router_version,
                "results": {label: asdict(r) for label, r in self.results.items()}}

    def save(self) -> None:
        write_json(self.folder / STATE_FILE, self.to_json())

    def pending(self, cases: Optional[set] = None) -> list[Repetition]:
        """Repetitions still to run, in the night's order (``cases``: only these)."""
        return [r for r in self.order if (cases is None or r.case in cases)
                and not (r.label in self.results and self.results[r.label].recorded)]

    def record(self, result: RepetitionResult) -> None:
        self.results[f"{result.case}#{result.number}"] = result
        self.save()


def current_revision() -> str:
    """The checkout's git revision, ``+dirty`` when it has uncommitted changes ("" outside a checkout)."""
    from testbed.run.manifest import git_revision

    revision, dirty = git_revision()
    return f"{revision}{'+dirty' if dirty else ''}" if revision else ""


def current_router_version() -> str:
    import router

    return router.__version__


def find_unfinished(root: Path, suite: str) -> Optional[Path]:
    """The newest night of ``suite`` under ``root`` that did not finish, if any."""
    for folder in sorted((p for p in root.iterdir() if (p / STATE_FILE).exists()), reverse=True) \
            if root.is_dir() else []:
        try:
            data = json.loads((folder / STATE_FILE).read_text())
        except (OSError, ValueError):
            continue
        if data.get("suite") == suite and not data.get("finished"):
            return folder
    return None
