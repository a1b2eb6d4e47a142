"""Topologies from and to other tools' files (`testbed import`, `testbed export`, `testbed run FOREIGN_FILE`;
docs/import-export.md):

* :mod:`testbed.convert.graphml`, :mod:`testbed.convert.gml`: an Internet Topology Zoo file read into a
  :class:`~testbed.convert.model.Graph`; :mod:`testbed.convert.zoo` makes it a topology (delays from the
  great-circle distance, bandwidths from the link speeds);
* :mod:`testbed.convert.clab`: a containerlab ``*.clab.yml`` as a topology;
* :mod:`testbed.convert.writer`: the topology file's text, every value with a comment saying where it came from;
* :mod:`testbed.convert.clab_export`: a topology as a containerlab file and a script of
  ``containerlab tools netem set`` commands for its shaping.

Bad input is a ``SpecError`` (``testbed.spec.errors``): each problem at its file and line, exit 2.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from testbed.spec import Spec, SpecError, SpecProblem
from testbed.spec.loader import read_source

from .model import Imported
from .zoo import ZooOptions

#: the formats `testbed import` reads, by name, and what it calls them
FORMATS = {"graphml": "Topology Zoo GraphML", "gml": "Topology Zoo GML", "clab": "containerlab topology"}


def foreign_format(path: Path) -> Optional[str]:
    """The format of a file by its name (``x.graphml``, ``x.gml``, ``x.clab.yml``), None for anything else
    (our own topology files among them)."""
    name = path.name.lower()
    if name.endswith(".graphml"):
        return "graphml"
    if name.endswith(".gml"):
        return "gml"
    if name.endswith((".clab.yml", ".clab.yaml")):
        return "clab"
    return None


def read_foreign(path: Path, fmt: Optional[str] = None, options: ZooOptions = ZooOptions(),
                 name: Optional[str] = None) -> Imported:
    """The topology of a foreign file (``fmt`` None: by its name); ``name`` the topology's name (default: from
    the file). A ``SpecError`` for a file that cannot be read or is not what its format says."""
    from .clab import clab_topology
    from .gml import read_gml
    from .graphml import read_graphml
    from .zoo import zoo_topology

    fmt = fmt or foreign_format(path)
    if fmt not in FORMATS:
        raise SpecError([SpecProblem(str(path), None, "", f"not a file `testbed import` reads: name it *.graphml, "
                                                          "*.gml or *.clab.yml, or give --format")])
    text = read_source(path, f"a {FORMATS[fmt]} file")
    if fmt == "clab":
        return clab_topology(text, path, name)
    graph = read_graphml(text.encode("utf-8"), str(path)) if fmt == "graphml" else read_gml(text, str(path))
    return zoo_topology(graph, path, FORMATS[fmt], options, name)


@dataclass(frozen=True)
class Conversion:
    """A foreign file converted: the topology file's text and the topology it loads as."""

    imported: Imported
    text: str
    spec: Spec


def convert(path: Path, out_name: str, fmt: Optional[str] = None, options: ZooOptions = ZooOptions(),
            name: Optional[str] = None) -> Conversion:
    """``path`` converted into the text of a topology file named ``out_name`` (for its problems' lines)."""
    from .writer import checked_topology

    imported = read_foreign(path, fmt, options, name)
    text, spec = checked_topology(imported, out_name)
    return Conversion(imported, text, spec)
