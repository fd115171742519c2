"""Benchmark: the expected cache size of real model shapes over the whole Spanish suite.

    python bench/cache_size.py [--rows 521542] [--text-bytes 110] [--markdown]

Pure arithmetic through the same estimate `encode` prints before it writes
(`estratos.cache.schema.estimate_bytes`: vectors rounded to whole chunks, keys, texts, HDF5
structures; within 2 % of real files, tests/test_encode_space.py), for each model shape, each
`--states` choice and each stored precision, two poolings (what encode stores by default).
The avg (mean over all hidden states) is always stored, so it counts as one more state.
`--rows`: the unique sentences of the whole Spanish suite (es-senteval + es-discoeval:
521,542); `--text-bytes`: mean UTF-8 bytes per sentence (texts are a small share anyway).
"""

from __future__ import annotations

import argparse

from estratos.cache import schema
from estratos.files import human_bytes
from estratos.options import parse_states

#: (name, hidden states L+1, width): published configs of each family
MODELS = (
    ("BETO (BERT-base)", 13, 768),
    ("RoBERTa-large-BNE", 25, 1024),
    ("XLM-R-large", 25, 1024),
    ("7-8B LLM (Llama-3-8B)", 33, 4096),
    ("70B LLM (Llama-3-70B)", 81, 8192),
)
STATES = ("all", "every:4", "last:8")
DTYPES = (("float16/bfloat16", "float16"), ("float32", "float32"))


def sizes(rows: int, text_bytes: int, poolings: int = 2):
    """Yields (model, states spec, stored states, {dtype label: bytes})."""
    texts = rows * schema.text_bytes("x" * text_bytes)
    for name, n_states, dim in MODELS:
        for spec in STATES:
            stored = len(parse_states(spec, n_states))
            yield name, spec, stored, {
                label: schema.estimate_bytes(rows, stored, dim, dtype, poolings,
                                             texts_bytes=texts)
                for label, dtype in DTYPES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=521_542)
    parser.add_argument("--text-bytes", type=int, default=110)
    parser.add_argument("--markdown", action="store_true", help="a table for docs/encode.md")
    args = parser.parse_args()
    head = ("model (states L+1 x dim)", "--states", "stored + avg",
            *[f"{label}" for label, _ in DTYPES])
    rows = []
    for name, spec, stored, by_dtype in sizes(args.rows, args.text_bytes):
        shape = next(f"{n} x {d}" for m, n, d in MODELS if m == name)
        rows.append((f"{name} ({shape})", spec, f"{stored} + 1",
                     *[human_bytes(b) for b in by_dtype.values()]))
    print(f"{args.rows:,} sentences, 2 poolings, {args.text_bytes} bytes of text each")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
        for r in [head] + rows:
            print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))


if __name__ == "__main__":
    main()
