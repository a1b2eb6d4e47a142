"""What only the Docker backend has to get right: bad input refused in one line with the fix (exit 2)
and nothing left behind, containers labelled, no Docker network, links only through our veths."""
from __future__ import annotations

import subprocess

import pytest

from testbed.lab import state as labstate
from testbed.backends import get_backend
from testbed.lab.session import LabSession
from tests.conftest import IS_ROOT, run_cli, skip_unless_backend

PAIR = "name: {name}\nnodes: {{a: {{}}, b: {{}}}}\nlinks:\n  - {{endpoints: [a, b], bw: 10mbit}}\n"


def one_line_error(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def docker_ready():
    if not IS_ROOT:
        pytest.skip("needs root")
    skip_unless_backend("docker")


def ours(name: str) -> list[str]:
    return [x for x in get_backend("docker").leftovers(set()) if name in x]


def test_engine_unreachable_is_one_line_with_the_fix(tmp_path):
    if not IS_ROOT:
        pytest.skip("needs root")
    path = tmp_path / "p.yaml"
    path.write_text(PAIR.format(name="tbt-dk-noeng"))
    line = one_line_error(run_cli("up", str(path), "--backend", "docker", check=False,
                                  env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"}))
    assert "docker" in line.lower() and ("start" in line or "install" in line), line
    assert labstate.load("tbt-dk-noeng") is None


def test_missing_image_is_one_line_with_the_fix(docker_ready, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PAIR.format(name="tbt-dk-noimg"))
    line = one_line_error(run_cli("up", str(path), "--backend", "docker", "--image", "testbed-nosuch:0",
                                          check=False))
    assert "testbed-nosuch:0" in line and "testbed image build" in line, line
    assert ours("tbt-dk-noimg") == [] and labstate.load("tbt-dk-noimg") is None


def test_name_clash_with_someone_elses_container_touches_nothing(docker_ready, tmp_path):
    from testbed.backends.docker.backend import DockerBackend
    from testbed.backends.docker.image import default_image_ref

    name = "tbt-dk-clash"
    client = DockerBackend().client
    foreign = client.containers.create(default_image_ref(), command=["sleep", "infinity"], name=f"tbed-{name}-b",
                                       network_mode="none")  # not labelled: not ours
    try:
        path = tmp_path / "p.yaml"
        path.write_text(PAIR.format(name=name))
        line = one_line_error(run_cli("up", str(path), "--backend", "docker", check=False))
        assert f"tbed-{name}-b" in line and "already exists" in line, line
        assert client.containers.get(foreign.id).status == "created"  # left exactly as it was
        assert not [c for c in client.containers.list(all=True) if c.name == f"tbed-{name}-a"]
        assert labstate.load(name) is None
        run_cli("clean", "--json")
        assert client.containers.get(foreign.id)  # clean does not take what is not labelled ours
    finally:
        foreign.remove(force=True)


def test_containers_are_labelled_and_have_no_docker_network(docker_ready, caps):
    from testbed.backends.docker.backend import LAB_LABEL, NODE_LABEL

    name = "tbt-dk-label"
    from testbed.spec import load_spec_text

    session = LabSession(load_spec_text(PAIR.format(name=name)), caps, backend="docker")
    with session as lab:
        client = session.backend.client
        for node in ("a", "b"):
            container = client.containers.get(lab.node(node).handle["container"])
            assert container.labels[LAB_LABEL] == name and container.labels[NODE_LABEL] == node
            assert container.attrs["HostConfig"]["NetworkMode"] == "none"
            links = session.access(node).run(["ip", "-o", "link", "show"]).stdout
            names = sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
            assert names == ["eth1", "lo"], names  # only our veth (no management before it is asked for)
        assert lab.info["image_id"].startswith("sha256:")
    assert ours(name) == []


def test_malformed_image_reference_is_bad_input(docker_ready, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PAIR.format(name="tbt-dk-badref"))
    line = one_line_error(run_cli("up", str(path), "--backend", "docker", "--image", "Bad Ref", check=False))
    assert "Bad Ref" in line, line
    assert ours("tbt-dk-badref") == [] and labstate.load("tbt-dk-badref") is None
