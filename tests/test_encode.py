"""Stage one: vectors equal a direct forward pass, padding independence, inputs, bad input."""

from __future__ import annotations

import os
import random
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from estratos.cache import open_cache
from estratos.cli import cli
from estratos.encode import encode_sentences, read_sentence_file
from estratos.options import resolve_shard
from estratos.encode.models.token_batches import length_order, token_budget_batches
from estratos.encode.models.devices import autocast_dtype, compute_label
from estratos.errors import CacheError, InputError, OptionError, SettingsMismatch
from estratos.devices import PROBE_DEVICES, resolve_device

pytestmark = pytest.mark.usefixtures("hub_offline")

WORDS = ("el la los un una perro gato casa niño niña hombre mujer come corre lee escribe "
         "grande pequeño muy con sin para sobre cuando donde").split()
SPANISH = ["El perro come.", "La niña lee un libro muy grande.",
           "¿Dónde está la casa de mi abuela?", "Hola",
           "Cuando llueve, los niños corren por la calle sin paraguas y se mojan."]


@pytest.fixture(autouse=True)
def single_thread(monkeypatch):
    """One torch thread in these tests (and their subprocesses): on a shared, loaded machine
    several OpenMP threads per tiny model spin against each other and run ~50x slower."""
    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield
    torch.set_num_threads(before)


def make_sentences(n: int, seed: int = 0, max_words: int = 12) -> list:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, max_words))) + "."
            for _ in range(n)]


def direct_vectors(model_dir: Path, sentence: str, max_length: int = 512):
    """CLS and mean of every hidden state, one sentence alone (no padding), float32."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    enc = tok([sentence], return_tensors="pt", truncation=True, max_length=max_length)
    with torch.inference_mode():
        hidden = model(**enc, output_hidden_states=True).hidden_states
    cls = np.stack([h[0, 0].numpy() for h in hidden])
    mean = np.stack([h[0].mean(dim=0).numpy() for h in hidden])
    return cls, mean, enc["input_ids"].shape[1]


def read_all(path, pooling):
    with open_cache(path) as c:
        return {s: v for s, v in zip(c.sentences(), c.read(np.arange(c.n_rows), pooling))}


# -- correctness ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("float16", 2e-3)])
def test_vectors_equal_direct_forward(tiny_bert_dir, tmp_path, dtype, tol):
    sentences = make_sentences(20, seed=1) + SPANISH
    out = tmp_path / "c.h5"
    summary = encode_sentences(sentences, str(tiny_bert_dir), out, dtype=dtype, batch_tokens=200)
    assert summary.n_encoded == len(set(sentences))
    with open_cache(out) as c:
        assert c.n_states == 3 and c.dim == 32 and c.poolings == ("cls", "mean")
        for s in SPANISH + sentences[:3]:
            row = c.rows_for([s])
            cls, mean, n_tok = direct_vectors(tiny_bert_dir, s)
            np.testing.assert_allclose(c.read(row, "cls")[0], cls, atol=tol, rtol=tol)
            np.testing.assert_allclose(c.read(row, "mean")[0], mean, atol=tol, rtol=tol)
            with h5py.File(out, "r") as f:
                assert f["n_tokens"][row[0]] == n_tok


def test_minilm_vectors_equal_direct_forward(minilm_dir, tmp_path):
    out = tmp_path / "m.h5"
    encode_sentences(SPANISH, str(minilm_dir), out)
    with open_cache(out) as c:
        assert c.n_states == 7 and c.dim == 384
        assert c.attrs["revision"].startswith("sha256:")
        assert c.attrs["max_length"] == 512
        for s in SPANISH:
            cls, mean, _ = direct_vectors(minilm_dir, s)
            row = c.rows_for([s])
            np.testing.assert_allclose(c.read(row, "cls")[0], cls, atol=5e-3, rtol=2e-3)
            np.testing.assert_allclose(c.read(row, "mean")[0], mean, atol=5e-3, rtol=2e-3)


@pytest.mark.parametrize("which", ["tiny", "cased"])
def test_sentence_alone_equals_sentence_in_padded_batch(tiny_bert_dir, cased_bert_dir, tmp_path,
                                                        which):
    if which == "cased":
        tiny_bert_dir = cased_bert_dir
    target = "el perro come."
    alone, batch = tmp_path / "alone.h5", tmp_path / "batch.h5"
    encode_sentences([target], str(tiny_bert_dir), alone, dtype="float32")
    longer = make_sentences(30, seed=3, max_words=30)
    encode_sentences([target] + longer, str(tiny_bert_dir), batch, dtype="float32",
                     batch_tokens=100_000)  # one batch: target is padded to the longest
    for pooling in ("cls", "mean"):
        a, b = read_all(alone, pooling)[target], read_all(batch, pooling)[target]
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def test_duplicates_and_normalization_encode_once(tiny_bert_dir, tmp_path):
    out = tmp_path / "c.h5"
    s = encode_sentences(["canci\u00f3n", " cancio\u0301n ", "canci\u00f3n", "", "  "],
                         str(tiny_bert_dir), out)
    assert (s.n_input, s.n_unique, s.n_encoded, s.n_rows) == (3, 1, 1, 1)
    with open_cache(out) as c:
        assert c.sentences() == ["canci\u00f3n"]


def test_truncation_is_counted(tiny_bert_dir, tmp_path):
    out = tmp_path / "c.h5"
    long = " ".join(["perro"] * 40)
    s = encode_sentences([long, "gato."], str(tiny_bert_dir), out, max_length=8)
    assert s.n_truncated == 1 and s.max_length == 8
    with h5py.File(out, "r") as f:
        rows = {t: i for i, t in enumerate(f["sentences"].asstr()[:])}
        assert f["truncated"][rows[long]] and not f["truncated"][rows["gato."]]
        assert f["n_tokens"][rows[long]] == 8
    cls, mean, _ = direct_vectors(tiny_bert_dir, long, max_length=8)
    np.testing.assert_allclose(read_all(out, "mean")[long], mean, atol=2e-2, rtol=2e-3)


def test_incremental_encode_adds_only_new_rows(tiny_bert_dir, tmp_path):
    out = tmp_path / "c.h5"
    first = make_sentences(40, seed=4)
    encode_sentences(first, str(tiny_bert_dir), out)
    with h5py.File(out, "r") as f:
        old = {k: f["vectors/mean"][i] for i, k in enumerate(f["keys"][:].tolist())}
    new = make_sentences(10, seed=5, max_words=20)
    s = encode_sentences(first + new, str(tiny_bert_dir), out)
    expected_new = len(set(new) - set(first))
    assert s.n_encoded == expected_new and s.n_cached == len(set(first))
    assert s.n_rows == len(set(first) | set(new))
    with h5py.File(out, "r") as f:
        for i, k in enumerate(f["keys"][: len(old)].tolist()):
            np.testing.assert_array_equal(f["vectors/mean"][i], old[k])  # old rows untouched
        assert f.attrs["complete"] and f.attrs["n_done"] == s.n_rows
    assert not (tmp_path / "c.h5.partial").exists()
    again = encode_sentences(first, str(tiny_bert_dir), out)  # nothing new: nothing to do
    assert again.n_encoded == 0


def test_other_model_refused_when_adding(tiny_bert_dir, minilm_dir, tmp_path):
    out = tmp_path / "c.h5"
    encode_sentences(["uno."], str(tiny_bert_dir), out)
    before = out.read_bytes()
    with pytest.raises(SettingsMismatch, match="model"):
        encode_sentences(["uno.", "dos."], str(minilm_dir), out)
    with pytest.raises(SettingsMismatch, match="dtype"):
        encode_sentences(["uno.", "dos."], str(tiny_bert_dir), out, dtype="float32")
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.h5"]


def test_other_model_refused_when_resuming(tiny_bert_dir, minilm_dir, tmp_path):
    from estratos.cache.writer import CacheWriter

    out = tmp_path / "c.h5"
    encode_sentences(["uno."], str(tiny_bert_dir), out)
    CacheWriter.extend_copy(out, tmp_path / "c.h5.partial").close()  # as a killed run leaves it
    with pytest.raises(SettingsMismatch, match="model: cache has"):
        encode_sentences(["uno.", "dos."], str(minilm_dir), out)
    s = encode_sentences(["uno.", "dos."], str(tiny_bert_dir), out)
    assert s.n_rows == 2 and not (tmp_path / "c.h5.partial").exists()


# -- bad input ------------------------------------------------------------------------------
def test_empty_input_refused(tiny_bert_dir, tmp_path):
    with pytest.raises(InputError, match="no sentences"):
        encode_sentences(["", "   "], str(tiny_bert_dir), tmp_path / "c.h5")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n", encoding="utf-8")
    with pytest.raises(InputError, match="blank.txt: no sentences"):
        read_sentence_file(blank)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blank.txt"]


def test_invalid_utf8_names_the_line(tmp_path):
    bad = tmp_path / "s.txt"
    bad.write_bytes("primera\nsegunda\n".encode() + b"ter\xe7era\n")
    with pytest.raises(InputError) as err:
        read_sentence_file(bad)
    assert err.value.line == 3 and str(err.value).startswith(f"{bad}:3:")
    assert read_sentence_file_ok(tmp_path) == ["uno", "dos"]


def read_sentence_file_ok(tmp_path):
    good = tmp_path / "ok.txt"
    good.write_bytes(b"\xef\xbb\xbfuno\r\n\r\ndos\n")
    return read_sentence_file(good)


def test_unknown_model_path(tmp_path):
    with pytest.raises(OptionError, match="model"):
        encode_sentences(["uno."], str(tmp_path / "no-such-model"), tmp_path / "c.h5")
    with pytest.raises(OptionError, match="model"):
        encode_sentences(["uno."], "no-such-org/no-such-model-xyz", tmp_path / "c.h5")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content", [b"plain text, not a cache\n", None])
def test_existing_non_cache_file_is_not_overwritten(tiny_bert_dir, tmp_path, content):
    out = tmp_path / "c.h5"
    if content is None:  # an HDF5 file that is not an estratos cache
        with h5py.File(out, "w") as f:
            f["x"] = np.arange(3)
    else:
        out.write_bytes(content)
    before = out.read_bytes()
    with pytest.raises(CacheError, match="not an estratos cache"):
        encode_sentences(["uno."], str(tiny_bert_dir), out)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.h5"]


def test_non_cache_partial_is_not_overwritten(tiny_bert_dir, tmp_path):
    partial = tmp_path / "c.h5.partial"
    partial.write_text("mine", encoding="utf-8")
    with pytest.raises(CacheError, match="refusing"):
        encode_sentences(["uno."], str(tiny_bert_dir), tmp_path / "c.h5")
    assert partial.read_text(encoding="utf-8") == "mine"


@pytest.mark.parametrize("bad", ["3/2", "a/b", "1", "-1/2", "0/0", "1/2/3"])
def test_invalid_shard_refused(bad):
    with pytest.raises(OptionError, match="shard"):
        resolve_shard(bad)


def test_shard_from_slurm_environment():
    env = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}
    assert resolve_shard("auto", env) == (2, 4)
    assert resolve_shard("auto", {}) is None
    assert resolve_shard("1/3", env) == (1, 3)
    with pytest.raises(OptionError, match="SLURM_ARRAY_TASK_COUNT"):
        resolve_shard("auto", {"SLURM_ARRAY_TASK_ID": "0"})
    with pytest.raises(OptionError, match="0 <= I < N"):
        resolve_shard("auto", {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "4"})


def test_bad_options_refused(tiny_bert_dir, tmp_path):
    with pytest.raises(OptionError, match="dtype"):
        encode_sentences(["a"], str(tiny_bert_dir), tmp_path / "c.h5", dtype="int8")
    with pytest.raises(OptionError, match="batch_tokens"):
        encode_sentences(["a"], str(tiny_bert_dir), tmp_path / "c.h5", batch_tokens=0)
    with pytest.raises(OptionError, match="max_length"):
        encode_sentences(["a"], str(tiny_bert_dir), tmp_path / "c.h5", max_length=10_000)
    with pytest.raises(OptionError, match="out"):
        encode_sentences(["a"], str(tiny_bert_dir), tmp_path / "nodir" / "c.h5")
    with pytest.raises(OptionError, match="pooling"):
        encode_sentences(["a"], str(tiny_bert_dir), tmp_path / "c.h5", poolings=("max",))
    assert list(tmp_path.iterdir()) == []


# -- command line ---------------------------------------------------------------------------
def test_cli_encode_and_bad_inputs(tiny_bert_dir, cased_bert_dir, tmp_path):
    runner = CliRunner()
    sents = tmp_path / "s.txt"
    sents.write_text("uno dos.\ntres.\nuno dos.\n", encoding="utf-8")
    out = tmp_path / "c.h5"
    ok = runner.invoke(cli, ["encode", "--model", str(tiny_bert_dir), "--out", str(out),
                             "--sentences", str(sents), "--dtype", "float32", "--no-progress"])
    assert ok.exit_code == 0, ok.output
    assert "2 unique" in ok.output and "2 encoded" in ok.output
    with open_cache(out, expect={"dtype": "float32"}) as c:
        assert c.n_rows == 2
    relative = os.path.relpath(tiny_bert_dir)
    with open_cache(out, expect={"model": relative}) as c:  # a local folder, however written
        assert c.attrs["model"] == str(Path(tiny_bert_dir).resolve())

    bad_utf8 = tmp_path / "bad.txt"
    bad_utf8.write_bytes(b"ok\n\xff\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    other = tmp_path / "notes.h5"
    other.write_text("notes", encoding="utf-8")
    cases = [
        (["--model", str(tiny_bert_dir), "--out", str(tmp_path / "x.h5"), "--sentences", str(bad_utf8)],
         f"{bad_utf8}:2:", 1),
        (["--model", str(tiny_bert_dir), "--out", str(tmp_path / "x.h5"), "--sentences", str(empty)],
         "no sentences", 1),
        (["--model", str(tmp_path / "nope"), "--out", str(tmp_path / "x.h5"), "--sentences", str(sents)],
         "--model", 2),
        (["--model", str(tiny_bert_dir), "--out", str(other), "--sentences", str(sents)],
         "not an estratos cache", 1),
        (["--model", str(tiny_bert_dir), "--out", str(tmp_path / "x.h5"), "--sentences", str(sents),
          "--shard", "2/2"], "--shard", 2),
        (["--model", str(tiny_bert_dir), "--out", str(tmp_path / "x.h5")], "--sentences", 2),
        (["--model", str(tiny_bert_dir), "--out", str(tmp_path / "x.h5"), "--sentences", str(sents),
          "--tasks", "x"], "exactly one", 2),
        (["--model", str(cased_bert_dir), "--out", str(out), "--sentences", str(sents),
          "--dtype", "float32"], "model: cache has", 1),
    ]
    for args, message, code in cases:
        res = runner.invoke(cli, ["encode", *args])
        assert res.exit_code == code, (args, res.output)
        assert message in res.output, (args, res.output)
    assert not (tmp_path / "x.h5").exists() and not (tmp_path / "x.h5.partial").exists()
    assert other.read_text(encoding="utf-8") == "notes"
    assert sorted(p.name for p in tmp_path.glob("c.h5*")) == ["c.h5"]

    slurm = runner.invoke(cli, ["encode", "--model", str(tiny_bert_dir), "--out", str(out),
                                "--sentences", str(sents)],
                          env={"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2"})
    assert slurm.exit_code == 0 and "shard 1/2" in slurm.output, slurm.output
    with open_cache(tmp_path / "c.shard-1-of-2.h5") as c:
        assert (c.attrs["shard_index"], c.attrs["shard_count"]) == (1, 2)


# -- SentEval-style batcher -----------------------------------------------------------------
BATCHER = '''
import numpy as np
CALLS = []
STATES = int(__file__.rsplit('_', 1)[1][0])

def prepare(params, samples):
    params.vocab = sorted({w for s in samples for w in s})

def batcher(params, batch):
    CALLS.append(len(batch))
    if ["ROMPE"] in batch:
        return np.zeros((len(batch) + 1, 4))
    out = np.zeros((len(batch), STATES, 4), dtype=np.float32)
    for i, words in enumerate(batch):
        out[i, ..., 0] = len(words)
        out[i, ..., 1] = sum(params.vocab.index(w) for w in words)
    return out[:, 0] if STATES == 1 else out

def broken(params, batch):
    return np.zeros((len(batch) + 1, 4))
'''


@pytest.mark.parametrize("states", [1, 3])
def test_senteval_batcher_encoder(tmp_path, states):
    module = tmp_path / f"mybatcher_{states}.py"
    module.write_text(BATCHER, encoding="utf-8")
    out = tmp_path / "b.h5"
    s = encode_sentences(["b a.", "c", "b a."], None, out, encoder=f"{module}:batcher")
    assert s.n_encoded == 2
    with open_cache(out) as c:
        assert c.poolings == ("encoder",) and c.n_states == states and c.dim == 4
        assert c.attrs["encoder"] == "batcher" and c.attrs["revision"].startswith("sha256:")
        v = c.read(c.rows_for(["b a.", "c"]), "encoder")
    vocab = sorted({"b", "a.", "c"})
    assert v[0, 0, 0] == 2 and v[0, 0, 1] == vocab.index("b") + vocab.index("a.")
    assert v[1, 0, 0] == 1 and v[1, -1, 1] == vocab.index("c")
    with pytest.raises(OptionError, match="returned shape"):
        encode_sentences(["x"], None, tmp_path / "c.h5", encoder=f"{module}:broken")
    assert not (tmp_path / "c.h5").exists() and not (tmp_path / "c.h5.partial").exists()
    with pytest.raises(OptionError, match="returned shape"):  # adding to a cache: it survives
        encode_sentences(["b a.", "ROMPE"], None, out, encoder=f"{module}:batcher")
    assert sorted(p.name for p in tmp_path.glob("b.h5*")) == ["b.h5"]
    with pytest.raises(OptionError, match="no function"):
        encode_sentences(["x"], None, tmp_path / "d.h5", encoder=f"{module}:nothing")
    with pytest.raises(OptionError, match="MODULE:FUNCTION"):
        encode_sentences(["x"], None, tmp_path / "d.h5", encoder="justamodule")


# -- helpers --------------------------------------------------------------------------------
def test_length_order_and_token_budget():
    lengths = [5, 9, 9, 2, 30, 1]
    keys = [bytes([i]) * 16 for i in (6, 5, 4, 3, 2, 1)]
    order = length_order(lengths, keys)
    assert list(order) == [4, 2, 1, 0, 3, 5]  # longest first, ties by key
    sorted_lengths = np.asarray(lengths)[order]
    batches = token_budget_batches(sorted_lengths, batch_tokens=20)
    assert batches[0] == (0, 1)  # 30 > budget: alone
    covered = [i for a, b in batches for i in range(a, b)]
    assert covered == list(range(len(lengths)))
    for a, b in batches[1:]:
        assert (b - a) * sorted_lengths[a] <= 20
    long = token_budget_batches([512] * 40 + [64] * 300, batch_tokens=8192)
    assert long[0] == (0, 4)  # 4 x 512^2 <= 8192 x 128: attention bounds long batches
    assert (40, 40 + 128) in long  # short ones: the token budget alone (8192 // 64)


def test_cpu_threads(monkeypatch):
    from estratos.encode.models.devices import cpu_threads, usable_cores

    assert cpu_threads(3) == 3
    assert cpu_threads() == 1  # OMP_NUM_THREADS=1 from the fixture
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert cpu_threads() == usable_cores()
    with pytest.raises(OptionError, match="threads"):
        cpu_threads(0)


def test_device_selection_cpu(monkeypatch):
    """encode and probe share one device rule (estratos.devices.resolve_device); MPS is an
    encode device only, and each refusal names --device and the values it takes."""
    assert resolve_device(None).type in ("cpu", "cuda")
    cpu = resolve_device("cpu")
    assert autocast_dtype(cpu) is None and compute_label(cpu) == "cpu/float32"
    for bad in ("tpu", "gpu", "cuda:x", "mps:1"):
        with pytest.raises(OptionError, match="device.*use auto, cpu, cuda, cuda:N, mps"):
            resolve_device(bad)
    with pytest.raises(OptionError, match="device.*use auto, cpu, cuda, cuda:N\\)"):
        resolve_device("mps", kinds=PROBE_DEVICES)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(OptionError, match="CUDA is not available"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(OptionError, match="MPS.*not available"):
        resolve_device("mps")


# -- other tokenizers and options -----------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_roberta_dir(tmp_path_factory):
    """A tiny random RoBERTa with a byte-level BPE: first token <s>, padding id 1."""
    from tokenizers import ByteLevelBPETokenizer, processors
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizerFast

    out = tmp_path_factory.mktemp("tiny-roberta")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(make_sentences(200, seed=20) + SPANISH, vocab_size=400,
                            min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe._tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok = RobertaTokenizerFast(tokenizer_object=bpe._tokenizer, model_max_length=64)
    tok.save_pretrained(out)
    torch.manual_seed(1)
    config = RobertaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=32, pad_token_id=1,
                           bos_token_id=0, eos_token_id=2, max_position_embeddings=66)
    RobertaModel(config).eval().save_pretrained(out)
    return out


def test_roberta_style_model_keeps_its_own_special_tokens(tiny_roberta_dir, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_roberta_dir)
    out = tmp_path / "r.h5"
    s = encode_sentences(SPANISH + make_sentences(20, seed=21, max_words=25),
                         str(tiny_roberta_dir), out, dtype="float32")
    assert s.max_length == 64  # 66 positions minus RoBERTa's padding offset
    with open_cache(out) as c:
        for sentence in SPANISH:
            ids = tok(sentence)["input_ids"]
            assert tok.convert_ids_to_tokens(ids)[0] == "<s>" and ids[-1] == tok.eos_token_id
            row = c.rows_for([sentence])
            cls, mean, n_tok = direct_vectors(tiny_roberta_dir, sentence)
            np.testing.assert_allclose(c.read(row, "cls")[0], cls, atol=1e-5, rtol=1e-5)
            np.testing.assert_allclose(c.read(row, "mean")[0], mean, atol=1e-5, rtol=1e-5)
            with h5py.File(out, "r") as f:
                assert f["n_tokens"][row[0]] == n_tok == len(ids)


@pytest.fixture(scope="module")
def cased_bert_dir(tiny_bert_dir, tmp_path_factory):
    """A second tiny BERT: the shared fixture's cased tokenizer with other weights (16 dims),
    i.e. another model, for the padding, case and settings-mismatch checks."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    out = tmp_path_factory.mktemp("cased-bert")
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    tok.model_max_length = 64
    tok.save_pretrained(out)
    assert tok.convert_ids_to_tokens(tok("el perro")["input_ids"])[1] == "el"
    torch.manual_seed(2)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=32,
                         max_position_embeddings=64)).eval().save_pretrained(out)
    return out


def test_case_is_kept_unless_lowercase_is_asked(cased_bert_dir, tmp_path):
    tiny_bert_dir = cased_bert_dir
    kept, lowered, plain = tmp_path / "k.h5", tmp_path / "l.h5", tmp_path / "p.h5"
    encode_sentences(["El Perro Come."], str(tiny_bert_dir), kept, dtype="float32")
    encode_sentences(["El Perro Come."], str(tiny_bert_dir), lowered, dtype="float32",
                     lowercase=True)
    encode_sentences(["el perro come."], str(tiny_bert_dir), plain, dtype="float32")
    k = read_all(kept, "mean")["El Perro Come."]
    low = read_all(lowered, "mean")["El Perro Come."]  # keyed by the text as given
    np.testing.assert_allclose(low, read_all(plain, "mean")["el perro come."], atol=1e-6)
    assert not np.allclose(k, low)
    with open_cache(lowered, expect={"lowercase": True}):
        pass
    with pytest.raises(SettingsMismatch, match="lowercase"):
        encode_sentences(["otra."], str(tiny_bert_dir), lowered, dtype="float32")


def test_cli_encode_tasks_and_verify_tasks(tiny_bert_dir, es_data_dir, tmp_path):
    runner = CliRunner()
    out = tmp_path / "t.h5"
    res = runner.invoke(cli, ["encode", "--model", str(tiny_bert_dir), "--out", str(out),
                              "--tasks", "es-senteval:STS17", "--data-dir", str(es_data_dir)])
    assert res.exit_code == 0, res.output
    with open_cache(out) as c:
        assert c.n_rows > 400
    ok = runner.invoke(cli, ["cache", "verify", str(out), "--tasks", "es-senteval:STS17",
                             "--data-dir", str(es_data_dir)])
    assert ok.exit_code == 0 and "OK" in ok.output, ok.output
    missing = runner.invoke(cli, ["cache", "verify", str(out), "--tasks", "es-senteval:STS15",
                                  "--data-dir", str(es_data_dir)])
    assert missing.exit_code == 1 and "required sentence(s) missing" in missing.output


def test_second_encoder_on_the_same_cache_is_refused(tiny_bert_dir, tmp_path, child_env):
    import subprocess
    import sys

    out = tmp_path / "c.h5"
    encode_sentences(["uno."], str(tiny_bert_dir), out)
    holder = ("import sys, time\n"
              "from estratos.cache.writer import CacheWriter\n"
              "w = CacheWriter.extend_copy(sys.argv[1], sys.argv[1] + '.partial')\n"
              "print('ready', flush=True)\n"
              "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", holder, str(out)], stdout=subprocess.PIPE,
                            text=True, env=child_env())
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(CacheError, match="in use by another process"):
            encode_sentences(["uno.", "dos."], str(tiny_bert_dir), out)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert encode_sentences(["uno.", "dos."], str(tiny_bert_dir), out).n_rows == 2
