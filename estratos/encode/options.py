"""``encode``'s option values, checked with the standard library only: the CLI runs
:func:`check_encode_options` before it imports numpy, torch or transformers, so a mistake is
reported at once.
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Optional, Tuple, Union

from estratos.errors import OptionError
from estratos.options import (
    ENCODE_DEVICES,
    ShardSpec,
    check_device,
    is_local_model,
    parse_states,
    positive_int,
    resolve_shard,
)
from estratos.vocab import MEAN_FIRST_CHOICES, PROMPT_SLOT

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
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise OptionError(f"--batch-tokens: must be >= 1 or auto, got {value!r}")
    return int(value)


def check_model_folder(model: Optional[str]) -> None:
    """A local ``--model`` must be a folder with a ``config.json``: say so, naming the folder
    (instead of the tokenizer backend's unrelated complaint about sentencepiece), before
    torch and transformers are imported. Hub ids and ``None`` (``--encoder``) pass."""
    if model is None or not is_local_model(model):
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


def check_encode_options(*, device: Optional[str] = "auto",
                         threads: Optional[int] = None, shard: ShardSpec = "auto",
                         states: str = "all", batch_tokens: BatchTokens = "auto",
                         prompt: Optional[str] = None) -> None:
    """Every ``encode`` option that can be checked without the model, the sentences or torch;
    raises :class:`OptionError` naming the option. ``--model`` is checked after the inputs
    (:func:`check_model_folder`), so a wrong data folder is named first."""
    parse_prompt(prompt)
    check_device(device, kinds=ENCODE_DEVICES)
    positive_int("--threads", threads, allow_none=True)
    resolve_shard(shard)
    parse_states(states)
    parse_batch_tokens(batch_tokens)
def parse_prompt(template: Optional[str]) -> Optional[Tuple[str, str]]:
    """``--prompt TEMPLATE``: ``(prefix, suffix)`` around the one ``{}`` where the sentence
    goes (None without a template). Other braces are kept as written."""
    if template is None:
        return None
    if template.count(PROMPT_SLOT) != 1:
        raise OptionError(f"--prompt: the template must hold {PROMPT_SLOT} exactly once (where "
                          f"the sentence goes), got {template!r}")
    prefix, suffix = template.split(PROMPT_SLOT)
    return prefix, suffix


def check_mean_first(choice: str) -> str:
    """``--mean-first-token``: one of :data:`MEAN_FIRST_CHOICES`."""
    if choice not in MEAN_FIRST_CHOICES:
        raise OptionError(f"--mean-first-token: {choice!r} is not one of "
                          f"{', '.join(MEAN_FIRST_CHOICES)}")
    return choice
