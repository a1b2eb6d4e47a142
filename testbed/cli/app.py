"""The `testbed` command line's root app and its verbs (contract 1 of DESIGN.md); `testbed suite`
is testbed/cli/suite.py, `testbed image` testbed/cli/image.py.

Exit status: 0 success, 1 a check or an operation failed, 2 bad input (testbed/cli/common.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

import typer

from runfolder.layout import LAYOUT
from testbed.cli import completion
from testbed.cli.common import BAD_INPUT, FAILED, fail, load_spec, need_root, seconds
from testbed.lab import state as labstate

app = typer.Typer(
    help="Network emulation testbed: shaped topologies, a router under test, traffic, captures, reports.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion, --show-completion (docs/completion.md)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: wrapped to the terminal, readable at 80 columns (docs/cli.md)
)

UP_TIMEOUT_S = 600.0


@app.command()
def doctor(json_output: bool = typer.Option(False, "--json", help="Print the checks as JSON.")) -> None:
    """Report what this machine can do: root, kernel qdiscs, iptables, the impairment appliance, each shaping
    feature (host kernel yes/no, appliance yes/no), Mininet, Docker and its node image, tools, Java, PySpark."""
    from testbed.doctor import as_json, run_checks, verdict_lines

    checks = run_checks()
    report = as_json(checks)
    if json_output:
        typer.echo(json.dumps(report, indent=2))
    else:
        for c in checks:
            mark = "ok  " if c.ok else ("FAIL" if c.required else "miss")
            typer.echo(f"[{mark}] {c.name:20} {c.detail}")
            if c.fix:
                typer.echo(f"       {'':20} fix: {c.fix}")
        for line in verdict_lines(checks):
            typer.echo(line)
    raise typer.Exit(0 if report["ok"] else FAILED)


@app.command()
def validate(
    file: Path = typer.Argument(..., help="Topology file (YAML).", autocompletion=completion.topology_files),
    json_output: bool = typer.Option(False, "--json", help="Print the resolved spec as JSON."),
    duration: Optional[float] = typer.Option(None, "--duration", parser=seconds, metavar="DURATION",
                                             help="Also list what a run this long (as `run --duration`) leaves "
                                                  "out: flows that never send or are cut short, scenario events "
                                                  "after the end, expectations it cannot measure."),
) -> None:
    """Check a topology file and print what it describes."""
    from testbed.spec.cli_validate import validate_command

    if duration is not None and duration <= 0:
        fail("--duration must be positive", BAD_INPUT)
    raise typer.Exit(validate_command(file, json_output, duration_ns=None if duration is None else
                                      round(duration * 1e9)))


BACKEND_HELP = "Where the nodes live: mininet, docker or ssh (default: the topology's `backend:`, else mininet)."
IMAGE_HELP = "Docker backend: the node image (default: the topology's `image:`, else `testbed image build`'s)."
INVENTORY_HELP = "ssh backend: the Ansible inventory (INI or YAML) of the lab machines (default: the topology's " \
                 "`inventory:`)."
KEEP_ADDRESSES_HELP = "ssh backend: keep the machines' own addresses on the data interfaces instead of the topology's."
IMPAIRMENTS_HELP = "Who provides delay, jitter, loss models and AQM queues: auto (this machine's kernel where it " \
                    "has the qdisc, else the impairment appliance) or appliance (always the appliance, for results " \
                    "that compare across machines). Default: the topology's `impairments:`, else auto."
HOST_KEY_HELP = "ssh backend: check the machines' host keys against known_hosts (default). Turning it off is " \
                "recorded in the run's manifest."


def _check_backend_and_kernel(spec, allow_missing: bool, spec_path: Path, backend: Optional[str], image: Optional[str],
                              inventory: Optional[Path], keep_addresses: bool, check_host_keys: bool,
                              impairments: Optional[str] = None):
    """The backend's options, resolved once from the command line and the topology; refuse before anything is
    built what the backend or the nodes' kernel cannot do (exit 2). Returns the capabilities the backend probed
    and the options."""
    from testbed.backends import BackendError, BackendOptions
    from testbed.lab.errors import LabError
    from testbed.lab.session import preflight
    from testbed.links.appliance import ApplianceError

    try:
        options = BackendOptions.resolve(spec, backend, image, inventory=str(inventory) if inventory else None,
                                         keep_addresses=keep_addresses, check_host_keys=check_host_keys,
                                         spec_path=str(Path(spec_path).resolve()), impairments=impairments)
        caps, missing = preflight(spec, options, allow_missing)
    except (LabError, BackendError, ApplianceError) as exc:
        fail(str(exc), BAD_INPUT)
    for m in missing:
        typer.echo(f"warning: building without it: {m.message()}", err=True)
    return caps, options


def _check_machine_fit(spec, backend: str, over_capacity: bool):
    """Refuse (exit 2) a lab whose nodes share this machine and need more of it than it has, with the numbers;
    with ``--over-capacity`` only warn. Returns the estimate (None for lab machines: the ssh backend)."""
    from testbed import machinefit

    if backend == "ssh":
        return None
    fit = machinefit.check(spec)
    if not fit.fits:
        problems = "\n  ".join(fit.problems)
        if not over_capacity:
            fail(f"{spec.name} does not fit this machine ({fit.need.describe()}):\n  {problems}\n"
                 "Use a smaller topology, capture fewer links (capture: links: [...]), or --over-capacity to "
                 "build it anyway.", BAD_INPUT)
        typer.echo(f"warning: --over-capacity: building {spec.name} although it does not fit this machine:\n  "
                   f"{problems}", err=True)
    return fit


@app.command()
def up(
    file: Path = typer.Argument(..., help="Topology file (YAML).", autocompletion=completion.topology_files),
    allow_missing: bool = typer.Option(False, "--allow-missing",
                                       help="Build even if the kernel lacks some shaping; record what was left out."),
    backend: Optional[str] = typer.Option(None, "--backend", help=BACKEND_HELP),
    image: Optional[str] = typer.Option(None, "--image", help=IMAGE_HELP),
    inventory: Optional[Path] = typer.Option(None, "--inventory", help=INVENTORY_HELP),
    keep_addresses: bool = typer.Option(False, "--keep-addresses", help=KEEP_ADDRESSES_HELP),
    host_key_check: bool = typer.Option(True, "--host-key-check/--no-host-key-check", help=HOST_KEY_HELP),
    impairments: Optional[str] = typer.Option(None, "--impairments", help=IMPAIRMENTS_HELP),
    json_output: bool = typer.Option(False, "--json", help="Print the lab as JSON."),
    routers: bool = typer.Option(False, "--routers", help="Also start the router under test on every router node "
                                                          "(as `run` does, without traffic or captures); then "
                                                          "`testbed ping LAB` checks that every router reaches "
                                                          "every other."),
) -> None:
    """Build the topology and leave it running (named after the spec's `name`): shaped wires only, or with
    `--routers` the router under test on every node."""
    need_root()
    spec = load_spec(file)
    if routers:
        from testbed.drivers import DriverError, preflight_driver

        try:
            preflight_driver(spec)
        except DriverError as exc:
            fail(str(exc), BAD_INPUT)
    _, options = _check_backend_and_kernel(spec, allow_missing, file, backend, image, inventory, keep_addresses,
                                           host_key_check, impairments)

    from testbed.proc import stop_process

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="testbed-up-") as scratch:
        error_file, log_file = Path(scratch) / "error.txt", Path(scratch) / "holder.log"
        argv = [sys.executable, "-m", labstate.HOLDER_MODULE, str(file.resolve()), "--error-file", str(error_file)]
        if allow_missing:
            argv.append("--allow-missing")
        if routers:
            argv.append("--routers")
        argv += options.argv()
        with open(log_file, "wb") as log:
            holder = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        state = None
        try:
            while time.monotonic() - started < UP_TIMEOUT_S:
                state = labstate.load(spec.name)
                if (state and state.status == "up" and (state.routers or not routers)) or holder.poll() is not None:
                    break
                time.sleep(0.1)
        except KeyboardInterrupt:
            typer.echo("interrupted: taking the half-built lab down ...", err=True)
            stop_process(holder, timeout_s=120)  # it tears down what it built
            fail(f"lab {spec.name!r} was not built (interrupted)")
        if state is None or state.status != "up" or (routers and not state.routers):
            if holder.poll() is None:  # timed out: stop it; it removes what it built
                stop_process(holder, timeout_s=120)  # it tears down what it built
            reason = error_file.read_text() if error_file.exists() else \
                f"holder exited with {holder.returncode}:\n{log_file.read_text(errors='replace')[-2000:]}"
            fail(f"lab {spec.name!r} could not be built: {reason}")
    elapsed = time.monotonic() - started
    if json_output:
        typer.echo(json.dumps({"lab": state.lab, "holder_pid": state.owner_pid, "seconds": elapsed,
                               "routers": labstate.routers_shown(state.routers)}, indent=2))
    else:
        from testbed.backends import Lab

        _print_lab(Lab.from_json(state.lab))
        if state.routers:
            typer.echo(f"routers: {state.routers['driver']} on {', '.join(state.routers['nodes'])}; "
                       f"`testbed ping {spec.name}` checks every pair")
        else:
            typer.echo("shaped wires only: no router runs (kernel forwarding is off, so only neighbours reach "
                       "each other); `testbed up --routers` starts the router under test on every node")
        typer.echo(f"lab {spec.name} is up ({elapsed:.1f} s); `testbed exec {spec.name} NODE` for a shell, "
                   f"`testbed inspect {spec.name}`, `testbed down {spec.name}`")


def _print_lab(lab) -> None:
    """The lab as built: each direction's shaping as installed (what `--allow-missing` left out said apart)."""
    from testbed.links.shaping import as_installed

    dropped = {(a["link"], a["direction"]): a.get("dropped") or () for a in lab.applied}

    def shaped(link, src, dst, shape) -> str:
        direction = f"{src.node}->{dst.node}"
        return f"{direction}: {as_installed(shape, dropped.get((link.index, direction), ()))}"

    typer.echo(f"lab {lab.name} ({lab.backend}): {len(lab.nodes)} nodes, {len(lab.links)} links")
    for node in lab.nodes.values():
        where = ", ".join(f"{k} {v}" for k, v in node.handle.items())
        typer.echo(f"  node {node.name:10} {node.kind:6} {where}")
    for link in lab.links:
        typer.echo(f"  link {link.index:3} {link.a.node}:{link.a.ifname} {link.a.address} <-> "
                   f"{link.b.node}:{link.b.ifname} {link.b.address}  weight {link.weight}")
        typer.echo(f"           {shaped(link, link.a, link.b, link.shape_ab)};  "
                   f"{shaped(link, link.b, link.a, link.shape_ba)}")


def _running_state(lab: Optional[str]) -> labstate.LabState:
    if lab is None:
        states = labstate.all_states()
        if not states:
            fail("no lab is up", BAD_INPUT)
        if len(states) > 1:
            fail(f"several labs are up ({', '.join(s.name for s in states)}): name one", BAD_INPUT)
        return states[0]
    state = labstate.load(lab)
    if state is None:
        known = ", ".join(s.name for s in labstate.all_states()) or "none"
        fail(f"no lab named {lab!r} is up (labs up: {known})", BAD_INPUT)
    return state


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(
    lab: str = typer.Argument(..., help="Lab name (the spec's `name`).", autocompletion=completion.lab_names),
    node: str = typer.Argument(..., help="Node name.", autocompletion=completion.node_names),
    cmd: Optional[List[str]] = typer.Argument(None, help="Command to run inside the node, after `--` (none: an "
                                                         "interactive shell whose prompt names the node)."),
) -> None:
    """Run a command inside a node of a running lab: `testbed exec LAB NODE -- CMD ...`; without a command, open
    an interactive shell in the node."""
    need_root()
    state = _running_state(lab)
    if state.status != "up" or not state.lab:
        fail(f"lab {lab!r} is {state.status}, not up", BAD_INPUT)
    from testbed.backends import Lab, get_backend

    running = Lab.from_json(state.lab)
    if node not in running.nodes:
        fail(f"lab {lab!r} has no node {node!r} (nodes: {', '.join(running.nodes)})", BAD_INPUT)
    if not cmd:
        from testbed.lab.shell import describe, shell_argv

        typer.echo(describe(running.name, node), err=True)
        cmd = shell_argv(running.name, node)
    argv = get_backend(running.backend).access(running, node).exec_argv(cmd)
    sys.stdout.flush()
    os.execvp(argv[0], argv)


@app.command()
def inspect(
    lab: Optional[str] = typer.Argument(None, help="Lab name; may be left out when one lab is up.",
                                       autocompletion=completion.lab_names),
    every: bool = typer.Option(False, "--all", help="Every lab that is up."),
    json_output: bool = typer.Option(False, "--json", help="Print the labs as JSON."),
) -> None:
    """A running lab as it is: nodes, interfaces, addresses, the shaping installed (read back from the kernel),
    what runs on each node (router, traffic, captures) and who holds the lab (`up` or a run)."""
    need_root()
    from testbed.lab.inspect import read_lab, render, states_to_inspect

    try:
        states = states_to_inspect(lab, every)
    except LookupError as exc:
        fail(str(exc), BAD_INPUT)
    views = []
    for state in states:
        try:
            views.append(read_lab(state))
        except RuntimeError as exc:
            fail(str(exc))
    if json_output:
        typer.echo(json.dumps([v.to_json() for v in views] if every or lab is None and len(views) != 1
                              else views[0].to_json(), indent=2))
        return
    if not views:
        typer.echo("no lab is up")
    for view in views:
        typer.echo("\n".join(render(view)))


@app.command()
def link(
    lab: str = typer.Argument(..., metavar="LAB", help="Lab name (the spec's `name`).",
                              autocompletion=completion.lab_names),
    ref: str = typer.Argument(..., metavar="LINK", help="The link: A-B, A:eth1-B:eth2 or its index."),
    node: Optional[str] = typer.Option(None, "--node", metavar="NODE", help="Change only the direction leaving this end (default: "
                                                           "both).", autocompletion=completion.node_names),
    bw: Optional[str] = typer.Option(None, "--bw", metavar="RATE", help="Bandwidth, as in a topology (10mbit)."),
    delay: Optional[str] = typer.Option(None, "--delay", metavar="DURATION", help="Delay (5ms; needs netem)."),
    jitter: Optional[str] = typer.Option(None, "--jitter", metavar="DURATION", help="Jitter (1ms; needs netem)."),
    distribution: Optional[str] = typer.Option(None, "--distribution", metavar="NAME",
                                               help="The jitter's distribution: normal, pareto, paretonormal, uniform."),
    correlation: Optional[str] = typer.Option(None, "--correlation", metavar="PERCENT",
                                              help="Delay correlation (25%; needs a jitter)."),
    loss: Optional[str] = typer.Option(None, "--loss", metavar="PERCENT|MODEL",
                                       help="Loss (0.5%), or a model: '{model: gilbert-elliott, p: 1%, r: 25%}'."),
    duplicate: Optional[str] = typer.Option(None, "--duplicate", metavar="PERCENT", help="Duplicated packets (0.5%)."),
    corrupt: Optional[str] = typer.Option(None, "--corrupt", metavar="PERCENT", help="Corrupted packets (0.1%)."),
    reorder: Optional[str] = typer.Option(None, "--reorder", metavar="PERCENT|MAPPING",
                                          help="Reordered packets (25%, or '{rate: 25%, gap: 5}'; needs a delay)."),
    queue: Optional[str] = typer.Option(None, "--queue", metavar="PACKETS", help="tc queue limit, in packets (50)."),
    qdisc: Optional[str] = typer.Option(None, "--qdisc", metavar="KIND|MAPPING",
                                        help="Queue discipline: pfifo, fq_codel, cake, red, pie, or "
                                             "'{kind: fq_codel, target: 5ms}'."),
    down_: bool = typer.Option(False, "--down", help="Take the link down (both ends)."),
    up_: bool = typer.Option(False, "--up", help="Bring the link up again (both ends)."),
    show: bool = typer.Option(False, "--show", help="Show the link's shaping as installed, read back from tc."),
    json_output: bool = typer.Option(False, "--json", help="Print the outcome as JSON."),
) -> None:
    """Change a running lab's link as a scenario `set_link` / `link_down` / `link_up` event would (same code),
    print when it took effect and what is installed now (read back from the kernel); or `--show` it."""
    need_root()
    from testbed.links.change import LinkInputError, LinkRefused, change_link

    state = _running_state(lab)
    try:
        result = change_link(state, ref, node=node, down=down_, up=up_, show=show,
                             values={"bw": bw, "delay": delay, "jitter": jitter, "distribution": distribution,
                                     "correlation": correlation, "loss": loss, "duplicate": duplicate,
                                     "corrupt": corrupt, "reorder": reorder, "queue": queue, "qdisc": qdisc})
    except LinkInputError as exc:
        fail(str(exc), BAD_INPUT)
    except LinkRefused as exc:
        fail(str(exc))
    typer.echo(json.dumps(result.to_json(), indent=2) if json_output else "\n".join(result.lines()))


@app.command()
def ping(
    lab: Optional[str] = typer.Argument(None, help="Lab name; may be left out when one lab is up.",
                                       autocompletion=completion.lab_names),
    timeout: float = typer.Option(30.0, "--timeout", parser=seconds, metavar="DURATION",
                                  help="How long each router node keeps trying its peers (30s; a bare number is "
                                       "seconds)."),
    json_output: bool = typer.Option(False, "--json", help="Print the matrix as JSON."),
) -> None:
    """Check that every router reaches every other through the router under test (a lab of `up --routers`):
    a matrix of round trips. Exit 1 when a pair is unreachable."""
    need_root()
    from testbed.lab.ping import PingRefused, ping_lab

    if timeout <= 0:
        fail("--timeout must be positive", BAD_INPUT)
    try:
        matrix = ping_lab(_running_state(lab), timeout)
    except PingRefused as exc:
        fail(str(exc), BAD_INPUT)
    typer.echo(json.dumps(matrix.to_json(), indent=2) if json_output else "\n".join(matrix.lines()))
    raise typer.Exit(0 if matrix.ok else FAILED)


#: how long `down --force` waits for a run to tear its lab down and collect its results before removing the lab
RUN_STOP_TIMEOUT_S = 300.0


@app.command()
def down(
    lab: Optional[str] = typer.Argument(None, help="Lab name; may be left out when one lab is up.",
                                       autocompletion=completion.lab_names),
    force: bool = typer.Option(False, "--force", help="Also stop a lab held by a running `testbed run` (the run "
                                                      "ends as interrupted; its results folder stays)."),
) -> None:
    """Tear a running lab down: everything `up` created is removed. A lab that is not up is not an error."""
    need_root()
    from testbed.lab.clean import CleanReport, stop_owner, take_down

    if lab is None and not labstate.all_states():
        typer.echo("no lab is up")
        return
    if lab is not None and labstate.load(lab) is None:
        typer.echo(f"lab {lab} is not up")
        return
    state = _running_state(lab)
    stopping_run = state.run_dir is not None and state.owner_alive()
    if stopping_run and not force:
        fail(f"lab {state.name} is held by {state.describe_holder()}: wait for the run to end, or "
             f"`testbed down {state.name} --force` to stop the run (it ends as interrupted)")
    started = time.monotonic()
    report = CleanReport()
    if stopping_run:
        typer.echo(f"stopping {state.describe_holder()} ...")
        deadline = time.monotonic() + RUN_STOP_TIMEOUT_S
        stop_owner(state, timeout_s=RUN_STOP_TIMEOUT_S)  # the run tears down and collects what it recorded
        while state.owner_alive() and time.monotonic() < deadline:  # then writes how it ended, and exits
            time.sleep(0.1)
    if labstate.load(state.name) is not None:
        take_down(state, report)
    if report.problems:
        fail(f"lab {state.name} could not be removed completely: {'; '.join(report.problems)}")
    from testbed.backends import BackendError, get_backend

    try:  # whatever the owner said, remove anything of the lab that is still there
        left = get_backend(state.backend).release(state.name, state.plan, state.lab) if state.backend else []
    except BackendError as exc:
        fail(f"lab {state.name} could not be removed completely: {exc}; try `testbed clean`")
    if left:
        typer.echo(f"warning: the lab's owner left {', '.join(left)}: removed now", err=True)
    typer.echo(f"lab {state.name} is down ({time.monotonic() - started:.1f} s)")
    if stopping_run:
        typer.echo(f"stopped run {state.run_id}; its results are in {state.run_dir} "
                   f"(status: {_run_status(Path(state.run_dir))})")


def _run_status(run_dir: Path) -> str:
    """How a run ended, as its manifest says."""
    try:
        return str(json.loads((run_dir / LAYOUT.manifest).read_text()).get("status", "unknown"))
    except (OSError, ValueError):
        return f"unknown (no readable {LAYOUT.manifest})"


@app.command()
def clean(
    all_labs: bool = typer.Option(False, "--all", help="Also tear down labs whose holder is still running."),
    json_output: bool = typer.Option(False, "--json", help="Print what was removed as JSON."),
    inventory: Optional[Path] = typer.Option(None, "--inventory", help="Also put back the lab machines of this "
                                             "Ansible inventory (ssh backend): their data interfaces as recorded "
                                             "before the lab, and no process of ours."),
    host_key_check: bool = typer.Option(True, "--host-key-check/--no-host-key-check", help=HOST_KEY_HELP),
) -> None:
    """Remove leftovers of crashed or killed labs (only what testbed created). Idempotent."""
    need_root()
    from dataclasses import asdict

    from testbed.lab.clean import clean as do_clean

    if inventory is not None and not inventory.is_file():
        fail(f"inventory {inventory} does not exist", BAD_INPUT)
    report = do_clean(include_running=all_labs, inventory=str(inventory.resolve()) if inventory else None,
                      check_host_keys=host_key_check)
    if json_output:
        typer.echo(json.dumps(asdict(report), indent=2))
        raise typer.Exit(FAILED if report.problems else 0)
    if report.nothing and not report.problems:
        typer.echo("nothing to clean")
    for run in report.salvaged:
        typer.echo(f"salvaged {len(run['files'])} files and folders of the crashed run into {run['run_dir']}")
    for name in report.labs:
        typer.echo(f"removed lab {name}")
    for what in report.removed:
        typer.echo(f"removed {what}")
    if report.processes:
        typer.echo(f"killed lab holder processes: {' '.join(map(str, report.processes))}")
    for name in report.kept_running:
        typer.echo(f"left running: lab {name} (its holder is alive; `testbed down {name}` or `clean --all`)")
    for problem in report.problems:
        typer.echo(f"error: could not remove or check: {problem}", err=True)
    if report.problems:
        raise typer.Exit(FAILED)


@app.command()
def run(
    file: Path = typer.Argument(..., help="Topology file (YAML), or a Topology Zoo map (.graphml, .gml) or a "
                                          "containerlab topology (.clab.yml), converted as `testbed import` does.",
                                autocompletion=completion.runnable_files),
    results: Path = typer.Option(Path("results"), "--results", help="Folder under which the run's folder is made."),
    allow_missing: bool = typer.Option(False, "--allow-missing",
                                       help="Build even if the kernel lacks some shaping; record what was left out."),
    duration: Optional[float] = typer.Option(None, "--duration", parser=seconds, metavar="DURATION",
                                             help="Run this long instead of the topology's `duration` (20s, "
                                                  "1m30s; a bare number is seconds)."),
    scrape_interval: float = typer.Option(1.0, "--scrape-interval", parser=seconds, metavar="DURATION",
                                          help="Time between metrics scrapes (500ms, 2s; a bare number is "
                                               "seconds)."),
    analyze_after: bool = typer.Option(True, "--analyze/--no-analyze", help="Analyse and check at the end."),
    backend: Optional[str] = typer.Option(None, "--backend", help=BACKEND_HELP),
    image: Optional[str] = typer.Option(None, "--image", help=IMAGE_HELP),
    inventory: Optional[Path] = typer.Option(None, "--inventory", help=INVENTORY_HELP),
    keep_addresses: bool = typer.Option(False, "--keep-addresses", help=KEEP_ADDRESSES_HELP),
    host_key_check: bool = typer.Option(True, "--host-key-check/--no-host-key-check", help=HOST_KEY_HELP),
    impairments: Optional[str] = typer.Option(None, "--impairments", help=IMPAIRMENTS_HELP),
    verify: Optional[bool] = typer.Option(None, "--verify-links/--no-verify-links",
                                          help="Measure every link's goodput, loss, delay and impairments against the "
                                               "topology before traffic (default: on the ssh backend, and on "
                                               "every backend when a link asks for delay, jitter, loss, "
                                               "duplicate, reorder or corrupt)."),
    allow_deviation: bool = typer.Option(False, "--allow-deviation",
                                         help="Run even if a link misses what the topology asks (recorded)."),
    congestion_aware: Optional[bool] = typer.Option(None, "--congestion-aware/--no-congestion-aware",
                                                    help="Force the routers' congestion-awareness on or off on "
                                                         "every node (default: as the topology says)."),
    router_setting: List[str] = typer.Option([], "--router-setting",
                                             help="KEY=VALUE (YAML value): force a router setting on every node, "
                                                  "e.g. hol_prevention=false or 'limits={}' (the 'off' side of a "
                                                  "comparison). Repeatable."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL for the analysis."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress output."),
    json_output: bool = typer.Option(False, "--json", help="Progress as JSON lines on stderr; the outcome as "
                                                           "JSON on stdout."),
    ready_timeout: Optional[float] = typer.Option(None, "--ready-timeout", parser=seconds, metavar="DURATION",
                                                  help="How long each router may take to answer after its start "
                                                       "(default: 30s, more for many routers on few cores; shown "
                                                       "when deploying; a bare number is seconds)."),
    over_capacity: bool = typer.Option(False, "--over-capacity",
                                       help="Build even if the estimate says the lab does not fit this machine "
                                            "(warn instead of refusing)."),
    router: Optional[str] = typer.Option(None, "--router",
                                         help="The router under test, instead of the topology's `router:`: testbed "
                                              "(ours), zenoh (stock Zenoh), or a YAML file with a router block "
                                              "(e.g. a command driver; docs/drivers.md)."),
) -> None:
    """Run an experiment: lab, routers, traffic, scenario, captures, metrics -> results folder -> report."""
    need_root()
    from testbed.cli.convert import topology_file

    file, _conversion = topology_file(file)  # a foreign file's conversion lives as long as _conversion
    spec = load_spec(file)
    from testbed.drivers import DriverError, preflight_driver, with_router

    try:
        if router is not None:
            spec = with_router(spec, file, router)
        preflight_driver(spec)
    except DriverError as exc:
        fail(str(exc), BAD_INPUT)
    if congestion_aware is not None:
        spec = spec.with_router_settings(congestion_aware=congestion_aware)
    if router_setting:
        from testbed.spec.overrides import RouterOverrideError, parse_router_settings, typed_router_settings

        try:
            spec = spec.with_router_settings(**typed_router_settings(parse_router_settings(router_setting,
                                                                                           "--router-setting")))
        except RouterOverrideError as exc:
            fail(str(exc), BAD_INPUT)
    if duration is not None and duration <= 0:
        fail("--duration must be positive", BAD_INPUT)
    shortened = _say_what_a_shorter_run_leaves_out(spec, file, duration)
    caps, backend_options = _check_backend_and_kernel(spec, allow_missing, file, backend, image, inventory,
                                                      keep_addresses, host_key_check, impairments)
    if scrape_interval < 0.1:
        fail("--scrape-interval must be at least 0.1 s", BAD_INPUT)
    if ready_timeout is not None and ready_timeout <= 0:
        fail("--ready-timeout must be positive", BAD_INPUT)
    fit = _check_machine_fit(spec, backend_options.name, over_capacity)
    from testbed.run.context import RunOptions
    from testbed.run.experiment import run_experiment
    from testbed.run.progress import Progress

    progress = Progress("quiet" if quiet else ("json" if json_output else "human"))
    options = RunOptions(results_root=results, allow_missing=allow_missing, scrape_interval_s=scrape_interval,
                         duration_s=duration, backend=backend_options, verify_links=verify,
                         allow_deviation=allow_deviation, ready_timeout_s=ready_timeout, machine_fit=fit,
                         shortened=shortened)
    try:
        outcome = run_experiment(spec, file.resolve(), caps, options, progress)
    except FileExistsError as exc:
        fail(str(exc), BAD_INPUT)
    verdict: Optional[bool] = None
    analysis_error: Optional[str] = None
    if outcome.status == "completed" and analyze_after:
        from testbed.run.analysis import analyze_and_check

        verdict, analysis_error = analyze_and_check(outcome.run_dir, master, progress,
                                                    sys.stderr if json_output or quiet else None)
    report = outcome.run_dir / LAYOUT.report
    verdict_text = "PASS" if verdict else "FAIL" if verdict is not None else None
    if json_output:
        typer.echo(json.dumps({"run_dir": str(outcome.run_dir), "status": outcome.status, "error": outcome.error,
                               "teardown_errors": list(outcome.teardown_errors), "analysis_error": analysis_error,
                               "report": str(report) if report.exists() else None, "verdict": verdict_text}))
    else:
        typer.echo(f"results: {outcome.run_dir}")
        if outcome.status != "completed":
            typer.echo(f"run {outcome.status}: {outcome.error}")
        for problem in outcome.teardown_errors:
            typer.echo(f"teardown problem: {problem}")
        if analysis_error:
            typer.echo(f"analysis failed: {analysis_error}")
        if report.exists():
            typer.echo(f"report:  {report}")
        if verdict_text:
            typer.echo(f"verdict: {verdict_text}")
        elif outcome.status == "completed":
            typer.echo("verdict: none (--no-analyze)" if not analyze_after else "verdict: none (analysis failed)")
    ok = outcome.status == "completed" and not outcome.teardown_errors and \
        (verdict is True or (not analyze_after and verdict is None))
    raise typer.Exit(0 if ok else BAD_INPUT if outcome.bad_input else FAILED)


def _say_what_a_shorter_run_leaves_out(spec, file: Path, duration: Optional[float]):
    """Before anything is built: what ``run --duration`` leaves out of the topology, each at its line."""
    from testbed.spec.cli_validate import shortening
    from runfolder.units import format_duration

    shortened = shortening(spec, file, None if duration is None else round(duration * 1e9))
    for line in shortened.lines(f"--duration {format_duration(shortened.duration_ns)}") if shortened else []:
        typer.echo(line if line.startswith(" ") else f"warning: {line}", err=True)
    return shortened


@app.command()
def analyze(
    run_dir: str = typer.Argument(..., help="A results folder (local path or any URI Spark reads).",
                                   autocompletion=completion.results_folders),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL (default local[*])."),
    remote: Optional[str] = typer.Option(None, "--remote", metavar="sc://HOST:PORT",
                                         help="A Spark Connect server to analyse on, instead of --master."),
    driver_memory: Optional[str] = typer.Option(None, "--driver-memory", metavar="SIZE",
                                                help="spark.driver.memory of the Spark started here (e.g. 4g)."),
    window: float = typer.Option(1.0, "--window", parser=seconds, metavar="DURATION",
                                 help="Time-series window (1s, 500ms; a bare number is seconds)."),
) -> None:
    """Turn a results folder into parquet/ and report/ (summary.json, report.html)."""
    from spark.cli import analyze_command

    raise typer.Exit(analyze_command(run_dir, master=master, window_s=window, remote=remote,
                                     driver_memory=driver_memory))


@app.command()
def check(
    run_dir: str = typer.Argument(..., help="An analysed results folder.", autocompletion=completion.results_folders),
    expect: Optional[Path] = typer.Option(None, "--expect", help="Expectations file (default: the topology's)."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Also write JUnit XML here."),
) -> None:
    """Check the run against its expectations: exit 1 when any fails, saying which and by how much."""
    from spark.cli import check_command

    raise typer.Exit(check_command(run_dir, expect_file=str(expect) if expect else None,
                                   junit_path=str(junit) if junit else None))


@app.command()
def compare(
    runs: List[str] = typer.Argument(..., metavar="RUN",
                                     help="Two or more analysed results folders; the first is the reference "
                                          "every other run is compared with.",
                                     autocompletion=completion.results_folders),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write the HTML (default: compare.html in "
                                                           "the current folder)."),
    label: List[str] = typer.Option([], "--label", help="Name of a run in the output: once per run, in the order "
                                                        "of the runs (default: what differs between the runs' "
                                                        "manifests, e.g. 'aware on', 'zenoh', '20s'; else the "
                                                        "run id)."),
    label_a: Optional[str] = typer.Option(None, "--label-a", help="The first run's name (as the first --label)."),
    label_b: Optional[str] = typer.Option(None, "--label-b", help="The second run's name (as the second --label)."),
    json_output: bool = typer.Option(False, "--json", help="Print every run's figures as JSON (compare.html is "
                                                           "written as well)."),
) -> None:
    """Analysed runs side by side (the first the reference): latency, loss and reroutes per priority and per flow,
    and each flow's paths, with whether each run is better or worse than the reference."""
    from spark.compare import compare_runs

    raise typer.Exit(compare_runs(runs, str(out) if out else None, labels=label or None, label_a=label_a,
                                  label_b=label_b, as_json=json_output))


from testbed.cli.image import image_app  # noqa: E402 - `testbed image build`

app.add_typer(image_app, name="image")

from testbed.cli.suite import suite_app  # noqa: E402 - `testbed suite run|validate|trend`

app.add_typer(suite_app, name="suite")

from testbed.cli.wireshark import wireshark  # noqa: E402 - `testbed wireshark [RESULTS_DIR] [--install]`

app.command()(wireshark)

from testbed.cli.convert import export_command, import_command  # noqa: E402 - `testbed import`, `testbed export`

app.command("import")(import_command)
app.command("export")(export_command)


def main() -> None:
    """Console entry point: any error that escapes a verb becomes one line and exit 1, never a traceback."""
    from testbed.proc import CommandError

    try:
        app(standalone_mode=True, prog_name="testbed")  # also as `python -m testbed.cli`: _TESTBED_COMPLETE
    except (CommandError, RuntimeError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(FAILED)


if __name__ == "__main__":
    main()
