"""English SentEval (en-senteval): SentEval's ``data/`` folder (``downstream/``, ``probing/``).

Binary classification (MR, CR, SUBJ, MPQA; latin-1 files, one per class), SST-2/SST-5, TREC,
MRPC, SNLI, SICK, STS12-16, STS Benchmark and the 10 probing tasks.
"""

from __future__ import annotations

from estratos.tasks.registry import SuiteInfo, register, register_suite
from estratos.tasks.suites.common import KFOLD10, NLI, PROBING, tvt
from estratos.tasks.types import TaskSpec

SUITE = "en-senteval"
register_suite(SuiteInfo(SUITE, "en", "SentEval (facebookresearch/SentEval data folder)"))

D = "downstream"
_SICK = {"splits": {"train": f"{D}/SICK/SICK_train.txt", "dev": f"{D}/SICK/SICK_trial.txt",
                    "test": f"{D}/SICK/SICK_test_annotated.txt"},
         "header": True, "columns": 5, "sentences": [1, 2]}
_STS_SUBSETS = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "HDL", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}


def _spec(name: str, group: str, fmt: str, combiner: str, protocol: str, metric: str,
          files: dict, **extra) -> TaskSpec:
    return TaskSpec(suite=SUITE, name=name, group=group, language="en", format=fmt,
                    combiner=combiner, protocol=protocol, metric=metric, files=files, **extra)


SPECS = []
for _name, _folder, _stem, _classes in (("MR", "MR", "rt-polarity", ("neg", "pos")),
                                        ("CR", "CR", "custrev", ("neg", "pos")),
                                        ("SUBJ", "SUBJ", "subj", ("objective", "subjective")),
                                        ("MPQA", "MPQA", "mpqa", ("neg", "pos"))):
    SPECS.append(_spec(_name, "SC", "class-files", "single", "inner-kfold", "accuracy",
                       {"classes": {c: f"{D}/{_folder}/{_stem}.{c}" for c in _classes},
                        "encoding": "latin-1"},
                       labels=_classes, classifier=KFOLD10,
                       description=f"{_name} binary classification (one file per class)"))
for _name, _folder, _labels in (("SST2", "binary", ("0", "1")), ("SST5", "fine", tuple("01234"))):
    SPECS.append(_spec(_name, "SC", "tsv", "single", "split", "accuracy",
                       {"splits": tvt(f"{D}/SST/{_folder}", "sentiment-train", "sentiment-dev",
                                      "sentiment-test"), "sentences": [0], "label": 1},
                       labels=_labels, description=f"Stanford sentiment treebank ({_folder})"))
SPECS += [
    _spec("TREC", "SC", "question", "single", "kfold", "accuracy",
          {"splits": {"train": f"{D}/TREC/train_5500.label", "test": f"{D}/TREC/TREC_10.label"},
           "encoding": "latin-1"},
          labels=("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"), classifier=KFOLD10,
          description="TREC question type, 6 coarse classes"),
    _spec("MRPC", "SPC", "tsv", "pair", "kfold", "accuracy",
          {"splits": {"train": f"{D}/MRPC/msr_paraphrase_train.txt",
                      "test": f"{D}/MRPC/msr_paraphrase_test.txt"},
           "header": True, "columns": 5, "sentences": [3, 4], "label": 0},
          labels=("0", "1"), classifier=KFOLD10, extra_metrics=("f1",),
          description="Microsoft Research paraphrase corpus"),
    _spec("SNLI", "SPC", "aligned", "pair4", "split", "accuracy",
          {"splits": {split: {"sentences": [f"{D}/SNLI/s1.{split}", f"{D}/SNLI/s2.{split}"],
                              "labels": f"{D}/SNLI/labels.{split}"}
                      for split in ("train", "dev", "test")}},
          labels=("contradiction", "entailment", "neutral"), classifier=NLI,
          description="Stanford natural language inference"),
    _spec("SICKEntailment", "SPC", "tsv", "pair", "split", "accuracy", {**_SICK, "label": 4},
          labels=("CONTRADICTION", "ENTAILMENT", "NEUTRAL"), description="SICK entailment"),
    _spec("SICKRelatedness", "SS", "tsv", "pair", "relatedness", "pearson",
          {**_SICK, "score": 3}, score_range=(1.0, 5.0), extra_metrics=("spearman",),
          description="SICK relatedness score 1-5"),
    _spec("STSBenchmark", "SS", "tsv", "pair", "relatedness", "pearson",
          {"splits": tvt(f"{D}/STS/STSBenchmark", "sts-train.csv", "sts-dev.csv",
                         "sts-test.csv"),
           "score": 4, "sentences": [5, 6], "columns": 7, "min_columns": True},
          score_range=(0.0, 5.0), extra_metrics=("spearman",),
          description="STS Benchmark (trained relatedness)"),
]
for _name, _subsets in _STS_SUBSETS.items():
    SPECS.append(_spec(_name, "SS", "sts", "pair", "cosine", "pearson",
                       {"dir": f"{D}/STS/{_name}-en-test", "subsets": list(_subsets)},
                       score_range=(0.0, 5.0), extra_metrics=("spearman",),
                       description=f"{_name} semantic textual similarity (no training)"))
for _name, _stem, _classifier in PROBING[:3] + (("TopConstituents", "top_constituents", {}),) \
        + PROBING[3:]:
    SPECS.append(_spec(_name, "LPT", "probing", "single", "split", "accuracy",
                       {"file": f"probing/{_stem}.txt"}, classifier=_classifier,
                       description=f"linguistic probing: {_stem}"))

register(*SPECS)
