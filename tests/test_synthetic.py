"""synthetic-es: labels checked by independent parsers, agreement, uniqueness, determinism."""

from __future__ import annotations

import json
from collections import Counter
from typing import Dict, List, Set, Tuple

import pytest

from estratos.errors import EstratosError, OptionError
from estratos.tasks import lexicon_es as lx
from estratos.tasks.synthetic import (LENGTH_MATCHED, TASK_NAMES, build_synthetic_es,
                                      generate_task, length_label, task_labels)
from estratos.text import surface_length

N = 400

# Written by hand, separately from the lexicon's rules: (PRES, PAST, FUT) x (sg, pl).
CONJUGATIONS = {
    "comprar": ("compra", "compran", "compró", "compraron", "comprará", "comprarán"),
    "vender": ("vende", "venden", "vendió", "vendieron", "venderá", "venderán"),
    "recibir": ("recibe", "reciben", "recibió", "recibieron", "recibirá", "recibirán"),
    "tener": ("tiene", "tienen", "tuvo", "tuvieron", "tendrá", "tendrán"),
    "traer": ("trae", "traen", "trajo", "trajeron", "traerá", "traerán"),
    "perder": ("pierde", "pierden", "perdió", "perdieron", "perderá", "perderán"),
    "encontrar": ("encuentra", "encuentran", "encontró", "encontraron", "encontrará",
                  "encontrarán"),
    "pedir": ("pide", "piden", "pidió", "pidieron", "pedirá", "pedirán"),
    "hacer": ("hace", "hacen", "hizo", "hicieron", "hará", "harán"),
    "poner": ("pone", "ponen", "puso", "pusieron", "pondrá", "pondrán"),
    "mover": ("mueve", "mueven", "movió", "movieron", "moverá", "moverán"),
    "elegir": ("elige", "eligen", "eligió", "eligieron", "elegirá", "elegirán"),
    "conocer": ("conoce", "conocen", "conoció", "conocieron", "conocerá", "conocerán"),
    "seguir": ("sigue", "siguen", "siguió", "siguieron", "seguirá", "seguirán"),
    "despertar": ("despierta", "despiertan", "despertó", "despertaron", "despertará",
                  "despertarán"),
    "abrazar": ("abraza", "abrazan", "abrazó", "abrazaron", "abrazará", "abrazarán"),
    "describir": ("describe", "describen", "describió", "describieron", "describirá",
                  "describirán"),
}
ORDER = (("PRES", "sg"), ("PRES", "pl"), ("PAST", "sg"), ("PAST", "pl"), ("FUT", "sg"),
         ("FUT", "pl"))

# Determiners (and the contractions del/al) with the genders and numbers they agree with,
# written independently.
DETS = {w: {gn} for w, gn in {
    "el": ("m", "sg"), "la": ("f", "sg"), "los": ("m", "pl"), "las": ("f", "pl"),
    "un": ("m", "sg"), "una": ("f", "sg"), "unos": ("m", "pl"), "unas": ("f", "pl"),
    "este": ("m", "sg"), "esta": ("f", "sg"), "estos": ("m", "pl"), "estas": ("f", "pl"),
    "ese": ("m", "sg"), "esa": ("f", "sg"), "esos": ("m", "pl"), "esas": ("f", "pl"),
    "del": ("m", "sg"), "al": ("m", "sg")}.items()}
DETS["su"] = {("m", "sg"), ("f", "sg")}
DETS["sus"] = {("m", "pl"), ("f", "pl")}
CLITICS = {"lo": ("m", "sg"), "la": ("f", "sg"), "los": ("m", "pl"), "las": ("f", "pl")}

ALL_NOUNS = lx.ANIMATE + lx.INANIMATE + lx.PLACES + lx.WORD_CONTENT
NOUN_FORMS: Dict[str, Set[Tuple[str, str]]] = {}
for _n in ALL_NOUNS:
    NOUN_FORMS.setdefault(_n.sg, set()).add((_n.gender, "sg"))
    NOUN_FORMS.setdefault(_n.pl, set()).add((_n.gender, "pl"))
ADJ_FORMS: Dict[str, Set[Tuple[str, str]]] = {}
for _a in lx.ADJECTIVES + lx.ANIMATE_ADJECTIVES:
    for _g in "mf":
        for _num in ("sg", "pl"):
            ADJ_FORMS.setdefault(_a.form(_g, _num), set()).add((_g, _num))
VERB_FORMS: Dict[str, Set[Tuple[str, str]]] = {}
for _v in lx.THING_VERBS + lx.PERSON_VERBS:
    for _t in lx.TENSES:
        for _num in ("sg", "pl"):
            VERB_FORMS.setdefault(_v.form(_t, _num), set()).add((_t, _num))


OPENERS = {"por fin", "sin duda", "seguramente", "por suerte", "quizás"}


def words(sentence: str) -> List[str]:
    """The words of a sentence, first one lower-cased, without the final ' .' or an opener
    (a fronted adverb, or a place phrase up to its comma)."""
    assert sentence.endswith(" .") and sentence[0].isupper(), sentence
    text = sentence[:-2]
    ws = (text[:1].lower() + text[1:]).split()
    if "," in ws:
        ws = ws[ws.index(",") + 1:]
    for opener in OPENERS:
        if " ".join(ws).startswith(opener + " "):
            ws = ws[len(opener.split()):]
    return ws


def agreement_ok(ws: List[str]) -> bool:
    """Every noun follows an agreeing determiner; adjectives after a noun agree with it."""
    for i, w in enumerate(ws):
        if w in NOUN_FORMS:
            if i == 0 or ws[i - 1] not in DETS or not DETS[ws[i - 1]] & NOUN_FORMS[w]:
                return False
            if i + 1 < len(ws) and ws[i + 1] in ADJ_FORMS:
                if not ADJ_FORMS[ws[i + 1]] & NOUN_FORMS[w]:
                    return False
        elif w in DETS and w not in ("del", "al") and not (w in CLITICS and i + 1 < len(ws)
                                                           and ws[i + 1] in VERB_FORMS):
            if i + 1 >= len(ws) or ws[i + 1] not in NOUN_FORMS:
                return False
        elif w in ADJ_FORMS and (i == 0 or ws[i - 1] not in NOUN_FORMS):
            return False
    return True


def main_verb(ws: List[str]) -> int:
    """Index of the first verb form not introduced by 'que' (the main clause's verb)."""
    return next(i for i, w in enumerate(ws)
                if w in VERB_FORMS and ws[i - 1] != "que" and ws[i - 1] not in CLITICS)


def number_of_noun(w: str) -> str:
    return next(iter(NOUN_FORMS[w]))[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Dict[str, List[Tuple[str, str, str]]]:
    out = tmp_path_factory.mktemp("synth")
    paths = build_synthetic_es(out, seed=7, n_per_task=N)
    assert sorted(paths) == sorted(TASK_NAMES)
    data = {}
    for name, path in paths.items():
        assert path == out / f"{name}.txt"
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            split, label, sentence = line.split("\t")
            rows.append((split, label, sentence))
        data[name] = rows
    return data


def test_conjugations_match_hand_written_table():
    verbs = {v.infinitive: v for v in lx.THING_VERBS + lx.PERSON_VERBS}
    for infinitive, forms in CONJUGATIONS.items():
        assert infinitive in verbs
        got = tuple(verbs[infinitive].form(t, n) for t, n in ORDER)
        assert got == forms, infinitive


def test_verb_forms_are_unambiguous():
    # a form never means two tenses or numbers, so the checks below are sound
    assert all(len(v) == 1 for v in VERB_FORMS.values())
    assert not set(VERB_FORMS) & (set(NOUN_FORMS) | set(ADJ_FORMS) | set(DETS))


def test_lexicon_pools_are_disjoint():
    pools = [lx.ANIMATE, lx.INANIMATE, lx.PLACES, lx.WORD_CONTENT]
    seen: Set[str] = set()
    for pool in pools:
        forms = {n.sg for n in pool} | {n.pl for n in pool}
        assert not forms & seen
        seen |= forms


def test_file_format_splits_balance_and_uniqueness(built):
    for name, rows in built.items():
        assert len(rows) == N
        labels = task_labels(name)
        assert list(labels) == sorted(labels)
        counts = Counter(label for _, label, _ in rows)
        assert set(counts) == set(labels), name
        assert max(counts.values()) - min(counts.values()) <= 1
        splits = Counter(split for split, _, _ in rows)
        assert set(splits) == {"tr", "va", "te"}
        assert 0.75 * N <= splits["tr"] <= 0.85 * N
        # each label appears in every split
        for split in ("tr", "va", "te"):
            assert {l for s, l, _ in rows if s == split} == set(labels), (name, split)
        sentences = [s for _, _, s in rows]
        assert len(set(sentences)) == len(sentences), name
        assert [s for s, _, _ in rows] == sorted((s for s, _, _ in rows),
                                                 key=["tr", "va", "te"].index)


def test_agreement_and_contractions(built):
    for name, rows in built.items():
        for _, label, sentence in rows:
            ws = words(sentence)
            assert " de el " not in f" {' '.join(ws)} " and " a el " not in f" {' '.join(ws)} "
            if name == "BigramShift" and label == "I":
                continue
            assert agreement_ok(ws), (name, sentence)


def test_tense_labels(built):
    other = 0
    for _, label, sentence in built["Tense"]:
        ws = words(sentence)
        assert VERB_FORMS[ws[main_verb(ws)]] == {(label, _number(ws[main_verb(ws)]))}, sentence
        tenses = {t for w in ws if w in VERB_FORMS for t, _ in VERB_FORMS[w]}
        other += len(tenses) > 1
    # the label is not written in one word: often another verb has another tense
    assert other > 0.3 * N


def _number(verb: str) -> str:
    return next(iter(VERB_FORMS[verb]))[1]


def _numbers(ws: List[str]) -> Set[str]:
    return {number_of_noun(w) for w in ws if w in NOUN_FORMS}


SUBORDINATORS = ("porque", "aunque")


def clauses(sentence: str) -> Tuple[List[str], List[str]]:
    """(main clause, subordinate clause) of a SubjNumber/ObjNumber sentence, parsed here:
    'Aunque SUB , MAIN place .' or '[opener] MAIN porque|aunque SUB place .' (the closing place
    phrase is left on the last clause)."""
    text = sentence[:-2]
    ws = (text[:1].lower() + text[1:]).split()
    if ws[0] == "aunque":
        comma = ws.index(",")
        return ws[comma + 1:], ws[1:comma]
    ws = words(sentence)
    at = next(i for i, w in enumerate(ws) if w in SUBORDINATORS)
    return ws[:at], ws[at + 1:]


def _subject_and_object(ws: List[str]) -> Tuple[str, str]:
    """The subject noun (the clause's second word) and the main verb's object noun."""
    verb = main_verb(ws)
    assert {n for _, n in VERB_FORMS[ws[verb]]} == {number_of_noun(ws[1])}, ws
    return ws[1], next(w for w in ws[verb + 1:] if w in NOUN_FORMS)


@pytest.mark.parametrize("name, role", [("SubjNumber", 0), ("ObjNumber", 1)])
def test_number_labels(built, name, role):
    """The labelled noun of the main clause has the label's number, the same noun of the
    subordinate clause the other number; the first and last words are never either."""
    want = {"NN": "sg", "NNS": "pl"}
    orders = Counter()
    for _, label, sentence in built[name]:
        main, sub = clauses(sentence)
        assert number_of_noun(_subject_and_object(main)[role]) == want[label], sentence
        assert number_of_noun(_subject_and_object(sub)[role]) != want[label], sentence
        edges = (sentence.split()[0].lower(), sentence.split()[-2])
        assert not set(edges) & set(_subject_and_object(main) + _subject_and_object(sub))
        orders[sentence.split()[0] == "Aunque"] += 1
    assert min(orders.values()) > 0.4 * N  # the subordinate clause comes first or last


def test_length_labels(built):
    for _, label, sentence in built["Length"]:
        n = len(sentence.split()) - 1  # every word, an opening adverb too; not the period
        lo, hi = (int(x) for x in label.split("-"))
        assert lo <= n <= hi, sentence
    assert length_label(5) == "05-07" and length_label(22) == "20-22"
    with pytest.raises(ValueError):
        length_label(4)


def pairs_of(rows: List[Tuple[str, str, str]], original: str
             ) -> Dict[Tuple[str, Tuple[str, ...]], Dict[str, List[str]]]:
    """Rows grouped by (split, sorted words): each group should be one original + its copy."""
    groups: Dict[Tuple[str, Tuple[str, ...]], Dict[str, List[str]]] = {}
    for split, label, sentence in rows:
        key = (split, tuple(sorted(sentence.split())))
        groups.setdefault(key, {}).setdefault(label, []).append(sentence)
    return groups


@pytest.mark.parametrize("name, original, altered", [
    ("BigramShift", "O", "I"), ("CoordinationInversion", "O", "I"), ("OddManOut", "O", "C")])
def test_word_order_tasks_are_minimal_pairs(built, name, original, altered):
    """Every altered sentence has its original, with the very same words, in its split."""
    groups = pairs_of(built[name], original)
    assert len(groups) == N // 2, name
    for members in groups.values():
        assert {k: len(v) for k, v in members.items()} == {original: 1, altered: 1}, members
    # so each split's classes have the same bag of words (as str.split() counts them)
    for split in ("tr", "va", "te"):
        bags = {label: Counter(w for s, l, t in built[name] if s == split and l == label
                               for w in t.split()) for label in (original, altered)}
        assert bags[original] == bags[altered], (name, split)


def test_bigram_shift_labels(built):
    for original, shifted in _pairs(built["BigramShift"], "O", "I"):
        a, b = original.split(), shifted.split()
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        # exactly two adjacent words swapped, never the first one
        assert len(diff) == 2 and diff[1] == diff[0] + 1 and diff[0] > 0, (original, shifted)
        assert (b[diff[0]], b[diff[1]]) == (a[diff[1]], a[diff[0]])
        assert agreement_ok(words(original)), original


def _pairs(rows: List[Tuple[str, str, str]], original: str, altered: str
           ) -> List[Tuple[str, str]]:
    return [(m[original][0], m[altered][0]) for m in pairs_of(rows, original).values()]


def test_odd_man_out_labels(built):
    animate = {n.sg for n in lx.ANIMATE} | {n.pl for n in lx.ANIMATE}
    for original, odd in _pairs(built["OddManOut"], "O", "C"):
        a, b = original.split(), odd.split()
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        # two nouns of different animacy, same gender and number, traded places
        assert len(diff) == 2, (original, odd)
        i, j = diff
        assert (b[i], b[j]) == (a[j], a[i]) and a[i] in NOUN_FORMS and a[j] in NOUN_FORMS
        assert (a[i] in animate) != (a[j] in animate), (original, odd)
        assert NOUN_FORMS[a[i]] & NOUN_FORMS[a[j]], (original, odd)
        assert agreement_ok(words(original)) and agreement_ok(words(odd)), odd
        # in the original every subject (first noun) is animate
        assert words(original)[1] in animate, original


def test_coordination_inversion_labels(built):
    for _, label, sentence in built["CoordinationInversion"]:
        ws = words(sentence)
        clitic_at = [i for i, w in enumerate(ws)
                     if w in CLITICS and i + 1 < len(ws) and ws[i + 1] in VERB_FORMS]
        assert len(clitic_at) == 1, sentence
        i = clitic_at[0]
        verbs_before = [w for w in ws[:i] if w in VERB_FORMS]
        # inverted: the clitic's verb phrase comes first, right after the subject
        assert (not verbs_before) == (label == "I"), sentence
        # the clitic agrees with the object of the other verb phrase (first noun after its verb)
        other = ws[i + 2:] if label == "I" else ws[:i]
        verb_at = next(j for j, w in enumerate(other) if w in VERB_FORMS)
        obj = next(w for w in other[verb_at + 1:] if w in NOUN_FORMS)
        assert CLITICS[ws[i]] in NOUN_FORMS[obj], sentence
        # both verbs share tense and number (one subject)
        verbs = [VERB_FORMS[w] for w in ws if w in VERB_FORMS]
        assert len(verbs) == 2 and verbs[0] == verbs[1], sentence


def test_depth_labels(built):
    """The label is how many relatives nest under the main verb's object; the other ones
    nest under the subject, so every sentence has three."""
    for _, label, sentence in built["Depth"]:
        ws = words(sentence)
        after = ws[main_verb(ws) + 1:]
        assert after.count("que") == int(label), sentence
        assert ws[:main_verb(ws)].count("que") == 3 - int(label), sentence
        # a chain: each relative's object is the next one's head, right before its 'que'
        for i, w in enumerate(ws):
            if w == "que":
                assert ws[i - 1] in NOUN_FORMS or ws[i - 1] in ADJ_FORMS, sentence


def test_word_content_labels(built):
    targets = {n.sg: n for n in lx.WORD_CONTENT}
    forms = {f: n.sg for n in lx.WORD_CONTENT for f in (n.sg, n.pl)}
    for _, label, sentence in built["WordContent"]:
        ws = words(sentence)
        present = [forms[w] for w in ws if w in forms]
        assert present == [label], sentence
        assert label in targets
        # never the first or the last word
        at = next(i for i, w in enumerate(ws) if w in forms)
        assert 0 < at < len(ws) - 1 and sentence.split()[0].lower() not in forms, sentence


def test_deterministic_and_seed_dependent(tmp_path):
    a = build_synthetic_es(tmp_path / "a", seed=3, n_per_task=200, tasks=["Tense", "Depth"])
    b = build_synthetic_es(tmp_path / "b", seed=3, n_per_task=200, tasks=["Depth"])
    c = build_synthetic_es(tmp_path / "c", seed=4, n_per_task=200, tasks=["Depth"])
    assert a["Depth"].read_bytes() == b["Depth"].read_bytes()
    assert a["Depth"].read_bytes() != c["Depth"].read_bytes()
    assert generate_task("Length", 200, 9) == generate_task("Length", 200, 9)
    assert generate_task("OddManOut", 200, 9) == generate_task("OddManOut", 200, 9)
    assert generate_task("OddManOut", 200, 9) != generate_task("OddManOut", 200, 10)
    info = json.loads((tmp_path / "a" / "build_info.json").read_text())
    assert info["seed"] == 3 and info["tasks"] == ["Tense", "Depth"]
    # only the task files and the build info; no temporary files left behind
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "Depth.txt", "Tense.txt", "build_info.json"]


@pytest.mark.parametrize("kwargs, needle", [
    ({"n_per_task": 10}, "n_per_task"),
    ({"n_per_task": "many"}, "n_per_task"),
    ({"seed": "x"}, "seed"),
    ({"tasks": ["Tense", "Nope"]}, "Nope"),
])
def test_bad_options(tmp_path, kwargs, needle):
    with pytest.raises(OptionError, match=needle):
        build_synthetic_es(tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def test_out_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(EstratosError, match="exists and is not a folder"):
        build_synthetic_es(f, n_per_task=200)
    assert f.read_text() == "x"


def test_cli_build(tmp_path):
    from click.testing import CliRunner

    from estratos.cli import cli

    runner = CliRunner()
    res = runner.invoke(cli, ["tasks", "build", "synthetic-es", "--out", str(tmp_path / "s"),
                              "--n-per-task", "200", "--task", "Depth", "--seed", "5"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"synthetic-es:Depth\t{tmp_path / 's' / 'Depth.txt'}"
    res = runner.invoke(cli, ["tasks", "build", "synthetic-es", "--out", str(tmp_path / "t"),
                              "--n-per-task", "199"])
    assert res.exit_code == 2 and "--n-per-task" in res.output
    assert not (tmp_path / "t").exists()


def test_tfidf_baseline_is_at_chance_on_word_order_tasks(tmp_path):
    """`estratos baseline` (bag of words) through the CLI: exactly the majority rate, since
    the two members of every pair have the same TF-IDF vector and so the same prediction."""
    from click.testing import CliRunner

    from estratos.cli import cli
    from estratos.results import read_results

    runner = CliRunner()
    names = ["BigramShift", "CoordinationInversion", "OddManOut"]
    res = runner.invoke(cli, ["tasks", "build", "synthetic-es", "--out", str(tmp_path / "s"),
                              "--n-per-task", "400"] + [a for n in names for a in ("--task", n)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["baseline", "--tasks", ",".join(f"synthetic-es:{n}" for n in names),
                              "--data-dir", f"synthetic-es={tmp_path / 's'}",
                              "--out", str(tmp_path / "b.jsonl")])
    assert res.exit_code == 0, res.output
    scores = {r.name: r.score for r in read_results(tmp_path / "b.jsonl")}
    assert scores == {n: 50.0 for n in names}


def test_odd_size_minimal_pairs():
    """An odd size adds one original alone, to train: the test split stays all pairs."""
    rows = generate_task("BigramShift", 201, 5)
    assert len(rows) == 201
    counts = Counter(label for _, label, _ in rows)
    assert counts == {"O": 101, "I": 100}
    groups = pairs_of(rows, "O")
    alone = [key for key, members in groups.items() if set(members) == {"O"}]
    assert len(alone) == 1 and alone[0][0] == "tr"


@pytest.mark.parametrize("name", sorted(LENGTH_MATCHED))
def test_length_matched_tasks_balance_every_length_in_every_split(built, name):
    """Depth, SubjNumber and ObjNumber: within each split, every (tokens, characters) length
    holds as many sentences of each label, so length alone tells nothing."""
    labels = task_labels(name)
    for split in ("tr", "va", "te"):
        counts: Dict[Tuple[int, int], Counter] = {}
        for s, label, sentence in built[name]:
            if s == split:
                key = (len(sentence.split()), len(sentence))
                counts.setdefault(key, Counter())[label] += 1
        for key, by_label in counts.items():
            assert set(by_label) == set(labels) and len(set(by_label.values())) == 1, \
                (name, split, key, by_label)
    assert surface_length("Un  b .") == (3, 7)


def test_length_matched_odd_size_puts_the_leftover_in_train():
    rows = generate_task("SubjNumber", 201, 5)
    assert Counter(label for _, label, _ in rows) == {"NN": 101, "NNS": 100}
    by_split = {split: Counter(label for s, label, _ in rows if s == split)
                for split in ("tr", "va", "te")}
    assert by_split["tr"]["NN"] == by_split["tr"]["NNS"] + 1
    assert by_split["va"]["NN"] == by_split["va"]["NNS"]
    assert by_split["te"]["NN"] == by_split["te"]["NNS"]


def test_length_baselines_stay_at_majority_on_matched_tasks(tmp_path):
    """`estratos baseline --baseline length-tokens,length-chars` through the CLI on the
    default build (1000 per task, data seed 1111): exactly the majority rate, within the
    majority + 5 points asked of these tasks (a length's sentences in the test split are one
    of each label, so any prediction from length alone gets one of them right)."""
    from click.testing import CliRunner

    from estratos.cli import cli
    from estratos.results import read_results

    runner = CliRunner()
    names = sorted(LENGTH_MATCHED)
    res = runner.invoke(cli, ["tasks", "build", "synthetic-es", "--out", str(tmp_path / "s")]
                        + [a for n in names for a in ("--task", n)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["baseline", "--tasks", ",".join(f"synthetic-es:{n}" for n in names),
                              "--data-dir", f"synthetic-es={tmp_path / 's'}",
                              "--baseline", "length-tokens,length-chars",
                              "--out", str(tmp_path / "b.jsonl")])
    assert res.exit_code == 0, res.output
    records = read_results(tmp_path / "b.jsonl")
    assert len(records) == 6
    for rec in records:
        majority = rec.chance["majority"]
        assert majority == 100.0 / len(task_labels(rec.name))
        assert rec.score <= majority + 5, (rec.name, rec.model, rec.score)
        assert rec.score == majority, (rec.name, rec.model, rec.score)
