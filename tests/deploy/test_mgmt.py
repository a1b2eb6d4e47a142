"""Management network: one /30 per node from 100.100.0.0/16, no default route in nodes, nodes
cannot reach each other's management address, labs get disjoint blocks, everything removable."""
from __future__ import annotations

import ipaddress
import json

import pytest

from testbed import proc
from testbed.lab import state as labstate
from testbed.backends.localns.mgmt import (CHAIN, MGMT_NET, MgmtError, allocate_block, chain_present, host_ifname, lab_tag,
                          release_leftovers)
from tests.conftest import needs_mininet
from tests.deploy.conftest import ManagedLab, line_spec, needs_sshd


def test_allocate_block_skips_used_and_aligns():
    n = ipaddress.ip_network
    assert allocate_block(3, []) == n("100.100.0.0/28")
    assert allocate_block(3, [n("100.100.0.4/30")]) == n("100.100.0.16/28")
    assert allocate_block(12, [n("100.100.0.0/26")]) == n("100.100.0.64/26")
    assert allocate_block(1, [n("100.100.0.0/30")]) == n("100.100.0.4/30")
    with pytest.raises(MgmtError):
        allocate_block(1, [MGMT_NET])


def test_interface_names_fit_and_differ_per_lab():
    assert len(host_ifname("a-very-long-lab-nam", 49)) <= 15
    assert host_ifname("lab1", 0) != host_ifname("lab2", 0)
    assert host_ifname("lab1", 0).startswith("tbm" + lab_tag("lab1"))


def routes(ns: str) -> list[dict]:
    return json.loads(proc.run(["ip", "-j", "-4", "route", "show"], netns=ns).stdout)


def ping(target: str, ns: str | None = None) -> bool:
    return proc.run(["ping", "-c", "1", "-W", "1", target], netns=ns, check=False).returncode == 0


def root_ifnames() -> set[str]:
    return {l["ifname"] for l in json.loads(proc.run(["ip", "-j", "link", "show"]).stdout)}


@needs_mininet
def test_management_network_isolates_nodes_and_is_removable(caps):
    first = ManagedLab(line_spec("tbt-mgmt1"), caps)
    second = ManagedLab(line_spec("tbt-mgmt2"), caps)
    try:
        first.open(with_ssh=False)
        second.open(with_ssh=False)
        ips = first.ips
        # Disjoint /30s inside 100.100.0.0/16, for both labs.
        nets = [ipaddress.ip_interface(l.node_address).network for m in (first.mgmt, second.mgmt)
                for l in m.links.values()]
        assert all(net.subnet_of(MGMT_NET) and net.prefixlen == 30 for net in nets)
        assert len(set(nets)) == len(nets) == 6
        for node, ip in ips.items():
            ns = first.netns(node)
            rts = routes(ns)
            assert not any(r["dst"] == "default" for r in rts), rts
            mgmt_routes = [r for r in rts if r.get("dev") == "mgmt0"]
            assert len(mgmt_routes) == 1 and mgmt_routes[0]["dst"].endswith("/30")
            assert ping(ip), f"controller cannot reach {node} at {ip}"
        # A node cannot reach another node's management address ...
        r1, r2_ip = first.netns("r1"), ips["r2"]
        assert not ping(r2_ip, r1)
        # ... not even with a route through the root namespace: the TBED-MGMT chain drops it.
        assert proc.succeeds(["iptables", "-w", "-C", "FORWARD", "-j", CHAIN])
        assert proc.succeeds(["iptables", "-w", "-C", CHAIN, "-i", "tbm+", "-j", "DROP"])
        gateway = str(ipaddress.ip_interface(first.mgmt.links["r1"].host_address).ip)
        proc.run(["ip", "route", "add", "100.100.0.0/16", "via", gateway, "dev", "mgmt0"], netns=r1)
        assert not ping(r2_ip, r1)
        assert not ping(second.ips["r1"], r1)  # nor another lab's node
        # Recorded for `testbed clean`, and removed from the root namespace by release_leftovers.
        recorded = {l["host_ifname"] for l in second.mgmt.to_json()["links"].values()}
        assert recorded <= root_ifnames()
        live = {s.name for s in labstate.all_states() if s.owner_alive()} - {"tbt-mgmt2"}
        assert "tbt-mgmt1" in live
        removed = release_leftovers(live)
        assert set(removed) == recorded
        assert not recorded & root_ifnames()
        assert {l.host_ifname for l in first.mgmt.links.values()} <= root_ifnames()  # the live lab keeps its own
        second.mgmt.teardown()  # idempotent after release_leftovers
        first.mgmt.teardown()
        assert not {l for l in root_ifnames() if l.startswith("tbm" + lab_tag("tbt-mgmt1"))}
        if not any(n.startswith("tbm") for n in root_ifnames()):
            assert not chain_present()
    finally:
        second.close()
        first.close()


@needs_mininet
def test_forward_chain_drops_between_management_interfaces():
    """With forwarding on (as the root namespace may have it), the chain still keeps nodes apart.

    Rebuilt in scratch namespaces (a 'root' that forwards, two 'nodes' behind tbm* veths),
    so the test never turns on forwarding in the real root namespace.
    """
    from testbed.backends.localns import mgmt, netns

    root, a, b = "tbed-tbt-fwd-root", "tbed-tbt-fwd-a", "tbed-tbt-fwd-b"
    try:
        for ns in (root, a, b):
            netns.add(ns)
        proc.run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"], netns=root)
        for ns, ifname, net in ((a, "tbm000000a0", "100.100.255.0"), (b, "tbm000000b0", "100.100.255.4")):
            base = ipaddress.ip_address(net)
            proc.run(["ip", "link", "add", ifname, "netns", root, "type", "veth", "peer", "name", "mgmt0", "netns", ns])
            proc.run(["ip", "addr", "add", f"{base + 1}/30", "dev", ifname], netns=root)
            proc.run(["ip", "link", "set", ifname, "up"], netns=root)
            proc.run(["ip", "addr", "add", f"{base + 2}/30", "dev", "mgmt0"], netns=ns)
            proc.run(["ip", "link", "set", "mgmt0", "up"], netns=ns)
            proc.run(["ip", "route", "add", "100.100.0.0/16", "via", str(base + 1)], netns=ns)
        assert ping("100.100.255.6", a), "without the chain the scratch root forwards (test setup is wrong)"
        mgmt._ensure_chain(netns=root)
        mgmt._ensure_chain(netns=root)  # idempotent: still one jump, two rules
        rules = proc.run(["iptables", "-w", "-S"], netns=root).stdout.splitlines()
        assert rules.count(f"-A FORWARD -j {CHAIN}") == 1
        assert len([r for r in rules if r.startswith(f"-A {CHAIN}")]) == 2
        assert not ping("100.100.255.6", a)
        assert not ping("100.100.255.2", b)
        assert ping("100.100.255.1", a)  # its own management gateway still answers
    finally:
        netns.kill_processes_in([root, a, b])
        for ns in (root, a, b):
            netns.delete(ns)


@needs_mininet
@needs_sshd
def test_sshd_access_and_stop_leave_nothing(caps):
    import time
    from pathlib import Path

    managed = ManagedLab(line_spec("tbt-sshstop"), caps)
    try:
        managed.open()
        access = managed.access
        sshd_pids = [int(access.pidfile(n).read_text()) for n in access.hosts]
        r = access.run("r2", "ip -4 -o addr show dev mgmt0; ip route show default | wc -l")
        assert r.returncode == 0, r.stderr
        assert managed.ips["r2"] in r.stdout and r.stdout.strip().endswith("0")
        masters = lambda: [p for p in Path("/proc").iterdir() if p.name.isdigit()
                           and str(access.control_dir).encode() in _cmdline(p)]
        assert masters(), "access.run should leave a connection master for the next command"
        key_dir = access.dir
        access.stop()
        deadline = time.monotonic() + 10
        while (masters() or any(Path(f"/proc/{p}").exists() for p in sshd_pids)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not masters()
        assert not any(Path(f"/proc/{p}").exists() for p in sshd_pids)
        assert not key_dir.exists()
    finally:
        managed.close()


def _cmdline(p) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""
