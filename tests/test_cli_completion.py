"""Shell completion (issue 31.3): Typer's own mechanism, asked as bash asks it (the environment variables of the
script `testbed --show-completion bash` prints), and what each argument offers (testbed/cli/completion.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from testbed.cli import completion
from tests.conftest import needs_mininet, run_cli
from tests.test_cli_labloop import labs  # noqa: F401 - the fixture that takes every lab it started down


REPO = Path(__file__).resolve().parents[1]


def complete(*words: str, cwd: "Path | None" = None) -> list[str]:
    """What bash gets back for `testbed WORDS<TAB>` (the last word is what is typed so far, '' for a new one)."""
    line = ["testbed", *words]
    env = {"COMP_WORDS": " ".join(line), "COMP_CWORD": str(len(line) - 1), "_TESTBED_COMPLETE": "complete_bash",
           # this checkout's testbed also from another folder
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "testbed.cli"], capture_output=True, text=True, timeout=120,
                            cwd=cwd, env={**os.environ, **env})
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_show_completion_prints_the_script_that_calls_back_testbed():
    script = run_cli("--show-completion", "bash").stdout
    assert "_TESTBED_COMPLETE=complete_bash" in script
    assert "complete -o default -F _testbed_completion testbed" in script
    assert "--install-completion" in run_cli("--help").stdout


def test_install_completion_sets_bash_up_and_bash_completes_through_it(tmp_path):
    """--install-completion as a user runs it (its HOME here), then bash itself sources the script and runs its
    completion function for `testbed ex<TAB>`, which calls `testbed` back."""
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    home.mkdir()
    bin_dir.mkdir()
    wrapper = bin_dir / "testbed"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m testbed.cli \"$@\"\n")
    wrapper.chmod(0o755)
    env = {"HOME": str(home), "SHELL": "/bin/bash", "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    run_cli("--install-completion", "bash", env=env)
    script = home / ".bash_completions" / "testbed.sh"
    assert f"source '{script}'" in (home / ".bashrc").read_text()
    shell = subprocess.run(["bash", "--norc", "-c", f"source '{script}'; COMP_WORDS=(testbed ex); COMP_CWORD=1; "
                            "_testbed_completion testbed; echo \"${COMPREPLY[*]}\""],
                           capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert shell.stdout.split() == ["exec", "export"], shell.stderr


def test_verbs_complete():
    assert complete("ex") == ["exec", "export"]
    assert complete("im") == ["import", "image"]


@needs_mininet
def test_exec_completes_a_running_labs_name_then_its_nodes(labs):  # noqa: F811 - the fixture
    name, path = labs.topology("c")
    run_cli("up", str(path))
    assert name in complete("exec", "")
    assert complete("exec", name[:-1]) == [name]
    assert complete("exec", name, "") == ["r1", "r2"]
    assert complete("exec", name, "r2") == ["r2"]
    assert complete("link", name, "r1-r2", "--node", "") == ["r1", "r2"]
    assert complete("exec", "no-such-lab", "") == []


def _run_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"status": "completed"}))
    return path


def test_results_folders_are_the_folders_with_a_manifest(tmp_path, monkeypatch):
    _run_folder(tmp_path / "results" / "diamond-20261126T220000Z")
    _run_folder(tmp_path / "results" / "line-20261126T230000Z")
    (tmp_path / "results" / "not-a-run").mkdir()
    _run_folder(tmp_path / "mine")
    (tmp_path / "results.txt").write_text("")
    monkeypatch.chdir(tmp_path)
    assert completion.results_folders("") == ["mine", "results/diamond-20261126T220000Z",
                                              "results/line-20261126T230000Z"]
    assert completion.results_folders("res") == ["results/diamond-20261126T220000Z",
                                                 "results/line-20261126T230000Z"]
    assert completion.results_folders("results/l") == ["results/line-20261126T230000Z"]
    assert completion.results_folders("nowhere/") == []
    # the same through Typer, for each verb that takes a results folder
    for verb in (["analyze"], ["check"], ["compare", "mine"]):
        assert complete(*verb, "results/d", cwd=tmp_path) == ["results/diamond-20261126T220000Z"]


def test_topology_files_are_yaml_files_here_and_in_topologies(tmp_path, monkeypatch):
    (tmp_path / "topologies").mkdir()
    for name in ("topologies/ring.yaml", "topologies/grid.yml", "topologies/notes.txt", "mine.yaml", ".hidden.yaml"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.yaml").write_text("")
    monkeypatch.chdir(tmp_path)
    assert completion.topology_files("") == ["mine.yaml", "topologies/grid.yml", "topologies/ring.yaml"]
    assert completion.topology_files("topologies/r") == ["topologies/ring.yaml"]
    assert completion.topology_files("to") == ["topologies/grid.yml", "topologies/ring.yaml"]
    assert completion.topology_files("sub/") == ["sub/deep.yaml"]
    assert completion.topology_files("missing/") == []
    for verb in ("validate", "up", "run"):
        assert complete(verb, "topologies/g", cwd=tmp_path) == ["topologies/grid.yml"]


def test_import_offers_foreign_files_and_run_both_kinds(tmp_path, monkeypatch):
    for name in ("abilene.graphml", "geant.gml", "srl.clab.yml", "mine.yaml", "notes.txt"):
        (tmp_path / name).write_text("")
    monkeypatch.chdir(tmp_path)
    assert completion.foreign_files("") == ["abilene.graphml", "geant.gml", "srl.clab.yml"]
    assert complete("import", "", cwd=tmp_path) == ["abilene.graphml", "geant.gml", "srl.clab.yml"]
    assert complete("run", "", cwd=tmp_path) == ["abilene.graphml", "geant.gml", "mine.yaml", "srl.clab.yml"]
    assert complete("validate", "", cwd=tmp_path) == ["mine.yaml"]


def test_no_lab_state_readable_offers_no_lab(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "none"))
    assert completion.lab_names("") == []


def test_a_user_who_may_not_read_the_labs_state_gets_their_names(tmp_path, monkeypatch):
    """Completing `sudo testbed exec <TAB>` runs as the user: the state (0600, the routers' token) is root's."""
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path))
    (tmp_path / "diamond").mkdir()
    (tmp_path / "line").mkdir()

    def unreadable(name):
        raise PermissionError(13, "Permission denied", str(tmp_path / name / "state.json"))

    monkeypatch.setattr(completion.labstate, "load", unreadable)
    assert completion.lab_names("") == ["diamond", "line"]
    assert completion.lab_names("l") == ["line"]
    assert completion.node_names(_Ctx(lab="diamond"), "") == []


class _Ctx:
    def __init__(self, **params):
        self.params, self.args = params, []
