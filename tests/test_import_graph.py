"""The packages' import graph has no circle and keeps the layering (docs/architecture.md,
"Packages and their layering"):

* ``router`` imports none of ``traffic``, ``spark``, ``testbed``;
* ``traffic`` imports neither ``spark`` nor ``testbed``;
* ``spark`` and ``runfolder`` (the results folder) import no ``testbed``; ``runfolder`` (shipped to
  nodes and Spark executors) imports nothing of the project but ``router``;
* ``zenohrouter`` (shipped to nodes with nothing but zenoh) imports nothing of the project;

and no module reaches itself again through the imports that run (module level and in functions
alike: a lazy import only hides a circle). An import under ``if TYPE_CHECKING:`` runs never: it
names a type for the reader, as two modules that describe each other must, and makes no circle;
it does count for the layering (``router`` does not even name a type of ``testbed``).

The graph is read from the source (ast), module by module. ``from pkg import name`` is an edge
to ``pkg.name`` when that is a module, else to ``pkg``; the implicit import of a module's own
parent packages is no edge (every submodule import runs them, so it proves nothing).
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("router", "traffic", "spark", "testbed", "runfolder", "zenohrouter")
#: importer package -> the packages it must not import
FORBIDDEN = {
    "router": {"traffic", "spark", "testbed"},
    "traffic": {"spark", "testbed"},
    "spark": {"testbed"},
    "runfolder": {"testbed", "spark", "traffic", "zenohrouter"},
    "zenohrouter": {"router", "traffic", "spark", "testbed", "runfolder"},
}


def module_files(root: Path = ROOT) -> Dict[str, Path]:
    """Every module of the packages under ``root``, by dotted name (a package by its own name)."""
    modules: Dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _imported(module: str, path: Path, node: ast.AST, modules: Dict[str, Path]) -> List[str]:
    """The project modules one import statement names."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        return [_known(name, modules) for name in names if _known(name, modules)]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = package[:len(package) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    found = []
    for alias in node.names:
        if f"{source}.{alias.name}" in modules:
            found.append(f"{source}.{alias.name}")
        elif _known(source, modules):
            found.append(_known(source, modules))
    return found


def _known(name: str, modules: Dict[str, Path]) -> str:
    """The project module ``name`` is, or is inside ('' when it is no project module)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return ""


def _type_checking_only(tree: ast.AST) -> Set[ast.AST]:
    """The import statements under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    found: Set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found.update(n for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return found


def import_graph(root: Path = ROOT, type_checking: bool = True) -> Dict[str, Set[str]]:
    """module -> the project modules it imports, anywhere in its source (without those only named
    under ``TYPE_CHECKING`` when ``type_checking`` is False)."""
    modules = module_files(root)
    graph: Dict[str, Set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = set() if type_checking else _type_checking_only(tree)
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in skip:
                edges.update(_imported(module, path, node, modules))
        edges.discard(module)
        graph[module] = edges
    return graph


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: List[Tuple[str, List[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layering_violations(graph: Dict[str, Set[str]]) -> List[str]:
    return sorted(f"{module} imports {target}" for module, targets in graph.items() for target in targets
                  if target.split(".")[0] in FORBIDDEN.get(module.split(".")[0], ()))


def test_no_import_circle():
    found = circles(import_graph(type_checking=False))
    assert not found, "import circles (each: the modules that reach each other):\n" + "\n".join(
        " <-> ".join(circle) for circle in found)


def test_imports_follow_the_layering():
    found = layering_violations(import_graph())
    assert not found, "imports against the layering:\n" + "\n".join(found)


def test_the_walk_sees_a_circle_and_a_layering_violation(tmp_path):
    """The checks themselves: a made-up tree with two circles, a type named back (no circle) and one
    forbidden import."""
    (tmp_path / "router").mkdir()
    (tmp_path / "router" / "__init__.py").write_text("")
    (tmp_path / "router" / "a.py").write_text("from . import b\n")
    (tmp_path / "router" / "b.py").write_text("def f():\n    from router.a import x\n")
    type_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {}\n"
    (tmp_path / "router" / "c.py").write_text(type_only.format("import testbed.x"))
    (tmp_path / "router" / "d.py").write_text(type_only.format("from . import e"))
    (tmp_path / "router" / "e.py").write_text("from . import d\n")  # a type named back: no circle
    (tmp_path / "testbed").mkdir()
    (tmp_path / "testbed" / "__init__.py").write_text("from .x import y\n")
    (tmp_path / "testbed" / "x.py").write_text("from . import z\n")  # z is a name of the package
    assert sorted(circles(import_graph(tmp_path, type_checking=False))) == [["router.a", "router.b"],
                                                                             ["testbed", "testbed.x"]]
    assert layering_violations(import_graph(tmp_path)) == ["router.c imports testbed.x"]
