"""Reading a GML file (Graph Modelling Language, as the Internet Topology Zoo writes it) into a :class:`Graph`:
``graph [ node [ id 0 label "London" Latitude 51.5 ] edge [ source 0 target 1 LinkSpeedRaw 1e10 ] ]``.
Keys and values in pairs, lists in brackets, strings in double quotes (other characters than ASCII written as
``&#227;``, as networkx writes them), ``#`` comments to the end of the line; every node and edge keeps its
line."""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Dict, List, Tuple, Union

from testbed.spec.errors import SpecError, SpecProblem

from .model import Graph, GraphEdge, GraphNode

_TOKEN = re.compile(r'\s+|#[^\n]*|(?P<open>\[)|(?P<close>\])|"(?P<string>[^"]*)"|(?P<word>[^\s\[\]"]+)')


@dataclass(frozen=True)
class _Pair:
    key: str
    value: Union[str, List["_Pair"]]
    line: int


def _parse(text: str, filename: str) -> List[_Pair]:
    def fail(line: int, message: str) -> SpecError:
        return SpecError([SpecProblem(filename, line, "", f"not GML: {message}")])

    stack: List[List[_Pair]] = [[]]
    opened: List[Tuple[str, int]] = []
    key = None
    key_line = line = 1
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:  # an unterminated string
            raise fail(line, "a string is not closed (a \" is missing)")
        pos = match.end()
        token_line, line = line, line + match.group(0).count("\n")
        if match.group("open") is not None:
            if key is None:
                raise fail(token_line, "a [ without a key before it")
            stack.append([])
            opened.append((key, key_line))
            key = None
        elif match.group("close") is not None:
            if key is not None:
                raise fail(key_line, f"key {key!r} has no value")
            if not opened:
                raise fail(token_line, "a ] without its [")
            items = stack.pop()
            name, name_line = opened.pop()
            stack[-1].append(_Pair(name, items, name_line))
        elif match.group("string") is not None or match.group("word") is not None:
            word = html.unescape(match.group("string")) if match.group("string") is not None else match.group("word")
            if key is None:
                if match.group("string") is not None or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word):
                    raise fail(token_line, f"expected a key, found {word!r}")
                key, key_line = word, token_line
            else:
                stack[-1].append(_Pair(key, word, key_line))
                key = None
    if opened:
        raise fail(opened[-1][1], f"{opened[-1][0]} [ is not closed (a ] is missing)")
    if key is not None:
        raise fail(key_line, f"key {key!r} has no value")
    return stack[0]


def _attrs(items: List[_Pair]) -> Dict[str, str]:
    return {p.key: p.value for p in items if isinstance(p.value, str)}


def read_gml(text: str, filename: str) -> Graph:
    """The ``graph [...]`` of a GML document; a ``SpecError`` at the line where it is not GML."""
    graphs = [p for p in _parse(text, filename) if p.key == "graph" and isinstance(p.value, list)]
    if not graphs:
        raise SpecError([SpecProblem(filename, 1, "", "not GML: no `graph [ ... ]` in the file")])
    items = graphs[0].value
    graph = Graph(attrs=_attrs(items))
    problems: List[SpecProblem] = []
    for pair in items:
        if not isinstance(pair.value, list) or pair.key not in ("node", "edge"):
            continue
        attrs = _attrs(pair.value)
        if pair.key == "node":
            if "id" not in attrs:
                problems.append(SpecProblem(filename, pair.line, "", "a node without an id"))
            else:
                graph.nodes.append(GraphNode(attrs.pop("id"), attrs, pair.line))
        elif "source" not in attrs or "target" not in attrs:
            problems.append(SpecProblem(filename, pair.line, "", "an edge without a source and a target"))
        else:
            graph.edges.append(GraphEdge(attrs.pop("source"), attrs.pop("target"), attrs, pair.line))
    if problems:
        raise SpecError(problems)
    return graph
