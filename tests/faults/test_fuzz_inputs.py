"""Property-based fuzzing of every task loader and of the custom task format: malformed
files either load or fail with estratos' own error naming the file (and line); no other
exception escapes and nothing is written next to the data."""

from __future__ import annotations

import pickle
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estratos.errors import EstratosError, InputError
from estratos.tasks import DataDirs, get_spec, load_task, load_task_file

FUZZ = settings(max_examples=50, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

CELLS = st.sampled_from([
    "0", "1", "2", "4", "-1", "5.5", "1e400", "nan", "hola", "", " ", "sí", "NEUTRAL",
    "ENTAILMENT", "entailment", "neg", "pos", "tr", "va", "te", "NUM:count", "ABBR:exp ¿qué?",
    "e\u0301", "\u200b", "a\x00b", "\ufeffbom", "x" * 5000, '{"sentence": "a", "label": 1}'])
LINE = st.lists(CELLS, min_size=0, max_size=8).map("\t".join)
TEXT = st.lists(LINE, max_size=8).map(lambda rows: "\n".join(rows).encode("utf-8"))
NASTY = st.sampled_from([b"\xff\xfe\xfa", b"ok\n\x80\x81\n", b"\x00\x00\x00", b"\r\n\r\n",
                         b"a\tb\r\nc\td", b"\xef\xbb\xbf0\thola\n", b"",
                         b"cos\nsystem\n(S'echo pwned'\ntR.",  # a pickle naming a global
                         pickle.dumps([["r", ["a"], ["b"]]]), pickle.dumps({"not": "a list"}),
                         pickle.dumps([["r", [1, 2], None]]), b"0\t" + b"y" * 200_000 + b"\n"])
CONTENT = st.one_of(TEXT, NASTY, st.binary(max_size=64),
                    st.tuples(TEXT, NASTY).map(lambda t: t[0] + b"\n" + t[1]))

#: one task per loader format (and per column layout of the tsv loader)
TASKS = ["es-senteval:TASS1", "es-senteval:MC", "es-senteval:SQC", "es-senteval:NLI",
         "es-senteval:SICKEntailment", "es-senteval:SICKRelatedness", "es-senteval:STS17",
         "es-senteval:Tense", "es-discoeval:SPthesis", "es-discoeval:BSOwiki",
         "es-discoeval:DCwiki", "es-discoeval:RST"]


def _paths(value) -> list:
    """Every data file a spec names (string leaves that look like a file)."""
    if isinstance(value, str):
        return [value] if "/" in value and "." in value.rsplit("/", 1)[-1] else []
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in _paths(v)]
    if hasattr(value, "items"):
        return [p for v in value.values() for p in _paths(v)]
    return []


def _listing(root: Path) -> dict:
    return {p: p.stat().st_size for p in root.rglob("*")}


def _check_error(exc: EstratosError, root: Path) -> None:
    if isinstance(exc, InputError):
        assert exc.path is not None and str(root) in exc.path, str(exc)
    else:
        assert str(root) in str(exc), f"{type(exc).__name__} without a file: {exc}"


@pytest.mark.parametrize("task_id", TASKS)
@FUZZ
@given(data=st.data())
def test_task_loaders(task_id, data, figures):
    spec = get_spec(task_id)
    files = sorted(set(_paths(spec.files)))
    if "subsets" in spec.files:  # STS: an input and a gold file per subset
        files = [f"{spec.files['dir']}/STS.{kind}.{subset}.txt"
                 for subset in spec.files["subsets"] for kind in ("input", "gs")]
    assert files, task_id
    root = Path(tempfile.mkdtemp(prefix="fuzz-"))
    try:
        for rel in files:
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data.draw(CONTENT, label=rel))
        before = _listing(root)
        figures.add("fuzz_cases")
        try:
            task = load_task(spec, DataDirs.parse([str(root)]))
        except EstratosError as exc:
            _check_error(exc, root)
        except BaseException:
            figures.add("fuzz_escaped")
            raise
        else:
            assert all(task.sentences) and all("\x00" not in s or s for s in task.sentences)
        assert _listing(root) == before, "loading wrote or changed files"
    finally:
        shutil.rmtree(root)


TOML_LINES = st.sampled_from([
    'name = "T"', 'name = ""', "name = 3", 'suite = "custom"', 'group = "SC"', 'group = 7',
    'language = "es"', 'format = "tsv"', 'format = "jsonl"', 'format = "pickle"',
    'combiner = "single"', 'combiner = "pair"', 'combiner = "nope"', 'protocol = "split"',
    'protocol = "cosine"', 'protocol = "kfold"', 'labels = ["b", "a"]', "labels = [1, 2]",
    'labels = "x"', "score_range = [0, 5]", "score_range = [5]", 'metric = "f1"',
    'data_dir = "../.."', '[files]', 'train = "d.tsv"', 'dev = "d.tsv"', 'test = "d.tsv"',
    'test = "missing.tsv"', 'train = 4', '[columns]', 'sentences = [1]', 'sentences = [9]',
    'label = 0', 'score = 0', 'header = true', 'header = "yes"', '[classifier]',
    'max_epoch = 15', 'max_epoch = -1', 'l2_grid = "noreg"', 'l2_grid = ["x"]',
    'kfold = 1', 'nhid = "a"', "= broken", '[files', "x = 'unterminated"])
TOML = st.one_of(st.lists(TOML_LINES, max_size=14).map(lambda ls: "\n".join(ls).encode()),
                 st.binary(max_size=40), NASTY)
DATA = st.one_of(TEXT, NASTY, st.lists(st.sampled_from([
    '{"sentence": "a", "label": "x"}', '{"sentences": ["a", "b"], "score": 3}',
    '{"sentence": 5, "label": "x"}', '{"sentence": "", "label": "x"}', '{"label": []}',
    '[1, 2]', '{"sentences": [["a", "b"], "c"], "label": "y"}', "{bad json",
    '{"sentence": "a\\u0000b", "label": 1.5}']), max_size=6).map(
        lambda ls: "\n".join(ls).encode()))


@FUZZ
@given(spec_text=TOML, body=DATA)
def test_custom_task_format(spec_text, body, figures):
    root = Path(tempfile.mkdtemp(prefix="fuzz-"))
    try:
        (root / "task.toml").write_bytes(spec_text)
        (root / "d.tsv").write_bytes(body)
        before = _listing(root)
        figures.add("fuzz_cases")
        try:
            spec = load_task_file(root / "task.toml")
            task = load_task(spec, DataDirs.parse([]))
        except EstratosError as exc:
            _check_error(exc, root)
        except BaseException:
            figures.add("fuzz_escaped")
            raise
        else:
            assert all(task.sentences)
        assert _listing(root) == before
    finally:
        shutil.rmtree(root)
