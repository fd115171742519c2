"""Which shard of a cluster array this run encodes: ``--shard I/N`` or the SLURM variables.

The split depends on the key alone (:func:`in_shard`), so every array task agrees on it
without talking to the others.
"""

from __future__ import annotations

from typing import Tuple

__all__ = ["in_shard"]


def in_shard(key: bytes, shard: Tuple[int, int]) -> bool:
    """Deterministic assignment of a key to one of ``count`` shards."""
    return int.from_bytes(key[:8], "big") % shard[1] == shard[0]
