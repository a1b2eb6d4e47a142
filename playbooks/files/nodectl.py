#!/usr/bin/env python3
"""Start, stop and check the router under test on a node (shipped in the bundle; python3 >= 3.9, stdlib only).

    python3 nodectl.py check  --dir DIR            # validate the config with the router itself (if it can)
    python3 nodectl.py start  --dir DIR [--timeout S]
    python3 nodectl.py stop   --dir DIR [--timeout S]
    python3 nodectl.py signal --dir DIR [--signal KILL]   # at once, no goodbye (scenario kill_router)
    python3 nodectl.py status --dir DIR                   # exit 0 if its router runs (its pid on stdout)
    python3 nodectl.py pack   --dir DIR                   # its files, one base64 tarball on stdout (after a TBPACK header)
    python3 nodectl.py machine-start --plan FILE [--timeout S]   # every node of a machine at once
    python3 nodectl.py machine-stop  --plan FILE [--timeout S]
    python3 nodectl.py machine-pack  --plan FILE                 # their files, one tarball on stdout
    python3 nodectl.py machine-collect --plan FILE --dest DIR    # their files copied to DIR/<node>/

DIR is the install directory; ``launch.json`` there says how to start the router (written by the
orchestrator from the router driver, testbed/drivers/base.py ``NodeLaunch``): ``argv`` (``{python}``,
``{dir}``, ``{code}`` filled in here), ``files`` (its config, written into DIR before the start),
``env``, ``ready`` (``{"http": URL}``: answers 200; ``{"tcp": PORT}``: the router process listens on
PORT in its network namespace, read from /proc/PID/net/tcp) and ``check`` (an argv that validates
the config, optional). ``start`` launches the router in its own session (it outlives the SSH
session), writes ``router.pid`` (pid and start time: a pid reused by another process is never
signalled), appends the router's stdout and stderr to ``router.log`` and returns once it is ready —
or fails at once, with the end of the log, if the router exits. ``stop`` sends SIGTERM, waits, then
SIGKILL. Exit status 0 on success, 1 otherwise; the reason is on stderr. ``--code`` names the folder
holding ``router/``, ``traffic/``, ``runfolder/`` and ``lib/`` when it is not DIR (nodes that share a machine share
one copy).

The ``machine-*`` commands serve nodes that share this machine's files and process IDs (network
namespaces of one machine, e.g. a Mininet lab): the plan (JSON: ``code_dir`` and ``nodes``, each
``{"name", "dir", "enter": [argv prefix that runs a command in the node], "python", "launch"}``) is
read once, every node's folder and files written, every router launched at once through its
node's ``enter`` prefix, and every readiness check waited for together: one process for the
machine instead of one SSH session, module run and Python start per node. ``machine-start``
prints one JSON object, node -> {pid, ready_url} (the URL of an http readiness check, e.g. our
router's metrics endpoint; null for a tcp check) or {error}, and fails (status 1) naming
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


LAUNCH = "launch.json"
#: what a node's router leaves in its install folder, beside the files its launch writes
ROUTER_FILES = ("router.log", "events.jsonl", LAUNCH)


def _env(code, extra=None, fill=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(code, "lib"), code]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for key, value in (extra or {}).items():
        env[key] = fill(value) if fill else value
    return env


def _read_launch(d):
    with open(os.path.join(d, LAUNCH)) as f:
        return json.load(f)


def _filler(d, code, python):
    def fill(text):
        return text.replace("{python}", python).replace("{dir}", d).replace("{code}", code)
    return fill


def _start_time(pid):
    """The process's start time (clock ticks since boot) and state, or (None, None) if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None, None
    return fields[19], fields[0]


def _pid(d):
    """The pid of the router this folder started (also its process group and session: it was started in a
    session of its own), if that router is still there: its leader with the recorded start time, or — the
    leader gone — processes of its group (a pid is not reused while its group lives)."""
    try:
        with open(os.path.join(d, "router.pid")) as f:
            words = f.read().split()
        pid, started = int(words[0]), (words[1] if len(words) > 1 else None)
    except (OSError, ValueError, IndexError):
        return None
    return pid if _is_alive(pid, started) else None


def _is_alive(pid, started):
    now, state = _start_time(pid)
    if now is not None and state not in ("Z", "X"):
        return started is None or now == started
    if now is not None and started is not None and now != started and state not in ("Z", "X"):
        return False  # another process has this pid now
    return _group_alive(pid)


def _group_alive(pgid):
    """Whether a live (not zombie) process is left in process group ``pgid``: what the router started (a
    wrapper's child) may outlive it. Read from /proc: only when the router itself is gone."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def _group(pid):
    """The router and its descendants (from /proc/PID/task/*/children)."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        try:
            for task in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, task)) as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return seen


def _tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:]) or "(log empty)"


def _write_files(d, launch):
    """The launch's files (the router's config) into ``d``, readable by root only, each replaced at once."""
    old = os.umask(0o077)
    try:
        for name, text in sorted(launch.get("files", {}).items()):
            path = os.path.join(d, name)
            with open(path + ".new", "w") as f:
                f.write(text)
            os.replace(path + ".new", path)
    finally:
        os.umask(old)


def check(d, code=None, python=None):
    launch = _read_launch(d)
    if not launch.get("check"):
        print("the %s driver has no config check" % launch.get("driver", "?"))
        return 0
    _write_files(d, launch)
    code = code or d
    fill = _filler(d, code, python or sys.executable)
    r = subprocess.run([fill(a) for a in launch["check"]], cwd=d, env=_env(code, launch.get("env"), fill),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    return r.returncode


def _ready_url(launch):
    """The URL of an http readiness check (our router's: its metrics endpoint), else None."""
    return launch.get("ready", {}).get("http")


def _answers(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except Exception:
        return False


def _listening(pid, port):
    """Whether the router ``pid`` (or a process it started) holds a socket listening on TCP ``port``: the
    listening sockets of its network namespace (/proc/PID/net/tcp, tcp6) that are among its open files —
    not any listener of the namespace (a leftover on a lab machine would make a dead router look ready)."""
    want, inodes = ":%04X" % port, set()
    for name in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, name)) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if len(fields) > 9 and fields[1].endswith(want) and fields[3] == "0A":
                        inodes.add("socket:[%s]" % fields[9])
        except (OSError, StopIteration):
            continue
    if not inodes:
        return False
    for p in _group(pid):
        try:
            fds = os.listdir("/proc/%d/fd" % p)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("/proc/%d/fd/%s" % (p, fd)) in inodes:
                    return True
            except OSError:
                continue
    return False


class LaunchError(Exception):
    """The router's command could not be started at all (no such file, not executable, empty)."""


def _launch(d, code, enter=(), python=None):
    """Start the router of node folder ``d`` (code from ``code``) in its own session, through the
    ``enter`` prefix (which must exec the command: the process started is the router); its files and
    pid file written. Returns the Popen."""
    launch = _read_launch(d)
    _write_files(d, launch)
    fill = _filler(d, code, python or sys.executable)
    argv = [fill(a) for a in launch.get("argv") or ()]
    if not argv:
        raise LaunchError("the launch has an empty command line")
    log_path = os.path.join(d, "router.log")
    with open(log_path, "ab") as log:
        try:
            p = subprocess.Popen(list(enter) + argv, cwd=d, env=_env(code, launch.get("env"), fill),
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        except (OSError, ValueError) as exc:
            raise LaunchError("%s: %s" % (argv[0], exc))
    started, _ = _start_time(p.pid)
    with open(os.path.join(d, "router.pid"), "w") as f:
        f.write("%d %s\n" % (p.pid, started or ""))
    return p


def _wait_ready(started, timeout):
    """Wait for every launched router to be ready: ``started`` is {name: (dir, Popen, ready)} with ready
    {"http": url} or {"tcp": port}. One waiting thread per router, each asking less often the longer it
    waits (0.05 s up to 1 s), so that many routers starting at once on few cores are not slowed by their
    own readiness checks and one slow answer holds up no other. Returns {name: None when ready, else the
    reason, with the end of its log}."""
    import threading

    deadline = time.monotonic() + timeout
    outcome = {}

    def wait(name, d, p, ready):
        log_path = os.path.join(d, "router.log")
        pause = 0.05
        what = ready.get("http") or "TCP port %s" % ready.get("tcp")
        while True:
            rc = p.poll()
            if rc is not None:
                outcome[name] = "router exited with status %d at start; end of %s:\n%s" % (rc, log_path, _tail(log_path))
                return
            if (_answers(ready["http"]) if "http" in ready else
                    _listening(p.pid, int(ready["tcp"])) if "tcp" in ready else True):
                outcome[name] = None
                return
            if time.monotonic() > deadline:
                outcome[name] = ("router (pid %d) started but %s did not answer within %g s; end of %s:\n%s"
                                 % (p.pid, what, timeout, log_path, _tail(log_path)))
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


def start(d, timeout, code=None, python=None):
    launch = _read_launch(d)
    url = _ready_url(launch)
    pid = _pid(d)
    if pid is not None:
        print(json.dumps({"pid": pid, "ready_url": url, "already_running": True}))
        return 0
    try:
        p = _launch(d, code or d, python=python)
    except LaunchError as exc:
        sys.stderr.write("router could not be started: %s\n" % exc)
        return 1
    error = _wait_ready({"router": (d, p, launch.get("ready", {}))}, timeout)["router"]
    if error is not None:
        sys.stderr.write(error + "\n")
        _stop_all({"router": d}, 2.0, quiet=True)
        return 1
    print(json.dumps({"pid": p.pid, "ready_url": url, "already_running": False}))
    return 0


def stop(d, timeout):
    return _stop_all({"router": d}, timeout)


def send_signal(d, sig):
    """Signal the router of ``d`` at once (the scenario's kill_router); status 1 if none runs."""
    pid = _pid(d)
    if pid is None:
        sys.stderr.write("no router running on this node\n")
        return 1
    _signal_group(pid, getattr(signal, "SIG" + sig.upper().replace("SIG", "", 1)))
    return 0


def _signal_group(pid, sig):
    """Signal the router and everything it started (its process group)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:  # not a group leader after all (an old pid file): the process alone
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _stop_all(dirs, timeout, quiet=False):
    """SIGTERM every running router of ``dirs`` ({name: folder}) at once, wait for all, SIGKILL those
    still there after ``timeout``; one line per router."""
    def say(line):
        if not quiet:
            print(line)

    running = {}
    for name, d in dirs.items():
        pid = _pid(d)
        if pid is not None:
            running[name] = (pid, _start_time(pid)[0])
    for name in sorted(set(dirs) - set(running)):
        say("router not running" if name == "router" else "%s: router not running" % name)
    for pid, _ in running.values():
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(_is_alive(*entry) for entry in running.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for name, (pid, started) in sorted(running.items()):
        how = "SIGTERM"
        if _is_alive(pid, started):
            _signal_group(pid, signal.SIGKILL)
            how = "SIGKILL (did not stop within %g s of SIGTERM)" % timeout
        prefix = "" if name == "router" else "%s: " % name
        say("%srouter (pid %d) stopped by %s" % (prefix, pid, how))
    if any(_is_alive(*entry) for entry in running.values()):
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
        _write_files(d, {"files": {LAUNCH: json.dumps(node["launch"], indent=2)}})
    _compile(code, [n.get("python") or sys.executable for n in nodes if n["name"] not in outcome])
    for node in nodes:
        if node["name"] not in outcome:
            d = node["dir"]
            try:
                started[node["name"]] = (d, _launch(d, code, node.get("enter") or (), node.get("python")),
                                         node["launch"].get("ready", {}))
            except LaunchError as exc:
                outcome[node["name"]] = "router could not be started: %s" % exc
    outcome.update(_wait_ready(started, timeout))
    report = {name: ({"error": error} if error else {"pid": started[name][1].pid,
                                                     "ready_url": started[name][2].get("http")})
              for name, error in sorted(outcome.items())}
    print(json.dumps(report))
    failed = sorted(name for name, error in outcome.items() if error)
    if failed:
        sys.stderr.write("%d of %d routers did not come up within %g s:\n" % (len(failed), len(nodes), timeout))
        for name in failed:
            sys.stderr.write("%s: %s\n" % (name, outcome[name]))
        # nothing left running: the routers that did come up are stopped too (the run cannot go on)
        _stop_all({node["name"]: node["dir"] for node in nodes}, 2.0, quiet=True)
        return 1
    return 0


def _compile(code, pythons):
    """Byte-compile the shared code once for every python the routers use, before they start: each router
    then loads it instead of compiling it (about a third of a router's start-up CPU; routers and traffic
    run with PYTHONDONTWRITEBYTECODE and write nothing). A failure here only costs that time."""
    for python in sorted(set(pythons)):
        subprocess.run([python, "-m", "compileall", "-q", "-j", "0"]
                       + [os.path.join(code, d) for d in sorted(os.listdir(code))
                          if d in ("router", "traffic", "runfolder", "zenohrouter", "lib") and os.path.isdir(os.path.join(code, d))],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def machine_stop(plan_path, timeout):
    _, nodes = _read_plan(plan_path)
    return _stop_all({node["name"]: node["dir"] for node in nodes}, timeout)


def _router_files(d):
    """The files a router leaves in its folder worth keeping: logs, event log, launch and its config files."""
    names = list(ROUTER_FILES)
    try:
        names += sorted(_read_launch(d).get("files", {}))
    except (OSError, ValueError):
        pass
    return [n for n in names if os.path.isfile(os.path.join(d, n))]


def pack(entries):
    """One gzip tarball of the router files of ``entries`` ([(arc prefix, folder)]), base64 on stdout after
    a header line ``TBPACK <characters> <sha256 of them>``: the controller (vars/common.yml's
    collect_unpack_script) unpacks it only if it arrived whole, and otherwise says what arrived."""
    import base64
    import hashlib
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for prefix, d in entries:
            for name in _router_files(d):
                tar.add(os.path.join(d, name), arcname=prefix + name)
    text = base64.b64encode(buf.getvalue())
    sys.stdout.write("TBPACK %d %s\n%s" % (len(text), hashlib.sha256(text).hexdigest(), text.decode()))
    return 0


def machine_pack(plan_path):
    """Every node's router files as <node>/<file> (missing files skipped)."""
    _, nodes = _read_plan(plan_path)
    return pack([(node["name"] + "/", node["dir"]) for node in nodes])


def machine_collect(plan_path, dest):
    """Every node's router files copied to ``dest``/<node>/ (missing files skipped): machine-pack's files,
    for a machine that is the controller itself (no tarball to carry), with their times. A node whose files
    cannot be copied does not stop the others': exit 1 naming each such node and why."""
    import shutil

    _, nodes = _read_plan(plan_path)
    failed = []
    for node in nodes:
        target = os.path.join(dest, node["name"])
        try:
            names = _router_files(node["dir"])
            if names:
                os.makedirs(target, exist_ok=True)
            for name in names:
                shutil.copy2(os.path.join(node["dir"], name), os.path.join(target, name))
        except OSError as err:
            failed.append("%s: %s" % (node["name"], err))
    if failed:
        sys.stderr.write("machine-collect: the files of %d node(s) were not all copied: %s\n"
                         % (len(failed), "; ".join(failed)))
        return 1
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="nodectl.py")
    parser.add_argument("command", choices=("check", "start", "stop", "signal", "status", "pack", "machine-start", "machine-stop",
                                            "machine-pack", "machine-collect"))
    parser.add_argument("--dir")
    parser.add_argument("--code", help="the folder with router/ and lib/ (default: --dir)")
    parser.add_argument("--plan", help="machine-*: the machine's plan (JSON; - for stdin)")
    parser.add_argument("--dest", help="machine-collect: the folder that receives <node>/<file>")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--signal", default="KILL", help="signal: the signal's name (default KILL)")
    args = parser.parse_args(argv)
    if args.command.startswith("machine-"):
        if not args.plan:
            parser.error("%s needs --plan" % args.command)
        if args.command == "machine-start":
            return machine_start(args.plan, args.timeout)
        if args.command == "machine-stop":
            return machine_stop(args.plan, args.timeout)
        if args.command == "machine-collect":
            if not args.dest:
                parser.error("machine-collect needs --dest")
            return machine_collect(args.plan, args.dest)
        return machine_pack(args.plan)
    if not args.dir:
        parser.error("%s needs --dir" % args.command)
    d = os.path.abspath(args.dir)
    code = os.path.abspath(args.code) if args.code else None
    if args.command == "check":
        return check(d, code)
    if args.command == "start":
        return start(d, args.timeout, code)
    if args.command == "signal":
        return send_signal(d, args.signal)
    if args.command == "pack":
        return pack([("", d)])
    if args.command == "status":
        pid = _pid(d)
        if pid is not None:
            print(pid)
        return 0 if pid is not None else 1
    return stop(d, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
