"""The `testbed` command line (contract 1 of DESIGN.md), one module per group of verbs:

* :mod:`testbed.cli.app`: the root app (``app``, the console entry point ``main``) and its verbs
  (doctor, validate, up, exec, inspect, link, ping, down, clean, run, analyze, check, compare), and
  registers import and export;
* :mod:`testbed.cli.suite`: `testbed suite run|validate|trend`;
* :mod:`testbed.cli.image`: `testbed image build` (the Docker backend's node image);
* :mod:`testbed.cli.common`: the exit codes and the helpers every verb shares (``fail``, the
  topology loader, the duration option, the root check).
* :mod:`testbed.cli.convert`: `testbed import` and `testbed export`, and the conversion `run` makes of a
  foreign topology file (testbed/convert/);
* :mod:`testbed.cli.completion`: what shell completion offers for labs, nodes, topology and suite
  files and results folders (docs/completion.md).

``python -m testbed.cli`` runs the command line (:mod:`testbed.cli.__main__`).
"""
