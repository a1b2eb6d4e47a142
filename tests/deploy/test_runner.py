"""The ansible-runner wrapper: a failed task becomes a DeployError naming host and task;
artifacts land in the given folder. Runs real ansible-playbook against local 'hosts'."""
from __future__ import annotations

import json

import pytest

from testbed.deploy.runner import DeployError, TaskFailure, failures_from_events, run_playbook

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: say hello
      ansible.builtin.command: echo hello
    - name: fail on the chosen node
      ansible.builtin.command: sh -c 'echo "broken setting on $0" >&2; exit 3' {{ inventory_hostname }}
      when: inventory_hostname == broken
    - name: ignored failure
      ansible.builtin.command: "false"
      ignore_errors: true
"""


def local_inventory(tmp_path, hosts):
    inv = {"all": {"hosts": {h: {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}
                               for h in hosts}}}
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(inv))
    return path


def test_failed_task_names_host_and_task(tmp_path):
    playbook = tmp_path / "pb.yml"
    playbook.write_text(PLAYBOOK)
    with pytest.raises(DeployError) as info:
        run_playbook(str(playbook), inventory=local_inventory(tmp_path, ["n1", "n2", "n3"]),
                     private_data_dir=tmp_path / "pdd", extravars={"broken": "n2"}, forks=3)
    err = info.value
    assert err.hosts == ["n2"]
    assert err.failures[0].task == "fail on the chosen node"
    text = str(err)
    assert "n2: task 'fail on the chosen node' failed" in text
    assert "broken setting on n2" in text
    assert err.artifacts is not None and (err.artifacts / "stdout").exists()


def test_success_returns_artifacts_and_ignores_ignored_failures(tmp_path):
    playbook = tmp_path / "pb.yml"
    playbook.write_text(PLAYBOOK)
    result = run_playbook(str(playbook), inventory=local_inventory(tmp_path, ["n1"]),
                          private_data_dir=tmp_path / "pdd", extravars={"broken": "none"}, forks=1)
    assert result.rc == 0 and result.status == "successful"
    assert "hello" in (result.artifacts / "stdout").read_text()
    assert str(result.artifacts).startswith(str(tmp_path / "pdd"))


def test_unreachable_host_is_reported(tmp_path):
    playbook = tmp_path / "pb.yml"
    playbook.write_text(PLAYBOOK)
    inv = {"all": {"hosts": {"gone": {"ansible_host": "127.0.0.1", "ansible_port": 1,
                                      "ansible_ssh_common_args": "-o ConnectTimeout=2"}}}}
    (tmp_path / "inv.json").write_text(json.dumps(inv))
    with pytest.raises(DeployError) as info:
        run_playbook(str(playbook), inventory=tmp_path / "inv.json", private_data_dir=tmp_path / "pdd",
                     extravars={"broken": "none"}, forks=1)
    failure = info.value.failures[0]
    assert failure.host == "gone" and failure.unreachable and failure.task == "say hello"
    assert "unreachable" in str(info.value)


def test_missing_playbook_is_an_error(tmp_path):
    with pytest.raises(DeployError, match="no such playbook"):
        run_playbook("nope.yml", inventory=tmp_path / "i.json", private_data_dir=tmp_path, extravars={}, forks=1)


def test_failures_from_events_prefers_the_tools_own_message():
    events = [
        {"event": "runner_on_ok", "event_data": {"host": "a", "task": "t"}},
        {"event": "runner_on_failed", "event_data": {"host": "b", "task": "start router",
                                                     "res": {"msg": "non-zero return code", "stderr": "port in use"}}},
        {"event": "runner_on_failed", "event_data": {"host": "c", "task": "x", "ignore_errors": True, "res": {}}},
        {"event": "runner_on_unreachable", "event_data": {"host": "d", "task": "y",
                                                          "res": {"msg": "Host key verification failed."}}},
    ]
    assert failures_from_events(events) == [
        TaskFailure("b", "start router", "port in use"),
        TaskFailure("d", "y", "Host key verification failed.", unreachable=True),
    ]


def test_raw_task_output_on_a_tty_is_cleaned():
    events = [{"event": "runner_on_failed", "event_data": {"host": "r3", "task": "start router", "res": {
        "rc": 1, "msg": "non-zero return code", "stderr": "Shared connection to 100.100.0.10 closed.\r\n",
        "stdout": "router exited with status 1 at start\r\nrouter: address already in use\r\n"}}}]
    assert failures_from_events(events)[0].message == \
        "router exited with status 1 at start\n      router: address already in use"
