"""The one place a traffic process opens its session: the plan's client library (``plan.router.client``).

* ``"testbed"``: traffic/client.py, our router's protocol (the default);
* ``"zenoh"``: traffic/zenohclient.py, a zenoh client session to a stock Zenoh router (imported
  only then: a node that runs our router needs no zenoh).

Both sessions offer what the traffic processes use: ``declare_publisher`` (``put`` -> bool),
``declare_subscriber(key, callback=)``, ``closed``, ``close_reason``, ``router_name``,
``close(timeout)`` and ``abort(reason)``. ``client_drops(pub)`` is what a publisher's client
dropped after its ``put`` had returned True, once the session is closed (only the zenoh client does).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Tuple

from runfolder.trafficplan import CLIENTS, ProcessPlan

from .clients import UnsupportedByClient

_S = 1_000_000_000


async def open_session(plan: ProcessPlan, timeout: float, slow_reader: bool = False,
                       logger: Optional[logging.Logger] = None) -> Any:
    """A session to the plan's router with the plan's client library; raises what that library's
    ``connect`` raises (unreachable router, time-out), or UnsupportedByClient."""
    client = plan.client
    if client == "zenoh":
        try:
            from . import zenohclient
        except ImportError as exc:
            raise UnsupportedByClient(f"the zenoh client needs the zenoh package (eclipse-zenoh): {exc}") from None
        return await zenohclient.connect(plan.host, plan.port, name=plan.name, timeout=timeout,
                                         slow_reader=slow_reader, retry_max_s=plan.retry_max_ns / _S,
                                         logger=logger)
    if client != "testbed":
        raise UnsupportedByClient(f"client {client!r} is not one of {', '.join(CLIENTS)}")
    from .client import connect

    return await connect(plan.host, plan.port, name=plan.name, timeout=timeout, slow_reader=slow_reader)


def client_drops(pub: Any) -> Tuple[int, Optional[Dict[str, int]]]:
    """Once its session is closed (or aborted): how many messages a publisher's client dropped after
    ``put`` had returned True for them (the zenoh client: put errors, messages discarded at close or
    abort; the testbed client: 0), and all its client drops by reason (None: the client gives none)."""
    return int(getattr(pub, "dropped_after_put", 0)), getattr(pub, "drops", None)
