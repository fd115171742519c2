"""``encode``'s own option values, checked before anything heavy is imported or loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import numpy as np

from estratos.errors import OptionError

BatchTokens = Union[int, str]


def parse_batch_tokens(value: BatchTokens) -> BatchTokens:
    """``--batch-tokens``: a positive integer (also as text) or ``"auto"``."""
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            return "auto"
        try:
            value = int(value)
        except ValueError:
            raise OptionError(f"--batch-tokens: expected a positive integer or auto, got "
                              f"{value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise OptionError(f"--batch-tokens: must be >= 1 or auto, got {value!r}")
    return int(value)


def looks_local(model: str) -> bool:
    """Whether ``--model`` names a local folder rather than a hub id: a path written as one
    (``/``, ``./``, ``../``, ``~``) or anything that exists on disk."""
    return model.startswith(("/", "./", "../", "~")) or Path(model).exists()


def check_model_folder(model: Optional[str]) -> None:
    """A local ``--model`` must be a folder with a ``config.json``: say so, naming the folder
    (instead of the tokenizer backend's unrelated complaint about sentencepiece), before
    torch and transformers are imported. Hub ids and ``None`` (``--encoder``) pass."""
    if model is None or not looks_local(model):
        return
    folder = Path(model).expanduser()
    if not folder.is_dir():
        raise OptionError(f"--model: {str(folder)!r} is not a model folder (no such directory)")
    if (folder / "config.json").is_file():
        return
    inside = sorted(p.parent for p in folder.glob("*/config.json"))
    hint = (f"; a model folder inside it: {inside[0]}" if len(inside) == 1 else
            f"; model folders inside it: {', '.join(map(str, inside[:3]))}" if inside else
            "; point --model at the folder that holds config.json and the weights")
    raise OptionError(f"--model: {folder} has no config.json, so it is not a Hugging Face "
                      f"model folder{hint}")
