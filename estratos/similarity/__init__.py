"""What the layers share and what shape each has, from the cache alone (no model, no GPU).

- :func:`similarity_maps` (``estratos similarity``): layer x layer maps within one cache or
  between two, rows joined on the sentence key: linear CKA, debiased CKA and orthogonal
  Procrustes from d x d cross-products streamed over chunks (:mod:`.streaming`), RSA and
  mutual k-NN on a seeded subsample; formulas in :mod:`.measures`.
- :func:`geometry_maps` (``estratos geometry``): per layer anisotropy and its rogue
  dimensions, each dimension's share of the variance, massive activations, norms, effective
  rank and TwoNN (:mod:`.geometry`).
- :mod:`.bootstrap`: linear CKA on resampled sentences (intervals, ties between most similar
  layers); :mod:`.residualize`: a covariate (sentence length) regressed out of every layer.
- :mod:`.sentences`: the sentence set, its digest and subsample, each cache's rows.

Records are :class:`estratos.results.similarity.MapRecord` lines. Names are imported on
first use, so ``import estratos.similarity`` reads no cache. See docs/similarity.md.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {"similarity_maps": "run", "geometry_maps": "run", "MapRun": "run",
            "SIMILARITY_MEASURES": "config", "GEOMETRY_MEASURES": "geometry",
            "DEFAULT_MAX_SENTENCES": "config", "DEFAULT_K": "config", "MapConfig": "config"}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the lazy exports' one table


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"estratos.similarity.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'estratos.similarity' has no attribute {name!r}")
