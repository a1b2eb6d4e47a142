"""The lab holder: a background process that builds a lab, keeps it, and removes it on SIGTERM.

Started by `testbed up`, which waits until the lab state says `up` (with `--routers`: until the routers
it started are recorded too) or this process exits, leaving its error in the error file. `testbed down` and
`testbed exec` find it through the state file. If it is killed hard, `testbed clean`
removes what it left.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from testbed.backends import BackendOptions
from testbed.lab.session import LabSession


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.lab.holder")
    parser.add_argument("spec")
    parser.add_argument("--allow-missing", action="store_true")
    BackendOptions.add_arguments(parser)
    parser.add_argument("--routers", action="store_true", help="also start the router under test on every node")
    parser.add_argument("--error-file", required=True, help="where to write the reason if the lab cannot be built")
    args = parser.parse_args(argv)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())

    from testbed.drivers import resolve_paths
    from testbed.spec import load_spec

    try:
        spec = load_spec(args.spec)
        session = LabSession(resolve_paths(spec, Path(args.spec).resolve().parent), allow_missing=args.allow_missing,
                             backend=BackendOptions.from_args(args), spec_path=os.path.abspath(args.spec), management=args.routers)
        session.open()
    except Exception as exc:
        Path(args.error_file).write_text(str(exc))
        return 1
    routers = None
    try:
        if args.routers:
            from testbed.lab.routers import LabRouters, ready_timeout_for

            routers = LabRouters(session, ready_timeout_for(spec, args.backend))
            session.state.routers = routers.start()
            session.state.save()
            print(f"routers up on {', '.join(session.state.routers['nodes'])}", flush=True)
        print(f"lab {spec.name} up", flush=True)
        stop.wait()
    except Exception as exc:
        Path(args.error_file).write_text(f"the routers could not be started: {exc}")
        return_code = 1
    else:
        return_code = 0
    finally:
        try:
            if routers is not None:
                routers.stop()
        finally:
            session.close()
    print(f"lab {spec.name} down", flush=True)
    return return_code


if __name__ == "__main__":
    sys.exit(main())
