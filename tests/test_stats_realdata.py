"""Real model, real data: MiniLM-L6 on slices of TASS1 and STS14 probed with stored
predictions; `report --ci --significance` and `compare` read as docs/statistics.md says."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from click.testing import CliRunner

from estratos.tasks.types import SlotRefs, Split, TaskData

pytestmark = [pytest.mark.realdata, pytest.mark.slow]

CELL = re.compile(r"^(?:\*\*|<u>)?(\d+\.\d)(?: ± (\d+\.\d))? \[(\d+\.\d), (\d+\.\d)\]"
                  r"(?:\*\*|</u>)?( †)?$")


def _slice(task: TaskData, n: int) -> TaskData:
    """The first ``n`` examples of each split (one sentence per slot), with only the
    sentences they use."""
    splits = {name: s.take(np.arange(min(n, len(s)))) for name, s in task.splits.items()}
    used = sorted({int(i) for s in splits.values() for refs in s.slots for i in refs.indices})
    remap = {old: new for new, old in enumerate(used)}
    new = {name: Split(name, tuple(SlotRefs.single([remap[int(i)] for i in refs.indices])
                                   for refs in s.slots), s.labels)
           for name, s in splits.items()}
    return TaskData(task.spec, tuple(task.sentences[i] for i in used), new, task.labels,
                    task.protocol, task.fallback)


class _Loader:
    def __init__(self, tasks):
        self.tasks = tasks

    def __call__(self, spec, data_dirs):
        return self.tasks[spec.id]


@pytest.fixture(scope="module")
def real_run(es_data_dir, minilm_dir, tmp_path_factory):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from estratos.encode import encode_sentences
    from estratos.probe.config import ProbeConfig
    from estratos.probe.grid.runner import run_probe
    from estratos.tasks import DataDirs, get_spec, load_task

    dirs = DataDirs.parse([str(es_data_dir)])
    tass = _slice(load_task(get_spec("es-senteval:TASS1"), dirs), 300)
    sts = _slice(load_task(get_spec("es-senteval:STS14"), dirs), 150)
    folder = tmp_path_factory.mktemp("realstats")
    cache = folder / "minilm.h5"
    encode_sentences(sorted(set(tass.sentences) | set(sts.sentences)), str(minilm_dir), cache,
                     device="cpu", progress=False)
    out = folder / "minilm.jsonl"
    run_probe(cache, [tass.spec, sts.spec], dirs, out,
              ProbeConfig.build(layers="3,6,avg", pooling="mean", seeds=(1111, 1), threads=1),
              loader=_Loader({tass.spec.id: tass, sts.spec.id: sts}))
    return out


def test_report_with_ci_reads_as_documented(real_run, tmp_path):
    from estratos.cli import cli

    result = CliRunner().invoke(cli, ["report", str(real_run), "--out", str(tmp_path / "rep"),
                                      "--ci", "--significance", "--format", "md,json"])
    assert result.exit_code == 0, result.output
    md = (tmp_path / "rep" / "report.md").read_text()
    scores = md.split("## V-information")[0]  # the score tables (bits follow, in their own)
    rows = {line.split("|")[2].strip(): line for line in scores.splitlines()
            if line.startswith("| SC |") or line.startswith("| SS |")}
    assert set(rows) == {"TASS1", "STS14"}
    for name, line in rows.items():
        cells = [c.strip() for c in line.strip().strip("|").split("|")][2:]
        assert len(cells) == 3  # layers 3, 6, avg
        for cell in cells:
            m = CELL.match(cell)
            assert m, (name, cell)
            mean, lo, hi = float(m.group(1)), float(m.group(3)), float(m.group(4))
            assert lo <= mean <= hi
            if name == "STS14":  # cosine: no training, so no seed spread to show
                assert m.group(2) is None
        assert sum(c.startswith("**") for c in cells) == 1  # one best layer, never a †
        assert not any(c.startswith("**") and c.endswith("†") for c in cells)
    assert "95% percentile bootstrap interval over test examples (1000 resamples)" in md
    assert "Holm-corrected over the other layers, alpha = 0.05" in md
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    for row in doc["dataset_scores"]:
        assert row["ci_lo"] <= row["mean"] <= row["ci_hi"]
        assert row["not_worse_than_best"] in (True, False)
        if row["task"] == "es-senteval:TASS1":
            assert row["n_seeds"] == 2 and row["std"] is not None and row["ci_se"] > 0


def test_results_lines_carry_their_interval(real_run):
    from estratos.results import read_results
    from estratos.results.predictions import PredictionsReader, check_metric

    reader = PredictionsReader()
    for record in read_results(real_run):
        found = reader.find(record, real_run)
        assert round(check_metric(record, found.preds), 2) == pytest.approx(record.score,
                                                                             abs=0.011)
        assert record.ci["lo"] <= record.score <= record.ci["hi"]
    assert {r.task for r in read_results(real_run)} == {"es-senteval:TASS1",
                                                        "es-senteval:STS14"}


def test_compare_two_layers_on_real_results(real_run):
    from estratos.cli import cli

    result = CliRunner().invoke(cli, ["compare", str(real_run), "--task", "TASS1",
                                      "--a", "layer=3", "--b", "layer=avg"])
    assert result.exit_code == 0, result.output
    assert "accuracy on 300 test examples" in result.output
    assert "paired bootstrap p = " in result.output
    assert result.output.count("McNemar exact, seed") == 2
