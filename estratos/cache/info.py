"""A cache's description for ``estratos cache info`` (works on ``.partial`` files too)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict

from estratos.cache import schema


def cache_info(path: os.PathLike | str) -> Dict[str, Any]:
    """Root attributes plus ``path``, ``size_bytes``, ``n_rows``, ``n_states``, ``dim``,
    ``poolings``, ``n_truncated`` and the vector datasets' shapes and chunking."""
    path = Path(path)
    # a .partial may be open in a running encode, which holds HDF5's lock: read it without
    # (what the writer last flushed, n_done included: how far the run got)
    with schema.open_existing(path, locking=not path.name.endswith(schema.PARTIAL_SUFFIX)
                              ) as (f, attrs):
        n = int(attrs.get("n_done", 0))
        groups = [schema.VECTORS] + ([schema.AVG_GROUP] if schema.AVG_GROUP in f else [])
        vectors = {(name if group == schema.VECTORS else f"{group}/{name}"):
                   {"shape": list(ds.shape), "dtype": str(ds.dtype),
                    "chunks": list(ds.chunks or ()), "fletcher32": bool(ds.fletcher32)}
                   for group in groups for name, ds in f[group].items()}
        n_truncated = schema.count_truncated(f)
    info = dict(attrs)
    info.update(path=str(path), size_bytes=path.stat().st_size, n_rows=n,
                n_states=attrs.get("n_states"), dim=attrs.get("dim"),
                poolings=list(attrs.get("poolings", ())), n_truncated=n_truncated,
                vectors=vectors)
    return info


def format_info(info: Dict[str, Any]) -> str:
    """``key: value`` lines, the most useful first."""
    first = ["path", "complete", "n_rows", "n_states", "states", "stored_avg", "dim", "poolings",
             "dtype", "size_bytes",
             "model", "revision", "tokenizer", "max_length", "n_truncated"]
    lines = [f"{k}: {info[k]}" for k in first if k in info]
    lines += [f"{k}: {v}" for k, v in sorted(info.items()) if k not in first]
    return "\n".join(lines)
