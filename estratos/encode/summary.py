"""What one ``encode_sentences`` call did, and its lines for the command line."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Tuple


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

    @property
    def sentences_per_second(self) -> float:
        return self.n_encoded / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)

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
        lines.append(f"sentences: {self.n_input} given, {self.n_unique} unique, "
                     f"{self.n_cached} already cached, {self.n_resumed} resumed, "
                     f"{self.n_encoded} encoded in {self.seconds:.1f}s "
                     f"({self.sentences_per_second:.1f} sentences/s)")
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
