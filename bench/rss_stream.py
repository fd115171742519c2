"""Benchmark: peak memory of `encode` as the corpus grows, and of `cache verify` / a layer
read on a cache larger than HDF5's chunk cache.

    python bench/rss_stream.py [--sizes 10000,30000,90000] [--cache-mb 300] [--threads 1]

1. encode: a fresh process encodes N generated sentences (a file read line by line) with a
   tiny random BERT (2 layers, 32 dims, so the run is I/O- and bookkeeping-bound, which is
   what this measures), batch by batch into a new cache. Printed: N, the text's UTF-8 size,
   the cache size, and the process's peak RSS. Vectors never accumulate in memory (blocks of
   512 rows are written and dropped); what grows with N is the list of texts and keys.
2. large cache: a cache of --cache-mb MB of vectors (the writer's chunk cache is 64 MB per
   dataset) is written, then a fresh process runs `verify_cache` (reads every chunk) and
   another reads one hidden state of every row; both print peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

WORDS = ("el la los un una perro gato casa niño niña hombre mujer come corre lee escribe "
         "grande pequeño de que y en por con para no su al lo como más pero").split()


def tiny_bert(folder: Path) -> Path:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(WORDS)) + list(
        "abcdefghijklmnopqrstuvwxyzáéíóúñ0123456789.")
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n", encoding="utf-8")
    # the vocabulary path goes positionally: transformers 5 ignores a vocab_file keyword
    tok = BertTokenizerFast(str(folder / "vocab.txt"), do_lower_case=False)
    tok.model_max_length = 64
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(folder)
    return folder


def write_sentences(path: Path, n: int) -> None:
    rng = random.Random(n)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            words = [rng.choice(WORDS) for _ in range(rng.randint(3, 14))]
            fh.write(" ".join(words) + f" {i}.\n")


def child(argv: list) -> None:
    """Run one measured step in this (fresh) process and print JSON with its peak RSS."""
    kind = argv[0]
    if kind == "encode":
        from estratos.encode import encode_sentences

        src, model, out, threads = argv[1:5]
        with open(src, encoding="utf-8") as fh:
            summary = encode_sentences((line for line in fh), model, out, batch_tokens=8192,
                                       threads=int(threads), progress=False)
        extra = {"rows": summary.n_rows, "seconds": round(summary.seconds, 1)}
    elif kind == "verify":
        from estratos.cache import verify_cache

        extra = {"ok": verify_cache(argv[1]).ok}
    else:
        import numpy as np

        from estratos.cache import open_cache

        with open_cache(argv[1]) as cache:
            x = cache.read(np.arange(cache.n_rows), "cls", [cache.n_states - 1])
        extra = {"read_mb": round(x.nbytes / 2**20, 1)}
    print(json.dumps({"maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                         / 1024, 1), **extra}))


def measure(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def big_cache(path: Path, megabytes: int) -> None:
    import numpy as np

    from estratos.cache import schema
    from estratos.cache.writer import CacheWriter
    from estratos.text import sentence_key

    states, dim = 13, 384
    rows = megabytes * 2**20 // (states * dim * 2)
    attrs = {"encoder": "transformers", "model": "bench/random", "revision": "r",
             "tokenizer": "t", "max_length": 128, "lowercase": False, "dtype": "float16",
             "poolings": ("cls",), "n_states": states, "dim": dim}
    writer = CacheWriter.create(schema.partial_path(path), attrs)
    rng = np.random.default_rng(0)
    for lo in range(0, rows, 2048):
        hi = min(rows, lo + 2048)
        texts = [f"frase {i}" for i in range(lo, hi)]
        writer.append([sentence_key(t) for t in texts], texts, [4] * (hi - lo),
                      [False] * (hi - lo),
                      {"cls": rng.standard_normal((hi - lo, states, dim), dtype=np.float32)})
    writer.finish(path)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,30000,90000")
    ap.add_argument("--cache-mb", type=int, default=300)
    ap.add_argument("--threads", default="1")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "model").mkdir()
        model = tiny_bert(tmp / "model")
        print("1. encode, peak RSS by corpus size (tiny BERT, fresh process each)")
        print(f"{'N':>8} {'text MB':>8} {'cache MB':>9} {'peak RSS MB':>12} {'seconds':>8}")
        for n in [int(s) for s in args.sizes.split(",") if s]:
            src, out = tmp / f"s{n}.txt", tmp / f"c{n}.h5"
            write_sentences(src, n)
            r = measure("encode", str(src), str(model), str(out), args.threads)
            print(f"{n:>8} {src.stat().st_size / 2**20:>8.1f} {out.stat().st_size / 2**20:>9.1f} "
                  f"{r['maxrss_mb']:>12.1f} {r['seconds']:>8}")
        print(f"\n2. a cache of {args.cache_mb} MB of vectors (chunk cache: 64 MB per dataset)")
        big = tmp / "big.h5"
        t0 = time.perf_counter()
        big_cache(big, args.cache_mb)
        print(f"written in {time.perf_counter() - t0:.1f}s: {big.stat().st_size / 2**20:.0f} MB")
        v = measure("verify", str(big))
        print(f"verify_cache: ok={v['ok']}, peak RSS {v['maxrss_mb']} MB")
        r = measure("read", str(big))
        print(f"read one state of every row ({r['read_mb']} MB result): peak RSS "
              f"{r['maxrss_mb']} MB")


if __name__ == "__main__":
    main()
