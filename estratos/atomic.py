"""Writing a file so that readers see the old content or the new one, never a torn one.

Shared by every part that writes user-facing files (reports, generated task files): a killed
run leaves at most a hidden temporary file, never a half-written output.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: os.PathLike | str, data: bytes | str) -> None:
    """Write ``data`` (text is UTF-8) to a temporary file beside ``path``, fsync, rename."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
