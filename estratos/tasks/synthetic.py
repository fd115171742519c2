"""Builder of ``synthetic-es``: a small Spanish probing suite whose labels are true by construction.

Why it exists: ``estratos demo`` must produce a real per-layer result offline, with no data
download, and the real Spanish probing data is large and partly unpublished. So we generate
sentences from a hand-written lexicon (:mod:`estratos.tasks.lexicon_es`) and templates. Gender
and number agreement is always right because every form comes from the lexicon's agreement
tables.

A task must test what it names, not what a bag of words, the sentence's length or a simpler
surface cue can read (docs/tasks.md says what each task can and cannot show, with every
surface baseline's score). The cues every task is held to (:mod:`estratos.probe.cue_audit`:
the first and the last word, the number of tokens and of characters, the count of each
function word, of ``que``, of words ending in ``-s``, of punctuation marks) stay within 5
points of the majority rate, because the sentences are built so that the label changes none
of them:

- label first (Tense, Length, WordContent): the label is drawn, then a sentence built to have
  it; in Tense other clauses carry other tenses, so the label is not one marker word; Length
  sentences come from one rule for every bin, kept when their length falls in it; the
  WordContent target stands at no edge, in one of three roles, with a possessive (``su``)
  that shows no gender;
- length-matched groups (SubjNumber, ObjNumber, Depth): label first too, in groups of one
  sentence per label, all of the same length in whitespace tokens and in characters, a group
  in one split: the length alone scores exactly the majority rate. SubjNumber and ObjNumber
  pair a main clause with a subordinate clause drawn alike whose subject (object) has the
  other number, so one singular and one plural are always there; Depth sentences always hold
  three relative clauses, the label saying how many nest under the object rather than the
  subject;
- minimal pairs (BigramShift, CoordinationInversion, OddManOut): a sentence is built and
  altered, and both go into the same split, the altered one made of exactly the original's
  words, with the same first and last word; nothing that counts words or reads the edges can
  tell them apart, only word order can.

The output is ordinary task data in the SentEval probing format, one file per task,
``<out_dir>/<Name>.txt`` with lines ``split<TAB>label<TAB>sentence`` (split tr/va/te, 80/10/10,
stratified by label; by group or pair for the length-matched and minimal-pair tasks), so the
registry, ``encode`` and ``probe`` treat it like real data.
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
from types import MappingProxyType
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from estratos.errors import OptionError
from estratos.files import write_atomic
from estratos.outputs import check_output_folder
from estratos.registry import unknown_message
from estratos.tasks import lexicon_es as lx
from estratos.text import normalize_sentence, surface_length
from estratos.vocab import DEFAULT_SEED, SYNTHETIC_N_PER_TASK

log = logging.getLogger(__name__)

GENERATOR_VERSION = 4
#: task names, in the order the registry declares them
TASK_NAMES: Tuple[str, ...] = ("Tense", "SubjNumber", "ObjNumber", "Length", "BigramShift",
                               "CoordinationInversion", "OddManOut", "Depth", "WordContent")
#: examples per task of `estratos tasks build` and of `estratos demo`
DEFAULT_N_PER_TASK = SYNTHETIC_N_PER_TASK
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
        "OddManOut": ("C", "O"),
        "Depth": tuple(str(d) for d in range(MAX_DEPTH + 1)),
        "WordContent": tuple(n.sg for n in lx.WORD_CONTENT),
    }
    if name not in labels:
        raise OptionError(unknown_message("synthetic-es task", name, TASK_NAMES))
    return tuple(sorted(labels[name]))


def render(tokens: Sequence[Token]) -> str:
    """Words joined by spaces, first letter capitalized, the final period a word of its own
    (tokenized, as in SentEval's and X-Probe's probing files)."""
    text = " ".join(word for word, _ in tokens)
    return text[:1].upper() + text[1:] + " ."


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
        # relative clauses take their own tense, as in real text ("el niño que vino verá...")
        if self.rng.random() < subj_rel_p:
            toks += self.relative(subj_number, self.rng.choice(lx.TENSES), 1, adj_p)
        if thing_noun is None and self.rng.random() < person_obj_p:
            verb, _ = self.verb(lx.PERSON_VERBS, tense, subj_number)
            obj, _ = self.person(obj_number, adj_p)
            toks += [verb, ("a", "A")] + obj
            if self.rng.random() < obj_rel_p:
                toks += self.relative(obj_number, self.rng.choice(lx.TENSES), 1, adj_p)
        else:
            verb, _ = self.verb(lx.THING_VERBS, tense, subj_number)
            obj, _ = self.noun_phrase(thing_pool, obj_number, adj_p, noun=thing_noun)
            toks += [verb] + obj
        for _ in range(self.rng.randint(0, pp_max)):
            toks += self.place_phrase()
        return toks


# ---- label-first tasks: (grammar, label) -> tokens whose label is `label` ----------------

#: how often a clause of Tense, SubjNumber and ObjNumber carries other verbs and nouns than the
#: one its label is about (relative clauses with their own tense and object; an animate object
#: whose number is not the subject's): the label is not written in one word, as in real text
_DISTRACTORS: Mapping[str, Any] = MappingProxyType(
    {"subj_rel_p": 0.2, "person_obj_p": 0.9, "obj_rel_p": 0.8})
#: how often those clauses open with a fronted phrase, so the capitalized first word is not
#: always the subject's determiner (which alone would give SubjNumber away to a bag of words)
_OPENER_P = 0.8


def _opener(g: _Grammar) -> List[Token]:
    """A tense-neutral adverb, or a fronted place phrase + comma, to open a sentence."""
    if g.rng.random() < 0.3:
        return [(w, "ADV") for w in g.rng.choice(lx.OPENING_ADVERBS).split()]
    return g.place_phrase() + [(",", "PUNCT")]


def _with_opener(g: _Grammar, clause: List[Token]) -> List[Token]:
    """Sometimes (:data:`_OPENER_P`) an opener (:func:`_opener`) before the clause."""
    if g.rng.random() >= _OPENER_P:
        return clause
    return _opener(g) + clause


def _tense(g: _Grammar, label: str) -> List[Token]:
    return _with_opener(g, g.clause(tense=label, **_DISTRACTORS))


#: the clauses of SubjNumber and ObjNumber (main and subordinate drawn alike): relative
#: clauses and animate objects as distractors, no place phrase inside (one closes the sentence)
_NUMBER_CLAUSE: Mapping[str, Any] = MappingProxyType(
    {"subj_rel_p": 0.2, "person_obj_p": 0.6, "obj_rel_p": 0.4, "pp_max": 0})
_OTHER_NUMBER = MappingProxyType({"sg": "pl", "pl": "sg"})


def _main_and_subordinate(g: _Grammar, label: str, role: str) -> List[Token]:
    """A main clause whose subject (``role="subj"``) or object (``"obj"``) has the label's
    number, and a subordinate clause, drawn by the same rule, whose same noun has the other
    number; then a closing place phrase.

    Why: each sentence then holds one singular and one plural of the labelled role, with
    their determiners, verbs and ``-s`` endings, so that no count of words or characters and
    no bag of function words says which is which; only knowing which clause is the main one
    does. The subordinate clause comes after the main one (``porque``/``aunque``, the main
    clause then opened by an adverb or a fronted place phrase) or before it (``aunque ... ,``),
    so the first word is never the labelled noun's determiner; the closing place phrase
    (of any number) keeps the last word off the labelled nouns too."""
    number = "sg" if label == "NN" else "pl"
    other = _OTHER_NUMBER[number]
    if role == "subj":
        main = g.clause(subj_number=number, **_NUMBER_CLAUSE)
        sub = g.clause(subj_number=other, **_NUMBER_CLAUSE)
    else:
        main = g.clause(obj_number=number, **_NUMBER_CLAUSE)
        sub = g.clause(obj_number=other, **_NUMBER_CLAUSE)
    if g.rng.random() < 0.5:
        conj = g.rng.choice(lx.SUBORDINATORS)
        toks = _opener(g) + main + [(conj, "SCONJ")] + sub
    else:
        toks = [(lx.FRONTED_SUBORDINATOR, "SCONJ")] + sub + [(",", "PUNCT")] + main
    return toks + g.place_phrase()


def _subj_number(g: _Grammar, label: str) -> List[Token]:
    return _main_and_subordinate(g, label, "subj")


def _obj_number(g: _Grammar, label: str) -> List[Token]:
    return _main_and_subordinate(g, label, "obj")


def _length(g: _Grammar, label: str) -> List[Token]:
    """Sentences drawn by one rule for every bin and kept when their length falls in the
    label's bin: the rule never depends on the bin, so what opens and what ends a sentence
    (an adverb or the subject's determiner; an object noun or its adjective: place phrases,
    which would end long sentences more often, are left out) is the same for every length."""
    lo, hi = (int(x) for x in label.split("-"))
    # the opener is drawn before the rest and kept, so it is the same for every bin (drawn
    # with the rest, the bins it helps to reach would show in the first word)
    opener: List[Token] = []
    if g.rng.random() < 0.3:
        opener = [(w, "ADV") for w in g.rng.choice(lx.OPENING_ADVERBS).split()]
    for _ in range(_MAX_TRIES * 10):
        scale = g.rng.random()
        tense = g.rng.choice(lx.TENSES)
        toks = g.clause(tense, subj_rel_p=scale, person_obj_p=0.5, obj_rel_p=scale, pp_max=0)
        if g.rng.random() < scale:
            # a second, independent clause in the same tense, joined by "y"
            toks += [("y", "CONJ")] + g.clause(tense, subj_rel_p=scale / 2, person_obj_p=0.5,
                                                 obj_rel_p=scale / 2, pp_max=0)
        toks = opener + toks
        n = len(contract(toks))
        if lo <= n <= hi:
            return toks
    raise RuntimeError(f"could not build a sentence of {label} words")  # a bug, not input


#: the token counts Depth sentences are padded towards, the same for every depth: a sentence
#: shorter than its drawn target gets place phrases until it reaches it, so that sentences of
#: every depth share lengths and can be matched (:func:`_matched_rows`)
DEPTH_TARGET_TOKENS: Tuple[int, int] = (26, 32)


def _person_chain(g: _Grammar, head_number: str, tense: str, depth: int) -> List[Token]:
    """``depth`` relative clauses nested in a chain, each ``que`` + verb + ``a`` + person,
    the next one modifying that person."""
    toks: List[Token] = []
    for _ in range(depth):
        verb, _ = g.verb(lx.PERSON_VERBS, tense, head_number)
        head_number = g.number()
        obj, _ = g.person(head_number)
        toks += [("que", "REL"), verb, ("a", "A")] + obj
    return toks


def _depth(g: _Grammar, label: str) -> List[Token]:
    """Subject + a chain of ``MAX_DEPTH - depth`` relatives, main verb + ``a`` + object + a
    chain of ``depth`` relatives under it, then place phrases.

    Every sentence holds :data:`MAX_DEPTH` relative clauses (so as many ``que``), four
    personal-``a`` objects and five people, whatever its depth: what the label says is how
    many of the relatives nest under the main verb's object and how many under the subject,
    not how many there are. The place phrases that pad it to a length drawn alike for every
    depth come last, so the last word is a place's and says nothing of the depth."""
    depth = int(label)
    tense = g.rng.choice(lx.TENSES)
    subj_number = g.number()
    toks, _ = g.person(subj_number)
    toks += _person_chain(g, subj_number, tense, MAX_DEPTH - depth)
    verb, _ = g.verb(lx.PERSON_VERBS, tense, subj_number)
    obj_number = g.number()
    obj, _ = g.person(obj_number)
    toks += [verb, ("a", "A")] + obj + _person_chain(g, obj_number, tense, depth)
    if g.rng.random() < 0.5:
        toks = _opener(g) + toks
    target = g.rng.randint(*DEPTH_TARGET_TOKENS)
    toks += g.place_phrase()
    while len(contract(toks)) + 1 < target:  # + 1: the final period
        toks += g.place_phrase()
    return toks


def _word_content(g: _Grammar, label: str) -> List[Token]:
    """The target noun as the object of a thing verb: of the main clause, of a relative on
    the subject, or of a relative on an animate object; its determiner a possessive (``su``,
    ``sus``: no gender shown by a function word); a place phrase always closes the sentence.
    So the target is never the first or the last word, and where it stands varies."""
    noun = next(n for n in lx.WORD_CONTENT if n.sg == label)
    tense = g.rng.choice(lx.TENSES)
    number = g.number()
    target: List[Token] = [(lx.POSSESSIVES[number], "DET"), (noun.form(number), "NOUN")]
    if g.rng.random() < 0.3:
        target.append((g.rng.choice(lx.ADJECTIVES).form(noun.gender, number), "ADJ"))
    subj_number = g.number()
    toks, _ = g.person(subj_number)
    role = g.rng.choice(("main", "subject relative", "object relative"))
    if role == "subject relative":
        thing_verb, _ = g.verb(lx.THING_VERBS, g.rng.choice(lx.TENSES), subj_number)
        toks += [("que", "REL"), thing_verb] + target
    if role == "main":
        verb, _ = g.verb(lx.THING_VERBS, tense, subj_number)
        toks += [verb] + target
    else:
        verb, _ = g.verb(lx.PERSON_VERBS, tense, subj_number)
        obj_number = g.number()
        obj, _ = g.person(obj_number)
        toks += [verb, ("a", "A")] + obj
        if role == "object relative":
            thing_verb, _ = g.verb(lx.THING_VERBS, g.rng.choice(lx.TENSES), obj_number)
            toks += [("que", "REL"), thing_verb] + target
    return toks + g.place_phrase()


_GENERATORS: Mapping[str, Callable[[_Grammar, str], List[Token]]] = MappingProxyType({
    "Tense": _tense, "SubjNumber": _subj_number, "ObjNumber": _obj_number,
    "Length": _length, "Depth": _depth, "WordContent": _word_content,
})


# ---- minimal-pair tasks: grammar -> (original, altered) with the same words ---------------
# A bag of words cannot tell the two members of a pair apart (same tokens, same counts, the
# capitalized first word and the final " ." untouched), and both go to the same split, so a
# model that only counts words sits exactly at chance; what is left to read is word order.

def _bigram_shift(g: _Grammar) -> Optional[Tuple[List[Token], List[Token]]]:
    toks = contract(g.clause())
    # two adjacent words, never the first (its capital letter would give the swap away),
    # never a noun and its adjective (that order can be grammatical)
    # never the last one either: the two members of a pair share their first and last words
    spots = [i for i in range(1, len(toks) - 2)
             if toks[i][0] != toks[i + 1][0]
             and {toks[i][1], toks[i + 1][1]} != {"NOUN", "ADJ"}]
    if not spots:
        return None
    i = g.rng.choice(spots)
    shifted = list(toks)
    shifted[i], shifted[i + 1] = shifted[i + 1], shifted[i]
    return toks, shifted


def _coordination_inversion(g: _Grammar) -> Optional[Tuple[List[Token], List[Token]]]:
    """'Subject V1 object [place] y (luego) CLITIC V2 [place] place': the second verb phrase
    resumes the first one's object with a clitic; inverted, the two verb phrases trade places
    around the coordinator, so the clitic comes before the object it stands for. The closing
    place phrase stays where it is, so both members of a pair end with the same word (which
    verb phrase ends the sentence would otherwise show in the last word: a verb or a noun)."""
    tense = g.rng.choice(lx.TENSES)
    subj_number = g.number()
    obj_number = g.number()
    subject, _ = g.person(subj_number)
    verb1, v1 = g.verb(lx.THING_VERBS, tense, subj_number)
    obj, noun = g.noun_phrase(lx.INANIMATE, obj_number)
    first = [verb1] + obj
    if g.rng.random() < 0.3:
        first += g.place_phrase()
    verb2, _ = g.verb(lx.THING_VERBS, tense, subj_number, avoid=v1)
    second: List[Token] = [(lx.CLITICS[(noun.gender, obj_number)], "CLITIC"), verb2]
    if g.rng.random() < 0.3:
        second += g.place_phrase()
    conj = [(w, "CONJ") for w in g.rng.choice(lx.COORDINATORS).split()]
    closing = g.place_phrase()
    return (contract(subject + first + conj + second + closing),
            contract(subject + second + conj + first + closing))


def _odd_man_out(g: _Grammar) -> Optional[Tuple[List[Token], List[Token]]]:
    """Two nouns of different animacy trade places (a person where a thing or a place was,
    and the other way round); same gender and number, so every agreement stays right and
    only the meaning is odd ('El libro compró al niño en la plaza'). A noun that is the
    sentence's last word is never swapped, so both members of a pair end with the same word."""
    toks = contract(g.clause(pp_max=2))
    nouns = [(i, lx.NOUN_FORMS[w]) for i, (w, tag) in enumerate(toks[:-1]) if tag == "NOUN"]
    swaps = [(i, j) for i, (a, na) in nouns for j, (b, nb) in nouns
             if toks[i][0] in lx.ANIMATE_FORMS and toks[j][0] not in lx.ANIMATE_FORMS
             and a.gender == b.gender and na == nb]
    if not swaps:
        return None
    i, j = g.rng.choice(swaps)
    odd = list(toks)
    odd[i], odd[j] = odd[j], odd[i]
    return toks, odd


#: label-first tasks built as length-matched groups (:func:`_matched_rows`): their labels
#: change the sentence's length (plural forms are longer, a relative clause adds words), so
#: every label gets sentences of the same lengths in tokens and characters
LENGTH_MATCHED = frozenset({"SubjNumber", "ObjNumber", "Depth"})

#: task -> (label of the original, label of the altered copy, pair maker)
_PAIRED: Mapping[str, Tuple[str, str, Callable[[_Grammar], Optional[Tuple[List[Token],
                                                                           List[Token]]]]]] = \
    MappingProxyType({"BigramShift": ("O", "I", _bigram_shift),
                      "CoordinationInversion": ("O", "I", _coordination_inversion),
                      "OddManOut": ("O", "C", _odd_man_out)})


def _split_sizes(n: int) -> Tuple[int, int, int]:
    """(train, dev, test) counts of ``n`` items: 10 % each (at least one) for dev and test."""
    n_va = max(1, round(n * SPLIT_FRACTIONS[1][1]))
    n_te = max(1, round(n * SPLIT_FRACTIONS[2][1]))
    return n - n_va - n_te, n_va, n_te


def _label_first_rows(name: str, n: int, grammar: _Grammar, seen: set
                      ) -> Dict[str, List[Tuple[str, str, str]]]:
    """Labels drawn round-robin, a sentence built for each; each label split 80/10/10."""
    labels = task_labels(name)
    make = _GENERATORS[name]
    by_label: Dict[str, List[str]] = {label: [] for label in labels}
    for i in range(n):
        label = labels[i % len(labels)]
        for _ in range(_MAX_TRIES):
            sentence = normalize_sentence(render(contract(make(grammar, label))))
            if sentence not in seen:
                break
        else:
            raise _too_many(name, n)
        seen.add(sentence)
        by_label[label].append(sentence)
    rows: Dict[str, List[Tuple[str, str, str]]] = {split: [] for split, _ in SPLIT_FRACTIONS}
    for label in labels:
        sentences = by_label[label]
        n_tr, n_va, _ = _split_sizes(len(sentences))
        cuts = {"tr": sentences[:n_tr], "va": sentences[n_tr:n_tr + n_va],
                "te": sentences[n_tr + n_va:]}
        for split, chunk in cuts.items():
            rows[split].extend((split, label, s) for s in chunk)
    return rows


def _matched_rows(name: str, n: int, grammar: _Grammar, seen: set
                  ) -> Dict[str, List[Tuple[str, str, str]]]:
    """``n // L`` groups of L sentences, one per label, all of the same length in tokens and
    in characters (:func:`estratos.text.surface_length`), split 80/10/10 as groups; the
    ``n % L`` examples left over (one each for the first labels) go to train alone.

    Sentences are generated for each label in turn and kept by their key; as soon as every
    label has a sentence of one key, those form a group. The groups are shuffled before they
    are split, so no split holds the keys that happened to fill first. Within every split
    each key then holds as many sentences of each label, so anything computed from the length
    alone scores exactly the majority rate there."""
    labels = task_labels(name)
    make = _GENERATORS[name]
    n_groups, extra = divmod(n, len(labels))
    pools: Dict[str, Dict[Tuple[int, int], List[str]]] = {label: {} for label in labels}
    groups: List[Tuple[str, ...]] = []
    budget = _MAX_TRIES * max(1, n)
    tries = 0
    while len(groups) < n_groups:
        for label in labels:
            tries += 1
            if tries > budget:
                raise _too_many(name, n)
            sentence = normalize_sentence(render(contract(make(grammar, label))))
            if sentence in seen:
                continue
            seen.add(sentence)
            key = surface_length(sentence)
            pools[label].setdefault(key, []).append(sentence)
            if all(pools[other].get(key) for other in labels):
                groups.append(tuple(pools[other][key].pop(0) for other in labels))
                if len(groups) == n_groups:
                    break
    log.debug("%s: %d sentences generated for %d length-matched groups", name, tries,
              n_groups)
    grammar.rng.shuffle(groups)
    n_tr, n_va, _ = _split_sizes(n_groups)
    cuts = {"tr": groups[:n_tr], "va": groups[n_tr:n_tr + n_va], "te": groups[n_tr + n_va:]}
    rows: Dict[str, List[Tuple[str, str, str]]] = {split: [] for split, _ in SPLIT_FRACTIONS}
    for split, chunk in cuts.items():
        for group in chunk:
            rows[split] += [(split, label, sentence) for label, sentence in zip(labels, group)]
    for label in labels[:extra]:
        leftover = next((s for pool in pools[label].values() for s in pool), None)
        if leftover is None:
            raise _too_many(name, n)
        rows["tr"].append(("tr", label, leftover))
    return rows


def _paired_rows(name: str, n: int, grammar: _Grammar, seen: set
                 ) -> Dict[str, List[Tuple[str, str, str]]]:
    """``n // 2`` (original, altered) pairs split 80/10/10 as pairs; an odd ``n`` adds one
    original alone to train."""
    original, altered, make = _PAIRED[name]
    n_pairs, extra = divmod(n, 2)
    pairs: List[Tuple[str, str]] = []
    while len(pairs) < n_pairs + extra:
        for _ in range(_MAX_TRIES):
            made = make(grammar)
            if made is None:
                continue
            a, b = (normalize_sentence(render(toks)) for toks in made)
            if a != b and a not in seen and b not in seen:
                break
        else:
            raise _too_many(name, n)
        seen.update((a, b))
        pairs.append((a, b))
    n_tr, n_va, _ = _split_sizes(n_pairs)
    cuts = {"tr": pairs[:n_tr], "va": pairs[n_tr:n_tr + n_va],
            "te": pairs[n_tr + n_va:n_pairs]}
    rows: Dict[str, List[Tuple[str, str, str]]] = {split: [] for split, _ in SPLIT_FRACTIONS}
    for split, chunk in cuts.items():
        for a, b in chunk:
            rows[split] += [(split, original, a), (split, altered, b)]
    if extra:
        rows["tr"].append(("tr", original, pairs[-1][0]))
    return rows


def _too_many(name: str, n: int) -> OptionError:
    return OptionError(f"--n-per-task {n} is more than synthetic-es:{name} can make without "
                       "repeating sentences; ask for fewer")


def generate_task(name: str, n: int, seed: int = DEFAULT_SEED) -> List[Tuple[str, str, str]]:
    """``n`` examples ``(split, label, sentence)`` of task ``name``, balanced and stratified.

    Classes differ by at most one example, each sentence is unique within the task, and
    examples are split 80/10/10 into tr/va/te (per label; per group for the length-matched
    tasks SubjNumber, ObjNumber and Depth, per pair for the minimal-pair tasks BigramShift,
    CoordinationInversion and OddManOut: a group's or pair's members share a split).
    """
    task_labels(name)
    _check_n(n)
    rng = random.Random(f"synthetic-es/{name}/{seed}")
    grammar = _Grammar(rng)
    seen: set = set()
    if name in _PAIRED:
        rows = _paired_rows(name, n, grammar, seen)
    elif name in LENGTH_MATCHED:
        rows = _matched_rows(name, n, grammar, seen)
    else:
        rows = _label_first_rows(name, n, grammar, seen)
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
                       n_per_task: int = DEFAULT_N_PER_TASK,
                       tasks: Optional[Iterable[str]] = None) -> Dict[str, Path]:
    """Write the synthetic-es task files into ``out_dir``; returns ``{task name: path}``.

    ``out_dir`` defaults to :func:`default_dir` (``~/.cache/estratos/synthetic-es``), where
    the registry finds the suite without ``--data-dir``.

    ``tasks`` limits the build to some task names (default: all nine). Every file is written
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
    check_output_folder(out)
    out.mkdir(parents=True, exist_ok=True)
    paths: Dict[str, Path] = {}
    for name in names:
        rows = generate_task(name, n_per_task, seed)
        path = out / f"{name}.txt"
        write_atomic(path, "".join(f"{s}\t{label}\t{t}\n" for s, label, t in rows))
        paths[name] = path
        log.info("wrote %s (%d examples)", path, len(rows))
    info = {"suite": "synthetic-es", "generator_version": GENERATOR_VERSION, "seed": seed,
            "n_per_task": n_per_task, "tasks": list(names)}
    write_atomic(out / "build_info.json", json.dumps(info, indent=1) + "\n")
    return paths
