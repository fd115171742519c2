"""Targets run in fork-server children (imported once by the server: torch, transformers,
estratos). Each sets the child's fault point, then does one encode or probe run."""

from __future__ import annotations

import logging
import os
from typing import Optional

import torch  # noqa: F401  (preloaded in the server so children start fast)
import transformers  # noqa: F401

import estratos.cache
import estratos.encode.models.hf
import estratos.encode.run
import estratos.encode.stream
import estratos.probe.grid.runner  # noqa: F401


def noop() -> None:
    """Starts the server."""


def encode(fault: Optional[str], sentences_file: str, model: str, out: str,
           kwargs: dict) -> None:
    """One ``encode_sentences`` run, killed at ``fault`` (``POINT[:N]``) when given."""
    if fault:
        os.environ["ESTRATOS_FAULT"] = fault
    logging.basicConfig(level=logging.ERROR)
    from estratos.encode import encode_sentences

    with open(sentences_file, encoding="utf-8") as fh:
        sentences = fh.read().splitlines()
    encode_sentences(sentences, model, out, progress=False, **kwargs)


def probe_files(cache: str, task_files: list, out: str, kwargs: dict) -> None:
    """One ``probe_tasks`` run over custom task files (killed by the parent); ``kwargs``:
    the fields of its :class:`~estratos.probe.config.ProbeConfig`."""
    logging.basicConfig(level=logging.ERROR)
    from estratos.probe.command import probe_tasks
    from estratos.probe.config import ProbeConfig

    probe_tasks(cache, "", out, ProbeConfig.build(**kwargs), task_files=task_files)


def probe_files_at(fault: str, cache: str, task_files: list, out: str, kwargs: dict) -> None:
    """Like :func:`probe_files`, killed at ``fault`` (``POINT[:N]``)."""
    os.environ["ESTRATOS_FAULT"] = fault
    probe_files(cache, task_files, out, kwargs)


#: exit code of a child whose run ended in an estratos error (a refusal, not a crash)
REFUSED = 3


def encode_or_refuse(sentences_file: str, model: str, out: str, kwargs: dict) -> None:
    """Like :func:`encode`, but an ``EstratosError`` exits with :data:`REFUSED` (any other
    exception keeps exit code 1, so the parent can tell a refusal from a crash)."""
    import sys

    from estratos.errors import EstratosError

    try:
        encode(None, sentences_file, model, out, kwargs)
    except EstratosError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        sys.exit(REFUSED)


def verify_to_file(cache: str, report: str) -> None:
    """``verify_cache`` in a child (HDF5 can loop forever on a corrupted string heap)."""
    import json

    from estratos.cache import verify_cache
    from estratos.errors import CacheError

    try:
        ok = verify_cache(cache).ok
    except CacheError:
        ok = False
    with open(report, "w") as fh:
        json.dump({"ok": ok}, fh)
