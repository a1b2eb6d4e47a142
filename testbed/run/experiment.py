"""One experiment, as data flows in DESIGN.md: lab -> management -> deploy -> capture ->
traffic + scenario (+ metrics) -> collect -> teardown, into a complete results folder.

Whatever happens — a failed phase, Ctrl-C, SIGTERM — everything that was set up is
taken down again in reverse order, the manifest says how the run ended, and every file
already written stays.
"""
from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from testbed import kernel
from testbed.backends import BackendOptions
from testbed.clocks import ClockError, clocks_json
from testbed.lab.session import LabSession
from testbed.links.verify import verify_links
from testbed.links.control import LinkControl, apply_set_link
from testbed.run.capture import Captures, capture_targets
from testbed.run.manifest import Manifest, ManifestWriter
from testbed.run.progress import Progress, TrafficWatch
from testbed.run.rundir import RunDir, new_run_id, node_results_dir, write_json
from testbed.run.scenario import Timeline
from testbed.run.scraper import MetricsScraper
from testbed.run.signals import Interrupted, interrupt_guard
from testbed.run.traffic import STOP_TIMEOUT_S, TrafficProcess, TrafficRunner

#: Time between the end of set-up and the run clock's zero, so every traffic process is waiting.
TRAFFIC_LEAD_S = 3.0
#: After the last publisher stops, how long subscribers keep listening for messages in flight.
DRAIN_S = 1.0


@dataclass
class RunOptions:
    results_root: Path = Path("results")
    allow_missing: bool = False
    scrape_interval_s: float = 1.0
    duration_s: Optional[float] = None  # override the spec's duration
    #: the backend and its options, resolved from the command line and the topology (None: the topology's)
    backend: Optional[BackendOptions] = None
    #: measure every link on the data plane against the topology before traffic (None: on the ssh backend only)
    verify_links: Optional[bool] = None
    allow_deviation: bool = False  # a link that misses is a warning, not an error
    #: seconds each router may take to answer after its start (None: from the estimate, at least 30)
    ready_timeout_s: Optional[float] = None
    #: what the run needs of this machine (testbed.machinefit.Fit; None on lab machines)
    capacity: Optional[Any] = None
    #: what a shortened run leaves out of the topology (testbed.spec.shortened.Shortening): recorded in the
    #: manifest, where the check finds the expectations it cannot measure
    shortened: Optional[Any] = None


@dataclass
class RunOutcome:
    run_dir: Path
    status: str  # completed | failed | interrupted
    error: Optional[str]
    teardown_errors: tuple[str, ...] = ()
    #: the run failed on its input, not on the machine: a router exited at its start (exit 2)
    bad_input: bool = False


@dataclass(frozen=True)
class TrafficLaunch:
    """An internal timeline item: start or stop a traffic process at a time of the run clock."""

    at: int
    action: str  # launch_traffic | stop_traffic
    process: str
    source: str = "orchestrator"


class RouterControl:
    """The routers during the run: kill and restart them (scenario kill_router / restart_router, over
    SSH), and tell them of a link's new bandwidth (scenario set_link, over their admin API)."""

    def __init__(self, deployer):
        self.deployer = deployer
        #: (sending router, link index) -> (link, bandwidth) set since deployment: a restarted router,
        #: which starts from the capacities in its config file, is told them again
        self.told: dict[tuple[str, int], tuple] = {}

    def kill(self, node: str) -> int:
        self.deployer.kill_router(node)
        return time.time_ns()

    def restart(self, node: str) -> int:
        self.deployer.restart_router(node)  # returns once the router is ready (its driver's readiness check)
        ts = time.time_ns()
        for (sender, _), (link, bw_bps) in list(self.told.items()):
            if sender == node:
                self.tell_link_bandwidth(link, bw_bps, node)
        return ts

    def tell_link_bandwidth(self, link, bw_bps, sender: Optional[str]) -> list:
        """Tell the routers that send on ``link`` (``sender``, or both ends) its new bandwidth (admin API).

        A router that cannot be told (e.g. killed by the scenario, or a driver without our admin API)
        is reported, not fatal: the link's shaping has changed all the same, and the event says which
        router did not hear of it and why.
        """
        from testbed.deploy.routeradmin import tell_routers

        driver = self.deployer.driver
        if driver.features.admin:
            for end in ([link.a.node, link.b.node] if sender is None else [sender]):
                self.told[(end, link.index)] = (link, bw_bps)  # also for a router down now: told when it restarts
        return tell_routers(self.deployer.endpoints() if driver.features.admin else {}, link, bw_bps, sender,
                            driver=driver.name, admin=driver.features.admin)


class ScenarioActions:
    """Carries out the timeline: the scenario's events, and the launch/stop of traffic processes."""

    def __init__(self, spec, links: LinkControl, traffic: TrafficRunner, processes: dict[str, TrafficProcess],
                 plan, routers: RouterControl):
        self.spec, self.links, self.traffic, self.processes = spec, links, traffic, processes
        self.plan, self.routers = plan, routers

    def apply(self, event) -> dict:
        action = event.action
        if action == "launch_traffic":
            self.traffic.start(self.processes[event.process])
            return {"process": event.process}
        if action == "stop_traffic":
            self.traffic.signal_stop(event.process)  # reaped at the end; the timeline goes on
            return {"process": event.process}
        if action == "set_link":
            index = self.spec.link_index(event.link)
            ts, changes, plans = apply_set_link(self.links, index, event)
            dropped = sorted({feature for plan in plans for feature in plan.dropped})
            told = []
            if "bw_bps" in changes:  # the routers' congestion monitors must decide against the new capacity
                told = [asdict(u) for u in self.routers.tell_link_bandwidth(self.links.lab.find_link(index),
                                                                             changes["bw_bps"], event.node)]
            return {"ts_ns": ts, "link": index, "node": event.node, **changes, "left_out": dropped,
                    "routers_told": told}
        if action in ("link_down", "link_up"):
            index = self.spec.link_index(event.link)
            ts = self.links.link_down(index) if action == "link_down" else self.links.link_up(index)
            return {"ts_ns": ts, "link": index}
        if action in ("start_flow", "stop_flow"):
            # Publishers follow their plan: the flow switches exactly at this time of the run clock.
            control = next((c for c in self.plan.controls if c.at_ns == event.at and c.action == action
                            and c.flow == event.flow), None)
            return {"flow": event.flow, "flows": list(control.flows) if control else [],
                    "processes": list(control.processes) if control else []}
        if action in ("kill_router", "restart_router"):
            ts = self.routers.kill(event.node) if action == "kill_router" else self.routers.restart(event.node)
            return {"ts_ns": ts, "node": event.node}
        raise ValueError(f"unknown scenario action {action!r}")


def _best_effort(manifest: ManifestWriter, run: RunDir, what: str, fn, *args) -> None:
    """A teardown step: run it, and if it fails, record why and carry on with the others."""
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - teardown must go on
        message = f"{what}: {exc}"
        manifest.manifest.extra.setdefault("teardown_errors", []).append(message)
        run.events.write("orchestrator", "teardown_error", step=what, error=str(exc))
        try:
            print(f"warning: {message}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass


def run_experiment(spec, spec_file: Path, caps: kernel.KernelCapabilities, options: RunOptions,
                   progress: Progress) -> RunOutcome:
    """Run one experiment; never raises for what happens after the results folder exists."""
    from testbed.deploy.deployer import Deployer
    from testbed.deploy.runner import DeployError
    from testbed.drivers import driver_for
    from testbed.spec.cli_validate import resolved_json
    from testbed.trafficplan import argv_for, env_for, plan_traffic

    if options.duration_s:
        spec = spec.model_copy(update={"duration": int(options.duration_s * 1e9)})
    duration_ns = int(spec.duration)
    driver = driver_for(spec)
    run = RunDir(options.results_root, new_run_id(spec.name))
    session = LabSession(spec, caps, allow_missing=options.allow_missing, backend=options.backend,
                         spec_path=str(spec_file), management=True, run_dir=str(run.path.resolve()))
    chosen = session.options
    run.copy_topology(spec_file)
    manifest = ManifestWriter(run / "manifest.json", Manifest(
        run.run_id, str(spec_file), {k: v for k, v in resolved_json(spec).items() if k != "ok"},
        session.backend.name, capabilities=caps.to_json(),
        options={"allow_missing": options.allow_missing, "scrape_interval_s": options.scrape_interval_s,
                 "duration_ns": duration_ns, "backend": chosen.name, "image": chosen.image,
                 "inventory": chosen.inventory, "keep_addresses": chosen.keep_addresses,
                 "host_key_checking": chosen.check_host_keys, "verify_links": options.verify_links,
                 "allow_deviation": options.allow_deviation}))
    manifest.update(router_driver=driver.describe(spec))
    if options.shortened is not None:
        manifest.manifest.extra["shortened"] = options.shortened.to_json()
    progress.phase("results", str(run.path))
    ignored = driver.settings_ignored(spec)
    if ignored:
        progress.phase("router", f"warning: the {driver.name} driver does not apply these router settings of the "
                                 f"topology: {', '.join(ignored)} (recorded in manifest.json router_driver)")
    status, error, bad_input = "failed", None, False
    with interrupt_guard() as guard, ExitStack() as teardown:
        try:
            with manifest.phase("lab"):
                progress.phase("lab", f"{session.backend.name}: {len(spec.nodes)} nodes, {len(spec.links)} links, "
                                      "then management access to each node")
                if options.capacity is not None:
                    cap = options.capacity
                    progress.phase("lab", f"estimate: {cap.need.describe()}; this machine has "
                                          f"{cap.machine.available_bytes / 2**20:,.0f} MiB available and "
                                          f"{cap.machine.cores} cores")
                teardown.callback(_phase_step, manifest, run, progress, "teardown", session.close)
                lab = session.open()
                access = {n: session.access(n) for n in lab.nodes}

                def python_of(node: str) -> str:  # the node's python3, as its management access says
                    return session.management.inventory_vars(node).get("ansible_python_interpreter", "python3")

                write_json(run / "lab.json", lab.to_json())
                manifest.update(shaping=lab.applied, backend_info=lab.info)
                manifest.manifest.extra["management"] = session.management.to_json()
                if options.capacity is not None:
                    manifest.manifest.extra["capacity"] = options.capacity.to_json()
                run.events.write("orchestrator", "lab_up", nodes=len(lab.nodes), links=len(lab.links),
                                 backend=lab.backend)

            if options.verify_links if options.verify_links is not None else session.backend.name == "ssh":
                with manifest.phase("verify"):
                    progress.phase("verify", f"goodput, loss and delay of {len(lab.links)} links against the "
                                             "topology")
                    verification = verify_links(lab, session.access, python_of=python_of,
                                                progress=lambda line: progress.phase("verify", line))
                    manifest.update(link_verification={**verification.to_json(),
                                                       "allowed_deviation": options.allow_deviation})
                    if not verification.ok:
                        if not options.allow_deviation:
                            verification.raise_for_deviation()
                        run.events.write("orchestrator", "link_deviation", misses=verification.failures())
                        progress.phase("verify", f"warning: running anyway (--allow-deviation): "
                                                 f"{'; '.join(verification.failures())}")

            with manifest.phase("clocks"):
                progress.phase("clocks", "each node's clock offset to this machine")
                clocks_before = _read_clocks(session.backend, lab, progress)
                manifest.update(clocks=clocks_json(clocks_before))

            with manifest.phase("deploy"):
                ready_s = options.ready_timeout_s or ready_timeout_s(options.capacity)
                deployer = Deployer(spec, lab, run.path, session.management,
                                    install_dirs={n: a.work_dir for n, a in access.items()}, start_timeout_s=ready_s,
                                    driver=driver)
                how = "once for this machine" if deployer.machine_entries is not None else "node by node"
                progress.phase("deploy", f"{driver.name} routers on {len(spec.routers())} nodes with Ansible, {how}; "
                                         f"each must answer within {ready_s:g} s (--ready-timeout)")
                deployer.cancel = lambda: guard.armed and guard.pending
                teardown.callback(_best_effort, manifest, run, "node install folders", _remove_install_dirs,
                                  deployer, access, run)
                teardown.callback(_phase_step, manifest, run, progress, "collect", _stop_and_collect, deployer)
                with guard.deferred():  # ansible-runner is cancelled through its own API, not interrupted
                    endpoints = deployer.deploy()
                manifest.manifest.extra["deploy_timings"] = dict(deployer.timings)
                run.events.write("orchestrator", "routers_up", nodes=sorted(endpoints))

            with manifest.phase("capture"):
                targets = capture_targets(lab, spec.captured_links(), run / "pcap", access.__getitem__)
                progress.phase("capture", f"tcpdump on {len(targets)} interfaces")
                captures = Captures(targets, spec.capture.snaplen, run / "pcap" / "capture.json")
                teardown.callback(_best_effort, manifest, run, "capture stop", captures.stop)
                captures.start()
                scraped = {n: e.metrics_url for n, e in endpoints.items() if e.metrics_url is not None}
                if scraped:
                    scraper = MetricsScraper(scraped, run / "metrics", options.scrape_interval_s)
                    teardown.callback(_best_effort, manifest, run, "metrics scraper stop", scraper.stop)
                    scraper.start()
                else:
                    run.events.write("orchestrator", "metrics_not_available", driver=driver.name)

            with manifest.phase("traffic"):
                t0 = time.time_ns() + int(TRAFFIC_LEAD_S * 1e9)
                manifest.update(traffic_start_ns=t0)
                clients = {n: _host_port(e.client_address) for n, e in endpoints.items()}
                plan = plan_traffic(spec, run.path, t0, clients, node_log_dir=lambda n: _traffic_dir(access[n]),
                                    client=driver.client)
                plan.write_flows(run / "traffic" / "flows.json")
                plan_paths = plan.write_plans(run / "traffic" / "plans")
                runner = TrafficRunner()
                nodes_with_traffic = sorted({p.node for p in plan.processes})
                teardown.callback(_best_effort, manifest, run, "traffic logs", _fetch_traffic_logs,
                                  {n: access[n] for n in nodes_with_traffic}, run / "traffic")
                teardown.callback(_best_effort, manifest, run, "traffic stop", runner.stop_all)
                processes = {}
                for p in plan.processes:
                    node_plan = f"{_traffic_dir(access[p.node])}/plans/{p.name}.json"
                    access[p.node].put(plan_paths[p.name], node_plan)
                    processes[p.name] = TrafficProcess(
                        p.name, p.node, access[p.node], argv_for(p, node_plan, python_of(p.node), deployer.code_dirs[p.node]),
                        f"{_traffic_dir(access[p.node])}/{p.name}.stdout", env_for(deployer.code_dirs[p.node]),
                        role=p.role, flow_names=tuple(p.flows), stop_timeout_s=STOP_TIMEOUT_S + p.drain_ns / 1e9)
                items: list = list(spec.scenario)
                for p in plan.launch_order():
                    if p.start_at_ns > 0:
                        items.append(TrafficLaunch(p.start_at_ns, "launch_traffic", p.name))
                    else:
                        runner.start(processes[p.name])
                    if p.stop_at_ns is not None:
                        items.append(TrafficLaunch(p.stop_at_ns, "stop_traffic", p.name))
                _wait_for_receivers(run, plan, runner, access, t0)
                actions = ScenarioActions(spec, LinkControl(lab, session.backend, caps,
                                                            allow_missing=options.allow_missing),
                                          runner, processes, plan, RouterControl(deployer))
                watch = TrafficWatch({f.name: list(f.subscribers) for f in plan.pubsub_flows()},
                                     {f.name: f.publisher for f in plan.pubsub_flows()},
                                     lambda node, names: _line_counts(access[node], names))
                end = t0 + duration_ns
                progress.phase("traffic", f"{len(plan.processes)} traffic processes, {len(spec.scenario)} scenario "
                                          f"events, {duration_ns / 1e9:g} s")

                def tick() -> None:
                    progress.status("traffic", max(0.0, (end - time.time_ns()) / 1e9), watch.latest)

                watch.start_polling()
                teardown.callback(watch.stop_polling)
                timeline = Timeline(items, actions, run.events)
                timeline.run(t0, end + int(DRAIN_S * 1e9), tick=tick)
                for item in timeline.pending:
                    run.events.write(getattr(item, "source", "scenario"), "skipped", action=item.action,
                                     at_ns=item.at, reason="after the end of the run")
                runner.stop_all()
                try:  # the traffic is done: a clock that cannot be read again costs the reading, not the run
                    clocks_after = _read_clocks(session.backend, lab, progress)
                    manifest.update(clocks=clocks_json(clocks_before, clocks_after))
                except ClockError as exc:
                    run.events.write("orchestrator", "clocks_unread", when="after", error=str(exc))
                    progress.phase("clocks", f"warning: the clocks could not be read after the traffic: {exc}")
                counts = watch.counts()
                manifest.manifest.extra["traffic"] = {"sent": counts.sent, "expected": counts.expected,
                                                      "delivered": counts.delivered,
                                                      "exit_codes": runner.exit_codes()}
                progress.phase("traffic done", f"sent {counts.sent}, delivered {counts.delivered} of "
                                               f"{counts.expected} expected")
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
                teardown.close()
            finally:
                manifest.finish(status, error)
                run.events.close()
    return RunOutcome(run.path, status, error, tuple(manifest.manifest.extra.get("teardown_errors", ())),
                      bad_input=bad_input)


def _read_clocks(backend, lab, progress: Progress) -> dict:
    """Every node's clock offset, said in one progress line (largest error bound)."""
    readings = backend.clocks(lab)
    measured = [r for r in readings.values() if r.method != "same-host"]
    if measured:
        worst = max(measured, key=lambda r: r.bound_ns)
        progress.phase("clocks", f"{len(measured)} nodes measured ({', '.join(sorted({r.method for r in measured}))}); "
                                 f"largest error bound {worst.bound_ns / 1e3:.0f} us ({worst.node})")
    return readings


def ready_timeout_s(capacity) -> float:
    """How long a router may take to answer after its start, by default: 30 s, or three times the estimated
    time all routers take to start together on this machine's cores when that is longer."""
    if capacity is None:
        return 30.0
    return float(max(30, round(3 * capacity.start_wall_s())))


def _traffic_dir(access) -> str:
    """Where a node's traffic processes keep their plans and logs (fetched into the run's traffic/)."""
    return node_results_dir(access, "traffic")


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


def _wait_for_receivers(run: RunDir, plan, runner: TrafficRunner, access: dict, t0: int) -> None:
    """Messages published before a subscription reaches the routers are lost, and queries sent before a
    queryable is declared find none: wait (until the run clock starts at the latest) until every
    subscriber and queryable process launched now says it is ready (``PlannedProcess.ready_line``)."""
    from traffic.logs import process_log_name

    ready = {p.name: p.ready_line for p in plan.processes if p.ready_line and p.start_at_ns == 0}
    waiting = {p.name: p.node for p in plan.processes if p.name in ready}
    while waiting and time.time_ns() < t0:
        for name, node in list(waiting.items()):
            log = f"{_traffic_dir(access[node])}/{process_log_name(name)}"
            if access[node].run(["grep", "-qF", ready[name], log], check=False).returncode == 0:
                del waiting[name]
            elif not runner.processes[name].running:
                raise RuntimeError(f"traffic process {name} exited early: see traffic/{process_log_name(name)} "
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


def _stop_and_collect(deployer) -> None:
    try:
        deployer.stop()
    finally:
        deployer.collect()


def _phase_step(manifest: ManifestWriter, run: RunDir, progress: Progress, name: str, fn, *args) -> None:
    try:
        progress.phase(name)
        with manifest.phase(name):
            fn(*args)
    except BaseException as exc:  # noqa: BLE001
        _best_effort(manifest, run, name, _raise, exc)


def _raise(exc: BaseException) -> None:
    raise exc
