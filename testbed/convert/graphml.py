"""Reading a GraphML file (the Internet Topology Zoo's, http://graphml.graphdrawing.org/) into a :class:`Graph`:
its ``<key>`` declarations turn each ``<data key="d29">`` into the attribute it names (``Latitude``), every
element keeps its line. The standard library's expat parser, which says where the XML is broken."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple
from xml.parsers import expat

from testbed.spec.errors import SpecError, SpecProblem

from .model import Graph, GraphEdge, GraphNode


def _local(tag: str) -> str:
    """``{ns}node`` or ``y:node`` -> ``node``."""
    return tag.rsplit("}", 1)[-1].rsplit(":", 1)[-1]


class _Reader:
    def __init__(self, filename: str):
        self.filename = filename
        self.keys: Dict[str, Tuple[str, str]] = {}  # key id -> (attribute name, for)
        self.graph = Graph()
        self.graphs = 0
        self.root: Optional[str] = None
        #: open elements: (tag, attributes, line, the attributes of the node/edge/graph being read)
        self.stack: List[Tuple[str, Dict[str, str], int, Dict[str, str]]] = []
        self.text: List[str] = []
        self.problems: List[SpecProblem] = []

    def problem(self, line: int, message: str) -> None:
        self.problems.append(SpecProblem(self.filename, line, "", message))

    def start(self, tag: str, attributes: Dict[str, str], line: int) -> None:
        tag = _local(tag)
        if self.root is None:
            self.root = tag
            if tag != "graphml":
                raise SpecError([SpecProblem(self.filename, line, "", f"not GraphML: the document is <{tag}>, "
                                             "not <graphml> (a Topology Zoo .graphml file)")])
        owner = self.stack[-1][3] if self.stack else {}
        if tag == "key" and "id" in attributes:
            self.keys[attributes["id"]] = (attributes.get("attr.name", attributes["id"]), attributes.get("for", ""))
        if tag == "graph":
            self.graphs += 1
            owner = self.graph.attrs if self.graphs == 1 else {}
        elif tag in ("node", "edge"):
            owner = {}
        self.stack.append((tag, attributes, line, owner))
        self.text = []

    def end(self, tag: str) -> None:
        tag, attributes, line, owner = self.stack.pop()
        if tag == "data":
            key = attributes.get("key", "")
            name = self.keys.get(key, (key, ""))[0]
            owner[name] = "".join(self.text).strip()
        elif tag == "node" and self.graphs == 1 and len(self.stack) >= 1 and self.stack[-1][0] == "graph":
            if "id" not in attributes:
                self.problem(line, "a <node> without an id")
            else:
                self.graph.nodes.append(GraphNode(attributes["id"], owner, line))
        elif tag == "edge" and self.graphs == 1:
            if "source" not in attributes or "target" not in attributes:
                self.problem(line, "an <edge> without a source and a target")
            else:
                self.graph.edges.append(GraphEdge(attributes["source"], attributes["target"], owner, line))
        self.text = []


def read_graphml(data: bytes, filename: str) -> Graph:
    """The first graph of a GraphML document; a ``SpecError`` at the line where it is not GraphML."""
    reader = _Reader(filename)
    parser = expat.ParserCreate()
    parser.StartElementHandler = lambda tag, attrs: reader.start(tag, attrs, parser.CurrentLineNumber)
    parser.EndElementHandler = reader.end
    parser.CharacterDataHandler = lambda text: reader.text.append(text)
    try:
        parser.Parse(data, True)
    except expat.ExpatError as err:
        raise SpecError([SpecProblem(filename, err.lineno, "",
                                     f"not GraphML: {expat.ErrorString(err.code)} (column {err.offset + 1})")]) from None
    if reader.root is None:
        raise SpecError([SpecProblem(filename, 1, "", "not GraphML: the file has no XML element")])
    if reader.graphs == 0:
        raise SpecError([SpecProblem(filename, 1, "", "no <graph> in this GraphML file")])
    if reader.problems:
        raise SpecError(reader.problems)
    return reader.graph
