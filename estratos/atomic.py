"""Writing a file so that readers see the old content or the new one, never a torn one.

Shared by every part that writes user-facing files (reports, generated task files): a killed
run leaves at most a hidden temporary file, never a half-written output. The temporary file
gets the permissions a plain ``open()`` would give the output (``0666`` less the umask, and
the directory's default ACL), or the permissions of the file it replaces, so an output is
never left with ``mkstemp``'s private ``0600`` on a shared machine.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Optional, Tuple

_ATTEMPTS = 100


def create_beside(path: os.PathLike | str, *, mode_of: Optional[os.PathLike | str] = None
                  ) -> Tuple[int, Path]:
    """Create a new, empty, hidden temporary file in ``path``'s folder; returns ``(fd, name)``.

    Its mode is that of ``mode_of`` (default: ``path``) when that file exists, so replacing a
    file keeps its permissions; otherwise the kernel applies the umask to ``0666`` exactly as
    for ``open(path, "w")``. The caller closes ``fd`` and renames or removes the file.
    """
    path = Path(path)
    keep = Path(mode_of) if mode_of is not None else path
    try:
        kept_mode: Optional[int] = stat.S_IMODE(keep.stat().st_mode)
    except FileNotFoundError:
        kept_mode = None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_ATTEMPTS):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue
        if kept_mode is not None:
            try:
                os.fchmod(fd, kept_mode)
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
        return fd, tmp
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name}")


def write_atomic(path: os.PathLike | str, data: bytes | str) -> None:
    """Write ``data`` (text is UTF-8) to a temporary file beside ``path``, fsync, rename.

    The result has the mode :func:`create_beside` gives: umask-respecting for a new file, the
    old file's mode for a replaced one.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_beside(path)
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
