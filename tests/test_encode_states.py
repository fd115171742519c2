"""Fewer hidden states when asked: ``encode --states`` and the stored avg.

A ``--states`` subset stores the same vectors as the same states of a full cache, plus the
mean over ALL states, so ``probe --layers avg`` keeps its meaning; layer numbers stay the
true hidden-state indices; resume, extend and merge refuse other ``--states``; caches written
before the avg was stored still probe as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from estratos.cache import open_cache, schema
from estratos.cache.writer import CacheWriter
from estratos.cli import cli
from estratos.text import sentence_key
from tests.test_encode import make_sentences, single_thread  # noqa: F401 (autouse)

N = 160


def invoke(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def encode(model: Path, out: Path, src: Path, *extra: str):
    return invoke("encode", "--model", model, "--out", out, "--sentences", src, "--threads", "1",
                  "--batch-tokens", "400", "--dtype", "float32", *extra)


@pytest.fixture
def corpus(tmp_path: Path):
    """Sentences, a custom task over them (random labels) and its TOML file."""
    sentences = sorted(set(make_sentences(N, seed=11)))
    src = tmp_path / "s.txt"
    src.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, len(sentences))
    cut = {"train": (0, 100), "dev": (100, 130), "test": (130, len(sentences))}
    for split, (a, b) in cut.items():
        (tmp_path / f"{split}.tsv").write_text(
            "".join(f"{'ab'[labels[i]]}\t{sentences[i]}\n" for i in range(a, b)), encoding="utf-8")
    (tmp_path / "toy.toml").write_text(
        'name = "Toy"\nsuite = "custom"\ngroup = "SC"\nlanguage = "es"\nformat = "tsv"\n'
        'combiner = "single"\nprotocol = "split"\n[files]\ntrain = "train.tsv"\n'
        'dev = "dev.tsv"\ntest = "test.tsv"\n[columns]\nlabel = 0\nsentences = [1]\n'
        'header = false\n', encoding="utf-8")
    return src, tmp_path / "toy.toml"


def probe(cache: Path, task: Path, out: Path, layers: str = "all"):
    result = invoke("probe", "--cache", cache, "--task-file", task, "--out", out, "--layers",
                    layers, "--classifier", "lbfgs", "--threads", "1")
    return result, ([json.loads(line) for line in out.read_text().splitlines()]
                    if out.exists() else [])


def test_states_subset_plus_avg_equals_the_same_rows_of_a_full_cache(tiny_bert_dir, tmp_path,
                                                                       corpus):
    src, task = corpus
    full, part = tmp_path / "full.h5", tmp_path / "part.h5"
    assert encode(tiny_bert_dir, full, src).exit_code == 0
    result = encode(tiny_bert_dir, part, src, "--states", "0,last:1")
    assert result.exit_code == 0, result.output
    with open_cache(full) as f, open_cache(part) as p:
        assert f.states == (0, 1, 2) and p.states == (0, 2) and p.n_states == 3
        assert p.has_avg and f.has_avg
        rows_f, rows_p = f.rows_for(p.sentences()), np.arange(p.n_rows)
        for pooling in ("cls", "mean"):
            np.testing.assert_array_equal(p.read(rows_p, pooling, [0, 2, "avg"]),
                                          f.read(rows_f, pooling, [0, 2, "avg"]))
            every = f.read(rows_f, pooling)
            np.testing.assert_allclose(p.read(rows_p, pooling, ["avg"])[:, 0],
                                       every.mean(axis=1), rtol=1e-5, atol=1e-6)
        with pytest.raises(IndexError, match="not stored"):
            p.read(rows_p, "cls", [1])

    # probe: "all" = the stored states plus avg, under their true indices, same numbers
    res_f, recs_f = probe(full, task, tmp_path / "full.jsonl")
    res_p, recs_p = probe(part, task, tmp_path / "part.jsonl")
    assert res_f.exit_code == 0 and res_p.exit_code == 0, res_f.output + res_p.output
    assert [r["layer"] for r in recs_p] == [0, 2, "avg"]
    assert [r["layer"] for r in recs_f] == [0, 1, 2, "avg"]
    scores = {r["layer"]: r["score"] for r in recs_f}
    assert {r["layer"]: r["score"] for r in recs_p} == {k: scores[k] for k in (0, 2, "avg")}

    res, _ = probe(part, task, tmp_path / "one.jsonl", layers="1")
    assert res.exit_code == 2 and "hidden state 1 is not in the cache" in res.output, res.output


def test_other_states_are_refused_on_resume_extend_and_merge(tiny_bert_dir, tmp_path, corpus):
    src, _ = corpus
    out = tmp_path / "c.h5"
    assert encode(tiny_bert_dir, out, src, "--states", "every:2").exit_code == 0
    with open_cache(out) as c:
        assert c.states == (0, 2)
    more = tmp_path / "more.txt"
    more.write_text(src.read_text() + "una frase nueva.\n", encoding="utf-8")
    result = encode(tiny_bert_dir, out, more)  # extend with the default (all)
    assert result.exit_code == 1 and "states" in result.output, result.output
    assert "(0, 2)" in result.output and "(0, 1, 2)" in result.output
    result = encode(tiny_bert_dir, out, more, "--states", "0,2")  # same set, other spelling
    assert result.exit_code == 0, result.output

    for i, states in enumerate(("all", "0")):
        result = encode(tiny_bert_dir, tmp_path / "m.h5", src, "--shard", f"{i}/2",
                        "--states", states)
        assert result.exit_code == 0, result.output
    result = invoke("cache", "merge", "--out", tmp_path / "merged.h5",
                    *sorted(tmp_path.glob("m.shard-*.h5")))
    assert result.exit_code == 1 and "states" in result.output, result.output

    # a .partial left by a killed run: resumed only with the same --states
    partial = schema.partial_path(tmp_path / "r.h5")
    with open_cache(out) as c:
        attrs = {k: v for k, v in c.attrs.items()
                 if k not in ("format", "schema_version", "n_done", "n_base", "complete")}
    CacheWriter.create(partial, attrs).close()
    result = encode(tiny_bert_dir, tmp_path / "r.h5", src, "--states", "last:2")
    assert result.exit_code == 1 and "states" in result.output, result.output

    # verify checks that the stored states agree with the datasets
    result = invoke("cache", "verify", out)
    assert result.exit_code == 0 and "OK" in result.output, result.output
    with h5py.File(out, "r+") as f:
        f.attrs["states"] = np.array([0, 1, 2])
    result = invoke("cache", "verify", out)
    assert result.exit_code == 1, result.output
    assert "/vectors/cls has shape" in result.output and "states [0, 1, 2]" in result.output

    result = encode(tiny_bert_dir, tmp_path / "bad.h5", src, "--states", "every:0")
    assert result.exit_code == 2 and "--states" in result.output
    result = encode(tiny_bert_dir, tmp_path / "bad.h5", src, "--states", "7")
    assert result.exit_code == 2 and "hidden states 0..2" in result.output
    assert not (tmp_path / "bad.h5").exists()


def test_a_cache_without_a_stored_avg_probes_avg_as_before(tmp_path, corpus):
    """A cache that does not store the avg (``stored_avg`` False, as version-1 caches may
    be): probe averages every state it reads."""
    _, task = corpus
    texts = [line.split("\t")[1].rstrip("\n") for split in ("train", "dev", "test")
             for line in (tmp_path / f"{split}.tsv").read_text(encoding="utf-8").splitlines(True)]
    rng = np.random.default_rng(3)
    vec = rng.normal(size=(len(texts), 3, 8)).astype(np.float32)
    old = tmp_path / "old.h5"
    writer = CacheWriter.create(schema.partial_path(old), {"dtype": "float32",
                                                           "poolings": ["cls"]})
    writer.append([sentence_key(t) for t in texts], texts, [5] * len(texts),
                  [False] * len(texts), {"cls": vec})
    writer.finish(old)
    with open_cache(old) as c:
        assert not c.has_avg and c.states == (0, 1, 2)
    res, recs = probe(old, task, tmp_path / "old.jsonl", layers="avg")
    assert res.exit_code == 0, res.output
    # the same vectors with their mean stored as the avg give the same avg score
    new = tmp_path / "new.h5"
    writer = CacheWriter.create(schema.partial_path(new), {"dtype": "float32",
                                                           "poolings": ["cls"],
                                                           "stored_avg": True})
    writer.append([sentence_key(t) for t in texts], texts, [5] * len(texts),
                  [False] * len(texts), {"cls": vec},
                  {"cls": vec.mean(axis=1, dtype=np.float64).astype(np.float32)})
    writer.finish(new)
    res2, recs2 = probe(new, task, tmp_path / "new.jsonl", layers="avg")
    assert res2.exit_code == 0, res2.output
    assert recs[0]["layer"] == recs2[0]["layer"] == "avg"
    assert recs[0]["score"] == recs2[0]["score"]
