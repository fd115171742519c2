"""Stage one: run an encoder once over unique sentences and write the HDF5 cache.

Public API: :func:`encode_sentences` (what ``estratos encode`` calls), :class:`EncodeSummary`,
:func:`read_sentence_file` and :func:`task_sentences` (the command's two input sources).
"""

from estratos.encode.inputs import read_sentence_file, task_sentences
from estratos.encode.run import EncodeSummary, encode_sentences, resolve_shard

__all__ = ["EncodeSummary", "encode_sentences", "read_sentence_file", "resolve_shard",
           "task_sentences"]
