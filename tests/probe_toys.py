"""Helpers shared by the probe tests: tiny caches written with the real cache writer, and
hand-made tasks (no test functions here)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from estratos.tasks.types import SlotRefs, Split, TaskData, TaskSpec
from estratos.text import sentence_key

MODEL = "test/tiny-model"


def write_cache(path: Path, sentences: Sequence[str], cls: np.ndarray,
                mean: Optional[np.ndarray] = None, *, model: str = MODEL,
                dtype: str = "float32", complete: bool = True,
                n_tokens: Optional[Sequence[int]] = None, **settings) -> Path:
    """A cache holding ``sentences`` with vectors ``cls``/``mean`` (N, L+1, D) and token
    counts ``n_tokens`` (default 5 each); ``settings``: root attributes other than the
    defaults (e.g. ``max_length``)."""
    import h5py

    from estratos.cache import schema
    from estratos.cache.writer import CacheWriter

    mean = cls if mean is None else mean
    attrs = {"encoder": "hf", "model": model, "revision": "rev-1", "tokenizer": model,
             "max_length": 128, "lowercase": False, "dtype": dtype,
             "poolings": ("cls", "mean"), **settings}
    writer = CacheWriter.create(schema.partial_path(path), attrs)
    writer.append([sentence_key(s) for s in sentences], list(sentences),
                  list(n_tokens) if n_tokens is not None else [5] * len(sentences),
                  [False] * len(sentences),
                  {"cls": np.asarray(cls), "mean": np.asarray(mean)})
    writer.finish(path)
    if not complete:
        with h5py.File(path, "r+") as f:
            f.attrs["complete"] = False
    return path


def spec(name: str = "Toy", *, combiner: str = "single", protocol: str = "split",
         metric: str = "accuracy", classifier: Optional[Mapping] = None,
         group: str = "SC", **kw) -> TaskSpec:
    return TaskSpec(suite="toy", name=name, group=group, language="es", format="memory",
                    combiner=combiner, protocol=protocol, metric=metric,
                    classifier=dict(classifier or {}), **kw)


def single_task(task_spec: TaskSpec, sentences: Sequence[str],
                splits: Mapping[str, Tuple[Sequence[int], Sequence]],
                labels: Sequence[str]) -> TaskData:
    """A TaskData whose examples each use one sentence (index into ``sentences``)."""
    out: Dict[str, Split] = {}
    for name, (ids, y) in splits.items():
        out[name] = Split(name, (SlotRefs.single(ids),), np.asarray(y))
    return TaskData(task_spec, tuple(sentences), out, tuple(labels), task_spec.protocol)


def toy_classification(n: int = 240, n_states: int = 3, dim: int = 8, seed: int = 0,
                       informative: Sequence[int] = (1, 2)):
    """Sentences s0..s{n-1}, 2 classes, vectors informative only in ``informative`` states.

    Returns (sentences, vectors (n, n_states, dim) float32, labels (n,)).
    """
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    vec = rng.normal(size=(n, n_states, dim)).astype(np.float32)
    for s in informative:
        vec[:, s, 0] += np.where(y == 1, 2.5, -2.5)
    return toy_sentences(n), vec, y


def toy_sentences(n: int, stem: str = "frase número") -> list:
    """``n`` distinct sentences (about 1 in 256 has a key ending in a NUL byte, which the
    cache must keep)."""
    return [f"{stem} {i}" for i in range(n)]


def toy_split_task(n: int = 240, **kw):
    """A split-protocol toy task and its vectors: train 60%, dev 20%, test 20%."""
    task_spec = kw.pop("task_spec", None) or spec()
    sentences, vec, y = toy_classification(n, **kw)
    a, b = int(0.6 * n), int(0.8 * n)
    ids = np.arange(n)
    task = single_task(task_spec, sentences, {"train": (ids[:a], y[:a]),
                                              "dev": (ids[a:b], y[a:b]),
                                              "test": (ids[b:], y[b:])}, ("neg", "pos"))
    return task, sentences, vec


def toy_similarity_tasks(n: int = 300):
    """An STS-like (cosine, subsets news/wiki) and a SICK-R-like (relatedness, train/dev/test)
    task over ``n`` pairs whose gold score follows how much of ``u`` its partner ``v`` keeps.
    Returns ``(sentences, vectors (2n, 2, 6), [sts, sick])``."""
    rng = np.random.default_rng(0)
    sentences = toy_sentences(2 * n, stem="par")
    u = rng.normal(size=(n, 2, 6)).astype(np.float32)
    noise = rng.normal(size=(n, 2, 6)).astype(np.float32)
    sim = rng.uniform(0, 1, size=n)
    v = u * sim[:, None, None] + noise * (1 - sim[:, None, None])
    vec = np.concatenate([u, v]).astype(np.float32)
    gold = 1 + 4 * sim
    a, b = int(2 * n / 3), int(5 * n / 6)

    def refs(rows):
        return SlotRefs.single(rows), SlotRefs.single(rows + n)

    sts_spec = spec("STS", combiner="pair", protocol="cosine", metric="pearson", group="SS",
                    score_range=(0, 5))
    sts = TaskData(sts_spec, tuple(sentences),
                   {"news": Split("news", refs(np.arange(0, a)), gold[:a] - 1),
                    "wiki": Split("wiki", refs(np.arange(a, n)), gold[a:] - 1)},
                   (), "cosine")
    sick_spec = spec("SICKR", combiner="pair", protocol="relatedness", metric="pearson",
                     group="SS", score_range=(1, 5))
    sick = TaskData(sick_spec, tuple(sentences),
                    {"train": Split("train", refs(np.arange(0, a)), gold[:a]),
                     "dev": Split("dev", refs(np.arange(a, b)), gold[a:b]),
                     "test": Split("test", refs(np.arange(b, n)), gold[b:])},
                    (), "relatedness")
    return sentences, vec, [sts, sick]


class MemoryLoader:
    """``loader`` for run_probe: returns prepared TaskData by task id."""

    def __init__(self, tasks: Mapping[str, TaskData]) -> None:
        self.tasks = dict(tasks)

    def __call__(self, task_spec: TaskSpec, data_dirs) -> TaskData:
        return self.tasks[task_spec.id]


#: a custom task spec (``--task-file``) over train/dev/test.tsv files of label<TAB>sentence
TOY_TASK_TOML = '''
name = "{name}"
suite = "{suite}"
group = "SC"
language = "es"
format = "tsv"
combiner = "single"
protocol = "split"

[files]
train = "train.tsv"
dev = "dev.tsv"
test = "test.tsv"

[columns]
label = 0
sentences = [1]
header = false
'''


def write_toy_task(folder: Path, splits: Mapping[str, Sequence[Tuple[str, str]]], *,
                   name: str = "Toy", suite: str = "custom", file_name: str = "toy.toml") -> Path:
    """``folder/file_name``, the spec of task ``suite:name``, and its ``{split}.tsv`` files
    from ``(label, sentence)`` rows."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        (folder / f"{split}.tsv").write_text("".join(f"{y}\t{x}\n" for y, x in rows),
                                             encoding="utf-8")
    path = folder / file_name
    path.write_text(TOY_TASK_TOML.format(name=name, suite=suite), encoding="utf-8")
    return path


def write_toml_task(folder: Path, n: int, informative: Sequence[int], train: int, dev: int
                    ) -> Tuple[Path, Path]:
    """A custom split task (TOML + TSV files in ``folder``) over ``n`` toy sentences, the
    first ``train`` for training, the next ``dev`` for dev, the rest for test, and a cache
    holding their vectors. Returns (task file, cache)."""
    sentences, vec, y = toy_classification(n, informative=informative)
    names = ("neg", "pos")
    for split, rows in {"train": range(0, train), "dev": range(train, train + dev),
                        "test": range(train + dev, n)}.items():
        (folder / f"{split}.tsv").write_text(
            "".join(f"{names[y[i]]}\t{sentences[i]}\n" for i in rows), encoding="utf-8")
    (folder / "toy.toml").write_text(
        'name = "Toy"\nsuite = "custom"\ngroup = "SC"\nlanguage = "es"\nformat = "tsv"\n'
        'combiner = "single"\nprotocol = "split"\n[files]\ntrain = "train.tsv"\n'
        'dev = "dev.tsv"\ntest = "test.tsv"\n[columns]\nlabel = 0\nsentences = [1]\n'
        'header = false\n', encoding="utf-8")
    return folder / "toy.toml", write_cache(folder / "c.h5", sentences, vec)


def assert_probe_refuses(folder: Path, args: Sequence[str], message: str) -> None:
    """``estratos probe`` on a toy task file and cache in ``folder`` with ``args`` fails as
    bad input must: exit 2, one ``Error:`` line holding ``message``, no results file and no
    predictions folder."""
    from click.testing import CliRunner

    from estratos.cli import cli

    task_file, cache = write_toml_task(folder, 120, informative=(1,), train=80, dev=20)
    out = folder / "r.jsonl"
    res = CliRunner().invoke(cli, ["probe", "--cache", str(cache), "--task-file",
                                   str(task_file), "--out", str(out), "--classifier", "lbfgs",
                                   *args])
    assert res.exit_code == 2, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], res.output
    assert not out.exists() and not (folder / "r.predictions").exists()


class WorkerFailingLoader:
    """Toy tasks built in memory (picklable: it is sent to each worker with the error). In
    a worker process, not the parent, task ``fail`` raises ``error``. The parent is one of
    the processes and takes the first job itself: while loading any other task it waits
    until a worker has reached ``fail`` (``marker``), so the error is a worker's whatever
    the machine's speed."""

    def __init__(self, fail: str, error: Exception, parent: int, marker: Path) -> None:
        self.fail, self.error, self.parent, self.marker = fail, error, parent, str(marker)

    def __call__(self, task_spec: TaskSpec, data_dirs) -> TaskData:
        if os.getpid() != self.parent and task_spec.id == self.fail:
            open(self.marker, "w").close()
            raise self.error
        if os.getpid() == self.parent and task_spec.id != self.fail:
            deadline = time.monotonic() + 300
            while not os.path.exists(self.marker) and time.monotonic() < deadline:
                time.sleep(0.05)
        return toy_split_task(160, task_spec=task_spec)[0]
