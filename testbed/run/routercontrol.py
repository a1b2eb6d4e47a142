"""The routers during a run: the scenario's kill_router / restart_router, and a link's new bandwidth told to
the routers that send on it (scenario set_link)."""
from __future__ import annotations

import time
from typing import Optional


class RouterControl:
    """The routers during the run: kill and restart them (scenario kill_router / restart_router, over
    SSH), and tell them of a link's new bandwidth (scenario set_link, over their admin API)."""

    def __init__(self, deployer):
        self.deployer = deployer
        #: (sending router, link index) -> (link, bandwidth) set since deployment: a restarted router,
        #: which starts from the capacities in its config file, is told them again
        self.told: dict[tuple[str, int], tuple] = {}

    def kill(self, node: str) -> int:
        self.deployer.kill_router(node)
        return time.time_ns()

    def restart(self, node: str) -> tuple[int, int]:
        """Start the router on ``node`` again; (when the restart began, when it was ready). The run's phase
        after a restart starts when it began: a router that serves a query does so after that, never in the
        phase it was down in (its readiness is only known once the driver's check returns, after it served)."""
        began = time.time_ns()
        self.deployer.restart_router(node)  # returns once the router is ready (its driver's readiness check)
        ready = time.time_ns()
        for (sender, _), (link, bw_bps) in list(self.told.items()):
            if sender == node:
                self.tell_link_bandwidth(link, bw_bps, node)
        return began, ready

    def tell_link_bandwidth(self, link, bw_bps, sender: Optional[str]) -> list:
        """Tell the routers that send on ``link`` (``sender``, or both ends) its new bandwidth (admin API).

        A router that cannot be told (e.g. killed by the scenario, or a driver without our admin API)
        is reported, not fatal: the link's shaping has changed all the same, and the event says which
        router did not hear of it and why.
        """
        from testbed.deploy.routeradmin import tell_routers

        driver = self.deployer.driver
        if driver.features.admin:
            for end in ([link.a.node, link.b.node] if sender is None else [sender]):
                self.told[(end, link.index)] = (link, bw_bps)  # also for a router down now: told when it restarts
        return tell_routers(self.deployer.endpoints() if driver.features.admin else {}, link, bw_bps, sender,
                            driver=driver.name, admin=driver.features.admin)
