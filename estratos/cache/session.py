"""One writer's hold on a cache file: the lock, and the create / resume / extend / finish steps.

``encode`` (and anything else that fills a cache) opens a :class:`CacheSession` with
:func:`open_for_writing` and never handles the files themselves. The session:

- takes an exclusive lock on ``<target>.lock`` (``flock``; released by the kernel when the
  process dies, so a crash never leaves a stale lock) before touching anything: HDF5's own
  file lock is off on many shared file systems (``HDF5_USE_FILE_LOCKING=FALSE``), and two
  writers on one ``.partial`` would destroy each other's work;
- finishes a rename a killed run missed, and refuses any file at the target or ``.partial``
  name that is not an estratos cache (before the caller loads a model);
- checks the stored settings against the caller's, tells which keys are already there, and
  opens the writer: resuming the ``.partial``, extending a copy of a complete cache, or
  creating a new one;
- at the end marks the file complete and renames it; on failure closes it, keeping the
  ``.partial`` resumable, or removing one this session created when asked to.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from estratos.cache import schema
from estratos.cache.writer import CacheWriter
from estratos.errors import CacheError, SettingsMismatch
from estratos.files import Reservation, fsync_file, fsync_folder, open_for_lock, try_lock
from estratos.vocab import utc_now

log = logging.getLogger(__name__)

LOCK_SUFFIX = ".lock"


def lock_path(target: os.PathLike | str) -> Path:
    """The lock file of a cache being written (``<name>.lock`` beside it)."""
    target = Path(target)
    return target.with_name(target.name + LOCK_SUFFIX)


class WriteLock:
    """An exclusive, non-blocking ``flock`` on a lock file beside the cache.

    The file holds the owner's pid, host and start time, so the refusal can name the other
    run. It is removed by its owner on release (while still locked, and a new owner checks
    that the file it locked is still the one under that name, so a removal never lets two
    owners in); a killed owner leaves the file but not the lock, and the next run takes it.
    """

    def __init__(self, path: Path, target: Path) -> None:
        self.path = path
        self.target = target
        self._fd: Optional[int] = None

    def acquire(self) -> "WriteLock":
        while True:
            fd = open_for_lock(self.path, CacheError, "the lock file")
            if not try_lock(fd):
                holder = _read_holder(fd)
                os.close(fd)
                raise CacheError(
                    f"{self.target}: in use by another process ({holder or 'another run'} "
                    f"holds {self.path}); wait for it to finish, or stop it and rerun") from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # its owner removed it between our open and our lock: try again
        stamp = utc_now()
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {stamp}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _check_existing(path: Path, *, partial: bool) -> bool:
    """True if ``path`` exists; refuse anything there that is not an estratos cache."""
    if not path.exists():
        return False
    if not path.is_file() or not schema.looks_like_hdf5(path):
        raise CacheError(f"{path}: exists and is not an estratos cache; refusing to overwrite it")
    with schema.open_h5(path, "r") as f:
        if not schema.is_cache(f):
            raise CacheError(f"{path}: an HDF5 file but not an estratos cache; refusing to "
                             "overwrite it")
        complete = bool(f.attrs.get("complete", False))
    if partial and complete:
        raise CacheError(f"{path}: a .partial marked complete; move it away and rerun")
    if not partial and not complete:
        raise CacheError(f"{path}: an incomplete cache under a final name; move it away and rerun")
    return True


def _finish_interrupted_rename(partial: Path, target: Path) -> None:
    """A run killed after marking its ``.partial`` complete but before renaming it left a
    whole cache (every row was flushed before ``complete`` was set): do the rename it missed."""
    if not partial.is_file() or not schema.looks_like_hdf5(partial):
        return
    with schema.open_h5(partial, "r") as f:
        done = schema.is_cache(f) and bool(f.attrs.get("complete", False))
    if done:
        log.warning("%s: complete but not renamed (the run was killed at the end); renaming it "
                    "to %s", partial, target)
        fsync_file(partial)
        os.replace(partial, target)
        fsync_folder(target.parent)


class CacheSession:
    """The cache file of one writing run; see the module docstring. Use :func:`open_for_writing`."""

    def __init__(self, target: Path, shard: Optional[Tuple[int, int]], lock: WriteLock) -> None:
        self.target = target
        self.partial = schema.partial_path(target)
        self.shard = shard
        self._lock = lock
        #: the free space this run holds for its writes (:meth:`reserve`)
        self.room = Reservation(self.partial)
        Reservation.clear(self.partial)  # a killed run's: nobody else holds the lock
        _finish_interrupted_rename(self.partial, target)
        #: a killed run's ``.partial`` is there (this run resumes it)
        self.resuming = _check_existing(self.partial, partial=True)
        #: a complete cache is there (this run adds to a copy of it)
        self.extending = _check_existing(target, partial=False)
        self.writer: Optional[CacheWriter] = None

    @property
    def open_writer(self) -> CacheWriter:
        """The writer :meth:`open` opened; a CacheError before it or after :meth:`finish`."""
        if self.writer is None:
            raise CacheError(f"{self.partial}: not open for writing")
        return self.writer

    @property
    def existing(self) -> Optional[Path]:
        """The file whose settings this run must match (the ``.partial`` first), or None."""
        return self.partial if self.resuming else self.target if self.extending else None

    def stored_attrs(self) -> Dict[str, Any]:
        """Root attributes of :attr:`existing` (empty for a new cache)."""
        if self.existing is None:
            return {}
        with schema.open_h5(self.existing, "r") as f:
            return schema.read_attrs(f)

    def check_settings(self, want: Mapping[str, Any]) -> None:
        """Raise :class:`SettingsMismatch` unless the existing file was made with ``want``
        (and the same shard); nothing to check for a new cache."""
        if self.existing is None:
            return
        attrs = self.stored_attrs()
        diff = schema.settings_diff(attrs, want)
        have_shard = (attrs.get("shard_index"), attrs.get("shard_count"))
        want_shard = self.shard if self.shard else (None, None)
        if tuple(have_shard) != tuple(want_shard):
            diff["shard"] = (have_shard, want_shard)
        if diff:
            raise SettingsMismatch(f"{self.existing}: made with other settings; "
                                   f"{schema.describe_diff(diff)}. Use another --out, or the "
                                   "same settings")

    def existing_rows(self) -> Tuple[Set[bytes], int]:
        """``(keys of the trusted rows, file size in bytes)`` of :attr:`existing` (a resumed
        ``.partial`` first, else the complete cache extended); empty for a new cache."""
        if self.existing is None:
            return set(), 0
        with schema.open_h5(self.existing, "r") as f:
            n = int(f.attrs.get("n_done", 0))
            keys = set(schema.keys_as_bytes(f[schema.KEYS][:n]))
        return keys, self.existing.stat().st_size

    def count_truncated(self) -> int:
        """Rows cut at ``max_length`` in the complete cache at the target."""
        with schema.open_h5(self.target, "r") as f:
            return schema.count_truncated(f)

    def holds_all(self, keys: Sequence[bytes], input_digest: Optional[str] = None) -> bool:
        """True when a complete cache (and no ``.partial``) already has every key: nothing to
        write. A shard whose rows are all there but made from a smaller input gets the new
        ``input_digest`` (a quick copy and rename), so merge accepts it."""
        if self.resuming or not self.extending:
            return False
        with schema.open_h5(self.target, "r") as f:
            n = int(f.attrs["n_done"])
            cached = set(schema.keys_as_bytes(f[schema.KEYS][:n]))
            stale = self.shard is not None and f.attrs.get("input_digest") != input_digest
        if not all(k in cached for k in keys):
            return False
        if stale:
            writer = CacheWriter.extend_copy(self.target, self.partial)
            writer.set_attrs({"input_digest": input_digest})
            writer.finish(self.target)
        log.info("%s already holds all %d sentences", self.target, len(keys))
        return True

    def reserve(self, nbytes: int, hint: str = "") -> None:
        """Hold ``nbytes`` of the folder for this run's writes (:class:`Reservation`): a disk
        that other processes fill meanwhile stops them, not this run; :class:`DiskFull`
        (``hint`` added) when the space is not free now."""
        self.room = Reservation(self.partial).hold(
            nbytes, f"the cache {self.target.name}", hint)

    def start(self, create_attrs: Mapping[str, Any]) -> CacheWriter:
        """Open the writer: resume the ``.partial``, extend a copy of the complete cache, or
        create a new file with ``create_attrs`` (call :meth:`check_settings` first). Every
        write takes its space from :attr:`room` first."""
        if self.resuming:
            self.writer = CacheWriter.reopen(self.partial, self.room)
        elif self.extending:
            self.writer = CacheWriter.extend_copy(self.target, self.partial, self.room)
        else:
            self.writer = CacheWriter.create(self.partial, create_attrs, self.room)
        return self.writer

    def rows(self) -> Tuple[Set[bytes], List[bytes]]:
        """``(keys of the cache this run extends, keys this run's earlier attempts added)``:
        the first are skipped, the second are a prefix of the plan when resuming."""
        writer = self.open_writer
        stored = schema.keys_as_bytes(writer.keys())
        return set(stored[: writer.n_base]), stored[writer.n_base:]

    def forget_resumed(self) -> None:
        """Treat the rows already in the ``.partial`` as the base (when they are not the
        prefix of this run's plan: kept, but the rest is planned anew)."""
        self.open_writer.set_attrs({"n_base": self.open_writer.n_done})

    def finish(self, attrs: Optional[Mapping[str, Any]] = None) -> Path:
        """Set ``attrs``, mark complete and rename the ``.partial`` to the target."""
        writer = self.open_writer
        if attrs:
            writer.set_attrs(attrs)
        final = writer.finish(self.target)
        self.writer = None
        self.room.close()
        return final

    def abandon(self, *, discard: bool) -> None:
        """Close the writer after a failure. ``discard``: remove the ``.partial`` if this
        session created it (bad input: leave nothing behind); a resumed one always stays."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        self.room.close()
        if discard and not self.resuming:
            self.partial.unlink(missing_ok=True)

    def close(self) -> None:
        """Close any open writer (the ``.partial`` stays resumable) and release the lock."""
        try:
            if self.writer is not None:
                self.writer.close()
                self.writer = None
        finally:
            self.room.close()
            self._lock.release()


@contextlib.contextmanager
def open_for_writing(target: os.PathLike | str, *,
                     shard: Optional[Tuple[int, int]] = None) -> Iterator[CacheSession]:
    """Lock ``target`` for writing and look at what is there (see :class:`CacheSession`).

    Raises :class:`CacheError` when another process holds the lock, or when a file at the
    target or ``.partial`` name is not an estratos cache (nothing is changed then).
    """
    target = Path(target)
    lock = WriteLock(lock_path(target), target).acquire()
    try:
        session = CacheSession(target, shard, lock)
    except BaseException:
        lock.release()
        raise
    try:
        yield session
    finally:
        session.close()
