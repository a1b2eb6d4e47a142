#!/usr/bin/env python3
"""Start, stop and check the router on a node (shipped in the bundle; python3 >= 3.9, stdlib only).

    python3 nodectl.py check --dir DIR            # validate DIR/router.json with the router itself
    python3 nodectl.py start --dir DIR [--timeout S]
    python3 nodectl.py stop  --dir DIR [--timeout S]

DIR is the install directory: ``router/``, ``traffic/``, ``lib/`` (prometheus_client),
``router.json``. ``start`` launches the router in its own session (it outlives the SSH
session), writes ``router.pid``, appends stderr to ``router.log`` and returns once the
metrics endpoint answers — or fails at once, with the end of the log, if the router
exits. ``stop`` sends SIGTERM, waits, then SIGKILL. Exit status 0 on success, 1 otherwise;
the reason is on stderr.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request


def _env(d):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(d, "lib"), d] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
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


def start(d, timeout):
    url = _metrics_url(d)
    pid = _pid(d)
    if pid is not None:
        print(json.dumps({"pid": pid, "metrics_url": url, "already_running": True}))
        return 0
    log_path = os.path.join(d, "router.log")
    with open(log_path, "ab") as log:
        p = subprocess.Popen([sys.executable, "-m", "router", "--config", os.path.join(d, "router.json")],
                             cwd=d, env=_env(d), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True)
    with open(os.path.join(d, "router.pid"), "w") as f:
        f.write("%d\n" % p.pid)
    deadline = time.monotonic() + timeout
    while True:
        rc = p.poll()
        if rc is not None:
            sys.stderr.write("router exited with status %d at start; end of %s:\n%s\n" % (rc, log_path, _tail(log_path)))
            return 1
        if url is None or _answers(url):
            break
        if time.monotonic() > deadline:
            sys.stderr.write("router (pid %d) started but %s did not answer within %g s; end of %s:\n%s\n"
                             % (p.pid, url, timeout, log_path, _tail(log_path)))
            return 1
        time.sleep(0.05)
    print(json.dumps({"pid": p.pid, "metrics_url": url, "already_running": False}))
    return 0


def stop(d, timeout):
    pid = _pid(d)
    if pid is None:
        print("router not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _is_router(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    how = "SIGTERM"
    if _is_router(pid):
        os.kill(pid, signal.SIGKILL)
        how = "SIGKILL (did not stop within %g s of SIGTERM)" % timeout
        time.sleep(0.2)
    print("router (pid %d) stopped by %s" % (pid, how))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="nodectl.py")
    parser.add_argument("command", choices=("check", "start", "stop"))
    parser.add_argument("--dir", required=True)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    d = os.path.abspath(args.dir)
    if args.command == "check":
        return check(d)
    if args.command == "start":
        return start(d, args.timeout)
    return stop(d, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
