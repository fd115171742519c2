"""Results I/O per cell: does adding a program's cells cost in proportion to those cells?

Writes a toy grid the way the probe does (per program: the predictions of its cells, then
their results lines, through ``write_predictions`` and ``ResultsStore.append``), for a grid
of 200 and one of 2,000 cells, each cell with the predictions of 5,000 test examples (one
shared test set, 3 classes), and prints the wall time and the bytes written per cell. The
bytes are what the process handed to ``write`` (``/proc/self/io`` ``wchar``; the size of the
files written where that is unavailable). Then the same grid is read back as a report does
(every cell's predictions found). The last line is the ratio of the per-cell cost at 2,000
cells to the per-cell cost at 200 (time and bytes; the target is at most 1.5): a store that
copies or re-reads what it already holds grows with the grid, one that appends does not.

The intervals (``ci``) are not computed here (``with_ci=False``): their cost is fixed per
cell and is not I/O. Usage: ``python bench/results_io.py [--sizes 200,2000] [--examples
5000] [--cells-per-program 10]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

from estratos.results import ResultRecord, ResultsStore, read_results
from estratos.results.predictions import CellPredictions, PredictionsReader, write_predictions


def _wchar() -> int:
    """Bytes this process passed to write() so far (-1 where /proc/self/io is absent)."""
    try:
        with open("/proc/self/io") as fh:
            for line in fh:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def _tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _cell(index: int, gold: np.ndarray, rng: np.random.Generator):
    pred = np.where(rng.random(gold.shape[0]) < 0.7, gold, rng.integers(0, 3, gold.shape[0]))
    score = round(100.0 * float(np.mean(pred == gold)), 2)
    record = ResultRecord(kind="probe", task=f"bench:T{index // 130}", suite="bench",
                          name=f"T{index // 130}", group="SC", language="es",
                          layer=index % 13, pooling="cls", seed=1111 + (index // 13) % 10,
                          protocol="split", classifier={"name": "senteval"},
                          metric="accuracy", score=score, test={"accuracy": score},
                          sizes={"train": 10000, "dev": 1000, "test": gold.shape[0]},
                          model="bench/model", revision="r1",
                          created="2026-11-23T12:00:00Z")
    return record, CellPredictions(pred, gold)


def run(n_cells: int, n_examples: int, per_program: int, root: Path) -> Dict[str, float]:
    """Write ``n_cells`` cells in programs of ``per_program``, then read them back."""
    results = root / f"grid{n_cells}.jsonl"
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 3, n_examples)
    cells = [_cell(i, gold, rng) for i in range(n_cells)]
    wchar0, t0 = _wchar(), time.perf_counter()
    for start in range(0, n_cells, per_program):
        chunk = cells[start:start + per_program]
        records = write_predictions(results, [r for r, _ in chunk], [p for _, p in chunk],
                                    with_ci=False)
        ResultsStore(results).append(records)
    seconds = time.perf_counter() - t0
    written = _wchar() - wchar0 if wchar0 >= 0 else _tree_bytes(root)
    t0 = time.perf_counter()
    reader = PredictionsReader()
    records = read_results(results)
    found = sum(reader.find(r, results).preds is not None for r in records)
    read_seconds = time.perf_counter() - t0
    if found != n_cells:
        raise SystemExit(f"read back {found} of {n_cells} cells")
    return {"cells": n_cells, "seconds": seconds, "bytes": written,
            "read_seconds": read_seconds, "stored": _tree_bytes(root)}


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200,2000", help="grid sizes (cells), first = base")
    parser.add_argument("--examples", type=int, default=5000, help="test examples per cell")
    parser.add_argument("--cells-per-program", type=int, default=10,
                        help="cells one write adds (a probe unit's chunk)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="results-io-") as tmp:
            row = run(n, args.examples, args.cells_per_program, Path(tmp))
        rows.append(row)
        print(f"{n:>6} cells: write {1000 * row['seconds'] / n:8.2f} ms/cell, "
              f"{row['bytes'] / n / 1024:9.1f} KiB written/cell "
              f"({row['stored'] / n / 1024:.1f} KiB stored/cell); "
              f"read back {1000 * row['read_seconds'] / n:.2f} ms/cell", flush=True)
    base, last = rows[0], rows[-1]
    time_ratio = (last["seconds"] / last["cells"]) / (base["seconds"] / base["cells"])
    bytes_ratio = (last["bytes"] / last["cells"]) / (base["bytes"] / base["cells"])
    print(f"per-cell cost ratio {last['cells']}/{base['cells']} cells: time {time_ratio:.2f}, "
          f"bytes written {bytes_ratio:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main(sys.argv[1:])
