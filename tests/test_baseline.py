"""estratos baseline: TF-IDF and the other surface baselines + logistic regression / cosine,
hand-checked."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, Sequence, Tuple

import numpy as np
import pytest
from click.testing import CliRunner
from probe_toys import write_toy_task

from estratos.cli import cli
from estratos.errors import OptionError
from estratos.options import parse_seeds
from estratos.probe import baseline
from estratos.probe.baseline import (
    BASELINE_MODEL,
    BASELINES,
    char_ngram_matrix,
    evaluate_task,
    length_matrix,
    split_matrix,
    tfidf_matrix,
    word_bigram_matrix,
    word_position_matrix,
)
from estratos.probe.command import baseline_tasks
from estratos.probe.config import BaselineConfig
from estratos.probe.grid.baselines import run_baseline
from estratos.protocols import row_cosine
from estratos.report import build_report
from estratos.results import load_results, read_results
from estratos.tasks.types import SlotRefs, Split, TaskData, TaskSpec
from estratos.vocab import SURFACE_BASELINES


def _spec(name: str, combiner: str, protocol: str, metric: str = "accuracy",
          group: str = "SC", **extra) -> TaskSpec:
    return TaskSpec(suite="tiny", name=name, group=group, language="es", format="tsv",
                    combiner=combiner, protocol=protocol, metric=metric, **extra)


def _task(spec: TaskSpec, sentences: Sequence[str],
          splits: Dict[str, Tuple[Sequence[Sequence[int]], Sequence]],
          labels: Tuple[str, ...] = (), fallback=None) -> TaskData:
    """A TaskData from (slot columns of sentence indices, labels) per split."""
    built = {}
    for name, (columns, y) in splits.items():
        dtype = np.float64 if spec.protocol in ("cosine", "relatedness") else np.int64
        built[name] = Split(name, tuple(SlotRefs.single(c) for c in columns),
                            np.asarray(y, dtype=dtype))
    return TaskData(spec, tuple(sentences), built, labels, spec.protocol, fallback)


# ------------------------------------------------------------------------------ hand-computed

STS_SENTENCES = ("el gato", "el perro", "un gato", "el gato come")


def _idf(n_docs: int, df: int) -> float:
    """scikit-learn's smoothed idf: ln((1 + n) / (1 + df)) + 1."""
    return math.log((1 + n_docs) / (1 + df)) + 1


def test_cosine_task_reproduces_a_hand_computed_tfidf_result():
    spec = _spec("STS", "pair", "cosine", metric="pearson", group="SS")
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2)]
    gold = [2.0, 3.0, 4.5, 0.5]
    data = _task(spec, STS_SENTENCES,
                 {"news": ([[a for a, _ in pairs], [b for _, b in pairs]], gold)})
    # by hand: 4 documents; df el=3, gato=3, perro=un=come=1
    common, rare = _idf(4, 3), _idf(4, 1)
    vec = {0: {"el": common, "gato": common}, 1: {"el": common, "perro": rare},
           2: {"un": rare, "gato": common}, 3: {"el": common, "gato": common, "come": rare}}

    def cos(a, b):
        dot = sum(w * vec[b].get(t, 0.0) for t, w in vec[a].items())
        return dot / math.sqrt(sum(w * w for w in vec[a].values()) *
                               sum(w * w for w in vec[b].values()))

    sims = np.array([cos(a, b) for a, b in pairs])
    assert sims[0] == pytest.approx(common ** 2 / (2 * common ** 2) ** 0.5
                                    / (common ** 2 + rare ** 2) ** 0.5)
    expected = float(np.corrcoef(sims, gold)[0, 1])
    rec = evaluate_task(data)
    assert rec.test["subsets"]["news"]["pearson"] == pytest.approx(expected, abs=1e-12)
    assert rec.test["pearson"] == pytest.approx(expected, abs=1e-12)
    assert rec.score == round(100 * expected, 2)  # scores keep 2 decimals, as probes
    # Spearman by hand: (0,1) and (0,2) tie (average rank), (1,2) share no word (cosine 0)
    assert sims[0] == pytest.approx(sims[1]) and sims[3] == 0.0 and sims[2] > sims[0]
    sim_ranks, gold_ranks = [1.5, 1.5, 3.0, 0.0], [1.0, 2.0, 3.0, 0.0]
    assert rec.test["spearman"] == pytest.approx(
        float(np.corrcoef(sim_ranks, gold_ranks)[0, 1]))
    assert rec.l2 is None and rec.dev is None


def test_pair_features_follow_the_combiner_on_sparse_vectors():
    T = tfidf_matrix(STS_SENTENCES, np.arange(4))
    split = Split("train", (SlotRefs.single([0]), SlotRefs.single([1])), np.array([0]))
    X = split_matrix(T, split, "pair").toarray()[0]
    common, rare = _idf(4, 3), _idf(4, 1)
    n0, n1 = (2 * common ** 2) ** 0.5, (common ** 2 + rare ** 2) ** 0.5
    # vocabulary order (sorted): come, el, gato, perro, un
    u = np.array([0, common / n0, common / n0, 0, 0])
    v = np.array([0, common / n1, 0, rare / n1, 0])
    assert pytest.approx(np.concatenate([np.abs(u - v), u * v])) == X


def test_tokens_are_whitespace_pieces_with_case_kept():
    T = tfidf_matrix(["Gato gato, gato"], np.arange(1))
    assert T.shape[1] == 3  # "Gato", "gato,", "gato": no lower-casing, no punctuation split
    assert baseline.whitespace_tokens(" a\tb\nc  ") == ["a", "b", "c"]


def test_rst_slots_average_their_sentences():
    T = tfidf_matrix(["a", "b"], np.arange(2))
    refs = SlotRefs.ragged([[0, 1], [1]])
    M = baseline.slot_matrix(T, refs).toarray()
    assert M[0] == pytest.approx([0.5, 0.5]) and M[1] == pytest.approx([0.0, 1.0])


def test_relatedness_uses_cosine_and_a_train_line_for_mse():
    spec = _spec("R", "pair", "relatedness", metric="pearson", group="SS")
    sents = STS_SENTENCES
    T = tfidf_matrix(sents, np.arange(4))
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (2, 3)]
    sims = row_cosine(T[[a for a, _ in pairs]], T[[b for _, b in pairs]])
    gold = list(1.0 + 4.0 * sims)  # exactly linear in the cosine
    cols = [[a for a, _ in pairs], [b for _, b in pairs]]
    data = _task(spec, sents, {"train": (cols, gold), "dev": (cols, gold),
                               "test": (cols, gold)})
    rec = evaluate_task(data)
    assert rec.test["pearson"] == pytest.approx(1.0)
    assert rec.test["mse"] == pytest.approx(0.0, abs=1e-12)
    assert rec.dev == {"pearson": pytest.approx(1.0)}
    assert rec.score == pytest.approx(100.0)


# ------------------------------------------------------------------------------ classification

POS = ["me gusta mucho", "muy bueno", "excelente película", "bueno y bonito",
       "me encanta", "gran obra", "bueno bueno", "excelente"]
NEG = ["no me gusta", "muy malo", "terrible película", "malo y feo", "lo odio",
       "pésima obra", "malo malo", "terrible"]


def _sentiment_task(protocol: str, spec_name: str = "S") -> TaskData:
    sentences = POS + NEG
    idx = list(range(len(sentences)))
    y = [1] * len(POS) + [0] * len(NEG)
    spec = _spec(spec_name, "single", protocol)
    if protocol == "split":
        # train on all, dev and test on the same sentences: a perfectly separable toy
        splits = {k: ([idx], y) for k in ("train", "dev", "test")}
    elif protocol == "kfold":
        splits = {"train": ([idx * 2], y * 2), "test": ([idx], y)}
    else:
        splits = {"all": ([idx * 3], y * 3)}
    return _task(spec, sentences, splits, labels=("neg", "pos"))


@pytest.mark.parametrize("protocol", ["split", "kfold", "inner-kfold"])
def test_logistic_regression_through_the_probe_protocols(protocol):
    rec = evaluate_task(_sentiment_task(protocol), seed=7)
    assert rec.kind == "baseline" and rec.model == BASELINE_MODEL
    assert rec.layer is None and rec.pooling is None and rec.seed == 7
    assert rec.protocol == protocol
    assert rec.l2 in (1e-5, 1e-4, 1e-3, 1e-2)
    assert rec.classifier["name"] == "tfidf"
    assert rec.score == rec.test["accuracy"]
    assert rec.score >= 90.0  # each word appears in one class only
    assert set(rec.dev) == {"accuracy"}


def test_l2_is_chosen_on_dev_first_max():
    # every L2 separates this toy perfectly, so the first of the grid wins (SentEval's rule)
    rec = evaluate_task(_sentiment_task("split"))
    assert rec.l2 == 1e-5 and rec.dev["accuracy"] == 100.0


def test_same_seed_same_numbers():
    a = evaluate_task(_sentiment_task("kfold"), seed=3)
    b = evaluate_task(_sentiment_task("kfold"), seed=3)
    for key in ("score", "l2", "dev", "test", "epochs"):
        assert getattr(a, key) == getattr(b, key)


def test_f1_for_binary_tasks_that_report_it():
    data = _sentiment_task("split")
    spec = _spec("S", "single", "split", extra_metrics=("f1",))
    data = TaskData(spec, data.sentences, data.splits, data.labels, "split")
    assert "f1" in evaluate_task(data).test


# ------------------------------------------------------------------------------ run_baseline

def _loader(tasks: Dict[str, TaskData]):
    calls = []

    def load(spec, data_dirs):
        calls.append(spec.id)
        return tasks[spec.id]

    load.calls = calls
    return load


def test_run_baseline_appends_resumes_and_feeds_the_report(tmp_path: Path):
    sts = _task(_spec("STS", "pair", "cosine", metric="pearson", group="SS"), STS_SENTENCES,
                {"news": ([[0, 0, 0, 1], [1, 2, 3, 2]], [2.0, 3.0, 4.5, 0.5])})
    cls = _sentiment_task("split", "S")
    load = _loader({"tiny:STS": sts, "tiny:S": cls})
    out = tmp_path / "baseline.jsonl"
    two_seeds = BaselineConfig.build(seeds=(1, 2))
    written = run_baseline([cls.spec, sts.spec], None, out, two_seeds, loader=load)
    assert [(r.task, r.seed) for r in written] == [
        ("tiny:S", 1), ("tiny:S", 2), ("tiny:STS", 1), ("tiny:STS", 2)]
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["schema"] == 2
    # a rerun skips every cell, loading each task once only to check its data is the same
    assert run_baseline([cls.spec, sts.spec], None, out, two_seeds, loader=load) == []
    assert load.calls == ["tiny:S", "tiny:STS"] * 2
    # --overwrite appends again; the report keeps the last and says so
    run_baseline([sts.spec], None, out, BaselineConfig.build(seeds=(1,), overwrite=True),
                 loader=load)
    loaded = load_results([out])
    assert len(loaded.records) == 4 and len(loaded.notices) == 1
    content = build_report([out], baseline=[out])
    assert content.agg.rows[0].system.model == BASELINE_MODEL
    assert set(content.calib) == {"tiny:S", "tiny:STS"}


def test_run_baseline_bad_options(tmp_path: Path):
    with pytest.raises(OptionError, match="seeds: give at least one seed"):
        run_baseline([_sentiment_task("split").spec], None, tmp_path / "o.jsonl",
                     BaselineConfig.build(seeds=()))
    with pytest.raises(OptionError, match="tasks"):
        run_baseline([], None, tmp_path / "o.jsonl", BaselineConfig.build())
    with pytest.raises(OptionError, match="tasks"):
        baseline_tasks("", tmp_path / "o.jsonl", BaselineConfig.build())
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("text, expected", [("1111", (1111,)), ("3, 1,3", (3, 1)),
                                            ([2, 1], (2, 1)), (5, (5,))])
def test_parse_seeds(text, expected):
    assert parse_seeds(text) == expected


@pytest.mark.parametrize("text", ["a", "1,-2", ",", [True]])
def test_parse_seeds_rejects(text):
    with pytest.raises(OptionError, match="seeds"):
        parse_seeds(text)


def test_cli_bad_seeds_exit_2(tmp_path: Path):
    result = CliRunner().invoke(cli, ["baseline", "--tasks", "es-senteval:STS17", "--seeds",
                                      "x", "--out", str(tmp_path / "b.jsonl")])
    assert result.exit_code == 2 and "--seeds: 'x' is not an integer seed" in result.output


# ------------------------------------------------------------------------------ real data

@pytest.mark.realdata
def test_cli_baseline_on_real_sts17(es_data_dir: Path, tmp_path: Path):
    out = tmp_path / "b.jsonl"
    result = CliRunner().invoke(cli, ["baseline", "--tasks", "es-senteval:STS17",
                                      "--data-dir", str(es_data_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    (rec,) = read_results(out)
    assert rec.task == "es-senteval:STS17" and rec.kind == "baseline"
    # whitespace TF-IDF cosine on the 250 Spanish STS17 pairs (measured once, reproducible)
    assert rec.score == pytest.approx(77.12, abs=0.01)


def test_cli_baseline_unknown_task(tmp_path: Path):
    result = CliRunner().invoke(cli, ["baseline", "--tasks", "es-senteval:NOPE", "--data-dir",
                                      str(tmp_path), "--out", str(tmp_path / "b.jsonl")])
    assert result.exit_code != 0 and "NOPE" in result.output
    assert not (tmp_path / "b.jsonl").exists()


# ------------------------------------------------------------------------------ one pipeline

def test_the_baseline_is_an_estimator_of_the_probes_cell_pipeline():
    """The baseline runs through evaluate_groups with the probes' logistic-regression grid;
    it keeps SentEval's L2 grid on a noreg task and takes only the task's kfold."""
    from estratos.probe.baseline import TfidfLogReg
    from estratos.probe.cells import classifier_record
    from estratos.probe.estimators.classifiers import LBFGSClassifier, LogisticGrid

    assert issubclass(TfidfLogReg, LogisticGrid) and issubclass(LBFGSClassifier, LogisticGrid)
    data = _sentiment_task("kfold")
    spec = _spec("S", "single", "kfold", classifier={"l2_grid": "noreg", "kfold": 4})
    data = TaskData(spec, data.sentences, data.splits, data.labels, "kfold")
    rec = evaluate_task(data, seed=5)
    assert rec.classifier["l2_grid"] == [1e-5, 1e-4, 1e-3, 1e-2]
    assert rec.l2 in (1e-5, 1e-4, 1e-3, 1e-2)
    est = TfidfLogReg()
    from estratos.probe.estimators.settings import resolve_classifier
    resolved = resolve_classifier(spec.classifier, classifier=est, task=spec.id)
    assert resolved.kfold == 4 and resolved.l2_grid == est.l2_grid
    sick = _task(_spec("R", "pair", "relatedness", metric="pearson", group="SS"),
                 STS_SENTENCES, {s: ([[0, 1], [2, 3]], [1.0, 4.0])
                                 for s in ("train", "dev", "test")})
    assert classifier_record(sick, est) == {"name": "tfidf", "method": "cosine",
                                            "tokenizer": "whitespace", "lowercase": False}


# ------------------------------------------------------------------------------ surface baselines

def test_every_named_baseline_exists_in_order():
    assert tuple(BASELINES) == SURFACE_BASELINES
    for name, b in BASELINES.items():
        assert b.estimator.name == name
        assert b.system.model == f"baseline:{name}" and b.system.revision == f"{name}-v1"


def test_length_rows_by_hand():
    # token lengths 2, 3, 1; fitted on the first two: columns [scaled, len 2, len 3]
    T = length_matrix(baseline.token_lengths(["a b", "a b c", "abc"]), np.arange(2))
    assert T.toarray() == pytest.approx(np.array([[2 / 3, 1, 0], [1, 0, 1], [1 / 3, 0, 0]]))
    assert baseline.char_lengths(["a b", "ñ"]).tolist() == [3, 1]


def test_char_ngrams_run_across_spaces():
    # "ab c": a b ' ' c | ab 'b ' ' c' | 'ab ' 'b c' | 'ab c': 10 n-grams, "b c" among them
    assert char_ngram_matrix(["ab c"], np.arange(1)).shape[1] == 10
    assert char_ngram_matrix(["ab", "AB"], np.arange(2)).shape[1] == 6  # case kept


def test_word_bigrams_and_positions_by_hand():
    T = word_bigram_matrix(["a b c", "c b a", "a"], np.arange(3))
    assert T.shape[1] == 4 and T[[2]].nnz == 0  # a b, b c, c b, b a; "a" has none
    P = word_position_matrix(["a b", "b a", "a c"], np.arange(2)).toarray()
    # columns "0 a", "0 b", "1 a", "1 b" (sorted); "1 c" was never fitted
    assert P.tolist() == [[1, 0, 0, 1], [0, 1, 1, 0], [1, 0, 0, 0]]


def test_cosine_of_length_vectors_by_hand():
    spec = _spec("STS", "pair", "cosine", metric="pearson", group="SS")
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2)]
    gold = [2.0, 3.0, 4.5, 0.5]
    data = _task(spec, STS_SENTENCES,
                 {"news": ([[a for a, _ in pairs], [b for _, b in pairs]], gold)})
    # lengths 2, 2, 2, 3: vectors [2/3, 1, 0] and [1, 0, 1]
    other = (2 / 3) / (math.sqrt(4 / 9 + 1) * math.sqrt(2))
    sims = [1.0, 1.0, other, 1.0]
    rec = evaluate_task(data, baseline="length-tokens")
    assert rec.model == "baseline:length-tokens" and rec.classifier["method"] == "cosine"
    assert rec.test["pearson"] == pytest.approx(float(np.corrcoef(sims, gold)[0, 1]))


_A = ["perro", "gato", "niño", "vaca", "pato"]
_B = ["come", "duerme", "corre", "salta", "canta"]
_FILL = [f"hoy{i}" for i in range(12)]


def _order_rows(split_fill):
    """Minimal pairs: 'A B filler' (label ab) and 'B A filler' (label ba)."""
    rows = []
    for c in split_fill:
        for a in _A:
            for b in _B:
                rows += [("ab", f"{a} {b} {c}"), ("ba", f"{b} {a} {c}")]
    return rows


def _run(tmp_path: Path, task_file: Path, names: str, out: Path):
    result = CliRunner().invoke(cli, ["baseline", "--task-file", str(task_file), "--baseline",
                                      names, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return {r.model.split(":", 1)[1]: r for r in read_results(out)}


def test_cli_every_baseline_on_a_custom_order_task(tmp_path: Path):
    """A custom word-order task of minimal pairs (same words, same lengths): the bag of
    words and both lengths sit exactly at chance, the position and bigram features read it."""
    task = write_toy_task(tmp_path / "order", {"train": _order_rows(_FILL[:8]),
                                               "dev": _order_rows(_FILL[8:10]),
                                               "test": _order_rows(_FILL[10:])})
    out = tmp_path / "b.jsonl"
    recs = _run(tmp_path, task, "all", out)
    assert set(recs) == set(SURFACE_BASELINES)
    for name, rec in recs.items():
        assert rec.kind == "baseline" and rec.classifier["name"] == name
        assert rec.revision == f"{name}-v1" and rec.layer is None and rec.pooling is None
        assert rec.chance == {"n_classes": 2, "majority": 50.0}
    scores = {name: rec.score for name, rec in recs.items()}
    assert scores["tfidf"] == scores["length-tokens"] == scores["length-chars"] == 50.0
    assert scores["word-counts"] == scores["function-words"] == 50.0
    assert scores["word-position"] == scores["word-bigrams"] == 100.0
    assert scores["first-last-word"] == 100.0  # the first word is an A or a B
    assert scores["char-ngrams"] >= 90.0
    # one results file, nine cells told apart by their identity: a rerun skips them all
    result = CliRunner().invoke(cli, ["baseline", "--task-file", str(task), "--baseline",
                                      "all", "--out", str(out)])
    assert result.exit_code == 0 and "wrote 0 baseline result(s)" in result.output


def test_cli_length_baselines(tmp_path: Path):
    """Token count decides one custom task, character count (same token count) another."""
    words = ["sol", "mar", "luz", "pan", "voz", "red"]
    rows = {"tokens": [], "chars": []}
    for a in words:
        for b in words:
            rows["tokens"] += [("short", f"{a} {b}"), ("long", f"{a} {b} {a} {b}")]
            rows["chars"] += [("short", f"{a} {b}"), ("long", f"{a}{a} {b}{b}")]
    for kind, name in (("tokens", "length-tokens"), ("chars", "length-chars")):
        data = rows[kind]
        task = write_toy_task(tmp_path / kind, {"train": data[:48], "dev": data[48:60],
                                                "test": data[60:]}, name=f"L{kind}")
        recs = _run(tmp_path, task, name, tmp_path / f"{kind}.jsonl")
        assert list(recs) == [name] and recs[name].score == 100.0


def test_cli_char_ngrams_read_unseen_words(tmp_path: Path):
    """Number marked by a suffix on stems never seen in training: whitespace TF-IDF knows
    no test word but 'el' (chance), character n-grams read the ending."""
    stems = [f"{c}{v}{d}" for c in "bcdfgklmnprst" for v in "aeiu" for d in "lnr"]
    rows = [r for s in stems for r in (("sg", f"el {s}o"), ("pl", f"el {s}os"))]
    task = write_toy_task(tmp_path / "suffix", {"train": rows[:200], "dev": rows[200:240],
                                                "test": rows[240:]})
    recs = _run(tmp_path, task, "tfidf,char-ngrams", tmp_path / "b.jsonl")
    assert recs["tfidf"].score == 50.0 and recs["char-ngrams"].score >= 95.0


def test_cli_function_words_and_word_counts_read_counts(tmp_path: Path):
    """The label is how many relative clauses a sentence has (0, 1 or 2 'que'), with the
    content words drawn at random: the function-word counts and the raw word counts read it
    exactly; first and last word do not (every sentence starts with 'El' and ends with a
    random noun)."""
    rng = np.random.default_rng(3)
    nouns = ["gato", "perro", "pan", "sol", "mar", "libro", "vaso", "coche"]
    rows = []
    for _ in range(300):
        k = int(rng.integers(0, 3))
        rel = " ".join(f"que ve el {nouns[int(rng.integers(0, 8))]}" for _ in range(k))
        rows.append((str(k), f"El niño {rel} come el {nouns[int(rng.integers(0, 8))]} ."
                     .replace("  ", " ")))
    task = write_toy_task(tmp_path / "que", {"train": rows[:200], "dev": rows[200:250],
                                             "test": rows[250:]}, name="Que")
    recs = _run(tmp_path, task, "function-words,word-counts,first-last-word",
                tmp_path / "b.jsonl")
    assert recs["function-words"].score == recs["word-counts"].score == 100.0
    assert recs["first-last-word"].score < 60.0
    assert "function word" in recs["function-words"].classifier["features"]


def test_word_counts_are_raw_counts():
    T = baseline.word_count_matrix(["que que a", "a b"], np.arange(2)).toarray()
    # columns a, b, que (sorted)
    assert T.tolist() == [[1, 0, 2], [1, 1, 0]]


@pytest.mark.parametrize("value, needle", [
    ("nope", "--baseline: unknown baseline 'nope'; choose from tfidf, word-counts, "
              "length-tokens"),
    ("tfidf,length", "--baseline: unknown baseline 'length'"),
    (",", "--baseline: give at least one baseline"),
])
def test_cli_bad_baseline_exit_2(tmp_path: Path, value: str, needle: str):
    result = CliRunner().invoke(cli, ["baseline", "--tasks", "es-senteval:STS17", "--baseline",
                                      value, "--out", str(tmp_path / "b.jsonl")])
    assert result.exit_code == 2 and needle in result.output
    assert not (tmp_path / "b.jsonl").exists()


def test_baseline_names_parse():
    from estratos.options import parse_baselines

    assert parse_baselines("all") == SURFACE_BASELINES
    assert parse_baselines("Word-Bigrams, tfidf,word-bigrams") == ("word-bigrams", "tfidf")
    with pytest.raises(OptionError, match="baseline: name one baseline"):
        baseline.get_baseline("all")


def test_cli_baseline_refuses_to_keep_cells_of_other_data(tmp_path: Path):
    from probe_toys import write_toy_task

    rows = [("pos" if i % 2 else "neg", f"frase número {i} {'buena' if i % 2 else 'mala'}")
            for i in range(120)]
    task_file = write_toy_task(tmp_path, {"train": rows[:80], "dev": rows[80:100],
                                          "test": rows[100:]})
    out = tmp_path / "b.jsonl"
    args = ["baseline", "--task-file", str(task_file), "--seeds", "1,2", "--out", str(out)]
    assert CliRunner().invoke(cli, args).exit_code == 0
    (tmp_path / "test.tsv").write_text("".join(f"neg\t{x}\n" for _, x in rows[100:]),
                                       encoding="utf-8")  # the task's data changed
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert f"{out}:1: 2 cell(s) of custom:Toy already in the results were computed on " \
           "other data" in result.output
    result = CliRunner().invoke(cli, args + ["--seeds", "1,2,3"])  # also when some are new
    assert result.exit_code == 1 and "--overwrite" in result.output, result.output
    assert CliRunner().invoke(cli, args + ["--overwrite"]).exit_code == 0
    assert CliRunner().invoke(cli, args).exit_code == 0


# ------------------------------------------------------------------------------ the grid

def _two_tasks(tmp_path: Path) -> list:
    """Two custom word-order tasks (files in folders of their own), as --task-file words."""
    words = []
    for name, fill in (("OrderA", _FILL[:6]), ("OrderB", _FILL[6:])):
        rows = _order_rows(fill)
        task = write_toy_task(tmp_path / name, {"train": rows[:150], "dev": rows[150:200],
                                                "test": rows[200:]}, name=name)
        words += ["--task-file", str(task)]
    return words


def _cells(out) -> Dict[tuple, tuple]:
    """key -> (score, dev, test, l2, epochs) of every record in ``out`` (glob patterns too)."""
    return {r.key: (r.score, r.dev, r.test, r.l2, r.epochs) for r in read_results(out)}


def test_cli_jobs_and_shards_give_the_cells_of_one_process(tmp_path: Path):
    """--jobs 2 and the two halves of --shard I/2 write exactly the cells, with exactly the
    numbers, of a run in one process; each shard writes its own file and reports its own."""
    tasks = _two_tasks(tmp_path)
    common = ["baseline", *tasks, "--baseline", "tfidf,length-tokens,word-position",
              "--seeds", "1,2", "--no-progress"]
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    result = CliRunner().invoke(cli, common + ["--out", str(one)])
    assert result.exit_code == 0, result.output
    reference = _cells(one)
    assert len(reference) == 2 * 3 * 2
    result = CliRunner().invoke(cli, common + ["--out", str(two), "--jobs", "2"])
    assert result.exit_code == 0, result.output
    assert "wrote 12 baseline result(s)" in result.output and "2 process(es)" in result.output
    assert _cells(two) == reference
    sharded = tmp_path / "s.jsonl"
    halves = []
    for i in range(2):
        result = CliRunner().invoke(cli, common + ["--out", str(sharded), "--shard", f"{i}/2"])
        assert result.exit_code == 0, result.output
        path = tmp_path / f"s.shard-{i}-of-2.jsonl"
        assert f"to {path}" in result.output
        halves.append(_cells(path))
    assert halves[0] and halves[1] and not set(halves[0]) & set(halves[1])
    assert {**halves[0], **halves[1]} == reference
    assert not sharded.exists()
    # a shard rerun finds its cells done
    result = CliRunner().invoke(cli, common + ["--out", str(sharded), "--shard", "1/2"])
    assert result.exit_code == 0 and "wrote 0 baseline result(s)" in result.output


@pytest.mark.parametrize("option, needle", [
    (["--jobs", "0"], "Error: --jobs: must be a positive integer, got 0"),
    (["--shard", "2/2"], "Error: --shard '2/2': need N >= 1 and 0 <= I < N"),
    (["--shard", "x"], "Error: --shard 'x': "),
])
def test_cli_bad_jobs_or_shard_exit_2_in_one_line(tmp_path: Path, option, needle):
    result = CliRunner().invoke(cli, ["baseline", "--tasks", "es-senteval:STS17",
                                      "--out", str(tmp_path / "b.jsonl"), *option])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith(needle), result.output
    assert not list(tmp_path.iterdir())


def test_cli_progress_lines_off_a_terminal(tmp_path: Path):
    """Off a terminal (CliRunner's stderr is no tty) a run says how far it is in lines named
    after the command; --no-progress silences them."""
    task = write_toy_task(tmp_path / "t", {"train": _order_rows(_FILL[:4]),
                                           "dev": _order_rows(_FILL[4:6]),
                                           "test": _order_rows(_FILL[6:8])})
    args = ["baseline", "--task-file", str(task), "--baseline", "tfidf,length-chars"]
    result = CliRunner().invoke(cli, args + ["--out", str(tmp_path / "a.jsonl")])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("baseline: ")]
    assert lines[0] == "baseline: 2 cell(s) in 1 unit(s) on 1 process(es)", result.output
    assert lines[-1].startswith("baseline: 2/2 cells (100%), 0:"), result.output
    quiet = CliRunner().invoke(cli, args + ["--out", str(tmp_path / "b.jsonl"),
                                            "--no-progress"])
    assert quiet.exit_code == 0 and "baseline: " not in quiet.output, quiet.output


def test_an_interrupted_run_keeps_its_cells_and_a_rerun_does_the_rest(tmp_path: Path,
                                                                      monkeypatch):
    """Ctrl-C after two cells: they are kept, the message says so, and the same run again
    writes only the others, with the numbers of a run never interrupted."""
    from estratos.errors import Interrupted

    tasks = {"tiny:S": _sentiment_task("split", "S"), "tiny:K": _sentiment_task("kfold", "K")}
    specs = [t.spec for t in tasks.values()]
    whole = tmp_path / "whole.jsonl"
    config = BaselineConfig.build(seeds=(1, 2))
    run_baseline(specs, None, whole, config, loader=_loader(tasks))
    real = baseline.evaluate_cell
    calls = []

    def evaluate_then_interrupt(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(baseline, "evaluate_cell", evaluate_then_interrupt)
    out = tmp_path / "b.jsonl"
    with pytest.raises(Interrupted, match=r"2 new cell\(s\) of this run are kept in .*, 2 "
                                          r"still to do; run the same command again"):
        run_baseline(specs, None, out, config, loader=_loader(tasks))
    assert len(read_results(out)) == 2
    monkeypatch.setattr(baseline, "evaluate_cell", real)
    rest = run_baseline(specs, None, out, config, loader=_loader(tasks))
    assert len(rest) == 2 and rest.already_done == 2
    assert _cells(out) == _cells(whole)


def test_a_baseline_run_never_imports_torch(tmp_path: Path, child_env):
    import subprocess
    import sys

    task = write_toy_task(tmp_path / "t", {"train": _order_rows(_FILL[:2]),
                                           "dev": _order_rows(_FILL[2:3]),
                                           "test": _order_rows(_FILL[3:4])})
    code = ("import sys\nfrom estratos.cli import main\n"
            f"sys.argv = ['estratos', 'baseline', '--task-file', {str(task)!r}, '--out', "
            f"{str(tmp_path / 'b.jsonl')!r}]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('TORCH', 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "TORCH False" in done.stdout, done.stdout + done.stderr
