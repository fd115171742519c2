"""Benchmark: a GPU node, end to end, as a user runs it (about 7 minutes on one H100, 16 cores).

    python bench/gpu_node.py --data-dir ES_DIR --model MINILM_DIR [--tokenizer DECODER_TOKENIZER]
                             [--out OUT] [--probe-limit 200] [--smoke]

Every step is a fresh ``python -m estratos`` process, timed from outside, with ``nvidia-smi``
sampling the GPU's utilisation every half second (its mean over the step is printed):

1. ``encode`` MiniLM on es-senteval + es-discoeval:DCopus, ``--device cuda``, defaults: wall
   time, the time estratos reports as encoding, and the time outside it;
2. ``probe`` that grid, seed 1111, every layer spec, default options (``--device auto``: the
   GPU and every core at once; ``--jobs`` defaults to the cores): wall time, cells, the
   placement estratos logged, seconds per task and device;
3. ``probe --device cuda`` alone on one task per protocol (split, pairs, k-fold,
   inner-k-fold, relatedness, cosine), compared cell by cell with step 2's CPU cells (score
   difference, identical cells) and second by second (GPU against one core);
4. the bfloat16 matmul peak, then a SmolLM2-1.7B-shaped decoder (LlamaForCausalLM, hidden
   2048, 24 layers, random weights in bfloat16) built on the GPU and ``encode``d on 20,000
   sentences of TASS1 and SICK with ``--model-dtype bfloat16 --dtype bfloat16``: tokens/s and
   the share of the peak over the encoding and over the wall (forward flops = 2 x parameters
   x tokens);
5. the DC probe's training step alone (an MLP of 2,000 hidden units on 6 x 384 features,
   8 layer specs: what bounds step 2 on the GPU), through the real trainer and a bare torch
   loop of the same shapes (``bench/probe_step.py --device cuda``: ms per step each), then
   under torch's profiler, its top ops by GPU time in OUT/dc-profile.log.

Writes OUT/summary.json, each step's log and the results files; prints a summary. ``--smoke``
runs the same code on the CPU with a two-task grid and a tiny decoder (to check the script,
not to measure).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
ENCODE_TASKS = "es-senteval,es-discoeval:DCopus"
#: one task per protocol for the GPU-against-CPU comparison
PROTOCOL_TASKS = ["es-senteval:TASS1", "es-senteval:SICKEntailment", "es-senteval:SQC",
                  "es-senteval:MC", "es-senteval:SICKRelatedness", "es-senteval:STS14"]
DECODER = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
               num_attention_heads=32, num_key_value_heads=32, vocab_size=49152,
               max_position_embeddings=8192, tie_word_embeddings=True)


class GpuSampler:
    """``nvidia-smi`` every 0.5 s in the background: (time, utilisation %, memory MiB)."""

    def __init__(self) -> None:
        self.samples: List[tuple] = []
        self.proc: Optional[subprocess.Popen] = None
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                 "--format=csv,noheader,nounits", "-lms", "500"],
                stdout=subprocess.PIPE, text=True)
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                util, mem = (float(v) for v in line.strip().split(",")[:2])
            except ValueError:
                continue
            self.samples.append((time.monotonic(), util, mem))

    def window(self, start: float, end: float) -> Dict[str, Any]:
        inside = [s for s in self.samples if start <= s[0] <= end]
        if not inside:
            return {"util_mean": None, "mem_max_mib": None, "samples": 0}
        return {"util_mean": round(sum(s[1] for s in inside) / len(inside), 1),
                "mem_max_mib": max(s[2] for s in inside), "samples": len(inside)}

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()


def run(name: str, args: Sequence[str], out: Path, sampler: GpuSampler,
        limit: float) -> Dict[str, Any]:
    """Run ``python -m estratos ARGS`` (or any argv starting with python), timed, its output
    in OUT/NAME.log."""
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    argv = list(args) if args[0] == sys.executable else [sys.executable, "-m", "estratos",
                                                          *args]
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=limit)
        rc, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        rc = 124
        text = ((exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else
                (exc.stdout or "")) + ((exc.stderr or b"").decode()
                                      if isinstance(exc.stderr, bytes) else (exc.stderr or ""))
    wall = time.monotonic() - start
    (out / f"{name}.log").write_text(" ".join(map(str, argv)) + "\n" + text)
    step = {"name": name, "rc": rc, "wall_s": round(wall, 2),
            **sampler.window(start, start + wall)}
    print(f"[{name}] rc={rc} wall={wall:.1f}s util={step['util_mean']}%", flush=True)
    if rc not in (0, 124):
        print(text[-3000:], flush=True)
    return step


def encoding_seconds(log: str) -> Optional[float]:
    """The encoding time estratos reports ("... over X s of encoding")."""
    import re

    m = re.search(r"over ([0-9.]+)s of encoding", log)
    return float(m.group(1)) if m else None


def read_jsonl(path: Path) -> List[Dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def per_task(rows: Sequence[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = defaultdict(lambda: {"cells": 0, "seconds": 0.0,
                                                          "devices": set()})
    for r in rows:
        t = out[r["task"]]
        t["cells"] += 1
        t["seconds"] += float(r.get("seconds") or 0.0)
        t["devices"].add(str(r.get("device")))
    return {k: {**v, "seconds": round(v["seconds"], 2), "devices": sorted(v["devices"])}
            for k, v in out.items()}


def compare(gpu: Sequence[Dict[str, Any]], cpu: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """GPU cells against the CPU cells of the same (task, layer, seed)."""
    key = lambda r: (r["task"], str(r["layer"]), r["seed"])  # noqa: E731
    by = {key(r): r for r in cpu if str(r.get("device")) == "cpu"}
    per: Dict[str, Dict[str, Any]] = defaultdict(lambda: {"pairs": 0, "identical": 0,
                                                          "max_abs_diff": 0.0,
                                                          "gpu_s": 0.0, "cpu_s": 0.0})
    for g in gpu:
        c = by.get(key(g))
        if c is None:
            continue
        p = per[f"{g['task']} ({g['protocol']})"]
        p["pairs"] += 1
        a, b = g.get("score"), c.get("score")
        if a == b:
            p["identical"] += 1
        elif a is not None and b is not None:
            p["max_abs_diff"] = max(p["max_abs_diff"], abs(a - b))
        p["gpu_s"] += float(g.get("seconds") or 0)
        p["cpu_s"] += float(c.get("seconds") or 0)
    return {k: {**v, "gpu_s": round(v["gpu_s"], 2), "cpu_s": round(v["cpu_s"], 2)}
            for k, v in per.items()}


def bf16_peak(device: str) -> float:
    import torch

    n = 8192 if device == "cuda" else 512
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    reps = 30 if device == "cuda" else 2
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    return 2 * n ** 3 * reps / (time.perf_counter() - t)


def build_decoder(folder: Path, tokenizer: Path, device: str, smoke: bool) -> int:
    """A random-weight Llama decoder of the 1.7B shape (bfloat16) with ``tokenizer``'s files;
    returns its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = dict(DECODER)
    if smoke:
        shape.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4)
    config = LlamaConfig(**shape, torch_dtype="bfloat16")
    with torch.device(device):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    for f in tokenizer.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges")):
            shutil.copy(f, folder / f.name)
    return sum(p.numel() for p in model.parameters())


def decoder_sentences(data_dir: Path, out: Path, n: int) -> int:
    """``n`` sentences of TASS1 and SICK (estratos's own reading), one per line; returns the
    count written."""
    sys.path.insert(0, str(REPO))
    from estratos.tasks import DataDirs, load_task, select_tasks

    dirs = DataDirs.parse([str(data_dir)])
    seen: Dict[str, None] = {}
    for spec in select_tasks("es-senteval:TASS1,es-senteval:SICKEntailment"):
        for s in load_task(spec, dirs).sentences:
            seen.setdefault(s.replace("\n", " "), None)
    lines = list(seen)[:n]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def count_tokens(folder: Path, path: Path, max_length: int = 512) -> int:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    lines = path.read_text(encoding="utf-8").splitlines()
    ids = tok(lines, truncation=True, max_length=max_length)["input_ids"]
    return sum(len(i) for i in ids)


def dc_step(out: Path, sampler: GpuSampler, device: str, smoke: bool) -> Dict[str, Any]:
    """Step 5: the DC probe's training step, timed (trainer against a bare loop), then
    profiled."""
    script = str(REPO / "bench" / "probe_step.py")
    steps = "3" if smoke else "200"
    step = run("dc-step", [sys.executable, script, "--probe", "dc", "--device", device,
                           "--steps", steps, "--repeats", "1" if smoke else "3"],
               out, sampler, 120)
    text = (out / "dc-step.log").read_text()
    for line in text.splitlines():
        if "estratos trainer:" in line:
            words = line.split()
            step["trainer_ms_per_step"] = float(words[2])
            step["bare_ms_per_step"] = float(words[7])
    profiled = run("dc-profile", [sys.executable, script, "--probe", "dc", "--device", device,
                                  "--steps", "3" if smoke else "50", "--profile"],
                   out, sampler, 120)
    step["profile_rc"] = profiled["rc"]
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", required=True, type=Path)
    ap.add_argument("--model", required=True, type=Path, help="MiniLM folder")
    ap.add_argument("--tokenizer", type=Path, default=None,
                    help="tokenizer folder for the decoder (default: --model's)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-node-out")))
    ap.add_argument("--work", type=Path, default=Path("/tmp/estratos-gpu-node"))
    ap.add_argument("--probe-limit", type=float, default=200.0)
    ap.add_argument("--skip", default="",
                    help="steps to skip: encode,probe,cuda,decoder,dc-step")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    out, work = args.out, args.work
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.smoke else "cuda"
    tasks = "es-senteval:TASS1,es-senteval:SQC" if args.smoke else ENCODE_TASKS
    data = str(args.data_dir)
    sampler = GpuSampler()
    summary: Dict[str, Any] = {"device": device, "cores": os.cpu_count(), "steps": {}}
    try:
        import torch
        import transformers

        summary["versions"] = {"torch": torch.__version__,
                               "transformers": transformers.__version__,
                               "gpu": torch.cuda.get_device_name(0)
                               if torch.cuda.is_available() else None}
        cache = work / "mini.h5"
        if "encode" not in skip:
            if cache.exists():
                cache.unlink()
            step = run("encode", ["-vv", "encode", "--model", str(args.model), "--tasks", tasks,
                                  "--data-dir", data, "--out", str(cache), "--device", device],
                       out, sampler, 300)
            log = (out / "encode.log").read_text()
            step["encoding_s"] = encoding_seconds(log)
            if step["encoding_s"] is not None:
                step["outside_encoding_s"] = round(step["wall_s"] - step["encoding_s"], 2)
            summary["steps"]["encode"] = step
        auto = out / "auto.jsonl"
        if "probe" not in skip:
            auto.unlink(missing_ok=True)
            probe = ["probe", "--cache", str(cache), "--tasks", tasks, "--data-dir", data,
                     "--layers", "all", "--seeds", "1111", "--out", str(auto)]
            if args.smoke:
                probe += ["--jobs", "2"]
            step = run("probe-auto", ["-v", *probe], out, sampler, args.probe_limit)
            rows = read_jsonl(auto)
            step["cells"] = len(rows)
            step["tasks"] = per_task(rows)
            log = (out / "probe-auto.log").read_text()
            step["placed"] = [line.split("placed ", 1)[1] for line in log.splitlines()
                              if " placed " in line or line.startswith("placed ")]
            step["speeds"] = [line.split("probe speed, ", 1)[1] for line in log.splitlines()
                              if "probe speed, " in line]
            summary["steps"]["probe-auto"] = step
        if "cuda" not in skip:
            gpu = out / "cuda.jsonl"
            gpu.unlink(missing_ok=True)
            chosen = ("es-senteval:TASS1,es-senteval:SQC" if args.smoke else
                      ",".join(PROTOCOL_TASKS))
            step = run("probe-cuda", ["probe", "--cache", str(cache), "--tasks", chosen,
                                      "--data-dir", data, "--layers", "all", "--seeds", "1111",
                                      "--device", device, "--jobs", "1", "--out", str(gpu)],
                       out, sampler, 150)
            step["cells"] = len(read_jsonl(gpu))
            step["against_cpu"] = compare(read_jsonl(gpu), read_jsonl(auto))
            summary["steps"]["probe-cuda"] = step
        if "decoder" not in skip:
            peak = bf16_peak(device)
            folder = work / "decoder"
            shutil.rmtree(folder, ignore_errors=True)
            t0 = time.monotonic()
            params = build_decoder(folder, args.tokenizer or args.model, device, args.smoke)
            build_s = time.monotonic() - t0
            if device == "cuda":
                torch.cuda.empty_cache()
            sentences = work / "decoder.txt"
            n = decoder_sentences(args.data_dir, sentences, 200 if args.smoke else 20000)
            tokens = count_tokens(folder, sentences)
            big = work / "big.h5"
            big.unlink(missing_ok=True)
            step = run("decoder", ["encode", "--model", str(folder), "--sentences",
                                   str(sentences), "--out", str(big), "--device", device,
                                   "--model-dtype", "bfloat16", "--dtype", "bfloat16",
                                   "--pooling", "last", "--pooling", "mean"],
                       out, sampler, 240)
            enc = encoding_seconds((out / "decoder.log").read_text())
            flops = 2.0 * params * tokens
            step.update(params=params, sentences=n, tokens=tokens, build_s=round(build_s, 1),
                        bf16_peak_tflops=round(peak / 1e12, 1), encoding_s=enc)
            if enc:
                step["tokens_per_s"] = round(tokens / enc)
                step["peak_share_encoding"] = round(flops / enc / peak, 3)
            step["peak_share_wall"] = round(flops / step["wall_s"] / peak, 3)
            summary["steps"]["decoder"] = step
            big.unlink(missing_ok=True)
        if "dc-step" not in skip:
            summary["steps"]["dc-step"] = dc_step(out, sampler, device, args.smoke)
    finally:
        sampler.close()
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps(summary, indent=1, default=str))


if __name__ == "__main__":
    main()
