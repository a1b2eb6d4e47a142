"""Deploy the router on every node of a lab with ansible-runner and the playbooks in ``playbooks/``.

    session = LabSession(spec, management=True); lab = session.open()
    deployer = Deployer(spec, lab, run_dir, session.management,
                        install_dirs={n: session.access(n).work_dir for n in lab.nodes})
    endpoints = deployer.deploy()       # bundle + configs + start + metrics answer
    ...                                 # traffic, scenario, scrape endpoints[node].metrics_url
    deployer.stop(); deployer.collect() # routers stopped; logs in run_dir/nodes/<node>/
                                        # (or both in one playbook run: deployer.stop_and_collect())

Nodes that share this machine's files and process IDs (a Mininet lab; ``management.machine_entries()``)
are deployed once per machine (``playbooks/*-machine.yml``): the bundle unpacked once into a code folder
they share, every router started and waited for by one process. Other nodes (containers, lab machines)
get the per-node playbooks. ``share_machine=False`` forces the per-node ones.

A failed task raises :class:`~testbed.deploy.runner.DeployError` naming the host and task.
Ansible's artifacts (stdout, job events) go to ``<run_dir>/ansible/NN-<step>/artifacts/``; the inventory,
the bundle and ``endpoints.json`` to ``<run_dir>/ansible/``.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from runfolder.layout import LAYOUT
from testbed.deploy.inventory import lab_inventory, write_inventory
from testbed.drivers.routerconfig import RouterPorts, new_admin_token
from testbed.deploy.runner import DeployError, PlaybookResult, TaskFailure, run_playbook
from testbed.drivers import NodeContext, NodeLaunch, RouterDriver, driver_for

#: Where the router is installed on a node when the caller names no folder: <root>/<lab>/<node> (the
#: namespace backends' node folder, so that `testbed clean` finds what a crash left there).
DEFAULT_INSTALL_ROOT = "/var/lib/testbed/nodes"


@dataclass(frozen=True)
class RouterEndpoint:
    """How to reach a deployed router (for the metrics scraper, traffic and the admin API)."""

    node: str
    mgmt_ip: str
    metrics_url: Optional[str]  # http://<mgmt ip>:<port>/metrics, reachable from the controller; None: no metrics
    admin_url: Optional[str]  # http://<mgmt ip>:<port>/admin (GET /admin/state, /linkstate, /routes); None: no admin API
    admin_token: str  # send as "Authorization: Bearer <token>"
    client_address: str  # 127.0.0.1:<port>, inside the node's namespace
    install_dir: str  # on the node: router.pid, router.log, launch.json and its files (e.g. router.json)


class Deployer:
    """Deploys, stops and collects the routers of one run, through the run's router driver
    (``driver``; default: the topology's ``router:``).

    ``launches`` (node -> :class:`NodeLaunch`) says how each router is started. With our router it
    follows ``configs`` (node -> router config dict), which may be changed before :meth:`deploy`
    (e.g. a test breaking one node's setting).
    """

    def __init__(self, spec, lab, run_dir: Path, management, *, install_dirs: Optional[dict[str, str]] = None,
                 install_root: str = DEFAULT_INSTALL_ROOT,
                 ports: RouterPorts = RouterPorts(), bundle_cache: Optional[Path] = None,
                 timeout_s: float = 600.0, start_timeout_s: float = 30.0, share_machine: bool = True,
                 driver: Optional[RouterDriver] = None):
        self.spec = spec
        self.driver = driver if driver is not None else driver_for(spec)
        self.lab = lab
        self.run_dir = Path(run_dir)
        self.management = management
        self.ports = ports
        self.bundle_cache = Path(bundle_cache) if bundle_cache is not None else None
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.ansible_dir = self.run_dir / LAYOUT.ansible_dir
        self.nodes_dir = self.run_dir / LAYOUT.nodes_dir
        self.admin_token = new_admin_token()
        hosts = management.hosts
        self.install_dirs = dict(install_dirs) if install_dirs is not None else \
            {n: f"{install_root.rstrip('/')}/{lab.name}/{n}" for n in hosts}
        self.routers = [n for n in spec.routers() if n in hosts]
        missing = [n for n in spec.routers() if n not in hosts]
        if missing:
            raise ValueError(f"no management access to router node(s) {', '.join(missing)}")
        self.contexts = {n: NodeContext(n, hosts[n], self.install_dirs[n], self.admin_token, ports.router,
                                        ports.client, ports.metrics) for n in self.routers}
        self.configs: dict[str, dict[str, Any]] = {n: self.driver.config(spec, lab, ctx)
                                                   for n, ctx in self.contexts.items()} if self.driver.configurable else {}
        self._launches: dict[str, NodeLaunch] = (
            {} if self.configs else {n: self.driver.launch(spec, lab, ctx) for n, ctx in self.contexts.items()})
        #: node -> argv prefix into the node, when all nodes share this machine (deployed once for the machine)
        self.machine_entries: Optional[dict[str, list[str]]] = management.machine_entries() if share_machine else None
        if self.machine_entries is not None and self.install_dirs:
            common = os.path.commonpath(list(self.install_dirs.values()))
            shared = f"{os.path.dirname(common) if len(self.install_dirs) == 1 else common}/.code"
            #: node -> where router/, traffic/ and nodectl.py are on the node
            self.code_dirs = {n: shared for n in self.install_dirs}
        else:
            self.code_dirs = dict(self.install_dirs)
        self.inventory_path = self.ansible_dir / "inventory.json"
        self.machine_plan_path = self.ansible_dir / "machine-plan.json"
        self.bundle_path = self.ansible_dir / "bundle" / "testbed-bundle.tar.gz"
        self.timings: dict[str, float] = {}
        self.results: list[PlaybookResult] = []
        self._runs = 0

    # -- what the orchestrator uses --------------------------------------------------

    @property
    def launches(self) -> dict[str, NodeLaunch]:
        """node -> how nodectl.py starts its router; with our router, from ``configs`` as they are now."""
        if self.configs:
            return {n: self.driver.launch_for(cfg) for n, cfg in self.configs.items()}
        return self._launches

    #: polled during playbook runs; returning True stops the playbook (e.g. Ctrl-C during deploy)
    cancel: Optional[Callable[[], bool]] = None

    def endpoints(self) -> dict[str, RouterEndpoint]:
        out = {}
        for node in self.routers:
            ip = self.management.hosts[node]
            admin = f"http://{ip}:{self.ports.metrics}/admin" if self.driver.features.admin else None
            out[node] = RouterEndpoint(node, ip, self.driver.metrics_url(self.contexts[node]), admin, self.admin_token,
                                       f"127.0.0.1:{self.ports.client}", self.install_dirs[node])
        return out

    def prepare(self) -> None:
        """Build the bundle, write every router config and the inventory (no contact with nodes)."""
        t0 = time.monotonic()
        import testbed.deploy.bundle as bundle_mod  # lazily: `python -m testbed.deploy.bundle` stays clean

        bundle_mod.build_bundle(self.bundle_path, self.bundle_cache or bundle_mod.DEFAULT_CACHE,
                                packages=self.driver.packages, distributions=self.driver.distributions,
                                extra=self.driver.ship(), optional=self.driver.optional_distributions)
        self.timings["bundle_s"] = time.monotonic() - t0
        for node, launch in self.launches.items():
            d = self.nodes_dir / node
            d.mkdir(parents=True, exist_ok=True)
            for name, text in launch.files.items():
                (d / name).write_text(text)
            (d / LAYOUT.launch_name).write_text(json.dumps(launch.to_json(), indent=2) + "\n")
        inventory = lab_inventory(self.lab, self.management, self.install_dirs, self.code_dirs)
        if self.machine_entries is not None:
            inventory["all"]["children"]["machines"] = {"hosts": {"local": self._machine_host()}}
            self.machine_plan_path.write_text(json.dumps(self._machine_plan()) + "\n")
        write_inventory(self.inventory_path, inventory)
        (self.ansible_dir / "endpoints.json").write_text(
            json.dumps({n: asdict(e) for n, e in self.endpoints().items()}, indent=2) + "\n")

    def deploy(self) -> dict[str, RouterEndpoint]:
        """Install bundle and launches on every node, start every router, wait until each is ready (and its
        metrics endpoint, if it has one, answers from here)."""
        t0 = time.monotonic()
        self.prepare()
        if self.machine_entries is None:
            self._run("up.yml", "deploy")
        else:
            try:
                self._run("up-machine.yml", "deploy")
            except DeployError as err:
                raise _per_node(err) from None
        self.check_metrics(self.start_timeout_s)
        self.timings["deploy_s"] = time.monotonic() - t0
        return self.endpoints()

    def check_metrics(self, timeout_s: float = 30.0) -> None:
        """Every router's metrics endpoint answers from here (the path the scraper uses)."""
        def probe(ep: RouterEndpoint) -> "TaskFailure | None":
            assert ep.metrics_url is not None
            deadline = time.monotonic() + timeout_s
            error = "no answer"
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(ep.metrics_url, timeout=3) as resp:
                        if resp.status == 200:
                            return None
                        error = f"HTTP {resp.status}"
                except OSError as exc:
                    error = str(exc)
                time.sleep(0.1)
            return TaskFailure(ep.node, "metrics endpoint answers from the controller", f"{ep.metrics_url}: {error}")

        eps = [ep for ep in self.endpoints().values() if ep.metrics_url is not None]
        if not eps:
            return
        with ThreadPoolExecutor(max_workers=max(1, min(len(eps), 32))) as pool:
            failures = [f for f in pool.map(probe, eps) if f is not None]
        if failures:
            raise DeployError("(controller check)", failures)

    def start(self, nodes: Optional[list[str]] = None) -> None:
        """(Re)start the router on ``nodes`` (default: all); already running routers are left alone."""
        self._run("start.yml", "start", limit=nodes)

    def stop(self, nodes: Optional[list[str]] = None) -> None:
        """Stop the router on ``nodes`` (default: all): SIGTERM, then SIGKILL after a grace period."""
        if self.machine_entries is not None and nodes is None:
            self._run("stop-machine.yml", "stop")
        else:
            self._run("stop.yml", "stop", limit=nodes)

    def remove_installs(self, access: dict) -> None:
        """Remove what deployment installed through each node's access (node -> NodeAccess), after :meth:`stop`:
        one command per node instead of :meth:`uninstall`'s playbook."""
        for node, path in self.install_dirs.items():
            access[node].run(["rm", "-rf", path], check=False)
        for path in self.shared_code_dirs():  # on the machine the nodes share: reached through any of them
            next(iter(access.values())).run(["rm", "-rf", path], check=False)

    def uninstall(self) -> None:
        """Remove the install directory from every node (after :meth:`stop` and :meth:`collect`)."""
        self._run("uninstall.yml", "uninstall")

    def kill_router(self, node: str, sig: str = "KILL") -> None:
        """Signal the router on ``node`` at once over SSH (the scenario's ``kill_router``: SIGKILL, no goodbye).

        Much faster than :meth:`stop` (one SSH command on an open connection, no playbook).
        """
        d, code = shlex.quote(self.install_dirs[node]), shlex.quote(self.code_dirs[node])
        self._ssh(node, f"{shlex.quote(self.python_of(node))} {code}/nodectl.py signal --dir {d} --signal {shlex.quote(sig)}",
                  "kill router")

    def restart_router(self, node: str) -> None:
        """Start the router on ``node`` again over SSH and wait until it is ready (``restart_router``)."""
        d, code = shlex.quote(self.install_dirs[node]), shlex.quote(self.code_dirs[node])
        python = shlex.quote(self.python_of(node))
        self._ssh(node, f"{python} {code}/nodectl.py start --dir {d} --code {code} --timeout {self.start_timeout_s:g}",
                  "restart router",
                  timeout_s=self.start_timeout_s + 30)

    def _ssh(self, node: str, command: str, task: str, timeout_s: float = 30.0) -> str:
        try:
            r = self.management.run(node, command, timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            raise DeployError("(ssh)", [TaskFailure(node, task, f"no answer within {timeout_s:g} s")]) from None
        if r.returncode != 0:
            raise DeployError("(ssh)", [TaskFailure(node, task, (r.stderr or r.stdout).strip() or f"exit {r.returncode}",
                                                    unreachable=r.returncode == 255)])
        return r.stdout

    def collect(self) -> None:
        """Fetch router.log, events.jsonl, launch.json and its config files of every router into
        ``<run_dir>/nodes/<node>/``."""
        self._run("collect-machine.yml" if self.machine_entries is not None else "collect.yml", "collect")

    def stop_and_collect(self) -> None:
        """:meth:`stop` then :meth:`collect` of every router in one playbook run (one ansible-playbook start
        instead of two). The files are collected also from a node whose stop failed; that stop's failure
        (or the collect's) raises :class:`DeployError` naming the node and task, as the two steps do."""
        self._run("stop-collect-machine.yml" if self.machine_entries is not None else "stop-collect.yml",
                  "stop-collect")

    def event_loops(self) -> dict[str, str]:
        """The event loop each router ran on, from its ``ready`` event in the collected event log
        (``uvloop 0.23.0`` or ``asyncio``; a router that logged none, e.g. Zenoh's, is left out)."""
        out: dict[str, str] = {}
        for node in self.routers:
            path = self.run_dir / LAYOUT.router_events(node)
            try:
                lines = path.read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("event") == "ready" and "event_loop" in event:
                    out[node] = event["event_loop"]  # the last start's (a restarted router logs it again)
        return out

    def shared_code_dirs(self) -> list[str]:
        """Code folders that are no node's install folder (one per machine whose nodes share it)."""
        return sorted(set(self.code_dirs.values()) - set(self.install_dirs.values()))

    # -- internals -------------------------------------------------------------------

    def python_of(self, node: str) -> str:
        """The python3 of ``node``, as its management access says."""
        return self.management.inventory_vars(node).get("ansible_python_interpreter", "python3")

    def _machine_host(self) -> dict[str, Any]:
        """The inventory host of this machine (whose nodes share it): reached locally."""
        import sys

        first = self.routers[0] if self.routers else next(iter(self.install_dirs))
        return {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                "testbed_code_dir": self.code_dirs[first], "testbed_machine_plan": str(self.machine_plan_path),
                "testbed_node_python": self.python_of(first)}

    def _machine_plan(self) -> dict[str, Any]:
        """nodectl.py machine-*'s plan: the shared code folder and, per router, its folder, how to enter
        its node, its python and its config."""
        assert self.machine_entries is not None
        first = self.routers[0] if self.routers else next(iter(self.install_dirs))
        return {"code_dir": self.code_dirs[first],
                "nodes": [{"name": n, "dir": self.install_dirs[n], "enter": self.machine_entries[n],
                           "python": self.python_of(n), "launch": self.launches[n].to_json()} for n in self.routers]}

    def extravars(self) -> dict[str, Any]:
        return {
            "testbed_bundle": str(self.bundle_path),
            "testbed_config_dir": str(self.nodes_dir),
            "testbed_collect_dir": str(self.nodes_dir),
            "testbed_start_timeout": self.start_timeout_s,
            # checked by check_metrics() instead, concurrently and without a module run per node
            "testbed_check_from_controller": False,
            # start.yml fails on a bad config anyway, with the router's own reason: save a task
            "testbed_check_config": False,
        }

    def _run(self, playbook: str, name: str, limit: Optional[list[str]] = None) -> PlaybookResult:
        if not self.inventory_path.exists():
            self.prepare()
        n = self._runs
        self._runs += 1
        result = run_playbook(
            playbook,
            inventory=self.inventory_path,
            private_data_dir=self.ansible_dir / f"{n:02d}-{name}",
            extravars=self.extravars(),
            forks=len(self.management.hosts),
            control_dir=self.management.control_dir,
            limit=limit,
            timeout_s=self.timeout_s,
            cancel=self.cancel,
        )
        self.results.append(result)
        self.timings[f"{n:02d}-{name}_s"] = result.duration_s
        return result


#: the task of playbooks/up-machine.yml whose output (nodectl.py machine-start's) names every node's outcome
MACHINE_START_TASK = "start every router of the machine"


def _per_node(err: DeployError) -> DeployError:
    """A failed machine-wide start told as the per-node playbooks tell it: one failure per node that did not
    come up (task 'start router', the router's own reason), so that it reads the same on every backend."""
    nodes: list[TaskFailure] = []
    for failure in err.failures:
        report = None
        if failure.task == MACHINE_START_TASK:
            try:
                report = json.loads(failure.output.strip().splitlines()[-1])
            except (ValueError, IndexError):
                report = None
        if not isinstance(report, dict):
            nodes.append(failure)
            continue
        for node, outcome in sorted(report.items()):
            if isinstance(outcome, dict) and outcome.get("error"):
                message = str(outcome["error"]).replace("\n", "\n      ")
                nodes.append(TaskFailure(node, "start router", message))
    return DeployError(err.playbook, nodes or err.failures, artifacts=err.artifacts)
