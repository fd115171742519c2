"""Benchmark: one training pass of the batched probe vs a bare torch loop of the same shapes.

The two heaviest probes of the Spanish grid are WordContent (a linear probe with 1000
classes, every layer spec x the 4-value L2 grid) and the DC tasks (an MLP with 2000 hidden
units on 6 x 384 features, every layer spec, no L2 search). This times ``steps`` training
steps of each through the real trainer (:class:`estratos.probe.estimators.classifiers.
SentEvalClassifier`, one pass, then one dev evaluation of one batch) and through the plain
autograd loop a user would write for the same stacked shapes (``torch.bmm`` models,
``cross_entropy``, ``loss.backward()``, ``torch.optim.Adam(fused=True)``), alternating the
two ``--repeats`` times and keeping each one's best, and prints both, per step, and the ratio
(target: ours <= 1.5x the bare loop). Random data of the real shapes (MiniLM: 384 dims,
8 layer specs); the numbers do not depend on the values.

    python bench/probe_step.py                        # both probes, 1 torch thread
    python bench/probe_step.py --probe dc --steps 20 --threads 2
    python bench/probe_step.py --probe wordcontent --profile   # torch profiler, top ops
    python bench/probe_step.py --probe dc --device cuda --steps 200 [--profile]

Before/after a change to the trainer: ``--estratos PATH`` imports the trainer from another
checkout (e.g. ``git worktree add /tmp/before HEAD~1``), and every run prints a SHA-256 of
the trained weights, which must be the same for the same numbers. ``--examples N`` makes a
run one whole pass over N examples (a dataset's training size), and each probe's line gives
the step's arithmetic rate against the machine's single-thread peak (1,024 x 1,024 blocks):

    python bench/probe_step.py --probe dc --examples 6215 --repeats 2          # DCgdd's pass
    python bench/probe_step.py --probe dc --examples 6215 --repeats 2 --estratos /tmp/before

With ``--device cuda`` both run on the GPU and the clock stops after a synchronize, so a
step's time is what the GPU program costs, launch overhead included; ``--profile`` then
lists the top ops by GPU time too (what bench/gpu_node.py records for the DC probe, the one
that bounds the GPU node's grid).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch

#: name -> (features, classes, hidden units, L2 values, what it stands for)
SHAPES: Dict[str, Tuple[int, int, int, int, str]] = {
    "wordcontent": (384, 1000, 0, 4, "WordContent: linear, 1000 classes, 4 L2 values"),
    "dc": (6 * 384, 2, 2000, 1, "DC: MLP 2000 hidden units on 6 x 384 features, noreg"),
}


def _data(features: int, classes: int, groups: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(groups, n, features)).astype(np.float32)
    y = np.arange(n) % classes
    return x, y


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


#: SHA-256 of the weights each probe's last run of the real trainer ended with
DIGESTS: Dict[str, str] = {}


def digest(params: List[torch.Tensor]) -> str:
    """SHA-256 of a fit's parameters, bytes in order: equal digests, equal numbers."""
    h = hashlib.sha256()
    for p in params:
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def ours(probe: str, groups: int, steps: int, batch: int, device: str = "cpu") -> float:
    """Seconds for ``steps`` steps of the real trainer (one pass, one 1-batch dev round)."""
    from estratos.probe.estimators.classifiers import SentEvalClassifier

    features, classes, nhid, n_l2, _ = SHAPES[probe]
    x, y = _data(features, classes, groups, steps * batch)
    grid = [1e-5, 1e-4, 1e-3, 1e-2][:n_l2]
    clf = SentEvalClassifier(n_classes=classes, nhid=nhid, batch_size=batch, epoch_size=1,
                             max_epoch=0, tenacity=0, seed=1, l2_grid=grid, device=device)
    _sync(device)
    t0 = time.perf_counter()
    clf.fit(x, y, x[:, :batch], y[:batch], grid)
    _sync(device)
    seconds = time.perf_counter() - t0
    DIGESTS[probe] = digest(clf._state.net.params)
    return seconds


def step_flops(probe: str, groups: int, batch: int) -> float:
    """Arithmetic of one training step of every model (forward and backward, no input
    gradient: 4FK per example for a layer of F inputs and K outputs, 6HC for the second)."""
    features, classes, nhid, n_l2, _ = SHAPES[probe]
    per_example = (4.0 * features * classes if nhid == 0 else
                   4.0 * features * nhid + 6.0 * nhid * classes)
    return per_example * batch * groups * n_l2


def peak_rate() -> float:
    """FLOP/s of this process's threads on 1,024 x 1,024 float32 blocks (best of 3)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(10):
            torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * 1024 ** 3 * 10 / best


def bare(probe: str, groups: int, steps: int, batch: int, device: str = "cpu") -> float:
    """Seconds for ``steps`` steps of the plain autograd loop on the same stacked shapes."""
    features, classes, nhid, n_l2, _ = SHAPES[probe]
    x, y = _data(features, classes, groups, steps * batch)
    X = torch.from_numpy(x).to(device)
    Y = torch.from_numpy(y).to(device)
    models = groups * n_l2
    _sync(device)
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(1)

    def leaf(shape: Tuple[int, ...], scale: float = 1.0) -> torch.Tensor:
        start = (torch.rand(shape, generator=gen) - 0.5) * scale
        return start.to(device).requires_grad_()

    if nhid == 0:
        params = [leaf((models, features, classes)), leaf((models, 1, classes), 0.0)]
    else:
        params = [leaf((models, features, nhid)), leaf((models, 1, nhid), 0.0),
                  leaf((models, nhid, classes)), leaf((models, 1, classes), 0.0)]
    opt = torch.optim.Adam(params, lr=1e-3, weight_decay=1e-5, fused=True)
    perm = torch.from_numpy(np.random.default_rng(0).permutation(len(y))).to(device)
    for start in range(0, len(y), batch):
        idx = perm[start:start + batch]
        xb = X[:, idx].repeat_interleave(n_l2, dim=0)  # (models, B, F): each model's batch
        if nhid == 0:
            z = torch.baddbmm(params[1], xb, params[0])
        else:
            h = torch.sigmoid(torch.baddbmm(params[1], xb, params[0]))
            z = torch.baddbmm(params[3], h, params[2])
        loss = torch.nn.functional.cross_entropy(z.reshape(-1, classes),
                                                 Y[idx].repeat(models), reduction="sum")
        opt.zero_grad(set_to_none=True)
        (loss / len(idx)).backward()
        opt.step()
    _sync(device)
    return time.perf_counter() - t0


def profile(probe: str, groups: int, steps: int, batch: int, device: str = "cpu") -> None:
    """The trainer's top ops under torch's profiler (by host time; on a GPU by GPU time
    too), after a warm-up."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    gpu = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    ours(probe, groups, 2, batch, device)
    with torch_profile(activities=activities) as prof:
        ours(probe, groups, steps, batch, device)
    table = prof.key_averages()
    print(table.table(sort_by="self_cpu_time_total", row_limit=15))
    if gpu:
        print(table.table(sort_by="self_cuda_time_total", row_limit=15))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--probe", choices=("both", *SHAPES), default="both")
    ap.add_argument("--groups", type=int, default=8, help="layer specs (default 8)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--examples", type=int, default=None,
                    help="one pass over this many examples (sets --steps)")
    ap.add_argument("--estratos", type=Path, default=None,
                    help="a checkout whose trainer to time (default: this one)")
    args = ap.parse_args(argv)
    if args.examples:
        args.steps = -(-args.examples // args.batch)
    sys.path.insert(0, str((args.estratos or Path(__file__).resolve().parents[1]).resolve()))
    import estratos
    from estratos.probe.estimators.runtime import torch_runtime

    print(f"estratos from {Path(estratos.__file__).parent}")

    probes = list(SHAPES) if args.probe == "both" else [args.probe]
    with torch_runtime(args.threads):
        for probe in probes:
            if args.profile:
                profile(probe, args.groups, args.steps, args.batch, args.device)
                continue
            # warm-up (allocator, kernels)
            ours(probe, args.groups, 1, args.batch, args.device)
            bare(probe, args.groups, 1, args.batch, args.device)
            best_o = best_b = float("inf")
            for _ in range(args.repeats):  # alternate, so machine load hits both alike
                best_o = min(best_o, ours(probe, args.groups, args.steps, args.batch,
                                          args.device))
                best_b = min(best_b, bare(probe, args.groups, args.steps, args.batch,
                                          args.device))
            n_models = args.groups * SHAPES[probe][3]
            rate = step_flops(probe, args.groups, args.batch) * args.steps / best_o
            peak = peak_rate() if args.device == "cpu" else float("nan")
            print(f"{SHAPES[probe][4]}; {args.groups} layer specs = {n_models} models, "
                  f"batch {args.batch}, {args.steps} steps, {args.threads} thread(s), "
                  f"{args.device}")
            print(f"  estratos trainer: {best_o / args.steps * 1000:8.1f} ms/step   "
                  f"bare torch loop: {best_b / args.steps * 1000:8.1f} ms/step   "
                  f"ratio {best_o / best_b:.2f}x (target <= 1.5x)", flush=True)
            print(f"  pass: {best_o:.2f} s; {rate / 1e9:.1f} GFLOP/s, {rate / peak:.0%} of "
                  f"the peak {peak / 1e9:.1f} GFLOP/s; weights {DIGESTS[probe]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
