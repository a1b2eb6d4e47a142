"""The phases of `testbed run`, in order: lab, shape, management, verify links, clocks, deploy, capture,
traffic.

Each phase does its one job on the run context (testbed.run.context.RunContext), leaves what the next
phases need there, and registers its own undo there as soon as it has something to undo; the run ends
by undoing in reverse, so the teardown order follows from the order of the phases. Each phase is a
manifest phase of its own name (its timing, and its error if it failed).
"""
from __future__ import annotations

from dataclasses import asdict
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Optional

from runfolder.layout import LAYOUT, safe_name
from runfolder.records import clocks_json
from testbed.clocksync import ClockError
from testbed.links.control import LinkControl
from testbed.links.verify import has_impairments, verify_links
from testbed.machinefit import Fit
from testbed.run.actions import ScenarioActions, TrafficLaunch
from testbed.run.capture import Captures, capture_targets
from testbed.run.context import RunContext
from testbed.run.progress import TrafficWatch
from testbed.run.routercontrol import RouterControl
from testbed.run.rundir import RunDir, node_results_dir, write_json
from testbed.run.scenario import Timeline
from testbed.run.scraper import MetricsScraper
from testbed.run.traffic import STOP_TIMEOUT_S, TrafficProcess, TrafficRunner
from traffic.logs import WAITING_FOR_PLAN

#: How long a traffic process may take to start (interpreter, imports) and say it waits for its plan.
TRAFFIC_START_TIMEOUT_S = 60.0
#: How long a started traffic process waits for its plan: the plans are written once the slowest process has
#: started (up to TRAFFIC_START_TIMEOUT_S after the first), then delivered; so well beyond that.
PLAN_WAIT_S = 3 * TRAFFIC_START_TIMEOUT_S
#: The run clock's zero is this long after the traffic processes have started and said so, plus twice what
#: starting them cost the orchestrator (the plans then reach the same nodes through the same accesses). Once its
#: plan is there a process reads it, connects to its router and declares: 30-60 ms on a loaded 2-core machine
#: (measured), the interpreter's start and the imports already behind it; half a second is half the lead the
#: planner gives a whole launch, interpreter included (testbed/trafficplanner.py DEFAULT_LAUNCH_LEAD_NS). Plans
#: that reach their nodes later than half of it before the zero are named in a `plans_late` event.
TRAFFIC_LEAD_S = 0.5
#: After the last publisher stops, how long subscribers keep listening for messages in flight.
DRAIN_S = 1.0


class Phase:
    """One phase of a run: :meth:`run` does its job; :meth:`wanted` says whether this run has it."""

    name = ""

    def wanted(self, ctx: RunContext) -> bool:
        return True

    def run(self, ctx: RunContext) -> None:
        raise NotImplementedError


class LabPhase(Phase):
    """Nodes and links, not yet shaped; undo: the lab session's close (which also closes the management
    access of ManagementPhase)."""

    name = "lab"

    def run(self, ctx: RunContext) -> None:
        spec, session, options = ctx.spec, ctx.session, ctx.options
        ctx.progress.phase("lab", f"{session.backend.name}: {len(spec.nodes)} nodes, {len(spec.links)} links, "
                                  "then management access to each node")
        if options.machine_fit is not None:
            fit = options.machine_fit
            ctx.progress.phase("lab", f"estimate: {fit.need.describe()}; this machine has "
                                      f"{fit.machine.available_bytes / 2**20:,.0f} MiB available and "
                                      f"{fit.machine.cores} cores")
        ctx.undo_phase("teardown", session.close)
        ctx.lab = session.build()
        ctx.access = {n: session.access(n) for n in ctx.lab.nodes}
        ctx.manifest.update(backend_info=ctx.lab.info)
        if options.machine_fit is not None:  # recorded under its first name, "capacity"
            ctx.manifest.manifest.extra["capacity"] = options.machine_fit.to_json()


class ShapePhase(Phase):
    """Every direction of every link shaped as the topology says; what was installed goes to lab.json and the
    manifest. Its undo is the lab's (the links go with it)."""

    name = "shape"

    def run(self, ctx: RunContext) -> None:
        ctx.session.shape()
        lab = ctx.lab
        write_json(ctx.run / LAYOUT.lab, lab.to_json())
        ctx.manifest.update(shaping=lab.applied)
        ctx.run.events.write("orchestrator", "lab_up", nodes=len(lab.nodes), links=len(lab.links),
                             backend=lab.backend)


class ManagementPhase(Phase):
    """Management access to each node (Ansible, the metrics scraper, the admin API), after the shaping (the ssh
    backend shapes through a management access of its own). Its undo is the lab session's."""

    name = "management"

    def run(self, ctx: RunContext) -> None:
        ctx.session.start_management()
        ctx.manifest.manifest.extra["management"] = ctx.session.management.to_json()


class VerifyPhase(Phase):
    """Every link measured on the data plane against the topology (by default on the ssh backend, and on every
    backend when a link asks for impairments: delay, jitter, loss, duplicate, reorder, corrupt)."""

    name = "verify"

    def wanted(self, ctx: RunContext) -> bool:
        asked = ctx.options.verify_links
        if asked is not None:
            return asked
        return ctx.session.backend.name == "ssh" or has_impairments(ctx.lab)

    def run(self, ctx: RunContext) -> None:
        progress, allow_deviation = ctx.progress, ctx.options.allow_deviation
        progress.phase("verify", f"goodput, loss, delay and impairments of {len(ctx.lab.links)} links against "
                                 "the topology")
        verification = verify_links(ctx.lab, ctx.session.access, python_of=ctx.python_of,
                                    progress=lambda line: progress.phase("verify", line))
        ctx.manifest.update(link_verification={**verification.to_json(), "allowed_deviation": allow_deviation})
        if not verification.ok:
            if not allow_deviation:
                verification.raise_for_deviation()
            ctx.run.events.write("orchestrator", "link_deviation", misses=verification.failures())
            progress.phase("verify", f"warning: running anyway (--allow-deviation): "
                                     f"{'; '.join(verification.failures())}")


class ClocksPhase(Phase):
    """Each node's clock offset to this machine, before the traffic (read again after it: TrafficPhase)."""

    name = "clocks"

    def run(self, ctx: RunContext) -> None:
        ctx.progress.phase("clocks", "each node's clock offset to this machine")
        ctx.clocks_before = read_clocks(ctx)
        ctx.manifest.update(clocks=clocks_json(ctx.clocks_before))


class DeployPhase(Phase):
    """The router under test on every router node, each answering; undo: stop and collect the routers, then
    remove what was installed (keeping any router file collect did not bring back)."""

    name = "deploy"

    def run(self, ctx: RunContext) -> None:
        from testbed.deploy.deployer import Deployer

        spec, driver, options = ctx.spec, ctx.driver, ctx.options
        ready_s = options.ready_timeout_s or ready_timeout_s(options.machine_fit)
        deployer = Deployer(spec, ctx.lab, ctx.run.path, ctx.session.management,
                            install_dirs={n: a.work_dir for n, a in ctx.access.items()}, start_timeout_s=ready_s,
                            driver=driver)
        ctx.deployer = deployer
        how = "once for this machine" if deployer.machine_entries is not None else "node by node"
        ctx.progress.phase("deploy", f"{driver.name} routers on {len(spec.routers())} nodes with Ansible, {how}; "
                                     f"each must answer within {ready_s:g} s (--ready-timeout)")
        deployer.cancel = lambda: ctx.guard.armed and ctx.guard.pending
        ctx.undo("node install folders", _remove_install_dirs, deployer, ctx.access, ctx.run)
        ctx.undo_phase("collect", _stop_and_collect, deployer, ctx.manifest)
        with ctx.guard.deferred():  # ansible-runner is cancelled through its own API, not interrupted
            ctx.endpoints = deployer.deploy()
        ctx.manifest.manifest.extra["deploy_timings"] = dict(deployer.timings)
        ctx.manifest.manifest.extra["ports"] = asdict(deployer.ports)  # what a capture's reader decodes on
        ctx.run.events.write("orchestrator", "routers_up", nodes=sorted(ctx.endpoints))


class CapturePhase(Phase):
    """tcpdump on the captured links' interfaces and the metrics scraper; undo: stop both."""

    name = "capture"

    def run(self, ctx: RunContext) -> None:
        run, spec = ctx.run, ctx.spec
        targets = capture_targets(ctx.lab, spec.captured_links(), run / LAYOUT.pcap_dir, ctx.access.__getitem__)
        ctx.progress.phase("capture", f"tcpdump on {len(targets)} interfaces")
        captures = Captures(targets, spec.capture.snaplen, run / LAYOUT.captures)
        ctx.undo("capture stop", captures.stop)
        captures.start()
        scraped = {n: e.metrics_url for n, e in ctx.endpoints.items() if e.metrics_url is not None}
        if scraped:
            scraper = MetricsScraper(scraped, run / LAYOUT.metrics_dir, ctx.options.scrape_interval_s)
            ctx.undo("metrics scraper stop", scraper.stop)
            scraper.start()
        else:
            run.events.write("orchestrator", "metrics_not_available", driver=ctx.driver.name)


class TrafficPhase(Phase):
    """The traffic plan's processes on their nodes and the scenario on the run clock, until the end and the
    drain; then the clocks read again and the counts. Undo: stop the traffic, fetch its logs."""

    name = "traffic"

    def run(self, ctx: RunContext) -> None:
        from testbed.trafficplanner import argv_for, env_for, plan_traffic

        spec, run, access, deployer, progress = ctx.spec, ctx.run, ctx.access, ctx.deployer, ctx.progress
        clients = {n: _host_port(e.client_address) for n, e in ctx.endpoints.items()}
        # the processes and their command lines; the run clock's zero is set once those launched now run
        unset = plan_traffic(spec, run.path, 0, clients, node_log_dir=lambda n: _traffic_dir(access[n]),
                             client=ctx.driver.client)
        runner = TrafficRunner()
        nodes_with_traffic = sorted({p.node for p in unset.processes})
        ctx.undo("traffic logs", _fetch_traffic_logs, {n: access[n] for n in nodes_with_traffic}, run / LAYOUT.traffic_dir)
        ctx.undo("traffic stop", runner.stop_all)
        processes, node_plans = {}, {}
        for p in unset.processes:
            node_plans[p.name] = f"{_traffic_dir(access[p.node])}/{LAYOUT.in_traffic_dir(LAYOUT.plan(p.name))}"
            processes[p.name] = TrafficProcess(
                p.name, p.node, access[p.node],
                argv_for(p, node_plans[p.name], ctx.python_of(p.node), deployer.code_dirs[p.node],
                         wait_for_plan_s=PLAN_WAIT_S),
                f"{_traffic_dir(access[p.node])}/{LAYOUT.process_stdout_name(p.name)}", env_for(deployer.code_dirs[p.node]),
                role=p.role, flow_names=tuple(p.flows), stop_timeout_s=STOP_TIMEOUT_S + p.drain_ns / 1e9)
        # a plan an earlier run left where this run's go (its folder not removed) must not be taken for this one's
        stale: dict = {}
        for p in unset.processes:
            stale.setdefault(p.node, []).append(node_plans[p.name])
        _in_parallel(lambda node: access[node].run(["rm", "-f", *stale[node]]), sorted(stale))
        started = time.monotonic()
        now = [processes[p.name] for p in unset.launch_order() if p.start_at_ns == 0]
        _in_parallel(runner.start, now)  # none acts before its plan is there: the order does not matter
        launch_s = time.monotonic() - started
        _wait_until_started(now)
        running_s = time.monotonic() - started
        t0 = time.time_ns() + int((TRAFFIC_LEAD_S + 2 * launch_s) * 1e9)
        ctx.manifest.update(traffic_start_ns=t0)
        plan = unset.starting_at(t0)
        plan.write_flows(run / LAYOUT.flows)
        plan_paths = plan.write_plans(run / LAYOUT.plans_dir)
        delivering = time.monotonic()
        _deliver_plans(access, {p.name: p.node for p in plan.processes}, plan_paths, node_plans)
        left_ns = t0 - time.time_ns()
        ctx.manifest.manifest.extra["traffic_start"] = {
            "launch_s": round(launch_s, 3), "running_s": round(running_s, 3),
            "delivery_s": round(time.monotonic() - delivering, 3), "left_s": round(left_ns / 1e9, 3)}
        if left_ns < TRAFFIC_LEAD_S / 2 * 1e9:
            run.events.write("orchestrator", "plans_late", left_ns=left_ns)
        items: list = list(spec.scenario)
        for p in plan.launch_order():
            if p.start_at_ns > 0:
                items.append(TrafficLaunch(p.start_at_ns, "launch_traffic", p.name))
            if p.stop_at_ns is not None:
                items.append(TrafficLaunch(p.stop_at_ns, "stop_traffic", p.name))
        _wait_for_receivers(run, plan, runner, access, t0)
        actions = ScenarioActions(spec, LinkControl(ctx.lab, ctx.session.backend, ctx.caps,
                                                    allow_missing=ctx.options.allow_missing),
                                  runner, processes, plan, RouterControl(deployer))
        watch = TrafficWatch({f.name: list(f.subscribers) for f in plan.pubsub_flows()},
                             {f.name: f.publisher for f in plan.pubsub_flows()},
                             lambda node, names: _line_counts(access[node], names))
        end = t0 + ctx.duration_ns
        progress.phase("traffic", f"{len(plan.processes)} traffic processes, {len(spec.scenario)} scenario "
                                  f"events, {ctx.duration_ns / 1e9:g} s")

        def tick() -> None:
            raise_on_lab_faults(ctx)
            progress.status("traffic", max(0.0, (end - time.time_ns()) / 1e9), watch.latest)

        watch.start_polling()
        ctx.teardown.callback(watch.stop_polling)
        timeline = Timeline(items, actions, run.events)
        timeline.run(t0, end + int(DRAIN_S * 1e9), tick=tick)
        for item in timeline.pending:
            run.events.write(item.source if isinstance(item, TrafficLaunch) else "scenario", "skipped",
                             action=item.action, at_ns=item.at, reason="after the end of the run")
        runner.stop_all()
        try:  # the traffic is done: a clock that cannot be read again costs the reading, not the run
            clocks_after = read_clocks(ctx)
            ctx.manifest.update(clocks=clocks_json(ctx.clocks_before, clocks_after))
        except ClockError as exc:
            run.events.write("orchestrator", "clocks_unread", when="after", error=str(exc))
            progress.phase("clocks", f"warning: the clocks could not be read after the traffic: {exc}")
        counts = watch.counts()
        ctx.manifest.manifest.extra["traffic"] = {"sent": counts.sent, "expected": counts.expected,
                                                  "delivered": counts.delivered, "exit_codes": runner.exit_codes()}
        progress.phase("traffic done", f"sent {counts.sent}, delivered {counts.delivered} of "
                                       f"{counts.expected} expected")


#: every phase of `testbed run`, in order
RUN_PHASES: tuple[Phase, ...] = (LabPhase(), ShapePhase(), ManagementPhase(), VerifyPhase(), ClocksPhase(),
                                 DeployPhase(), CapturePhase(), TrafficPhase())


class LabFaulted(RuntimeError):
    """A part of the lab died during the traffic (testbed.backends.base.LabFault): the run cannot go on."""


def raise_on_lab_faults(ctx: RunContext) -> None:
    """End the run (LabFaulted, naming each part and where its log is) if a part of its lab died; each one's log
    is copied into the results folder first (the lab's removal takes it)."""
    faults = ctx.session.backend.faults(ctx.lab)
    if not faults:
        return
    said = []
    for fault in faults:
        rel = LAYOUT.fault_log(fault.part)
        try:
            (ctx.run / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(fault.log, ctx.run / rel)
            said.append(f"{fault.what} during the traffic; its log: {rel} in the results folder")
        except (OSError, TypeError):  # no log, or gone already
            said.append(f"{fault.what} during the traffic" + (f"; its log was {fault.log}" if fault.log else ""))
    ctx.run.events.write("orchestrator", "lab_fault", parts=[f.part for f in faults], error="; ".join(said))
    raise LabFaulted("; ".join(said))


def read_clocks(ctx: RunContext) -> dict:
    """Every node's clock offset, said in one progress line (largest error bound)."""
    readings = ctx.session.backend.clocks(ctx.lab)
    measured = [r for r in readings.values() if r.method != "same-host"]
    if measured:
        worst = max(measured, key=lambda r: r.bound_ns)
        ctx.progress.phase("clocks", f"{len(measured)} nodes measured "
                                     f"({', '.join(sorted({r.method for r in measured}))}); "
                                     f"largest error bound {worst.bound_ns / 1e3:.0f} us ({worst.node})")
    return readings


def ready_timeout_s(fit: Optional[Fit]) -> float:
    """How long a router may take to answer after its start, by default: 30 s, or three times the estimated
    time all routers take to start together on this machine's cores when that is longer."""
    if fit is None:
        return 30.0
    return float(max(30, round(3 * fit.start_wall_s())))


def _traffic_dir(access) -> str:
    """Where a node's traffic processes keep their plans and logs, as the run's traffic/ folder: it is fetched
    into it. ``LAYOUT``'s paths below ``traffic/`` are the same on the node."""
    return node_results_dir(access, LAYOUT.traffic_dir)


def _fetch_traffic_logs(accesses: dict, dest: Path) -> None:
    errors = []
    for node, access in accesses.items():
        try:
            access.fetch(_traffic_dir(access), dest)
        except OSError as exc:
            errors.append(f"{node}: {exc}")
    if errors:
        raise RuntimeError("; ".join(errors))


def _line_counts(access, names: list[str]) -> dict[str, int]:
    """Complete lines of each of the node's traffic logs ``names`` (files not there yet: not listed)."""
    out = access.run(["sh", "-c", 'cd "$1" 2>/dev/null && shift && wc -l -- "$@" 2>/dev/null; true', "sh",
                      _traffic_dir(access), *names], check=False, timeout=10).stdout
    counts = {}
    for line in out.splitlines():
        n, _, name = line.strip().partition(" ")
        if n.isdigit() and name in names:
            counts[name] = int(n)
    return counts


def _in_parallel(work, items: list) -> None:
    """``work(item)`` for every item at once (each through its node's access); the first error is raised."""
    if not items:
        return
    with ThreadPoolExecutor(max_workers=min(len(items), 16)) as pool:
        for future in [pool.submit(work, item) for item in items]:
            future.result()


def _wait_until_started(started: list) -> None:
    """Wait until every process of ``started`` says on stdout that it runs and waits for its plan
    (``--wait-for-plan``); one that exits first, or says nothing within TRAFFIC_START_TIMEOUT_S, ends the run."""
    waiting = {p.name: p for p in started}
    deadline = time.monotonic() + TRAFFIC_START_TIMEOUT_S
    while waiting:
        for name, p in list(waiting.items()):
            if p.access.run(["grep", "-qF", WAITING_FOR_PLAN, p.log], check=False).returncode == 0:
                del waiting[name]
            elif not p.running:
                log_rel = LAYOUT.traffic_file(LAYOUT.process_stdout_name(name))
                raise RuntimeError(f"traffic process {name} exited before it started: see {log_rel} "
                                   f"(on node {p.node}: {p.log})")
        if waiting and time.monotonic() > deadline:
            logs = ", ".join(LAYOUT.traffic_file(LAYOUT.process_stdout_name(n)) for n in sorted(waiting))
            raise RuntimeError(f"traffic processes {', '.join(sorted(waiting))} did not start within "
                               f"{TRAFFIC_START_TIMEOUT_S:g} s: see {logs}")
        time.sleep(0.02)


def _deliver_plans(access: dict, nodes: dict, local: dict, remote: dict) -> None:
    """Each process's plan onto its node, whole, as a started process reads it as soon as it is there: the plans
    of a node's folder copied as one folder beside them, then renamed into place (two commands per node, whatever
    the number of processes: what :data:`TRAFFIC_LEAD_S`'s estimate counts on), the nodes at once."""
    groups: dict = {}
    for name, node in nodes.items():
        groups.setdefault((node, str(PurePosixPath(remote[name]).parent)), []).append(name)

    def deliver(group: tuple) -> None:
        (node, folder), names = group, groups[group]
        incoming = f"{folder}/.incoming-{safe_name(node)}"
        with tempfile.TemporaryDirectory() as tmp:
            staged = Path(tmp) / "plans"
            staged.mkdir()
            for name in names:
                shutil.copyfile(local[name], staged / PurePosixPath(remote[name]).name)
            access[node].put(staged, incoming)
        access[node].run(["sh", "-c", 'in="$1"; shift; for f; do mv -f "$in/${f##*/}" "$f" || exit 1; done; '
                                      'rmdir "$in"', "sh", incoming, *(remote[name] for name in names)])

    _in_parallel(deliver, sorted(groups))


def _wait_for_receivers(run: RunDir, plan, runner: TrafficRunner, access: dict, t0: int) -> None:
    """Messages published before a subscription reaches the routers are lost, and queries sent before a
    queryable is declared find none: wait (until the run clock starts at the latest) until every
    subscriber and queryable process launched now says it is ready (``PlannedProcess.ready_line``)."""

    ready = {p.name: p.ready_line for p in plan.processes if p.ready_line and p.start_at_ns == 0}
    waiting = {p.name: p.node for p in plan.processes if p.name in ready}
    while waiting and time.time_ns() < t0:
        for name, node in list(waiting.items()):
            log = f"{_traffic_dir(access[node])}/{LAYOUT.process_log_name(name)}"
            if access[node].run(["grep", "-qF", ready[name], log], check=False).returncode == 0:
                del waiting[name]
            elif not runner.processes[name].running:
                log_rel = LAYOUT.traffic_file(LAYOUT.process_log_name(name))
                raise RuntimeError(f"traffic process {name} exited early: see {log_rel} "
                                   f"(on node {node}: {log})")
        time.sleep(0.02)
    if waiting:
        run.events.write("orchestrator", "subscribers_late", processes=sorted(waiting))


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def _remove_install_dirs(deployer, access: dict, run: RunDir) -> None:
    """Keep any router file that collect did not bring back (e.g. collect failed), fetched through
    the node's access, then remove what deployment installed."""
    from testbed.run.salvage import fetch_router_files

    for node, path in deployer.install_dirs.items():
        for fetched in fetch_router_files(access[node], path, run.node_dir(node)):
            run.events.write("orchestrator", "router_file_copied", node=node, file=fetched.rsplit("/", 1)[1])
    deployer.remove_installs(access)


def _stop_and_collect(deployer, manifest) -> None:
    try:
        deployer.stop_and_collect()  # one playbook: collects also where a stop failed
    finally:
        loops = deployer.event_loops()
        if loops:  # which event loop each router ran on (router/eventloop.py)
            manifest.manifest.extra["router_event_loops"] = loops
            manifest.save()

