"""A lab's backend options as one value (testbed.backends.options.BackendOptions), and the backend base class
whose optional hooks have defaults (testbed.backends.base.Backend)."""
import argparse
from pathlib import Path

import pytest

from testbed.backends import BACKENDS, Backend, BackendError, BackendOptions, get_backend
from testbed.spec import load_spec_text

PAIR = """
name: {name}
{extra}
nodes: {{a: {{}}, b: {{}}}}
links: [{{endpoints: [a, b]}}]
"""


def _spec(extra: str = "", name: str = "opts"):
    return load_spec_text(PAIR.format(name=name, extra=extra), filename="t.yaml")


@pytest.mark.parametrize("options", [
    BackendOptions("mininet"),
    BackendOptions("docker", image="testbed-node:latest"),
    BackendOptions("ssh", inventory="/tmp/lab.ini", keep_addresses=True, check_host_keys=False),
])
def test_the_holder_process_gets_the_same_options_on_its_command_line(options):
    parser = argparse.ArgumentParser()
    BackendOptions.add_arguments(parser)
    assert BackendOptions.from_args(parser.parse_args(options.argv())) == options


@pytest.mark.parametrize("name, kwargs, says", [
    ("mininet", {"keep_addresses": True}, "for the ssh backend only"),
    ("docker", {"check_host_keys": False}, "for the ssh backend only"),
    ("ssh", {"image": "x"}, "an image is for the docker backend only (this lab uses ssh)"),
    ("mininet", {"image": "x"}, "an image is for the docker backend only (this lab uses mininet)"),
    ("docker", {"inventory": "/tmp/lab.ini"}, "--inventory is for the ssh backend only"),
    ("vagrant", {}, "unknown backend 'vagrant'"),
])
def test_an_option_of_another_backend_is_refused_when_the_value_is_made(name, kwargs, says):
    with pytest.raises(BackendError, match=says.replace("(", r"\(").replace(")", r"\)")):
        BackendOptions(name, **kwargs)


def test_resolved_from_the_topology_where_the_command_line_says_nothing(tmp_path):
    spec_path = tmp_path / "t.yaml"
    ssh = BackendOptions.resolve(_spec("backend: ssh\ninventory: lab.ini"), spec_path=str(spec_path))
    assert ssh == BackendOptions("ssh", inventory=str(tmp_path / "lab.ini"))
    # the file's image is the docker backend's: the same file on mininet ignores it
    assert BackendOptions.resolve(_spec("image: mine:1"), "mininet") == BackendOptions("mininet")
    assert BackendOptions.resolve(_spec("image: mine:1"), "docker").image == "mine:1"
    assert BackendOptions.resolve(_spec("image: mine:1"), "docker", "theirs:2").image == "theirs:2"
    assert Path(BackendOptions.resolve(_spec(), "ssh", inventory="rel.ini").inventory).is_absolute()


def test_every_backend_is_whole_and_the_optional_hooks_have_defaults():
    for name in BACKENDS:
        backend = get_backend(name)  # an abstract method left unimplemented would refuse to instantiate
        assert isinstance(backend, Backend) and backend.name == name
    # the namespace backends shape direction by direction (the default's work, Backend._install_directions), the
    # impairment appliance's part of them as one batch; the ssh backend batches everything through Ansible
    from testbed.backends.localns.backend import NamespaceBackend

    assert type(get_backend("mininet")).install_shaping is NamespaceBackend.install_shaping
    assert type(get_backend("docker")).install_shaping is NamespaceBackend.install_shaping
    assert type(get_backend("ssh")).install_shaping is not Backend.install_shaping
