"""The options of ``estratos similarity`` and ``estratos geometry``, declared once.

Why a table (:mod:`estratos.optiontable`): both commands read the same cache options
(layers, pooling, readings, the subsample, the products' precision); ``similarity`` adds a
second cache's layers, the measures and mutual k-NN's ``k``. :class:`MapConfig` is built once
by the CLI and handed to :func:`~estratos.similarity.run.similarity_maps` and
:func:`~estratos.similarity.run.geometry_maps`. Standard library and leaf modules only: the
CLI checks these before numpy loads.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

from estratos.clitypes import integer
from estratos.errors import OptionError
from estratos.options import parse_layers, positive
from estratos.optiontable import OptionPair, Role, check_fields, option, to_options
from estratos.registry import unknown_name
from estratos.vocab import ALL_LAYERS, BOOTSTRAP_SEED, CACHE_POOLINGS, DEFAULT_SEED, FEATURES

#: every similarity measure, in the order records and the report show them
SIMILARITY_MEASURES: Tuple[str, ...] = ("linear-cka", "debiased-cka", "procrustes", "rsa",
                                        "mutual-knn")
#: the precisions a chunk's products may run in (``--products``)
PRODUCTS: Tuple[str, ...] = ("float32", "float64")
#: ``--max-sentences``: the subsample RSA, mutual k-NN, the median activation and TwoNN read
DEFAULT_MAX_SENTENCES = 2000
#: ``--k``: neighbours of mutual k-NN (Huh et al. 2024 use 10)
DEFAULT_K = 10
#: ``--bootstrap``: resamples of the subsample behind each linear CKA's interval and the
#: ties between most similar layers (:mod:`estratos.similarity.bootstrap`)
DEFAULT_BOOTSTRAP = 200
#: what ``--residualize`` can regress out of every layer
#: (:mod:`estratos.similarity.residualize`)
RESIDUALIZE: Tuple[str, ...] = ("length",)
#: the options only ``similarity`` takes (``geometry`` reads one cache, every measure)
SIMILARITY_ONLY: Tuple[str, ...] = ("other_layers", "measures", "k", "bootstrap",
                                    "bootstrap_seed", "residualize")


def parse_choices(option: str, given: Union[str, Sequence[str], None],
                  allowed: Sequence[str], what: Optional[str] = None) -> Tuple[str, ...]:
    """A comma list (or sequence) of names among ``allowed``, in ``allowed``'s order; None
    or empty: all of them. An unknown name is the one unknown-name error naming ``option``
    (``what`` names one choice; default: the option's words)."""
    if given is None:
        return tuple(allowed)
    items = given.split(",") if isinstance(given, str) else list(given)
    names = [str(x).strip().lower() for x in items if str(x).strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown:  # the first, with its closest names (the one unknown-name error)
        raise unknown_name(what or option.lstrip("-").replace("-", " "), unknown[0], allowed,
                           option)
    return tuple(n for n in allowed if n in names) or tuple(allowed)


def _layers(value: str) -> str:
    parse_layers(value)  # syntax; the indices are checked against each cache
    return str(value)


def _measures(value: Union[str, Sequence[str]]) -> Tuple[str, ...]:
    return parse_choices("--measures", value, SIMILARITY_MEASURES, "measure")


def _features(value: Union[str, Sequence[str]]) -> Tuple[str, ...]:
    return parse_choices("--features", value, FEATURES)


def _integer(flag: str, at_least: Optional[int] = None) -> Any:
    """The check of an integer option (at least ``at_least`` when given), naming ``flag``."""
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise OptionError(f"{flag}: {value!r} is not an integer")
        if at_least is not None and value < at_least:
            raise OptionError(f"{flag}: must be at least {at_least}, got {value!r}")
        return int(value)
    return check


def _names(value: Sequence[str]) -> str:
    return ",".join(value)


@dataclass(frozen=True)
class MapConfig:
    """Every choice of a ``similarity`` or ``geometry`` run, checked (:meth:`build`), each
    field one option (:mod:`estratos.optiontable`). ``other_layers`` None: ``layers``;
    ``pooling`` None: the first pooling every cache has; ``measures`` and ``features``: all
    when not given."""

    layers: str = option(ALL_LAYERS, "--layers", "all, or hidden-state indices and avg, "
                         "comma-separated.", check=_layers)
    other_layers: Optional[str] = option(
        None, "--other-layers", "--layers of --other [default: --layers].", check=_layers)
    pooling: Optional[str] = option(
        None, "--pooling", "Cached vectors to read [default: the first pooling every cache "
        "has].", choices=CACHE_POOLINGS)
    measures: Tuple[str, ...] = option(
        SIMILARITY_MEASURES, "--measures", "Comma list of "
        f"{', '.join(SIMILARITY_MEASURES)}.", check=_measures, text=_names, metavar="LIST",
        default_help="all")
    features: Tuple[str, ...] = option(
        FEATURES, "--features", "raw, or standardized with the sentence set's mean and std "
        "per feature (as probe --features); repeat for both [default: both].",
        check=_features, multiple=True, choices=FEATURES)
    max_sentences: int = option(
        DEFAULT_MAX_SENTENCES, "--max-sentences", "Size of the seeded subsample that the "
        "sentence x sentence measures read (it is recorded).",
        check=positive("--max-sentences"), click_type=integer)
    seed: int = option(DEFAULT_SEED, "--seed", "Seed of the subsample.",
                       check=_integer("--seed"), click_type=integer)
    k: int = option(DEFAULT_K, "--k", "Neighbours of mutual-knn.",
                    check=positive("--k"), click_type=integer)
    bootstrap: int = option(
        DEFAULT_BOOTSTRAP, "--bootstrap", "Resamples of the subsample's sentences behind each "
        "linear CKA's interval and the ties between most similar layers (0: none; "
        "recorded).", check=_integer("--bootstrap", 0), click_type=integer)
    bootstrap_seed: int = option(
        BOOTSTRAP_SEED, "--bootstrap-seed", "Seed of the resampling (recorded).",
        check=_integer("--bootstrap-seed"), click_type=integer)
    residualize: Optional[str] = option(
        None, "--residualize", "Regress this out of every layer before measuring: length "
        "(each cache's token count of each sentence: n, n^2, log n; both caches' when "
        "two). Recorded.", choices=RESIDUALIZE)
    products: str = option(
        "float32", "--products", "Precision of each chunk's products (summed in float64 "
        "either way).", choices=PRODUCTS)
    overwrite: bool = option(False, "--overwrite", "Redo records already in --out.",
                             role=Role.PLACEMENT, is_flag=True)

    @classmethod
    def build(cls, **given: Any) -> "MapConfig":
        """Check every option given by field name (an :class:`OptionError` names the first
        bad one; None or absent: the default) and return the configuration."""
        return cls(**check_fields(cls, given))

    def to_options(self) -> List[OptionPair]:
        """The options of this configuration that differ from the defaults."""
        return to_options(self)


__all__ = ["DEFAULT_BOOTSTRAP", "DEFAULT_K", "DEFAULT_MAX_SENTENCES", "PRODUCTS",
           "RESIDUALIZE", "SIMILARITY_MEASURES", "SIMILARITY_ONLY", "MapConfig",
           "parse_choices"]
