"""Stage one: run an encoder once over unique sentences and write the HDF5 cache.

Public API: :func:`encode_sentences` (what ``estratos encode`` calls), :class:`EncodeSummary`,
:func:`gather_sentences` (``--sentences FILE`` or ``--tasks IDS``: :func:`read_sentence_file`,
:func:`task_sentences`).
"""

from estratos.encode.inputs import gather_sentences, read_sentence_file, task_sentences
from estratos.encode.run import encode_sentences
from estratos.encode.shards import resolve_shard
from estratos.encode.summary import EncodeSummary

__all__ = ["EncodeSummary", "encode_sentences", "gather_sentences", "read_sentence_file", "resolve_shard",
           "task_sentences"]
