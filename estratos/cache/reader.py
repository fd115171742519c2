"""Reading a complete cache: sentence lookup by key and per-layer vector reads.

Probing reads one pooling, a few hidden states and the rows of one task at a time. Vector
datasets are chunked (rows, 1, dim), so each state is read on its own; rows are sorted and
read as contiguous blocks (HDF5 fancy indexing row by row is orders of magnitude slower).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import h5py
import numpy as np

from estratos.cache import schema
from estratos.commandline import Command
from estratos.errors import CacheError, MissingSentences, SettingsMismatch
from estratos.model_source import model_identity
from estratos.text import normalize_sentence, sentence_key
from estratos.vocab import AVG

#: two requested rows closer than this are read in one block (the rows between are discarded)
GAP_ROWS = 256


def row_blocks(sorted_rows: np.ndarray, gap: int = GAP_ROWS) -> list:
    """Split sorted unique rows into ``(lo, hi)`` half-open blocks worth reading at once."""
    if len(sorted_rows) == 0:
        return []
    breaks = np.flatnonzero(np.diff(sorted_rows) > gap) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [len(sorted_rows)]))
    return [(int(sorted_rows[s]), int(sorted_rows[e - 1]) + 1) for s, e in zip(starts, ends)]


class CacheReader:
    """A complete cache opened read-only; use :func:`open_cache` (a context manager)."""

    def __init__(self, path: os.PathLike | str) -> None:
        self.path = Path(path)
        self._index: Optional[Dict[bytes, int]] = None
        self._f: h5py.File = schema.open_h5(self.path, "r")
        try:
            if not schema.is_cache(self._f):
                raise CacheError(f"{self.path}: not an estratos cache")
            self.attrs: Dict[str, Any] = schema.read_attrs(self._f)
            if self.attrs.get("complete") is not True:
                raise CacheError(f"{self.path}: incomplete cache "
                                 f"(n_done={self.attrs.get('n_done')});"
                                 " rerun the same `estratos encode` command to finish it")
            n = int(self.attrs.get("n_done", 0))
            if any(self._f[name].shape[0] != n for name in schema.ROW_DATASETS):
                raise CacheError(f"{self.path}: row datasets disagree with n_done={n}")
            for p in self.poolings:
                if p not in self._f[schema.VECTORS]:
                    raise CacheError(f"{self.path}: missing /vectors/{p}")
                if self.has_avg and p not in self._f[schema.AVG_GROUP]:
                    raise CacheError(f"{self.path}: missing /{schema.AVG_GROUP}/{p}")
        except BaseException:
            self.close()
            raise

    # -- metadata -----------------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        return int(self.attrs["n_done"])

    @property
    def poolings(self) -> Tuple[str, ...]:
        return tuple(self.attrs.get("poolings", ()))

    @property
    def n_states(self) -> int:
        """Hidden states of the model (L+1), whether or not the cache stores them all."""
        return int(self.attrs.get("n_states", 0))

    @property
    def states(self) -> Tuple[int, ...]:
        """The hidden states stored (true indices; every one unless encoded with ``--states``)."""
        return schema.stored_states(self.attrs) or ()

    @property
    def has_avg(self) -> bool:
        """Whether the mean over all hidden states is stored (read as the state ``"avg"``)."""
        return bool(self.attrs["stored_avg"]) and schema.AVG_GROUP in self._f

    @property
    def dim(self) -> int:
        return int(self.attrs.get("dim", 0))

    def identity(self) -> Dict[str, Any]:
        """What a probe result records about the vectors it was trained on."""
        a = self.attrs
        return {"model": a.get("model"), "revision": a.get("revision"),
                "tokenizer": a.get("tokenizer"), "max_length": a.get("max_length"),
                "dtype": a.get("dtype"), "path": str(self.path.resolve()),
                "n_rows": self.n_rows, "n_states": self.n_states, "dim": self.dim,
                "random_init": a.get("random_init"), "prompt": a.get("prompt"),
                "encoding": schema.vector_settings(a, self.has_avg)}

    def check(self, expect: Mapping[str, Any]) -> None:
        """Raise :class:`SettingsMismatch` naming both values for each attribute that differs.

        ``pooling`` (singular) checks membership in ``poolings``; a ``model`` that is a local
        folder is compared by its absolute path, as encode records it.
        """
        problems = []
        for name, want in expect.items():
            if want is None:
                continue
            if name == "pooling":
                if want not in self.poolings:
                    problems.append(f"pooling {want!r} not in the cache's {list(self.poolings)}")
                continue
            have = self.attrs.get(name)
            if name == "model" and isinstance(want, (str, os.PathLike)):
                want = model_identity(want)  # what encode records for it
            if isinstance(have, (list, tuple)) or isinstance(want, (list, tuple)):
                same = tuple(have or ()) == tuple(want)
            elif isinstance(have, (int, float)) and not isinstance(have, bool):
                try:
                    same = float(have) == float(want)
                except (TypeError, ValueError):
                    same = False
            else:
                same = have == want
            if not same:
                problems.append(f"{name}: cache has {have!r}, expected {want!r}")
        if problems:
            raise SettingsMismatch(f"{self.path}: made with other settings: " + "; ".join(problems))

    # -- lookup -------------------------------------------------------------------------------
    def _key_index(self) -> Dict[bytes, int]:
        if self._index is None:
            keys = schema.keys_as_bytes(self._f[schema.KEYS][: self.n_rows])
            self._index = {k: i for i, k in enumerate(keys)}
        return self._index

    def rows_for(self, sentences: Sequence[str]) -> np.ndarray:
        """Cache row of each sentence (int64, in order); raises :class:`MissingSentences`."""
        index = self._key_index()
        rows = np.empty(len(sentences), dtype=np.int64)
        missing = []
        for i, s in enumerate(sentences):
            r = index.get(sentence_key(s), -1)
            rows[i] = r
            if r < 0:
                missing.append(s)
        if missing:
            uniq = list(dict.fromkeys(normalize_sentence(s) for s in missing))
            shown = ", ".join(repr(s[:60]) for s in uniq[:3])
            raise MissingSentences(
                f"{self.path}: {len(uniq)} sentence(s) not in the cache, e.g. {shown}; "
                "encode them with `estratos encode` into this cache", missing=len(uniq))
        return rows

    def contains(self, sentences: Sequence[str]) -> np.ndarray:
        """Boolean mask: which sentences have a row."""
        index = self._key_index()
        return np.array([sentence_key(s) in index for s in sentences], dtype=bool)

    def sentences(self, rows: Optional[Sequence[int]] = None) -> list:
        """The stored texts (all rows, or ``rows``)."""
        ds = self._f[schema.SENTENCES].asstr()
        if rows is None:
            return list(ds[: self.n_rows])
        return [ds[int(r)] for r in rows]

    def token_counts(self, rows: Union[Sequence[int], np.ndarray]) -> np.ndarray:
        """Each row's token count under the model's tokenizer as encoded (at most the
        cache's ``max_length``), int64, rows in the order given."""
        counts = np.asarray(self._f[schema.N_TOKENS][: self.n_rows], dtype=np.int64)
        return counts[np.asarray(rows, dtype=np.int64)]

    # -- vectors ------------------------------------------------------------------------------
    def read(self, rows: Union[Sequence[int], np.ndarray], pooling: str,
             states: Optional[Sequence[Union[int, str]]] = None) -> np.ndarray:
        """float32 (len(rows), len(states), dim), rows in the order given.

        ``states``: true hidden-state indices the cache stores, and ``"avg"`` (the stored
        mean over all states) when :attr:`has_avg`; None: every stored state.
        """
        if pooling not in self.poolings:
            raise SettingsMismatch(f"{self.path}: no pooling {pooling!r} "
                                   f"(the cache has {list(self.poolings)})")
        index = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(index) and (index.min() < 0 or index.max() >= self.n_rows):
            raise IndexError(f"rows out of range [0, {self.n_rows})")
        wanted = list(self.states) if states is None else list(states)
        position = {s: i for i, s in enumerate(self.states)}
        columns: List[int] = []
        for s in wanted:
            if s == AVG:
                if not self.has_avg:
                    raise IndexError(f"{self.path}: this cache does not store the {AVG} over "
                                     "all states: average the states read instead")
                continue
            if int(s) not in position:
                raise IndexError(f"state {s} is not stored (the cache holds "
                                 f"{', '.join(map(str, self.states))})")
            columns.append(position[int(s)])
        ds = self._f[schema.VECTORS][pooling]
        uniq, inverse = np.unique(index, return_inverse=True)
        # gather in the stored dtype (half the bytes for 16-bit ones) and convert once at the end
        gathered = np.empty((len(uniq), len(wanted), self.dim), dtype=ds.dtype)
        targets = [j for j, s in enumerate(wanted) if s != AVG]
        avg_at = [j for j, s in enumerate(wanted) if s == AVG]
        contiguous = (len(columns) > 0 and columns == list(range(columns[0], columns[-1] + 1))
                      and targets == list(range(targets[0], targets[-1] + 1)))
        pos = 0
        for lo, hi in row_blocks(uniq):
            end = int(np.searchsorted(uniq, hi))
            take = uniq[pos:end] - lo
            whole = len(take) == hi - lo
            reading = f"/{schema.VECTORS}/{pooling}"  # named in the error: the damaged dataset
            try:
                if contiguous:
                    block = ds[lo:hi, columns[0]:columns[-1] + 1, :]
                    gathered[pos:end, targets[0]:targets[-1] + 1] = block if whole else block[take]
                else:
                    for j, c in zip(targets, columns):
                        gathered[pos:end, j] = ds[lo:hi, c, :][take]
                reading = f"/{schema.AVG_GROUP}/{pooling}"
                for j in avg_at:
                    block = self._f[schema.AVG_GROUP][pooling][lo:hi, :]
                    gathered[pos:end, j] = block if whole else block[take]
            except OSError as exc:  # a fletcher32 mismatch or a damaged file: never fill values
                raise CacheError(f"{self.path}: {reading} rows {lo}..{hi - 1} are "
                                 f"unreadable ({exc}); the cache is corrupted: run `estratos "
                                 "cache verify` and re-encode") from exc
            pos = end
        inverse = inverse.reshape(-1)
        if len(uniq) != len(index) or (inverse != np.arange(len(index))).any():
            gathered = gathered[inverse]  # back to the caller's order (and repeats)
        return np.ascontiguousarray(schema.to_float32(gathered, str(self.attrs.get("dtype"))))

    # -- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        if self._f.id.valid:
            self._f.close()

    def __enter__(self) -> "CacheReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_cache(path: os.PathLike | str,
               expect: Optional[Mapping[str, Any]] = None) -> CacheReader:
    """Open a complete cache for reading, checking ``expect`` against its attributes.

    Refuses a missing file, a ``.partial`` or an incomplete cache (:class:`CacheError`) and any
    ``expect`` entry that differs (:class:`SettingsMismatch`, naming both values).
    """
    path = Path(path)
    if path.name.endswith(schema.PARTIAL_SUFFIX):
        raise CacheError(f"{path}: a .partial cache is still being written (or was interrupted); "
                         "rerun `estratos encode` to finish it")
    if not path.exists():
        partial = schema.partial_path(path)
        if partial.exists():
            raise CacheError(_unfinished(path, partial))
        raise CacheError(f"{path}: no such cache file")
    reader = CacheReader(path)
    if expect:
        try:
            reader.check(expect)
        except BaseException:
            reader.close()
            raise
    return reader


def _unfinished(path: Path, partial: Path) -> str:
    """Why ``path`` is missing when its ``.partial`` is there, and how to finish it."""
    rows, model = "some", None
    try:
        with schema.open_h5(partial, "r") as f:
            rows = str(int(f.attrs.get("n_done", 0)))
            model = schema.to_python(f.attrs.get("model"))
    except (CacheError, OSError, ValueError, TypeError):
        pass
    source = [("--model", str(model))] if model else []
    how = Command.of("encode", source, [("--out", str(path))]).shell() + " ..."
    return (f"{path}: not finished: only {partial} exists ({rows} rows), so the encode that "
            f"writes it was interrupted (or is still running). Run the same command again "
            f"(`{how}` with the same sentences and options) to finish it; it resumes from "
            "those rows")
