"""The package skeleton: version, console entry point, user-error reporting."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

import estratos
from estratos.cli import cli
from estratos.errors import InputError, OptionError
from estratos.text import normalize_sentence, sentence_key


def test_version_option():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert estratos.__version__ in result.output


def test_module_entry_point_runs(child_env):
    proc = subprocess.run([sys.executable, "-m", "estratos", "--help"], capture_output=True,
                          text=True, check=False, env=child_env())
    assert proc.returncode == 0
    assert "encode once" in proc.stdout


def test_input_error_names_file_and_line():
    err = InputError("expected 2 columns, got 3", path="data/train.txt", line=7)
    assert str(err) == "data/train.txt:7: expected 2 columns, got 3"
    assert str(InputError("empty file", path="x.txt")) == "x.txt: empty file"
    assert OptionError("bad").exit_code == 2


def test_sentence_key_is_stable_and_normalized():
    composed, decomposed = "canci\u00f3n", "cancio\u0301n"
    assert normalize_sentence(" " + decomposed + "\n") == composed
    assert sentence_key(composed) == sentence_key(decomposed + "  ")
    assert sentence_key("Hola") != sentence_key("hola")
    # pinned: changing the key function would orphan every existing cache
    assert sentence_key("Hola mundo .").hex() == __import__("hashlib").sha256(
        "Hola mundo .".encode()).hexdigest()[:32]


def test_tiny_bert_fixture_loads(tiny_bert_dir):
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = AutoModel.from_pretrained(tiny_bert_dir)
    enc = tok(["el perro come"], return_tensors="pt")
    out = model(**enc, output_hidden_states=True)
    assert len(out.hidden_states) == 3
    tokens = tok.convert_ids_to_tokens(enc["input_ids"][0])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert "[UNK]" not in tokens  # the vocabulary really was loaded
