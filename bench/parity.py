"""Parity as a distribution: our batched SentEval probe vs the plain SentEval-style loop.

One seed cannot tell a protocol difference from seed noise (the issue measured our cells
0.81 pt from SentEval's own code on average, up to 2.4 pt). This script trains, on the same
cached vectors, through the same protocol code (split / kfold / inner-kfold, same L2 grid
and selection), for several seeds:

- ours: :class:`estratos.probe.estimators.classifiers.SentEvalClassifier` (batched, our random streams);
- reference: :class:`estratos.testing.reference.ReferenceEstimator` (one ``torch.nn.Linear``
  and ``torch.optim.Adam`` per (layer, L2), SentEval's own random streams:
  ``torch.manual_seed`` + ``nn.Linear`` init, ``np.random.seed`` + one permutation per pass).

It prints both means ± std over seeds, the difference of means and its 95% bootstrap
interval (seeds resampled within each side, 10,000 resamples), and whether 0 lies inside it
(the two are then indistinguishable at this number of seeds).

    python bench/parity.py --cache minilm.h5 --data-dir ../shared/data/es
    python bench/parity.py --cache minilm.h5 --data-dir ../shared/data/es --tasks all

The default (TASS1, SICKEntailment, RST; layers last and avg; 5 seeds) takes minutes on a
laptop; ``--tasks all`` adds SQC (10-fold CV: 41 reference fits per cell) and MC (nested
10 x 10 CV: 410 reference fits per cell), which take hours with the plain loop. Figures and
findings: docs/statistics.md ("Parity").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.base import clone

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from estratos.cache import open_cache  # noqa: E402
from estratos.probe.estimators.runtime import torch_runtime  # noqa: E402
from estratos.probe.features import AVG, build_features  # noqa: E402
from estratos.testing.reference import ReferenceEstimator  # noqa: E402
from estratos.probe.estimators.settings import resolve_classifier  # noqa: E402
from estratos.protocols import Inputs, get_protocol  # noqa: E402
from estratos.tasks import DataDirs, load_task, select_tasks  # noqa: E402

DEFAULT_TASKS = "es-senteval:TASS1,es-senteval:SICKEntailment,es-discoeval:RST"
ALL_TASKS = DEFAULT_TASKS + ",es-senteval:SQC,es-senteval:MC"


def ours_and_reference(task, seed):
    """Factories of our classifier (the task's settings) and of the plain loop with the same
    hyper-parameters; also the parameters the protocol needs."""
    ours = resolve_classifier(task.spec.classifier, classifier="senteval", task=task.spec.id,
                              n_classes=len(task.labels), seed=seed)
    p = ours.get_params()
    if p["nhid"] and p["dropout"]:
        raise SystemExit(f"{task.spec.id}: the reference loop has no dropout")
    ref = ReferenceEstimator(len(task.labels), seed, nhid=p["nhid"], tenacity=p["tenacity"],
                             epoch_size=p["epoch_size"], max_epoch=p["max_epoch"],
                             batch_size=p["batch_size"], streams="senteval")
    return (lambda: clone(ours)), (lambda: clone(ref)), p


def evaluate(task, vectors, layers, seed, make, params) -> list:
    """Test accuracy of each layer spec under the task's protocol with estimator ``make``."""
    protocol = get_protocol(task.protocol)
    if protocol.trains != "classifier":
        raise SystemExit(f"{task.spec.id}: protocol {task.protocol} trains no classifier")
    features = {}

    def feats(split):
        if split not in features:
            features[split] = build_features(vectors, layers, task.splits[split],
                                             task.spec.combiner)
        return features[split]

    inputs = Inputs(labels=lambda s: np.asarray(task.splits[s].labels, dtype=np.int64),
                    splits=tuple(task.splits), features=feats, classifier=make, seed=seed,
                    l2_grid=tuple(params["l2_grid"]), kfold=int(params["kfold"]),
                    validation_split=float(params["validation_split"]))
    return [o.test["accuracy"] for o in protocol.evaluate(inputs)]


def diff_interval(a, b, resamples: int = 10000, seed: int = 0):
    """Mean(b) - mean(a) with a percentile interval, seeds resampled within each side."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ma = a[rng.integers(0, len(a), (resamples, len(a)))].mean(axis=1)
    mb = b[rng.integers(0, len(b), (resamples, len(b)))].mean(axis=1)
    lo, hi = np.quantile(mb - ma, [0.025, 0.975])
    return float(b.mean() - a.mean()), float(lo), float(hi)


def summary(rows) -> str:
    """The distribution in two lines: how far apart the means are, and how far apart one
    seed of each side is (the single-seed comparison a parity check usually makes)."""
    diffs = np.abs([r["diff"] for r in rows])
    gaps = np.abs(np.concatenate([np.subtract(r["ours"], r["reference"]) for r in rows]))
    inside = sum(r["zero_inside"] for r in rows)
    return (f"means: |ours - ref| mean {diffs.mean():.2f}, max {diffs.max():.2f}; 0 inside "
            f"the interval for {inside} of {len(rows)} cells\n"
            f"same seed, one run each: |ours - ref| mean {gaps.mean():.2f}, max "
            f"{gaps.max():.2f} over {len(gaps)} pairs")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", required=True, help="a cache holding the tasks' sentences")
    ap.add_argument("--data-dir", required=True, help="the Spanish benchmark's data folder")
    ap.add_argument("--tasks", default=DEFAULT_TASKS, help="task ids, or 'all' for the five")
    ap.add_argument("--pooling", default="cls", choices=("cls", "mean"),
                    help="cached vectors to probe (cls: the probe's and the Spanish code's)")
    ap.add_argument("--seeds", default="1111,1,2,3,4")
    ap.add_argument("--out", default=None, help="also write every figure as JSON here")
    args = ap.parse_args(argv)
    tasks = select_tasks(ALL_TASKS if args.tasks == "all" else args.tasks)
    dirs = DataDirs.parse([args.data_dir])
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    with open_cache(args.cache) as cache, torch_runtime(1):
        last = cache.n_states - 1
        for spec in tasks:
            task = load_task(spec, dirs)
            rows_idx = cache.rows_for(task.sentences)
            vectors = cache.read(rows_idx, args.pooling)
            layers = [last, AVG]
            scores = {"ours": [], "reference": []}
            seconds = {"ours": 0.0, "reference": 0.0}
            for seed in seeds:
                ours, ref, params = ours_and_reference(task, seed)
                for name, make in (("ours", ours), ("reference", ref)):
                    t0 = time.perf_counter()
                    scores[name].append(evaluate(task, vectors, layers, seed, make, params))
                    seconds[name] += time.perf_counter() - t0
            for i, label in enumerate((str(last), "avg")):
                a = [s[i] for s in scores["reference"]]
                b = [s[i] for s in scores["ours"]]
                d, lo, hi = diff_interval(a, b)
                same_seed = np.abs(np.subtract(b, a))  # what one seed's comparison shows
                rows.append({"task": spec.id, "layer": label, "reference": a, "ours": b,
                             "diff": round(d, 2), "lo": round(lo, 2), "hi": round(hi, 2),
                             "zero_inside": bool(lo <= 0 <= hi),
                             "same_seed_gap_mean": round(float(same_seed.mean()), 2),
                             "same_seed_gap_max": round(float(same_seed.max()), 2),
                             "seconds_ours": round(seconds["ours"], 1),
                             "seconds_reference": round(seconds["reference"], 1)})
                r = rows[-1]
                print(f"{spec.id:28s} layer {label:>3s}  reference {np.mean(a):6.2f} ± "
                      f"{np.std(a, ddof=1):4.2f}  ours {np.mean(b):6.2f} ± "
                      f"{np.std(b, ddof=1):4.2f}  ours - ref {d:+5.2f} [{lo:+5.2f}, {hi:+5.2f}]"
                      f"  0 inside: {'yes' if r['zero_inside'] else 'NO'}  same-seed gap "
                      f"mean {r['same_seed_gap_mean']:.2f} max {r['same_seed_gap_max']:.2f}",
                      flush=True)
            print(f"{'':28s} seconds: ours {seconds['ours']:.1f}, reference "
                  f"{seconds['reference']:.1f} ({len(seeds)} seeds x 2 layer specs)", flush=True)
    if rows:
        print(summary(rows), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
