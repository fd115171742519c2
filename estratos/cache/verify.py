"""Checking a cache before spending hours probing from it.

Reads every chunk (so HDF5 checks each fletcher32 checksum), looks for NaN/inf, checks that
the row datasets agree, that keys are unique and match their texts, and, given the sentences
the tasks need, that each of them has a row. Problems are collected, not raised, so one run
reports everything that is wrong.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from estratos.cache import schema
from estratos.errors import DamagedCache
from estratos.text import normalize_sentence, sentence_key

#: rows checked per read; a multiple of the chunk rows so a bad chunk maps to one block
VERIFY_ROWS = 4 * schema.CHUNK_ROWS
MAX_LISTED = 5


@dataclass
class VerifyReport:
    """Result of :func:`verify_cache`; ``ok`` is False when ``problems`` is not empty."""

    path: str
    n_rows: int = 0
    complete: bool = False
    checked_sentences: int = 0
    missing: int = 0
    missing_examples: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """Human-readable lines: the verdict first, then each problem."""
        head = (f"{self.path}: {'OK' if self.ok else 'FAILED'} ({self.n_rows} rows"
                + (f", {self.checked_sentences} required sentences checked"
                   if self.checked_sentences else "")
                + ")")
        return "\n".join([head] + [f"  - {p}" for p in self.problems])


def verify_cache(path: os.PathLike | str,
                 sentences: Optional[Sequence[str]] = None) -> VerifyReport:
    """Check completeness, checksums, NaN/inf, consistency and (optionally) required sentences.

    Raises :class:`CacheError` only when ``path`` is not a cache at all.
    """
    path = Path(path)
    report = VerifyReport(str(path))
    try:
        with schema.open_existing(path):
            pass
    except DamagedCache as exc:  # a cache, but its attributes are unreadable
        report.problems.append(str(exc))
        return report
    with schema.open_existing(path) as (f, attrs):
        n = int(attrs.get("n_done", 0))
        report.n_rows = n
        report.complete = attrs.get("complete") is True
        if not report.complete:
            report.problems.append(f"incomplete: {n} rows done, complete is not set "
                                   "(rerun the encode command)")
        lengths = {name: f[name].shape[0] for name in schema.ROW_DATASETS}
        poolings = attrs.get("poolings", ())
        groups = [schema.VECTORS] + ([schema.AVG_GROUP] if attrs.get("stored_avg") else [])
        present = []
        for group in groups:
            for p in poolings:
                if group not in f or p not in f[group]:
                    report.problems.append(f"/{group}/{p} is missing")
                else:
                    lengths[f"{group}/{p}"] = f[group][p].shape[0]
                    present.append((group, p))
        _check_states(f, attrs, present, report)
        short = {k: v for k, v in lengths.items() if v < n}
        if short:
            report.problems.append(f"datasets shorter than n_done={n}: {short}")
            n = min([n] + list(short.values()))

        _check_keys(f, n, report)
        for group, p in present:
            _check_vectors(f[group][p], f"/{group}/{p}", n, str(attrs.get("dtype")), report)

        if sentences is not None:
            stored = set(schema.keys_as_bytes(f[schema.KEYS][:n]))
            need: Dict[bytes, str] = {}
            for s in sentences:
                need.setdefault(sentence_key(s), normalize_sentence(s))
            report.checked_sentences = len(need)
            absent = [text for key, text in need.items() if key not in stored]
            report.missing = len(absent)
            report.missing_examples = absent[:MAX_LISTED]
            if absent:
                shown = ", ".join(repr(s[:60]) for s in absent[:MAX_LISTED])
                report.problems.append(f"{len(absent)} required sentence(s) missing, e.g. {shown}")
    return report


def _check_states(f, attrs, present, report: VerifyReport) -> None:
    """The stored hidden states (``states``, ``encode --states``) agree with the model's
    ``n_states`` and with the vector datasets' shapes; each avg is one vector per row."""
    states, n_states, dim = schema.stored_states(attrs), attrs.get("n_states"), attrs.get("dim")
    if states is None:
        return
    if list(states) != sorted(set(states)) or (n_states and not all(
            0 <= s < int(n_states) for s in states)):
        report.problems.append(f"states {list(states)} are not increasing hidden-state indices "
                               f"within 0..{int(n_states or 0) - 1}")
    for group, p in present:
        ds = f[group][p]
        want = (len(states), dim) if group == schema.VECTORS else (dim,)
        if tuple(ds.shape[1:]) != tuple(want):
            report.problems.append(f"/{group}/{p} has shape {list(ds.shape)}, the attributes "
                                   f"say (rows, {', '.join(map(str, want))}) (states "
                                   f"{list(states)}, dim {dim})")


def _check_keys(f, n: int, report: VerifyReport) -> None:
    keys = f[schema.KEYS][:n]
    uniq = np.unique(keys)
    if len(uniq) != n:
        report.problems.append(f"{n - len(uniq)} duplicated key(s)")
    bad = []
    texts = f[schema.SENTENCES].asstr()
    for lo in range(0, n, VERIFY_ROWS):
        hi = min(n, lo + VERIFY_ROWS)
        try:
            block = texts[lo:hi]
        except OSError as exc:
            report.problems.append(f"/sentences rows {lo}..{hi - 1}: unreadable ({exc})")
            continue
        for i, (t, k) in enumerate(zip(block, schema.keys_as_bytes(keys[lo:hi]))):
            if sentence_key(t) != k:
                bad.append(lo + i)
    if bad:
        report.problems.append(f"{len(bad)} row(s) whose key does not match the text, e.g. rows "
                               f"{bad[:MAX_LISTED]}")


def _check_vectors(ds, name: str, n: int, dtype: str, report: VerifyReport) -> None:
    """Checksums and NaN/inf of one vector dataset: (N, states, D), or (N, D) for ``/avg``."""
    corrupt, nonfinite = [], 0
    for lo in range(0, n, VERIFY_ROWS):
        hi = min(n, lo + VERIFY_ROWS)
        for s in range(ds.shape[1] if ds.ndim == 3 else 1):
            try:
                block = ds[lo:hi, s, :] if ds.ndim == 3 else ds[lo:hi]
            except OSError:
                corrupt.append((lo, hi - 1, s))
                continue
            nonfinite += int(schema.nonfinite_rows(block, dtype).sum())
    for lo, hi, s in corrupt[:MAX_LISTED]:
        where = f", state {s}" if ds.ndim == 3 else ""  # /avg has no states: one mean each
        report.problems.append(f"{name} rows {lo}..{hi}{where}: checksum error "
                               "(corrupted chunk)")
    if len(corrupt) > MAX_LISTED:
        report.problems.append(f"{name}: {len(corrupt) - MAX_LISTED} more corrupted blocks")
    if nonfinite:
        report.problems.append(f"{name}: {nonfinite} vector(s) with NaN or inf")
