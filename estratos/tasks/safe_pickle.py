"""Reading pickled task data without running the code a pickle may name.

Unpickling calls whatever callable the file names (``os.system`` included), so task data
files are unpickled with :class:`RestrictedUnpickler`, which refuses every global: only the
built-in containers and scalars that pickle encodes directly (lists, tuples, dicts, str,
bytes, numbers, None, bools) can come out. DiscoEval's RST files need nothing else.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

from estratos.errors import InputError


class ForbiddenGlobal(pickle.UnpicklingError):
    """The pickle names a global (a class or function): refused, never imported."""


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler whose :meth:`find_class` always refuses (no global is ever loaded)."""

    def find_class(self, module: str, name: str) -> Any:  # the pickle API's name
        raise ForbiddenGlobal(f"it names the global '{module}.{name}'")

    def persistent_load(self, pid: Any) -> Any:
        raise ForbiddenGlobal("it holds a persistent reference")


def load_pickle(path: os.PathLike | str) -> Any:
    """Unpickle ``path`` with :class:`RestrictedUnpickler`; any failure is an InputError.

    Python 2 pickles (DiscoEval publishes both) store text as bytes; they are decoded as
    UTF-8 so their strings come back as ``str``.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("missing required file", path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from None
    if not data:
        raise InputError("empty file (no data)", path)
    try:
        return RestrictedUnpickler(io.BytesIO(data), encoding="utf-8").load()
    except ForbiddenGlobal as exc:
        raise InputError(f"refusing to unpickle: {exc} (a pickle can run code; task "
                         "pickles may only hold lists, tuples and strings)", path) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, UnicodeDecodeError, MemoryError, OverflowError) as exc:
        raise InputError(f"not a readable pickle ({type(exc).__name__}: {exc})",
                         path) from None
