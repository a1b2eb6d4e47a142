"""A lab's state file on disk (testbed.lab.state)."""
from __future__ import annotations

import os
import stat

from testbed.lab import state as labstate


def test_the_state_is_readable_by_its_owner_alone(tmp_path, monkeypatch):
    """The state holds the routers' admin token: the file is 0600 and the lab's folder 0700 whatever the umask,
    also when saved again over a state (and a folder) an older testbed left readable by all."""
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "labs"))
    old_umask = os.umask(0o022)
    try:
        state = labstate.LabState.for_this_process("tri", "tri.yaml", "localns", {})
        state.routers = {"admin_token": "secret"}
        state.claim()
        path = state.dir / "state.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(state.dir.stat().st_mode) == 0o700
        os.chmod(path, 0o644)
        os.chmod(state.dir, 0o755)
        state.status = "up"
        state.save()
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.dir.stat().st_mode) == 0o700
    assert labstate.load("tri").routers == {"admin_token": "secret"}
    assert [p.name for p in state.dir.iterdir()] == ["state.json"]


def test_what_commands_print_of_the_routers_masks_their_admin_token():
    from testbed.lab.state import routers_shown
    routers = {"driver": "testbed", "nodes": {"r1": {"client_address": "127.0.0.1:7447", "endpoint": {
        "node": "r1", "admin_url": "http://10.0.0.1:9000/admin", "admin_token": "s3cret"}}}}
    shown = routers_shown(routers)
    assert shown["nodes"]["r1"]["endpoint"]["admin_token"] == "***"
    assert shown["nodes"]["r1"]["endpoint"]["admin_url"] == "http://10.0.0.1:9000/admin"
    assert routers["nodes"]["r1"]["endpoint"]["admin_token"] == "s3cret"  # the state itself keeps it
    assert routers_shown(None) is None
