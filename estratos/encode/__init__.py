"""Stage one: run an encoder once over unique sentences and write the HDF5 cache.

Public API: :func:`encode_sentences` (what ``estratos encode`` calls), :class:`EncodeConfig`
(its options, checked once), :class:`EncodeSummary`,
:func:`gather_sentences` (``--sentences FILE`` or ``--tasks IDS``: :func:`read_sentence_file`,
:func:`task_sentences`).

Names are imported on first use, so the command line can check its options (and read the
sentences) before the encoder's heavy libraries load.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "gather_sentences": "inputs", "read_sentence_file": "inputs", "task_sentences": "inputs",
    "encode_sentences": "run", "EncodeSummary": "summary", "EncodeConfig": "config",
}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the lazy exports' one table


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"estratos.encode.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'estratos.encode' has no attribute {name!r}")
