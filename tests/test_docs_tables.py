"""The measured tables of docs/*.md are what their stored results files give.

Each table between ``<!-- table: NAME -->`` and ``<!-- /table -->`` in a doc is rendered
again from its results files under docs/measurements/ by bench/docs_tables.py (the functions
``estratos report`` uses); ``--check`` must find nothing to change. When this fails, either
the doc was edited by hand (run ``python bench/docs_tables.py`` to restore its table) or the
report's rendering changed (rerun it, read the diff, and fix the prose around the table).
"""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def docs_tables():
    spec = importlib.util.spec_from_file_location("docs_tables", REPO / "bench" / "docs_tables.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_tables"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("docs_tables", None)


def test_every_docs_table_matches_its_results(docs_tables):
    out = io.StringIO()
    status = docs_tables.run(check=True, out=out)
    assert status == 0, out.getvalue()


def test_every_table_has_its_results_files_and_markers(docs_tables):
    docs = {t.doc for t in docs_tables.TABLES}
    for table in docs_tables.TABLES:
        for name in table.files:
            assert (docs_tables.MEASUREMENTS / name).is_file(), (table.name, name)
    for doc in docs:
        text = (docs_tables.DOCS / doc).read_text(encoding="utf-8")
        found = docs_tables.blocks(text, doc)
        assert {t.name for t in docs_tables.TABLES if t.doc == doc} == set(found), doc


def test_check_names_the_doc_and_table_that_differ(docs_tables, tmp_path, monkeypatch):
    table = next(t for t in docs_tables.TABLES if t.name == "demo-layers")
    doc = tmp_path / table.doc
    text = (docs_tables.DOCS / table.doc).read_text(encoding="utf-8")
    start, _ = docs_tables.blocks(text, table.doc)[table.name]
    lines = text.split("\n")
    row = lines[start + 2]  # the first row under the header and its rule
    cells = row.split(" | ")
    cells[3] = "99.9"  # a hand edit of one number
    lines[start + 2] = " | ".join(cells)
    doc.write_text("\n".join(lines), encoding="utf-8")
    monkeypatch.setattr(docs_tables, "DOCS", tmp_path)
    monkeypatch.setattr(docs_tables, "TABLES",
                        [t for t in docs_tables.TABLES if t.doc == table.doc])
    out = io.StringIO()
    assert docs_tables.run(check=True, out=out) == 1
    assert f"docs/{table.doc}: table {table.name} differs" in out.getvalue()
    assert doc.read_text(encoding="utf-8") == "\n".join(lines)  # --check changes nothing
    assert docs_tables.run(check=False, out=io.StringIO()) == 0  # rewrite ...
    assert doc.read_text(encoding="utf-8") == text  # ... gives back the stored table
    assert docs_tables.run(check=True, out=io.StringIO()) == 0


def test_a_marker_without_an_entry_is_an_error(docs_tables, tmp_path, monkeypatch):
    (tmp_path / "x.md").write_text("a\n<!-- table: nowhere -->\n<!-- /table -->\n",
                                   encoding="utf-8")
    monkeypatch.setattr(docs_tables, "DOCS", tmp_path)
    monkeypatch.setattr(docs_tables, "TABLES", [docs_tables.DocTable(
        "somewhere", "x.md", (), lambda: "| a |\n")])
    out = io.StringIO()
    assert docs_tables.run(check=True, out=out) == 1
    assert "nowhere" in out.getvalue()
