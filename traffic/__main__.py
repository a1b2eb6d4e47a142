"""``python -m traffic pub|sub|query|queryable --plan plan.json``: run one traffic process.

With ``--wait-for-plan SECONDS`` the plan need not be there yet: the process says on stdout that it has started
(:data:`traffic.logs.WAITING_FOR_PLAN`) and waits for the file to appear, so that an orchestrator can start every
process first and set the run clock's origin in the plans once they are running (testbed/run/phases.py).

Exit status: 0 when the plan ran to its end or the process was stopped with
SIGTERM/SIGINT (logs flushed), 2 for a plan that cannot be run (the message
says which field), 1 for an unexpected error (logged with its traceback in the
process log).  Connection problems are not errors: the process retries until
the plan's end and says so in its log.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
import traceback
from typing import List, Optional

from router.memory import keep_large_allocations_in_the_heap

from .logs import WAITING_FOR_PLAN, close_process_log, log_summary, open_process_log
from runfolder.trafficplan import PlanError, ProcessPlan, load_plan
from .profiles import run_publisher, run_subscriber
from .querier import run_querier, run_queryable

#: what runs a plan of each role (runfolder.trafficplan.ROLES)
RUNNERS = {"pub": run_publisher, "sub": run_subscriber, "query": run_querier, "queryable": run_queryable}


class _EarlySignals:
    """SIGTERM/SIGINT received before the event loop's handlers are installed: remembered, not fatal."""

    def __init__(self) -> None:
        self.received: List[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.received.append(signum)


#: how often a process started with ``--wait-for-plan`` looks for its plan
PLAN_POLL_S = 0.005


def _wait_for_plan(path: str, timeout_s: float, early: _EarlySignals) -> Optional[int]:
    """Say the process has started, then wait until ``path`` exists: None once it does, else the exit status
    (0: stopped by a signal meanwhile, 2: not there after ``timeout_s``)."""
    print(f"traffic: {WAITING_FOR_PLAN} {path}", flush=True)
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if early.received:
            return 0
        if time.monotonic() > deadline:
            print(f"traffic: no plan at {path} after {timeout_s:g} s", file=sys.stderr)
            return 2
        time.sleep(PLAN_POLL_S)
    return None


async def _run(plan: ProcessPlan, echo: bool, early: _EarlySignals) -> int:
    try:
        logger = open_process_log(plan.log_dir, plan.name, echo_stderr=echo)
    except OSError as exc:
        print(f"traffic: cannot write the process log in {plan.log_dir}: {exc}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if not stop.is_set():
            logger.info("%s received: stopping", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    for sig in early.received:
        on_signal(sig)
    try:
        summary = await RUNNERS[plan.role](plan, logger, stop)
        log_summary(logger, summary)
        logger.info("exit 0")
        return 0
    except Exception:
        logger.error("unexpected error, exiting with status 1:\n%s", traceback.format_exc())
        return 1
    finally:
        close_process_log(logger)
        # A stop signal that comes after the work is done (e.g. a stop_flow for a flow that has
        # already ended by its plan) must not kill the exiting process: ignore it from here on
        # (closing the loop would otherwise restore the default action, death by SIGTERM).
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m traffic",
                                     description="Traffic generator: one publisher, subscriber, querier or "
                                                 "queryable process from a plan")
    parser.add_argument("role", choices=tuple(RUNNERS),
                        help="publish (pub), subscribe (sub), send queries (query) or answer them (queryable)")
    parser.add_argument("--plan", required=True, help="plan JSON file (docs/traffic.md)")
    parser.add_argument("--check", action="store_true", help="validate the plan and exit")
    parser.add_argument("--wait-for-plan", type=float, default=0.0, metavar="SECONDS",
                        help="the plan may not be there yet: say on stdout that the process has started, then wait "
                             "up to SECONDS for the file (an orchestrator writes it, with the run clock's origin, "
                             "once every process has started)")
    parser.add_argument("--echo", action="store_true", help="copy the process log to stderr")
    args = parser.parse_args(argv)
    early = _EarlySignals()
    if args.wait_for_plan > 0:
        status = _wait_for_plan(args.plan, args.wait_for_plan, early)
        if status is not None:
            return status
    try:
        plan = load_plan(args.plan)
    except PlanError as exc:
        print(f"traffic: invalid plan: {exc}", file=sys.stderr)
        return 2
    if plan.role != args.role:
        print(f"traffic: plan {args.plan} is a {plan.role!r} plan, but the command is {args.role!r}", file=sys.stderr)
        return 2
    if args.check:
        print(f"traffic: plan {args.plan} is valid ({plan.role} {plan.name}, {len(plan.flows)} flow(s))")
        return 0
    try:
        keep_large_allocations_in_the_heap()  # large messages: no fresh pages faulted in per message
        return asyncio.run(_run(plan, args.echo, early))
    except KeyboardInterrupt:  # a signal before the handlers were installed
        return 0


if __name__ == "__main__":
    sys.exit(main())
