"""YAML parsing that remembers where every value came from.

``parse_yaml`` composes the document into PyYAML's node tree (which carries
line numbers), then builds plain Python data from it together with a map from
each YAML path to its line.  Unlike ``yaml.safe_load`` it refuses duplicate
mapping keys (a node defined twice is an error, not a silent overwrite), and it
keeps every mapping key as the string that was written (``1:`` stays ``"1"``).
Booleans are YAML 1.2's: only ``true``/``false``; ``on``, ``no``, ``yes`` are
strings (node names, not booleans).  Anchors, aliases and ``<<`` merge keys work.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import yaml

from .errors import Loc

__all__ = ["ParsedYaml", "YamlProblem", "parse_yaml"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOOL_TAG = "tag:yaml.org,2002:bool"


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false, so that nodes named
    ``on``, ``off``, ``yes``, ``no``, ``y`` or ``n`` stay names."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


@dataclass(frozen=True)
class YamlProblem:
    line: Optional[int]
    loc: Loc
    message: str


@dataclass
class ParsedYaml:
    """The document as plain data, plus where each path starts (1-based lines)."""

    data: Any
    lines: Dict[Loc, int] = field(default_factory=dict)
    problems: List[YamlProblem] = field(default_factory=list)

    def line_of(self, loc: Loc) -> Optional[int]:
        """Line of ``loc``, or of its nearest ancestor that exists in the file."""
        loc = tuple(loc)
        while loc not in self.lines and loc:
            loc = loc[:-1]
        return self.lines.get(loc)


def _syntax_problem(err: yaml.YAMLError) -> YamlProblem:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    line = mark.line + 1 if mark is not None else None
    what = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    detail = f"{what} ({context})" if context else what
    return YamlProblem(line, (), f"YAML syntax error: {detail}")


class _Builder:
    def __init__(self, loader: yaml.SafeLoader, result: ParsedYaml):
        self.loader = loader
        self.result = result

    def build(self, node: yaml.Node, loc: Loc, active: frozenset = frozenset()) -> Any:
        if id(node) in active:
            self.result.problems.append(
                YamlProblem(node.start_mark.line + 1, loc, "recursive YAML alias is not allowed")
            )
            return None
        active = active | {id(node)}
        self.result.lines.setdefault(loc, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, loc, active)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, loc + (i,), active) for i, item in enumerate(node.value)]
        return self.loader.construct_object(node, deep=True)

    def _mapping(self, node: yaml.MappingNode, loc: Loc, active: frozenset) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        first_line: Dict[str, int] = {}
        merged: List[yaml.MappingNode] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                if isinstance(value_node, yaml.MappingNode):
                    merged.append(value_node)
                elif isinstance(value_node, yaml.SequenceNode):
                    merged.extend(v for v in value_node.value if isinstance(v, yaml.MappingNode))
                continue
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                self.result.problems.append(
                    YamlProblem(line, loc, "a mapping key must be a plain name, not a list or mapping")
                )
                continue
            key = str(key_node.value)
            if key in first_line:
                self.result.problems.append(
                    YamlProblem(
                        line,
                        loc + (key,),
                        f"duplicate key {key!r} (first defined at line {first_line[key]}); "
                        "each key may appear once",
                    )
                )
                continue
            first_line[key] = line
            self.result.lines[loc + (key,)] = line
            out[key] = self.build(value_node, loc + (key,), active)
        for base in merged:  # explicit keys win over merged ones, as YAML says
            for key_node, value_node in base.value:
                key = str(key_node.value)
                if key not in out and key_node.tag != _MERGE_TAG:
                    self.result.lines[loc + (key,)] = key_node.start_mark.line + 1
                    out[key] = self.build(value_node, loc + (key,), active)
        return out


def parse_yaml(text: str) -> ParsedYaml:
    """Parse one YAML document; syntax errors and duplicate keys become problems."""
    result = ParsedYaml(data=None)
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as err:  # a character YAML does not allow, found up front
        line = text[: err.position].count("\n") + 1
        result.problems.append(YamlProblem(line, (), f"YAML syntax error: character {err.character:#x} is not allowed"))
        return result
    try:
        node = loader.get_single_node()
        if node is None:
            return result
        builder = _Builder(loader, result)
        result.data = builder.build(node, ())
    except yaml.reader.ReaderError as err:
        line = text[: err.position].count("\n") + 1
        result.problems.append(YamlProblem(line, (), f"YAML syntax error: character {err.character:#x} is not allowed"))
        result.data = None
    except yaml.YAMLError as err:
        result.problems.append(_syntax_problem(err))
        result.data = None
    finally:
        loader.dispose()
    return result
