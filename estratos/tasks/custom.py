"""Custom tasks: a small TOML spec (``--task-file``) pointing at TSV or JSON-lines files.

Example (``docs/tasks.md`` has the full reference)::

    name = "Polarity"          # task id: custom:Polarity
    group = "SC"
    language = "es"
    format = "tsv"             # or "jsonl"
    combiner = "single"
    protocol = "split"
    labels = ["neg", "pos"]    # optional (default: the labels found, sorted)

    [files]                    # relative to data_dir (default: this file's folder)
    train = "train.tsv"
    dev = "dev.tsv"
    test = "test.tsv"

    [columns]                  # tsv only: column numbers, 0-based
    sentences = [0]
    label = 1                  # or: score = 1
    header = false

Every problem is an :class:`InputError` naming the TOML file (and line for syntax errors).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

from estratos.errors import InputError, TaskError
from estratos.protocols import get_protocol
from estratos.tasks.formats import DATA_FORMATS
from estratos.tasks.suites.common import CLASSIFIER_KEYS
from estratos.tasks.types import COMBINER_SLOTS, TaskSpec
from estratos.vocab import COMBINERS, METRIC_INFO

REQUIRED = ("name", "group", "format", "combiner", "protocol", "files")
OPTIONAL = ("suite", "language", "metric", "labels", "extra_metrics", "score_range",
            "data_dir", "description", "columns", "classifier")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_LINE = re.compile(r"line (\d+)")


def _fail(message: str, path: Path, line: int | None = None) -> InputError:
    return InputError(message, path, line)


def _read_toml(path: Path) -> Dict[str, Any]:
    if not path.is_file():
        raise _fail("missing task file", path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise _fail("invalid UTF-8", path, line) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = _LINE.search(str(exc))
        raise _fail(f"invalid TOML: {exc}", path, int(match.group(1)) if match else None) \
            from None


def _tsv_files(doc: Dict[str, Any], combiner: str, scores: bool, path: Path) -> Dict[str, Any]:
    columns = doc.get("columns")
    if not isinstance(columns, dict):
        raise _fail("format 'tsv' needs a [columns] table (sentences, label or score)", path)
    unknown = set(columns) - {"sentences", "label", "score", "header", "columns", "encoding"}
    if unknown:
        raise _fail(f"unknown keys in [columns]: {', '.join(sorted(unknown))}", path)
    sentences = columns.get("sentences")
    if not isinstance(sentences, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in sentences):
        raise _fail("columns.sentences must be a list of column numbers (0-based)", path)
    if len(sentences) != COMBINER_SLOTS[combiner]:
        raise _fail(f"combiner {combiner!r} takes {COMBINER_SLOTS[combiner]} sentences, "
                    f"columns.sentences lists {len(sentences)}", path)
    key = "score" if scores else "label"
    if key not in columns:
        raise _fail(f"columns.{key} is required for protocol "
                    f"{'with scores' if scores else 'with classes'}", path)
    target = columns[key]
    if not isinstance(target, int) or isinstance(target, bool) or target < 0:
        raise _fail(f"columns.{key} must be a column number (0-based)", path)
    files: Dict[str, Any] = {"sentences": sentences, key: target,
                             "header": bool(columns.get("header", False))}
    if "columns" in columns:
        files["columns"] = int(columns["columns"])
    if "encoding" in columns:
        files["encoding"] = str(columns["encoding"])
    return files


def load_task_file(path: os.PathLike | str) -> TaskSpec:
    """Read a custom task's TOML spec; file paths in it are relative to ``data_dir``.

    The returned spec is not registered: pass it to ``select_tasks(..., extra=[spec])`` or
    directly to ``load_task``.
    """
    path = Path(path)
    doc = _read_toml(path)
    _check_keys(doc, path)
    name, suite = doc["name"], doc.get("suite", "custom")
    fmt, combiner, protocol = doc["format"], doc["combiner"], doc["protocol"]
    scores, metric = _lookups(doc, path)
    files = _files(doc, scores, path)
    labels = _labels(doc, scores, path)
    classifier = _classifier(doc, path)
    score_range = _score_range(doc, path)
    try:
        return TaskSpec(suite=suite, name=name, group=doc["group"],
                        language=doc.get("language", "und"), format=fmt, combiner=combiner,
                        protocol=protocol, metric=metric, files=files, labels=labels,
                        classifier=classifier, description=doc.get("description", ""),
                        extra_metrics=tuple(doc.get("extra_metrics", ())),
                        score_range=score_range, source=str(path.resolve()))
    except (ValueError, TypeError, TaskError) as exc:
        raise _fail(f"invalid task spec: {exc}", path) from None


def _check_keys(doc: Dict[str, Any], path: Path) -> None:
    """Every required key present, no unknown key (a typo would otherwise be ignored), the
    string keys strings, and the name and suite usable in a task id (``suite:name``)."""
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise _fail(f"missing required keys: {', '.join(missing)}", path)
    unknown = set(doc) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        raise _fail(f"unknown keys: {', '.join(sorted(unknown))}", path)
    for key in ("name", "group", "format", "combiner", "protocol", "suite", "language",
                "metric", "data_dir", "description"):
        if key in doc and not isinstance(doc[key], str):
            raise _fail(f"{key} must be a string", path)
    for label, value in (("name", doc["name"]), ("suite", doc.get("suite", "custom"))):
        if not _NAME.match(value):
            raise _fail(f"{label} {value!r} may only hold letters, digits and _ . + -", path)


def _lookups(doc: Dict[str, Any], path: Path) -> Tuple[bool, str]:
    """The format, combiner, protocol and metric looked up in their registries (whose
    error names the closest names and the choices, here naming the file); returns whether
    the protocol scores (labels are float scores) and the metric (by default Pearson for
    scores, accuracy for classes)."""
    try:
        DATA_FORMATS.get(doc["format"])
        COMBINERS.get(doc["combiner"])
        scores = get_protocol(doc["protocol"]).scores
        metric = doc.get("metric", "pearson" if scores else "accuracy")
        METRIC_INFO.get(metric)
    except TaskError as exc:
        raise _fail(str(exc), path) from None
    return scores, metric


def _files(doc: Dict[str, Any], scores: bool, path: Path) -> Dict[str, Any]:
    """The spec's ``files`` as its data format reads them: the ``[files]`` split table
    (with the columns for ``tsv``) and the data folder, resolved against the TOML file's
    folder so the spec works from any working directory."""
    fmt = doc["format"]
    table = doc["files"]
    if not isinstance(table, dict) or not table or not all(
            isinstance(v, str) for v in table.values()):
        raise _fail("[files] must map split names to file paths", path)
    root = (path.parent / doc.get("data_dir", ".")).resolve()
    if fmt == "tsv":
        files = _tsv_files(doc, doc["combiner"], scores, path)
        files["splits"] = dict(table)
    elif fmt == "jsonl":
        files = {"splits": dict(table)}
    else:
        files = dict(table)
    files["root"] = str(root)
    return files


def _labels(doc: Dict[str, Any], scores: bool, path: Path) -> Optional[Tuple[str, ...]]:
    """``labels`` (the class order) as strings, or None (the labels found, sorted); refused
    with a protocol that scores, since scores have no classes."""
    labels = doc.get("labels")
    if labels is None:
        return None
    if scores:
        raise _fail(f"labels make no sense with protocol {doc['protocol']!r} (scores)", path)
    if not isinstance(labels, list) or not labels or not all(
            isinstance(v, (str, int)) and not isinstance(v, bool) for v in labels):
        raise _fail("labels must be a non-empty list of strings", path)
    found = tuple(str(v) for v in labels)
    if len(set(found)) != len(found):
        raise _fail("labels has duplicates", path)
    return found


def _classifier(doc: Dict[str, Any], path: Path) -> Dict[str, Any]:
    """The ``[classifier]`` overrides (empty without one), only the keys a task may set."""
    classifier = doc.get("classifier", {})
    if not isinstance(classifier, dict):
        raise _fail("[classifier] must be a table", path)
    bad = set(classifier) - set(CLASSIFIER_KEYS)
    if bad:
        raise _fail(f"unknown classifier keys: {', '.join(sorted(bad))} "
                    f"(allowed: {', '.join(CLASSIFIER_KEYS)})", path)
    return classifier


def _score_range(doc: Dict[str, Any], path: Path) -> Optional[Tuple[float, float]]:
    """``score_range`` as two floats ``(low, high)``, or None when not given."""
    score_range = doc.get("score_range")
    if score_range is None:
        return None
    if not (isinstance(score_range, list) and len(score_range) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in score_range)):
        raise _fail("score_range must be [low, high]", path)
    low, high = score_range
    return float(low), float(high)
