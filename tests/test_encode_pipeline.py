"""The pipelined encoder: same cache as a plain one-batch-at-a-time loop, one
tokenization, failures in every stage end the run with their message and a resumable
``.partial``, and ``--batch-tokens auto``."""

from __future__ import annotations

import faulthandler
import random
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from estratos.cache import schema, verify_cache
from estratos.cli import cli
from estratos.encode import encode_sentences
from estratos.encode.models import tokens as tokens_module
from estratos.encode.models.token_batches import length_order, token_budget_batches
from estratos.encode.models.devices import batch_tokens_for_memory
from estratos.encode.models.hf import HFEncoder
from estratos.encode.config import EncodeConfig, parse_batch_tokens
from estratos.errors import OptionError
from estratos.text import normalize_sentence, sentence_key

WORDS = ("el la los un una perro gato casa niño niña hombre mujer come corre lee escribe "
         "grande pequeño muy con sin para sobre cuando donde ¿ ? , .").split()


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def no_hang():
    """A run that hangs (a stage waiting forever) fails the test instead of the session."""
    faulthandler.dump_traceback_later(300, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def make_sentences(n: int, seed: int, max_words: int = 30) -> list:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, max_words))) + f" {i}"
            for i in range(n)]


def plain_loop(model_dir: Path, sentences: list, *, batch_tokens: int, max_length: int,
               dtype: str):
    """The reference: the transformers tokenizer per batch, one batch at a time, pooled on
    the host in float32; the same length plan as encode (longest first, ties by key)."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    texts = list(dict.fromkeys(normalize_sentence(s) for s in sentences))
    keys = [sentence_key(t) for t in texts]
    lengths = np.array([len(ids) for ids in tok(texts, truncation=False)["input_ids"]])
    order = length_order(lengths, keys)
    rows = {"keys": [], "n_tokens": [], "truncated": [], "cls": [], "mean": []}
    for a, b in token_budget_batches(np.minimum(lengths[order], max_length), batch_tokens):
        batch = [texts[i] for i in order[a:b]]
        enc = tok(batch, truncation=True, max_length=max_length, padding=True,
                  return_tensors="pt")
        with torch.inference_mode():
            hidden = model(**enc, output_hidden_states=True).hidden_states
        mask = enc["attention_mask"].unsqueeze(-1).float()
        rows["cls"].append(np.stack([h[:, 0].numpy() for h in hidden], axis=1))
        rows["mean"].append(np.stack([((h * mask).sum(1) / mask.sum(1)).numpy()
                                      for h in hidden], axis=1))
        rows["keys"] += [keys[i] for i in order[a:b]]
        rows["n_tokens"] += enc["attention_mask"].sum(1).tolist()
        rows["truncated"] += [bool(lengths[i] > max_length) for i in order[a:b]]
    for p in ("cls", "mean"):
        rows[p] = np.concatenate(rows[p]).astype(dtype)
    return rows


def cache_rows(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return {"keys": schema.keys_as_bytes(f["keys"][:]), "n_tokens": f["n_tokens"][:].tolist(),
                "truncated": f["truncated"][:].tolist(), "cls": f["vectors/cls"][:],
                "mean": f["vectors/mean"][:]}


# -- same cache as the plain loop -----------------------------------------------------------
@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("float16", 1e-3)])
def test_pipelined_encoder_equals_plain_loop(tiny_bert_dir, tmp_path, dtype, tol):
    sentences = make_sentences(700, seed=1) + make_sentences(50, seed=1)  # duplicates too
    out = tmp_path / "c.h5"
    summary = encode_sentences(sentences, str(tiny_bert_dir), out, dtype=dtype,
                               batch_tokens=300, max_length=24, progress=False)
    want = plain_loop(tiny_bert_dir, sentences, batch_tokens=300, max_length=24, dtype=dtype)
    got = cache_rows(out)
    assert summary.n_truncated == sum(want["truncated"]) > 0
    assert got["keys"] == want["keys"]  # same rows, same order
    assert got["n_tokens"] == want["n_tokens"] and got["truncated"] == want["truncated"]
    for p in ("cls", "mean"):
        np.testing.assert_allclose(got[p].astype(np.float32), want[p].astype(np.float32),
                                   atol=tol, rtol=tol, err_msg=p)


def test_tokenized_once_and_equal_to_the_wrapper(tiny_bert_dir, monkeypatch):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    texts = make_sentences(300, seed=2, max_words=60)
    fast = tokens_module.for_tokenizer(tok, 20)
    assert isinstance(fast, tokens_module.FastTokenizer)
    a = fast(texts)
    b = tokens_module.WrapperTokenizer(tok, 20)(texts)
    assert a.ids.dtype == np.uint16
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    assert a.truncated.sum() > 0
    full = tok(texts, truncation=False)["input_ids"]
    assert a.lengths.tolist() == [len(x) for x in full]
    ids, mask = a.padded(np.array([3, 0, 7]), tok.pad_token_id)
    ref = tok([texts[3], texts[0], texts[7]], truncation=True, max_length=20, padding=True)
    np.testing.assert_array_equal(ids, ref["input_ids"])
    np.testing.assert_array_equal(mask, ref["attention_mask"])
    np.testing.assert_array_equal(a.subset([7, 3]).padded(np.array([0, 1]), 0)[0],
                                  a.padded(np.array([7, 3]), 0)[0])

    calls = []
    real = tokens_module.FastTokenizer.__call__
    monkeypatch.setattr(tokens_module.FastTokenizer, "__call__",
                        lambda self, t: calls.append(len(t)) or real(self, t))
    enc = HFEncoder(EncodeConfig.build(model=str(tiny_bert_dir)))
    enc.tokenize(texts)
    assert calls[-1] == len(texts) and sum(calls) - sum(calls[:-1]) == len(texts)


def test_wrapper_fallback_gives_the_same_cache(tiny_bert_dir, tmp_path, monkeypatch):
    sentences = make_sentences(200, seed=3)
    fast = tmp_path / "fast.h5"
    encode_sentences(sentences, str(tiny_bert_dir), fast, batch_tokens=256, progress=False)
    monkeypatch.setattr(tokens_module, "_backend_matches", lambda tok, fast: False)
    slow = tmp_path / "slow.h5"
    encode_sentences(sentences, str(tiny_bert_dir), slow, batch_tokens=256, progress=False)
    a, b = cache_rows(fast), cache_rows(slow)
    assert a["keys"] == b["keys"] and a["n_tokens"] == b["n_tokens"]
    np.testing.assert_array_equal(a["mean"], b["mean"])


# -- a failure in each stage ----------------------------------------------------------------
@pytest.fixture(scope="module")
def reference(tiny_bert_dir, tmp_path_factory):
    """Sentences for two blocks of rows, and an uninterrupted run's cache of them."""
    sentences = make_sentences(800, seed=4, max_words=12)
    ref = tmp_path_factory.mktemp("pipeline-ref") / "ref.h5"
    torch.set_num_threads(1)
    encode_sentences(sentences, str(tiny_bert_dir), ref, batch_tokens=256, progress=False)
    return sentences, ref


def fail_on(calls: int, message: str):
    """A replacement that raises ``message`` on its ``calls``-th call, else calls through."""
    count = [0]

    def wrap(real):
        def inner(*args, **kwargs):
            count[0] += 1
            if count[0] == calls:
                raise RuntimeError(message)
            return real(*args, **kwargs)
        return inner
    return wrap


@pytest.mark.parametrize("stage,target,calls", [
    ("tokenize", (HFEncoder, "tokenize"), 1),
    ("collate", (HFEncoder, "collate"), 4),
    ("forward", (HFEncoder, "forward"), 4),
    ("write", ("estratos.cache.writer.CacheWriter", "append"), 2),
])
def test_failure_in_a_stage_ends_the_run_and_keeps_a_resumable_partial(
        tiny_bert_dir, reference, tmp_path, monkeypatch, stage, target, calls):
    from estratos.cache.writer import CacheWriter

    owner = CacheWriter if target[0] == "estratos.cache.writer.CacheWriter" else target[0]
    sentences, ref = reference
    kwargs = dict(batch_tokens=256, progress=False)

    out = tmp_path / "c.h5"
    message = f"injected {stage} failure"
    monkeypatch.setattr(owner, target[1], fail_on(calls, message)(getattr(owner, target[1])))
    with pytest.raises(RuntimeError, match=message):
        encode_sentences(sentences, str(tiny_bert_dir), out, **kwargs)
    monkeypatch.undo()
    partial = tmp_path / "c.h5.partial"
    assert partial.exists() and not out.exists()
    with h5py.File(partial, "r") as f:
        kept = int(f.attrs["n_done"])
    assert kept > 0 if stage == "write" else kept >= 0  # write: its first block was flushed
    again = encode_sentences(sentences, str(tiny_bert_dir), out, **kwargs)
    assert again.n_resumed == kept and again.n_rows == len(set(sentences))
    assert verify_cache(out, sentences).ok
    assert cache_rows(out)["keys"] == cache_rows(ref)["keys"]
    np.testing.assert_array_equal(cache_rows(out)["mean"], cache_rows(ref)["mean"])
    assert sorted(p.name for p in tmp_path.glob("c.h5*")) == ["c.h5"]


def test_encoder_function_path_still_works_with_the_pipeline(tmp_path):
    module = tmp_path / "lenbatcher.py"
    module.write_text("import numpy as np\n"
                      "def batcher(params, batch):\n"
                      "    return np.array([[len(w), sum(map(len, w))] for w in batch], float)\n",
                      encoding="utf-8")
    sentences = make_sentences(1200, seed=5)
    out = tmp_path / "b.h5"
    s = encode_sentences(sentences, None, out, encoder=f"{module}:batcher", batch_tokens=500,
                         progress=False)
    assert s.n_encoded == len(set(sentences))
    with h5py.File(out, "r") as f:
        texts = f["sentences"].asstr()[:]
        v = f["vectors/encoder"][:]
        assert f.attrs["batch_tokens"] == 500
    for text, row in zip(texts, v):
        assert row[0, 0] == len(text.split()) and row[0, 1] == len("".join(text.split()))


# -- --batch-tokens auto --------------------------------------------------------------------
def test_batch_tokens_for_memory():
    minilm = SimpleNamespace(hidden_size=384, num_hidden_layers=6, intermediate_size=1536,
                             num_attention_heads=12)
    large = SimpleNamespace(hidden_size=1024, num_hidden_layers=24, intermediate_size=4096,
                            num_attention_heads=16)
    assert batch_tokens_for_memory(78 * 2**30, minilm) == 262144  # an H100: the upper bound
    assert batch_tokens_for_memory(1 * 2**30, minilm) == 16384
    assert batch_tokens_for_memory(40 * 2**30, large) == 131072
    assert batch_tokens_for_memory(100 * 2**20, large) == 8192  # never below the lower bound
    for free in (2**30, 10 * 2**30, 60 * 2**30):  # a power of two, growing with free memory
        b = batch_tokens_for_memory(free, large)
        assert b & (b - 1) == 0 and b <= batch_tokens_for_memory(2 * free, large)


def test_batch_tokens_option(tmp_path):
    assert parse_batch_tokens("auto") == "auto" and parse_batch_tokens("512") == 512
    assert parse_batch_tokens(64) == 64
    for bad in ("0", "x", -1, 0, True, "1.5"):
        with pytest.raises(OptionError, match="batch_tokens"):
            parse_batch_tokens(bad)
    src = tmp_path / "s.txt"
    src.write_text("uno\n", encoding="utf-8")
    res = CliRunner().invoke(cli, ["encode", "--model", "m", "--out", str(tmp_path / "c.h5"),
                                   "--sentences", str(src), "--batch-tokens", "lots"])
    assert res.exit_code == 2 and "--batch-tokens" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.txt"]


def test_auto_on_cpu_records_its_budget_and_a_resume_reuses_the_partials(tiny_bert_dir, tmp_path,
                                                                         monkeypatch):
    from estratos.cache.writer import CacheWriter

    sentences = make_sentences(800, seed=6, max_words=12)
    out = tmp_path / "c.h5"
    encode_sentences(sentences[:10], str(tiny_bert_dir), out, progress=False)  # default: auto
    with h5py.File(out, "r") as f:
        assert f.attrs["batch_tokens"] == 8192
    other = tmp_path / "d.h5"
    monkeypatch.setattr(CacheWriter, "append", fail_on(2, "stop here")(CacheWriter.append))
    with pytest.raises(RuntimeError, match="stop here"):
        encode_sentences(sentences, str(tiny_bert_dir), other, batch_tokens=256, progress=False)
    monkeypatch.undo()
    with h5py.File(tmp_path / "d.h5.partial", "r") as f:
        kept = int(f.attrs["n_done"])
        assert f.attrs["batch_tokens"] == 256 and kept > 0
    resumed = encode_sentences(sentences, str(tiny_bert_dir), other, batch_tokens="auto",
                               progress=False)
    assert resumed.n_resumed == kept  # same plan: the .partial's 256, not the CPU default
    with h5py.File(other, "r") as f:
        assert f.attrs["batch_tokens"] == 256
