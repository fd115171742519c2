"""Data formats: the behaviour behind declarative specs, registered by format name.

A spec names its format in ``TaskSpec.format`` and describes its files in ``TaskSpec.files``;
the format says which files each *published* split comes from (:meth:`Format.sources`, no
reading, so listing tasks stays cheap), how to read one split into a
:class:`~estratos.tasks.building.TaskBuilder` (:meth:`Format.read`) and how to count its
examples cheaply (:meth:`Format.count`). Which splits are actually used (and the fallbacks
when some are missing) is decided once, for every format, in :mod:`estratos.tasks.loading`.
"""

# the built-in formats register themselves (in .base) on import
from estratos.tasks.formats import discourse, jsonl, probing, tabular  # noqa: F401
from estratos.tasks.formats.base import (
    DATA_FORMATS,
    Format,
    Source,
    format_names,
    get_format,
    register_format,
    split_paths,
)

__all__ = ["DATA_FORMATS", "Format", "Source", "format_names", "get_format", "register_format",
           "split_paths"]
