"""A small probing setup for the fault tests: a hand-written cache and two custom tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from estratos.cache import schema
from estratos.cache.writer import CacheWriter
from estratos.results import read_results
from estratos.text import sentence_key

N_STATES, DIM = 4, 12
TASKS = ("Alpha", "Beta")
SEEDS = "1,2,3"
#: probe options shared by every run (reference, killed, concurrent)
PROBE_KWARGS = {"layers": "all", "seeds": SEEDS, "threads": 1}


def build(root: Path, n: int = 240) -> Tuple[Path, List[Path], List[str]]:
    """A complete cache of ``n`` sentences (class signal in states 2 and 3) and two custom
    tasks over them; returns (cache, task files, sentences)."""
    rng = np.random.default_rng(5)
    sentences = [f"frase número {i} del conjunto" for i in range(n)]
    y = rng.integers(0, 2, size=n)
    vec = rng.normal(size=(n, N_STATES, DIM)).astype(np.float32)
    vec[:, 2:, 0] += 1.5 * (2 * y[:, None] - 1)
    attrs = {"encoder": "transformers", "model": "fault/model", "revision": "r1",
             "tokenizer": "fault/tok", "max_length": 64, "lowercase": False,
             "dtype": "float16", "poolings": ("cls", "mean"), "n_states": N_STATES, "dim": DIM}
    cache = root / "cache.h5"
    writer = CacheWriter.create(schema.partial_path(cache), attrs)
    writer.append([sentence_key(s) for s in sentences], sentences, [6] * n, [False] * n,
                  {"cls": vec, "mean": vec[:, ::-1].copy()})
    writer.finish(cache)
    files = []
    for t, name in enumerate(TASKS):
        folder = root / name
        folder.mkdir()
        order = np.random.default_rng(t).permutation(n)
        parts = {"train": order[: n // 2], "dev": order[n // 2: 3 * n // 4],
                 "test": order[3 * n // 4:]}
        for split, rows in parts.items():
            (folder / f"{split}.tsv").write_text(
                "".join(f"{'sí' if y[i] else 'no'}\t{sentences[i]}\n" for i in rows),
                encoding="utf-8")
        spec = (f'name = "{name}"\nsuite = "fault"\ngroup = "SC"\nlanguage = "es"\n'
                'format = "tsv"\ncombiner = "single"\nprotocol = "split"\n'
                '[files]\ntrain = "train.tsv"\ndev = "dev.tsv"\ntest = "test.tsv"\n'
                '[columns]\nlabel = 0\nsentences = [1]\nheader = false\n'
                '')
        (folder / "task.toml").write_text(spec, encoding="utf-8")
        files.append(folder / "task.toml")
    return cache, files, sentences


def n_cells() -> int:
    return len(TASKS) * (N_STATES + 1) * len(SEEDS.split(","))


def outcome(path: Path) -> Dict[tuple, tuple]:
    """Each cell's numbers (what must not change between runs), failing on duplicates."""
    records = read_results(path, latest=False)
    keys = [r.key for r in records]
    assert len(keys) == len(set(keys)), f"{path}: duplicated cells"
    return {r.key: (r.score, r.l2, r.dev, r.test, r.epochs)
            for r in records}


def count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0
