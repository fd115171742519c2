"""Builder of ``synthetic-es``: a small Spanish probing suite whose labels are true by construction.

Why it exists: ``estratos demo`` must produce a real per-layer result offline, with no data
download, and the real Spanish probing data is large and partly unpublished. So we generate
sentences from a hand-written lexicon (:mod:`estratos.tasks.lexicon_es`) and templates, choosing
the label first and then building a sentence that has it: the tense of the main verb, the
number of the subject or object, the word count, whether two adjacent words were swapped,
whether two coordinated clauses were swapped (the second clause resumes the first one's object
with a clitic, so the swapped order is detectable), the nesting depth of relative clauses, and
which one of a few target nouns appears. Gender and number agreement is always right because
every form comes from the lexicon's agreement tables.

The output is ordinary task data in the SentEval probing format, one file per task,
``<out_dir>/<Name>.txt`` with lines ``split<TAB>label<TAB>sentence`` (split tr/va/te, 80/10/10,
stratified by label), so the registry, ``encode`` and ``probe`` treat it like real data.
Deterministic for a seed: each task draws from its own ``random.Random`` seeded with the task
name and the seed, so building a subset of tasks gives the same files as building all of them.
Sentences are unique within a task (across all splits).
"""

from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from estratos.atomic import write_atomic
from estratos.errors import OptionError
from estratos.tasks import lexicon_es as lx
from estratos.text import normalize_sentence
from estratos.vocab import DEFAULT_SEED

log = logging.getLogger(__name__)

GENERATOR_VERSION = 1
#: task names, in the order the registry declares them
TASK_NAMES: Tuple[str, ...] = ("Tense", "SubjNumber", "ObjNumber", "Length", "BigramShift",
                               "CoordinationInversion", "Depth", "WordContent")
#: word-count bins of the Length task (inclusive), labelled "05-07" ... so they sort in order
LENGTH_BINS: Tuple[Tuple[int, int], ...] = ((5, 7), (8, 10), (11, 13), (14, 16), (17, 19),
                                            (20, 22))
MAX_DEPTH = 3
SPLIT_FRACTIONS: Tuple[Tuple[str, float], ...] = (("tr", 0.8), ("va", 0.1), ("te", 0.1))
MIN_PER_TASK = 200
MAX_PER_TASK = 200_000
_MAX_TRIES = 2000
FALLBACK_DIR = Path("~/.cache/estratos/synthetic-es")

Token = Tuple[str, str]  # (word, tag); tags: DET NOUN ADJ VERB PREP A REL CLITIC CONJ


def length_label(n_words: int) -> str:
    """The Length label of a sentence of ``n_words`` words (``ValueError`` outside the bins)."""
    for lo, hi in LENGTH_BINS:
        if lo <= n_words <= hi:
            return f"{lo:02d}-{hi:02d}"
    raise ValueError(f"no Length bin holds {n_words} words")


def task_labels(name: str) -> Tuple[str, ...]:
    """The sorted label names of a synthetic-es task."""
    labels = {
        "Tense": lx.TENSES,
        "SubjNumber": ("NN", "NNS"),
        "ObjNumber": ("NN", "NNS"),
        "Length": tuple(f"{lo:02d}-{hi:02d}" for lo, hi in LENGTH_BINS),
        "BigramShift": ("I", "O"),
        "CoordinationInversion": ("I", "O"),
        "Depth": tuple(str(d) for d in range(MAX_DEPTH + 1)),
        "WordContent": tuple(n.sg for n in lx.WORD_CONTENT),
    }
    if name not in labels:
        raise OptionError(f"unknown synthetic-es task {name!r}; choose from "
                          f"{', '.join(TASK_NAMES)}")
    return tuple(sorted(labels[name]))


def render(tokens: Sequence[Token]) -> str:
    """Words joined by spaces, first letter capitalized, a final period."""
    text = " ".join(word for word, _ in tokens)
    return text[:1].upper() + text[1:] + "."


def contract(tokens: Sequence[Token]) -> List[Token]:
    """Apply the obligatory contractions ``de el -> del`` and ``a el -> al``."""
    out: List[Token] = []
    for word, tag in tokens:
        if out and tag == "DET" and (out[-1][0], word) in lx.CONTRACTIONS:
            prev_word, prev_tag = out.pop()
            out.append((lx.CONTRACTIONS[(prev_word, word)], prev_tag + "+DET"))
        else:
            out.append((word, tag))
    return out


class _Grammar:
    """Phrase builders over one random stream (all agreement comes from the lexicon tables)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def number(self, number: Optional[str] = None) -> str:
        return number if number is not None else self.rng.choice(lx.NUMBERS)

    def noun_phrase(self, pool: Sequence[lx.Noun], number: str, adj_p: float = 0.3,
                    adjectives: Sequence[lx.Adjective] = lx.ADJECTIVES,
                    noun: Optional[lx.Noun] = None) -> Tuple[List[Token], lx.Noun]:
        noun = noun if noun is not None else self.rng.choice(pool)
        kind = self.rng.choice(("def", "def", "indef", "dem", "dem2"))
        toks: List[Token] = [(lx.DETERMINERS[kind][(noun.gender, number)], "DET"),
                             (noun.form(number), "NOUN")]
        if self.rng.random() < adj_p:
            toks.append((self.rng.choice(adjectives).form(noun.gender, number), "ADJ"))
        return toks, noun

    def person(self, number: str, adj_p: float = 0.3) -> Tuple[List[Token], lx.Noun]:
        return self.noun_phrase(lx.ANIMATE, number, adj_p, lx.ANIMATE_ADJECTIVES)

    def place_phrase(self) -> List[Token]:
        prep = self.rng.choice(lx.PREPOSITIONS)
        np, _ = self.noun_phrase(lx.PLACES, self.number(), adj_p=0.2)
        return [(w, "PREP") for w in prep.split()] + np

    def verb(self, pool: Sequence[lx.Verb], tense: str, number: str,
             avoid: Optional[lx.Verb] = None) -> Tuple[Token, lx.Verb]:
        choices = [v for v in pool if v is not avoid]
        verb = self.rng.choice(choices)
        return (verb.form(tense, number), "VERB"), verb

    def relative(self, head_number: str, tense: str, depth: int, adj_p: float = 0.3,
                 obj_number: Optional[str] = None) -> List[Token]:
        """``que`` + verb agreeing with the head + object; ``depth`` relatives nested in all."""
        if depth < 1:
            return []
        toks: List[Token] = [("que", "REL")]
        number = self.number(obj_number)
        if depth > 1:
            verb, _ = self.verb(lx.PERSON_VERBS, tense, head_number)
            obj, _ = self.person(number, adj_p)
            return toks + [verb, ("a", "A")] + obj + self.relative(number, tense, depth - 1, adj_p)
        if self.rng.random() < 0.5:
            verb, _ = self.verb(lx.PERSON_VERBS, tense, head_number)
            obj, _ = self.person(number, adj_p)
            return toks + [verb, ("a", "A")] + obj
        verb, _ = self.verb(lx.THING_VERBS, tense, head_number)
        obj, _ = self.noun_phrase(lx.INANIMATE, number, adj_p)
        return toks + [verb] + obj

    def clause(self, tense: Optional[str] = None, subj_number: Optional[str] = None,
               obj_number: Optional[str] = None, *, adj_p: float = 0.3,
               subj_rel_p: float = 0.15, person_obj_p: float = 0.3, obj_rel_p: float = 0.3,
               pp_max: int = 1, thing_pool: Sequence[lx.Noun] = lx.INANIMATE,
               thing_noun: Optional[lx.Noun] = None) -> List[Token]:
        """Subject [relative] + verb + object [relative] + place phrases, all in one tense."""
        tense = tense if tense is not None else self.rng.choice(lx.TENSES)
        subj_number = self.number(subj_number)
        obj_number = self.number(obj_number)
        toks, _ = self.person(subj_number, adj_p)
        if self.rng.random() < subj_rel_p:
            toks += self.relative(subj_number, tense, 1, adj_p)
        if thing_noun is None and self.rng.random() < person_obj_p:
            verb, _ = self.verb(lx.PERSON_VERBS, tense, subj_number)
            obj, _ = self.person(obj_number, adj_p)
            toks += [verb, ("a", "A")] + obj
            if self.rng.random() < obj_rel_p:
                toks += self.relative(obj_number, tense, 1, adj_p)
        else:
            verb, _ = self.verb(lx.THING_VERBS, tense, subj_number)
            obj, _ = self.noun_phrase(thing_pool, obj_number, adj_p, noun=thing_noun)
            toks += [verb] + obj
        for _ in range(self.rng.randint(0, pp_max)):
            toks += self.place_phrase()
        return toks


# ---- one generator per task: (grammar, label) -> tokens whose label is `label` ----------

def _tense(g: _Grammar, label: str) -> List[Token]:
    return g.clause(tense=label)


def _subj_number(g: _Grammar, label: str) -> List[Token]:
    return g.clause(subj_number="sg" if label == "NN" else "pl")


def _obj_number(g: _Grammar, label: str) -> List[Token]:
    return g.clause(obj_number="sg" if label == "NN" else "pl")


def _length(g: _Grammar, label: str) -> List[Token]:
    lo, hi = (int(x) for x in label.split("-"))
    # start from a complexity that usually lands near the bin, then let rejection settle it
    for _ in range(_MAX_TRIES):
        scale = lo / 22.0
        tense = g.rng.choice(lx.TENSES)
        toks = g.clause(tense, adj_p=0.2 + 0.6 * scale, subj_rel_p=scale, person_obj_p=0.5,
                        obj_rel_p=scale, pp_max=1 + int(2 * scale))
        if hi >= 14 and g.rng.random() < scale:
            # a second, independent clause in the same tense, joined by "y"
            toks += [("y", "CONJ")] + g.clause(tense, adj_p=0.3 + 0.5 * scale,
                                                 subj_rel_p=0.0, pp_max=0)
        n = len(contract(toks))
        if lo <= n <= hi:
            return toks
    raise RuntimeError(f"could not build a sentence of {label} words")  # a bug, not input


def _bigram_shift(g: _Grammar, label: str) -> List[Token]:
    toks = contract(g.clause())
    if label == "O":
        return toks
    # swap two adjacent words; never a noun and its adjective (that order can be grammatical)
    spots = [i for i in range(len(toks) - 1)
             if toks[i][0] != toks[i + 1][0]
             and {toks[i][1], toks[i + 1][1]} != {"NOUN", "ADJ"}]
    i = g.rng.choice(spots)
    toks[i], toks[i + 1] = toks[i + 1], toks[i]
    return toks


def _coordination_inversion(g: _Grammar, label: str) -> List[Token]:
    tense = g.rng.choice(lx.TENSES)
    subj_number = g.number()
    obj_number = g.number()
    first, _ = g.person(subj_number)
    verb1, v1 = g.verb(lx.THING_VERBS, tense, subj_number)
    obj, noun = g.noun_phrase(lx.INANIMATE, obj_number)
    first += [verb1] + obj
    if g.rng.random() < 0.3:
        first += g.place_phrase()
    verb2, _ = g.verb(lx.THING_VERBS, tense, subj_number, avoid=v1)
    second: List[Token] = [(lx.CLITICS[(noun.gender, obj_number)], "CLITIC"), verb2]
    if g.rng.random() < 0.3:
        second += g.place_phrase()
    conj = [(w, "CONJ") for w in g.rng.choice(lx.COORDINATORS).split()]
    return first + conj + second if label == "O" else second + conj + first


def _depth(g: _Grammar, label: str) -> List[Token]:
    depth = int(label)
    tense = g.rng.choice(lx.TENSES)
    subj_number = g.number()
    toks, _ = g.person(subj_number)
    if depth >= 1 and g.rng.random() < 0.3:
        toks += g.relative(subj_number, tense, 1)
    obj_number = g.number()
    if depth == 0 and g.rng.random() < 0.5:
        verb, _ = g.verb(lx.THING_VERBS, tense, subj_number)
        obj, _ = g.noun_phrase(lx.INANIMATE, obj_number)
        toks += [verb] + obj
    else:
        verb, _ = g.verb(lx.PERSON_VERBS, tense, subj_number)
        obj, _ = g.person(obj_number)
        toks += [verb, ("a", "A")] + obj + g.relative(obj_number, tense, depth)
    if g.rng.random() < 0.4 - 0.1 * depth:
        toks += g.place_phrase()
    return toks


def _word_content(g: _Grammar, label: str) -> List[Token]:
    noun = next(n for n in lx.WORD_CONTENT if n.sg == label)
    return g.clause(thing_noun=noun, thing_pool=lx.WORD_CONTENT)


_GENERATORS: Mapping[str, Callable[[_Grammar, str], List[Token]]] = {
    "Tense": _tense, "SubjNumber": _subj_number, "ObjNumber": _obj_number,
    "Length": _length, "BigramShift": _bigram_shift,
    "CoordinationInversion": _coordination_inversion, "Depth": _depth,
    "WordContent": _word_content,
}


def generate_task(name: str, n: int, seed: int = DEFAULT_SEED) -> List[Tuple[str, str, str]]:
    """``n`` examples ``(split, label, sentence)`` of task ``name``, balanced and stratified.

    Labels are drawn round-robin (so classes differ by at most one example), each sentence is
    unique within the task, and each label's examples are split 80/10/10 into tr/va/te.
    """
    labels = task_labels(name)
    _check_n(n)
    rng = random.Random(f"synthetic-es/{name}/{seed}")
    grammar = _Grammar(rng)
    make = _GENERATORS[name]
    seen: set = set()
    by_label: Dict[str, List[str]] = {label: [] for label in labels}
    for i in range(n):
        label = labels[i % len(labels)]
        for _ in range(_MAX_TRIES):
            sentence = normalize_sentence(render(contract(make(grammar, label))))
            if sentence not in seen:
                break
        else:
            raise OptionError(f"--n-per-task {n} is more than synthetic-es:{name} can make "
                              "without repeating sentences; ask for fewer")
        seen.add(sentence)
        by_label[label].append(sentence)
    rows: Dict[str, List[Tuple[str, str, str]]] = {split: [] for split, _ in SPLIT_FRACTIONS}
    for label in labels:
        sentences = by_label[label]
        n_va = max(1, round(len(sentences) * SPLIT_FRACTIONS[1][1]))
        n_te = max(1, round(len(sentences) * SPLIT_FRACTIONS[2][1]))
        n_tr = len(sentences) - n_va - n_te
        cuts = {"tr": sentences[:n_tr], "va": sentences[n_tr:n_tr + n_va],
                "te": sentences[n_tr + n_va:]}
        for split, chunk in cuts.items():
            rows[split].extend((split, label, s) for s in chunk)
    out: List[Tuple[str, str, str]] = []
    for split, _ in SPLIT_FRACTIONS:
        rng.shuffle(rows[split])
        out.extend(rows[split])
    return out


def _check_n(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int):
        raise OptionError(f"--n-per-task must be an integer, got {n!r}")
    if not MIN_PER_TASK <= n <= MAX_PER_TASK:
        raise OptionError(f"--n-per-task must be between {MIN_PER_TASK} and {MAX_PER_TASK}, "
                          f"got {n}")


def default_dir() -> Path:
    """Where the registry looks for synthetic-es when no ``--data-dir`` names it."""
    try:
        from estratos.tasks.suites.synthetic_es import SYNTHETIC_ES_DEFAULT_DIR
    except ImportError:  # registry not installed: the documented default
        return FALLBACK_DIR.expanduser()
    return Path(SYNTHETIC_ES_DEFAULT_DIR).expanduser()


def build_synthetic_es(out_dir: Optional[os.PathLike | str] = None, seed: int = DEFAULT_SEED,
                       n_per_task: int = 3000,
                       tasks: Optional[Iterable[str]] = None) -> Dict[str, Path]:
    """Write the synthetic-es task files into ``out_dir``; returns ``{task name: path}``.

    ``out_dir`` defaults to :func:`default_dir` (``~/.cache/estratos/synthetic-es``), where
    the registry finds the suite without ``--data-dir``.

    ``tasks`` limits the build to some task names (default: all eight). Every file is written
    atomically (temporary file + rename), and ``build_info.json`` records the seed, sizes and
    generator version so a results file can be traced back to the data it was made from.
    """
    names = tuple(TASK_NAMES if tasks is None else tasks)
    for name in names:
        task_labels(name)  # raises OptionError on an unknown name
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise OptionError(f"--seed must be an integer, got {seed!r}")
    _check_n(n_per_task)
    out = default_dir() if out_dir is None else Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise OptionError(f"--out {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    paths: Dict[str, Path] = {}
    for name in names:
        rows = generate_task(name, n_per_task, seed)
        path = out / f"{name}.txt"
        write_atomic(path, "".join(f"{s}\t{l}\t{t}\n" for s, l, t in rows))
        paths[name] = path
        log.info("wrote %s (%d examples)", path, len(rows))
    info = {"suite": "synthetic-es", "generator_version": GENERATOR_VERSION, "seed": seed,
            "n_per_task": n_per_task, "tasks": list(names)}
    write_atomic(out / "build_info.json", json.dumps(info, indent=1) + "\n")
    return paths
