"""``encode``'s own option values, checked before anything heavy is imported or loaded."""

from __future__ import annotations

from typing import Union

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
