"""Benchmark: k-fold cross-validation's fits one fold after the other vs all folds at once.

``SentEvalClassifier.fit_folds`` can train the K folds of a cross-validation as streams of
one program (each stream on its own fold, early-stopping on its own held-out part) or fold
after fold. This times both on random data of a nested-CV inner loop's shape (PAWS-like: a
2-class probe, 384 features, 8 layer specs, the 4-value L2 grid, 10 folds of 1,800
examples), alternating them ``--repeats`` times and keeping each one's best, checks that
both give the same dev scores and epochs, and prints the seconds and their ratio. Which
one a device gets is ``FOLDS_AT_ONCE_DEVICES`` (estratos.probe.estimators.classifiers).

    python bench/kfold_fits.py                      # the CPU, 1 torch thread
    python bench/kfold_fits.py --device cuda        # a GPU
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch


def main(argv=None) -> int:
    from estratos.probe.estimators.classifiers import SentEvalClassifier
    from estratos.protocols.folds import stratified_folds
    from estratos.vocab import DEFAULT_L2_GRID

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=1800)
    ap.add_argument("--features", type=int, default=384)
    ap.add_argument("--groups", type=int, default=8, help="layer specs (default 8)")
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.groups, args.examples, args.features)).astype(np.float32)
    signal = x[0] @ rng.normal(size=args.features)
    y = (signal + rng.normal(size=args.examples) * 20 > 0).astype(np.int64)
    folds = stratified_folds(y, args.folds, 1111)
    grid = list(DEFAULT_L2_GRID)
    best = {"fold after fold": float("inf"), "at once": float("inf")}
    fits = {}
    for _ in range(args.repeats):
        for name, at_once in (("fold after fold", False), ("at once", True)):
            t0 = time.perf_counter()
            fits[name] = SentEvalClassifier(seed=1111, device=args.device).fit_folds(
                x, y, folds, grid, at_once=at_once)
            best[name] = min(best[name], time.perf_counter() - t0)
    a, b = fits["fold after fold"], fits["at once"]
    same = bool(np.array_equal(a.dev_score_, b.dev_score_)
                and np.array_equal(a.epochs_, b.epochs_))
    print(f"{args.folds} folds x {args.groups} layer specs x {len(grid)} L2 values, "
          f"{args.examples} examples x {args.features} features, 2 classes, {args.device}, "
          f"{args.threads} thread(s)")
    for name, seconds in best.items():
        print(f"  {name:16s} {seconds:7.2f} s")
    print(f"  at once / fold after fold: {best['at once'] / best['fold after fold']:.2f}; "
          f"same dev scores and epochs: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
