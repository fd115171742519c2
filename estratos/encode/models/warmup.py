"""Importing what a model's forward pass needs before the model is loaded.

Why: ``encode`` spends seconds importing torch, transformers and the modeling module of the
model's architecture (transformers imports it lazily, inside ``from_pretrained``). Taken as
steps while the inputs are read in another process
(:func:`estratos.encode.inputs.gather_sentences_meanwhile`), those seconds overlap the reading
instead of following it. Each step only imports: a failure is left for the real load to
report, in its order (a wrong ``--data-dir`` before a wrong ``--model``).
"""

from __future__ import annotations

import importlib
import logging
from typing import Callable, List, Optional

log = logging.getLogger(__name__)


def _quietly(step: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - the real load reports it, in its order
            log.debug("warm-up step skipped: %s", exc)
    return run


def _model_module(model: Optional[str]) -> None:
    """Import the modeling module of ``model``'s architecture: read its config from a local
    folder or the local hub cache (never the network, never the model's own code) and look
    its class up, which imports the module."""
    from estratos.encode.config import check_model_folder

    if model is None:
        return
    check_model_folder(model)
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    config = AutoConfig.from_pretrained(model, local_files_only=True)
    MODEL_MAPPING[type(config)]


def warmup_steps(model: Optional[str]) -> List[Callable[[], None]]:
    """The import steps for ``model`` (a local folder or hub id; None for ``--encoder``),
    none of which raises."""
    def torch() -> None:
        importlib.import_module("torch")

    def transformers() -> None:
        importlib.import_module("estratos.encode.models.hf")  # transformers and our encoder

    return [_quietly(step) for step in (torch, transformers, lambda: _model_module(model))]
