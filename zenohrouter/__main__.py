"""``python -m zenohrouter --config zenoh.json5``: run a stock Zenoh router until SIGTERM/SIGINT.

The config is a Zenoh JSON5 file (written by the orchestrator); its ``mode`` must be
``"router"``. The process opens a zenoh session from it, writes one line on stderr once the
session is open (listeners bound, connectors started)::

    zenohrouter ready zid=<zid> listen=["tcp/10.0.1.1:7447", ...]

then one line per session with another node opened or closed (``zenohrouter: transport up router
<zid>``, ``... down client <zid>``), waits for SIGTERM or SIGINT, closes the session and exits 0. Exit status 2, with the
reason on stderr (zenoh's own error text where zenoh refused): the file cannot be read or is not
a valid Zenoh config (zenoh rejects unknown keys), its mode is not "router", or the session
cannot be opened (e.g. a listen address already in use or not on this machine). ``--check``
only reads and checks the config.

What we found about zenoh 1.x (eclipse-zenoh 1.10.2, DEFAULT_CONFIG.json5 of eclipse-zenoh/zenoh,
zenoh-python's stubs, and tried here):

* Logging: ``zenoh.init_log_from_env_or(level)`` turns on zenoh's tracing logs on *stdout*;
  ``RUST_LOG`` (e.g. ``RUST_LOG=zenoh=debug``) wins over ``level`` when set. Set once per
  process, before ``zenoh.open``. ANSI colours are on unless ``NO_COLOR`` is set (set here
  unless the caller set it, so that log files stay plain text). At level ``info`` zenoh logs
  "Zenoh can be reached at: <locator>" for each listener.
* Routing: a session opened in ``mode: "router"`` from Python runs the same router as
  ``zenohd`` (the "router" HAT): routers always build a link-state graph among themselves and
  route on shortest paths; ``routing.peer.mode`` is deprecated and has no effect. Link weights:
  ``routing.router.linkstate.transport_weights: [{dst_zid, weight}]`` (default weight 100 on
  each side; the greater wins) -- set a fixed ``id`` per node to refer to it.
* Only configured neighbours: ``scouting.multicast.enabled: false`` (no UDP multicast scouting,
  no replies to scouts) and ``scouting.gossip.enabled: false`` (no gossip of other nodes'
  locators; routers' gossip/multicast ``autoconnect`` is already empty for routers, but gossip
  still spreads locators to peers). Then a router talks only to ``connect.endpoints`` and to
  whoever dials its ``listen.endpoints``. A router connects to ``connect.endpoints`` in the
  background (``connect.timeout_ms`` -1 for routers: open does not wait for them) and
  reconnects after a loss with ``connect.retry`` (period_init_ms 1000, period_max_ms 4000,
  factor 2 by default). ``listen`` failures make open fail (``listen.exit_on_failure`` true).
  ``scouting.delay`` (500 ms) is slept at router start-up even with scouting off: set it to 0.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
from typing import Any, List, Optional

from . import READY

PROG = "zenohrouter"


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    return 2


def _get(config: Any, key: str) -> Any:
    """A config value (``Config.get_json`` gives it as JSON text); None if unset."""
    try:
        return json.loads(config.get_json(key))
    except Exception:
        return None


class _Stop:
    """SIGTERM/SIGINT: remembered (from before ``zenoh.open`` on) and waking the main thread at once
    through a wake-up pipe (the signal may be delivered to one of zenoh's threads)."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self._r, w = os.pipe()
        os.set_blocking(w, False)
        os.set_blocking(self._r, False)
        signal.set_wakeup_fd(w)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum = signum

    def wait(self) -> int:
        while self.signum is None:
            try:
                select.select([self._r], [], [], 1.0)
            except InterruptedError:
                pass
            try:
                while os.read(self._r, 512):
                    pass
            except BlockingIOError:
                pass
        return self.signum


def _log_transport(event: Any) -> None:
    """(zenoh's callback thread) One line per Zenoh session to another node opened or closed:
    ``zenohrouter: transport up|down <router|peer|client> <zid>``."""
    import zenoh

    t = event.transport
    how = "down" if event.kind == zenoh.SampleKind.DELETE else "up"
    print(f"{PROG}: transport {how} {str(t.whatami).lower()} {t.zid}", file=sys.stderr, flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {PROG}",
                                     description="Run a stock Zenoh router (eclipse-zenoh, router mode) from a "
                                                 "Zenoh JSON5 config until SIGTERM/SIGINT")
    parser.add_argument("--config", required=True, help="Zenoh JSON5 config file (mode must be \"router\")")
    parser.add_argument("--log-level", default="warn",
                        help="zenoh's log level (error|warn|info|debug|trace) when RUST_LOG is not set; "
                             "logs go to stdout (default: warn)")
    parser.add_argument("--check", action="store_true", help="check the config and exit")
    args = parser.parse_args(argv)
    try:
        import zenoh
    except ImportError as exc:
        return _fail(f"cannot import zenoh ({exc}); ship eclipse-zenoh in the bundle's lib/ "
                     "or `pip install eclipse-zenoh`")
    try:
        config = zenoh.Config.from_file(args.config)
    except Exception as exc:  # zenoh.ZError: unreadable file, JSON5 syntax, unknown or mistyped key
        return _fail(f"invalid config {args.config}: {exc}")
    mode = _get(config, "mode")
    if mode != "router":
        return _fail(f"config {args.config}: mode is {json.dumps(mode)}, this program runs only a router "
                     f"(set mode: \"router\"; zenoh's default is \"peer\")")
    listen = _get(config, "listen/endpoints")
    if args.check:
        print(f"{PROG}: config {args.config} is valid (router, listen={json.dumps(listen)})")
        return 0
    os.environ.setdefault("NO_COLOR", "1")
    zenoh.init_log_from_env_or(args.log_level)
    stop = _Stop()  # before the session: a stop signal during open is kept, and honoured once it is open
    try:
        session = zenoh.open(config)
    except Exception as exc:
        return _fail(f"cannot open the router session: {exc}")
    try:
        try:
            transports = session.info.declare_transport_events_listener(_log_transport, history=True)  # noqa: F841
        except Exception as exc:  # only a log line is lost
            print(f"{PROG}: transport events not logged: {exc}", file=sys.stderr, flush=True)
            transports = None
        print(f"{READY} zid={session.zid()} listen={json.dumps(listen)}", file=sys.stderr, flush=True)
        signum = stop.wait()
        print(f"{PROG}: {signal.Signals(signum).name} received: closing", file=sys.stderr, flush=True)
    finally:
        session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
