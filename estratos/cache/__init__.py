"""The HDF5 sentence -> per-layer vectors store: schema, writer, reader, merge, verify.

Public API: :func:`open_cache` / :class:`CacheReader` (probing), :func:`merge_shards`,
:func:`verify_cache` / :class:`VerifyReport`, :func:`cache_info` / :func:`format_info`.
"""

from estratos.cache.info import cache_info, format_info
from estratos.cache.merge import merge_shards
from estratos.cache.reader import CacheReader, open_cache
from estratos.cache.verify import VerifyReport, verify_cache

__all__ = ["CacheReader", "VerifyReport", "cache_info", "format_info", "merge_shards",
           "open_cache", "verify_cache"]
