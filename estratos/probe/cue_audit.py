"""The cue audit of ``synthetic-es``: how well each surface cue alone solves each task.

A synthetic task is built to test one property (a verb's tense, the depth of a relative
chain, word order...). If a cue simpler than that property (the identity of the first or
last word, the length, the count of a function word, of ``que``, of ``-s`` endings, of
punctuation; :data:`estratos.probe.cues.SINGLE_CUES`) scores well above the majority rate, a
probe that scores well may only have read the cue. The generator
(:mod:`estratos.tasks.synthetic`) is built so that every such cue stays within
:data:`MARGIN` points of the majority rate; ``tests/test_synthetic_cues.py`` and
``bench/synthetic_cues.py`` check it with :func:`cue_scores`.

Scoring: a multinomial logistic regression (scikit-learn, lbfgs) per cue on the task's
``tr`` rows, its L2 chosen from the probes' grid on ``va`` accuracy (``C = 1 / (l2 * n)``,
as the baselines translate it), accuracy in percent on ``te``; the cue's features are fitted
on ``tr`` only.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from estratos.probe.cues import SINGLE_CUES
from estratos.vocab import DEFAULT_L2_GRID

#: points above the majority rate that a cue may reach on a 6,000-per-task build
MARGIN = 5.0
#: cues that are what a task names, or a count of it, so they are not held to the margin:
#: Length is the number of tokens, and every count grows with it
EXEMPT: Mapping[str, frozenset] = {
    "Length": frozenset({"tokens", "characters", "function words", "que", "-s endings",
                         "punctuation"}),
}
MAX_ITER = 1000


def majority_rate(rows: Sequence[Tuple[str, str, str]], split: str = "te") -> float:
    """Percent of ``split``'s examples in its most frequent label."""
    counts = Counter(label for s, label, _ in rows if s == split)
    return 100.0 * max(counts.values()) / sum(counts.values())


def cue_scores(rows: Sequence[Tuple[str, str, str]],
               cues: Optional[Sequence[str]] = None) -> Dict[str, float]:
    """``{cue: test accuracy in percent}`` for ``rows`` ``(split, label, sentence)`` of one
    task (see the module docstring for the protocol); ``cues`` defaults to every one."""
    names = list(SINGLE_CUES) if cues is None else list(cues)
    sentences = [sentence for _, _, sentence in rows]
    splits = np.array([split for split, _, _ in rows])
    labels = np.array([label for _, label, _ in rows])
    tr, va, te = (np.flatnonzero(splits == s) for s in ("tr", "va", "te"))
    out: Dict[str, float] = {}
    with threadpool_limits(limits=1):
        for name in names:
            X = SINGLE_CUES[name](sentences, tr)
            best: Optional[Tuple[float, LogisticRegression]] = None
            for l2 in DEFAULT_L2_GRID:
                model = LogisticRegression(C=1.0 / (l2 * len(tr)), max_iter=MAX_ITER)
                model.fit(X[tr], labels[tr])
                dev = float(np.mean(model.predict(X[va]) == labels[va]))
                if best is None or dev > best[0]:
                    best = (dev, model)
            assert best is not None
            out[name] = 100.0 * float(np.mean(best[1].predict(X[te]) == labels[te]))
    return out


def over_margin(task: str, scores: Mapping[str, float], majority: float,
                margin: float = MARGIN) -> Dict[str, float]:
    """The cues of ``scores`` (not exempt for ``task``) above ``majority + margin``."""
    exempt = EXEMPT.get(task, frozenset())
    return {name: score for name, score in scores.items()
            if name not in exempt and score > majority + margin}
