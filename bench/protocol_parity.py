"""Protocol parity: the Spanish benchmark's published evaluation code against ours, on the same
cached vectors, task by task, over seeds.

``bench/parity.py`` compares two estimators inside our own protocol code. This script runs
the published code itself: the task classes of the Spanish benchmark's repository
(OpenCENIA/Spanish-Sentence-Evaluation, ``senteval/`` and ``discoeval/``: their loaders,
their feature construction, ``SplitClassifier``, ``KFoldClassifier``,
``InnerKFoldClassifier``, ``RelatednessPytorch``, the STS cosine), with a batcher that reads
the vectors of each sentence from an estratos cache. Our side is ``run_probe`` on the same
cache. Any difference is then the protocols', not the encoders'.

The published code is fetched by you and named with ``--published DIR`` (a checkout of that
repository); nothing of it is part of estratos. It runs unmodified, in worker processes,
with these shims, none of which changes a number:

- the STS loader builds ``np.array`` of token lists of different lengths, which numpy 1.24
  and later refuse; it is given numpy with an ``array`` that makes the 1-d object array
  older numpy made of such lists;
- on CPU (``--device cpu``, the default), CUDA calls become CPU no-ops (``.cuda()``,
  ``torch.device('cuda')``, the relatedness class's ``torch.cuda.is_available()``
  assertion) and each worker has one torch thread; with ``--device cuda`` the published
  code runs on the GPU as written;
- ``inspect.getargspec`` (removed in Python 3.11) is ``inspect.getfullargspec``, whose
  first field is the same argument list;
- RST's pickles are read by our restricted unpickler (``estratos.tasks.safe_pickle``), as
  the data's README requires: the same records, no code run;
- RST's published code numbers its labels in the iteration order of a ``set`` of strings,
  which depends on Python's hash seed; the workers run with ``PYTHONHASHSEED=0`` so that the
  bench repeats itself (another hash seed is another, equally published, label numbering);
- a task whose published train file is absent from the data (SP: only ``valid`` and
  ``test`` are published) is given a folder written from our loaded splits (train = valid
  less our held-out 10%, that 10% as ``valid``), so both sides train, select and test on
  the same examples.

Each cell (task x layer spec) prints both sides' mean and standard deviation over seeds,
the difference of means (ours - published) with its 95% Welch interval over seeds
(:func:`estratos.stats.seeds.mean_difference`), whether 0 lies inside it, and both sides'
seconds. The STS cosine trains nothing, so it has one run a side and must agree exactly.

    python bench/protocol_parity.py --published Spanish-Sentence-Evaluation \\
        --cache minilm.h5 --data-dir ../shared/data/es --jobs 2 --out parity.json

``--inner-kfold K`` (default 3) runs MC's nested cross-validation with K x K folds on both
sides instead of the benchmark's 10 x 10 (410 published fits per cell, hours on a laptop);
``--inner-kfold 0`` keeps 10. Findings: docs/statistics.md ("Parity with the published code").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from estratos.text import normalize_sentence  # noqa: E402 (light: the workers use it per batch)
from estratos.vocab import METRIC_INFO  # noqa: E402

#: our task id -> (published engine, published task name); one task per protocol and format
TASKS: Dict[str, Tuple[str, str]] = {
    "es-senteval:TASS1": ("senteval", "TASS1"),                    # split
    "es-senteval:SICKEntailment": ("senteval", "SICKEntailment"),  # split, sentence pairs
    "es-senteval:SQC": ("senteval", "SQC"),                        # kfold (10 folds)
    "es-senteval:MC": ("senteval", "MC"),                          # inner-kfold
    "es-senteval:SICKRelatedness": ("senteval", "SICKRelatedness"),  # relatedness
    "es-senteval:STS14": ("senteval", "STS14"),                    # cosine
    "es-discoeval:SPthesis": ("discoeval", "SPthesis"),            # SP: 5 slots
    "es-discoeval:BSOthesis": ("discoeval", "BSOthesis"),          # BSO: 2 slots
    "es-discoeval:DCgdd": ("discoeval", "DCgdd"),                  # DC: 6 slots
    "es-discoeval:RST": ("discoeval", "RST"),                      # RST: subtrees
}
#: the published scripts' classifier configuration (examples/transformer.py)
PUBLISHED_CLASSIFIER = {"nhid": 0, "optim": "adam", "batch_size": 64, "tenacity": 5,
                        "epoch_size": 4}
PUBLISHED_KFOLD = 10
#: where the published engines look for each task's files, under task_path
PUBLISHED_FOLDER = {"SPthesis": "discoeval/SP/thesis"}
#: both sides round scores to 2 decimals (percent): deterministic sides agree
#: within this
ROUNDING = 0.01

log = logging.getLogger("protocol_parity")


# ---- the published side (worker processes) --------------------------------------------------

_WORKER: Dict[str, Any] = {}


class _RaggedNumpy:
    """numpy for the published STS loader: ``array`` of ragged lists is a 1-d object array
    (what numpy < 1.24 returned), everything else is numpy itself."""

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    @staticmethod
    def array(value: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        try:
            return np.array(value, *args, **kwargs)
        except ValueError:
            out = np.empty(len(value), dtype=object)
            for i, item in enumerate(value):
                out[i] = item
            return out


class _CpuTorch:
    """The ``torch`` the published classifiers see: torch itself, except that
    ``torch.device(...)`` is the CPU (the code asks for 'cuda' by name)."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)

    def device(self, *args: Any, **kwargs: Any) -> Any:
        return self._torch.device("cpu")


def _install(published: str, cache_path: str, pooling: str,
             encoder: Optional[str] = None, device: str = "cpu") -> None:
    """Worker start: the shims of the module docstring, the published packages, the cache
    (or, with ``encoder``, the published batcher on that model)."""
    import inspect
    import types

    import torch

    if not hasattr(inspect, "getargspec"):
        inspect.getargspec = inspect.getfullargspec  # type: ignore[attr-defined]
    on_cpu = device == "cpu"
    if on_cpu:  # the published code asks for CUDA by name; on a GPU it runs as written
        torch.nn.Module.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
        torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
        torch.cuda.is_available = lambda: True
        torch.set_num_threads(1)
    sys.path.insert(0, published)
    import discoeval.rst
    import discoeval.tools.classifier
    import senteval.sts
    import senteval.tools.classifier

    from estratos.tasks.safe_pickle import RestrictedUnpickler

    if on_cpu:
        for module in (senteval.tools.classifier, discoeval.tools.classifier):
            module.torch = _CpuTorch(torch)
    senteval.sts.np = _RaggedNumpy()
    discoeval.rst.pickle = types.SimpleNamespace(
        load=lambda f: RestrictedUnpickler(f).load())

    if encoder is not None:
        _install_encoder(published, encoder)
        return
    from estratos.cache import open_cache

    cache = open_cache(cache_path)
    _WORKER["cache"] = cache
    _WORKER["pooling"] = pooling
    # the published loaders split sentences on whitespace and the batcher gets the tokens
    rows: Dict[str, int] = {}
    collisions = 0
    for i, text in enumerate(cache.sentences()):
        key = " ".join(normalize_sentence(text).split())
        collisions += key in rows
        rows[key] = i
    if collisions:
        log.warning("%d cached sentences differ from another only in inner whitespace: the "
                    "published side reads one vector for each such group", collisions)
    _WORKER["rows"] = rows


class _FirstPositionMemo:
    """The model as the published batcher calls it, each distinct batch run once: outputs
    are kept at the first position only (hidden states ``(b, 1, d)``), which is all the
    batcher reads (``[:, 0]``), so every run after the first of a batch is a lookup. It
    returns the 4-tuple the script unpacks (``last, pooled, hidden_states, attentions``;
    the attentions, never read, as None)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name_or_path = model.name_or_path
        #: ELECTRA has no pooler: the script unpacks (last, states, _) for it
        self.electra = "electra" in self.name_or_path
        self.memo: Dict[bytes, Any] = {}

    def __call__(self, ids: Any, **kwargs: Any) -> Any:
        key = ids.numpy().tobytes() + kwargs["attention_mask"].numpy().tobytes()
        if key not in self.memo:
            import torch

            with torch.no_grad():
                out = self.model(ids, **kwargs)
            # (last, [pooled,] states, attentions[, cross-attentions]): transformers 5 adds
            # an empty cross-attention tuple the script does not unpack
            last = out[0][:, :1].clone()
            if self.electra:
                self.memo[key] = (last, tuple(h[:, :1].clone() for h in out[1]), None)
            else:
                self.memo[key] = (last, out[1], tuple(h[:, :1].clone() for h in out[2]), None)
        return self.memo[key]


def _install_encoder(published: str, model_id: str) -> None:
    """The published pipeline end to end: ``examples/transformer.py``'s batcher (its
    tokenization, lower-casing, [CLS] read and layer average) on ``model_id``, loaded as that
    script loads it (hidden states and attentions returned; eager attention, which returns
    them)."""
    sys.path.insert(0, str(Path(published) / "examples"))
    import transformer  # the published example script (its main is guarded)
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    config = AutoConfig.from_pretrained(model_id)
    config.output_hidden_states = True
    config.output_attentions = True
    model = AutoModel.from_pretrained(model_id, config=config, attn_implementation="eager")
    model.eval()
    _WORKER["encoder"] = {"model": _FirstPositionMemo(model),
                          "tokenizer": AutoTokenizer.from_pretrained(model_id),
                          "batcher": transformer.batcher}


def _batcher(params: Any, batch: Sequence[Sequence[str]]) -> np.ndarray:
    """The published batcher's contract, read from the cache: one vector per token list
    (the published transformer batcher sends an empty sentence as '.')."""
    if "encoder" in _WORKER:
        encoder = _WORKER["encoder"]
        params["model"], params["tokenizer"] = encoder["model"], encoder["tokenizer"]
        return encoder["batcher"](params, batch)
    rows = _WORKER["rows"]
    wanted = []
    for tokens in batch:
        # the cache's keys are NFC (some published lines carry decomposed accents)
        text = normalize_sentence(" ".join(tokens)) if len(tokens) else "."
        if text not in rows:
            raise KeyError(f"the published loader gave a sentence that is not in the cache: "
                           f"{text[:80]!r}")
        wanted.append(rows[text])
    cache = _WORKER["cache"]
    if params["layer"] == "avg" and not cache.has_avg:  # the mean over states, as ours does
        return cache.read(wanted, _WORKER["pooling"]).mean(axis=1)
    return cache.read(wanted, _WORKER["pooling"], [params["layer"]])[:, 0]


def _published_cell(engine: str, name: str, task_path: str, layer: Any, seed: int,
                    kfold: int) -> Dict[str, Any]:
    """One published run (one task, layer spec and seed): its result dict, and seconds."""
    import importlib

    module = importlib.import_module(f"{engine}.engine")
    # the published script encodes in batches of 16 (padding); cached vectors need none
    batch_size = 16 if "encoder" in _WORKER else 128
    params = {"task_path": task_path, "usepytorch": True, "kfold": kfold, "batch_size": batch_size,
              "layer": layer, "seed": seed, "classifier": dict(PUBLISHED_CLASSIFIER)}
    t0 = time.perf_counter()
    result = module.SE(params, _batcher, lambda p, s: None).eval(name)
    seconds = time.perf_counter() - t0
    return {"result": _plain(result), "seconds": seconds}


def _plain(value: Any) -> Any:
    """A result dict as JSON values (numpy scalars, scipy results and tuples unpacked;
    per-example arrays dropped)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "yhat"}
    if isinstance(value, (tuple, list)) or hasattr(value, "_asdict"):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


# ---- the two sides' scores --------------------------------------------------------------------

def published_scores(name: str, result: Dict[str, Any]) -> Dict[str, float]:
    """The published result's test (and dev) figures on our records' scale (correlations
    x100, as a result's ``score``)."""
    if name == "SICKRelatedness":
        return {"test": 100 * float(result["pearson"]), "dev": 100 * float(result["devpearson"])}
    if name.startswith("STS"):
        pearson = result["all"]["pearson"]
        return {"test": 100 * float(pearson["wmean"]), "mean": 100 * float(pearson["mean"])}
    return {"test": float(result["acc"]), "dev": float(result["devacc"])}


def our_scores(record: Any) -> Dict[str, float]:
    """Our record's test (and dev) figures, unrounded, on the paper's scale (the metric's
    ``raw_scale``: accuracy stored in percent, correlations as fractions). An STS record's
    test value is the size-weighted mean over subsets; ``mean`` is the plain mean."""
    metric = record.metric
    scale = METRIC_INFO[metric].raw_scale
    test, dev = record.test, record.dev or {}
    out = {"test": scale * float(test[metric])}
    if dev.get(metric) is not None:
        out["dev"] = scale * float(dev[metric])
    if test.get(f"{metric}_mean") is not None:
        out["mean"] = scale * float(test[f"{metric}_mean"])
    return out


# ---- folders for tasks whose published files are absent ---------------------------------------

def write_published_folder(task: Any, folder: Path) -> None:
    """``train.txt`` / ``valid.txt`` / ``test.txt`` in the published DiscoEval layout
    (``label<TAB>s1<TAB>...``) from our loaded splits: train, our held-out dev, test."""
    folder.mkdir(parents=True, exist_ok=True)
    for ours, theirs in (("train", "train"), ("dev", "valid"), ("test", "test")):
        split = task.splits[ours]
        with open(folder / f"{theirs}.txt", "w", encoding="utf-8") as f:
            for i, label in enumerate(split.labels):
                texts = [task.sentences[int(s.indices[s.offsets[i]])] for s in split.slots]
                f.write("\t".join([task.labels[int(label)], *texts]) + "\n")


# ---- one task -----------------------------------------------------------------------------

def run_ours(cache: str, spec: Any, data_dir: str, layers: List[Any], seeds: List[int],
             pooling: str, device: str = "cpu"
             ) -> Tuple[Dict[Tuple[str, int], Dict[str, float]], float]:
    """Our probe on the task's cells: scores per (layer label, seed), and seconds."""
    from estratos.probe.config import ProbeConfig
    from estratos.probe.grid.runner import run_probe
    from estratos.tasks import DataDirs

    config = ProbeConfig.build(layers=layers, seeds=seeds, pooling=pooling,
                               classifier="senteval", features="raw", jobs=1, threads=1,
                               device=device)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run = run_probe(cache, [spec], DataDirs.parse([data_dir]), Path(tmp) / "ours.jsonl",
                        config)
        seconds = time.perf_counter() - t0
    return {(str(r.layer), int(r.seed)): our_scores(r) for r in run}, seconds


def _spread(x: List[float]) -> str:
    return f" ± {np.std(x, ddof=1):4.2f}" if len(x) > 1 else "       "


def compare_cell(task_id: str, layer: str, ours: List[float], published: List[float],
                 seconds: Tuple[float, float]) -> Dict[str, Any]:
    """One printed row and its JSON."""
    from estratos.stats.seeds import mean_difference

    d = mean_difference(published, ours)
    deterministic = len(ours) == 1 and len(published) == 1
    inside = d.contains(0.0, ROUNDING if deterministic else 0.0)
    row = {"task": task_id, "layer": layer, "ours": ours, "published": published,
           "diff": round(d.diff, 2), "lo": round(d.lo, 2), "hi": round(d.hi, 2),
           "zero_inside": bool(inside), "seconds_ours": round(seconds[0], 1),
           "seconds_published": round(seconds[1], 1)}
    print(f"{task_id:30s} {layer:>4s}  published {np.mean(published):6.2f}{_spread(published)}"
          f"  ours {np.mean(ours):6.2f}{_spread(ours)}  ours - published {d.diff:+5.2f} "
          f"[{d.lo:+5.2f}, {d.hi:+5.2f}]  0 inside: {'yes' if inside else 'NO'}", flush=True)
    return row


def markdown(rows: List[Dict[str, Any]], seeds: int) -> str:
    """The docs table."""
    lines = ["| task | protocol | layer | published | ours | ours - published (95% interval) "
             "| 0 inside |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        def show(x: List[float]) -> str:
            return f"{np.mean(x):.2f} ± {np.std(x, ddof=1):.2f}" if len(x) > 1 else f"{x[0]:.2f}"
        protocol = r.get("protocol", "")
        if r.get("kfold"):
            protocol += f" (k={r['kfold']})"
        lines.append(f"| {r['task']} | {protocol} | {r['layer']} | {show(r['published'])} | "
                     f"{show(r['ours'])} | {r['diff']:+.2f} [{r['lo']:+.2f}, {r['hi']:+.2f}] | "
                     f"{'yes' if r['zero_inside'] else 'no'} |")
    return "\n".join(lines) + f"\n\n({seeds} seeds a side; the cosine task has one run a side)"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--published", required=True,
                    help="a checkout of OpenCENIA/Spanish-Sentence-Evaluation")
    ap.add_argument("--cache", required=True, help="a cache holding the tasks' sentences")
    ap.add_argument("--data-dir", required=True, help="the Spanish benchmark's data folder")
    ap.add_argument("--tasks", default=",".join(TASKS), help="task ids (from the ten above)")
    ap.add_argument("--layers", default="last,avg",
                    help="layer specs: state indices, last, avg (default: last,avg)")
    ap.add_argument("--pooling", default="cls", choices=("cls", "mean"),
                    help="cached vectors (cls: what the published batcher reads)")
    ap.add_argument("--seeds", default="1111,1,2,3,4")
    ap.add_argument("--inner-kfold", type=int, default=3,
                    help="K of MC's nested K x K cross-validation, both sides (0: the "
                         "benchmark's 10)")
    ap.add_argument("--published-encoder", default=None, metavar="MODEL",
                    help="end to end: the published side encodes with the published batcher "
                         "(examples/transformer.py) on MODEL instead of reading the cache")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="where both sides train (cuda: the published code runs as written, "
                         "without the CPU shims; DC's 2000-unit MLP needs hours on a laptop)")
    ap.add_argument("--jobs", type=int, default=1, help="published runs in parallel")
    ap.add_argument("--out", default=None,
                    help="every figure as JSON, written after each task; tasks already in "
                         "it are kept, not run again")
    ap.add_argument("--markdown", action="store_true", help="print the docs table at the end")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    from estratos.cache import open_cache
    from estratos.tasks import DataDirs, load_task, select_tasks

    published = str(Path(args.published).resolve())
    if not (Path(published) / "senteval" / "tools" / "validation.py").is_file():
        raise SystemExit(f"--published {args.published}: not a checkout of the Spanish "
                         "benchmark's repository (no senteval/tools/validation.py)")
    task_ids = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in task_ids if t not in TASKS]
    if unknown:
        raise SystemExit(f"--tasks: {unknown} not among {list(TASKS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    with open_cache(args.cache) as cache:
        last = cache.n_states - 1
    layers: List[Any] = []
    for part in args.layers.split(","):
        part = part.strip()
        layers.append(last if part == "last" else part if part == "avg" else int(part))
    labels = [str(x) for x in layers]
    data_dir = str(Path(args.data_dir).resolve())
    dirs = DataDirs.parse([data_dir])

    out_path = Path(args.out) if args.out else None
    rows: List[Dict[str, Any]] = []
    if out_path is not None and out_path.exists():  # earlier tasks of this comparison
        rows = [r for r in json.loads(out_path.read_text()) if "error" not in r]
    done = {r["task"] for r in rows}
    todo = [t for t in task_ids if t not in done]
    if done & set(task_ids):
        print(f"kept from {out_path}: {sorted(done & set(task_ids))}", flush=True)

    def save() -> None:
        if out_path is not None:
            out_path.write_text(json.dumps(rows, indent=1) + "\n")

    os.environ["PYTHONHASHSEED"] = "0"  # spawned workers inherit it (see the docstring)
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(
            args.jobs, mp_context=context, initializer=_install,
            initargs=(published, str(Path(args.cache).resolve()), args.pooling,
                      args.published_encoder, args.device)) as pool:
        # every published run is queued first, so the workers stay busy while ours run here
        plans = {}
        for task_id in todo:
            engine, name = TASKS[task_id]
            (spec,) = select_tasks(task_id)
            kfold = PUBLISHED_KFOLD
            if spec.protocol == "inner-kfold" and args.inner_kfold:
                kfold = args.inner_kfold
                spec = dataclasses.replace(spec, classifier={**spec.classifier,
                                                             "kfold": kfold})
            task_path = data_dir
            if name in PUBLISHED_FOLDER:
                task_path = str(Path(tmp) / name)
                write_published_folder(load_task(spec, dirs), Path(task_path) /
                                       PUBLISHED_FOLDER[name])
            runs = seeds[:1] if spec.protocol == "cosine" else seeds
            jobs = {(label, seed): pool.submit(_published_cell, engine, name, task_path,
                                               layer, seed, kfold)
                    for layer, label in zip(layers, labels) for seed in runs}
            plans[task_id] = (name, spec, kfold, runs, jobs)
        for task_id, (name, spec, kfold, runs, jobs) in plans.items():
            try:
                ours, ours_seconds = run_ours(args.cache, spec, data_dir, layers, runs,
                                              args.pooling, args.device)
                theirs = {key: job.result() for key, job in jobs.items()}
            except Exception as exc:  # noqa: BLE001 (one task's failure must not lose the others)
                print(f"{task_id}: FAILED: {type(exc).__name__}: {exc}", flush=True)
                rows.append({"task": task_id, "error": f"{type(exc).__name__}: {exc}"})
                save()
                continue
            their_seconds = sum(v["seconds"] for v in theirs.values())
            for label in labels:
                keys = [(label, s) for s in runs]
                a = [published_scores(name, theirs[k]["result"])["test"] for k in keys]
                b = [ours[k]["test"] for k in keys]
                row = compare_cell(task_id, label, b, a,
                                   (ours_seconds / len(labels), their_seconds / len(labels)))
                row["protocol"] = spec.protocol
                row["kfold"] = kfold if spec.protocol in ("kfold", "inner-kfold") else None
                # the selection figure (dev, or the cross-validated mean) of every run
                row["seeds"] = runs
                row["published_dev"] = [published_scores(name, theirs[k]["result"]).get("dev")
                                        for k in keys]
                row["ours_dev"] = [ours[k].get("dev") for k in keys]
                rows.append(row)
            print(f"{'':30s} seconds: ours {ours_seconds:.1f}, published {their_seconds:.1f} "
                  f"(kfold {kfold if spec.protocol != 'split' else '-'})", flush=True)
            save()
    cells = [r for r in rows if "error" not in r]
    inside = sum(r["zero_inside"] for r in cells)
    print(f"0 inside the interval for {inside} of {len(cells)} cells", flush=True)
    if args.markdown:
        print(markdown(cells, len(seeds)))
    return 1 if len(cells) < len(rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
