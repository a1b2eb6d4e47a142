"""A topology read from a foreign file, before it is written as ours: nodes and links, each value with where
it came from (the comments of the file `testbed import` writes), and what was dropped or ignored."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass(frozen=True)
class Sourced:
    """A value of the topology as our file writes it (``10mbit``, ``5.7ms``, ``router``) and where it came from."""

    text: str
    source: str


@dataclass(frozen=True)
class ImportedNode:
    name: str
    #: where the node came from: ``node 3 'New York' (line 40)``
    source: str
    kind: str = "router"


@dataclass(frozen=True)
class ImportedEnd:
    node: str
    ifname: Optional[str] = None

    def __str__(self) -> str:
        return f"{self.node}:{self.ifname}" if self.ifname else self.node


@dataclass(frozen=True)
class ImportedLink:
    a: ImportedEnd
    b: ImportedEnd
    #: where the link came from: ``edge 0-1 (line 80)``
    source: str
    bw: Optional[Sourced] = None
    delay: Optional[Sourced] = None


@dataclass
class Imported:
    """A foreign topology as ours: ``name`` valid as a topology name, node names valid and unique."""

    name: str
    #: the file it came from: ``Abilene.graphml``
    file: str
    #: its format, in words: ``Topology Zoo GraphML``
    fmt: str
    description: Optional[str] = None
    nodes: List[ImportedNode] = field(default_factory=list)
    links: List[ImportedLink] = field(default_factory=list)
    #: how values were derived (the parameters used), one line each
    method: List[str] = field(default_factory=list)
    #: what was dropped, renamed or ignored, one line each
    notes: List[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        """The file and its format: ``Abilene.graphml (Topology Zoo GraphML)``."""
        return f"{self.file} ({self.fmt})"


@dataclass(frozen=True)
class GraphNode:
    """A node of a GraphML or GML file: its id, its attributes as written (``label``, ``Latitude`` ...), its line."""

    id: str
    attrs: Dict[str, str]
    line: int


@dataclass(frozen=True)
class GraphEdge:
    source: str
    target: str
    attrs: Dict[str, str]
    line: int


@dataclass
class Graph:
    """A GraphML or GML file's graph as written: what :mod:`testbed.convert.zoo` makes a topology of."""

    attrs: Dict[str, str] = field(default_factory=dict)
    nodes: List[GraphNode] = field(default_factory=list)
    edges: List[GraphEdge] = field(default_factory=list)
