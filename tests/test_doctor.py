"""`testbed doctor`: the probes run for real and every missing piece says how to get it."""
from __future__ import annotations

import json
import subprocess
import sys

from testbed.doctor import Check, as_json, run_checks
from testbed.kernel import KernelCapabilities
from testbed.links import appliance
from testbed.spec.resolve import FEATURES
from tests.conftest import needs_root


def test_missing_pieces_come_with_a_fix():
    caps = KernelCapabilities({"htb": True, "tbf": True, "netem": False, "pfifo": True, "bfifo": True}, False,
                              {"netem": "Error: Specified qdisc kind is unknown."})
    checks = {c.name: c for c in run_checks(probe=lambda: caps)}
    for check in checks.values():
        if not check.ok:
            assert check.fix, f"{check.name} is missing but says nothing about how to get it"
    if "qdisc netem" in checks:  # only probed as root
        assert not checks["qdisc netem"].ok and "sch_netem" in checks["qdisc netem"].fix
        assert not checks["iptables statistic"].ok and "xt_statistic" in checks["iptables statistic"].fix
        assert checks["qdisc htb"].ok


def test_ready_only_when_every_required_check_passes():
    ok = Check("a", True, "", required=True)
    missing_optional = Check("b", False, "", "apt-get install b")
    missing_required = Check("c", False, "", "apt-get install c", required=True)
    assert as_json([ok, missing_optional])["ok"] is True
    assert as_json([ok, missing_required])["ok"] is False


@needs_root
def test_doctor_json_probes_this_kernel(caps):
    result = subprocess.run([sys.executable, "-m", "testbed.cli", "doctor", "--json"], capture_output=True, text=True,
                            timeout=120)
    report = json.loads(result.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    for kind in ("htb", "tbf", "pfifo", "bfifo", "netem"):
        assert checks[f"qdisc {kind}"]["ok"] == caps.has_qdisc(kind)
    uml = appliance.installed()
    assert checks["impairment appliance"]["ok"] == uml
    for feature in FEATURES:  # each feature with both providers, in the JSON as in the text
        providers = checks[f"feature {feature}"]["providers"]
        assert providers["host kernel"] == caps.supports(feature)
        assert providers["appliance"] == (uml and (feature in appliance.APPLIANCE_FEATURES or feature in ("bw", "queue")))
    assert checks["iptables statistic"]["ok"] == caps.iptables_statistic
    for name in ("root", "kernel", "mininet", "tcpdump", "iperf3", "sshd", "docker engine", "debootstrap",
                 "docker node image", "java", "pyspark"):
        assert name in checks
    assert result.returncode == (0 if report["ok"] else 1)


def test_docker_checks_say_how_to_get_an_engine_and_the_image(monkeypatch):
    from testbed.doctor import _docker

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    checks = {c.name: c for c in _docker()}
    engine, image = checks["docker engine"], checks["docker node image"]
    assert not engine.ok and not image.ok
    assert "docker" in engine.detail.lower() and ("start" in engine.fix or "install" in engine.fix), engine
    assert image.fix == engine.fix


NO_NETEM = KernelCapabilities({"htb": True, "tbf": True, "netem": False, "pfifo": True, "bfifo": True}, True,
                              {"netem": "Error: Specified qdisc kind is unknown."})


def test_ready_says_what_a_missing_capability_costs():
    """`doctor` does not end with a bare `ready` while a capability is missing (issue 27.3)."""
    from testbed.doctor import _qdisc_checks, verdict_lines

    checks = _qdisc_checks(NO_NETEM) + [Check("java", False, "not found", "apt-get install -y java"),
                                        Check("iperf3", True, "/usr/bin/iperf3")]
    assert verdict_lines(checks) == [
        "ready, without netem: delay and jitter unavailable (a topology that uses them is refused; `run "
        "--allow-missing` leaves them out); loss through the iptables statistic match, at the receiver",
        "       without java: no analysis here: runs end without report or verdict (`testbed analyze` them where "
        "Java and PySpark are)",
    ]
    assert as_json(checks)["without"][0]["missing"] == "netem"
    everything = KernelCapabilities({k: True for k in ("htb", "tbf", "netem", "pfifo", "bfifo")}, True)
    assert verdict_lines(_qdisc_checks(everything)) == ["ready"]
    assert as_json(_qdisc_checks(everything))["without"] == []


def test_each_cost_once_and_not_ready_first():
    from testbed.doctor import _qdisc_checks, verdict_lines

    bare = KernelCapabilities({"htb": True, "tbf": False, "netem": False, "pfifo": False, "bfifo": False}, False)
    assert verdict_lines(_qdisc_checks(bare)) == [
        "ready, without pfifo, netem, iptables statistic: delay, jitter, loss, queue unavailable (a topology that "
        "uses them is refused; `run --allow-missing` leaves them out)"]
    no_htb = KernelCapabilities({"htb": False, "tbf": True, "netem": True, "pfifo": True, "bfifo": True}, True)
    assert verdict_lines(_qdisc_checks(no_htb)) == ["not ready: fix the FAIL lines above"]


def test_doctor_prints_the_costs_last(monkeypatch):
    from typer.testing import CliRunner

    import testbed.cli.app as cli
    import testbed.doctor as doctor

    monkeypatch.setattr(doctor, "run_checks", lambda: [Check("root", True, "running as root", required=True)]
                        + doctor._qdisc_checks(NO_NETEM))
    result = CliRunner().invoke(cli.app, ["doctor"])
    assert result.exit_code == 0
    assert result.output.splitlines()[-1].startswith("ready, without netem: delay and jitter unavailable")


def test_each_feature_says_whether_the_host_kernel_and_the_appliance_provide_it():
    """`doctor` lists every shaping feature with `host kernel: yes/no, appliance: yes/no` (issue 29)."""
    from testbed.doctor import _feature_checks

    with_uml = {c.name: c for c in _feature_checks(NO_NETEM, uml=True)}
    assert list(with_uml) == [f"feature {f}" for f in FEATURES]
    assert with_uml["feature delay"].detail == "host kernel: no, appliance: yes" and with_uml["feature delay"].ok
    assert with_uml["feature bw"].detail == "host kernel: yes, appliance: yes"  # the rate stays at the node's end
    assert with_uml["feature loss"].detail == "host kernel: yes, appliance: yes"  # iptables on the host
    without = {c.name: c for c in _feature_checks(NO_NETEM, uml=False)}
    assert without["feature fq_codel"].detail == "host kernel: no, appliance: no"
    assert not without["feature fq_codel"].ok and without["feature fq_codel"].fix == appliance.INSTALL_HINT
    assert without["feature bw"].ok and without["feature bw"].detail == "host kernel: yes, appliance: no"
    assert without["feature bw"].providers == {"host kernel": True, "appliance": False}


def test_without_netem_the_appliance_provides_delay_when_installed():
    from testbed.doctor import _qdisc_checks, verdict_lines

    assert verdict_lines(_qdisc_checks(NO_NETEM, uml=True))[0].startswith(
        "ready, without netem: delay and jitter from the impairment appliance (user-mode Linux")
    assert "unavailable" not in verdict_lines(_qdisc_checks(NO_NETEM, uml=True))[0]


def test_a_missing_appliance_says_how_to_install_it_and_what_that_costs(monkeypatch, tmp_path):
    from testbed.doctor import _appliance_check, verdict_lines

    monkeypatch.setattr(appliance, "UML_KERNEL", str(tmp_path / "no-linux.uml"))
    check = _appliance_check(NO_NETEM)
    assert not check.ok and not check.required and check.fix == appliance.INSTALL_HINT
    assert verdict_lines([check]) == [
        "ready, without impairment appliance: delay, jitter, loss_model, duplicate, reorder, corrupt, fq_codel, "
        "cake, red, pie unavailable; no `impairments: appliance` (the same impairments on every machine)"]
    monkeypatch.undo()
    if appliance.installed():
        assert _appliance_check(NO_NETEM).ok and appliance.kernel_version() in _appliance_check(NO_NETEM).detail
