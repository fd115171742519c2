"""Hand-made results lines for the report tests (no test functions here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional


def record(task: str, group: str, layer: Any, seed: int, score: Optional[float], *,
           model: str = "org/beto", revision: str = "r1", metric: str = "accuracy",
           kind: str = "probe", pooling: Optional[str] = "cls", classifier: str = "senteval",
           fallback: Optional[str] = None, test: Optional[Dict[str, Any]] = None,
           schema: int = 1, language: str = "es") -> Dict[str, Any]:
    """A results line as docs/contracts.md defines it (only the fields a report reads)."""
    suite, name = task.split(":")
    return {"schema": schema, "kind": kind, "task": task, "suite": suite, "name": name,
            "group": group, "language": language, "layer": layer, "pooling": pooling, "seed": seed,
            "protocol": "split", "fallback": fallback, "classifier": {"name": classifier},
            "metric": metric, "score": score,
            "test": test if test is not None else {metric: score},
            "model": model, "revision": revision}


def write_lines(path: Path, records: Iterable[Dict[str, Any]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail, encoding="utf-8")
    return path


def fixture_records() -> List[Dict[str, Any]]:
    """Two models, layers 0, 1, avg; BETO with two seeds, MiniLM with one; MiniLM lacks MC
    at layer 1 (a missing cell); PAWS and SPwiki carry fallbacks."""
    out = []
    tasks = [("es-senteval:TASS1", "SC", "accuracy", 50.0, None),
             ("es-senteval:MC", "SC", "accuracy", 70.0, None),
             ("es-senteval:PAWS", "SPC", "accuracy", 60.0, "k-fold on the test file"),
             ("es-senteval:STS17", "SS", "pearson", 65.0, None),
             ("es-discoeval:SPwiki", "SP", "accuracy", 30.0, "trained on valid")]
    for model, revision, seeds, shift in (("org/beto", "r1", (1111, 2222), 4.0),
                                          ("org/mini", "r2", (1111,), 0.0)):
        for li, layer in enumerate((0, 1, "avg")):
            for si, seed in enumerate(seeds):
                for t, (task, group, metric, base, fallback) in enumerate(tasks):
                    if model == "org/mini" and layer == 1 and task.endswith(":MC"):
                        continue
                    score = round(base + shift + 1.5 * li + 0.6 * si - 0.3 * t, 2)
                    test = {metric: score}
                    if task.endswith("PAWS"):
                        test["f1"] = round(score - 5.25, 2)
                    if metric == "pearson":
                        test = {"pearson": score / 100, "spearman": (score - 2) / 100}
                    out.append(record(task, group, layer, seed, score, model=model,
                                      revision=revision, metric=metric, fallback=fallback,
                                      test=test))
    return out


def baseline_records() -> List[Dict[str, Any]]:
    values = {"es-senteval:TASS1": ("SC", "accuracy", 45.0),
              "es-senteval:MC": ("SC", "accuracy", 62.0),
              "es-senteval:PAWS": ("SPC", "accuracy", 55.0),
              "es-senteval:STS17": ("SS", "pearson", 40.0),
              "es-discoeval:SPwiki": ("SP", "accuracy", 20.0)}
    return [record(task, group, None, 1111, score, model="baseline:tfidf",
                   revision="tfidf-v1", metric=metric, kind="baseline", pooling=None,
                   classifier="tfidf", fallback="k-fold on the test file"
                   if task.endswith("PAWS") else None)
            for task, (group, metric, score) in values.items()]
