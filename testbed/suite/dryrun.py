"""What `suite run --dry-run` says beside the order: the settle wait, an estimate of the night's wall time,
where the history goes and whether a baseline exists in it (nothing is built, no Spark is started)."""
from __future__ import annotations

from typing import List

from testbed.suite.night import Repetition
from testbed.suite.runner import Eta, NightOptions, _fmt_s, night_topologies
from testbed.suite.spec import Suite
from runfolder.wording import plural

__all__ = ["dry_run_lines", "STEAL_SAMPLE_S", "VERIFY_S_PER_LINK"]

#: the self-checks' CPU steal sample (selfcheck.check_night)
STEAL_SAMPLE_S = 5.0
#: link verification per link of a topology, as measured (docs/benchmarks.md: diamond 4 links 17 s, triangle
#: 3 links 22 s, grid12 49 s)
VERIFY_S_PER_LINK = 5.0


def _self_check_s(suite: Suite, cases: List[str]) -> float:
    checks = suite.spec.checks
    links = sum(len(spec.links) for spec in night_topologies(suite, cases).values()) if checks.verify_links else 0
    return STEAL_SAMPLE_S + VERIFY_S_PER_LINK * links


def dry_run_lines(suite: Suite, order: List[Repetition], options: NightOptions) -> List[str]:
    """The lines after the order: settle wait, wall-time estimate, history and baseline (the same every time
    for the same history: nothing of the machine's moment)."""
    from spark.history import history_nights, read_local_history, select_baseline
    from testbed.suite.night import new_night_id
    from testbed.suite.outputs import baseline_choice

    checks = suite.spec.checks
    settle_s = checks.settle / 1e9
    lines = [f"settle: before measuring, waits up to {_fmt_s(settle_s)} for the 1-minute load to fall to "
             f"{checks.load_per_cpu_max:g} per CPU (no wait when it is already there)"]
    cases = sorted({r.case for r in order})
    self_check = _self_check_s(suite, cases)
    runs = Eta(suite).left_s(order)
    lines.append(f"wall time: about {_fmt_s(self_check + runs)} (self-checks {_fmt_s(self_check)}, "
                 f"{plural(len(order), 'repetition')} {_fmt_s(runs)}; up to {_fmt_s(self_check + runs + settle_s)} "
                 "with the whole settle wait)")
    history = options.history
    lines.append(f"history: {history}")
    last, nights, revision = baseline_choice(suite, options)
    if "://" in history and not history.startswith("file://"):
        lines.append("baseline: not looked for (a history at a URI is read with Spark, when the night runs)")
        return lines
    folder = history[len("file://"):] if history.startswith("file://") else history
    try:
        df = read_local_history(folder, suite.name)
        known = history_nights(df)
        chosen = select_baseline(df, suite=suite.name, before_night=new_night_id(), machine=options.machine,
                                 variant="", last_nights=last, pinned_nights=nights, pinned_revision=revision)
    except ValueError as exc:
        lines.append(f"baseline: none: {exc}")
        return lines
    if chosen:
        lines.append(f"baseline: {plural(len(chosen), 'night')} of machine {options.machine} "
                     f"({', '.join(chosen)})")
    else:
        lines.append(f"baseline: none yet ({plural(len(known), 'night')} in the history, none a valid night of "
                     f"machine {options.machine} as shipped): tonight's figures are recorded, not judged")
    return lines
