"""An :class:`Imported` topology as the text of our topology file, each value with a comment saying where it
came from, checked by loading it with the topology loader (so what is written always validates)."""
from __future__ import annotations

import json
import textwrap
from typing import List

from testbed.spec import Spec, load_spec_text

from .model import Imported, ImportedLink, ImportedNode


#: the width the file's leading comments are wrapped to
WIDTH = 110


def _comment(text: str) -> str:
    return " ".join(text.split())  # one line, whatever the source's labels hold


def _node(node: ImportedNode) -> str:
    value = "{}" if node.kind == "router" else f"{{kind: {node.kind}}}"
    return f"  {node.name}: {value}  # {_comment(node.source)}"


def _endpoint(end) -> str:
    return json.dumps(str(end)) if end.ifname else str(end)


def _link(link: ImportedLink) -> List[str]:
    lines = [f"  - endpoints: [{_endpoint(link.a)}, {_endpoint(link.b)}]  # {_comment(link.source)}"]
    for key, value in (("bw", link.bw), ("delay", link.delay)):
        if value is not None:
            lines.append(f"    {key}: {value.text}  # {_comment(value.source)}")
    return lines


def topology_text(imported: Imported) -> str:
    """The topology file's text (YAML with comments)."""
    out = [f"# Converted by `testbed import` from {_comment(imported.source)}; every value says where it came from."]
    for line in imported.method:
        out += textwrap.wrap(_comment(line), WIDTH, initial_indent="# ", subsequent_indent="#   ")
    if imported.notes:
        out.append("# Notes:")
        for line in imported.notes:
            out += textwrap.wrap(_comment(line), WIDTH, initial_indent="#   ", subsequent_indent="#     ")
    out.append(f"name: {imported.name}")
    if imported.description:
        out.append(f"description: {json.dumps(imported.description)}")
    out.append("nodes:")
    out += [_node(node) for node in imported.nodes]
    if imported.links:
        out.append("links:")
        for link in imported.links:
            out += _link(link)
    return "\n".join(out) + "\n"


def checked_topology(imported: Imported, filename: str) -> tuple[str, Spec]:
    """The text and the topology it loads as; a ``SpecError`` (at the lines of ``filename``, the text written)
    when the foreign file describes what our topology cannot be (e.g. one interface on two links)."""
    text = topology_text(imported)
    return text, load_spec_text(text, filename)
