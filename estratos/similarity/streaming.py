"""Cross-products of every layer pair over chunks of sentences: no n x n matrix, ever.

Why two passes: linear CKA, debiased CKA and Procrustes read centred features, and the
standardized reading divides by each feature's standard deviation over the whole sentence
set; the per-row squared norms debiased CKA needs (``sum_i a_i b_i``) depend on both, so
they cannot be corrected afterwards. Pass one (:func:`layer_moments`) gets each layer's
per-feature mean and spread (chunk moments merged exactly, Chan et al.'s pairwise update,
in float64); pass two (:class:`CrossProducts`) centres each chunk with them and adds its
``Z^T Z`` (Z = the layers side by side) into float64 sums. The standardized statistics are
the raw ones scaled by the inverse standard deviations (``D X^T Y D``), so only the row
norms need a second reading of each chunk, never a second product.

The products of one chunk run in ``products`` precision: float32 by default (twice BLAS's
float64 rate on these CPUs; a chunk's 4,096-term sums carry about 1e-7 relative error,
summed across chunks in float64), or float64 for results that equal the one-shot formulas
to rounding (tests, ``--products float64``). They run through torch's BLAS (:func:`gram`)
into work arrays kept from chunk to chunk: on the 2-core machine it ran the two-cache
product (4,096 x 18,432 by 4,096 x 3,072) 1.2 times faster than numpy's, the one-cache
ones as fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from estratos.probe.estimators.scaling import FeatureScale
from estratos.similarity.config import PRODUCTS
from estratos.similarity.measures import PairStats


@dataclass
class Moments:
    """One layer's per-feature count, mean and sum of squared deviations (float64)."""

    n: int
    mean: np.ndarray
    m2: np.ndarray

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation per feature."""
        return np.sqrt(np.maximum(self.m2, 0.0) / max(self.n, 1))

    @property
    def inverse_scale(self) -> np.ndarray:
        """1 / std per feature, 0 for a constant feature (the probe's rule:
        :meth:`estratos.probe.estimators.scaling.FeatureScale.from_moments`)."""
        return 1.0 / FeatureScale.from_moments(self.mean, self.std).std

    def merge(self, x: np.ndarray) -> None:
        """Add the rows of ``x`` (c, d)."""
        c = len(x)
        if c == 0:
            return
        # the deviations in the rows' own precision (float32 from a cache), summed in float64;
        # taken from the mean rounded to that precision, then corrected for the rounding
        x = np.asarray(x)
        if x.dtype != np.float32:
            x = x.astype(np.float64)
        mean_c = x.mean(axis=0, dtype=np.float64)
        rounded = mean_c.astype(x.dtype)
        dev = x - rounded
        m2_c = ((dev * dev).sum(axis=0, dtype=np.float64)
                - c * (mean_c - rounded.astype(np.float64)) ** 2)
        n = self.n + c
        delta = mean_c - self.mean
        self.mean = self.mean + delta * (c / n)
        self.m2 = self.m2 + m2_c + delta * delta * (self.n * c / n)
        self.n = n


def layer_moments(chunks: Iterable[Sequence[np.ndarray]]) -> List[Moments]:
    """Per-layer :class:`Moments` over chunks, each a sequence of (c, d_l) matrices (the
    same layers in the same order in every chunk)."""
    out: List[Moments] = []
    for chunk in chunks:
        if not out:
            out = [Moments(0, np.zeros(x.shape[1]), np.zeros(x.shape[1])) for x in chunk]
        for m, x in zip(out, chunk):
            m.merge(x)
    return out


def gram(a: np.ndarray, b: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """``a^T b`` of two (c, d) matrices of one dtype, in that dtype, through torch's BLAS
    (no copy of either side; torch is a core dependency, imported here so that the
    command's ``--help`` stays light), into ``out`` when given."""
    import torch

    if out is None:
        return torch.mm(torch.from_numpy(a).T, torch.from_numpy(b)).numpy()
    torch.mm(torch.from_numpy(a).T, torch.from_numpy(b), out=torch.from_numpy(out))
    return out


class CrossProducts:
    """Pass two: the centred cross-products (a constant feature's centred values, rounding
    residues, set to exactly 0: the probe's rule) of layers X_0..X_p (and, for two caches, of
    each X_i with each Y_j) and the sums of their rows' squared norms, raw and
    standardized. ``pair(i, j, standardized)`` then gives a :class:`PairStats`.

    Within one cache (``moments_y`` None) ``Z^T Z`` is kept from 3/4 of its blocks (every
    pair i <= j is among them; j < i is its transpose); for two caches only ``Z_x^T Z_y``
    and each layer's own block, which is what the pairs use.
    """

    def __init__(self, moments_x: Sequence[Moments], moments_y: Optional[Sequence[Moments]]
                 = None, products: str = "float32") -> None:
        if products not in PRODUCTS:
            raise ValueError(f"products must be one of {PRODUCTS}, not {products!r}")
        self.dtype = np.dtype(products)
        self.mx = list(moments_x)
        self.my = None if moments_y is None else list(moments_y)
        self.inv_x = [m.inverse_scale for m in self.mx]
        self.inv_y = None if self.my is None else [m.inverse_scale for m in self.my]
        self.off_x = np.cumsum([0] + [len(m.mean) for m in self.mx])
        self.n = 0
        self._buffers: Dict[str, np.ndarray] = {}
        wx = int(self.off_x[-1])
        if self.my is None:
            self.sums = np.zeros((wx, wx))
            self.off_y = self.off_x
            self.selfs_y: List[np.ndarray] = []
        else:
            self.off_y = np.cumsum([0] + [len(m.mean) for m in self.my])
            self.sums = np.zeros((wx, int(self.off_y[-1])))
            self.selfs_x = [np.zeros((len(m.mean),) * 2) for m in self.mx]
            self.selfs_y = [np.zeros((len(m.mean),) * 2) for m in self.my]
        ly = len(self.mx) if self.my is None else len(self.my)
        # row-norm sums: [raw, standardized] x (layers of X, layers of Y)
        self.norm_x = np.zeros((2, len(self.mx)))
        self.norm_y = np.zeros((2, ly))
        self.norm_xy = np.zeros((2, len(self.mx), ly))
        self.norm_xx = np.zeros((2, len(self.mx)))
        self.norm_yy = np.zeros((2, ly))

    def _buffer(self, name: str, shape: Tuple[int, ...]) -> np.ndarray:
        """A work array of the products' dtype kept from chunk to chunk: a fresh one per
        chunk (hundreds of MB) cost as much system time in page faults as filling it."""
        kept = self._buffers.get(name)
        if kept is None or kept.shape != shape:
            kept = self._buffers[name] = np.empty(shape, dtype=self.dtype)
        return kept

    def _product(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a^T b`` (:func:`gram`) into a kept array of its shape."""
        return gram(a, b, self._buffer(f"product{a.shape[1]}x{b.shape[1]}",
                                       (a.shape[1], b.shape[1])))

    def _centred(self, side: str, xs: Sequence[np.ndarray], moments: Sequence[Moments],
                 inverse: Sequence[np.ndarray], width: int) -> tuple:
        c = len(xs[0])
        z = self._buffer(f"z{side}", (c, width))
        norms = np.empty((2, c, len(xs)))
        at = 0
        for i, (x, m, inv) in enumerate(zip(xs, moments, inverse)):
            # centred in the products' precision (float32: finer than the float16 or bf16
            # the cache stores) straight into Z, a constant feature exactly 0; the squared
            # entries give both row norms (raw, and standardized as a weighted sum)
            xc = z[:, at:at + len(inv)]
            np.subtract(x, m.mean.astype(self.dtype), out=xc, dtype=self.dtype)
            keep = inv > 0
            if not keep.all():
                xc *= keep
            squares = np.square(xc)
            norms[0, :, i] = squares.sum(axis=1)
            norms[1, :, i] = squares @ np.square(inv).astype(self.dtype)
            at += len(inv)
        return z, norms

    def add(self, xs: Sequence[np.ndarray], ys: Optional[Sequence[np.ndarray]] = None) -> None:
        """Add one chunk: the layers of X (and of Y, two caches), same rows in each."""
        if (ys is None) != (self.my is None):
            raise ValueError("give ys exactly when the accumulator was built for two caches")
        zx, rx = self._centred("x", xs, self.mx, self.inv_x, int(self.off_x[-1]))
        self.n += zx.shape[0]
        if ys is None or self.my is None or self.inv_y is None:
            # Z^T Z is symmetric: the first half of the layers' rows against every layer,
            # the second half's against the second half (3/4 of the products in two large
            # ones, which BLAS runs faster than one small product per block); pair(i, j)
            # with i > j reads the transpose of (j, i), always among those computed
            mid = int(self.off_x[len(self.mx) // 2])
            self.sums[:mid] += self._product(zx[:, :mid], zx)
            self.sums[mid:, mid:] += self._product(zx[:, mid:], zx[:, mid:])
            ry = rx
        else:
            zy, ry = self._centred("y", ys, self.my, self.inv_y, int(self.off_y[-1]))
            self.sums += self._product(zx, zy)
            for k, s in enumerate(self.selfs_x):
                block = zx[:, self.off_x[k]:self.off_x[k + 1]]
                s += self._product(block, block)
            for k, s in enumerate(self.selfs_y):
                block = zy[:, self.off_y[k]:self.off_y[k + 1]]
                s += self._product(block, block)
        for f in range(2):
            self.norm_x[f] += rx[f].sum(axis=0)
            self.norm_y[f] += ry[f].sum(axis=0)
            self.norm_xy[f] += rx[f].T @ ry[f]
            self.norm_xx[f] += np.einsum("ij,ij->j", rx[f], rx[f])
            self.norm_yy[f] += np.einsum("ij,ij->j", ry[f], ry[f])

    def _block(self, i: int, j: int, side: str) -> np.ndarray:
        if self.my is None:
            if i > j:
                return self._block(j, i, side).T
            return self.sums[self.off_x[i]:self.off_x[i + 1], self.off_x[j]:self.off_x[j + 1]]
        if side == "x":
            return self.selfs_x[i]
        if side == "y":
            return self.selfs_y[j]
        return self.sums[self.off_x[i]:self.off_x[i + 1], self.off_y[j]:self.off_y[j + 1]]

    def pair(self, i: int, j: int, standardized: bool = False) -> PairStats:
        """The statistics of layer i of X with layer j of Y (of X within one cache)."""
        cross = self._block(i, j, "xy")
        xx = self._block(i, i, "x")
        yy = self._block(j, j, "y")
        f = int(standardized)
        if standardized:
            ix = self.inv_x[i]
            iy = (self.inv_x if self.inv_y is None else self.inv_y)[j]
            cross = cross * ix[:, None] * iy[None, :]
            xx = xx * ix[:, None] * ix[None, :]
            yy = yy * iy[:, None] * iy[None, :]
        return PairStats(self.n, cross, xx, yy, float(self.norm_x[f, i]),
                         float(self.norm_y[f, j]), float(self.norm_xy[f, i, j]),
                         float(self.norm_xx[f, i]), float(self.norm_yy[f, j]))


__all__ = ["PRODUCTS", "CrossProducts", "Moments", "gram", "layer_moments"]
