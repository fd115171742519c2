"""Surface cues of a sentence: its edge words and its counts of closed-class items.

What they are for: a probing task is only worth probing when a cue simpler than what it names
cannot solve it. The ``first-last-word`` and ``function-words`` baselines of
:mod:`estratos.probe.baseline` are built from these features, and the synthetic suite's cue
audit (:mod:`estratos.probe.cue_audit`) scores each of them alone.

- edge words: the first and the last *word* of a sentence, a word being a whitespace token
  with a letter or digit in it, so that a final period or quote token does not hide the last
  word; case kept (a capital letter is part of what the edge shows);
- closed-class counts: how many times each Spanish function word occurs (tokens
  lower-cased, :data:`FUNCTION_WORDS`), how many tokens end in ``-s`` (Spanish plurals), and
  how many times each punctuation character occurs (any Unicode ``P*`` character).

Every count becomes, per column, a number scaled by the largest count seen in the fitting
sentences plus one indicator per count seen there (:func:`estratos.probe.baseline.
value_columns`'s recipe), so that a classifier can read any count as any label, not only
"more is more".
"""

from __future__ import annotations

import unicodedata
from typing import Callable, Dict, List, Mapping, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

#: Spanish function words: articles, demonstratives, possessives, contractions,
#: prepositions, conjunctions, relatives, pronouns and clitics, and the closed-class adverbs
#: that link or negate clauses. Matched against the lower-cased whitespace token.
FUNCTION_WORDS: Tuple[str, ...] = (
    # articles, demonstratives, possessives, contractions
    "el", "la", "los", "las", "lo", "un", "una", "unos", "unas",
    "este", "esta", "estos", "estas", "ese", "esa", "esos", "esas",
    "aquel", "aquella", "aquellos", "aquellas", "su", "sus", "mi", "mis", "tu", "tus",
    "nuestro", "nuestra", "nuestros", "nuestras", "al", "del",
    # prepositions
    "a", "ante", "bajo", "con", "contra", "de", "desde", "durante", "en", "entre", "hacia",
    "hasta", "para", "por", "según", "sin", "sobre", "tras", "junto", "cerca", "delante",
    "detrás",
    # conjunctions and relatives
    "y", "e", "o", "u", "ni", "pero", "sino", "que", "porque", "aunque", "si", "cuando",
    "como", "mientras", "pues", "quien", "quienes", "cual", "cuales", "donde", "cuyo",
    # pronouns and clitics
    "me", "te", "se", "le", "les", "nos", "os", "yo", "tú", "él", "ella", "ellos", "ellas",
    "usted", "ustedes",
    # closed-class adverbs
    "no", "sí", "ya", "muy", "más", "menos", "tan", "también", "luego", "después", "antes",
)


def words(sentence: str) -> List[str]:
    """The whitespace tokens of ``sentence`` that hold a letter or a digit."""
    return [t for t in sentence.split() if any(c.isalnum() for c in t)]


def first_word(sentence: str) -> str:
    """The first word (:func:`words`), case kept; ``""`` when there is none."""
    ws = words(sentence)
    return ws[0] if ws else ""


def last_word(sentence: str) -> str:
    """The last word (:func:`words`), case kept; ``""`` when there is none."""
    ws = words(sentence)
    return ws[-1] if ws else ""


def is_punctuation(char: str) -> bool:
    """Whether ``char`` is a Unicode punctuation character (category ``P*``)."""
    return unicodedata.category(char).startswith("P")


def function_word_counts(sentence: str) -> Dict[str, int]:
    """``{function word: occurrences}`` over the lower-cased tokens (zero counts left out)."""
    known = _FUNCTION_SET
    out: Dict[str, int] = {}
    for token in sentence.lower().split():
        if token in known:
            out[token] = out.get(token, 0) + 1
    return out


def s_ending_count(sentence: str) -> int:
    """Tokens that are all letters and end in ``s`` (case ignored): Spanish plural forms."""
    return sum(1 for t in sentence.lower().split() if t.isalpha() and t.endswith("s"))


def punctuation_counts(sentence: str) -> Dict[str, int]:
    """``{punctuation character: occurrences}`` in ``sentence``."""
    out: Dict[str, int] = {}
    for char in sentence:
        if is_punctuation(char):
            out[char] = out.get(char, 0) + 1
    return out


_FUNCTION_SET = frozenset(FUNCTION_WORDS)


# ----------------------------------------------------------------------------- matrices

def value_columns(values: np.ndarray, fit_ids: np.ndarray) -> sp.csr_array:
    """Rows ``[value / largest fitted value, one indicator per fitted value]`` for a count per
    example (``values``, (n,)): the number lets a classifier order the values (and place
    unseen ones), the indicators give each value seen in the fitting rows ``fit_ids`` a
    weight of its own, so any value can stand for any label."""
    n = len(values)
    fitted = values[fit_ids]
    seen_values = np.unique(fitted)
    scale = float(max(1, int(fitted.max()) if len(fitted) else 1))
    where = np.searchsorted(seen_values, values)
    seen = np.zeros(n, dtype=bool)
    inside = where < len(seen_values)
    seen[inside] = seen_values[where[inside]] == values[inside]
    rows = np.concatenate([np.arange(n), np.flatnonzero(seen)])
    cols = np.concatenate([np.zeros(n, dtype=np.int64), 1 + where[seen]])
    data = np.concatenate([values / scale, np.ones(int(seen.sum()))])
    return sp.csr_array((data, (rows, cols)), shape=(n, 1 + len(seen_values)),
                        dtype=np.float64)


def count_columns(counts: np.ndarray, fit_ids: np.ndarray) -> sp.csr_array:
    """:func:`value_columns` of each column of ``counts`` (n, k) side by side; columns never
    non-zero in the fitting rows ``fit_ids`` are dropped (nothing can be learnt from them)."""
    n = counts.shape[0]
    blocks: List[sp.csr_array] = []
    fitted = counts[fit_ids]
    for j in range(counts.shape[1]):
        if len(fitted) and not fitted[:, j].any():
            continue
        blocks.append(value_columns(counts[:, j], fit_ids))
    if not blocks:
        return sp.csr_array((n, 1), dtype=np.float64)
    return sp.csr_array(sp.hstack(blocks, format="csr"))


def indicator_matrix(keys: Sequence[Sequence[str]], fit_ids: np.ndarray) -> sp.csr_array:
    """0/1 rows: one column per key seen in the fitting rows; keys never seen there are
    dropped (a sentence with none is a zero row)."""
    vocab: Dict[str, int] = {}
    for i in fit_ids:
        for key in keys[int(i)]:
            vocab.setdefault(key, len(vocab))
    rows: List[int] = []
    cols: List[int] = []
    for i, row in enumerate(keys):
        for key in dict.fromkeys(row):
            if key in vocab:
                rows.append(i)
                cols.append(vocab[key])
    return sp.csr_array((np.ones(len(rows)), (rows, cols)), shape=(len(keys), max(1, len(vocab))),
                        dtype=np.float64)


def _dict_counts(per_sentence: Sequence[Mapping[str, int]], names: Sequence[str]) -> np.ndarray:
    index = {name: j for j, name in enumerate(names)}
    out = np.zeros((len(per_sentence), len(names)), dtype=np.int64)
    for i, counts in enumerate(per_sentence):
        for name, value in counts.items():
            out[i, index[name]] = value
    return out


def closed_class_counts(sentences: Sequence[str]) -> Tuple[np.ndarray, Tuple[str, ...]]:
    """(n, k) counts and their k column names: every function word, ``-s`` endings
    (``"-s"``), and every punctuation character found in ``sentences`` (``"punct <c>"``)."""
    marks = sorted({c for s in sentences for c in s if is_punctuation(c)})
    fw = _dict_counts([function_word_counts(s) for s in sentences], FUNCTION_WORDS)
    ends = np.array([[s_ending_count(s)] for s in sentences], dtype=np.int64).reshape(-1, 1)
    punct = _dict_counts([punctuation_counts(s) for s in sentences], marks)
    names = FUNCTION_WORDS + ("-s",) + tuple(f"punct {m}" for m in marks)
    return np.hstack([fw, ends, punct]), names


def function_word_matrix(sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
    """``function-words``: every closed-class count of :func:`closed_class_counts`, each as
    :func:`count_columns` (scaled count + one indicator per fitted count)."""
    counts, _ = closed_class_counts(sentences)
    return count_columns(counts, fit_ids)


def first_last_matrix(sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
    """``first-last-word``: one indicator per first word and one per last word seen in the
    fitting sentences."""
    keys = [(f"first {first_word(s)}", f"last {last_word(s)}") for s in sentences]
    return indicator_matrix(keys, fit_ids)


def _one_count(count: Callable[[str], int]
               ) -> Callable[[Sequence[str], np.ndarray], sp.csr_array]:
    def matrix(sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
        values = np.array([[count(s)] for s in sentences], dtype=np.int64).reshape(-1, 1)
        return count_columns(values, fit_ids)
    return matrix


def _edge(which: Callable[[str], str]) -> Callable[[Sequence[str], np.ndarray], sp.csr_array]:
    def matrix(sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
        return indicator_matrix([(which(s),) for s in sentences], fit_ids)
    return matrix


def _punctuation_matrix(sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
    marks = sorted({c for s in sentences for c in s if is_punctuation(c)})
    return count_columns(_dict_counts([punctuation_counts(s) for s in sentences], marks),
                         fit_ids)


def _token_count(sentence: str) -> int:
    return len(sentence.split())


#: each cue alone, by name: sentences + fitting ids -> sparse rows (the cue audit's columns;
#: the ``first-last-word`` and ``function-words`` baselines are the joint ones)
SINGLE_CUES: Mapping[str, Callable[[Sequence[str], np.ndarray], sp.csr_array]] = {
    "first word": _edge(first_word),
    "last word": _edge(last_word),
    "first+last word": first_last_matrix,
    "tokens": _one_count(_token_count),
    "characters": _one_count(len),
    "function words": function_word_matrix,
    "que": _one_count(lambda s: s.lower().split().count("que")),
    "-s endings": _one_count(s_ending_count),
    "punctuation": _punctuation_matrix,
}
