"""Benchmark: how well the probe grid keeps ``--jobs`` processes busy.

Runs :func:`estratos.probe.run_probe` over tasks x layer specs x seeds from a MiniLM cache and
prints one line per task (cells, units, busy seconds) and a total: cells, wall seconds, the
busy-core fraction (sum of the units' busy seconds / (wall x jobs)), the ideal wall time
(max(sum of busy seconds / jobs, longest unit)) and wall / ideal, and the device.
``--compare-sequential N`` reruns the grid's first N cells with ``--jobs 1`` and prints the
largest score difference (same seed: scheduling must not change scores).

``--compare-jobs 1,2`` runs the whole grid once per ``--jobs`` value, each as a fresh
``estratos probe`` command timed from start to exit (imports included: that is what a user
waits for), and prints each wall time, the speed-up over the first and the largest score
difference (the target: ``--jobs 2`` never slower than ``--jobs 1``, and at least 1.5x
faster on one task of 16 cells on two idle cores). ``--toy-tasks N`` replaces the real data by N generated 3-class tasks
(``--toy-examples`` each, 7 hidden states x 384 dims of random vectors with a signal in the
later states, one cache), so that grids of 1, 3 and 30 tasks need no encoding:

    python bench/probe_grid.py --toy-tasks 1 --layers all --seeds 1111,1 --compare-jobs 1,2
    python bench/probe_grid.py --toy-tasks 3 --layers all --seeds 1111,1 --compare-jobs 1,2
    python bench/probe_grid.py --toy-tasks 30 --toy-examples 1000 --layers all --compare-jobs 1,2

    python bench/probe_grid.py                    # builds /tmp/estratos-bench/grid-minilm.h5 once
    python bench/probe_grid.py --layers 0,3,6,avg --seeds 1111 --jobs 2 --compare-sequential 4
    python bench/probe_grid.py --cache minilm.h5 --tasks es-senteval --layers all --seeds 1111
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TASKS = "es-senteval:TASS1,es-senteval:SQC,es-senteval:STS14"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_speed import build_cache  # noqa: E402 (the MiniLM cache builder, written once)


def cell_key(record):
    return (record.task, str(record.layer), record.pooling, record.seed)


def compare_sequential(cache, dirs, grid, n, args, tmp):
    """Rerun the grid's first ``n`` cells with one process; largest |score difference|."""
    from estratos.probe.config import ProbeConfig
    from estratos.probe.grid.runner import run_probe
    from estratos.tasks import select_tasks

    chosen = [r for r in grid if r.score is not None][:n]
    by_task = defaultdict(list)
    for r in chosen:
        by_task[r.task].append(r)
    grid_scores = {cell_key(r): r.score for r in grid}
    diffs = []
    t0 = time.perf_counter()
    for task, records in by_task.items():
        layers = ",".join(dict.fromkeys(str(r.layer) for r in records))
        seeds = sorted({r.seed for r in records})
        alone = run_probe(cache, select_tasks(task), dirs, Path(tmp) / f"seq-{len(diffs)}.jsonl",
                          ProbeConfig.build(layers=layers, seeds=seeds, classifier=args.classifier,
                                            jobs=1, device=args.device))
        diffs += [abs(r.score - grid_scores[cell_key(r)]) for r in alone
                  if r.score is not None and cell_key(r) in grid_scores]
    return len(diffs), max(diffs) if diffs else float("nan"), time.perf_counter() - t0


def build_toy(root: Path, n_tasks: int, n_examples: int, seed: int = 0):
    """``n_tasks`` custom 3-class tasks (task.toml + TSV, split train/dev/test 80/10/10) over
    one cache of random 7-state x 384-dim vectors whose class signal grows with depth."""
    import numpy as np

    from estratos.cache import schema
    from estratos.cache.writer import CacheWriter
    from estratos.text import sentence_key

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    sentences, vectors, files = [], [], []
    names = ("neg", "neu", "pos")
    for t in range(n_tasks):
        y = rng.integers(0, 3, n_examples)
        texts = [f"toy {t} sentence {i}" for i in range(n_examples)]
        centers = rng.normal(size=(3, 384))
        vec = rng.normal(size=(n_examples, 7, 384)).astype(np.float32)
        vec += (np.linspace(0.0, 0.6, 7)[None, :, None] * centers[y][:, None, :]).astype(
            np.float32)
        sentences += texts
        vectors.append(vec)
        folder = root / f"Toy{t}"
        folder.mkdir(exist_ok=True)
        cut = {"train": (0, int(0.8 * n_examples)),
               "dev": (int(0.8 * n_examples), int(0.9 * n_examples)),
               "test": (int(0.9 * n_examples), n_examples)}
        for split, (a, b) in cut.items():
            (folder / f"{split}.tsv").write_text(
                "".join(f"{names[y[i]]}\t{texts[i]}\n" for i in range(a, b)), encoding="utf-8")
        (folder / "task.toml").write_text(
            f'name = "Toy{t}"\nsuite = "toy"\ngroup = "SC"\nlanguage = "es"\nformat = "tsv"\n'
            'combiner = "single"\nprotocol = "split"\n[files]\ntrain = "train.tsv"\n'
            'dev = "dev.tsv"\ntest = "test.tsv"\n[columns]\nlabel = 0\nsentences = [1]\n'
            'header = false\n', encoding="utf-8")
        files.append(folder / "task.toml")
    vec = np.concatenate(vectors)
    cache = root / "toy.h5"
    attrs = {"encoder": "hf", "model": "bench/toy", "revision": "toy", "tokenizer": "bench/toy",
             "max_length": 128, "lowercase": False, "dtype": "float32",
             "poolings": ("cls", "mean")}
    writer = CacheWriter.create(schema.partial_path(cache), attrs)
    writer.append([sentence_key(s) for s in sentences], sentences, [5] * len(sentences),
                  [False] * len(sentences), {"cls": vec, "mean": vec})
    writer.finish(cache)
    return cache, files


def probe_command(cache, args, jobs: int, out: Path, task_files=()) -> list:
    """The ``estratos probe`` command line of this grid (what a user runs)."""
    cmd = [sys.executable, "-m", "estratos", "probe", "--cache", str(cache),
           "--layers", args.layers, "--seeds", args.seeds, "--classifier", args.classifier,
           "--device", args.device, "--jobs", str(jobs), "--out", str(out)]
    if task_files:
        for f in task_files:
            cmd += ["--task-file", str(f)]
    else:
        cmd += ["--tasks", args.tasks, "--data-dir", args.data_dir]
    return cmd


def compare_jobs(cache, args, tmp, task_files=()) -> None:
    """The same grid once per ``--jobs`` value, each as a fresh ``estratos probe`` command
    timed from start to exit (Python's start and every import included: a worker's start-up
    overlaps the parent's, and that is part of what ``--jobs`` buys or costs); prints each
    wall time, the speed-up over the first and the largest score difference."""
    from estratos.results.reader import read_results

    values = [int(v) for v in args.compare_jobs.split(",")]
    walls, scores = [], []
    for i, jobs in enumerate(values):
        out = Path(tmp) / f"run-{i}-jobs-{jobs}.jsonl"
        t0 = time.perf_counter()
        done = subprocess.run(probe_command(cache, args, jobs, out, task_files),
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"estratos probe --jobs {jobs} failed ({done.returncode}):\n"
                             f"{done.stderr[-2000:]}")
        records = read_results(out)
        walls.append(wall)
        scores.append({cell_key(r): r.score for r in records})
        summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        print(f"--jobs {jobs}: {len(records)} cells, command wall {wall:.1f} s, "
              f"{walls[0] / wall:.2f}x --jobs {values[0]} ({summary})", flush=True)
    worst = max((abs((a or 0.0) - (scores[0][k] or 0.0)) for s in scores[1:]
                 for k, a in s.items()), default=0.0)
    same = all(set(s) == set(scores[0]) for s in scores)
    print(f"largest |score diff| vs --jobs {values[0]}: {worst:.4f} points; same cells: {same}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default="/tmp/estratos-bench/grid-minilm.h5",
                    help="MiniLM cache (built from --tasks when missing)")
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "es"))
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--layers", default="0,3,6,avg")
    ap.add_argument("--seeds", default="1111")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--classifier", default="senteval")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compare-sequential", type=int, default=0, metavar="N",
                    help="rerun the first N cells with --jobs 1 and print the largest "
                         "score difference")
    ap.add_argument("--compare-jobs", default=None, metavar="A,B",
                    help="run the grid once per --jobs value; print walls and speed-ups")
    ap.add_argument("--toy-tasks", type=int, default=0, metavar="N",
                    help="N generated tasks over a random-vector cache instead of --tasks")
    ap.add_argument("--toy-examples", type=int, default=3000, metavar="N")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)

    from estratos.probe.config import ProbeConfig
    from estratos.probe.estimators.runtime import torch_runtime
    from estratos.probe.grid.runner import run_probe
    from estratos.tasks import DataDirs, select_tasks

    with torch_runtime(1):  # one-time torch imports happen here, outside the timings
        pass
    if args.toy_tasks:
        from estratos.tasks import load_task_file

        toy = Path(tempfile.mkdtemp(prefix="estratos-toy-"))
        cache, files = build_toy(toy, args.toy_tasks, args.toy_examples)
        specs = [load_task_file(f) for f in files]
        dirs = None
        args.tasks = f"{args.toy_tasks} toy task(s) of {args.toy_examples} examples"
    else:
        cache = Path(args.cache)
        if not cache.exists():
            build_cache(cache, args.tasks, args.data_dir)
        dirs = DataDirs.parse([args.data_dir])
        specs = select_tasks(args.tasks)
    if args.compare_jobs:
        print(f"cache {cache}; tasks {args.tasks}; layers {args.layers}; seeds {args.seeds}; "
              f"classifier {args.classifier}; load average {os.getloadavg()[0]:.1f}")
        with tempfile.TemporaryDirectory() as tmp:
            compare_jobs(cache, args, tmp, files if args.toy_tasks else ())
        return 0
    print(f"cache {cache}; tasks {args.tasks}; layers {args.layers}; seeds {args.seeds}; "
          f"jobs {args.jobs} (os.cpu_count() {os.cpu_count()}); classifier {args.classifier}")
    with tempfile.TemporaryDirectory() as tmp:
        run = run_probe(cache, specs, dirs, Path(tmp) / "grid.jsonl",
                        ProbeConfig.build(layers=args.layers, seeds=args.seeds,
                                          classifier=args.classifier, jobs=args.jobs,
                                          device=args.device))
        cells = defaultdict(int)
        for r in run:
            cells[r.task] += 1
        busy = defaultdict(float)
        units = defaultdict(int)
        for stat in run.units:
            busy[stat.unit.task] += stat.seconds
            units[stat.unit.task] += 1
        print(f"{'task':32} {'cells':>5} {'units':>5} {'busy s':>8}")
        for task in cells:
            print(f"{task:32} {cells[task]:5d} {units[task]:5d} {busy[task]:8.1f}")
        total_busy = sum(busy.values())
        longest = max((s.seconds for s in run.units), default=0.0)
        ideal = max(total_busy / args.jobs, longest)
        fraction = total_busy / (run.seconds * args.jobs) if run.seconds > 0 else float("nan")
        print(f"{'total':32} {len(run):5d} {len(run.units):5d} {total_busy:8.1f}  "
              f"wall {run.seconds:.1f} s; busy-core fraction {fraction:.2f}; ideal wall "
              f"{ideal:.1f} s (longest unit {longest:.1f} s); wall/ideal "
              f"{run.seconds / ideal if ideal > 0 else float('nan'):.2f}"
              f"; device {run.device}; {run.processes} process(es)")
        if args.compare_sequential > 0:
            n, worst, seconds = compare_sequential(cache, dirs, run, args.compare_sequential,
                                                   args, tmp)
            print(f"--jobs 1 rerun of {n} cell(s) in {seconds:.1f} s: largest |score diff| vs "
                  f"the grid {worst:.4f} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
