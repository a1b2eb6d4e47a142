"""What `testbed`'s shell completion offers for an argument (Typer's ``autocompletion=``; docs/completion.md).

Each function takes what is typed so far and returns the candidates that start with it, read from where
the thing really is: lab names and nodes from the labs' state (:mod:`testbed.lab.state`), results folders
from the folders that hold a run's manifest (:data:`runfolder.layout.LAYOUT`), topology and suite files
from the disk. A completion never fails: what cannot be read (a lab state only root may read, a folder
that vanished) offers nothing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, List

import typer

from runfolder.layout import LAYOUT
from testbed.lab import state as labstate

#: the endings of a file `validate`, `up` and `run` take
TOPOLOGY_SUFFIXES = (".yaml", ".yml")
#: the endings of a foreign file `import` and `run` take (testbed.convert.foreign_format)
FOREIGN_SUFFIXES = (".graphml", ".gml", ".clab.yml", ".clab.yaml")
#: where topology files are looked for besides the folder being typed (the repository's own)
TOPOLOGY_FOLDERS = ("topologies",)
#: where suite files are looked for besides the folder being typed
SUITE_FOLDERS = ("suites",)


def _up_states() -> List[labstate.LabState]:
    try:
        return [s for s in labstate.all_states() if s.status == "up"]
    except OSError:  # a lab's state is root's alone (it holds the routers' admin token)
        return []


def lab_names(incomplete: str) -> List[str]:
    """The names of the labs that are up, starting with ``incomplete``; for a user who may not read the labs'
    state (completing ``sudo testbed ...`` runs as that user), the name of every lab that has a state."""
    try:
        try:
            names = [s.name for s in labstate.all_states() if s.status == "up"]
        except PermissionError:
            names = labstate.lab_names()
    except OSError:
        names = []
    return [n for n in names if n.startswith(incomplete)]


def node_names(ctx: typer.Context, incomplete: str) -> List[str]:
    """The nodes of the lab named earlier on the command line, as the lab was built: its ``lab`` argument, or,
    where Click could not parse the arguments (an option still waiting for its value: ``link LAB L --node``),
    the first word left over that names a lab that is up."""
    states = {s.name: s for s in _up_states()}
    lab = ctx.params.get("lab") or next((word for word in ctx.args if word in states), None)
    state = states.get(lab)
    return [n for n in state.lab.get("nodes", {}) if n.startswith(incomplete)] if state and state.lab else []


def _split(incomplete: str) -> tuple[Path, str, str]:
    """What is typed, as the folder to list, the start of a name in it, and the text to put before a name."""
    head, sep, stem = incomplete.rpartition("/")
    folder = Path(head + sep) if sep else Path(".")
    return folder, stem, head + sep


def _entries(folder: Path, stem: str) -> List[Path]:
    try:
        return sorted(p for p in folder.iterdir()
                      if p.name.startswith(stem) and (stem.startswith(".") or not p.name.startswith(".")))
    except OSError:
        return []


def _files(incomplete: str, suffixes: Iterable[str], folders: Iterable[str]) -> List[str]:
    """Files ending in one of ``suffixes`` in the folder being typed, and in ``folders`` when no folder is typed."""
    folder, stem, prefix = _split(incomplete)
    found = [prefix + p.name for p in _entries(folder, stem) if p.is_file() and p.name.endswith(tuple(suffixes))]
    if not prefix:
        for extra in folders:
            found += [f"{extra}/{p.name}" for p in _entries(Path(extra), "")
                      if p.is_file() and p.name.endswith(tuple(suffixes))]
    return [f for f in found if f.startswith(incomplete)]


def topology_files(incomplete: str) -> List[str]:
    """Topology files (``*.yaml``, ``*.yml``; not a containerlab ``*.clab.yml``) in the folder being typed, or
    in ``topologies/``."""
    return [f for f in _files(incomplete, TOPOLOGY_SUFFIXES, TOPOLOGY_FOLDERS) if not f.endswith(FOREIGN_SUFFIXES)]


def foreign_files(incomplete: str) -> List[str]:
    """Topology Zoo maps and containerlab topologies in the folder being typed."""
    return _files(incomplete, FOREIGN_SUFFIXES, ())


def runnable_files(incomplete: str) -> List[str]:
    """What `run` takes: topology files and foreign ones."""
    return sorted(set(topology_files(incomplete) + foreign_files(incomplete)))


def suite_files(incomplete: str) -> List[str]:
    """Suite files (``*.yaml``, ``*.yml``) in the folder being typed, or in ``suites/``."""
    return _files(incomplete, TOPOLOGY_SUFFIXES, SUITE_FOLDERS)


def _is_run_folder(path: Path) -> bool:
    return (path / LAYOUT.manifest).is_file()


def results_folders(incomplete: str) -> List[str]:
    """Results folders (a folder with a run's manifest) in the folder being typed, and those one level down
    in a folder that holds runs (``res<TAB>`` offers ``results/<run-id>``)."""
    folder, stem, prefix = _split(incomplete)
    found: List[str] = []
    for entry in _entries(folder, stem):
        if not entry.is_dir():
            continue
        if _is_run_folder(entry):
            found.append(prefix + entry.name)
        else:
            found += [f"{prefix}{entry.name}/{run.name}" for run in _entries(entry, "")
                      if run.is_dir() and _is_run_folder(run)]
    return found
