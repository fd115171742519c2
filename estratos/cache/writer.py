"""Crash-safe, append-only writing of a cache.

A run writes ``<out>.partial``; after every block of rows it flushes the file and then bumps
the ``n_done`` attribute, so rows past ``n_done`` are never trusted and a killed run resumes
from ``n_done``. Only at the end does the file get ``complete=True``, an fsync and an atomic
rename to its final name. Existing files are never opened with mode ``w``: new files are
created with mode ``x`` (fails if anything is there), and extending a complete cache works on
a copy, so the original stays valid until the rename replaces it.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

import h5py
import numpy as np

from estratos.cache import schema
from estratos.errors import CacheError, DiskFull
from estratos.faultpoints import fault_point
from estratos.files import (
    Reservation,
    allocate_beyond_end,
    disk_full,
    drop_beyond_end,
    fsync_file,
    fsync_folder,
)

log = logging.getLogger(__name__)

#: chunk cache per dataset: large enough to hold one chunk of every hidden state of a big model
#: (25 states x 512 rows x 1024 dims x 4 bytes = 50 MB), so a block write touches each chunk once
CHUNK_CACHE_BYTES = 64 * 1024 * 1024


def _open_kwargs() -> dict:
    # default libver on purpose: superblock v3 (libver v110+) records "open for writing" and
    # refuses to reopen a file whose writer was killed, which would defeat resuming
    return {"rdcc_nbytes": CHUNK_CACHE_BYTES, "rdcc_nslots": 100003}


def copy_mode(src: os.PathLike | str, dst: os.PathLike | str) -> None:
    """Give ``dst`` the permission bits of ``src`` (a rewritten cache keeps its mode)."""
    os.chmod(dst, stat.S_IMODE(os.stat(src).st_mode))


def _link_new(src: Path, dst: Path) -> None:
    """Give ``src`` the name ``dst``, failing if ``dst`` exists (no overwrite, no race)."""
    try:
        os.link(src, dst)
    except FileExistsError as exc:
        raise CacheError(f"{dst}: already exists; refusing to overwrite it") from exc
    except OSError:  # a file system without hard links: a rename after a last check
        if dst.exists():
            raise CacheError(f"{dst}: already exists; refusing to overwrite it") from None
        os.rename(src, dst)


def _copy_trusted(src: h5py.File, dst: "CacheWriter", path: Path) -> int:
    """Copy rows ``[0, n_done)`` of ``src`` to ``dst`` block by block, stopping at the first
    block that cannot be read or whose keys do not match their texts; returns rows copied."""
    from estratos.text import sentence_key

    n = int(src.attrs.get("n_done", 0))
    poolings = tuple(schema.to_python(src.attrs["poolings"]))
    step = 4 * schema.CHUNK_ROWS
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        try:
            keys = schema.keys_as_bytes(src[schema.KEYS][lo:hi])
            texts = list(src[schema.SENTENCES].asstr()[lo:hi])
            n_tokens = src[schema.N_TOKENS][lo:hi]
            truncated = src[schema.TRUNCATED][lo:hi]
            vectors = {p: src[schema.VECTORS][p][lo:hi] for p in poolings}
            averages = ({p: src[schema.AVG_GROUP][p][lo:hi] for p in poolings}
                        if src.attrs.get("stored_avg") else None)
        except (OSError, KeyError, ValueError) as exc:
            log.warning("%s: rows %d..%d unreadable after the interruption (%s)", path, lo,
                        hi - 1, exc)
            return lo
        if len(keys) != hi - lo or any(sentence_key(t) != k for t, k in zip(texts, keys)):
            log.warning("%s: rows %d..%d do not match their keys after the interruption",
                        path, lo, hi - 1)
            return lo
        dst.append(keys, texts, n_tokens, truncated, vectors, averages)
    return n


class CacheWriter:
    """Appends rows to a ``.partial`` cache file; :meth:`finish` makes it a complete cache.

    Use :meth:`create` for a new file or :meth:`reopen` for an existing ``.partial``.
    """

    def __init__(self, f: h5py.File, path: Path, room: Optional[Reservation] = None) -> None:
        self._f = f
        self.path = path
        #: the space this writer may use; each write takes its bytes first (nothing held:
        #: each write checks the free space itself)
        self.room = room if room is not None else Reservation(path)
        #: where the blocks allocated to the file past its end end (each step's bound is
        #: allocated there before HDF5 writes it), and the descriptor used to allocate them
        self._allocated = 0
        self._fd: Optional[int] = None
        self._n_done = int(f.attrs.get("n_done", 0))
        #: open dataset handles by path: an append looks each up once per file, not per
        #: block (h5py's lookups hold the GIL the encoder's forward pass needs)
        self._handles: Dict[str, h5py.Dataset] = {}

    def _dataset(self, name: str) -> h5py.Dataset:
        ds = self._handles.get(name)
        if ds is None:
            ds = self._handles[name] = self._f[name]
        return ds

    # -- opening ------------------------------------------------------------------------------
    @classmethod
    def create(cls, path: os.PathLike | str, attrs: Mapping[str, Any],
               room: Optional[Reservation] = None) -> "CacheWriter":
        """Create a new, empty ``.partial`` cache (fails if ``path`` exists); ``room``: the
        space this run holds (:class:`~estratos.files.Reservation`)."""
        path = Path(path)
        if path.exists():
            raise CacheError(f"{path}: already exists; refusing to overwrite it")
        room = room if room is not None else Reservation(path)
        room.take(schema.FIXED_OVERHEAD_BYTES, f"creating {path.name}")
        # built under a private name and linked into place once initialized: a kill during
        # creation must not leave a half-made file under the name a rerun would resume.
        tmp = path.with_name(f"{path.name}.{os.getpid()}.init")
        try:
            f = h5py.File(tmp, "x", **_open_kwargs())
        except FileExistsError:  # a dead process with our pid left it: it was never linked
            tmp.unlink()
            f = h5py.File(tmp, "x", **_open_kwargs())
        except OSError as exc:
            raise CacheError(f"{path}: cannot create the cache ({exc})") from exc
        try:
            fault_point("create")
            schema.write_attrs(f, {"format": schema.FORMAT_NAME,
                                   "schema_version": schema.SCHEMA_VERSION, **attrs,
                                   "stored_avg": bool(attrs.get("stored_avg"))})
            f.attrs["n_done"] = 0
            f.attrs["n_base"] = 0
            f.attrs["complete"] = False
            f.create_dataset(schema.KEYS, (0,), dtype=schema.KEY_DTYPE, maxshape=(None,),
                             chunks=(schema.ROW_CHUNK_ROWS,))
            f.create_dataset(schema.SENTENCES, (0,), dtype=h5py.string_dtype("utf-8"),
                             maxshape=(None,), chunks=(schema.TEXT_CHUNK_ROWS,))
            f.create_dataset(schema.N_TOKENS, (0,), dtype=np.int32, maxshape=(None,),
                             chunks=(schema.ROW_CHUNK_ROWS,))
            f.create_dataset(schema.TRUNCATED, (0,), dtype=np.bool_, maxshape=(None,),
                             chunks=(schema.ROW_CHUNK_ROWS,))
            f.create_group(schema.VECTORS)
            if attrs.get("stored_avg"):
                f.create_group(schema.AVG_GROUP)
            writer = cls(f, path, room)
            states = schema.stored_states(attrs)
            if states and attrs.get("dim"):  # known up front: even 0 rows is valid
                for pooling in schema.to_python(f.attrs["poolings"]):
                    writer._vector_dataset(pooling, len(states), int(attrs["dim"]))
            f.flush()
            # linked while still open: HDF5's lock on the file covers the new name from the
            # first instant, so a second encoder can never open it in between
            _link_new(tmp, path)
        except BaseException:
            f.close()
            raise
        finally:
            tmp.unlink(missing_ok=True)
        return writer

    @classmethod
    def reopen(cls, path: os.PathLike | str, room: Optional[Reservation] = None
               ) -> "CacheWriter":
        """Open an existing ``.partial`` to append after its ``n_done`` trusted rows.

        A killed writer can leave HDF5's own structures half-updated past ``n_done`` (the
        string heap of ``/sentences``, chunk indexes), and appending in place to such a file
        fails or builds on damage. So the trusted rows are copied into a fresh file that
        replaces the ``.partial``, each block checked on the way (fletcher32, key vs text); a
        block that fails the check is dropped with everything after it and encoded again.
        """
        path = Path(path)
        with schema.open_h5(path, "r") as src:
            if not schema.is_cache(src):
                raise CacheError(f"{path}: not an estratos cache; refusing to write to it")
            if src.attrs.get("complete"):
                raise CacheError(f"{path}: already complete; a .partial must not be")
            attrs = schema.read_attrs(src)
            n_base = int(attrs.get("n_base", 0))
            tmp = path.with_name(f"{path.name}.{os.getpid()}.recover")
            tmp.unlink(missing_ok=True)  # left by a dead process with our pid
            fresh = cls.create(tmp, {k: v for k, v in attrs.items()
                                     if k not in ("format", "schema_version")}, room)
            try:
                kept = _copy_trusted(src, fresh, path)
                fresh.set_attrs({"n_base": min(n_base, kept)})
                fresh.close()
                copy_mode(path, tmp)
                fsync_file(tmp)
                os.replace(tmp, path)
            except BaseException:
                fresh.close()
                tmp.unlink(missing_ok=True)
                raise
        if kept < int(attrs.get("n_done", 0)):
            log.warning("%s: kept %d of %d rows (the rest failed their checks and will be "
                        "encoded again)", path, kept, int(attrs.get("n_done", 0)))
        return cls._reopen_in_place(path, room)

    @classmethod
    def _reopen_in_place(cls, path: os.PathLike | str, room: Optional[Reservation] = None
                         ) -> "CacheWriter":
        """Open a ``.partial`` known to be sound (a fresh copy) and drop rows past ``n_done``."""
        path = Path(path)
        f = schema.open_h5(path, "r+", **_open_kwargs())
        try:
            if not schema.is_cache(f):
                raise CacheError(f"{path}: not an estratos cache; refusing to write to it")
            if f.attrs.get("complete"):
                raise CacheError(f"{path}: already complete; a .partial must not be")
            writer = cls(f, path, room)
            writer._truncate_to_done()
        except BaseException:
            f.close()
            raise
        return writer

    @classmethod
    def extend_copy(cls, complete: os.PathLike | str, partial: os.PathLike | str,
                    room: Optional[Reservation] = None) -> "CacheWriter":
        """Start adding rows to a complete cache: copy it to ``partial`` and reopen the copy.

        The copy is made under a temporary name and renamed only once it is marked incomplete,
        so a crash never leaves a ``.partial`` that claims to be something it is not. It has
        the complete cache's permission bits, which the final rename keeps.
        """
        complete, partial = Path(complete), Path(partial)
        tmp = partial.with_name(f"{partial.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)  # left by a dead process with our pid
        room = room if room is not None else Reservation(partial)
        room.take(complete.stat().st_size + schema.BLOCK_METADATA_BYTES,
                  f"a copy of {complete.name} to extend")
        try:
            shutil.copyfile(complete, tmp)
            copy_mode(complete, tmp)
            fault_point("extend-copy")
            with schema.open_h5(tmp, "r+") as f:
                schema.upgrade(f)  # rows are added to a current-version file only
                n = int(f.attrs["n_done"])
                f.attrs["complete"] = False
                f.attrs["n_base"] = n
            fsync_file(tmp)
            if partial.exists():
                raise CacheError(f"{partial}: appeared while copying; refusing to overwrite it")
            os.replace(tmp, partial)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return cls._reopen_in_place(partial, room)

    # -- state --------------------------------------------------------------------------------
    @property
    def n_done(self) -> int:
        return self._n_done

    @property
    def n_base(self) -> int:
        """Rows that were in the cache before the current run started adding to it."""
        return int(self._f.attrs.get("n_base", 0))

    @property
    def attrs(self) -> dict:
        return schema.read_attrs(self._f)

    def set_attrs(self, attrs: Mapping[str, Any]) -> None:
        schema.write_attrs(self._f, attrs)

    def keys(self) -> np.ndarray:
        """Keys of the trusted rows (``[0, n_done)``)."""
        return self._f[schema.KEYS][: self._n_done]

    def _truncate_to_done(self) -> None:
        """Forget rows a killed run wrote past ``n_done`` (they may be half-written)."""
        n = self._n_done
        for name in schema.ROW_DATASETS:
            if self._f[name].shape[0] != n:
                self._f[name].resize((n,))
        groups = [self._f[schema.VECTORS]] + ([self._f[schema.AVG_GROUP]]
                                              if schema.AVG_GROUP in self._f else [])
        for ds in (ds for group in groups for ds in group.values()):
            if ds.shape[0] != n:
                ds.resize((n,) + ds.shape[1:])

    # -- writing ------------------------------------------------------------------------------
    def _vector_dataset(self, pooling: str, n_stored: int, dim: int) -> h5py.Dataset:
        """``/vectors/<pooling>`` (N, n_stored, dim), created on first use. An ``--encoder``
        cache learns its shape here (every state stored, so ``n_states`` = ``n_stored``)."""
        name = f"{schema.VECTORS}/{pooling}"
        if name in self._handles or pooling in self._f[schema.VECTORS]:
            ds = self._dataset(name)
            if ds.shape[1:] != (n_stored, dim):
                raise CacheError(
                    f"{self.path}: the encoder gives {n_stored} states x {dim} dims but the "
                    f"cache holds {ds.shape[1]} x {ds.shape[2]}")
            return ds
        dtype = schema.storage_dtype(str(self._f.attrs["dtype"]))
        ds = self._f[schema.VECTORS].create_dataset(
            pooling, (self._n_done, n_stored, dim), dtype=dtype, maxshape=(None, n_stored, dim),
            chunks=(schema.CHUNK_ROWS, 1, dim), fletcher32=True)
        if "n_states" not in self._f.attrs:
            self._f.attrs["n_states"] = n_stored
        if "states" not in self._f.attrs:  # an --encoder cache: every state it returns
            self._f.attrs["states"] = np.arange(n_stored, dtype=np.int64)
        self._f.attrs["dim"] = dim
        if self._f.attrs.get("stored_avg"):
            self._f[schema.AVG_GROUP].create_dataset(
                pooling, (self._n_done, dim), dtype=dtype, maxshape=(None, dim),
                chunks=(schema.CHUNK_ROWS, dim), fletcher32=True)
        return ds

    def append(self, keys: Sequence[bytes], sentences: Sequence[str], n_tokens: Sequence[int],
               truncated: Sequence[bool], vectors: Mapping[str, np.ndarray],
               averages: Optional[Mapping[str, np.ndarray]] = None) -> None:
        """Append a block of rows, flush, then advance ``n_done`` (and flush again).

        ``vectors``: ``{pooling: (B, stored states, dim)}``; ``averages``: ``{pooling: (B,
        dim)}``, the mean over all hidden states, required when the cache stores it
        (``stored_avg``) and ignored when it does not.
        """
        try:
            self._take(self._growth(len(keys), sentences, vectors),
                       f"{len(keys)} more rows of {self.path.name}")
        except DiskFull as exc:
            raise DiskFull(f"{exc}; {self.path} keeps its {self._n_done} rows written before: "
                           "free space and run the same command again to resume from there"
                           ) from None
        try:
            self._append(keys, sentences, n_tokens, truncated, vectors, averages)
        except OSError as exc:
            if not disk_full(exc):
                raise
            raise DiskFull(f"{self.path}: the disk is full ({exc.__class__.__name__}: "
                           f"{str(exc)[:200]}); the file keeps its {self._n_done} rows written "
                           f"before: free space in {self.path.parent} and run the same command "
                           "again to resume from there") from exc

    def _size(self) -> int:
        try:
            return os.stat(self.path).st_size
        except OSError:
            return 0

    def _take(self, nbytes: int, what: str) -> None:
        """Before a write that may grow the file by ``nbytes``: allocate the blocks from its
        end to ``nbytes`` past it (those already allocated by earlier steps count), taking
        the new ones from :attr:`room` (:meth:`Reservation.take`), so the write cannot meet
        a full disk. :class:`DiskFull` when they are not free, before anything is written."""
        size = self._size()
        start = max(size, self._allocated)
        new = size + nbytes - start
        if new <= 0:
            return
        self.room.take(new, what)
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:  # not linked yet (creation): the check above stands
                return
        if allocate_beyond_end(self._fd, start, new, folder=self.path.parent, what=what):
            self._allocated = start + new

    def _release(self) -> None:
        """Close the allocation descriptor and give back the blocks past the file's end."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._allocated:
            drop_beyond_end(self.path)
            self._allocated = 0

    def _growth(self, b: int, sentences: Sequence[str], vectors: Mapping[str, np.ndarray]
                ) -> int:
        """The most bytes appending ``b`` rows can add (:func:`schema.growth_bytes`)."""
        if not b:
            return 0
        shapes = [np.shape(v) for v in vectors.values()]
        if not shapes or len(shapes[0]) != 3:
            return schema.BLOCK_METADATA_BYTES  # refused by _append before any write
        stored_avg = bool(self._f.attrs.get("stored_avg"))
        itemsize = schema.storage_dtype(str(self._f.attrs["dtype"])).itemsize
        _, n_stored, dim = shapes[0]
        return schema.growth_bytes(self._n_done, self._n_done + b,
                                   n_stored + (1 if stored_avg else 0), dim, itemsize,
                                   len(shapes), sum(schema.text_bytes(t) for t in sentences))

    def count_truncated(self) -> int:
        """Rows cut at ``max_length`` among the trusted rows."""
        return schema.count_truncated(self._f)

    def _append(self, keys: Sequence[bytes], sentences: Sequence[str], n_tokens: Sequence[int],
                truncated: Sequence[bool], vectors: Mapping[str, np.ndarray],
                averages: Optional[Mapping[str, np.ndarray]]) -> None:
        b = len(keys)
        if b == 0:
            return
        attrs = self._f.attrs
        poolings = tuple(schema.to_python(attrs["poolings"]))
        dtype, stored_avg = str(attrs["dtype"]), bool(attrs.get("stored_avg"))
        if set(vectors) != set(poolings):
            raise CacheError(f"{self.path}: got poolings {sorted(vectors)}, "
                             f"cache has {list(poolings)}")
        lo, hi = self._n_done, self._n_done + b
        rows = {
            schema.KEYS: np.asarray(keys, dtype=schema.KEY_DTYPE),
            schema.SENTENCES: np.array(list(sentences), dtype=object),
            schema.N_TOKENS: np.asarray(n_tokens, dtype=np.int32),
            schema.TRUNCATED: np.asarray(truncated, dtype=np.bool_),
        }
        for name, values in rows.items():
            if len(values) != b:
                raise ValueError(f"{name}: {len(values)} values for {b} rows")
            ds = self._dataset(name)
            ds.resize((hi,))
            ds[lo:hi] = values
        for pooling in poolings:
            arr = vectors[pooling]
            if arr.ndim != 3 or arr.shape[0] != b:
                raise ValueError(f"{pooling}: expected ({b}, states, dim), got {arr.shape}")
            ds = self._vector_dataset(pooling, arr.shape[1], arr.shape[2])
            ds.resize((hi,) + ds.shape[1:])
            ds[lo:hi] = schema.to_storage(arr, dtype)
            if stored_avg:
                avg = None if averages is None else averages.get(pooling)
                if avg is None or avg.shape != (b, arr.shape[2]):
                    raise ValueError(f"{pooling}: expected the ({b}, dim) mean of every state, "
                                     f"got {None if avg is None else avg.shape}")
                ads = self._dataset(f"{schema.AVG_GROUP}/{pooling}")
                ads.resize((hi, ads.shape[1]))
                ads[lo:hi] = schema.to_storage(avg, dtype)
            fault_point("append-write")
        self._f.flush()
        fault_point("append-flushed")
        self._f.attrs["n_done"] = hi
        self._f.flush()
        self._n_done = hi
        fault_point("append-done")

    def finish(self, final: os.PathLike | str) -> Path:
        """Mark complete, fsync, and atomically rename the ``.partial`` to ``final``."""
        final = Path(final)
        self._take(schema.BLOCK_METADATA_BYTES, f"completing {self.path.name}")
        self._f.attrs["n_done"] = self._n_done
        self._f.attrs["n_base"] = 0
        self._f.attrs["complete"] = True
        self._f.flush()
        fault_point("finish-marked")
        self._f.close()
        self._release()
        fsync_file(self.path)
        os.replace(self.path, final)
        fault_point("finish-renamed")
        fsync_folder(final.parent)
        log.info("wrote %s (%d rows)", final, self._n_done)
        return final

    def close(self) -> None:
        """Close without completing (the ``.partial`` stays resumable)."""
        if self._f.id.valid:
            try:
                self._f.flush()
            except OSError as exc:  # e.g. a full disk: n_done still names the rows to trust
                log.warning("%s: could not flush on close (%s); rows up to n_done=%d stay "
                            "trusted", self.path, exc, self._n_done)
            self._f.close()
        self._release()

    def __enter__(self) -> "CacheWriter":
        return self

    def __exit__(self, *exc: Optional[BaseException]) -> None:
        self.close()
