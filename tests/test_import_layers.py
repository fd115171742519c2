"""The import order of docs/contracts.md ("Contracts between the parts"), checked on the source.

Every module under ``estratos/`` is parsed with :mod:`ast`; every ``import`` and ``from ...
import`` naming an ``estratos`` module is an edge, at module level and inside functions alike
(a function-level import is still a dependency: it only runs later). Imports under ``if
TYPE_CHECKING:`` are ignored: they run only for the type checker. Names loaded by
``importlib.import_module`` at run time (a package's lazy exports of its own modules, the
``--encoder module:function`` hook) are not seen.

Two rules fail the test, each naming the offending edge as ``file:line``:

- an edge against the order: a part imports only the parts before it in :data:`ORDER` and
  the shared leaf modules (:data:`LEAVES`, which import only each other); ``demo``, ``slurm``
  and ``testing`` sit above every part and import none of each other; ``cli`` wires them all
  and ``__main__`` runs ``cli``; the report imports nothing from training, the cache, the
  encoder, similarity or torch, and the probes nothing from the encoder but its configuration
  (:data:`NEVER`, :data:`NEVER_BUT`);
- an import circle among modules (within a part too), named by one cycle through it.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

import pytest

import estratos

PACKAGE = Path(estratos.__file__).resolve().parent

#: the shared leaf modules (the package itself holds ``__version__``)
LEAVES = frozenset({"estratos", "estratos.errors", "estratos.text", "estratos.vocab",
                    "estratos.options", "estratos.faultpoints", "estratos.files",
                    "estratos.registry"})
#: the parts, lowest first: each imports only parts before it
ORDER = ("stats", "protocols", "tasks", "cache", "encode", "results", "probe", "similarity",
         "report")
#: above every part, calling their public APIs; they import none of each other
ABOVE = ("demo", "slurm", "testing")
#: the command line (``cli`` wires every part) and ``python -m estratos``
TOP = ("cli", "__main__")
#: parts a part never imports though they come before it in the order: the report reads
#: results through ``results/`` and nothing of training, the cache, the encoder or
#: similarity; the probes read vectors through ``cache/`` and never the encoder
NEVER: Dict[str, Tuple[str, ...]] = {"report": ("cache", "encode", "probe", "similarity"),
                                     "probe": ("encode",)}
#: modules of a NEVER part that part may import all the same: the probes write the encode
#: command that adds missing sentences with the encode configuration (standard library only,
#: no encoder)
NEVER_BUT: Dict[str, Tuple[str, ...]] = {"probe": ("estratos.encode.config",)}
#: third-party packages a part never imports
NEVER_EXTERNAL: Dict[str, Tuple[str, ...]] = {"report": ("torch",)}


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported module (a top-level third-party name for external ones)
    path: Path
    line: int

    def __str__(self) -> str:
        where = self.path.relative_to(PACKAGE.parent)
        return f"{where}:{self.line}: {self.source} -> {self.target}"


def module_files(root: Path = PACKAGE) -> Dict[str, Tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's ``__init__``)."""
    out: Dict[str, Tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        out[".".join(parts)] = (path, package)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(tree: ast.AST) -> Iterator[ast.stmt]:
    """Every import statement in ``tree``, at any depth, except under ``if TYPE_CHECKING:``."""
    stack: List[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def module_edges(name: str, source: str, path: Path, package: bool,
                 modules: Sequence[str]) -> List[Edge]:
    """The edges of one module: to the ``estratos`` module each import names (the submodule
    when ``from P import M`` names one, else the package or module ``P``), and to the
    top-level name of each third-party import."""
    known = set(modules)
    here = name if package else name.rpartition(".")[0]
    edges: List[Edge] = []
    for node in sorted(_imports(ast.parse(source, str(path))), key=lambda n: n.lineno):
        targets: List[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            assert isinstance(node, ast.ImportFrom)
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[:len(here.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        for target in targets:
            if target.split(".")[0] != "estratos":
                edges.append(Edge(name, target.split(".")[0], path, node.lineno))
                continue
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.append(Edge(name, target, path, node.lineno))
    return list(dict.fromkeys(edges))  # one edge per line, however many names it imports


def all_edges() -> List[Edge]:
    files = module_files()
    names = sorted(files)
    edges: List[Edge] = []
    for name, (path, package) in files.items():
        edges += module_edges(name, path.read_text(encoding="utf-8"), path, package, names)
    return edges


def part_of(module: str) -> str:
    """``leaf`` for a shared leaf module, else the part: ``estratos.<part>...``."""
    return "leaf" if module in LEAVES else module.split(".")[1]


RANK: Dict[str, int] = {"leaf": 0, **{p: i + 1 for i, p in enumerate(ORDER)},
                        **{p: len(ORDER) + 1 for p in ABOVE},
                        **{p: len(ORDER) + 2 + i for i, p in enumerate(TOP)}}


def order_violation(edge: Edge) -> Optional[str]:
    """Why ``edge`` breaks the order (None: it does not)."""
    source = part_of(edge.source)
    if not edge.target.startswith("estratos"):
        if edge.target in NEVER_EXTERNAL.get(source, ()):
            return f"{source}/ never imports {edge.target}"
        return None
    target = part_of(edge.target)
    if source == target:
        return None
    if target in NEVER.get(source, ()) and edge.target not in NEVER_BUT.get(source, ()):
        return f"{source}/ never imports {target}/"
    if RANK[target] >= RANK[source]:
        where = "a leaf module" if source == "leaf" else f"{source}/"
        return f"{where} may not import {target if target == 'leaf' else target + '/'}"
    return None


def find_cycles(edges: Sequence[Edge]) -> List[List[Edge]]:
    """One cycle through each strongly connected component of more than one module."""
    graph: Dict[str, Dict[str, Edge]] = defaultdict(dict)
    for edge in edges:
        if edge.target.startswith("estratos"):
            graph[edge.source].setdefault(edge.target, edge)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    components: List[List[str]] = []

    def visit(root: str) -> None:  # Tarjan's algorithm, iterative
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
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
                    components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    cycles = []
    for component in components:
        members = set(component)
        start = component[0]
        # shortest way back to start inside the component (breadth first)
        previous: Dict[str, Edge] = {}
        frontier = [start]
        while frontier and start not in previous:
            following = []
            for node in frontier:
                for target, edge in sorted(graph[node].items()):
                    if target in members and target not in previous:
                        previous[target] = edge
                        following.append(target)
            frontier = following
        cycle = [previous[start]]
        while cycle[0].source != start:
            cycle.insert(0, previous[cycle[0].source])
        cycles.append(cycle)
    return cycles


# ---- the checker on small sources (so the package test below can fail) ----

def _edges_of(source: str, name: str = "estratos.report.x", package: bool = False) -> List[Edge]:
    modules = ["estratos", "estratos.report", "estratos.report.x", "estratos.probe",
               "estratos.probe.config", "estratos.results", "estratos.results.record"]
    return module_edges(name, source, PACKAGE / "report" / "x.py", package, modules)


def test_edges_inside_functions_count_and_type_checking_blocks_do_not() -> None:
    source = ("from typing import TYPE_CHECKING\n"
              "from estratos.results import record\n"
              "if TYPE_CHECKING:\n"
              "    from estratos.probe import config\n"
              "def f():\n"
              "    from estratos.probe.config import ProbeConfig\n"
              "    import torch.nn\n")
    edges = _edges_of(source)
    assert [(e.target, e.line) for e in edges if e.target.startswith("estratos")] == [
        ("estratos.results.record", 2), ("estratos.probe.config", 6)]
    assert [(e.target, e.line) for e in edges if e.target == "torch"] == [("torch", 7)]
    reasons = [order_violation(e) for e in edges]
    assert reasons == [None, None, "report/ never imports probe/", "report/ never imports torch"]


def test_relative_imports_resolve_and_an_upward_edge_is_named() -> None:
    edge, = _edges_of("from .. import probe\n", name="estratos.results.record")
    assert edge.target == "estratos.probe"
    assert order_violation(edge) == "results/ may not import probe/"
    edge, = _edges_of("from estratos import report\n", name="estratos.errors")
    assert order_violation(edge) == "a leaf module may not import report/"


def test_a_circle_is_found_with_its_edges() -> None:
    here = PACKAGE / "probe" / "config.py"
    edges = [Edge("estratos.probe.a", "estratos.probe.b", here, 1),
             Edge("estratos.probe.b", "estratos.probe.c", here, 2),
             Edge("estratos.probe.c", "estratos.probe.a", here, 3),
             Edge("estratos.probe.c", "estratos.vocab", here, 4)]
    cycle, = find_cycles(edges)
    assert [(e.source, e.target) for e in cycle] == [
        ("estratos.probe.a", "estratos.probe.b"), ("estratos.probe.b", "estratos.probe.c"),
        ("estratos.probe.c", "estratos.probe.a")]
    assert find_cycles(edges[:2] + edges[3:]) == []


# ---- the package ----

@pytest.fixture(scope="module")
def edges() -> List[Edge]:
    return all_edges()


def test_every_module_is_in_a_known_part() -> None:
    parts = {part_of(name) for name in module_files()}
    assert parts <= set(RANK), f"not placed in docs/contracts.md's order: {parts - set(RANK)}"
    assert set(ORDER) <= parts, f"parts of the order that no longer exist: {set(ORDER) - parts}"


def test_imports_follow_the_documented_order(edges: List[Edge]) -> None:
    bad = [f"{edge}  ({why})" for edge in edges if (why := order_violation(edge))]
    assert not bad, "imports against docs/contracts.md's order:\n" + "\n".join(bad)


def test_no_import_circle(edges: List[Edge]) -> None:
    cycles = find_cycles(edges)
    assert not cycles, "import circles:\n" + "\n\n".join(
        "\n".join(str(edge) for edge in cycle) for cycle in cycles)
