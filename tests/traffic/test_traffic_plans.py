"""Plans: the orchestrator's side (testbed/trafficplanner.py) and the plan both read (runfolder/trafficplan.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.spec import load_spec, load_spec_text
from testbed.trafficplanner import (
    TrafficPlanError, argv_for, constant_tick_ns, env_for, plan_traffic,
)
from runfolder.trafficplan import PlanError, load_plan, parse_plan

ROOT = Path(__file__).resolve().parents[2]
S = 1_000_000_000
MS = 1_000_000
T0 = 1_800_000_000 * S


def addrs(spec):
    return {n: (f"10.0.0.{i + 1}", 7447) for i, n in enumerate(spec.nodes)}


def test_diamond_flows_table_matches_the_results_contract(tmp_path):
    spec = load_spec(ROOT / "topologies/diamond.yaml")
    plan = plan_traffic(spec, tmp_path, T0, addrs(spec))
    table = plan.flows_json()["flows"]
    assert [f["name"] for f in table] == ["zpub.pub1", "zpub.pub2", "zpub.realtime", "bulk"]
    assert [f["flow_id"] for f in table] == [1, 2, 3, 4]
    keys = {"name", "flow_id", "kind", "profile", "priority", "priority_name", "congestion_control", "express", "key",
            "publisher", "subscribers", "size", "rate_bps", "slow_subscribers"}
    assert all(set(f) == keys for f in table) and all(f["slow_subscribers"] == [] for f in table)
    assert all(f["kind"] == "pubsub" for f in table)
    pub1, pub2, rt, bulk = table
    assert (pub1["key"], pub1["priority"], pub1["priority_name"], pub1["congestion_control"]) == (
        "demo/example/pub1", 5, "data", "drop")
    assert (rt["key"], rt["priority"], rt["congestion_control"]) == ("demo/example/realtime", 1, "block")
    assert pub2["key"] == "demo/example/pub2"
    assert all(f["size"] == 12500 and f["rate_bps"] == 2_000_000 for f in (pub1, pub2, rt))
    assert (bulk["priority_name"], bulk["size"], bulk["rate_bps"], bulk["subscribers"]) == ("data_low", 1200,
                                                                                         7_000_000, ["r4"])
    path = plan.write_flows()
    assert path == tmp_path.resolve() / "traffic" / "flows.json"
    assert json.loads(path.read_text()) == plan.flows_json()


def test_diamond_processes_and_zpub_phases(tmp_path):
    spec = load_spec(ROOT / "topologies/diamond.yaml")
    plan = plan_traffic(spec, tmp_path, T0, addrs(spec))
    names = [p.name for p in plan.processes]
    assert names == ["pub-zpub.pub1", "pub-zpub.pub2", "pub-zpub.realtime", "pub-bulk", "sub-r4"]
    phases = {p.flows[0]: p.plan.to_json()["flows"][0]["phases"] for p in plan.publishers()}
    assert phases == {"zpub.pub1": [[5 * S, 30 * S]], "zpub.pub2": [[30 * S, 60 * S]],
                      "zpub.realtime": [[5 * S, 60 * S]], "bulk": [[10 * S, 40 * S]]}
    pub1 = plan.process("pub-zpub.pub1").plan.to_json()
    assert pub1["router"] == {"host": "10.0.0.1", "port": 7447, "client": "testbed"}
    assert (pub1["t0_ns"], pub1["end_ns"], pub1["role"], pub1["node"]) == (T0, 60 * S, "pub", "r1")
    assert pub1["flows"][0]["tick_ns"] == 50 * MS
    bulk = plan.process("pub-bulk").plan.to_json()["flows"][0]
    assert bulk["tick_ns"] == constant_tick_ns(7_000_000, 1200) == 5 * MS
    sub = plan.process("sub-r4")
    assert sub.plan.to_json()["router"]["host"] == "10.0.0.4"
    assert sub.plan.to_json()["end_ns"] == 62 * S
    assert [f["flow_id"] for f in sub.plan.to_json()["flows"]] == [1, 2, 3, 4]
    assert sub.log_files == ["sub-r4.log", "recv-zpub.pub1-r4.csv", "recv-zpub.pub2-r4.csv",
                             "recv-zpub.realtime-r4.csv", "recv-bulk-r4.csv"]
    assert all(p.start_at_ns == 0 and p.stop_at_ns is None for p in plan.processes)
    assert plan.launch_order()[0].name == "sub-r4"
    # every generated plan is accepted by the traffic process's parser
    paths = plan.write_plans()
    for p in plan.processes:
        parsed = load_plan(str(paths[p.name]))
        assert parsed.name == p.name and parsed.role == p.role


SCENARIO = """
name: sc
duration: 30s
nodes: {a: {}, b: {}, c: {}}
links: [{endpoints: [a, b]}, {endpoints: [b, c]}]
traffic:
  - {profile: zpub, name: z, node: a, subscribers: [c], key_prefix: x/y, rate: 1mbit, tick: 20ms,
     start_delay: 2s, pub1_stop: 10s, pub2_start: 12s, duration: 25s}
  - {profile: constant, name: late, from: b, to: [a, c], rate: 100kbit, size: 500b, priority: realtime,
     congestion_control: block, express: true, start: 1s}
  - {profile: burst, name: bb, from: c, to: [a], rate: 1mbit, on: 1s, off: 500ms, stop: 20s}
scenario:
  - {at: 5s, action: start_flow, flow: late}
  - {at: 15s, action: stop_flow, flow: late}
  - {at: 18s, action: stop_flow, flow: z}
  - {at: 8s, action: stop_flow, flow: bb}
  - {at: 9s, action: start_flow, flow: bb}
"""


def test_scenario_start_and_stop_flow_map_to_phases_and_launch_times(tmp_path):
    spec = load_spec_text(SCENARIO)
    plan = plan_traffic(spec, tmp_path, T0, addrs(spec), launch_lead_ns=S)
    ph = {p.flows[0]: p.plan.to_json()["flows"][0]["phases"] for p in plan.publishers()}
    assert ph["z.pub1"] == [[2 * S, 10 * S]]
    assert ph["z.pub2"] == [[12 * S, 18 * S]]          # zpub duration 25s, stopped at 18s
    assert ph["z.realtime"] == [[2 * S, 18 * S]]
    assert ph["late"] == [[5 * S, 15 * S]]             # first event is start_flow: off until 5s
    assert ph["bb"] == [[0, 8 * S], [9 * S, 20 * S]]
    late = plan.process("pub-late")
    assert (late.start_at_ns, late.stop_at_ns) == (4 * S, 15 * S)
    assert plan.process("pub-z.realtime").stop_at_ns == 18 * S
    assert plan.process("pub-bb").stop_at_ns is None  # switched back on: ends by itself
    lf = late.plan.to_json()["flows"][0]
    assert (lf["priority"], lf["congestion_control"], lf["express"], lf["key"], lf["size"]) == (
        1, "block", True, "flows/late", 500)
    assert lf["tick_ns"] == 40 * MS  # 500 B at 100 kbit/s
    assert plan.process("pub-bb").plan.to_json()["flows"][0]["burst"] == {"on_ns": S, "off_ns": 500 * MS}
    assert [p.name for p in plan.processes_for_flow("z")] == ["pub-z.pub1", "pub-z.pub2", "pub-z.realtime"]
    assert [p.name for p in plan.processes_for_flow("z.pub2")] == ["pub-z.pub2"]
    with pytest.raises(KeyError):
        plan.processes_for_flow("nope")
    assert [(c.at_ns, c.action, c.flow) for c in plan.controls] == [
        (5 * S, "start_flow", "late"), (8 * S, "stop_flow", "bb"), (9 * S, "start_flow", "bb"),
        (15 * S, "stop_flow", "late"), (18 * S, "stop_flow", "z")]
    assert plan.controls[-1].processes == ("pub-z.pub1", "pub-z.pub2", "pub-z.realtime")
    subs = {p.node: [f["name"] for f in p.plan.to_json()["flows"]] for p in plan.subscribers()}
    assert subs == {"a": ["late", "bb"], "c": ["z.pub1", "z.pub2", "z.realtime", "late"]}
    assert plan.launch_order()[0].role == "sub"
    assert plan.launch_order()[-1].name == "pub-late"


def test_planning_errors_say_what_to_fix(tmp_path):
    spec = load_spec(ROOT / "topologies/diamond.yaml")
    with pytest.raises(TrafficPlanError, match="r4"):
        plan_traffic(spec, tmp_path, T0, {"r1": ("127.0.0.1", 1)})
    tiny = load_spec_text(SCENARIO.replace("size: 500b", "size: 10b"))
    with pytest.raises(TrafficPlanError, match="flow late: size 10 bytes .* 24-byte"):
        plan_traffic(tiny, tmp_path, T0, addrs(tiny))


def test_the_client_goes_into_every_plan(tmp_path):
    spec = load_spec(ROOT / "topologies/diamond.yaml")
    plan = plan_traffic(spec, tmp_path, T0, addrs(spec), client="zenoh")
    assert plan.processes and all(p.plan.to_json()["router"]["client"] == "zenoh" for p in plan.processes)
    assert all(parse_plan(p.plan.to_json()).client == "zenoh" for p in plan.processes)
    assert all(parse_plan(p.plan.to_json()).to_json()["router"]["client"] == "zenoh" for p in plan.processes)
    with pytest.raises(TrafficPlanError, match="client 'zenohd' is not one of 'testbed', 'zenoh'"):
        plan_traffic(spec, tmp_path, T0, addrs(spec), client="zenohd")


def test_the_zenoh_client_refuses_query_flows_and_slow_subscribers(tmp_path):
    for topo, message in (("queries.yaml", "the zenoh client does not do queries"),
                          ("slow-reader.yaml", "slow_subscribers .* the zenoh client cannot read slowly")):
        spec = load_spec(ROOT / "topologies" / topo)
        plan_traffic(spec, tmp_path, T0, addrs(spec))  # the testbed client does both
        with pytest.raises(TrafficPlanError, match=message):
            plan_traffic(spec, tmp_path, T0, addrs(spec), client="zenoh")


def test_argv_and_env(tmp_path):
    spec = load_spec(ROOT / "topologies/diamond.yaml")
    plan = plan_traffic(spec, tmp_path, T0, addrs(spec))
    p = plan.process("sub-r4")
    assert argv_for(p, "/x/sub-r4.json") == ["python3", "-m", "traffic", "sub", "--plan", "/x/sub-r4.json"]
    assert argv_for(p, "p.json", python="/usr/bin/python3.11")[0] == "/usr/bin/python3.11"
    env = env_for()
    assert Path(env["PYTHONPATH"]) == ROOT


# ------------------------------------------------------------------ runfolder/trafficplan.py

def good_pub():
    return {"version": 1, "role": "pub", "name": "pub-f", "node": "r1", "router": {"host": "127.0.0.1", "port": 7447},
            "t0_ns": T0, "end_ns": 10 * S, "log_dir": "/tmp/x",
            "flows": [{"name": "f", "flow_id": 1, "key": "a/b", "priority": 5, "congestion_control": "drop",
                       "express": False, "size": 100, "rate_bps": 1000, "tick_ns": 10 * MS,
                       "phases": [[0, S]], "burst": None}]}


@pytest.mark.parametrize("path,value,message", [
    (("flows", 0, "size"), 10, "smaller than the 24-byte payload header"),
    (("flows", 0, "priority"), 8, "priority: 8 is not 0..7"),
    (("flows", 0, "congestion_control"), "maybe", "'block' or 'drop'"),
    (("flows", 0, "key"), "a/*", "concrete key"),
    (("flows", 0, "key"), "a//b", "empty chunk"),
    (("flows", 0, "phases"), [[5, 3]], "not after start"),
    (("flows", 0, "rate_bps"), 0, "must be > 0"),
    (("flows", 0, "flow_id"), 2**32, "u32"),
    (("flows", 0, "burst"), {"on_ns": 0, "off_ns": 1}, "must be > 0"),
    (("router", "port"), 0, "not a TCP port"),
    (("router", "client"), "zenohd", r"plan.router.client: 'zenohd' is not one of 'testbed', 'zenoh'"),
    (("router", "client"), 7, "plan.router.client: 7 is not a str"),
    (("role",), "both", "'pub', 'sub', 'query', 'queryable'"),
    (("end_ns",), "soon", "not an integer"),
    (("flows",), [], "at least one flow"),
    (("version",), 2, "version 2 is not supported"),
])
def test_bad_plans_name_the_field(path, value, message):
    obj = good_pub()
    target = obj
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    with pytest.raises(PlanError, match=message):
        parse_plan(obj)


def test_plan_round_trip_and_sub_needs_only_ids():
    plan = parse_plan(good_pub())
    assert parse_plan(plan.to_json()) == plan
    sub = dict(good_pub(), role="sub", flows=[{"name": "f", "flow_id": 1, "key": "a/b"},
                                              {"name": "g", "flow_id": 2, "key": "a/**"}])
    assert [f.key for f in parse_plan(sub).flows] == ["a/b", "a/**"]
    dup = dict(sub, flows=[{"name": "f", "flow_id": 1, "key": "a/b"}, {"name": "g", "flow_id": 1, "key": "a/c"}])
    with pytest.raises(PlanError, match="flow_id 1 appears twice"):
        parse_plan(dup)


def test_plan_client_defaults_to_testbed_and_zenoh_refuses_queries_and_slow_readers():
    assert parse_plan(good_pub()).client == "testbed"
    obj = good_pub()
    obj["router"]["client"] = "zenoh"
    plan = parse_plan(obj)
    assert plan.client == "zenoh" and parse_plan(plan.to_json()) == plan
    for role in ("query", "queryable"):
        with pytest.raises(PlanError, match="plan.router.client: the zenoh client does not do queries"):
            parse_plan(dict(obj, role=role))
    sub = dict(obj, role="sub", flows=[{"name": "f", "flow_id": 1, "key": "a/b"}], read={"rate_bps": 0})
    with pytest.raises(PlanError, match="plan.read: a slow reader is a feature of the testbed client"):
        parse_plan(sub)


def test_cli_refuses_bad_plans_with_status_2(tmp_path):
    bad = tmp_path / "bad.json"
    obj = good_pub()
    obj["flows"][0]["size"] = 3
    bad.write_text(json.dumps(obj))
    r = subprocess.run([sys.executable, "-m", "traffic", "pub", "--plan", str(bad)], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "24-byte payload header" in r.stderr and "Traceback" not in r.stderr
    obj["flows"][0]["size"] = 100
    bad.write_text(json.dumps(obj))
    r = subprocess.run([sys.executable, "-m", "traffic", "sub", "--plan", str(bad)], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "is a 'pub' plan" in r.stderr
    r = subprocess.run([sys.executable, "-m", "traffic", "pub", "--plan", str(bad), "--check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    (tmp_path / "nojson.json").write_text("{")
    r = subprocess.run([sys.executable, "-m", "traffic", "pub", "--plan", str(tmp_path / "nojson.json")], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "not valid JSON" in r.stderr


def test_slow_subscribers_get_their_own_process_and_log_name(tmp_path):
    f = tmp_path / "slow.yaml"
    f.write_text("""name: slow
duration: 10s
nodes: {r1: {}, r2: {}}
links: [{endpoints: [r1, r2]}]
traffic:
  - {profile: constant, name: feed, from: r1, to: [r2], rate: 1mbit, size: 1KiB,
     slow_subscribers: [{node: r2, read_rate: 100kbit, from: 2s}, {node: r2}]}
""")
    spec = load_spec(f)
    plan = plan_traffic(spec, tmp_path, T0, addrs(spec))
    row = plan.flows_json()["flows"][0]
    assert row["subscribers"] == ["r2"]
    assert row["slow_subscribers"] == [{"label": "r2.slow1", "node": "r2", "read_rate_bps": 100_000, "from_ns": 2 * S},
                                       {"label": "r2.slow2", "node": "r2", "read_rate_bps": 0, "from_ns": 0}]
    slow = [p for p in plan.processes if p.name.startswith("slow-")]
    assert [(p.name, p.node, p.role) for p in slow] == [("slow-feed-r2.slow1", "r2", "sub"),
                                                       ("slow-feed-r2.slow2", "r2", "sub")]
    assert slow[0].log_files == ["slow-feed-r2.slow1.log", "recv-feed-r2.slow1.csv"]
    parsed = parse_plan(slow[0].plan.to_json())
    assert (parsed.read_rate_bps, parsed.slow_from_ns, parsed.log_as) == (100_000, 2 * S, "r2.slow1")
    assert parse_plan(slow[1].plan.to_json()).read_rate_bps == 0


def test_slow_subscriber_mistakes_are_refused_at_their_line(tmp_path):
    from testbed.spec import SpecError
    f = tmp_path / "bad.yaml"
    f.write_text("""name: slow
duration: 10s
nodes: {r1: {}, r2: {}}
links: [{endpoints: [r1, r2]}]
traffic:
  - {profile: constant, name: feed, from: r1, to: [r2], rate: 1mbit,
     slow_subscribers: [{node: r9}, {node: r1}, {node: r2, from: 20s}]}
""")
    with pytest.raises(SpecError) as err:
        load_spec(f)
    text = str(err.value)
    assert "slow_subscribers[0].node" in text and "r9" in text
    assert "slow_subscribers[1].node" in text and "the publisher itself" in text
    assert "slow_subscribers[2].from" in text and "not before the end" in text
    f.write_text(f.read_text().replace("[{node: r9}, {node: r1}, {node: r2, from: 20s}]", "[{node: r2, read_rate: 0}]"))
    with pytest.raises(SpecError, match="slow_subscribers.0..read_rate"):
        load_spec(f)


QUERIES = """
name: qq
duration: 30s
nodes: {a: {}, b: {}, c: {}}
links: [{endpoints: [a, b]}, {endpoints: [b, c]}]
traffic:
  - {profile: constant, name: bulk, from: a, to: [c], rate: 1mbit}
  - profile: query
    name: look
    from: a
    per_second: 3
    queryables: [{node: c, service_time: 5ms, reply_size: 100}, {node: b}]
    start: 2s
  - {profile: query, name: ask, from: c, key: "svc/**", per_second: 10, timeout: 2s, consolidation: all,
     priority: data, size: 200, queryables: [{node: a}]}
scenario:
  - {at: 5s, action: stop_flow, flow: look}
  - {at: 8s, action: start_flow, flow: look}
  - {at: 20s, action: stop_flow, flow: look}
  - {at: 10s, action: start_flow, flow: ask}
"""


def test_query_flows_plan_a_querier_and_queryables_with_ids_in_topology_order(tmp_path):
    spec = load_spec_text(QUERIES)
    plan = plan_traffic(spec, tmp_path, T0, addrs(spec), launch_lead_ns=S)
    table = {f["name"]: f for f in plan.flows_json()["flows"]}
    assert [(n, f["flow_id"], f["kind"]) for n, f in table.items()] == [
        ("bulk", 1, "pubsub"), ("look", 2, "query"), ("ask", 3, "query")]
    assert table["look"] == {
        "name": "look", "flow_id": 2, "kind": "query", "profile": "query", "priority": 3,
        "priority_name": "interactive_low", "key": "query/look", "from": "a", "queryables": ["c", "b"],
        "queryable_settings": [{"node": "c", "service_time_ns": 5 * MS, "reply_size": 100},
                               {"node": "b", "service_time_ns": 0, "reply_size": 64}],
        "per_second": 3.0, "interval_ns": 333_333_333, "timeout_ns": S, "consolidation": "first", "size": 64}
    ask = table["ask"]
    assert (ask["key"], ask["consolidation"], ask["timeout_ns"], ask["priority_name"], ask["size"]) == (
        "svc/**", "all", 2 * S, "data", 200)

    by_name = {p.name: p for p in plan.processes}
    assert {n: (p.role, p.node) for n, p in by_name.items() if p.role in ("query", "queryable")} == {
        "qry-look": ("query", "a"), "qry-ask": ("query", "c"), "qbl-look-c": ("queryable", "c"),
        "qbl-look-b": ("queryable", "b"), "qbl-ask-a": ("queryable", "a")}
    look = by_name["qry-look"]
    # on [2 s, 5 s) and [8 s, 20 s): one process, switched by its plan, SIGTERM at the last stop
    assert look.plan.to_json()["flows"] == [{"name": "look", "flow_id": 2, "key": "query/look", "priority": 3, "size": 64,
                                   "interval_ns": 333_333_333, "timeout_ns": S, "consolidation": "first",
                                   "phases": [[2 * S, 5 * S], [8 * S, 20 * S]]}]
    assert (look.start_at_ns, look.stop_at_ns, look.drain_ns) == (0, 20 * S, 3 * S)
    assert look.log_files == ["qry-look.log", "query-look.csv"] and look.ready_line is None
    asker = by_name["qry-ask"]
    assert (asker.start_at_ns, asker.stop_at_ns) == (9 * S, None)  # starts off: launched 1 s before 10 s
    assert asker.plan.to_json()["flows"][0]["phases"] == [[10 * S, 30 * S]]
    qbl = by_name["qbl-look-c"]
    assert qbl.plan.to_json()["flows"] == [{"name": "look", "flow_id": 2, "key": "query/look", "service_time_ns": 5 * MS,
                                  "reply_size": 100}]
    assert qbl.plan.to_json()["end_ns"] == 30 * S + S + 2 * S  # the run, the last query's timeout, the linger
    assert qbl.log_files == ["qbl-look-c.log", "served-look-c.csv"]
    assert qbl.ready_line == "ready: queryable on" and by_name["sub-c"].ready_line == "ready: subscribed to"
    assert (qbl.start_at_ns, qbl.stop_at_ns) == (0, None)
    order = [p.name for p in plan.launch_order()]
    assert order.index("qbl-look-c") < order.index("qry-look") and order.index("sub-c") < order.index("pub-bulk")
    assert order[-1] == "qry-ask"
    assert [p.name for p in plan.processes_for_flow("look")] == ["qry-look"]
    assert [(c.at_ns, c.action, c.processes) for c in plan.controls] == [
        (5 * S, "stop_flow", ("qry-look",)), (8 * S, "start_flow", ("qry-look",)),
        (10 * S, "start_flow", ("qry-ask",)), (20 * S, "stop_flow", ("qry-look",))]
    assert [f.name for f in plan.pubsub_flows()] == ["bulk"]
    for p in plan.processes:  # every plan is accepted by the traffic process's parser
        assert parse_plan(p.plan.to_json()).role == p.role
    assert argv_for(look, "/x/qry-look.json") == ["python3", "-m", "traffic", "query", "--plan", "/x/qry-look.json"]


def test_the_queries_topology_kills_the_nearest_queryable():
    """topologies/queries.yaml: a `first` query goes to the nearest serving router (base weights, ties by
    name): that router is the one the scenario kills, and restarts."""
    spec = load_spec(ROOT / "topologies/queries.yaml")
    (flow,) = spec.traffic
    weights = {frozenset(e.node for e in link.endpoints): link.weight for link in spec.links}
    nodes = [q.node for q in flow.queryables]
    distance = {n: weights[frozenset((flow.from_, n))] for n in nodes}  # both are neighbours of r1
    nearest = min(nodes, key=lambda n: (distance[n], n))
    kill, restart = spec.scenario
    assert (kill.action, kill.node, restart.action, restart.node) == ("kill_router", nearest, "restart_router", nearest)
    assert (flow.per_second, flow.timeout, flow.consolidation) == (20, S, "first")
    assert flow.start < kill.at < restart.at < flow.stop <= spec.duration <= 40 * S
