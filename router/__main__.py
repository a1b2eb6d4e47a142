"""``python -m router --config node.json``: run one router until SIGINT/SIGTERM."""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import List, Optional

from .config import ConfigError, RouterConfig, load_config
from .eventloop import LoopUnavailable, choose_loop, run_on
from .events import EventLog
from .memory import keep_large_allocations_in_the_heap
from .node import RouterNode


class NanosecondFormatter(logging.Formatter):
    """Log lines start with integer nanoseconds since the Unix epoch."""

    def format(self, record: logging.LogRecord) -> str:
        record.ts_ns = getattr(record, "created_ns", int(record.created * 1e9))
        return super().format(record)


async def run(config: RouterConfig, loop_name: str = "asyncio") -> None:
    events = EventLog(config.node, config.event_log)
    node = RouterNode(config, events)
    await node.start()
    http = None
    if config.metrics_listen is not None:
        try:
            from .metrics import HttpServer, make_registry
        except ImportError as exc:
            raise SystemExit(f"router: metrics_listen is set but prometheus-client is not installed ({exc}); "
                             "install it from the wheelhouse or remove metrics_listen") from None
        http = HttpServer(node, make_registry(node), config.admin_token)
        port = await http.start(config.metrics_listen.host, config.metrics_listen.port)
        events.emit("metrics_listening", address=f"{config.metrics_listen.host}:{port}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before "ready": whoever reads it may stop us at once
        loop.add_signal_handler(sig, stop.set)
    events.emit("ready", event_loop=loop_name, router_listen=[str(a) for a in node.ready_addresses.get("router", [])],
                client_listen=[str(a) for a in node.ready_addresses.get("client", [])])
    await stop.wait()
    events.emit("stopping")
    if http is not None:
        http.close()
    await node.stop()
    await asyncio.sleep(0.05)
    events.close()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m router", description="Pub/sub router under test")
    parser.add_argument("--config", required=True, help="node config file (.json, or .yaml if PyYAML is installed)")
    parser.add_argument("--check", action="store_true", help="validate the config and exit")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"router: invalid config: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(f"router: config {args.config} is valid (node {config.node})")
        return 0
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NanosecondFormatter("%(ts_ns)d %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=config.log_level, handlers=[handler])
    keep_large_allocations_in_the_heap()
    try:
        loop_name, factory = choose_loop(config.event_loop)
    except LoopUnavailable as exc:
        print(f"router: {exc}", file=sys.stderr)
        return 2
    try:
        run_on(factory, run(config, loop_name))
    except OSError as exc:
        print(f"router: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
