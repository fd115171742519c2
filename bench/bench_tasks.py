"""Benchmark of the task layer: listing cost, loading every Spanish dataset, memory.

Prints figures; it asserts nothing (speed targets live here, never in unit tests).
Targets: `tasks list` without sizes well under 1 s for every registered task apart from
those whose dev split is held out of a training pool (it reads no other data; those it loads,
since whether the pool is used depends on its contents); loading all 32 Spanish datasets in
seconds, not minutes.

    python bench/bench_tasks.py [DATA_DIR]      # default: ../shared/data/es
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc
from pathlib import Path

from estratos.tasks import DataDirs, all_specs, list_tasks, load_task, select_tasks, \
    unique_sentences


def main() -> None:
    default = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "es"
    parser = argparse.ArgumentParser(
        description="Time listing and loading the Spanish benchmark's tasks.")
    parser.add_argument("data_dir", nargs="?", type=Path, default=default,
                        help=f"the folder holding senteval/ and discoeval/ [default: {default}]")
    root = parser.parse_args().data_dir
    if not (root / "senteval").is_dir():
        parser.error(f"{root}: no senteval/ folder here (give the folder `estratos tasks "
                     "download es` filled)")
    dirs = DataDirs.parse([str(root)])
    specs = all_specs()

    t0 = time.perf_counter()
    list_tasks(specs, dirs)
    print(f"list {len(specs)} tasks (no sizes):      {time.perf_counter() - t0:7.3f} s")
    t0 = time.perf_counter()
    list_tasks(specs, dirs, counts=True)
    print(f"list {len(specs)} tasks (--sizes):       {time.perf_counter() - t0:7.3f} s")

    spanish = select_tasks("es-senteval,es-discoeval")
    total_examples = 0
    slowest = []
    t0 = time.perf_counter()
    for spec in spanish:
        t1 = time.perf_counter()
        total_examples += sum(load_task(spec, dirs).sizes.values())
        slowest.append((time.perf_counter() - t1, spec.id))
    elapsed = time.perf_counter() - t0
    print(f"load {len(spanish)} Spanish datasets:       {elapsed:7.3f} s "
          f"({total_examples} examples, {total_examples / elapsed:,.0f} examples/s)")
    for seconds, task_id in sorted(slowest, reverse=True)[:3]:
        print(f"  slowest: {task_id:30s} {seconds:6.3f} s")

    largest = max(slowest)[1]
    tracemalloc.start()
    load_task(select_tasks(largest)[0], dirs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"peak traced memory loading {largest}: {peak / 2**20:7.1f} MiB")

    t0 = time.perf_counter()
    sentences = unique_sentences(spanish, dirs)
    print(f"unique sentences of all 32:             {time.perf_counter() - t0:7.3f} s "
          f"({len(sentences)} sentences)")
    print(f"max RSS:                                "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:7.1f} MiB")


if __name__ == "__main__":
    main()
