"""Spanish SentEval (es-senteval): 21 datasets, as laid out in the benchmark's ``senteval/``.

Names and files follow the benchmark repository (OpenCENIA/Spanish-Sentence-Evaluation);
the linguistic probing tasks fall back to the X-Probe files (``senteval/Probing-xprobe``)
when the SentEval-format ``senteval/Probing/*.txt`` files are absent.
"""

from __future__ import annotations

from estratos.tasks.registry import SuiteInfo, register, register_suite
from estratos.tasks.suites.common import KFOLD10, NLI, PROBING, tvt
from estratos.tasks.types import TaskSpec

SUITE = "es-senteval"
register_suite(SuiteInfo(SUITE, "es", "Spanish SentEval (OpenCENIA/Spanish-Sentence-Evaluation)"))

_SICK = {"splits": {"train": "senteval/SICK/SICK_train.txt",
                    "dev": "senteval/SICK/SICK_trial.txt",
                    "test": "senteval/SICK/SICK_test.txt"},
         "header": True, "columns": 5, "sentences": [1, 2]}


def _spec(name: str, group: str, fmt: str, combiner: str, protocol: str, metric: str,
          files: dict, **extra) -> TaskSpec:
    return TaskSpec(suite=SUITE, name=name, group=group, language="es", format=fmt,
                    combiner=combiner, protocol=protocol, metric=metric, files=files, **extra)


SPECS = [
    _spec("TASS1", "SC", "tsv", "single", "split", "accuracy",
          {"splits": tvt("senteval/TASS/task1", dev="dev.txt"), "sentences": [0], "label": 1},
          labels=("0", "1", "2"), description="tweet sentiment, 3 classes (TASS 2020 task 1)"),
    _spec("TASS2", "SC", "tsv", "single", "split", "accuracy",
          {"splits": tvt("senteval/TASS/task2", dev="dev.txt"), "sentences": [0], "label": 1},
          labels=tuple("0123456"), description="tweet emotion, 7 classes (TASS 2020 task 2)"),
    _spec("MC", "SC", "class-files", "single", "inner-kfold", "accuracy",
          {"classes": {"neg": "senteval/MC/muchocine.neg", "pos": "senteval/MC/muchocine.pos"}},
          labels=("neg", "pos"), classifier=KFOLD10,
          description="MuchoCine movie review polarity (one file per class)"),
    _spec("FAC", "SC", "class-files", "single", "inner-kfold", "accuracy",
          {"classes": {"objective": "senteval/FAC/fac.objective",
                       "subjective": "senteval/FAC/fac.subjective"}},
          labels=("objective", "subjective"), classifier=KFOLD10,
          description="FilmAffinity subjectivity (one file per class)"),
    _spec("SQC", "SC", "question", "single", "kfold", "accuracy",
          {"splits": {"train": "senteval/SQC/train.txt", "test": "senteval/SQC/test.txt"}},
          labels=("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"), classifier=KFOLD10,
          description="Spanish question classification, coarse TREC classes"),
    _spec("PAWS", "SPC", "tsv", "pair", "kfold", "accuracy",
          {"splits": {"train": "senteval/PAWS/paraphrase_train.txt",
                      "test": "senteval/PAWS/paraphrase_test.txt"},
           "header": True, "sentences": [1, 2], "label": 0},
          labels=("0", "1"), classifier=KFOLD10, extra_metrics=("f1",),
          description="PAWS-X paraphrase identification"),
    _spec("NLI", "SPC", "aligned", "pair4", "split", "accuracy",
          {"splits": {split: {"sentences": [f"senteval/NLI/s1.{split}",
                                            f"senteval/NLI/s2.{split}"],
                              "labels": f"senteval/NLI/labels.{split}"}
                      for split in ("train", "dev", "test")}},
          labels=("contradiction", "entailment", "neutral"), classifier=NLI,
          description="natural language inference (XNLI), 3 classes"),
    _spec("SICKEntailment", "SPC", "tsv", "pair", "split", "accuracy", {**_SICK, "label": 4},
          labels=("CONTRADICTION", "ENTAILMENT", "NEUTRAL"),
          description="SICK entailment, 3 classes"),
    _spec("SICKRelatedness", "SS", "tsv", "pair", "relatedness", "pearson",
          {**_SICK, "score": 3}, score_range=(1.0, 5.0), extra_metrics=("spearman",),
          description="SICK relatedness score 1-5"),
]

for _name, _subsets in (("STS14", ("news", "wikipedia")), ("STS15", ("newswire", "wikipedia")),
                        ("STS17", ("track3.es-es",))):
    SPECS.append(_spec(_name, "SS", "sts", "pair", "cosine", "pearson",
                       {"dir": f"senteval/STS/{_name}-es-test", "subsets": list(_subsets)},
                       score_range=(0.0, 5.0), extra_metrics=("spearman",),
                       description=f"{_name} Spanish semantic textual similarity (no training)"))

for _name, _stem, _classifier in PROBING:
    SPECS.append(_spec(_name, "LPT", "probing", "single", "split", "accuracy",
                       {"file": f"senteval/Probing/{_stem}.txt",
                        "xprobe": f"senteval/Probing-xprobe/{_stem}"},
                       classifier=_classifier, description=f"linguistic probing: {_stem}"))

register(*SPECS)
