"""Say the cost before paying it: the cache's expected size and the free space it needs.

Why before: a cache of every hidden state of a 7B LLM over the Spanish suite is hundreds of
GB; finding that out when the disk fills after hours of encoding wastes the hours. The size
comes from :func:`estratos.cache.schema.estimate_bytes` (the layout's one home); the free
space needed depends on how the run writes (docs/encode.md, "Disk space").
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from estratos.cache import schema
from estratos.errors import DiskFull
from estratos.files import human_bytes

#: how to make a cache smaller (said with every full-disk error of encode)
SHRINK_HINT = ("store less: --states (e.g. every:4 keeps about a quarter of the states; the "
               "avg is stored anyway), --dtype float16 or bfloat16 (half of float32), one "
               "--pooling instead of two, or fewer --tasks")

#: kept free beyond the estimate (HDF5 metadata written at the end, the estimate's error)
MARGIN = 0.02


@dataclass(frozen=True)
class SpacePlan:
    """The final file's expected size and what this run needs free in its folder."""

    folder: Path
    rows: int                 # rows of the final cache
    new_rows: int             # rows this run writes
    n_stored: int
    dim: int
    dtype: str
    n_poolings: int
    expected: int             # bytes of the final cache
    vectors: int              # of which vectors
    needed: int               # free bytes needed now
    free: int

    def describe(self) -> str:
        itemsize = schema.storage_dtype(self.dtype).itemsize
        return (f"expected cache size: {human_bytes(self.expected)} ({self.expected:,} "
                f"bytes): {self.rows:,} rows x ({self.n_stored} states + avg) x {self.dim} "
                f"dims x {itemsize} bytes ({self.dtype}) x {self.n_poolings} pooling(s) = "
                f"{human_bytes(self.vectors)} of vectors, plus keys and texts; "
                f"{human_bytes(self.free)} free in {self.folder}")

    def check(self) -> None:
        """Raise :class:`DiskFull` with the options that shrink the cache when the folder
        has less free space than the run needs."""
        if self.free >= self.needed:
            return
        raise DiskFull(
            f"{self.folder}: {human_bytes(self.free)} free, but this encode needs about "
            f"{human_bytes(self.needed)} ({self.describe().split(': ', 1)[1]}). Free "
            f"space, choose another --out folder, or {SHRINK_HINT}")


def plan_space(folder: Path, *, new_texts: Sequence[str], existing_rows: int,
               existing_bytes: int, resuming: bool, n_stored: int, dim: int,
               dtype: str, n_poolings: int, free: Optional[int] = None) -> SpacePlan:
    """The size of the cache once this run ends and the free space it needs now.

    ``new_texts``: the sentences this run will add; ``existing_rows`` / ``existing_bytes``:
    the cache or ``.partial`` it builds on (their texts are taken at the new ones' mean
    length). A new cache needs its size; extending a complete cache writes a copy beside it
    (the size again); resuming first copies the ``.partial``'s trusted rows to a fresh file,
    then drops the old one, so it needs the larger of the ``.partial`` and what is left.
    """
    new = sum(schema.text_bytes(t) for t in new_texts)
    mean = new / len(new_texts) if new_texts else schema.text_bytes("x" * 60)
    rows = existing_rows + len(new_texts)
    expected = schema.estimate_bytes(rows, n_stored, dim, dtype, n_poolings,
                                     texts_bytes=int(new + mean * existing_rows))
    if resuming:
        needed = max(existing_bytes, expected - existing_bytes)
    else:
        needed = expected  # new, or a copy of the complete cache grown to the final size
    # each block's space is taken (bounded) before it is written: one bound's slack more
    needed = int(needed * (1 + MARGIN)) + schema.step_slack(
        n_stored + 1, dim, schema.storage_dtype(dtype).itemsize, n_poolings)
    if free is None:
        free = shutil.disk_usage(folder).free
    return SpacePlan(folder, rows, len(new_texts), n_stored, dim, dtype, n_poolings, expected,
                     schema.vector_bytes(rows, n_stored, dim, dtype, n_poolings), needed, free)
