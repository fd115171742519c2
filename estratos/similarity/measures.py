"""The similarity measures, each written once from its formula.

Why two families: linear CKA, debiased CKA and orthogonal Procrustes depend on the sentence
vectors only through feature-space cross-products (``X^T Y``, ``X^T X``, ``Y^T Y``) and
per-row squared norms, so they are computed from :class:`PairStats` (which
:mod:`estratos.similarity.streaming` accumulates over chunks of any number of sentences,
never an n x n matrix); RSA and mutual k-NN need sentence x sentence matrices, so they run
on a seeded subsample (:mod:`estratos.similarity.sampling`).

Every function returns a :class:`Value`: a finite float, or None with the reason it is
undefined (a constant layer, a negative unbiased HSIC under a square root), never NaN.

References (formulas only):
- linear CKA: Kornblith, Norouzi, Lee & Hinton 2019, eq. (4) on centred features;
- unbiased HSIC: Song, Smola, Gretton, Bedo & Borgwardt 2012, Theorem 2; debiased CKA as
  Nguyen, Raghu & Kornblith 2021 (and Kornblith's notebook) define it: unbiased HSICs in
  CKA's ratio. With a linear kernel and centred rows the kernel sums reduce to row norms:
  ``1^T K~ 1 = -sum a``, ``(K~ 1)_i = -a_i`` (``a_i = |x_i|^2``), so the unbiased HSIC
  needs only ``|X^T Y|_F^2``, ``sum a_i b_i``, ``sum a`` and ``sum b``;
- orthogonal Procrustes angular distance: Williams, Kunz, Kornblith & Linderman 2021
  (centred, unit Frobenius norm, ``arccos`` of the nuclear norm of ``X^T Y``; radians,
  0..pi/2);
- RSA: Kriegeskorte, Mur & Bandettini 2008; RDM = 1 - Pearson r between sentence vectors,
  two RDMs compared by the Spearman correlation of their upper triangles;
- mutual k-NN: Huh, Cheung, Wang & Isola 2024; cosine neighbours (self excluded), the mean
  share of each sentence's k neighbours the two spaces have in common.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional

import numpy as np

from estratos.probe.estimators.scaling import FeatureScale
from estratos.stats.metrics import average_ranks_1d, pearson_matrix, pearson_rows

#: a Procrustes similarity (cosine) above this is recomputed from an SVD when it came from
#: a Gram's eigenvalues (angles under 0.045 rad, where arccos magnifies rounding)
NEAR_ZERO_ANGLE = 0.999


@dataclass(frozen=True)
class Value:
    """One measure's result: ``value`` (finite float) or None with ``undefined`` (why);
    ``detail``: what else a reader needs (e.g. the unbiased HSICs behind debiased CKA)."""

    value: Optional[float]
    undefined: Optional[str] = None
    detail: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, value: float, **detail: Any) -> "Value":
        """A finite value, or an undefined one naming the non-finite number."""
        if not math.isfinite(value):
            return cls(None, f"not finite ({value})", detail)
        return cls(float(value), None, detail)


@dataclass(frozen=True)
class PairStats:
    """What the cross-product measures need of two layers X (n, dx) and Y (n, dy), rows
    centred over the same n sentences: ``cross = X^T Y``, ``xx = X^T X``, ``yy = Y^T Y``
    (float64), the sums over rows of ``a_i = |x_i|^2`` and ``b_i = |y_i|^2`` and of their
    products (``aa``, ``bb``, ``ab``)."""

    n: int
    cross: np.ndarray
    xx: np.ndarray
    yy: np.ndarray
    a: float
    b: float
    ab: float
    aa: float
    bb: float

    @classmethod
    def of(cls, x: np.ndarray, y: np.ndarray) -> "PairStats":
        """One shot, from two in-memory matrices (centred here, in float64)."""
        xc, yc = centred(x), centred(y)
        a = np.einsum("ij,ij->i", xc, xc)
        b = np.einsum("ij,ij->i", yc, yc)
        return cls(len(xc), xc.T @ yc, xc.T @ xc, yc.T @ yc, float(a.sum()), float(b.sum()),
                   float(a @ b), float(a @ a), float(b @ b))


def centred(x: np.ndarray) -> np.ndarray:
    """``x`` (n, d) in float64 with each feature's mean taken off, and a constant feature
    (the probe's rule, :meth:`FeatureScale.from_moments`) exactly 0, so a constant layer is
    exactly zero and its measures undefined, never a ratio of rounding residues."""
    xf = np.asarray(x, dtype=np.float64)
    mean = xf.mean(axis=0)
    keep = np.isfinite(FeatureScale.from_moments(mean, xf.std(axis=0)).std)
    return (xf - mean) * keep


def _frob2(m: np.ndarray) -> float:
    return float(np.einsum("ij,ij->", m, m))


def linear_cka_stats(s: PairStats) -> Value:
    """Linear CKA = |X^T Y|_F^2 / (|X^T X|_F |Y^T Y|_F), rows centred."""
    den = math.sqrt(_frob2(s.xx) * _frob2(s.yy))
    if not den > 0:
        return Value(None, "a layer is constant over these sentences")
    return Value.of(_frob2(s.cross) / den)


def hsic_unbiased(frob2_xy: float, sum_ab: float, sum_a: float, sum_b: float, n: int) -> float:
    """Song et al.'s unbiased HSIC with linear kernels of centred rows (see the module
    docstring for the reduction), without the constant factor CKA's ratio cancels."""
    return ((frob2_xy - sum_ab + sum_a * sum_b / ((n - 1) * (n - 2))
             - 2.0 * sum_ab / (n - 2)) / (n * (n - 3)))


def debiased_cka_stats(s: PairStats) -> Value:
    """Debiased CKA = HSIC_u(X, Y) / sqrt(HSIC_u(X, X) HSIC_u(Y, Y)); the three unbiased
    HSICs are recorded as they are. Undefined (never a square root of a negative number)
    when either self-HSIC is not positive; a negative HSIC_u(X, Y) gives a negative CKA."""
    if s.n < 4:
        return Value(None, f"the unbiased HSIC needs at least 4 sentences (got {s.n})")
    xy = hsic_unbiased(_frob2(s.cross), s.ab, s.a, s.b, s.n)
    xx = hsic_unbiased(_frob2(s.xx), s.aa, s.a, s.a, s.n)
    yy = hsic_unbiased(_frob2(s.yy), s.bb, s.b, s.b, s.n)
    detail = {"hsic_xy": xy, "hsic_xx": xx, "hsic_yy": yy}
    if not (xx > 0 and yy > 0):
        return Value(None, "an unbiased self-HSIC is not positive (its square root is not "
                           "taken)", detail)
    return Value.of(xy / math.sqrt(xx * yy), **detail)


def procrustes_stats(s: PairStats, exact: bool = True) -> Value:
    """Orthogonal Procrustes angular distance: arccos(|X^T Y|_* / (|X|_F |Y|_F)) in radians
    (0: one layer is a rotation, scaling and shift of the other; pi/2: orthogonal).
    ``exact``: the nuclear norm from an SVD, else from a Gram's eigenvalues
    (:func:`nuclear_norm`)."""
    nx, ny = float(np.trace(s.xx)), float(np.trace(s.yy))
    if not (nx > 0 and ny > 0):
        return Value(None, "a layer is constant over these sentences")
    ratio = nuclear_norm(s.cross, exact) / math.sqrt(nx * ny)
    if not exact and ratio > NEAR_ZERO_ANGLE:
        # arccos magnifies an error of the ratio near 1 (angle ~ sqrt(2 (1 - ratio))): a
        # layer with itself, or nearly, gets the SVD's nuclear norm
        ratio = nuclear_norm(s.cross, True) / math.sqrt(nx * ny)
    return Value.of(math.acos(min(1.0, max(-1.0, ratio))), similarity=ratio)


def nuclear_norm(m: np.ndarray, exact: bool = True) -> float:
    """The sum of the singular values of ``m`` (float64).

    ``exact``: an SVD (torch's LAPACK: about twice numpy's speed at 576 x 384 on the 2-core
    machine). Otherwise the square roots of the eigenvalues of the smaller Gram (``m^T m``
    or ``m m^T``), in about 0.6 of the time: each singular value is then off by at most
    sqrt(eps) = 1.5e-8 of the largest, less than the rounding that cross-products summed
    from float32 chunks already carry (about 1e-7 of their size), so streamed measures use
    it with float32 products and the SVD with float64 ones (and for angles near 0:
    :data:`NEAR_ZERO_ANGLE`)."""
    if exact:
        import torch

        values = torch.linalg.svdvals(torch.from_numpy(np.ascontiguousarray(m))).numpy()
        return float(values.sum())
    small = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    return float(np.sqrt(np.clip(np.linalg.eigvalsh(small), 0.0, None)).sum())


def linear_cka(x: np.ndarray, y: np.ndarray) -> Value:
    """Linear CKA of two (n, d) matrices (one shot)."""
    return linear_cka_stats(PairStats.of(x, y))


def debiased_cka(x: np.ndarray, y: np.ndarray) -> Value:
    """Debiased linear CKA of two (n, d) matrices (one shot)."""
    return debiased_cka_stats(PairStats.of(x, y))


def procrustes_distance(x: np.ndarray, y: np.ndarray) -> Value:
    """Procrustes angular distance of two (n, d) matrices (one shot)."""
    return procrustes_stats(PairStats.of(x, y))


# ---- sentence x sentence measures (on a subsample) -------------------------------------------

def rdm_ranks(x: np.ndarray) -> np.ndarray:
    """The average ranks (float32: integers and halves below 2^23 are exact there, half the
    memory of float64) of the upper triangle (row-major, diagonal excluded) of
    the RDM ``1 - Pearson r`` between the rows of ``x`` (m, d). A row with no spread over
    its features correlates 0 with every other row (distance 1)."""
    xc = np.asarray(x, dtype=np.float64)
    xc = xc - xc.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(xc, axis=1, keepdims=True)
    u = np.divide(xc, norms, out=np.zeros_like(xc), where=norms > 0)
    r = u @ u.T
    # the upper triangle row by row (a fifth of the time of fancy indexing at m = 2,000)
    rdm = 1.0 - np.concatenate([r[i, i + 1:] for i in range(len(r) - 1)] or [np.empty(0)])
    return average_ranks_1d(rdm).astype(np.float32)


def rsa_from_ranks(ranks_x: np.ndarray, ranks_y: np.ndarray) -> Value:
    """Spearman correlation of two RDMs given as :func:`rdm_ranks` (Pearson of ranks)."""
    if len(ranks_x) < 2:
        return Value(None, "fewer than 3 sentences: no pairs to compare")
    r = float(pearson_rows(ranks_x, ranks_y))
    if not math.isfinite(r):
        return Value(None, "an RDM is constant (every sentence equally far apart)")
    return Value(r)


def rsa_matrix(ranks_x: np.ndarray, ranks_y: np.ndarray) -> List[List[Value]]:
    """RSA of every layer of one stack of :func:`rdm_ranks` ``(a, pairs)`` with every layer
    of another ``(b, pairs)``, as one product (:func:`estratos.stats.metrics.pearson_matrix`)."""
    if ranks_x.shape[1] < 2:
        return [[Value(None, "fewer than 3 sentences: no pairs to compare")] * len(ranks_y)
                for _ in ranks_x]
    r = pearson_matrix(ranks_x, ranks_y)
    return [[Value(float(v)) if math.isfinite(v) else
             Value(None, "an RDM is constant (every sentence equally far apart)")
             for v in row] for row in r]


def rsa(x: np.ndarray, y: np.ndarray) -> Value:
    """RSA of two (m, d) matrices over the same m sentences."""
    return rsa_from_ranks(rdm_ranks(x), rdm_ranks(y))


#: two cosines closer than this are a tie for a k-th nearest neighbour
KNN_TIE = 1e-12


class Neighbours(NamedTuple):
    """The k nearest neighbours of each row (``sets``, (m, k) int64, each row sorted) and
    how many rows have their k-th neighbour tied with the next (``tied``): those rows' sets
    are chosen by tie-breaking, not by the layer."""

    sets: np.ndarray
    tied: int


def knn_sets(x: np.ndarray, k: int) -> Neighbours:
    """The k nearest neighbours (cosine, self excluded) of each row. A tie at the k-th place
    is broken by numpy's partition (deterministic: the same input gives the same sets) and
    counted in :attr:`Neighbours.tied`; a constant layer ties every row."""
    xf = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(xf, axis=1, keepdims=True)
    u = np.divide(xf, norms, out=np.zeros_like(xf), where=norms > 0)
    sim = u @ u.T
    np.fill_diagonal(sim, -np.inf)
    sets = np.sort(np.argpartition(-sim, k - 1, axis=1)[:, :k], axis=1)
    tied = 0
    if sim.shape[1] > k + 1:  # the (k+1)-th neighbour exists besides the row itself
        edge = -np.partition(-sim, (k - 1, k), axis=1)[:, [k - 1, k]]
        tied = int(np.count_nonzero(edge[:, 0] - edge[:, 1] <= KNN_TIE))
    return Neighbours(sets, tied)


def knn_overlap(nx: Neighbours, ny: Neighbours, k: int) -> Value:
    """Mutual k-NN alignment: mean over sentences of |N_x(i) & N_y(i)| / k; undefined when
    either side's neighbours of some sentence are decided by a tie (a constant layer: every
    sentence equally near every other), since the sets would then be tie-breaking's."""
    if len(nx.sets) < k + 1:
        return Value(None, f"fewer than k + 1 = {k + 1} sentences")
    tied = max(nx.tied, ny.tied)
    if tied:
        return Value(None, f"the k-th nearest neighbour of {tied} of {len(nx.sets)} sentences "
                           "is tied with the next (a constant layer ties them all): the sets "
                           "would be chosen by tie-breaking")
    common = (nx.sets[:, :, None] == ny.sets[:, None, :]).sum(axis=(1, 2))
    return Value(float(common.mean() / k))


def mutual_knn(x: np.ndarray, y: np.ndarray, k: int) -> Value:
    """Mutual k-NN alignment of two (m, d) matrices over the same m sentences."""
    if len(x) < k + 1:
        return Value(None, f"fewer than k + 1 = {k + 1} sentences")
    return knn_overlap(knn_sets(x, k), knn_sets(y, k), k)


__all__ = ["KNN_TIE", "Neighbours", "PairStats", "Value", "centred", "debiased_cka",
           "debiased_cka_stats", "hsic_unbiased", "knn_overlap", "knn_sets", "linear_cka",
           "linear_cka_stats", "mutual_knn",
           "nuclear_norm", "procrustes_distance", "procrustes_stats", "rdm_ranks", "rsa",
           "rsa_from_ranks", "rsa_matrix"]
