"""The results contract: one record type, its JSON-lines store and its strict reader.

Probe, baseline and report meet here; nothing else knows the JSON layout of a results line.
- :class:`ResultRecord` (:mod:`.record`): the fields, schema version, rounding and cell identity;
- :class:`ResultsStore` (:mod:`.store`): lock-protected appends from many processes;
- :func:`read_results` / :func:`load_results` (:mod:`.reader`): validated reading, with
  notices for a torn last line and duplicate cells; paths or glob patterns.
"""

from estratos.results.reader import (
    LoadedResults,
    Located,
    Notice,
    expand_paths,
    load_results,
    read_results,
)
from estratos.results.record import (
    KINDS,
    SCHEMA_VERSION,
    CellKey,
    ResultRecord,
    classifier_name,
    primary_score,
)
from estratos.results.store import ResultsStore

__all__ = ["KINDS", "SCHEMA_VERSION", "CellKey", "ResultRecord", "classifier_name",
           "primary_score", "ResultsStore", "LoadedResults", "Located", "Notice",
           "expand_paths", "load_results", "read_results"]
