"""Feature standardization for the probes (``probe --features standardized``).

Why in the estimators: the statistics must come from the data a model is fitted on and
nothing else. A split protocol fits on its training split; a k-fold protocol fits each
fold on the other folds, and MDL's block models on the whole training split (the features
are known to sender and receiver alike; only labels are transmitted). Each estimator that
takes ``features="standardized"`` computes a :class:`FeatureScale` from the ``X`` its
``fit`` receives and applies it to every matrix it later sees (dev, test), so every
protocol gets training-only statistics without knowing about scaling.

Statistics are computed in float64 per feature group (layer spec) and feature; a feature
that is constant on the training data is set to zero everywhere (it carries nothing a
linear probe could use, and a tiny standard deviation would turn rounding noise into
huge values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from estratos.probe.estimators.registry import check_features
from estratos.vocab import RAW_FEATURES, STANDARDIZED_FEATURES

#: a feature whose standard deviation is at most this share of its mean's magnitude (or of 1)
#: is constant: float32 rounding, not signal
CONSTANT_RELATIVE_STD = 1e-12


@dataclass(frozen=True)
class FeatureScale:
    """Per-feature centre and scale of the data a model was fitted on; ``mean`` and
    ``std`` are float64, shaped like one example row of ``X`` (``(F,)``, or ``(G, 1, F)``
    for a stack of G feature groups); ``std`` is infinite where the feature was constant,
    so that feature becomes 0."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, x: Any) -> "FeatureScale":
        """The scale of ``x``: ``(n, F)`` or a stack ``(G, n, F)`` (numpy or torch)."""
        a = _numpy(x)
        return cls.from_moments(a.mean(axis=-2, keepdims=a.ndim == 3, dtype=np.float64),
                                a.std(axis=-2, keepdims=a.ndim == 3, dtype=np.float64))

    @classmethod
    def from_moments(cls, mean: np.ndarray, std: np.ndarray) -> "FeatureScale":
        """The scale of data with these per-feature means and (population) standard
        deviations, however they were computed (``fit``, or a pass over chunks); the one
        rule of what counts as a constant feature."""
        mean = np.asarray(mean, dtype=np.float64)
        std = np.asarray(std, dtype=np.float64)
        constant = ~(std > CONSTANT_RELATIVE_STD * np.maximum(1.0, np.abs(mean)))
        return cls(mean=mean, std=np.where(constant, np.inf, std))

    def apply(self, x: Any, dtype: Any = np.float32) -> np.ndarray:
        """``x`` standardized: ``(x - mean) / std``, constant features 0, as ``dtype``."""
        a = _numpy(x)
        return ((a - self.mean) / self.std).astype(dtype, copy=False)


def _numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def scaler_for(features: str, x: Any) -> "FeatureScale | None":
    """The scale ``features`` asks for on training data ``x`` (None: raw features)."""
    if check_features(features, "features") == RAW_FEATURES:
        return None
    assert features == STANDARDIZED_FEATURES
    return FeatureScale.fit(x)


def scaled(x: Any, scale: "FeatureScale | None", dtype: Any = np.float32) -> Any:
    """``x`` through ``scale`` (as is when None)."""
    return x if scale is None else scale.apply(x, dtype)


__all__ = ["CONSTANT_RELATIVE_STD", "FeatureScale", "scaled", "scaler_for"]
