"""Benchmark: report build time on a full-sweep-sized results file, and the TF-IDF baseline
on the real Spanish benchmark data (seconds and score per task).

    python bench/report_baseline.py                        # both parts
    python bench/report_baseline.py --skip-baseline        # report timing only
    python bench/report_baseline.py --tasks es-senteval:TASS1,es-senteval:STS17
    python bench/report_baseline.py --data-dir /path/to/es --plot

The report part writes synthetic results (models x hidden states + avg x tasks x seeds, the
size of a real multi-model sweep) and times loading, aggregation and every writer. The
baseline part runs ``estratos baseline`` on the real data (../shared/data/es by default)
and prints one line per task, so the figures can go in docs/report.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from estratos.report import build_report, write_report  # noqa: E402
from estratos.report.writers import WRITERS  # noqa: E402
from estratos.tasks.types import GROUPS  # noqa: E402


def synthetic_results(path: Path, models: int, states: int, tasks: int, seeds: int) -> int:
    rng = random.Random(0)
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for m in range(models):
            for layer in list(range(states)) + ["avg"]:
                for t in range(tasks):
                    group = GROUPS[t % len(GROUPS)]
                    for s in range(seeds):
                        score = 50 + 10 * m + rng.random() * 5
                        fh.write(json.dumps({
                            "schema": 1, "kind": "probe", "task": f"bench:T{t}",
                            "name": f"T{t}", "group": group, "layer": layer,
                            "pooling": "cls", "seed": 1111 + s, "metric": "accuracy",
                            "score": round(score, 2), "test": {"accuracy": score},
                            "fallback": "trained on valid" if t % 7 == 0 else None,
                            "classifier": {"name": "senteval"}, "model": f"org/model-{m}",
                            "revision": "bench"}) + "\n")
                        n += 1
    return n


def bench_report(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.jsonl"
        n = synthetic_results(path, args.models, args.states, args.n_tasks, args.seeds)
        size = path.stat().st_size / 1e6
        t0 = time.perf_counter()
        content = build_report([path])
        t1 = time.perf_counter()
        print(f"report: {n} records ({size:.1f} MB; {args.models} models x {args.states + 1} "
              f"layer specs x {args.n_tasks} tasks x {args.seeds} seeds)")
        print(f"  load + aggregate + tables: {t1 - t0:.2f} s")
        for fmt, writer in WRITERS.items():
            t = time.perf_counter()
            files = writer(content)
            kb = sum(len(v.encode()) for v in files.values()) / 1e3
            print(f"  render {fmt:5s}: {time.perf_counter() - t:.2f} s ({kb:.0f} kB)")
        t = time.perf_counter()
        summary = write_report([path], Path(tmp) / "out", plot=args.plot)
        print(f"  write_report end to end{' with plots' if args.plot else ''}: "
              f"{time.perf_counter() - t:.2f} s, {len(summary.files)} files")


def bench_baseline(args) -> None:
    from estratos.probe.config import BaselineConfig
    from estratos.probe.grid.baselines import run_baseline
    from estratos.tasks import DataDirs, select_tasks

    data = args.data_dir or str(REPO.parent / "shared" / "data" / "es")
    if not Path(data, "senteval").is_dir():
        print(f"baseline: skipped (no data at {data}; give --data-dir)")
        return
    specs = select_tasks(args.tasks)
    print(f"baseline: {len(specs)} tasks from {data} (seed 1111, 1 thread)")
    total = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "baseline.jsonl"
        for spec in specs:
            t = time.perf_counter()
            try:
                recs = run_baseline([spec], DataDirs.parse([data]), out, BaselineConfig.build())
            except Exception as exc:  # report and go on: a benchmark, not a test
                print(f"  {spec.id:28s} failed: {exc}")
                continue
            dt = time.perf_counter() - t
            total += dt
            for r in recs:
                print(f"  {spec.id:28s} {r['protocol']:12s} {r['metric']:9s} "
                      f"{r['score']:7.2f}  {dt:6.1f} s  sizes {r['sizes']}")
    print(f"  total {total:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=3)
    ap.add_argument("--states", type=int, default=13, help="hidden states (L+1)")
    ap.add_argument("--n-tasks", type=int, default=40)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--plot", action="store_true")
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--skip-report", action="store_true")
    ap.add_argument("--tasks", default="es-senteval,es-discoeval")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not args.skip_report:
        bench_report(args)
    if not args.skip_baseline:
        bench_baseline(args)


if __name__ == "__main__":
    main()
