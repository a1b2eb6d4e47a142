"""`testbed link`: change a running lab's link as the scenario does, take it down or up, or show it.

The values are read as a scenario `set_link` event's (testbed.spec.models.SetLinkEvent: the same grammar and
checks as in a topology file, each value YAML) and carried out by the code the scenario uses
(testbed.links.control.apply_set_link, LinkControl.link_down / link_up). A change keeps every other value of the
direction as it is now: the base is what is installed, read back from the kernel (testbed.lab.inspect), so
changes made one after the other add up. What is installed afterwards is read back and shown.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Callable, Optional

import yaml
from pydantic import ValidationError

from testbed.lab import state as labstate
from testbed.backends import Lab, get_backend
from testbed.lab.inspect import Direction, current_shaping, lab_of, read_lab
from testbed.links.control import LinkControl, ShapingConflict, apply_set_link
from testbed.links.shaping import UnsupportedShaping
from testbed.spec.models import SHAPING_FIELDS, SetLinkEvent
from testbed.spec.resolve import Shaping


class LinkInputError(ValueError):
    """Bad input (exit 2): an unknown link or node, a value the spec's grammar refuses, no or several actions,
    a shaping the kernel cannot do."""


class LinkRefused(RuntimeError):
    """The link is not this command's to change (exit 1): a running experiment holds the lab."""


#: how long `--up` / `--down` reads the link back until the kernel says what was asked: an interface's operstate
#: follows `ip link set up` a moment later (the kernel's link watch runs at most once a second: a down then up
#: settled in 0.3-1.0 s on a real lab; the read-back said [DOWN] right after `--up` in 2 of 9 tries)
SETTLE_S = 5.0
SETTLE_POLL_S = 0.1


@dataclass
class LinkResult:
    lab: str
    link: int
    label: str
    action: str  # set_link | link_down | link_up | show
    node: Optional[str]  # the end whose egress was changed (None: both)
    #: when the change took effect (ns since the epoch), as the scenario records it
    applied_ns: Optional[int]
    changes: dict = field(default_factory=dict)  # LinkControl.set_shape keywords
    left_out: list[str] = field(default_factory=list)
    #: what the routers of `up --routers` were told of a new bandwidth (routeradmin.CapacityUpdate), as a run's
    #: scenario records it
    routers_told: list[dict] = field(default_factory=list)
    #: both directions, read back from the kernel after the change
    directions: list[Direction] = field(default_factory=list)
    #: --up / --down: whether the read-back came to say what was asked within SETTLE_S (None for other actions)
    settled: Optional[bool] = None

    @property
    def applied_utc(self) -> Optional[str]:
        if self.applied_ns is None:
            return None
        return datetime.fromtimestamp(self.applied_ns / 1e9, tz=timezone.utc).isoformat(timespec="microseconds")

    def to_json(self) -> dict:
        return {**asdict(self), "applied_utc": self.applied_utc}

    def lines(self) -> list[str]:
        out = []
        if self.action == "set_link":
            where = f"{self.node}'s egress" if self.node else "both directions"
            asked = Shaping(**self.changes).describe()
            out.append(f"link [{self.link}] {self.label}: set {asked} on {where}, applied at {self.applied_utc}")
            if self.left_out:
                out.append(f"  left out (this kernel cannot do it): {', '.join(self.left_out)}")
            for told in self.routers_told:
                out.append(f"  router {told['router']} told its capacity toward {told['neighbour']}" if told["applied"]
                           else f"  router {told['router']} not told: {told['skipped']}")
        elif self.action in ("link_down", "link_up"):
            out.append(f"link [{self.link}] {self.label}: {'down' if self.action == 'link_down' else 'up'}, "
                       f"applied at {self.applied_utc}")
        else:
            out.append(f"link [{self.link}] {self.label}")
        for d in self.directions:
            built = "" if d.as_built else f"   (built with: {d.built_text})"
            out.append(f"  {d.sender}->{d.receiver} ({d.interface}): {d.installed_text}"
                       f"{'' if d.up else ' [DOWN]'}{built}")
        if self.settled is False:
            asked = "up" if self.action == "link_up" else "down"
            out.append(f"  the kernel did not read the link as {asked} within {SETTLE_S:g} s of the change "
                       f"(`testbed link {self.lab} {self.link} --show` reads it again)")
        return out


def read_until(read: Callable[[], list[Direction]], up: bool, settle_s: float = SETTLE_S,
               poll_s: float = SETTLE_POLL_S) -> tuple[list[Direction], bool]:
    """Read the link back until every direction is ``up`` (or down) as asked, for ``settle_s`` at the most (at
    least twice): the last reading, and whether it says what was asked."""
    end = time.monotonic() + settle_s
    tries = 0
    while True:
        directions, tries = read(), tries + 1
        if all(d.up == up for d in directions):
            return directions, True
        if tries >= 2 and time.monotonic() >= end:
            return directions, False
        time.sleep(poll_s)


def parse_change(ref: str, node: Optional[str], values: dict[str, Optional[str]]) -> Optional[SetLinkEvent]:
    """The `set_link` event the options ask for (None when they set no value); values are YAML, as in a file."""
    given = {k: yaml.safe_load(v) for k, v in values.items() if v is not None}
    unknown = set(given) - set(SHAPING_FIELDS)
    if unknown:
        raise LinkInputError(f"not a shaping key: {', '.join(sorted(unknown))} (keys: {', '.join(SHAPING_FIELDS)})")
    if not given:
        return None
    data = {"at": 0, "action": "set_link", "link": ref, **({"node": node} if node else {}), **given}
    try:
        return SetLinkEvent.model_validate(data)
    except ValidationError as exc:
        problems = [f"--{e['loc'][0]} {e.get('input')!s}: {e['msg']}" if e["loc"] else e["msg"]
                    for e in exc.errors()]
        raise LinkInputError("; ".join(problems)) from None


def with_current_shapes(lab: Lab, index: int, directions: list[Direction]) -> Lab:
    """``lab`` with link ``index``'s shapes as they are now (read back), so that a change keeps the rest."""
    link = lab.links[index]
    now = {d.sender: current_shaping(Shaping.from_dict(d.built), Shaping.from_dict(d.installed)) for d in directions}
    links = list(lab.links)
    links[index] = replace(link, shape_ab=now.get(link.a.node, link.shape_ab), shape_ba=now.get(link.b.node,
                                                                                                   link.shape_ba))
    return replace(lab, links=links)


def change_link(state: labstate.LabState, ref: str, *, node: Optional[str] = None,
                values: Optional[dict[str, Optional[str]]] = None, down: bool = False, up: bool = False,
                show: bool = False) -> LinkResult:
    lab = lab_of(state)
    try:
        link = lab.find_link(ref)
        if node is not None:
            link.end(node)
    except KeyError as exc:
        raise LinkInputError(str(exc.args[0])) from None
    event = parse_change(ref, node, values or {})
    asked = [what for what, on in (("a shaping value", event is not None), ("--down", down), ("--up", up),
                                   ("--show", show)) if on]
    if len(asked) != 1:
        raise LinkInputError(f"give one of: shaping values (--{', --'.join(SHAPING_FIELDS)}), --down, --up, --show"
                             + (f" (not {' and '.join(asked)} together)" if asked else ""))
    if node is not None and event is None:
        raise LinkInputError("--node chooses the direction of a shaping change; --down and --up take both ends")
    ends = {link.a.node, link.b.node}

    def read_back() -> list[Direction]:
        view = read_lab(state, only=ends)
        problems = [f"{n.name}: {n.error}" for n in view.nodes if n.error]
        if problems:
            raise RuntimeError(f"could not read link {link.label} back: {'; '.join(problems)}")
        return [d for d in view.directions if d.link == link.index]

    result = LinkResult(lab.name, link.index, link.label, "show", node, None)
    if show:
        result.directions = read_back()
        return result
    if state.run_dir and state.owner_alive():
        raise LinkRefused(f"lab {state.name} is held by {state.describe_holder()}: its scenario changes the links; "
                          f"a change from outside would change the experiment behind its back")
    backend = get_backend(lab.backend)
    if event is not None:
        current = with_current_shapes(lab, link.index, read_back())
        control = LinkControl(current, backend, backend.probe())
        try:
            ts, changes, plans = apply_set_link(control, link.index, event)
        except (UnsupportedShaping, ShapingConflict) as exc:
            raise LinkInputError(f"link {link.label}: {exc}") from None
        result.action, result.applied_ns, result.changes = "set_link", ts, changes
        result.left_out = sorted({f for p in plans for f in p.dropped})
        if "bw_bps" in changes and state.routers:  # their congestion monitors decide against the capacity
            result.routers_told = [asdict(u) for u in tell_lab_routers(state.routers, link, changes["bw_bps"],
                                                                        event.node)]
    else:
        control = LinkControl(lab, backend, None)  # taking a link down or up shapes nothing
        result.action = "link_down" if down else "link_up"
        result.applied_ns = control.link_down(link.index) if down else control.link_up(link.index)
        result.directions, result.settled = read_until(read_back, up=up)
        return result
    result.directions = read_back()
    return result


def tell_lab_routers(routers: dict, link, bw_bps: Optional[int], sender: Optional[str]) -> list:
    """Tell the routers `up --routers` started (``LabState.routers``) a link's new bandwidth, as the scenario does."""
    from testbed.deploy.deployer import RouterEndpoint
    from testbed.deploy.routeradmin import tell_routers

    endpoints = {n: RouterEndpoint(**v["endpoint"]) for n, v in routers["nodes"].items() if v.get("endpoint")}
    return tell_routers(endpoints, link, bw_bps, sender, driver=routers["driver"], admin=routers.get("admin", False))
