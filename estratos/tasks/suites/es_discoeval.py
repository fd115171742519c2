"""Spanish DiscoEval (es-discoeval): 11 datasets in the benchmark's ``discoeval/`` folder.

Folder ``mlsum`` is the 'news' domain (SPnews, BSOnews, SSPmlsum keep the benchmark's names).
"""

from __future__ import annotations

from estratos.tasks.registry import SuiteInfo, register, register_suite
from estratos.tasks.suites.common import DC, RST, SSP, tvt
from estratos.tasks.types import TaskSpec

SUITE = "es-discoeval"
register_suite(SuiteInfo(SUITE, "es", "Spanish DiscoEval (OpenCENIA/Spanish-Sentence-Evaluation)"))


def _spec(name: str, group: str, fmt: str, combiner: str, files: dict, **extra) -> TaskSpec:
    return TaskSpec(suite=SUITE, name=name, group=group, language="es", format=fmt,
                    combiner=combiner, protocol="split", metric="accuracy", files=files,
                    **extra)


SPECS = []
for _domain, _folder in (("thesis", "thesis"), ("news", "mlsum"), ("wiki", "wiki")):
    SPECS.append(_spec(f"SP{_domain}", "SP", "tsv", "sp",
                       {"splits": tvt(f"discoeval/SP/{_folder}"), "label": 0,
                        "sentences": [1, 2, 3, 4, 5]},
                       labels=tuple("01234"),
                       description=f"sentence position ({_folder}): where the first of 5 "
                                   "sentences belongs"))
for _domain, _folder in (("thesis", "thesis"), ("news", "mlsum"), ("wiki", "wiki")):
    SPECS.append(_spec(f"BSO{_domain}", "BSO", "bso", "bso",
                       {"splits": tvt(f"discoeval/BSO/{_folder}")}, labels=("0", "1"),
                       description=f"binary sentence ordering ({_folder}): is the pair in "
                                   "order?"))
for _domain in ("opus", "wiki", "gdd"):
    SPECS.append(_spec(f"DC{_domain}", "DC", "tsv", "dc",
                       {"splits": tvt(f"discoeval/DC/{_domain}"), "label": 0,
                        "sentences": [1, 2, 3, 4, 5, 6]},
                       labels=("0", "1"), classifier=DC,
                       description=f"discourse coherence ({_domain}): are 6 sentences "
                                   "coherent?"))
SPECS.append(_spec("SSPmlsum", "SSP", "tsv", "single",
                   {"splits": tvt("discoeval/SSP/mlsum"), "label": 0, "sentences": [1]},
                   labels=("0", "1"), classifier=SSP,
                   description="sentence section prediction (mlsum): abstract or body?"))
SPECS.append(_spec("RST", "DR", "rst", "rst",
                   {"splits": tvt("discoeval/RST", "RST_TRAIN.pkl", "RST_DEV.pkl",
                                  "RST_TEST.pkl")},
                   classifier=RST,
                   description="RST discourse relation between two subtrees (mean of EDUs)"))

register(*SPECS)
