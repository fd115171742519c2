"""The cache's on-disk layout, in one place, so writer, reader, merge and verify agree.

A cache is one HDF5 file (docs/cache.md): per-row datasets ``/keys``, ``/sentences``,
``/n_tokens``, ``/truncated`` and one ``/vectors/<pooling>`` (N, n_states, dim) dataset per
pooling, plus root attributes that say how the vectors were made. Rows are only ever appended,
so a row number never changes meaning once written.

Versions (``schema_version``): 2 records ``states``, ``stored_avg`` and ``model_dtype`` in
every cache whose shape is known, and an unset value (None) as an absent attribute. Version 1
stored None as ``""`` and, over its life, began to record ``states``, ``stored_avg``,
``model_dtype`` and ``architecture``. :func:`read_attrs` gives every readable version's
attributes as the current version has them (:func:`migrate`, the one place that knows the
older version); writers add rows only to a current-version file (:func:`upgrade`).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import h5py
import numpy as np

from estratos.cache.architecture import DECODER, ENCODER, decoder_only_type
from estratos.errors import CacheError, DamagedCache
from estratos.registry import unknown_message
from estratos.text import KEY_BYTES
from estratos.vocab import AVG_OF_ALL, VECTOR_DTYPES, VECTOR_SETTINGS

SCHEMA_VERSION = 2
#: the oldest cache format version read (through :func:`migrate`)
OLDEST_VERSION = 1
#: attribute listing the settings a cache does not record (its first writer did not know
#: them); each matches any value (:func:`settings_diff`)
UNRECORDED = "unrecorded"
#: marks a file as an estratos cache (a foreign HDF5 file lacks it and is never touched)
FORMAT_NAME = "estratos-cache"

KEYS = "keys"
SENTENCES = "sentences"
N_TOKENS = "n_tokens"
TRUNCATED = "truncated"
VECTORS = "vectors"
#: ``/avg/<pooling>`` (N, D): the mean over ALL hidden states (embedding output included),
#: computed at encode time, so ``probe --layers avg`` keeps its meaning when ``--states``
#: stores only some states (``stored_avg``; False: not stored)
AVG_GROUP = "avg"
ROW_DATASETS = (KEYS, SENTENCES, N_TOKENS, TRUNCATED)

KEY_DTYPE = np.dtype(f"S{KEY_BYTES}")
#: how each precision lies on disk: HDF5 has no bfloat16, so its 16-bit words (the upper half
#: of a float32) are stored as uint16 and the ``dtype`` attribute says what they are
STORAGE_DTYPES: Dict[str, np.dtype] = {"float16": np.dtype(np.float16),
                                        "bfloat16": np.dtype(np.uint16),
                                        "float32": np.dtype(np.float32)}
#: the largest finite value of each precision (float16 overflows at hidden-state values some
#: LLMs reach; bfloat16 has float32's exponent range, with 8 bits of mantissa: (2 - 2^-7) x
#: 2^127)
DTYPE_MAX = {"float16": float(np.finfo(np.float16).max),
             "bfloat16": (2.0 - 2.0 ** -7) * 2.0 ** 127,
             "float32": float(np.finfo(np.float32).max)}
#: rows per chunk of a vector dataset: one chunk holds these rows of ONE hidden state, so
#: reading one layer never decompresses the others (docs/cache.md)
CHUNK_ROWS = 512

#: attributes that decide what the vectors mean; resuming, adding sentences and merging
#: shards all require them to be identical
SETTINGS_ATTRS = ("schema_version", "encoder", "model", "revision", "tokenizer", "max_length",
                  "lowercase", "dtype", "poolings", "states", "mean_first_token",
                  "prompt", "prompt_kind", "mean_tokens", "random_init", "model_dtype")
#: decoder caches of format 1 written before ``mean_first_token`` recorded
#: ``mean_skips_bos`` instead: true (a BOS token, left out of the mean) is ``skip``, false
#: (no BOS: the first word kept) is ``keep`` (read by :func:`migrate` only)
LEGACY_MEAN_FIRST = {True: "skip", False: "keep"}
#: attributes that only exist on shard files
SHARD_ATTRS = ("shard_index", "shard_count", "input_digest")

PARTIAL_SUFFIX = ".partial"


def partial_path(path: os.PathLike | str) -> Path:
    """Where a cache is written until it is complete (``<name>.partial``)."""
    path = Path(path)
    return path.with_name(path.name + PARTIAL_SUFFIX)


#: the name of shard I of N of a file ``<stem><suffix>`` (caches and results alike)
SHARD_NAME = "{stem}.shard-{index}-of-{count}{suffix}"


def shard_path(path: os.PathLike | str, index: Union[int, str], count: int) -> Path:
    """The file of shard ``index`` (0-based) of ``count``:
    ``cache.h5`` -> ``cache.shard-1-of-3.h5``; an ``index`` of ``"*"`` gives the glob of
    every shard (what ``cache merge`` and ``report`` read in a job script)."""
    path = Path(path)
    return path.with_name(SHARD_NAME.format(stem=path.stem, index=index, count=count,
                                            suffix=path.suffix))


def storage_dtype(dtype: str) -> np.dtype:
    """The numpy dtype a vector dataset of precision ``dtype`` has on disk."""
    try:
        return STORAGE_DTYPES[dtype]
    except KeyError:
        raise CacheError(unknown_message("vector dtype", dtype, VECTOR_DTYPES)) from None


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """Vectors as stored for precision ``dtype``; values already in the storage dtype pass
    through. bfloat16 is float32 rounded to its upper 16 bits (to nearest, ties to even, as
    torch rounds)."""
    values = np.asarray(values)
    target = storage_dtype(dtype)
    if values.dtype == target:
        return values
    if dtype != "bfloat16":
        return values.astype(target)
    if not np.issubdtype(values.dtype, np.floating):
        raise CacheError(f"bfloat16 vectors must be floats or bfloat16 words, got {values.dtype}")
    words = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (words + np.uint32(0x7FFF) + ((words >> np.uint32(16)) & np.uint32(1)))
    nan = np.isnan(values)
    out = (rounded >> np.uint32(16)).astype(np.uint16)
    if nan.any():  # rounding could carry a NaN's mantissa into the exponent: keep it a NaN
        out[nan] = np.uint16(0x7FC0)
    return out


def to_float32(stored: np.ndarray, dtype: str) -> np.ndarray:
    """Stored vectors of precision ``dtype`` as float32 (bfloat16 words widened exactly)."""
    stored = np.asarray(stored)
    if dtype == "bfloat16":
        return (stored.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return stored.astype(np.float32, copy=False)


def nonfinite_rows(stored: np.ndarray, dtype: str) -> np.ndarray:
    """Boolean per row (first axis): does the row hold a NaN or an infinity?"""
    stored = np.asarray(stored)
    axes = tuple(range(1, stored.ndim))
    if dtype == "bfloat16":  # exponent bits all ones: inf or NaN
        bad = (stored & np.uint16(0x7F80)) == np.uint16(0x7F80)
    else:
        bad = ~np.isfinite(stored)
    return bad.any(axis=axes) if axes else bad


#: rows per chunk of the per-row datasets (keys, n_tokens, truncated) and of ``/sentences``
ROW_CHUNK_ROWS = 4096
TEXT_CHUNK_ROWS = 1024
#: HDF5's bytes beside the data: superblock, object headers, chunk indexes, heap collections
#: (measured on caches of 600-20,000 rows: 22-49 KB, the global heap of the texts varying most)
FIXED_OVERHEAD_BYTES = 36_000


def _chunked(n_rows: int, chunk_rows: int) -> int:
    """Rows a chunked dataset allocates for ``n_rows`` (its last chunk is stored whole)."""
    return -(-n_rows // chunk_rows) * chunk_rows


def text_bytes(text: str) -> int:
    """Bytes one ``/sentences`` entry takes: its 16-byte reference in the dataset, and in the
    global heap a 16-byte object header plus the UTF-8 bytes padded to 8."""
    return 32 + -(-len(text.encode("utf-8")) // 8) * 8


def vector_bytes(n_rows: int, n_stored: int, dim: int, dtype: str, n_poolings: int,
                 stored_avg: bool = True) -> int:
    """Bytes of the vector datasets: rows x (stored states + avg) x dim x bytes x poolings,
    rows rounded up to whole chunks."""
    columns = n_stored + (1 if stored_avg else 0)
    return (_chunked(n_rows, CHUNK_ROWS) * columns * dim * storage_dtype(dtype).itemsize
            * n_poolings)


def estimate_bytes(n_rows: int, n_stored: int, dim: int, dtype: str, n_poolings: int, *,
                   texts_bytes: int, stored_avg: bool = True) -> int:
    """The size of a complete cache file: the vectors (:func:`vector_bytes`), the per-row
    datasets (16-byte keys, int32 token counts, bool truncation flags), the texts
    (``texts_bytes``: the sum of :func:`text_bytes`) and HDF5's own structures."""
    rows = _chunked(n_rows, ROW_CHUNK_ROWS) * (KEY_DTYPE.itemsize + 4 + 1)
    return (vector_bytes(n_rows, n_stored, dim, dtype, n_poolings, stored_avg) + rows
            + texts_bytes + (_chunked(n_rows, TEXT_CHUNK_ROWS) - n_rows) * 16
            + FIXED_OVERHEAD_BYTES)


def growth_bytes(lo: int, hi: int, columns: int, dim: int, itemsize: int, n_poolings: int,
                 texts_bytes: int) -> int:
    """Bytes a cache file grows by at most when rows ``[lo, hi)`` are appended: the chunks
    first written (a chunk is allocated whole when its first row is written) of the vector
    datasets (``columns`` = stored states + avg, per pooling) and of the per-row datasets,
    the texts (``texts_bytes``: the sum of :func:`text_bytes`) and HDF5's own structures
    (:func:`metadata_bytes`)."""
    def first_written(chunk_rows: int) -> int:
        return (-(-hi // chunk_rows) - -(-lo // chunk_rows)) * chunk_rows

    # a chunk holds CHUNK_ROWS rows of one column, plus its fletcher32 checksum
    vectors = (first_written(CHUNK_ROWS) * dim * itemsize + 4 * -(-(hi - lo) // CHUNK_ROWS + 1)
               ) * columns * n_poolings
    rows = first_written(ROW_CHUNK_ROWS) * (KEY_DTYPE.itemsize + 4 + 1)
    texts = first_written(TEXT_CHUNK_ROWS) * 16 + texts_bytes
    return vectors + rows + texts + metadata_bytes(n_poolings)


def metadata_bytes(n_poolings: int) -> int:
    """A bound on HDF5's own bytes one append adds: :data:`BLOCK_METADATA_BYTES`, and
    :data:`DATASET_METADATA_BYTES` for each chunked dataset (the per-row ones, and a vectors
    and an avg dataset per pooling), whose chunk index may gain a node."""
    return BLOCK_METADATA_BYTES + DATASET_METADATA_BYTES * (len(ROW_DATASETS) + 2 * n_poolings)


def step_slack(columns: int, dim: int, itemsize: int, n_poolings: int) -> int:
    """How far one append's bound (:func:`growth_bytes`) can exceed what it writes: a chunk
    of every dataset first written, and the metadata bound. A writer that takes each step's
    bound from a reservation needs this much beyond the final size."""
    return (CHUNK_ROWS * columns * (dim * itemsize) * n_poolings
            + ROW_CHUNK_ROWS * (KEY_DTYPE.itemsize + 4 + 1) + TEXT_CHUNK_ROWS * 16
            + 2 * metadata_bytes(n_poolings))


#: HDF5's own bytes one block append may add besides the chunk indexes (a new heap collection
#: of at least 4 KiB, object header updates): a bound, not an estimate
BLOCK_METADATA_BYTES = 8 * 1024
#: a chunk index node (v1 B-tree, about 2.2 KB measured) a dataset may gain in one append
DATASET_METADATA_BYTES = 4 * 1024


def count_truncated(f: h5py.File) -> int:
    """Rows of a cache cut at ``max_length`` (among its trusted ``n_done`` rows)."""
    n = int(f.attrs.get("n_done", 0))
    return int(f[TRUNCATED][:n].sum()) if n else 0


def keys_as_bytes(keys: np.ndarray) -> List[bytes]:
    """Keys read from ``/keys`` as exact 16-byte strings.

    numpy drops trailing NUL bytes when it turns a fixed-size bytes element into ``bytes``
    (``.tolist()``, iteration), which would corrupt about one key in 256; slicing the raw
    buffer keeps every byte.
    """
    raw = np.ascontiguousarray(keys, dtype=KEY_DTYPE).tobytes()
    return [raw[i:i + KEY_BYTES] for i in range(0, len(raw), KEY_BYTES)]


def to_python(value: Any) -> Any:
    """An HDF5 attribute value as plain Python (str, int, float, bool, list, dict)."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [to_python(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list):
        return [to_python(v) for v in value]
    return value


def read_attrs(f: h5py.File) -> Dict[str, Any]:
    """Root attributes as plain Python, in the current version (:func:`migrate`);
    ``poolings``, ``states`` and ``unrecorded`` as tuples, ``library_versions`` a dict."""
    try:
        attrs = {k: to_python(v) for k, v in f.attrs.items()}
    except (OSError, KeyError, ValueError, RuntimeError) as exc:
        raise DamagedCache(f"{f.filename}: its root attributes cannot be read ({exc}); the "
                           "file is damaged: encode it again") from None
    if attrs.get("format") == FORMAT_NAME:
        attrs = migrate(attrs, f.filename)
    for name in ("poolings", "states", UNRECORDED):
        if isinstance(attrs.get(name), list):
            attrs[name] = tuple(attrs[name])
    if isinstance(attrs.get("library_versions"), str):
        try:
            attrs["library_versions"] = json.loads(attrs["library_versions"])
        except ValueError:
            pass
    return attrs


def migrate(attrs: Dict[str, Any], where: str = "cache") -> Dict[str, Any]:
    """A cache's root attributes (plain Python) as the current version has them.

    Version 1 -> 2: ``""`` was None (dropped); a cache without ``states`` stores every state
    ``0..n_states-1``; without ``stored_avg``, no avg; without ``model_dtype``, the weights'
    dtype is not recorded (listed in ``unrecorded``: it matches any); ``mean_skips_bos``
    (decoder caches before ``mean_first_token``) becomes ``mean_first_token``
    (:data:`LEGACY_MEAN_FIRST`); without ``architecture``, a transformers cache's
    ``model_type`` tells it (:func:`estratos.cache.architecture.decoder_only_type`, which
    imports transformers). This is the one place that reads a version-1 layout: everything
    else reads the current attributes. A version newer than :data:`SCHEMA_VERSION` raises
    :class:`CacheError` naming ``where``.
    """
    version = int(attrs.get("schema_version") or OLDEST_VERSION)
    if not OLDEST_VERSION <= version <= SCHEMA_VERSION:
        raise CacheError(f"{where}: cache format version {version}; this estratos reads "
                         f"{OLDEST_VERSION} to {SCHEMA_VERSION} (a newer estratos wrote it?)")
    if version == 1:
        attrs = {k: v for k, v in attrs.items() if v != ""}
        if "states" not in attrs and attrs.get("n_states"):
            attrs["states"] = list(range(int(attrs["n_states"])))
        attrs.setdefault("stored_avg", False)
        if "model_dtype" not in attrs:
            attrs[UNRECORDED] = sorted(set(attrs.get(UNRECORDED, ())) | {"model_dtype"})
        skips_bos = attrs.pop("mean_skips_bos", None)
        if skips_bos is not None and "mean_first_token" not in attrs:
            attrs["mean_first_token"] = LEGACY_MEAN_FIRST[bool(skips_bos)]
        if "architecture" not in attrs and attrs.get("encoder") == "transformers" \
                and attrs.get("model_type"):
            attrs["architecture"] = DECODER if decoder_only_type(str(attrs["model_type"])) \
                else ENCODER
        attrs["schema_version"] = SCHEMA_VERSION
    return attrs


def upgrade(f: h5py.File) -> None:
    """Rewrite the root attributes of a cache open for writing in the current version
    (before rows are added to a file of an older one)."""
    stored = to_python(f.attrs.get("schema_version"))
    if stored == SCHEMA_VERSION:
        return
    current = read_attrs(f)
    for name in list(f.attrs):
        if name not in current:
            del f.attrs[name]
    write_attrs(f, current)


def write_attrs(f: h5py.File, attrs: Mapping[str, Any]) -> None:
    """Store attributes; tuples/lists of str become string arrays, dicts JSON text, None
    an absent attribute (removed if present)."""
    for name, value in attrs.items():
        if value is None:
            if name in f.attrs:
                del f.attrs[name]
            continue
        if isinstance(value, (list, tuple)) and value and all(
                isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
            value = np.array(value, dtype=np.int64)  # e.g. ``states``
        elif isinstance(value, (list, tuple)):
            value = np.array([str(v) for v in value], dtype=h5py.string_dtype())
        elif isinstance(value, dict):
            value = json.dumps(value, sort_keys=True)
        f.attrs[name] = value


def is_cache(f: h5py.File) -> bool:
    return to_python(f.attrs.get("format")) == FORMAT_NAME


def looks_like_hdf5(path: os.PathLike | str) -> bool:
    """True when the file starts with the HDF5 signature (userblock-free files)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(8) == b"\x89HDF\r\n\x1a\n"
    except OSError:
        return False


def stored_states(attrs: Mapping[str, Any]) -> Optional[Tuple[int, ...]]:
    """The true hidden-state indices a cache's vector datasets hold, in order (its
    ``states``), or None while an ``--encoder`` cache has not learnt its shape."""
    states = attrs.get("states")
    if states is not None and not isinstance(states, str) and len(states):
        return tuple(int(s) for s in states)
    return None


def vector_settings(attrs: Mapping[str, Any], avg_stored: bool) -> Dict[str, Any]:
    """The settings a cache's vectors were made with that are not part of a cell's
    identity (:data:`estratos.vocab.VECTOR_SETTINGS`), what each results line records as
    ``encoding``: unset settings and those the cache lists as ``unrecorded`` are left out
    (they match any); ``avg`` is ``all`` when the mean over every state is stored, else the
    stored states the probe averages."""
    out: Dict[str, Any] = {}
    unrecorded = set(attrs.get(UNRECORDED, ()))
    for name in VECTOR_SETTINGS:
        if name in unrecorded:
            continue
        if name == "avg":
            states = stored_states(attrs)
            value: Any = AVG_OF_ALL if avg_stored else (
                None if states is None else list(states))
        else:
            value = attrs.get(name)
        if value is not None:
            out[name] = value
    return out


def settings_diff(have: Mapping[str, Any], want: Mapping[str, Any]) -> Dict[str, tuple]:
    """``{name: (have, want)}`` for each settings attribute that differs (``states``: not
    compared while either side's shape is unknown; a setting either side lists as
    ``unrecorded`` matches any)."""
    out = {}
    unrecorded = set(have.get(UNRECORDED, ())) | set(want.get(UNRECORDED, ()))
    for k in SETTINGS_ATTRS:
        if k in unrecorded:
            continue
        a, b = have.get(k), want.get(k)
        if k == "states":
            a, b = stored_states(have), stored_states(want)
            if a is None or b is None:
                continue
        if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
            a = tuple(a or ())
            b = tuple(b or ())
        if a != b:
            out[k] = (a, b)
    return out


def describe_diff(diff: Mapping[str, tuple]) -> str:
    return "; ".join(f"{k}: cache has {a!r}, asked for {b!r}" for k, (a, b) in diff.items())


def open_h5(path: os.PathLike | str, mode: str, **kwargs: Any) -> h5py.File:
    """Open an HDF5 file, turning HDF5's low-level errors into a :class:`CacheError`."""
    try:
        return h5py.File(path, mode, **kwargs)
    except FileNotFoundError as exc:
        raise CacheError(f"{path}: no such cache file") from exc
    except (OSError, ValueError) as exc:
        # match HDF5's own wording: a bare "lock" also matches "sblock" in a truncated file's error
        if "unable to lock" in str(exc).lower() or "already open" in str(exc).lower():
            raise CacheError(f"{path}: in use by another process (another encode or merge "
                             f"running?) ({exc})") from exc
        raise CacheError(f"{path}: cannot open as an HDF5 cache ({exc})") from exc


@contextlib.contextmanager
def open_existing(path: os.PathLike | str, what: str = "cache file", *,
                  locking: bool = True) -> Iterator[Tuple[h5py.File, Dict[str, Any]]]:
    """Open an existing cache read-only; yields (file, root attributes).

    ``locking`` False: without HDF5's file lock, so that a file another process is writing
    (a running encode's ``.partial``) can be looked at; what is read is then what the writer
    last flushed. Raises :class:`CacheError` when ``path`` does not exist or is not an
    estratos cache (``what`` names it in the message, e.g. "shard file").
    """
    if not Path(path).exists():
        raise CacheError(f"{path}: no such {what}")
    with open_h5(path, "r", **({} if locking else {"locking": False})) as f:
        if not is_cache(f):
            raise CacheError(f"{path}: not an estratos cache")
        yield f, read_attrs(f)
