"""Benchmark: what a decoder's first token (the attention sink) does to ``mean``, per layer.

    python bench/attention_sink.py --model DIR --data-dir ES_DATA [--n-train 300] [--n-dev 100]
        [--n-test 400] [--tasks TASS1,SICKEntailment] [--threads 2] [--work DIR]

Takes a fixed random subset of each task's splits (seed 1111), writes it as a custom task,
then runs the real commands: ``encode`` once per variant, ``probe --classifier lbfgs --layers
all`` on ``mean`` (and ``last``), and prints each layer's test score and the average over the
middle-to-late layers (12-28 of SmolLM2's 30) and ``avg``. Variants:

- ``keep``: ``--mean-first-token keep`` (the first token, the sink, in the mean);
- ``skip``: ``--mean-first-token skip`` (left out; the default for decoders);
- ``eos-bos``: ``--prompt '<|endoftext|>{}'``: an end-of-text token put before every sentence
  takes the sink's role, and ``mean`` averages the sentence's tokens only.

Also prints the largest absolute value of each variant's mean vectors over layers 12-28 and
the share of the mean's squared norm in its largest dimension (how much one dimension
dominates).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from estratos.cache import open_cache
from estratos.results import read_results
from estratos.tasks.datadirs import DataDirs
from estratos.tasks.loading import load_task
from estratos.tasks.registry import get_spec

VARIANTS = {"keep": ["--mean-first-token", "keep"], "skip": ["--mean-first-token", "skip"],
            "eos-bos": ["--prompt", "<|endoftext|>{}"]}
TOML = ('name = "{name}"\nsuite = "sink"\ngroup = "SC"\nlanguage = "es"\nformat = "tsv"\n'
        'combiner = "{combiner}"\nprotocol = "split"\nlabels = {labels}\n[files]\n'
        'train = "train.tsv"\ndev = "dev.tsv"\ntest = "test.tsv"\n[columns]\nlabel = 0\n'
        'sentences = {columns}\nheader = false\n')


def subset_task(task: str, data_dir: str, out: Path, sizes: dict, seed: int = 1111) -> Path:
    """A custom task holding a fixed random subset of ``task``'s splits."""
    spec = get_spec(task)
    data = load_task(spec, DataDirs.parse([data_dir]))
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    n_slots = 0
    for split, n in sizes.items():
        part = data.splits[split]
        rows = np.sort(rng.choice(len(part), size=min(n, len(part)), replace=False))
        part = part.take(rows)
        n_slots = len(part.slots)
        lines = []
        for i in range(len(part)):
            texts = [data.sentences[int(s.indices[i])] for s in part.slots]
            lines.append("\t".join([data.labels[int(part.labels[i])]] + texts) + "\n")
        (out / f"{split}.tsv").write_text("".join(lines), encoding="utf-8")
    name = spec.id.split(":")[1]
    (out / "task.toml").write_text(TOML.format(
        name=name, combiner=spec.combiner, labels=json.dumps(list(data.labels)),
        columns=json.dumps(list(range(1, n_slots + 1)))), encoding="utf-8")
    return out / "task.toml"


def run(args: list) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run([sys.executable, "-m", "estratos", *args], check=True, env=env)


def dominance(cache: Path, layers: range) -> tuple:
    """(largest |value|, mean share of the squared norm in the largest dimension) of the
    cache's ``mean`` vectors over ``layers``."""
    with open_cache(cache) as c:
        stored = list(c.states)
        vectors = c.read(np.arange(c.n_rows), "mean")
    picked = vectors[:, [stored.index(s) for s in layers if s in stored]]
    squares = picked.astype(np.float64) ** 2
    share = (squares.max(axis=2) / squares.sum(axis=2)).mean()
    return float(np.abs(picked).max()), float(share)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--tasks", default="es-senteval:TASS1,es-senteval:SICKEntailment")
    ap.add_argument("--n-train", type=int, default=300)
    ap.add_argument("--n-dev", type=int, default=100)
    ap.add_argument("--n-test", type=int, default=400)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--middle", default="12-28", help="layers averaged in the summary")
    ap.add_argument("--work", default="sink-bench")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    lo, hi = (int(x) for x in a.middle.split("-"))
    middle = range(lo, hi + 1)
    sizes = {"train": a.n_train, "dev": a.n_dev, "test": a.n_test}
    files = [subset_task(t, a.data_dir, work / t.split(":")[1], sizes) for t in a.tasks.split(",")]
    task_args = [x for f in files for x in ("--task-file", str(f))]
    table = {}
    for variant in a.variants.split(","):
        cache = work / f"{variant}.h5"
        started = time.perf_counter()
        if not cache.exists():
            run(["encode", "--model", a.model, *task_args, "--out", str(cache), "--threads",
                 a.threads, "--dtype", "float32", "--no-progress", *VARIANTS[variant]])
        took = time.perf_counter() - started
        results = work / f"{variant}.jsonl"
        for pooling in ("mean", "last"):
            run(["probe", "--cache", str(cache), *task_args, "--out", str(results), "--layers",
                 "all", "--pooling", pooling, "--classifier", "lbfgs", "--threads", a.threads,
                 "--no-progress"])
        peak, share = dominance(cache, middle)
        print(f"{variant}: encode {took:.0f} s; mean over layers {a.middle}: largest |value| "
              f"{peak:.1f}, largest dimension's share of the squared norm {share:.3f}")
        for r in read_results(results):
            table[(variant, r.pooling, r.task.split(":")[1], r.layer)] = r.score  # in %
    for task in sorted({k[2] for k in table}):
        print(f"\n{task}: test accuracy (%), layers {a.middle} averaged, avg, best layer")
        print("| variant | pooling | layers " + a.middle + " | avg | best (layer) |")
        print("|---|---|---|---|---|")
        for (variant, pooling) in sorted({k[:2] for k in table if k[2] == task}):
            rows = {k[3]: v for k, v in table.items() if k[:3] == (variant, pooling, task)}
            mid = np.mean([rows[layer] for layer in middle if layer in rows])
            ints = {layer: v for layer, v in rows.items() if isinstance(layer, int)}
            best = max(ints, key=ints.get)
            print(f"| {variant} | {pooling} | {mid:.1f} | {rows.get('avg', float('nan')):.1f} "
                  f"| {ints[best]:.1f} ({best}) |")
        print("per layer:", json.dumps({f"{k[0]}/{k[1]}/{k[3]}": round(v, 1)
                                         for k, v in sorted(table.items(), key=str)
                                         if k[2] == task}))


if __name__ == "__main__":
    main()
