"""The file toolkit: every file estratos writes is whole or absent, durable, locked, and a
full disk is one clear error.

One home, one rule each, for what every part that writes needs (reports, task files,
downloads, results, predictions, caches):

- **temporary files** (:func:`create_beside`): a hidden name beside the output, with the mode a
  plain ``open()`` would give (``0666`` less the umask, the folder's default ACL) or that of
  the file it replaces, never ``mkstemp``'s private ``0600``;
- **writes that cannot be torn by a full disk** (:func:`write_all`): the bytes are reserved
  first (``posix_fallocate``), so a full disk fails before the first byte is written, with a
  :class:`~estratos.errors.DiskFull` naming the folder, the bytes needed and the bytes free;
- **atomic replacement** (:func:`write_atomic`, :func:`publish`): temporary file, fsync,
  rename, fsync of the folder; readers see the old file or the new one;
- **fsync** (:func:`fsync_file`, :func:`fsync_folder`): a file's errors are always raised; a
  folder's are raised too, except the refusal of file systems that cannot fsync a folder
  (``EINVAL``, ``ENOTSUP``/``EOPNOTSUPP``), where there is nothing more to do;
- **locks** (:func:`locked`, :func:`try_lock`): an exclusive ``flock`` (released by the kernel
  when the process dies, so a crash never leaves a stale lock);
- **space held ahead** (:class:`Reservation`, :func:`allocate_beyond_end`): a writer that
  cannot survive a full disk in the middle of a write (HDF5) reserves what it will need
  before it starts and moves it, step by step, into blocks allocated to its own file past
  its end, so its writes land on allocated blocks and cannot meet a full disk.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Callable, Iterator, Optional, Tuple, Type

from estratos.errors import DiskFull, EstratosError

PathLike = os.PathLike | str

_ATTEMPTS = 100
#: errno values of a full disk or quota
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
#: errno values of a file system that cannot fsync a folder or preallocate a file
_UNSUPPORTED = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP)
#: the unit file systems allocate in (a reservation is released in whole ones)
_BLOCK = 4096
#: suffix of the hidden file a :class:`Reservation` holds its space in
RESERVE_SUFFIX = ".reserve"


def human_bytes(n: float) -> str:
    """``1.2 MB`` (powers of 1000, as disks are sold and ``df -H`` shows)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def free_bytes(folder: PathLike) -> int:
    """Bytes free to this user in ``folder``'s file system."""
    return shutil.disk_usage(folder).free


def disk_full(exc: BaseException) -> bool:
    """Whether an error is a full disk or quota (HDF5 reports the errno in its message, not
    in ``errno``)."""
    if not isinstance(exc, OSError):
        return False
    text = str(exc)
    return (exc.errno in FULL_ERRNOS or "No space left on device" in text
            or "Disk quota exceeded" in text or "errno = 28" in text)


def no_space(folder: PathLike, needed: int, what: str, hint: str = "") -> DiskFull:
    """The one message of a full disk: the folder, what needed how much, what is free."""
    try:
        free = human_bytes(free_bytes(folder))
    except OSError:
        free = "unknown"
    return DiskFull(f"{folder}: the disk is full: {what} needs {human_bytes(needed)}, "
                    f"{free} free{'; ' + hint if hint else ''}")


# --------------------------------------------------------------------------- fsync

def fsync_file(target: PathLike | int) -> None:
    """fsync a file (a path or an open descriptor); every error is raised."""
    if isinstance(target, int):
        os.fsync(target)
        return
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_folder(folder: PathLike) -> None:
    """fsync a folder, so a rename or a new name in it survives a power cut.

    A file system that cannot fsync a folder (``EINVAL``, ``ENOTSUP``) is skipped: the rename
    is as durable as it can make it. Any other error (``EIO``: the folder's update may be
    lost) is raised.
    """
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- writing

def create_beside(path: PathLike, *, mode_of: Optional[PathLike] = None) -> Tuple[int, Path]:
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
        except OSError as exc:
            if disk_full(exc):
                raise no_space(path.parent, 0, f"creating {path.name}") from None
            raise
        if kept_mode is not None:
            try:
                os.fchmod(fd, kept_mode)
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
        return fd, tmp
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name}")


def preallocate(fd: int, offset: int, length: int, *, folder: PathLike, what: str) -> None:
    """Reserve ``[offset, offset + length)`` of an open file on disk (the file grows to cover
    it), so the writes that follow cannot meet a full disk. Raises :class:`DiskFull` when the
    space is not there; a file system that cannot preallocate is left to the writes' own
    checks."""
    if length <= 0:
        return
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno in FULL_ERRNOS:
            raise no_space(folder, length, what) from None
        if exc.errno not in _UNSUPPORTED:
            raise


_FALLOC_FL_KEEP_SIZE = 1


@functools.lru_cache(maxsize=1)
def _libc_fallocate() -> Optional[Callable[..., int]]:
    """libc's ``fallocate`` (Linux), None where there is none."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        func = libc.fallocate
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    func.restype = ctypes.c_int
    return func


def allocate_beyond_end(fd: int, offset: int, length: int, *, folder: PathLike,
                        what: str) -> bool:
    """Allocate disk blocks for ``[offset, offset + length)`` of an open file without changing
    its size (Linux ``fallocate`` with ``FALLOC_FL_KEEP_SIZE``): later writes there, by any
    writer (HDF5), cannot meet a full disk, and the file looks unchanged to it. Raises
    :class:`DiskFull` when the blocks are not free; False where the system cannot do it
    (the caller relies on a free-space check then)."""
    import ctypes

    if length <= 0:
        return True
    fallocate = _libc_fallocate()
    if fallocate is None:
        return False
    if fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    code = ctypes.get_errno()
    if code in FULL_ERRNOS:
        raise no_space(folder, length, what)
    if code in _UNSUPPORTED + (errno.ENOSYS,):
        return False
    raise OSError(code, os.strerror(code))


def drop_beyond_end(path: PathLike) -> None:
    """Give back the blocks allocated past a file's end (:func:`allocate_beyond_end`) by
    truncating it to its own size."""
    try:
        os.truncate(path, os.stat(path).st_size)
    except FileNotFoundError:
        pass


def write_all(fd: int, data: bytes | bytearray | memoryview, *, offset: Optional[int] = None,
              folder: PathLike, what: str) -> None:
    """Write every byte of ``data`` to ``fd`` (at ``offset``, default: the current position),
    the space reserved first (:func:`preallocate`): a full disk raises :class:`DiskFull`
    before anything is written. A short write continues where it stopped."""
    if offset is None:
        offset = os.lseek(fd, 0, os.SEEK_CUR)
    preallocate(fd, offset, len(data), folder=folder, what=what)
    view = memoryview(data)
    while view:
        try:
            n = os.pwrite(fd, view, offset)
        except OSError as exc:
            if disk_full(exc):
                raise no_space(folder, len(view), what) from None
            raise
        view = view[n:]
        offset += n
    os.lseek(fd, offset, os.SEEK_SET)


def publish(tmp: PathLike, target: PathLike, *, replace: bool = True) -> None:
    """Make a finished temporary file ``target``: fsync it, rename it (``replace=False``:
    hard-link, failing if ``target`` exists), fsync the folder."""
    tmp, target = Path(tmp), Path(target)
    fsync_file(tmp)
    if replace:
        os.replace(tmp, target)
    else:
        os.link(tmp, target)
        tmp.unlink()
    fsync_folder(target.parent)


def write_atomic(path: PathLike, data: bytes | str, *, what: Optional[str] = None) -> None:
    """Write ``data`` (text is UTF-8) to ``path`` whole or not at all: a temporary file beside
    it (its space reserved first, :func:`write_all`), fsync, rename, fsync of the folder.

    The result has the mode :func:`create_beside` gives: umask-respecting for a new file, the
    old file's mode for a replaced one. A full disk raises :class:`DiskFull` and leaves the
    old file (or none) in place.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_beside(path)
    try:
        try:
            write_all(fd, payload, offset=0, folder=path.parent,
                      what=what or f"writing {path.name}")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_folder(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- locks

def open_for_lock(path: PathLike, error: Type[EstratosError], what: str) -> int:
    """Open (creating with the umask's mode, its folder too) a file to lock; an ``error``
    naming ``what`` when that is impossible."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        raise error(f"{path}: cannot open {what} ({exc.strerror})") from None


@contextlib.contextmanager
def locked(path: PathLike, error: Type[EstratosError], what: str) -> Iterator[int]:
    """Hold an exclusive ``flock`` on ``path`` (waiting for other holders) while the block
    runs; yields the open descriptor (closing it releases the lock)."""
    fd = open_for_lock(path, error, what)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def try_lock(fd: int) -> bool:
    """Take an exclusive ``flock`` on ``fd`` without waiting; False if another holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


# --------------------------------------------------------------------------- reservation

class Reservation:
    """Free space held for one writer in a hidden file beside its output.

    Why: HDF5 cannot survive a full disk in the middle of a write (it may leave its
    structures torn, or crash at close), and another process may fill the disk after the
    free space was checked. So a writer holds what it will need from the start and, before
    each step, :meth:`take` hands that step's bytes from the file back to the disk and
    checks they are free: the step is refused (:class:`DiskFull`) before HDF5 sees it.
    Removed by :meth:`close`; one a killed writer left is removed by :meth:`clear`.
    """

    def __init__(self, output: PathLike) -> None:
        self.output = Path(output)
        self.path = reserve_path(self.output)
        self.folder = self.output.parent
        self.held = 0
        self._fd: Optional[int] = None

    @staticmethod
    def clear(output: PathLike) -> None:
        """Remove the reservation a killed writer of ``output`` left (call under its lock)."""
        reserve_path(output).unlink(missing_ok=True)

    def hold(self, nbytes: int, what: str, hint: str = "") -> "Reservation":
        """Reserve ``nbytes`` now; :class:`DiskFull` (``hint`` added, nothing kept) when
        they are not free."""
        self.clear(self.output)
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL
                               | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            if disk_full(exc):
                raise no_space(self.folder, nbytes, what, hint) from None
            raise
        try:
            preallocate(self._fd, 0, nbytes, folder=self.folder, what=what)
        except DiskFull:
            self.close()
            raise no_space(self.folder, nbytes, what, hint) from None
        except BaseException:
            self.close()
            raise
        self.held = max(0, nbytes)
        return self

    def take(self, nbytes: int, what: str) -> None:
        """Make ``nbytes`` available to the next write: release them from the reservation
        (as much as it still holds) and check they are free; :class:`DiskFull` otherwise,
        before anything is written. The caller moves them into its file at once
        (:func:`allocate_beyond_end`), so no other process can take them meanwhile."""
        # file systems count whole blocks: a block more than the bytes, in whole blocks
        block = _BLOCK
        give = min(self.held, -(-max(0, nbytes) // block) * block + block if nbytes > 0 else 0)
        if give and self._fd is not None:
            self.held -= give
            os.ftruncate(self._fd, self.held)
        if free_bytes(self.folder) < nbytes:
            raise no_space(self.folder, nbytes, what)

    def close(self) -> None:
        """Give back whatever is still held."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.path.unlink(missing_ok=True)
        self.held = 0


def reserve_path(output: PathLike) -> Path:
    """The hidden file a :class:`Reservation` for ``output`` holds its space in."""
    output = Path(output)
    return output.with_name(f".{output.name}{RESERVE_SUFFIX}")


__all__ = ["FULL_ERRNOS", "Reservation", "allocate_beyond_end", "create_beside", "disk_full",
           "drop_beyond_end", "free_bytes", "fsync_file", "fsync_folder", "human_bytes", "locked",
           "no_space", "open_for_lock", "preallocate", "publish", "reserve_path", "try_lock",
           "write_all", "write_atomic"]
