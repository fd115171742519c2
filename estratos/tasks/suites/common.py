"""Settings shared by several suites: the published per-task classifier overrides.

Facts from SentEval / DiscoEval / the Spanish benchmark (values only): NLI-style and PDTB/RST
tasks train at most 15 epochs of one pass without L2 search; DC uses a 2000-unit hidden layer
with more patience; SSP trains without L2 search; WordContent stays linear even when the
probe's default classifier is an MLP; the k-fold tasks use 10 folds. ``"noreg"`` means the
L2 grid is just [1e-9] (the probe expands it).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Tuple

from estratos.vocab import OVERRIDE_KEYS

NLI = MappingProxyType({"max_epoch": 15, "epoch_size": 1, "l2_grid": "noreg"})
DC = MappingProxyType({"nhid": 2000, "tenacity": 8, "epoch_size": 15, "l2_grid": "noreg"})
SSP = MappingProxyType({"l2_grid": "noreg"})
RST = MappingProxyType({"max_epoch": 15, "epoch_size": 1, "l2_grid": "noreg"})
PDTB = RST
WORD_CONTENT = MappingProxyType({"nhid": 0})
KFOLD10 = MappingProxyType({"kfold": 10})

#: allowed keys of ``TaskSpec.classifier`` (checked for custom task files)
CLASSIFIER_KEYS = OVERRIDE_KEYS

#: the linguistic probing tasks: (estratos name, SentEval file stem, classifier overrides)
PROBING: Tuple[Tuple[str, str, Mapping[str, Any]], ...] = (
    ("Length", "sentence_length", {}),
    ("WordContent", "word_content", WORD_CONTENT),
    ("Depth", "tree_depth", {}),
    ("BigramShift", "bigram_shift", {}),
    ("Tense", "past_present", {}),
    ("SubjNumber", "subj_number", {}),
    ("ObjNumber", "obj_number", {}),
    ("OddManOut", "odd_man_out", {}),
    ("CoordinationInversion", "coordination_inversion", {}),
)


def tvt(folder: str, train: str = "train.txt", dev: str = "valid.txt",
        test: str = "test.txt") -> dict:
    """``{"train": folder/train, "dev": folder/dev, "test": folder/test}``."""
    return {"train": f"{folder}/{train}", "dev": f"{folder}/{dev}", "test": f"{folder}/{test}"}
