"""DiscoEval's and SentEval's English formats, on tiny fixture folders written here."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from estratos.tasks import DataDirs, get_spec, load_task, select_tasks


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode(encoding))
    return path


def lines(*rows: str) -> str:
    return "".join(r + "\n" for r in rows)


@pytest.fixture()
def disco(tmp_path) -> Path:
    """A miniature DiscoEval ``data/`` folder."""
    root = tmp_path / "discoeval"
    five = "\t".join(f"s{i} ." for i in range(1, 6))
    six = "\t".join(f"d{i} ." for i in range(1, 7))
    for split, n in (("train", 6), ("valid", 3), ("test", 4)):
        write(root / "SP" / "wiki" / f"{split}.txt",
              lines(*[f"{i % 5}\t{five.replace('s1 .', f'{split} {i} .')}" for i in range(n)]))
        write(root / "BSO" / "arxiv" / f"{split}.txt",
              lines(*[f"{split} first {i} .\t{split} second {i} ." for i in range(n)]))
        write(root / "DC" / "chat" / f"{split}.txt",
              lines(*[f"{i % 2}\t{six.replace('d1 .', f'{split} {i} .')}" for i in range(n)]))
        write(root / "SSP" / "abs" / f"{split}.txt",
              lines(*[f"{i % 2}\t{split} sentence {i} ." for i in range(n)]))
        write(root / "PDTB" / "Implicit" / f"{split}.txt",
              lines(*[f"{i % 3}\t{split} arg one {i}\t{split} arg two {i}" for i in range(n)]))
    write(root / "PDTB" / "Implicit" / "labelset.txt", lines("Expansion", "Comparison",
                                                             "Contingency"))
    for split, name in (("train", "TRAIN"), ("valid", "DEV"), ("test", "TEST")):
        records = [("NS-Elaboration", ("edu a",), ("edu b", "edu c")),
                   ("NN-List", ("edu d",), ("edu e",))]
        (root / "RST").mkdir(parents=True, exist_ok=True)
        (root / "RST" / f"RST_{name}.pkl").write_bytes(pickle.dumps(records, protocol=2))
    return root


@pytest.fixture()
def senteval(tmp_path) -> Path:
    """A miniature SentEval ``data/`` folder."""
    root = tmp_path / "senteval"
    d = root / "downstream"
    write(d / "MR" / "rt-polarity.pos", lines("a charming caf\u00e9 film", "great"), "latin-1")
    write(d / "MR" / "rt-polarity.neg", lines("dull", "boring and long"), "latin-1")
    write(d / "TREC" / "train_5500.label",
          lines("NUM:dist How far is it ?", "HUM:ind Who wrote it ?", "LOC:city Where ?"),
          "latin-1")
    write(d / "TREC" / "TREC_10.label", lines("DESC:def What is a cat ?"), "latin-1")
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"
    for name in ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"):
        write(d / "SICK" / name, lines(header, "1\tA dog runs\tA dog is running\t4.5\tENTAILMENT",
                                       "2\tA cat\tNo cat\t2.1\tCONTRADICTION"))
    sts = d / "STS" / "STS12-en-test"
    for subset in ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"):
        write(sts / f"STS.input.{subset}.txt", lines("a b\tc d", "e f\tg h", "i j\tk l"))
        write(sts / f"STS.gs.{subset}.txt", lines("4.0", "", "1.5"))
    bench = d / "STS" / "STSBenchmark"
    for name in ("sts-train.csv", "sts-dev.csv", "sts-test.csv"):
        write(bench / name, lines("main-captions\tMSRvid\t2012test\t0001\t5.000\tA plane."
                                  "\tAn air plane.",
                                  "main-news\theadlines\t2013\t0002\t1.2\tX is.\tY was.\textra"))
    write(d / "MRPC" / "msr_paraphrase_train.txt",
          lines("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", "1\t1\t2\tHe said.\tHe told.",
                "0\t3\t4\tIt rains.\tShe sings."))
    write(d / "MRPC" / "msr_paraphrase_test.txt",
          lines("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", "1\t5\t6\tYes.\tIndeed."))
    for split in ("train", "dev", "test"):
        write(d / "SNLI" / f"s1.{split}", lines("A man sleeps .", "A man sleeps ."))
        write(d / "SNLI" / f"s2.{split}", lines("A person rests .", "A man runs ."))
        write(d / "SNLI" / f"labels.{split}", lines("entailment", "contradiction"))
    write(root / "probing" / "past_present.txt",
          lines("tr\tPAST\tShe walked .", "tr\tPRES\tShe walks .", "va\tPAST\tHe ran .",
                "te\tPRES\tHe runs .", "te\tPAST\tThey sang ."))
    return root


def test_discoeval_formats(disco):
    dirs = DataDirs.parse([f"en-discoeval={disco}"])
    sp = load_task(get_spec("en-discoeval:SPwiki"), dirs)
    assert sp.sizes == {"train": 6, "dev": 3, "test": 4} and sp.fallback is None
    assert sp.sentences[sp.splits["train"].slots[0].indices[0]] == "train 0 ."
    assert len(sp.splits["train"].slots) == 5

    bso = load_task(get_spec("en-discoeval:BSOarxiv"), dirs)
    assert bso.sizes == {"train": 12, "dev": 6, "test": 8}

    dc = load_task(get_spec("en-discoeval:DCchat"), dirs)
    assert len(dc.splits["test"].slots) == 6 and dc.labels == ("0", "1")
    assert dict(dc.spec.classifier)["nhid"] == 2000

    ssp = load_task(get_spec("en-discoeval:SSPabs"), dirs)
    assert ssp.sizes["train"] == 6

    pdtb = load_task(get_spec("en-discoeval:PDTB-I"), dirs)
    assert pdtb.labels == ("Comparison", "Contingency", "Expansion")  # sorted names
    first = pdtb.splits["train"]
    assert pdtb.labels[first.labels[0]] == "Expansion"  # label 0 = first line of labelset
    assert pdtb.labels[first.labels[1]] == "Comparison"

    rst = load_task(get_spec("en-discoeval:RST"), dirs)
    assert rst.labels == ("NN-List", "NS-Elaboration")
    right = rst.splits["train"].slots[1]
    assert [rst.sentences[i] for i in right.indices[right.offsets[0]:right.offsets[1]]] == [
        "edu b", "edu c"]


def test_discoeval_bso_with_leading_order_label(disco):
    path = disco / "BSO" / "arxiv" / "test.txt"
    write(path, lines("1\tfirst .\tsecond .", "0\tlater .\tearlier ."))
    data = load_task(get_spec("en-discoeval:BSOarxiv"), DataDirs.parse([f"en-discoeval={disco}"]))
    test = data.splits["test"]
    ones = test.labels == 1
    pairs = {(data.sentences[a], data.sentences[b])
             for a, b in zip(test.slots[0].indices[ones], test.slots[1].indices[ones])}
    assert pairs == {("first .", "second ."), ("earlier .", "later .")}


def test_senteval_formats(senteval):
    dirs = DataDirs.parse([f"en-senteval={senteval}"])
    mr = load_task(get_spec("en-senteval:MR"), dirs)
    assert mr.protocol == "inner-kfold" and mr.sizes == {"all": 4}
    assert "a charming café film" in mr.sentences  # latin-1 decoded

    trec = load_task(get_spec("en-senteval:TREC"), dirs)
    assert trec.sizes == {"train": 3, "test": 1}
    assert trec.labels[trec.splits["test"].labels[0]] == "DESC"
    assert "What is a cat ?" in trec.sentences

    sick = load_task(get_spec("en-senteval:SICKEntailment"), dirs)
    assert sick.sizes == {"train": 2, "dev": 2, "test": 2}
    sickr = load_task(get_spec("en-senteval:SICKRelatedness"), dirs)
    np.testing.assert_allclose(sickr.splits["test"].labels, [4.5, 2.1])

    sts = load_task(get_spec("en-senteval:STS12"), dirs)
    assert sts.protocol == "cosine" and list(sts.splits)[0] == "MSRpar"
    assert all(len(s) == 2 for s in sts.splits.values())  # the pair without gold is skipped
    assert "1 pairs without gold score skipped" in sts.sources["MSRpar"]

    stsb = load_task(get_spec("en-senteval:STSBenchmark"), dirs)
    assert stsb.protocol == "relatedness" and stsb.sizes["train"] == 2

    mrpc = load_task(get_spec("en-senteval:MRPC"), dirs)
    assert mrpc.sizes == {"train": 2, "test": 1} and mrpc.spec.extra_metrics == ("f1",)

    snli = load_task(get_spec("en-senteval:SNLI"), dirs)
    assert snli.spec.combiner == "pair4" and snli.sizes["dev"] == 2

    tense = load_task(get_spec("en-senteval:Tense"), dirs)
    assert tense.sizes == {"train": 2, "dev": 1, "test": 2} and tense.labels == ("PAST", "PRES")
    assert tense.fallback is None


def test_senteval_probing_file_without_train_rows_is_an_error(senteval):
    write(senteval / "probing" / "past_present.txt", lines("va\tPAST\tHe ran .",
                                                            "te\tPRES\tHe runs ."))
    from estratos.errors import InputError
    with pytest.raises(InputError, match="no 'tr' lines"):
        load_task(get_spec("en-senteval:Tense"), DataDirs.parse([f"en-senteval={senteval}"]))


def test_mixing_suites_with_data_dir_entries(disco, senteval):
    dirs = DataDirs.parse([f"en-discoeval={disco}", f"en-senteval={senteval}"])
    specs = select_tasks("en-discoeval:SSPabs,en-senteval:MR")
    assert [load_task(s, dirs).spec.id for s in specs] == ["en-discoeval:SSPabs",
                                                           "en-senteval:MR"]
