"""The shape of one layer's space: anisotropy, rogue dimensions, massive activations, norms,
effective rank and intrinsic dimension.

Why streamed: anisotropy, each dimension's share of it, the largest activation, the norm
profile and the covariance behind the effective rank are sums over sentences, so they use
every sentence of the set in one pass (:class:`GeometryAccumulator`, after
:func:`estratos.similarity.streaming.layer_moments`); only the median activation and the
TwoNN estimate, which need order statistics or nearest neighbours, read the seeded
subsample.

Definitions (formulas only):
- anisotropy: the mean cosine over all pairs of distinct sentences,
  ``(|sum u|^2 - sum |u|^2) / (n (n - 1))`` for unit rows u (Ethayarajh 2019 estimates it
  from random pairs; all pairs is its exact value); dimension k contributes
  ``((sum u_k)^2 - sum u_k^2) / (n (n - 1))`` and its share is that over the whole
  (Timkey & van Schijndel 2021's rogue dimensions); zero rows have no direction and are left
  out (counted). That contribution is about ``mean(u_k)^2``: an offset (a dimension with
  the same large value in every sentence carries it) counts as much as a spread. Each top
  dimension also carries its share of the variance and of the centred Gram, and the
  dimensions with the largest variance shares are listed beside them;
- a dimension's share of the variance: ``C_kk / tr C`` with ``C = X~^T X~`` (X~ the rows
  centred over the sentences), which is also its share of the trace of the centred Gram
  ``K = X~ X~^T``, Procrustes's normalisation (``|X~|_F^2 = tr K``); its share of the centred
  Gram (``gram_share``): ``sum_l C_kl^2 / |C|_F^2``, its part of ``|K|_F^2 = |C|_F^2``,
  linear CKA's normalisation (``sum_l C_kl^2 = x~_k^T K x~_k``). CKA and Procrustes centre
  the data, so these shares, not the anisotropy share or the max / median ratio, say how
  much of what they compare one dimension holds; RSA's correlation distance and mutual
  k-NN's cosine do not centre over sentences, so an offset reaches them (a little);
- max / median absolute activation: massive activations (Sun et al. 2024) make the ratio
  large;
- effective rank: ``exp(-sum p log p)`` of the covariance spectrum normalised to sum 1
  (Roy & Vetterli 2007, on the covariance);
- TwoNN (Facco, d'Errico, Rodriguez & Laio 2017): mu = r2 / r1 of each point's two nearest
  neighbours; the slope through the origin of ``-log(1 - F(mu))`` against ``log mu``,
  the largest 10% of mu left out as in the paper. Exact duplicate vectors are dropped first
  (their r1 is 0) and counted; so are points whose nearest distance is still 0 in float64.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import numpy as np

from estratos.similarity.measures import Value
from estratos.similarity.streaming import PRODUCTS, Moments

#: the geometry measures, in the order records and tables show them
GEOMETRY_MEASURES = ("anisotropy", "max-abs", "norm", "effective-rank", "twonn")
#: rogue dimensions named per layer (largest contributions to the anisotropy)
TOP_DIMS = 3
#: TwoNN's share of the largest mu left out of the fit (Facco et al. 2017)
TWONN_DISCARD = 0.1


class _Layer:
    """Sums of one layer under one reading (raw or standardized)."""

    def __init__(self, d: int) -> None:
        self.u_sum = np.zeros(d)
        self.u_sq = np.zeros(d)
        self.unit_rows = 0
        self.zero_rows = 0
        self.max_abs = 0.0
        self.max_dim = 0
        self.norms: List[np.ndarray] = []

    def add(self, x: np.ndarray) -> None:
        """Rows ``x`` (c, d), float32 or float64; sums kept in float64."""
        norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))
        self.norms.append(norms)
        keep = norms > 0
        u = x[keep] / norms[keep, None].astype(x.dtype)
        self.u_sum += u.sum(axis=0, dtype=np.float64)
        self.u_sq += (u * u).sum(axis=0, dtype=np.float64)
        self.unit_rows += int(keep.sum())
        self.zero_rows += int((~keep).sum())
        if x.size:
            flat = int(np.argmax(np.abs(x)))
            value = float(abs(x.flat[flat]))
            if value > self.max_abs:
                self.max_abs, self.max_dim = value, flat % x.shape[1]


class GeometryAccumulator:
    """Pass two of ``estratos geometry`` over chunks of every layer (see the module
    docstring); ``measures(i, standardized, sample)`` gives layer i's values."""

    def __init__(self, moments: Sequence[Moments], products: str = "float32") -> None:
        if products not in PRODUCTS:
            raise ValueError(f"products must be one of {PRODUCTS}, not {products!r}")
        self.dtype = np.dtype(products)
        self.moments = list(moments)
        self.inverse = [m.inverse_scale for m in self.moments]
        self.cov = [np.zeros((len(m.mean),) * 2) for m in self.moments]
        self.layers = [[_Layer(len(m.mean)) for m in self.moments] for _ in range(2)]

    def standardize(self, i: int, x: np.ndarray) -> np.ndarray:
        """Layer i's rows z-scored with the whole set's statistics (constant features 0)."""
        return (np.asarray(x, dtype=np.float64) - self.moments[i].mean) * self.inverse[i]

    def add(self, xs: Sequence[np.ndarray]) -> None:
        """One chunk: (c, d) rows of every layer."""
        for i, x in enumerate(xs):
            # in the products' precision (float32: finer than the cache's 16-bit values),
            # every sum in float64, as for the similarity products
            xf = np.asarray(x, dtype=self.dtype)
            inv = self.inverse[i].astype(self.dtype)
            xc = (xf - self.moments[i].mean.astype(self.dtype)) * (inv > 0)
            self.cov[i] += xc.T @ xc
            self.layers[0][i].add(xf)
            self.layers[1][i].add(xc * inv)

    def measures(self, i: int, standardized: bool, sample: np.ndarray) -> Dict[str, Value]:
        """Every geometry measure of layer i; ``sample``: the subsample's rows of that layer
        (raw; standardized here when asked)."""
        layer = self.layers[int(standardized)][i]
        rows = self.standardize(i, sample) if standardized else np.asarray(sample, np.float64)
        cov = self.cov[i]
        if standardized:
            cov = cov * self.inverse[i][:, None] * self.inverse[i][None, :]
        gram = gram_shares(cov)
        return {"anisotropy": anisotropy(layer, np.diag(cov), gram),
                "max-abs": max_abs(layer, rows, np.diag(cov), gram),
                "norm": norm_profile(layer),
                "effective-rank": effective_rank(cov),
                "twonn": twonn(rows)}


def variance_shares(variances: np.ndarray) -> np.ndarray:
    """Each dimension's share of the total variance: its share of the centred Gram matrix's
    trace too (the trace of the centred Gram is n times the summed variances), which
    Procrustes normalises by; all zeros for a constant layer."""
    v = np.maximum(np.asarray(variances, dtype=np.float64), 0.0)
    total = float(v.sum())
    return v / total if total > 0 else np.zeros_like(v)


def gram_shares(cov: np.ndarray) -> np.ndarray:
    """Each dimension's share of the centred Gram's squared Frobenius norm,
    ``sum_l C_kl^2 / |C|_F^2`` for ``C = X~^T X~`` (``|X~ X~^T|_F = |C|_F``: what linear
    CKA normalises by); all zeros for a constant layer."""
    c = np.asarray(cov, dtype=np.float64)
    rows = np.einsum("kl,kl->k", c, c)
    total = float(rows.sum())
    return rows / total if total > 0 and math.isfinite(total) else np.zeros(len(c))


def _shares(k: int, var: np.ndarray, gram: Optional[np.ndarray]
            ) -> Dict[str, Optional[float]]:
    """Dimension k's shares as a record's detail holds them: None when the layer is
    constant (no variance to share)."""
    constant = not var.any()
    found: Dict[str, Optional[float]] = {"variance_share": None if constant else float(var[k])}
    if gram is not None:
        found["gram_share"] = None if constant else float(gram[k])
    return found


def anisotropy(layer: _Layer, variances: np.ndarray, gram: Optional[np.ndarray] = None
               ) -> Value:
    """The mean cosine, its top dimensions with their share of it and their share of the
    variance (``variances``: per dimension, any common scale) and of the centred Gram
    (``gram``: :func:`gram_shares`, when given), and the top dimensions by variance. Why
    both shares: a dimension can carry most of the anisotropy as a constant offset while
    holding none of the variance (MiniLM's [CLS] dimension 99), and measures that centre
    the data (CKA, Procrustes) see only the variance."""
    m = layer.unit_rows
    if m < 2:
        return Value(None, "fewer than 2 sentences with a non-zero vector",
                     {"zero_rows": layer.zero_rows})
    pairs = m * (m - 1)
    per_dim = (layer.u_sum ** 2 - layer.u_sq) / pairs
    # a mean of cosines lies in [-1 / (m - 1), 1]; unit rows rounded to float32 can carry
    # it a few 1e-8 past an end (identical rows), which is rounding, not geometry
    total = float(per_dim.sum())
    if math.isfinite(total):
        total = min(1.0, max(-1.0 / (m - 1), total))
    top = np.argsort(-per_dim, kind="stable")[:TOP_DIMS]
    var = variance_shares(variances)
    shares = [{"dim": int(k), "share": (float(per_dim[k] / total) if abs(total) > 1e-12
                                         else None), **_shares(k, var, gram)} for k in top]
    by_variance = [{"dim": int(k), **_shares(k, var, gram)}
                   for k in np.argsort(-var, kind="stable")[:TOP_DIMS]] if var.any() else []
    return Value.of(total, top_dims=shares, top_variance_dims=by_variance,
                    zero_rows=layer.zero_rows)


def max_abs(layer: _Layer, sample: np.ndarray, variances: Optional[np.ndarray] = None,
            gram: Optional[np.ndarray] = None) -> Value:
    """The largest absolute activation, its dimension and its ratio to the subsample's
    median; given ``variances`` (and ``gram``), that dimension's share of the variance (and
    of the centred Gram): a massive activation that is the same in every sentence is an
    offset, which CKA and Procrustes centre away."""
    median = float(np.median(np.abs(sample))) if sample.size else 0.0
    ratio = layer.max_abs / median if median > 0 else None
    extra = ({} if variances is None
             else _shares(layer.max_dim, variance_shares(variances), gram))
    return Value.of(layer.max_abs, dim=layer.max_dim, median_abs=median, ratio=ratio,
                    median_of=len(sample), **extra)


def norm_profile(layer: _Layer) -> Value:
    norms = np.concatenate(layer.norms) if layer.norms else np.zeros(0)
    if not len(norms):
        return Value(None, "no sentences")
    return Value.of(float(norms.mean()), std=float(norms.std()), min=float(norms.min()),
                    median=float(np.median(norms)), max=float(norms.max()))


def effective_rank(cov: np.ndarray) -> Value:
    """exp of the entropy of the covariance spectrum normalised to sum 1."""
    eig = np.clip(np.linalg.eigvalsh(cov), 0.0, None)
    total = float(eig.sum())
    if not total > 0:
        return Value(None, "the layer is constant over these sentences")
    p = eig[eig > 0] / total
    return Value.of(math.exp(float(-(p * np.log(p)).sum())), dim=len(cov))


def _two_nearest(x: np.ndarray) -> np.ndarray:
    """Each row's two smallest distances to other rows, (m, 2) float64: candidates from the
    Gram matrix, their distances then computed from the differences (no cancellation)."""
    sq = np.einsum("ij,ij->i", x, x)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (x @ x.T)
    np.fill_diagonal(d2, np.inf)
    take = min(4, len(x) - 1)
    cand = np.argpartition(d2, take - 1, axis=1)[:, :take]
    exact = np.linalg.norm(x[:, None, :] - x[cand], axis=2)
    return np.sort(exact, axis=1)[:, :2]


def twonn(x: np.ndarray) -> Value:
    """TwoNN intrinsic dimension of the rows of ``x`` (see the module docstring)."""
    xf = np.asarray(x, dtype=np.float64)
    unique = np.unique(xf, axis=0) if len(xf) else xf
    duplicates = len(xf) - len(unique)
    if len(unique) < 3:
        return Value(None, f"fewer than 3 distinct vectors ({len(unique)})",
                     {"used": len(unique), "duplicates": duplicates})
    r = _two_nearest(unique)
    ok = r[:, 0] > 0
    mu = np.sort(r[ok, 1] / r[ok, 0])
    n = len(mu)
    keep = int(math.floor((1.0 - TWONN_DISCARD) * n))
    detail = {"used": n, "duplicates": duplicates, "too_close": int((~ok).sum())}
    if keep < 2:
        return Value(None, "fewer than 2 points left for the fit", detail)
    xs = np.log(mu[:keep])
    ys = -np.log(1.0 - np.arange(1, keep + 1) / n)
    den = float(xs @ xs)
    if not den > 0:
        return Value(None, "every point's two nearest neighbours are equally far", detail)
    return Value.of(float(xs @ ys) / den, **detail)


__all__ = ["GEOMETRY_MEASURES", "GeometryAccumulator", "anisotropy", "effective_rank",
           "gram_shares", "max_abs", "norm_profile", "twonn", "variance_shares"]
