"""What a researcher who probes decoder LLMs needs from ``encode``, on tiny random models of the
no-BOS families (GPT-2, Qwen2) and a BOS one (Llama):

- the attention sink: a decoder's first token (BOS, or the first word when the tokenizer adds
  none) is left out of ``mean`` by default, so a huge first-position state cannot dominate
  it; ``--mean-first-token`` changes that, is recorded and refused on mismatch;
- ``cls`` on a decoder is refused with the reason for tokenizers without BOS too;
- prompts: ``--prompt TEMPLATE`` and ``--chat-template`` wrap each sentence; the cache stays
  keyed by the sentence, ``last`` reads the prompt's last token, ``mean`` the sentence's own
  tokens; the template is recorded and refused on mismatch at resume, extend and merge;
- an LLM behind ``--encoder FILE:FUNC``: batches budgeted in tokens, the cache's size said and
  the free space checked once the first batch gave its shape.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from estratos.cache import open_cache, schema
from estratos.results import read_results
from test_encode_models import (attrs_of, bpe, build_model, invoke, read_all,  # noqa: F401
                                sentences, single_thread, toy_task, zoo)

PROMPT = 'esta frase : "{}" significa:'


def write_lines(path: Path, lines) -> Path:
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


def forward(folder: Path, ids) -> np.ndarray:
    """Every hidden state of one input (ids), float32: (states, T, dim)."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder).eval()
    with torch.inference_mode():
        hidden = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    return torch.stack([h[0] for h in hidden]).numpy()


@pytest.fixture(scope="module")
def sink_gpt2(bpe, tmp_path_factory):  # noqa: F811
    """A tiny GPT-2 (no BOS: the first word is position 0) whose first position's state is
    made huge, as an LLM's attention sink is: its learned position embedding 0 gets 1,000 in
    one dimension, which the residual stream carries through every layer but the final norm."""
    from transformers import AutoModel

    folder = build_model(bpe, "gpt2", tmp_path_factory.mktemp("sink") / "gpt2")
    model = AutoModel.from_pretrained(folder)
    with torch.no_grad():
        model.wpe.weight[0, 3] = 1000.0
    model.save_pretrained(folder)
    return folder


# -- the attention sink in mean ----------------------------------------------------------------
def test_a_huge_first_state_does_not_dominate_mean_by_default(sink_gpt2, tmp_path):
    from transformers import AutoTokenizer

    texts = sentences(30, seed=7)
    text_file = write_lines(tmp_path / "s.txt", texts)
    base = ["encode", "--model", sink_gpt2, "--sentences", text_file, "--threads", "1",
            "--dtype", "float32"]
    res = invoke(base + ["--out", tmp_path / "skip.h5"])
    assert res.exit_code == 0, res.output
    res = invoke(base + ["--out", tmp_path / "keep.h5", "--mean-first-token", "keep"])
    assert res.exit_code == 0, res.output
    assert attrs_of(tmp_path / "skip.h5")["mean_first_token"] == "skip"
    assert attrs_of(tmp_path / "keep.h5")["mean_first_token"] == "keep"
    skip, keep = read_all(tmp_path / "skip.h5", "mean"), read_all(tmp_path / "keep.h5", "mean")
    tok = AutoTokenizer.from_pretrained(sink_gpt2)
    for text in texts:
        ids = tok(text)["input_ids"]
        assert len(ids) > 1
        hidden = forward(sink_gpt2, ids)
        assert np.abs(hidden[:-1, 0, 3]).min() > 900  # the sink, at every state but the last
        # the default leaves the sink out: no value near it, and exactly the other tokens' mean
        assert np.abs(skip[text]).max() < 50
        np.testing.assert_allclose(skip[text], hidden[:, 1:].mean(axis=1), rtol=1e-4, atol=1e-4)
        # kept, it dominates every state before the final norm
        np.testing.assert_allclose(keep[text], hidden.mean(axis=1), rtol=1e-4, atol=1e-3)
        assert np.abs(keep[text][:-1, 3]).min() > 900 / len(ids)
    # the avg (mean over states) follows the pooling
    with open_cache(tmp_path / "skip.h5") as c:
        assert np.abs(c.read(np.arange(c.n_rows), "mean", ["avg"])).max() < 50


def test_mean_first_token_is_refused_on_mismatch_and_for_encoders(zoo, toy_task, tmp_path):  # noqa: F811
    text = toy_task / "sentences.txt"
    more = write_lines(tmp_path / "more.txt", ["una frase nueva."])
    base = ["--threads", "1", "--sentences"]
    assert invoke(["encode", "--model", zoo["qwen2"], "--out", tmp_path / "c.h5", *base,
                   text]).exit_code == 0
    res = invoke(["encode", "--model", zoo["qwen2"], "--out", tmp_path / "c.h5", *base, more,
                  "--mean-first-token", "keep"])
    assert res.exit_code == 1 and "mean_first_token" in res.output, res.output
    assert "'skip'" in res.output and "'keep'" in res.output
    assert not (tmp_path / "c.h5.partial").exists()
    # shards made with the two policies do not merge
    shard = ["encode", "--model", zoo["qwen2"], "--out", tmp_path / "s.h5", *base, text]
    assert invoke(shard + ["--shard", "0/2"]).exit_code == 0
    assert invoke(shard + ["--shard", "1/2", "--mean-first-token", "keep"]).exit_code == 0
    res = invoke(["cache", "merge", "--out", tmp_path / "m.h5", tmp_path / "s.shard-0-of-2.h5",
                  tmp_path / "s.shard-1-of-2.h5"])
    assert res.exit_code == 1 and "mean_first_token" in res.output
    assert not (tmp_path / "m.h5").exists()
    # an encoder's first token sees the whole sentence: skip is refused, keep is its default
    res = invoke(["encode", "--model", zoo["bert"], "--out", tmp_path / "b.h5", *base, text,
                  "--mean-first-token", "skip"])
    assert res.exit_code == 2 and "--mean-first-token" in res.output and "decoder" in res.output
    assert not (tmp_path / "b.h5").exists()
    res = invoke(["encode", "--model", zoo["bert"], "--out", tmp_path / "b.h5", *base, text,
                  "--mean-first-token", "keep"])
    assert res.exit_code == 0 and "mean_first_token" not in attrs_of(tmp_path / "b.h5")
    res = invoke(["encode", "--model", zoo["bert"], "--out", tmp_path / "x.h5", *base, text,
                  "--mean-first-token", "first"])
    assert res.exit_code == 2 and "--mean-first-token" in res.output


def test_caches_that_recorded_mean_skips_bos_keep_matching(zoo, toy_task, tmp_path):  # noqa: F811
    """A decoder cache written before ``mean_first_token`` recorded ``mean_skips_bos``: true
    (a BOS left out) is skip, false (no BOS, the first word kept) is keep."""
    text = toy_task / "sentences.txt"
    more = write_lines(tmp_path / "more.txt", ["una frase nueva."])
    for family, legacy in (("qwen2", False), ("llama", True)):
        cache = tmp_path / f"{family}.h5"
        base = ["encode", "--model", zoo[family], "--out", cache, "--threads", "1"]
        assert invoke(base + ["--sentences", text]).exit_code == 0
        with h5py.File(cache, "r+") as f:  # as cache format 1 recorded it
            del f.attrs["mean_first_token"]
            f.attrs["mean_skips_bos"] = legacy
            f.attrs["schema_version"] = 1
        res = invoke(base + ["--sentences", more])
        if legacy:  # the BOS was skipped: the default matches
            assert res.exit_code == 0, res.output
        else:  # the first word was kept: only keep extends it
            assert res.exit_code == 1 and "cache has 'keep', asked for 'skip'" in res.output
            res = invoke(base + ["--sentences", more, "--mean-first-token", "keep"])
            assert res.exit_code == 0, res.output
    for legacy, policy in ((True, "skip"), (False, "keep")):
        migrated = schema.migrate({"schema_version": 1, "mean_skips_bos": legacy})
        assert migrated["mean_first_token"] == policy and "mean_skips_bos" not in migrated


def test_cls_refusal_says_why_without_a_bos(zoo, toy_task, tmp_path):  # noqa: F811
    res = invoke(["encode", "--model", zoo["gpt2"], "--sentences", toy_task / "sentences.txt",
                  "--out", tmp_path / "c.h5", "--pooling", "cls"])
    assert res.exit_code == 2
    said = " ".join(res.output.split())
    assert "first word" in said and "seen only that word" in said and "BOS" in said
    assert not list(tmp_path.iterdir())


# -- prompts ----------------------------------------------------------------------------------
def sentence_span(tok, prompted: str, start: int, stop: int) -> tuple:
    """(ids, first, stop) of the tokens of ``prompted`` overlapping characters [start, stop)
    (from the transformers tokenizer's own offset mapping)."""
    enc = tok(prompted, return_offsets_mapping=True)
    special = tok.get_special_tokens_mask(enc["input_ids"], already_has_special_tokens=True)
    inside = [i for i, ((a, b), s) in enumerate(zip(enc["offset_mapping"], special))
              if b > start and a < stop and not s]
    return enc["input_ids"], inside[0], inside[-1] + 1


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_prompt_last_reads_the_prompt_mean_the_sentence(family, zoo, tmp_path):  # noqa: F811
    from transformers import AutoTokenizer

    folder = zoo[family]
    texts = sentences(10, seed=11) + ["casa."]
    res = invoke(["encode", "--model", folder, "--sentences",
                  write_lines(tmp_path / "s.txt", texts),
                  "--out", tmp_path / "c.h5", "--threads", "1", "--dtype", "float32",
                  "--prompt", PROMPT, "--batch-tokens", "64"])
    assert res.exit_code == 0, res.output
    attrs = attrs_of(tmp_path / "c.h5")
    assert attrs["prompt"] == PROMPT and attrs["prompt_kind"] == "text"
    assert attrs["mean_tokens"] == "sentence"
    with open_cache(tmp_path / "c.h5") as c:
        assert sorted(c.sentences()) == sorted(texts)  # keyed by the sentence, not the prompt
    last, mean = read_all(tmp_path / "c.h5", "last"), read_all(tmp_path / "c.h5", "mean")
    tok = AutoTokenizer.from_pretrained(folder)
    prefix = PROMPT.split("{}")[0]
    for text in texts:
        ids, a, b = sentence_span(tok, PROMPT.format(text), len(prefix), len(prefix) + len(text))
        assert a > 0 and b < len(ids)  # prompt tokens on both sides
        hidden = forward(folder, ids)
        np.testing.assert_allclose(last[text], hidden[:, -1], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(mean[text], hidden[:, a:b].mean(axis=1), rtol=1e-4, atol=1e-4)


def test_prompt_truncation_cuts_the_sentence_and_keeps_the_prompt(zoo, tmp_path):  # noqa: F811
    from transformers import AutoTokenizer

    folder = zoo["qwen2"]
    long = "el perro grande come con la niña cuando lee un libro sobre la calle muy grande."
    tok = AutoTokenizer.from_pretrained(folder)
    prefix = PROMPT.split("{}")[0]
    ids, a, b = sentence_span(tok, PROMPT.format(long), len(prefix), len(prefix) + len(long))
    limit = len(ids) - (b - a) + 5  # the prompt and 5 of the sentence's tokens
    res = invoke(["encode", "--model", folder, "--sentences",
                  write_lines(tmp_path / "s.txt", [long, "casa."]), "--out", tmp_path / "c.h5",
                  "--threads", "1", "--dtype", "float32", "--prompt", PROMPT,
                  "--max-length", limit])
    assert res.exit_code == 0, res.output
    assert f"truncated at {limit} tokens: 1 in the cache" in res.output, res.output
    keep = 5
    cut = ids[:a + keep] + ids[b:]
    hidden = forward(folder, cut)
    np.testing.assert_allclose(read_all(tmp_path / "c.h5", "last")[long], hidden[:, -1],
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(read_all(tmp_path / "c.h5", "mean")[long],
                               hidden[:, a:a + keep].mean(axis=1), rtol=1e-4, atol=1e-4)
    # a prompt that leaves no room for the sentence is refused before anything is written
    res = invoke(["encode", "--model", folder, "--sentences", tmp_path / "s.txt", "--out",
                  tmp_path / "x.h5", "--prompt", "uno dos tres cuatro cinco seis siete {}",
                  "--max-length", "4"])
    assert res.exit_code == 2 and "--prompt" in res.output and "--max-length" in res.output
    assert not list(tmp_path.glob("x.h5*"))


def test_bad_templates_are_refused_before_loading(zoo, toy_task, tmp_path):  # noqa: F811
    text = toy_task / "sentences.txt"
    for template in ("sin hueco", "{} y {}"):
        res = invoke(["encode", "--model", tmp_path / "no-such-model", "--sentences", text,
                      "--out", tmp_path / "c.h5", "--prompt", template])
        assert res.exit_code == 2 and "--prompt" in res.output and "{}" in res.output
    (tmp_path / "enc.py").write_text(
        "def batcher(params, batch):\n    return [[0.0]] * len(batch)\n")
    res = invoke(["encode", "--encoder", f"{tmp_path / 'enc.py'}:batcher", "--sentences", text,
                  "--out", tmp_path / "c.h5", "--prompt", "di {}"])
    assert res.exit_code == 2 and "--prompt" in res.output and "--model" in res.output
    res = invoke(["encode", "--model", zoo["qwen2"], "--sentences", text, "--out",
                  tmp_path / "c.h5", "--chat-template"])
    assert res.exit_code == 2 and "chat template" in res.output
    assert not list(tmp_path.glob("c.h5*"))


def test_prompt_is_refused_on_mismatch_at_resume_extend_and_merge(zoo, toy_task, tmp_path,  # noqa: F811
                                                                  monkeypatch):
    from estratos.encode import stream

    text = toy_task / "sentences.txt"
    more = write_lines(tmp_path / "more.txt", ["una frase nueva."])
    base = ["encode", "--model", zoo["gpt2"], "--threads", "1", "--batch-tokens", "64"]
    # extend: another prompt, or none, is refused; the same prompt adds the sentence
    cache = tmp_path / "c.h5"
    assert invoke(base + ["--sentences", text, "--out", cache, "--prompt", PROMPT]).exit_code == 0
    for other in (["--prompt", "di: {}"], [], ["--chat-template"]):
        res = invoke(base + ["--sentences", more, "--out", cache, *other])
        if other == ["--chat-template"]:
            assert res.exit_code == 2  # the tiny tokenizer has no chat template
            continue
        assert res.exit_code == 1 and "prompt" in res.output, res.output
        assert not (tmp_path / "c.h5.partial").exists()
    assert invoke(base + ["--sentences", more, "--out", cache, "--prompt", PROMPT]).exit_code == 0
    # resume: a run interrupted at its sixth batch keeps its .partial (each batch flushed:
    # with a queue of two, at least two were written), which only the same prompt resumes, to
    # the rows of an uninterrupted run
    reached = []

    def interrupt(name: str) -> None:
        if name == "batch":
            reached.append(name)
            if len(reached) == 6:
                raise KeyboardInterrupt

    monkeypatch.setattr(stream, "FLUSH_SECONDS", 0.0)
    monkeypatch.setattr(stream, "fault_point", interrupt)
    killed = tmp_path / "k.h5"
    res = invoke(base + ["--sentences", text, "--out", killed, "--prompt", PROMPT])
    assert res.exit_code == 130 and (tmp_path / "k.h5.partial").exists(), res.output
    monkeypatch.setattr(stream, "fault_point", lambda name: None)
    res = invoke(base + ["--sentences", text, "--out", killed, "--prompt", "di: {}"])
    assert res.exit_code == 1 and "prompt" in res.output and (tmp_path / "k.h5.partial").exists()
    res = invoke(base + ["--sentences", text, "--out", killed, "--prompt", PROMPT])
    assert res.exit_code == 0 and " 0 resumed" not in res.output, res.output
    whole = tmp_path / "w.h5"
    assert invoke(base + ["--sentences", text, "--out", whole, "--prompt", PROMPT]).exit_code == 0
    a, b = read_all(killed, "last"), read_all(whole, "last")
    assert a.keys() == b.keys() and all(np.array_equal(a[s], b[s]) for s in a)
    # merge: shards with other prompts are refused
    shard = base + ["--sentences", text, "--out", tmp_path / "s.h5"]
    assert invoke(shard + ["--shard", "0/2", "--prompt", PROMPT]).exit_code == 0
    assert invoke(shard + ["--shard", "1/2"]).exit_code == 0
    res = invoke(["cache", "merge", "--out", tmp_path / "m.h5", tmp_path / "s.shard-0-of-2.h5",
                  tmp_path / "s.shard-1-of-2.h5"])
    assert res.exit_code == 1 and "prompt" in res.output
    assert not (tmp_path / "m.h5").exists()


CHAT = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<s>assistant:{% endif %}")


def test_chat_template_wraps_a_user_turn(bpe, toy_task, tmp_path):  # noqa: F811
    from transformers import AutoTokenizer

    folder = build_model(bpe, "llama", tmp_path / "chat")
    tok = AutoTokenizer.from_pretrained(folder)
    tok.chat_template = CHAT
    tok.save_pretrained(folder)
    texts = sentences(6, seed=2)
    text_file = write_lines(tmp_path / "s.txt", texts)
    base = ["encode", "--model", folder, "--sentences", text_file, "--threads", "1",
            "--dtype", "float32", "--chat-template"]
    res = invoke(base + ["--out", tmp_path / "c.h5"])
    assert res.exit_code == 0, res.output
    attrs = attrs_of(tmp_path / "c.h5")
    assert attrs["prompt"] == "<s>user: {}</s><s>assistant:"
    assert attrs["prompt_kind"] == "chat-template"
    last = read_all(tmp_path / "c.h5", "last")
    tok = AutoTokenizer.from_pretrained(folder)
    for text in texts:
        rendered = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                           add_generation_prompt=True)
        # the template holds its own <s>: the tokenizer adds none around it
        ids = tok(rendered, add_special_tokens=False)["input_ids"]
        assert ids.count(2) == 2
        np.testing.assert_allclose(last[text], forward(folder, ids)[:, -1], rtol=1e-4, atol=1e-4)
    # with --prompt, the prompt is the user turn's text
    res = invoke(base + ["--out", tmp_path / "p.h5", "--prompt", PROMPT])
    assert res.exit_code == 0, res.output
    assert attrs_of(tmp_path / "p.h5")["prompt"] == "<s>user: " + PROMPT + "</s><s>assistant:"
    # a prompted cache probes and reports like any other (its keys are the sentences)
    res = invoke(["encode", "--model", folder, "--sentences", toy_task / "sentences.txt",
                  "--out", tmp_path / "t.h5", "--threads", "1", "--chat-template"])
    assert res.exit_code == 0, res.output
    res = invoke(["probe", "--cache", tmp_path / "t.h5", "--task-file", toy_task / "toy.toml",
                  "--out", tmp_path / "r.jsonl", "--layers", "2", "--threads", "1",
                  "--classifier", "lbfgs"])
    assert res.exit_code == 0, res.output
    assert [r.pooling for r in read_results(tmp_path / "r.jsonl")] == ["last"]


# -- --encoder FILE:FUNC: a token budget, a size estimate and a disk check ----------------------
COUNTED = '''
import numpy as np

def count_tokens(params, batch):
    return [3 * len(words) for words in batch]

def batcher(params, batch):
    with open(__file__ + ".sizes", "a") as fh:
        fh.write(f"{len(batch)}\\n")
    out = np.zeros((len(batch), 3, 4), dtype=np.float32)
    out[:, :, 0] = [[len(w)] for w in batch]
    return out
'''


@pytest.mark.parametrize("counted", [True, False])
def test_encoder_function_batches_by_tokens(counted, tmp_path):
    source = COUNTED if counted else COUNTED.replace("def count_tokens", "def _count_tokens")
    module = tmp_path / "counted.py"
    module.write_text(source, encoding="utf-8")
    texts = [f"la frase número {i}" for i in range(12)]  # 4 words each
    res = invoke(["encode", "--encoder", f"{module}:batcher", "--sentences",
                  write_lines(tmp_path / "s.txt", texts), "--out", tmp_path / "c.h5",
                  "--batch-tokens", "48"])
    assert res.exit_code == 0, res.output
    sizes = [int(x) for x in (tmp_path / "counted.py.sizes").read_text().split()]
    # the module's count (12 tokens a sentence) or 2 tokens per word (8 a sentence)
    assert sizes == ([4, 4, 4] if counted else [6, 6])
    # the size is said once the first batch gave the shape, and matches the file
    said = [line for line in res.output.splitlines() if line.startswith("expected cache size")]
    assert "unknown until" in said[0] and "12 rows x (3 states + avg) x 4 dims" in said[1]
    expected = int(said[1].split("(")[1].split(" bytes")[0].replace(",", ""))
    assert abs((tmp_path / "c.h5").stat().st_size - expected) / expected < 0.1


def test_encoder_function_checks_free_space_after_its_first_batch(tmp_path, monkeypatch):
    from collections import namedtuple
    from types import SimpleNamespace

    module = tmp_path / "counted.py"
    module.write_text(COUNTED, encoding="utf-8")
    usage = namedtuple("usage", "total used free")
    # only the size check sees a nearly full disk (creating the .partial does not)
    monkeypatch.setattr("estratos.encode.space.shutil", SimpleNamespace(
        disk_usage=lambda path: usage(10**9, 10**9 - 5000, 5000)))
    res = invoke(["encode", "--encoder", f"{module}:batcher", "--sentences",
                  write_lines(tmp_path / "s.txt", [f"frase {i}" for i in range(50)]),
                  "--out", tmp_path / "c.h5"])
    assert res.exit_code == 1, res.output
    assert "5.0 kB free, but this encode needs about" in res.output and "--states" in res.output
    assert not list(tmp_path.glob("c.h5*"))  # nothing half-written
    # a bad count_tokens is an error naming it, nothing left
    module.write_text(COUNTED.replace("[3 * len(words) for words in batch]", "[1.5] * len(batch)"),
                      encoding="utf-8")
    monkeypatch.undo()
    res = invoke(["encode", "--encoder", f"{module}:batcher", "--sentences", tmp_path / "s.txt",
                  "--out", tmp_path / "c.h5"])
    assert res.exit_code == 2 and "count_tokens" in res.output, res.output
    assert not list(tmp_path.glob("c.h5*"))


# -- seeds that cannot differ: --classifier lbfgs on a split task ------------------------------
def test_deterministic_classifier_seeds_are_said_and_shown_without_spread(zoo, toy_task,  # noqa: F811
                                                                           tmp_path, caplog):
    from estratos.probe.estimators.classifiers import seeds_cannot_differ

    assert seeds_cannot_differ("lbfgs", "split")
    assert not seeds_cannot_differ("senteval", "split")
    assert not seeds_cannot_differ("lbfgs", "kfold")  # its folds come from the seed
    kfold = tmp_path / "kfold"
    kfold.mkdir()
    (kfold / "train.tsv").write_text((toy_task / "train.tsv").read_text(encoding="utf-8")
                                     + (toy_task / "dev.tsv").read_text(encoding="utf-8"),
                                     encoding="utf-8")
    (kfold / "test.tsv").write_text((toy_task / "test.tsv").read_text(encoding="utf-8"),
                                    encoding="utf-8")
    (kfold / "k.toml").write_text(
        (toy_task / "toy.toml").read_text(encoding="utf-8").replace('"Toy"', '"ToyK"')
        .replace('protocol = "split"', 'protocol = "kfold"').replace('dev = "dev.tsv"\n', ''),
        encoding="utf-8")
    cache, results = tmp_path / "c.h5", tmp_path / "r.jsonl"
    assert invoke(["encode", "--model", zoo["llama"], "--sentences", toy_task / "sentences.txt",
                   "--out", cache, "--threads", "1"]).exit_code == 0
    with caplog.at_level("WARNING", logger="estratos"):
        res = invoke(["probe", "--cache", cache, "--task-file", toy_task / "toy.toml",
                      "--task-file", kfold / "k.toml", "--out", results, "--layers", "1",
                      "--threads", "1", "--classifier", "lbfgs", "--seeds", "1111,1,2"])
    assert res.exit_code == 0, res.output
    said = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert "--classifier lbfgs is deterministic: on custom:Toy (the split protocol" in said
    assert "custom:ToyK" not in said.split("deterministic")[1].split("protocol")[0]
    records = read_results(results)
    toy = [r.score for r in records if r.task == "custom:Toy"]
    assert len(toy) == 3 and len(set(toy)) == 1  # three repeats of one model
    res = invoke(["report", results, "--out", tmp_path / "rep", "--format", "md,csv"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    line = next(x for x in md.splitlines() if x.startswith("| SC | Toy |"))
    assert "(deterministic)" in line and "±" not in line
    line = next(x for x in md.splitlines() if x.startswith("| SC | ToyK |"))
    assert "(deterministic)" not in line
    import csv

    rows = list(csv.DictReader((tmp_path / "rep" / "datasets.csv").open(encoding="utf-8")))
    det = next(r for r in rows if r["task"] == "custom:Toy")
    assert det["std"] == "" and det["n_seeds"] == "3"  # no spread measured, not a spread of 0
    # one seed: nothing to say
    caplog.clear()
    res = invoke(["probe", "--cache", cache, "--task-file", toy_task / "toy.toml", "--out",
                  tmp_path / "one.jsonl", "--layers", "1", "--threads", "1", "--classifier",
                  "lbfgs"])
    assert res.exit_code == 0 and not [r for r in caplog.records if "deterministic" in
                                       r.getMessage()]


# -- memory: the CPU budget scales with layers x width ---------------------------------------
def test_cpu_auto_budget_scales_with_layers_and_width(bpe, tmp_path):  # noqa: F811
    import transformers as tf
    from transformers import AutoModel

    from estratos.encode.models.devices import CPU_BATCH_TOKENS, cpu_batch_tokens
    from test_encode_models import tokenizer_for

    tok = tokenizer_for(bpe, "none", "right", False)
    deep = tmp_path / "deep"
    config = tf.GPT2Config(vocab_size=len(tok), n_embd=64, n_layer=24, n_head=2, n_positions=64)
    torch.manual_seed(0)
    model = AutoModel.from_config(config)
    model.save_pretrained(deep)
    tok.save_pretrained(deep)
    weights = sum(p.numel() * 4 for p in model.parameters())
    # 25 states x 64 dims x 4 bytes a token against 5 MB of weights: a small budget
    assert cpu_batch_tokens(config, weights) == 256
    minilm = tf.BertConfig(hidden_size=384, num_hidden_layers=6, intermediate_size=1536,
                           num_attention_heads=12)
    assert cpu_batch_tokens(minilm, 22_700_000 * 4) == CPU_BATCH_TOKENS
    assert cpu_batch_tokens(tf.BertConfig(), 110_000_000 * 4) == 4096  # BERT-base
    text = write_lines(tmp_path / "s.txt", sentences(20))
    res = invoke(["encode", "--model", deep, "--sentences", text, "--out", tmp_path / "d.h5",
                  "--threads", "1", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert attrs_of(tmp_path / "d.h5")["batch_tokens"] == 256
    res = invoke(["encode", "--model", deep, "--sentences", text, "--out", tmp_path / "n.h5",
                  "--threads", "1", "--batch-tokens", "1000"])
    assert res.exit_code == 0 and attrs_of(tmp_path / "n.h5")["batch_tokens"] == 1000
