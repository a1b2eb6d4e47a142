#!/usr/bin/env python3
"""Start, stop and check the router on a node (shipped in the bundle; python3 >= 3.9, stdlib only).

    python3 nodectl.py check --dir DIR            # validate DIR/router.json with the router itself
    python3 nodectl.py start --dir DIR [--timeout S]
    python3 nodectl.py stop  --dir DIR [--timeout S]
    python3 nodectl.py machine-start --plan FILE [--timeout S]   # every node of a machine at once
    python3 nodectl.py machine-stop  --plan FILE [--timeout S]
    python3 nodectl.py machine-pack  --plan FILE                 # their files, one tarball on stdout

DIR is the install directory: ``router/``, ``traffic/``, ``lib/`` (prometheus_client),
``router.json``. ``start`` launches the router in its own session (it outlives the SSH
session), writes ``router.pid``, appends stderr to ``router.log`` and returns once the
metrics endpoint answers — or fails at once, with the end of the log, if the router
exits. ``stop`` sends SIGTERM, waits, then SIGKILL. Exit status 0 on success, 1 otherwise;
the reason is on stderr. ``--code`` names the folder holding ``router/`` and ``lib/`` when it is
not DIR (nodes that share a machine share one copy).

The ``machine-*`` commands serve nodes that share this machine's files and process IDs (network
namespaces of one machine, e.g. a Mininet lab): the plan (JSON: ``code_dir`` and ``nodes``, each
``{"name", "dir", "enter": [argv prefix that runs a command in the node], "python", "config"}``) is
read once, every node's folder and config written, every router launched at once through its
node's ``enter`` prefix, and every metrics endpoint waited for together: one process for the
machine instead of one SSH session, module run and Python start per node. ``machine-start``
prints one JSON object, node -> {pid, metrics_url} or {error}, and fails (status 1) naming
each node that did not come up and why (the router's exit and log, or its silent endpoint).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request


def _env(code):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(code, "lib"), code]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _pid(d):
    try:
        with open(os.path.join(d, "router.pid")) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return pid if _is_router(pid) else None


def _is_router(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X") and b"router" in argv and b"-m" in argv


def _tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:]) or "(log empty)"


def check(d):
    cfg = os.path.join(d, "router.json")
    r = subprocess.run([sys.executable, "-m", "router", "--config", cfg, "--check"], cwd=d, env=_env(d),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    return r.returncode


def _metrics_url(d):
    with open(os.path.join(d, "router.json")) as f:
        cfg = json.load(f)
    listen = cfg.get("metrics_listen")
    if not listen:
        return None
    if isinstance(listen, dict):
        listen = "%s:%s" % (listen["host"], listen["port"])
    return "http://%s/metrics" % listen


def _answers(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except Exception:
        return False


def _launch(d, code, enter=(), python=None):
    """Start the router of node folder ``d`` (code from ``code``) in its own session, through the
    ``enter`` prefix (which must exec the command: the process started is the router); pid file
    written. Returns the Popen."""
    log_path = os.path.join(d, "router.log")
    with open(log_path, "ab") as log:
        p = subprocess.Popen(list(enter) + [python or sys.executable, "-m", "router", "--config", os.path.join(d, "router.json")],
                             cwd=d, env=_env(code), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True)
    with open(os.path.join(d, "router.pid"), "w") as f:
        f.write("%d\n" % p.pid)
    return p


def _wait_ready(started, timeout):
    """Wait for every launched router's metrics endpoint: ``started`` is {name: (dir, Popen, url)}.
    One waiting thread per router, each asking less often the longer it waits (0.05 s up to 1 s), so
    that many routers starting at once on few cores are not slowed by their own readiness checks and
    one slow answer holds up no other. Returns {name: None when ready, else the reason, with the end
    of its log}."""
    import threading

    deadline = time.monotonic() + timeout
    outcome = {}

    def wait(name, d, p, url):
        log_path = os.path.join(d, "router.log")
        pause = 0.05
        while True:
            rc = p.poll()
            if rc is not None:
                outcome[name] = "router exited with status %d at start; end of %s:\n%s" % (rc, log_path, _tail(log_path))
                return
            if url is None or _answers(url):
                outcome[name] = None
                return
            if time.monotonic() > deadline:
                outcome[name] = ("router (pid %d) started but %s did not answer within %g s; end of %s:\n%s"
                                 % (p.pid, url, timeout, log_path, _tail(log_path)))
                return
            time.sleep(min(pause, max(0.0, deadline - time.monotonic()) + 0.01))
            pause = min(1.0, pause * 1.5)

    threads = [threading.Thread(target=wait, args=(name,) + tuple(entry), daemon=True)
               for name, entry in started.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcome


def start(d, timeout, code=None):
    url = _metrics_url(d)
    pid = _pid(d)
    if pid is not None:
        print(json.dumps({"pid": pid, "metrics_url": url, "already_running": True}))
        return 0
    p = _launch(d, code or d)
    error = _wait_ready({"router": (d, p, url)}, timeout)["router"]
    if error is not None:
        sys.stderr.write(error + "\n")
        return 1
    print(json.dumps({"pid": p.pid, "metrics_url": url, "already_running": False}))
    return 0


def stop(d, timeout):
    return _stop_all({"router": d}, timeout)


def _stop_all(dirs, timeout):
    """SIGTERM every running router of ``dirs`` ({name: folder}) at once, wait for all, SIGKILL those
    still there after ``timeout``; one line per router."""
    running = {name: pid for name, pid in ((n, _pid(d)) for n, d in dirs.items()) if pid is not None}
    for name in sorted(set(dirs) - set(running)):
        print("router not running" if name == "router" else "%s: router not running" % name)
    for pid in running.values():
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while any(_is_router(pid) for pid in running.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for name, pid in sorted(running.items()):
        how = "SIGTERM"
        if _is_router(pid):
            os.kill(pid, signal.SIGKILL)
            how = "SIGKILL (did not stop within %g s of SIGTERM)" % timeout
        prefix = "" if name == "router" else "%s: " % name
        print("%srouter (pid %d) stopped by %s" % (prefix, pid, how))
    if any(_is_router(pid) for pid in running.values()):
        time.sleep(0.2)
    return 0


def _read_plan(path):
    with (sys.stdin if path == "-" else open(path)) as f:
        plan = json.load(f)
    return plan["code_dir"], plan["nodes"]


def machine_start(plan_path, timeout):
    code, nodes = _read_plan(plan_path)
    started, outcome = {}, {}
    for node in nodes:
        d = node["dir"]
        os.makedirs(d, exist_ok=True)
        pid = _pid(d)
        if pid is not None:
            outcome[node["name"]] = ("a router is still running from %s (pid %d); stop it first (machine-stop)"
                                     % (d, pid))
            continue
        for name in ("router.log", "events.jsonl", "router.pid"):
            try:
                os.unlink(os.path.join(d, name))
            except FileNotFoundError:
                pass
        old = os.umask(0o077)
        try:
            with open(os.path.join(d, "router.json.new"), "w") as f:
                json.dump(node["config"], f, indent=2)
            os.replace(os.path.join(d, "router.json.new"), os.path.join(d, "router.json"))
        finally:
            os.umask(old)
    _compile(code, [n.get("python") or sys.executable for n in nodes if n["name"] not in outcome])
    for node in nodes:
        if node["name"] not in outcome:
            d = node["dir"]
            started[node["name"]] = (d, _launch(d, code, node.get("enter") or (), node.get("python")),
                                     _metrics_url(d))
    outcome.update(_wait_ready(started, timeout))
    report = {name: ({"error": error} if error else {"pid": started[name][1].pid, "metrics_url": started[name][2]})
              for name, error in sorted(outcome.items())}
    print(json.dumps(report))
    failed = sorted(name for name, error in outcome.items() if error)
    if failed:
        sys.stderr.write("%d of %d routers did not come up within %g s:\n" % (len(failed), len(nodes), timeout))
        for name in failed:
            sys.stderr.write("%s: %s\n" % (name, outcome[name]))
        return 1
    return 0


def _compile(code, pythons):
    """Byte-compile the shared code once for every python the routers use, before they start: each router
    then loads it instead of compiling it (about a third of a router's start-up CPU; routers and traffic
    run with PYTHONDONTWRITEBYTECODE and write nothing). A failure here only costs that time."""
    for python in sorted(set(pythons)):
        subprocess.run([python, "-m", "compileall", "-q", "-j", "0"]
                       + [os.path.join(code, d) for d in ("router", "traffic", "lib") if os.path.isdir(os.path.join(code, d))],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def machine_stop(plan_path, timeout):
    _, nodes = _read_plan(plan_path)
    return _stop_all({node["name"]: node["dir"] for node in nodes}, timeout)


def machine_pack(plan_path):
    """One gzip tarball of every node's router.log, events.jsonl and router.json (as <node>/<file>;
    missing files skipped), base64-encoded on stdout."""
    import base64
    import io
    import tarfile

    _, nodes = _read_plan(plan_path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for node in nodes:
            for name in ("router.log", "events.jsonl", "router.json"):
                path = os.path.join(node["dir"], name)
                if os.path.isfile(path):
                    tar.add(path, arcname="%s/%s" % (node["name"], name))
    sys.stdout.write(base64.b64encode(buf.getvalue()).decode())
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="nodectl.py")
    parser.add_argument("command", choices=("check", "start", "stop", "machine-start", "machine-stop", "machine-pack"))
    parser.add_argument("--dir")
    parser.add_argument("--code", help="the folder with router/ and lib/ (default: --dir)")
    parser.add_argument("--plan", help="machine-*: the machine's plan (JSON; - for stdin)")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    if args.command.startswith("machine-"):
        if not args.plan:
            parser.error("%s needs --plan" % args.command)
        if args.command == "machine-start":
            return machine_start(args.plan, args.timeout)
        if args.command == "machine-stop":
            return machine_stop(args.plan, args.timeout)
        return machine_pack(args.plan)
    if not args.dir:
        parser.error("%s needs --dir" % args.command)
    d = os.path.abspath(args.dir)
    if args.command == "check":
        return check(d)
    if args.command == "start":
        return start(d, args.timeout, os.path.abspath(args.code) if args.code else None)
    return stop(d, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
