"""Deployment benchmark: time to deploy the router on every node of a lab with Ansible.

    sudo .venv/bin/python bench/deploy_bench.py [topologies/grid12.yaml] [--repeat 3] [--backend mininet]

Builds the lab with its management access once (veths + sshd per node), then repeats: deploy (bundle + configs + ansible up.yml: install and start + every metrics
endpoint answering from the controller), stop, collect. Prints a Markdown table for
docs/benchmarks.md ("## Deployment"). Needs root, sshd and the backend's needs.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from testbed.deploy import Deployer
from testbed.lab.session import LabSession
from testbed.spec import load_spec_text


def machine() -> str:
    load = os.getloadavg()[0]
    return (f"{platform.node()} · {os.cpu_count()} cores · kernel {platform.release()} · "
            f"Python {platform.python_version()} · load average at start {load:.1f}")


def cpu_seconds(session) -> float:
    """CPU time used so far by our finished children (ansible-playbook and its workers) and, on Mininet
    (whose sshd PIDs are this machine's), by the nodes' sshd daemons with their finished session
    children (SSH sessions, modules, nodectl). Routers are not included (they detach from nodectl's session)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = ru.ru_utime + ru.ru_stime
    if session.backend.name != "mininet":
        return total
    tick = os.sysconf("SC_CLK_TCK")
    ssh = session.management.ssh
    for node in ssh.hosts:
        try:
            pid = int(ssh.pidfile(node).read_text().strip())
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue
        total += sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topology", nargs="?", default="topologies/grid12.yaml")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backend", default="mininet")
    args = parser.parse_args()
    text = Path(args.topology).read_text()
    spec0 = load_spec_text(text, filename=args.topology)
    # A lab name of its own, so the benchmark never collides with a lab someone has up.
    text = text.replace(f"name: {spec0.name}", f"name: bench-dep-{spec0.name}"[:26], 1)
    spec = load_spec_text(text, filename=args.topology)
    print(f"machine: {machine()} · backend {args.backend}\n")
    print(f"topology {spec0.name}: {len(spec.routers())} routers, {len(spec.links)} links\n")
    session = LabSession(spec, backend=args.backend, management=True)
    work = Path(tempfile.mkdtemp(prefix="deploy-bench-"))
    rows = []
    try:
        t0 = time.monotonic()
        lab = session.open()
        t_lab = time.monotonic() - t0
        ips = session.management.hosts
        for i in range(args.repeat):
            d = Deployer(spec, lab, work / f"run{i}", session.management,
                         install_dirs={n: session.access(n).work_dir for n in lab.nodes})
            c0, t0 = cpu_seconds(session), time.monotonic()
            d.deploy()
            t_deploy = time.monotonic() - t0
            c_deploy = cpu_seconds(session) - c0
            t0 = time.monotonic()
            d.stop()
            t_stop = time.monotonic() - t0
            t0 = time.monotonic()
            d.collect()
            t_collect = time.monotonic() - t0
            rows.append((t_deploy, c_deploy, t_stop, t_collect))
        print(f"lab bring-up with management access (veths + {len(ips)} sshd, keys) {t_lab:.2f} s\n")
        print("| run | deploy: bundle + configs + install + start + metrics ready (s) | CPU used by Ansible + SSH "
              "(s) | stop (s) | collect (s) |")
        print("|---|---|---|---|---|")
        for i, (dep, cpu, stop, coll) in enumerate(rows, 1):
            print(f"| {i} | {dep:.2f} | {cpu:.2f} | {stop:.2f} | {coll:.2f} |")
        print(f"| median | {statistics.median(r[0] for r in rows):.2f} | {statistics.median(r[1] for r in rows):.2f} "
              f"| {statistics.median(r[2] for r in rows):.2f} | {statistics.median(r[3] for r in rows):.2f} |")
        print(f"\nload average at end {os.getloadavg()[0]:.1f}")
    finally:
        session.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
