"""Consolidating the shard files of a cluster array into one cache.

Each shard of ``estratos encode --shard I/N`` records its index, the shard count and a digest
of the full input, so merging can refuse a missing or duplicated shard, shards of another
input, and shards made with other settings, instead of producing a silently partial cache.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Dict, Sequence

import numpy as np

from estratos.cache import schema
from estratos.cache.writer import CacheWriter
from estratos.errors import CacheError, SettingsMismatch

log = logging.getLogger(__name__)

#: rows copied per read/write (bounded memory whatever the cache size)
COPY_ROWS = 4 * schema.CHUNK_ROWS


def _shard_attrs(path: Path) -> Dict[str, Any]:
    with schema.open_existing(path, "shard file") as (_, attrs):
        pass  # the attributes are all a merge checks before copying
    if attrs.get("complete") is not True:
        raise CacheError(f"{path}: shard is incomplete (n_done={attrs.get('n_done')}); rerun its "
                         "`estratos encode --shard` command")
    if attrs.get("shard_count") is None:
        raise CacheError(f"{path}: not a shard (no shard_index/shard_count attributes)")
    return attrs


def merge_shards(out: os.PathLike | str, shards: Sequence[os.PathLike | str]) -> Dict[str, Any]:
    """Merge complete shard caches into a new cache ``out``; returns ``{"path", "n_rows", ...}``.

    Refuses: an existing ``out`` (never overwritten), missing or duplicated shard indices,
    incomplete shards, and shards whose settings or input digest differ.
    """
    out = Path(out)
    paths = [Path(p) for p in shards]
    if not paths:
        raise CacheError("cache merge: no shard files given")
    if out.exists():
        raise CacheError(f"{out}: already exists; refusing to overwrite it")
    partial = schema.partial_path(out)
    if partial.exists():
        raise CacheError(f"{partial}: exists (an interrupted merge?); remove it and rerun")
    infos = [(p, _shard_attrs(p)) for p in paths]

    first_path, first = infos[0]
    count = int(first["shard_count"])
    for p, a in infos[1:]:
        diff = schema.settings_diff(a, first)
        for k in ("shard_count", "input_digest", "n_states", "dim", "stored_avg"):
            if k in ("n_states", "dim") and (a.get(k) is None or first.get(k) is None):
                continue  # an empty shard of a --encoder run never learnt its shapes
            if a.get(k) != first.get(k):
                diff[k] = (a.get(k), first.get(k))
        if diff:
            details = "; ".join(f"{k}: {x!r} vs {y!r}" for k, (x, y) in diff.items())
            raise SettingsMismatch(f"{p}: differs from {first_path}: {details}")
    by_index: Dict[int, Path] = {}
    for p, a in infos:
        i = int(a["shard_index"])
        if i in by_index:
            raise CacheError(f"{p}: shard {i}/{count} given twice (also {by_index[i]})")
        by_index[i] = p
    missing = [i for i in range(count) if i not in by_index]
    if missing:
        raise CacheError(f"cache merge: missing shard(s) {', '.join(map(str, missing))} of "
                         f"{count} (have {sorted(by_index)})")

    attrs = {k: v for k, v in first.items()
             if k not in schema.SHARD_ATTRS + ("format", "schema_version", "n_done", "n_base",
                                                "complete")}
    attrs["merged_from"] = count
    writer = CacheWriter.create(partial, attrs)
    seen: set = set()
    try:
        for i in range(count):
            _copy_rows(by_index[i], writer, seen, first["poolings"], bool(first.get("stored_avg")))
        final = writer.finish(out)
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)
        raise
    log.info("merged %d shards into %s (%d rows)", count, final, writer.n_done)
    return {"path": str(final), "n_rows": writer.n_done, "shards": count}


def _copy_rows(path: Path, writer: CacheWriter, seen: set, poolings: Sequence[str],
               stored_avg: bool) -> None:
    with schema.open_h5(path, "r") as f:
        n = int(f.attrs["n_done"])
        for lo in range(0, n, COPY_ROWS):
            hi = min(n, lo + COPY_ROWS)
            keys = schema.keys_as_bytes(f[schema.KEYS][lo:hi])
            keep = np.array([k not in seen for k in keys], dtype=bool)
            if not keep.any():
                continue
            kept = [k for k, good in zip(keys, keep) if good]
            seen.update(kept)
            try:
                sentences = f[schema.SENTENCES].asstr()[lo:hi]
                vectors = {p: f[schema.VECTORS][p][lo:hi][keep] for p in poolings}
                averages = ({p: f[schema.AVG_GROUP][p][lo:hi][keep] for p in poolings}
                            if stored_avg else None)
            except OSError as exc:
                raise CacheError(f"{path}: rows {lo}..{hi - 1} unreadable ({exc}); "
                                 "re-encode this shard") from exc
            writer.append(kept, [s for s, k in zip(sentences, keep) if k],
                          f[schema.N_TOKENS][lo:hi][keep], f[schema.TRUNCATED][lo:hi][keep],
                          vectors, averages)
