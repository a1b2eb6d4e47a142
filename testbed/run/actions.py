"""What the run's timeline does at each of its items: the scenario's events and the launch/stop of traffic
processes (testbed.run.scenario.Timeline calls :meth:`ScenarioActions.apply`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from testbed.links.control import LinkControl, apply_set_link
from testbed.run.routercontrol import RouterControl
from testbed.run.traffic import TrafficProcess, TrafficRunner
from testbed.spec.resolve import Shaping


@dataclass(frozen=True)
class TrafficLaunch:
    """An internal timeline item: start or stop a traffic process at a time of the run clock."""

    at: int
    action: str  # launch_traffic | stop_traffic
    process: str
    source: str = "orchestrator"


class ScenarioActions:
    """Carries out the timeline: the scenario's events, and the launch/stop of traffic processes."""

    def __init__(self, spec, links: LinkControl, traffic: TrafficRunner, processes: dict[str, TrafficProcess],
                 plan, routers: RouterControl):
        self.spec, self.links, self.traffic, self.processes = spec, links, traffic, processes
        self.plan, self.routers = plan, routers

    def apply(self, event) -> dict:
        action = event.action
        if action == "launch_traffic":
            self.traffic.start(self.processes[event.process])
            return {"process": event.process}
        if action == "stop_traffic":
            self.traffic.signal_stop(event.process)  # reaped at the end; the timeline goes on
            return {"process": event.process}
        if action == "set_link":
            index = self.spec.link_index(event.link)
            ts, changes, plans = apply_set_link(self.links, index, event)
            dropped = sorted({feature for plan in plans for feature in plan.dropped})
            told = []
            if "bw_bps" in changes:  # the routers' congestion monitors must decide against the new capacity
                told = [asdict(u) for u in self.routers.tell_link_bandwidth(self.links.lab.find_link(index),
                                                                             changes["bw_bps"], event.node)]
            recorded = {k: v for k, v in asdict(Shaping(**changes)).items() if k in changes}  # models as mappings
            return {"ts_ns": ts, "link": index, "node": event.node, **recorded, "left_out": dropped,
                    "routers_told": told}
        if action in ("link_down", "link_up"):
            index = self.spec.link_index(event.link)
            ts = self.links.link_down(index) if action == "link_down" else self.links.link_up(index)
            return {"ts_ns": ts, "link": index}
        if action in ("start_flow", "stop_flow"):
            # Publishers follow their plan: the flow switches exactly at this time of the run clock.
            control = next((c for c in self.plan.controls if c.at_ns == event.at and c.action == action
                            and c.flow == event.flow), None)
            return {"flow": event.flow, "flows": list(control.flows) if control else [],
                    "processes": list(control.processes) if control else []}
        if action == "kill_router":
            return {"ts_ns": self.routers.kill(event.node), "node": event.node}
        if action == "restart_router":
            began, ready = self.routers.restart(event.node)
            return {"ts_ns": began, "node": event.node, "ready_ns": ready}
        raise ValueError(f"unknown scenario action {action!r}")
