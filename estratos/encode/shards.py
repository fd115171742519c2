"""Which shard of a cluster array this run encodes: ``--shard I/N`` or the SLURM variables.

The split depends on the key alone (:func:`in_shard`), so every array task agrees on it
without talking to the others.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional, Tuple, Union

from estratos.errors import OptionError

ShardSpec = Union[None, str, Tuple[int, int]]


def resolve_shard(shard: ShardSpec, environ: Optional[Mapping[str, str]] = None
                  ) -> Optional[Tuple[int, int]]:
    """``(index, count)`` with a 0-based index, or None.

    ``shard`` is ``"I/N"``, a tuple, None (no sharding) or ``"auto"``: SLURM array variables
    when set (``SLURM_ARRAY_TASK_ID`` minus ``SLURM_ARRAY_TASK_MIN``, of
    ``SLURM_ARRAY_TASK_COUNT``), else no sharding.
    """
    environ = os.environ if environ is None else environ
    if shard is None:
        return None
    if isinstance(shard, str) and shard == "auto":
        task_id = environ.get("SLURM_ARRAY_TASK_ID")
        if task_id is None:
            return None
        count = environ.get("SLURM_ARRAY_TASK_COUNT")
        if count is None:
            raise OptionError("--shard: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT "
                              "is not; pass --shard I/N")
        try:
            index = int(task_id) - int(environ.get("SLURM_ARRAY_TASK_MIN", "0"))
            shard = (index, int(count))
        except ValueError as exc:
            raise OptionError(f"--shard: bad SLURM array variables ({exc})") from exc
        where = "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT"
    elif isinstance(shard, str):
        where = f"--shard {shard!r}"
        parts = shard.split("/")
        try:
            if len(parts) != 2:
                raise ValueError
            shard = (int(parts[0]), int(parts[1]))
        except ValueError as exc:
            raise OptionError(f"{where}: expected I/N with integers, e.g. 0/4") from exc
    else:
        where = f"--shard {shard!r}"
    index, count = int(shard[0]), int(shard[1])
    if count < 1 or not 0 <= index < count:
        raise OptionError(f"{where}: need N >= 1 and 0 <= I < N (shards are numbered from 0)")
    return index, count


def in_shard(key: bytes, shard: Tuple[int, int]) -> bool:
    """Deterministic assignment of a key to one of ``count`` shards."""
    return int.from_bytes(key[:8], "big") % shard[1] == shard[0]
