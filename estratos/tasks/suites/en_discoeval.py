"""English DiscoEval (en-discoeval): DiscoEval's ``data/`` folder layout.

SP/BSO/DC/SSP as in the Spanish suite, PDTB explicit/implicit relations
(``label<TAB>s1<TAB>s2`` with ``labelset.txt``) and RST-DT pickles.
"""

from __future__ import annotations

from estratos.tasks.registry import SuiteInfo, register, register_suite
from estratos.tasks.suites.common import DC, PDTB, RST, SSP, tvt
from estratos.tasks.types import TaskSpec

SUITE = "en-discoeval"
register_suite(SuiteInfo(SUITE, "en", "DiscoEval (ZeweiChu/DiscoEval data folder)"))


def _spec(name: str, group: str, fmt: str, combiner: str, files: dict, **extra) -> TaskSpec:
    return TaskSpec(suite=SUITE, name=name, group=group, language="en", format=fmt,
                    combiner=combiner, protocol="split", metric="accuracy", files=files,
                    **extra)


SPECS = []
for _domain in ("arxiv", "rocstory", "wiki"):
    SPECS.append(_spec(f"SP{_domain}", "SP", "tsv", "sp",
                       {"splits": tvt(f"SP/{_domain}"), "label": 0,
                        "sentences": [1, 2, 3, 4, 5]}, labels=tuple("01234"),
                       description=f"sentence position ({_domain})"))
for _domain in ("arxiv", "rocstory", "wiki"):
    SPECS.append(_spec(f"BSO{_domain}", "BSO", "bso", "bso", {"splits": tvt(f"BSO/{_domain}")},
                       labels=("0", "1"), description=f"binary sentence ordering ({_domain})"))
for _domain in ("chat", "wiki"):
    SPECS.append(_spec(f"DC{_domain}", "DC", "tsv", "dc",
                       {"splits": tvt(f"DC/{_domain}"), "label": 0,
                        "sentences": [1, 2, 3, 4, 5, 6]}, labels=("0", "1"), classifier=DC,
                       description=f"discourse coherence ({_domain})"))
SPECS.append(_spec("SSPabs", "SSP", "tsv", "single",
                   {"splits": tvt("SSP/abs"), "label": 0, "sentences": [1]},
                   labels=("0", "1"), classifier=SSP,
                   description="sentence section prediction (abstracts)"))
for _name, _folder in (("PDTB-E", "Explicit"), ("PDTB-I", "Implicit")):
    SPECS.append(_spec(_name, "DR", "pdtb", "pair4",
                       {"splits": tvt(f"PDTB/{_folder}"), "label": 0, "sentences": [1, 2],
                        "labelset": f"PDTB/{_folder}/labelset.txt"}, classifier=PDTB,
                       description=f"PDTB {_folder.lower()} discourse relation"))
SPECS.append(_spec("RST", "DR", "rst", "rst",
                   {"splits": tvt("RST", "RST_TRAIN.pkl", "RST_DEV.pkl", "RST_TEST.pkl")},
                   classifier=RST, description="RST-DT discourse relation between two subtrees"))

register(*SPECS)
