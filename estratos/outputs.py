"""Output paths checked before any work: a results file or a folder of outputs can be made
where the user asked, or one :class:`~estratos.errors.OptionError` names the option and why.

Why before: a run that trains for an hour must not fail at its first write. Nothing is left
behind by a check. Standard library only.
"""

from __future__ import annotations

import os
from typing import Callable, Union

from estratos.errors import OptionError


def _creatable_below(target: str, fail: Callable[[str], OptionError]) -> str:
    """The nearest existing folder at or above ``target``, checked to be a folder in which
    files can be created (what ``os.access`` cannot tell too: a read-only file system, an
    ACL, a full quota); raises ``fail(reason)``. Writes nothing that stays."""
    import errno
    import tempfile

    parent = target
    while not os.path.exists(parent):
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    if not os.path.isdir(parent):
        raise fail(f"{os.strerror(errno.ENOTDIR)} ({parent} is a file)")
    try:
        with tempfile.TemporaryFile(dir=parent, prefix=".estratos-check-"):
            pass
    except OSError as exc:
        raise fail(f"{exc.strerror or exc} (cannot create files in {parent})") from None
    return parent


def check_output_file(path: Union[str, os.PathLike[str]], option: str = "--out") -> None:
    """Check, before any work, that results can be written at ``path`` (a file created with
    its parent folders as needed): an existing ``path`` must be a writable file, and the
    nearest existing folder above it writable, with no file on the way ("Not a directory").
    Raises :class:`OptionError` naming ``option``; writes nothing."""
    import errno

    target = os.path.abspath(os.path.expanduser(os.fspath(path)))
    shown = os.fspath(path)

    def fail(reason: str) -> OptionError:
        return OptionError(f"{option} {shown}: {reason}")

    if os.path.isdir(target):
        raise fail("is a folder; give a results file such as run.jsonl")
    if os.path.exists(target):  # appended to: its folder need not take new files
        if not os.access(target, os.W_OK):
            raise fail(f"{os.strerror(errno.EACCES)} (the file cannot be written)")
        return
    _creatable_below(os.path.dirname(target), fail)


def check_output_folder(path: Union[str, os.PathLike[str]], option: str = "--out") -> None:
    """Check, before any work, that a folder of outputs can be made at ``path`` (created with
    its parents as needed): an existing ``path`` must be a folder, and the nearest existing
    folder at or above it must let files be created, with no file on the way ("Not a
    directory"): a read-only folder, a path under a file, /proc. Raises
    :class:`OptionError` naming ``option``; writes nothing."""
    target = os.path.abspath(os.path.expanduser(os.fspath(path)))
    shown = os.fspath(path)

    def fail(reason: str) -> OptionError:
        return OptionError(f"{option} {shown}: {reason}")

    if os.path.exists(target) and not os.path.isdir(target):
        raise fail("exists and is not a folder")
    _creatable_below(target, fail)


__all__ = ["check_output_file", "check_output_folder"]
