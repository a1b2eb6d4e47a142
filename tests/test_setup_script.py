"""scripts/lib/apt.sh, which scripts/setup.sh sources: package availability read right under
`set -euo pipefail`, and an "unavailable" answer kept only while the apt lists stay the same."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
APT_SH = REPO / "scripts" / "lib" / "apt.sh"

#: `apt-cache policy` of a package with a long version table (a candidate, then a lot more output).
LONG_POLICY = "fakepkg:\n  Installed: (none)\n  Candidate: 2:1.0-1\n  Version table:\n" + "".join(
    f"     1.{i}-1 500\n        500 http://deb.debian.org/debian bookworm/main amd64 Packages\n"
    for i in range(20000))


def bash(script: str, *, env: "dict | None" = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"set -euo pipefail\n. {APT_SH}\n{script}"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


@pytest.fixture
def fake_apt_cache(tmp_path):
    """An `apt-cache` that prints a given policy (the real one's output depends on this machine)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def install(policy: str) -> dict:
        (tmp_path / "policy.txt").write_text(policy)
        script = bin_dir / "apt-cache"
        script.write_text(f"#!/bin/sh\ncat {tmp_path / 'policy.txt'}\n")
        script.chmod(0o755)
        return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}

    return install


def test_the_old_check_failed_on_a_long_policy(fake_apt_cache):
    """What setup.sh did before: grep -q exits at the candidate line, apt-cache dies of SIGPIPE, pipefail
    makes the test false. This makes sure the fake exercises that failure."""
    env = fake_apt_cache(LONG_POLICY)
    old = bash("apt-cache policy fakepkg | grep -q 'Candidate: [0-9]'", env=env)
    assert old.returncode == 141


def test_available_package_is_available_under_pipefail(fake_apt_cache):
    env = fake_apt_cache(LONG_POLICY)
    result = bash("apt_available fakepkg && echo available\napt_candidate fakepkg", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["available", "2:1.0-1"]


@pytest.mark.parametrize("policy", ["fakepkg:\n  Installed: (none)\n  Candidate: (none)\n  Version table:\n", ""])
def test_package_without_candidate_is_unavailable(fake_apt_cache, policy):
    result = bash("if apt_available fakepkg; then echo available; else echo unavailable; fi", env=fake_apt_cache(policy))
    assert result.returncode == 0 and result.stdout.strip() == "unavailable", result.stderr


def test_real_apt_cache_agrees():
    if shutil.which("apt-cache") is None:
        pytest.skip("needs apt-cache (Debian or Ubuntu)")
    policy = subprocess.run(["apt-cache", "policy", "bash"], capture_output=True, text=True).stdout
    expected = next((line.split("Candidate:", 1)[1].strip() for line in policy.splitlines() if "Candidate:" in line),
                    "(none)")
    result = bash("apt_candidate bash")
    assert result.returncode == 0 and result.stdout.strip() == ("" if expected == "(none)" else expected)


def test_unavailable_is_remembered_only_while_the_apt_lists_stay_the_same(tmp_path):
    lists = tmp_path / "lists"
    lists.mkdir()
    release = lists / "deb.debian.org_debian_dists_bookworm_InRelease"
    release.write_text("")
    os.utime(release, (1_700_000_000, 1_700_000_000))
    record = tmp_path / "unavailable-packages"
    record.write_text("chromium\nchromium-driver\n")  # the old, permanent records
    env = {"APT_LISTS_DIR": str(lists), "TESTBED_UNAVAILABLE_LIST": str(record)}

    def remembered(pkg: str) -> bool:
        result = bash(f"remembered_unavailable {pkg}", env=env)
        assert result.returncode in (0, 1), result.stderr
        return result.returncode == 0

    assert not remembered("chromium")  # an old one-word record is not trusted
    assert bash("forget_stale_unavailable", env=env).returncode == 0
    assert not record.exists()

    assert bash("remember_unavailable chromium", env=env).returncode == 0
    assert remembered("chromium") and not remembered("chromium-driver")
    assert record.read_text().startswith("chromium lists=1700000000 checked=")

    os.utime(release, (1_700_086_400, 1_700_086_400))  # an apt-get update brought new lists
    assert not remembered("chromium")
    assert bash("forget_stale_unavailable", env=env).returncode == 0
    assert not record.exists()


def test_setup_sources_the_helper_and_no_early_exiting_pipe():
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert '. "$ROOT/scripts/lib/apt.sh"' in setup and "apt_available" in setup
    assert "| grep -q" not in setup


def test_setup_installs_tshark_answering_wiresharks_capture_question_no():
    """tshark (the dissector's tests, docs/wireshark.md) is a required package, and wireshark-common's debconf
    question (may non-root users capture?) is answered "no" before apt-get runs, so the install never asks."""
    setup = (REPO / "scripts" / "setup.sh").read_text()
    packages = setup.split("APT_PACKAGES=(", 1)[1].split(")", 1)[0].split()
    assert "tshark" in packages
    answer = setup.index("wireshark-common wireshark-common/install-setuid boolean false\" | debconf-set-selections")
    assert answer < setup.index('apt-get install -y -q --no-install-recommends "${missing[@]}"')
