"""A cache's description for ``estratos cache info`` (works on ``.partial`` files too)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict

from estratos.cache import schema
from estratos.errors import CacheError


def cache_info(path: os.PathLike | str) -> Dict[str, Any]:
    """Root attributes plus ``path``, ``size_bytes``, ``n_rows``, ``n_states``, ``dim``,
    ``poolings``, ``n_truncated`` and the vector datasets' shapes and chunking.

    A ``.partial`` that a running encode holds (HDF5's lock) is read without the lock: what
    the writer last flushed, ``n_done`` included (how far the run got). Caught in the middle
    of a write, that read can fail; it is then a :class:`CacheError` saying the file is in
    use and to ask again, as a locked file was before."""
    path = Path(path)
    try:
        with schema.open_existing(path) as (f, attrs):
            return _describe(path, f, attrs)
    except CacheError as exc:
        if not path.name.endswith(schema.PARTIAL_SUFFIX) or "in use" not in str(exc):
            raise
    try:
        with schema.open_existing(path, locking=False) as (f, attrs):
            return _describe(path, f, attrs)
    except (CacheError, OSError, KeyError, ValueError) as exc:
        raise CacheError(f"{path}: in use by another process (a running encode?), and caught "
                         f"in the middle of a write ({exc}); run it again") from exc


def _describe(path: Path, f: Any, attrs: Dict[str, Any]) -> Dict[str, Any]:
    """:func:`cache_info`'s fields from an open cache file."""
    n = int(attrs.get("n_done", 0))
    groups = [schema.VECTORS] + ([schema.AVG_GROUP] if schema.AVG_GROUP in f else [])
    vectors = {(name if group == schema.VECTORS else f"{group}/{name}"):
               {"shape": list(ds.shape), "dtype": str(ds.dtype),
                "chunks": list(ds.chunks or ()), "fletcher32": bool(ds.fletcher32)}
               for group in groups for name, ds in f[group].items()}
    info = dict(attrs)
    # The size comes from the open file, not the path: a finishing encode renames its
    # .partial while this reads it.
    info.update(path=str(path), size_bytes=int(f.id.get_filesize()), n_rows=n,
                n_states=attrs.get("n_states"), dim=attrs.get("dim"),
                poolings=list(attrs.get("poolings", ())),
                n_truncated=schema.count_truncated(f), vectors=vectors)
    return info


def format_info(info: Dict[str, Any]) -> str:
    """``key: value`` lines, the most useful first."""
    first = ["path", "complete", "n_rows", "n_states", "states", "stored_avg", "dim", "poolings",
             "dtype", "size_bytes",
             "model", "revision", "tokenizer", "max_length", "n_truncated"]
    lines = [f"{k}: {info[k]}" for k in first if k in info]
    lines += [f"{k}: {v}" for k, v in sorted(info.items()) if k not in first]
    return "\n".join(lines)
