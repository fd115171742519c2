"""Which model ``--model`` names: a local folder or a hub id, and what a cache records for it.

One rule, used by encode (what it records), the cache's settings check (what it compares),
the demo and SLURM (absolute folders for jobs). Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union


def is_local_model(model: Union[str, os.PathLike[str]]) -> bool:
    """Whether ``--model`` names a local folder rather than a hub id: a path written as one
    (``/``, ``./``, ``../``, ``~``) or anything that exists on disk. The one rule: a hub id
    (``org/name``) that is not also a path here is fetched from the hub."""
    text = os.fspath(model)
    return text.startswith(("/", "./", "../", "~")) or Path(text).exists()


def model_identity(model: Union[str, os.PathLike[str]]) -> str:
    """What a cache records as its ``model``: a local folder by its absolute resolved path (a
    rerun from another folder, or through a link, still matches), a hub id as given."""
    text = os.fspath(model)
    return str(Path(text).expanduser().resolve()) if is_local_model(text) else text


__all__ = ["is_local_model", "model_identity"]
