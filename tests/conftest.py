"""Shared fixtures: capability-based skips, one kernel probe per session, and a leak check.

After the whole suite, no `tbed-` namespace of ours may be left (one whose lab's owner
is dead, or is this test process): the session fails if one was, after `clean` removed it.
The end-to-end run tests check the rest of what a run leaves (processes, management
interfaces, SSH and install folders, lab state) themselves.
"""
from __future__ import annotations

import os
import shutil

import pytest

IS_ROOT = os.geteuid() == 0


def _mininet_importable() -> bool:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return False
    return shutil.which("mnexec") is not None


needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root: network namespaces, tc and iptables")
needs_mininet = pytest.mark.skipif(
    not (IS_ROOT and _mininet_importable()),
    reason="needs root and Mininet (apt-get install mininet; run through ./test.sh so the virtualenv sees it)",
)
needs_iperf3 = pytest.mark.skipif(shutil.which("iperf3") is None, reason="needs iperf3 (apt-get install iperf3)")


@pytest.fixture(scope="session")
def caps():
    if not IS_ROOT:
        pytest.skip("needs root to probe the kernel in a scratch namespace")
    from testbed import kernel

    return kernel.probe()


def pytest_sessionfinish(session, exitstatus):
    if not IS_ROOT:
        return
    from testbed import labstate, netns
    from testbed.clean import CleanReport, clean, force_down

    others = {n for st in labstate.all_states() if st.owner_pid != os.getpid() and st.owner_alive() for n in st.netns}
    left = [n for n in netns.list_names() if n not in others]
    if left:
        # Labs this very process still owns were not closed by their fixture; others with a
        # dead owner are leftovers. Labs of another live process (a user's run) are not ours.
        for state in labstate.all_states():
            if state.owner_pid == os.getpid():
                force_down(state, CleanReport())
        clean()
        print(f"\nLEAK: the test suite left network namespaces behind: {' '.join(left)} (removed now)")
        session.exitstatus = 1
