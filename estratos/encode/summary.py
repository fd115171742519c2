"""What one ``encode_sentences`` call did, and its lines for the command line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple


@dataclass(frozen=True)
class EncodeSummary:
    """What one ``encode_sentences`` call did."""

    path: str
    n_input: int          # sentences given (after dropping blank ones)
    n_unique: int         # unique normalized sentences
    n_selected: int       # of those, in this shard (== n_unique without shards)
    n_cached: int         # already in the cache before this call (complete rows)
    n_resumed: int        # rows recovered from an interrupted run's .partial
    n_encoded: int        # encoded by this call
    n_truncated: int      # of the encoded ones, cut at max_length
    n_rows: int           # rows in the cache now
    max_length: int
    seconds: float
    shard: Optional[Tuple[int, int]] = None
    n_truncated_total: Optional[int] = None  # cut at max_length in the whole cache now
    expected_bytes: Optional[int] = None     # the size estimated before writing
    #: seconds spent encoding and writing batches (``seconds`` also holds the model load,
    #: tokenization and the cache's checks); None when not measured
    encode_seconds: Optional[float] = None

    @property
    def sentences_per_second(self) -> Optional[float]:
        """The encoding rate, over the time spent encoding batches (not the model load);
        None when nothing was encoded or the time is unknown."""
        if not self.n_encoded or not self.encode_seconds or self.encode_seconds <= 0:
            return None
        return self.n_encoded / self.encode_seconds

    def headline(self) -> str:
        """What was encoded, in one line (or that everything was already cached)."""
        if self.n_encoded == 0 and self.n_resumed == 0 and self.n_cached == self.n_selected:
            return f"all {self.n_selected} sentences already cached; the model was not loaded"
        return (f"{self.n_encoded} sentences encoded in {self.seconds:.1f}s, "
                f"{self.n_cached} already cached, {self.n_resumed} resumed")

    def describe(self) -> str:
        """A few human-readable lines for the command line."""
        lines = [f"cache: {self.path} ({self.n_rows} rows)"]
        if self.shard:
            lines.append(f"shard {self.shard[0]}/{self.shard[1]}: {self.n_selected} of "
                         f"{self.n_unique} unique sentences")
        rate = self.sentences_per_second
        lines.append(f"sentences: {self.n_input} given, {self.n_unique} unique, "
                     f"{self.n_cached} already cached, {self.n_resumed} resumed, "
                     f"{self.n_encoded} encoded in {self.seconds:.1f}s"
                     + ("" if rate is None else
                        f" ({rate:.1f} sentences/s over {self.encode_seconds:.1f}s of "
                        "encoding; the rest: model load and checks)"))
        if self.n_encoded == 0 and self.n_resumed == 0 and self.n_cached == self.n_selected:
            lines.append(self.headline())
            if self.max_length and self.n_truncated_total is not None:
                lines.append(f"truncated at {self.max_length} tokens: {self.n_truncated_total} "
                             "in the cache")
        elif self.max_length:
            total = self.n_truncated if self.n_truncated_total is None else self.n_truncated_total
            lines.append(f"truncated at {self.max_length} tokens: {total} in the cache "
                         f"({self.n_truncated} of the {self.n_encoded} encoded by this run)")
        return "\n".join(lines)
