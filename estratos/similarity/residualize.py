"""A covariate regressed out of every layer before similarity is measured
(``estratos similarity --residualize length``).

Why: two caches of the same sentences agree on anything both encode, and both encode how
long a sentence is (for instance, mean pooling averages over more tokens), so
part of any cross-model similarity, and most of a model's similarity to a random network of
its own architecture, can be sentence length. Regressing length out of each layer and
measuring again says how much of a similarity is left without it.

What is regressed out: for each cache, each sentence's token count under that cache's
tokenizer as encoded (``CacheReader.token_counts``), as three columns ``n``, ``n^2`` and
``log n``; between two caches both caches' columns (their tokenizers cut sentences
differently), so both sides lose the same covariates. The columns are centred and
standardized, then turned into an orthonormal basis Q (n x r; columns whose singular value
is below 1e-8 of the largest are dropped, so one tokenizer's three columns given twice count
once). Each layer's residual is ``X - Q (Q^T X)``: the least-squares fit on an intercept and
the covariates, taken off. ``Q^T X`` (r x d per layer) is summed over chunks in a pass
before the others (:meth:`Residualizer.fit`), so every later read of a chunk, or of the
subsample, is residualized on the way (:meth:`Residualizer.apply`), and every measure,
reading and interval runs unchanged on the residuals. The share of each layer's variance
the covariates explain, ``|Q^T X~|_F^2 / |X~|_F^2``, is recorded beside each value.
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

#: singular values below this share of the largest are dropped from the covariate basis
RANK_TOLERANCE = 1e-8


def length_covariates(counts: Sequence[np.ndarray]) -> np.ndarray:
    """(n, 3 k) float64: ``n``, ``n^2`` and ``log n`` of each of the k token-count vectors
    (a count below 1 is taken as 1: an empty encoding has no length to take the log of)."""
    columns = []
    for c in counts:
        n = np.maximum(np.asarray(c, dtype=np.float64), 1.0)
        columns += [n, n * n, np.log(n)]
    return np.stack(columns, axis=1)


def orthonormal_basis(covariates: np.ndarray) -> np.ndarray:
    """An orthonormal basis (n, r) of the centred covariate columns (each standardized
    first; a constant column, or one that repeats others, adds nothing)."""
    c = np.asarray(covariates, dtype=np.float64)
    c = c - c.mean(axis=0)
    scale = c.std(axis=0)
    c = c[:, scale > 0] / scale[scale > 0]
    if not c.shape[1]:
        return np.zeros((len(c), 0))
    u, s, _ = np.linalg.svd(c, full_matrices=False)
    return u[:, s > RANK_TOLERANCE * s[0]]


class Residualizer:
    """The residuals of one cache's layers on a covariate basis ``Q`` (n, r), rows in the
    sentence set's order: :meth:`add` each chunk and :meth:`finish` (or :meth:`fit`), then
    :meth:`apply` to any rows."""

    def __init__(self, basis: np.ndarray, n_layers: int) -> None:
        self.basis = basis
        self.coef: List[Optional[np.ndarray]] = [None] * n_layers
        self.explained: List[Optional[float]] = [None] * n_layers
        self._coef: List[np.ndarray] = []
        self._squares: List[float] = []
        self._sums: List[np.ndarray] = []
        self._n = 0

    def add(self, positions: np.ndarray, xs: Sequence[np.ndarray]) -> None:
        """One chunk: the positions of its rows in the sentence set and the layers' rows."""
        q = self.basis[positions]
        if not self._coef:
            self._coef = [np.zeros((q.shape[1], x.shape[1])) for x in xs]
            self._squares = [0.0] * len(xs)
            self._sums = [np.zeros(x.shape[1]) for x in xs]
        for i, x in enumerate(xs):
            xf = np.asarray(x, dtype=np.float64)
            self._coef[i] += q.T @ xf
            self._squares[i] += float(np.einsum("ij,ij->", xf, xf))
            self._sums[i] += xf.sum(axis=0)
        self._n += len(positions)

    def finish(self) -> None:
        """``Q^T X`` of each layer over every chunk added, and the share of its variance
        the covariates explain."""
        for i, b in enumerate(self._coef):
            centred_ss = self._squares[i] - float(self._sums[i] @ self._sums[i]) / max(self._n, 1)
            self.coef[i] = b
            self.explained[i] = (float(np.einsum("ij,ij->", b, b)) / centred_ss
                                 if centred_ss > 0 else None)

    def fit(self, chunks: Iterable[Tuple[np.ndarray, Sequence[np.ndarray]]]) -> None:
        """:meth:`add` each (positions, layers' rows) chunk, then :meth:`finish`."""
        for positions, xs in chunks:
            self.add(positions, xs)
        self.finish()

    def apply(self, positions: np.ndarray, xs: Sequence[np.ndarray]) -> List[np.ndarray]:
        """The rows of each layer at ``positions`` minus their fit on the covariates, in the
        rows' dtype."""
        q = self.basis[positions]
        out = []
        for x, b in zip(xs, self.coef):
            if b is None:
                raise RuntimeError("Residualizer.apply before fit")
            out.append((np.asarray(x, dtype=np.float64) - q @ b).astype(x.dtype))
        return out


__all__ = ["RANK_TOLERANCE", "Residualizer", "length_covariates", "orthonormal_basis"]
