"""testbed/lab/shape.py through the base class's default Backend.install_shaping: a direction the kernel
cannot shape is refused as a LabError naming the link and the direction; any other ValueError of a shaper
keeps its own type (and says the direction too)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from testbed.backends import Backend
from testbed.lab.errors import LabError
from testbed.lab.shape import shape_links
from testbed.links.shaping import UnsupportedShaping


class _FailingShaper:
    def __init__(self, error):
        self.error = error

    def install(self, shape):
        raise self.error()  # a new exception per direction, as a real shaper raises


class _Backend:
    """What shape_links uses of a backend: the base class's install_shaping over shapers that fail."""

    install_shaping = Backend.install_shaping
    _install_directions = Backend._install_directions

    def __init__(self, error):
        self.error = error

    def shaper(self, lab, link, sender, caps, allow_missing=False):
        return _FailingShaper(self.error)


def _lab():
    link = SimpleNamespace(index=0, label="r1:eth1--r2:eth1", a=SimpleNamespace(node="r1"),
                           b=SimpleNamespace(node="r2"), shape_ab=None, shape_ba=None)
    return SimpleNamespace(links=[link], applied=None)


def test_shaping_the_kernel_cannot_do_is_a_lab_error_naming_the_direction():
    backend = _Backend(lambda: UnsupportedShaping("bw: needs the htb qdisc"))
    with pytest.raises(LabError, match=r"^link r1:eth1--r2:eth1 \(r1->r2\): bw: needs the htb qdisc$"):
        shape_links(_lab(), backend, caps=None, allow_missing=False)


def test_another_value_error_keeps_its_type():
    """A ValueError whose class takes other arguments than a message (json's) is not made again."""
    backend = _Backend(lambda: json.JSONDecodeError("Expecting value", "", 0))
    with pytest.raises(json.JSONDecodeError, match=r"^link r1:eth1--r2:eth1 \(r1->r2\): Expecting value"):
        shape_links(_lab(), backend, caps=None, allow_missing=False)
