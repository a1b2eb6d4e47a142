"""`up`'s summary of a lab: each direction's shaping as installed, so `--allow-missing` does not print a delay
the kernel could not install (issue 27.3: it printed `5ms` on a link whose delay was left out)."""
from __future__ import annotations

from testbed.cli.app import _print_lab
from testbed.spec import load_spec_text
from tests.deploy.helpers import lab_from_spec

SPEC = """\
name: leftout
nodes: {r1: {}, r2: {}}
links:
  - endpoints: [r1, r2]
    bw: 10mbit
    delay: 5ms
    egress: {r2: {bw: 2mbit}}
"""


def test_up_prints_what_was_installed(capsys):
    lab = lab_from_spec(load_spec_text(SPEC))
    lab.applied = [{"link": 0, "direction": "r1->r2", "qdiscs": ["htb"], "iptables_loss_pct": None,
                    "dropped": ["delay"]},
                   {"link": 0, "direction": "r2->r1", "qdiscs": ["htb"], "iptables_loss_pct": None,
                    "dropped": ["delay"]}]
    _print_lab(lab)
    out = capsys.readouterr().out
    assert "r1->r2: 10mbit (left out, this kernel cannot: delay 5ms);  " \
           "r2->r1: 2mbit (left out, this kernel cannot: delay 5ms)" in out
    assert "10mbit 5ms" not in out


def test_up_prints_the_shaping_when_nothing_was_left_out(capsys):
    lab = lab_from_spec(load_spec_text(SPEC))
    lab.applied = [{"link": 0, "direction": d, "qdiscs": ["htb", "netem"], "iptables_loss_pct": None, "dropped": []}
                   for d in ("r1->r2", "r2->r1")]
    _print_lab(lab)
    assert "r1->r2: 10mbit 5ms;  r2->r1: 2mbit 5ms" in capsys.readouterr().out
