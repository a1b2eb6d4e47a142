"""The lab holder: a background process that builds a lab, keeps it, and removes it on SIGTERM.

Started by `testbed up`; found again by `testbed down` and `testbed exec` through its
state file. If it is killed hard, `testbed clean` removes what it left.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import traceback

from testbed import kernel, labstate
from testbed.lab import LabSession


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.labd")
    parser.add_argument("spec")
    parser.add_argument("--allow-missing", action="store_true")
    args = parser.parse_args(argv)

    from testbed.spec import load_spec

    spec = load_spec(args.spec)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())

    session = LabSession(spec, kernel.probe(), allow_missing=args.allow_missing)
    state = labstate.LabState(spec.name, "building", os.getpid(), os.path.abspath(args.spec),
                              session.planned_netns())
    state.save()
    try:
        lab = session.open()
    except Exception as exc:
        traceback.print_exc()
        state.status, state.error = "failed", str(exc)
        state.save()
        return 1
    state.status, state.lab = "up", lab.to_json()
    state.save()
    print(f"lab {spec.name} up", flush=True)

    stop.wait()
    state.status = "stopping"
    state.save()
    try:
        session.close()
    finally:
        labstate.remove(spec.name)
    print(f"lab {spec.name} down", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
