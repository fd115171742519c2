"""The import order of docs/contracts.md ("Contracts between the parts"), checked on the source.

The rules are import-linter contracts in pyproject.toml (``[tool.importlinter]``; .ci/run runs
``lint-imports`` on them too). This test runs the same contracts on the same graph plus what
grimp cannot see: modules imported by a name in a string (a package's lazy exports
``import_module(f"estratos.probe.{_EXPORTS[name]}")``, the workers' preload lists, the encoder
warm-up). A string that is exactly the name of a module under ``estratos`` is an import by the
module holding it; ``f"estratos.<part>.{TABLE[...]}"`` is one import per value of the
module-level dict ``TABLE``. Any other name computed for ``import_module`` or ``__import__``
fails the test unless :data:`COMPUTED` says where its names come from. Last, an import circle
is looked for module by module, which also sees a circle through a package's ``__init__``
(import-linter's ``acyclic_siblings`` compares siblings only).
"""

from __future__ import annotations

import ast
import graphlib
import itertools
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

import estratos

PACKAGE = Path(estratos.__file__).resolve().parent
PYPROJECT = PACKAGE.parent / "pyproject.toml"

#: modules whose ``import_module`` takes a computed name, and where those names are checked
COMPUTED: Dict[str, str] = {
    "estratos.probe.grid.pool": "its callers' preload lists, strings seen where written",
    "estratos.probe.grid.units": "the WORKER_PRELOAD strings, seen where written",
    "estratos.encode.models.batcher": "the user's --encoder module, not estratos",
}

Import = Tuple[str, str, int, str]  # importer, imported, line, line text


def module_files() -> Dict[str, Path]:
    out: Dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _spelled(node: ast.AST, tables: Dict[str, List[str]]) -> Optional[List[str]]:
    """The names ``node`` spells: a string, or an f-string's prefix + each value of a table."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
        prefix, looked_up = node.values[0], node.values[1]
        if (isinstance(prefix, ast.Constant) and isinstance(looked_up, ast.FormattedValue)
                and isinstance(looked_up.value, ast.Subscript)
                and isinstance(looked_up.value.value, ast.Name)
                and looked_up.value.value.id in tables):
            return [prefix.value + value for value in tables[looked_up.value.value.id]]
    return None


def _is_import_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    return name in ("import_module", "__import__")


def named_imports() -> Tuple[List[Import], List[str]]:
    """The imports by a name in a string, and the import calls with a computed name
    (``file:line``) that :data:`COMPUTED` does not account for."""
    known = module_files()
    found: List[Import] = []
    computed: List[str] = []
    for name, path in known.items():
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        tree = ast.parse(source, str(path))
        tables = {target.id: [v.value for v in node.value.values
                              if isinstance(v, ast.Constant) and isinstance(v.value, str)]
                  for node in tree.body if isinstance(node, ast.Assign)
                  and isinstance(node.value, ast.Dict)
                  for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.walk(tree):
            if (_is_import_call(node) and name not in COMPUTED
                    and (not node.args or _spelled(node.args[0], tables) is None)):
                where = path.relative_to(PACKAGE.parent)
                computed.append(f"{where}:{node.lineno}: {lines[node.lineno - 1].strip()}")
            for target in _spelled(node, tables) or []:
                if target in known and "." in target and target != name:
                    line = getattr(node, "lineno", 0)
                    found.append((name, target, line, lines[line - 1].strip()))
    return found, computed


def run_contracts(extra: Sequence[Import]) -> Tuple[bool, str, Any]:
    """pyproject.toml's contracts on the package's graph plus ``extra``:
    (all kept, import-linter's report, the graph)."""
    pytest.importorskip("importlinter", reason="the contracts need the lint extra: "
                        "pip install -e '.[lint]'")
    from importlinter import configuration
    from importlinter.adapters.building import GraphBuilder
    from importlinter.application import output, use_cases
    from importlinter.application.app_config import settings

    graphs: List[Any] = []

    class WithNamedImports(GraphBuilder):
        def build(self, *args: Any, **kwargs: Any) -> Any:
            graph = super().build(*args, **kwargs)
            for importer, imported, line, text in extra:
                graph.add_import(importer=importer, imported=imported, line_number=line,
                                 line_contents=text)
            graphs.append(graph)
            return graph

    configuration.configure()
    settings.configure(GRAPH_BUILDER=WithNamedImports())
    try:
        with output.console.capture() as capture:
            kept = use_cases.lint_imports(str(PYPROJECT), cache_dir=None, no_logo=True,
                                          is_debug_mode=True)
    finally:
        configuration.configure()
    return kept, capture.get(), graphs[0]


def import_circle(graph: Any) -> List[str]:
    """One circle of imports among the package's modules, an import a line (empty: none)."""
    internal = {m for m in graph.modules if m.split(".")[0] == "estratos"}
    try:
        graphlib.TopologicalSorter(
            {m: graph.find_modules_directly_imported_by(m) & internal for m in internal}
        ).prepare()
    except graphlib.CycleError as error:
        cycle = list(reversed(error.args[1]))  # each node imports the next
        return [f"{a} -> {b} (l.{', '.join(str(d['line_number']) for d in details)})"
                for a, b in itertools.pairwise(cycle)
                for details in [graph.get_import_details(importer=a, imported=b)]]
    return []


@pytest.fixture(scope="module")
def named() -> List[Import]:
    found, computed = named_imports()
    assert not computed, ("imports of a computed name the contracts cannot check (spell it, "
                          "or say in COMPUTED where it comes from):\n" + "\n".join(computed))
    return found


def test_the_string_imports_are_found(named: List[Import]) -> None:
    pairs = {(importer, imported) for importer, imported, _, _ in named}
    assert {("estratos.probe", "estratos.probe.grid.runner"),
            ("estratos.encode", "estratos.encode.config"),
            ("estratos.probe.grid.units", "estratos.probe.estimators.training"),
            ("estratos.encode.models.warmup", "estratos.encode.models.hf")} <= pairs


def test_imports_keep_the_contracts(named: List[Import]) -> None:
    kept, report, graph = run_contracts(named)
    assert kept, "imports against pyproject.toml's [tool.importlinter]:\n" + report
    circle = import_circle(graph)
    assert not circle, "an import circle:\n" + "\n".join(circle)


def test_an_upward_import_or_a_circle_fails(named: List[Import]) -> None:
    """The checks can fail: a leaf importing the command line, the probes importing the
    encoder beyond its configuration, a circle through ``estratos/probe/__init__.py``."""
    bad = [("estratos.errors", "estratos.cli", 1, "import estratos.cli"),
           ("estratos.probe.cells", "estratos.encode.run", 2, "import estratos.encode.run"),
           ("estratos.probe.grid.runner", "estratos.probe", 3, "import estratos.probe")]
    kept, report, graph = run_contracts([*named, *bad])
    assert not kept
    assert "estratos.errors -> estratos.cli (l.1)" in report
    assert "estratos.probe.cells -> estratos.encode.run (l.2)" in report
    graph.remove_import(importer="estratos.errors", imported="estratos.cli")  # its own circle
    assert "estratos.probe.grid.runner -> estratos.probe (l.3)" in import_circle(graph)
