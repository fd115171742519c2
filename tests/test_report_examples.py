"""estratos report --examples N (issue 46, item 4): per system and task, the N test examples
with the lowest and the N with the highest pointwise V-information at the task's best layer,
with their texts and labels, in report.md, report.html and report.json; a notice (never an
error) for cells whose predictions cannot show them; nothing new without the option."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import List, Tuple

import numpy as np
from click.testing import CliRunner
from stats_toys import classification_cell

from estratos.cli import cli
from estratos.report import build_report, write_report
from estratos.report.examples import MAX_SHOWN, SECTION_TITLE, select
from estratos.results import ResultRecord, ResultsStore
from estratos.results.predictions import CellPredictions, write_predictions

NAMES = ("neg", "neu", "pos")
#: mean V-information each layer is built to have (layer 1 is the best)
TARGET = {0: 0.05, 1: 0.40, 2: -0.30}
N = 60


def _texts(n: int = N) -> Tuple[str, ...]:
    texts = [f"sentence number {i}" for i in range(n)]
    texts[3] = "a | pipe ‖ and a\nline break"
    texts[5] = "long " * 80  # 400 characters: cut in the tables
    return tuple(texts)


def _cell(layer, seed: int, *, texts=True, names=True, bits=True, gold_seed: int = 7
          ) -> Tuple[ResultRecord, CellPredictions]:
    """A 3-class toy cell with a uniform prior and per-example log2p drawn around the
    layer's TARGET (seed-dependent noise), the test examples' texts and class names."""
    record, preds = classification_cell(layer, seed, n=N, gold_seed=gold_seed,
                                        accuracy={0: 55.0, 1: 70.0, 2: 40.0})
    rng = np.random.default_rng([seed, 23, int(str(layer) != "avg")])
    prior = np.full(N, math.log2(1 / 3))
    log2p = np.minimum(prior + TARGET[layer] + rng.normal(0.0, 0.6, N), -1e-3)
    info = {"cross_entropy": round(-float(log2p.mean()), 6),
            "prior_cross_entropy": round(-float(prior.mean()), 6),
            "v_information": round(float(log2p.mean() - prior.mean()), 6)}
    record = record.replace(information=info)
    preds = CellPredictions(preds.predicted, preds.gold,
                            log2p=log2p if bits else None, prior_log2p=prior if bits else None,
                            texts=_texts() if texts else None,
                            label_names=NAMES if names else ())
    return record, preds


def _write(path: Path, cells) -> List[ResultRecord]:
    cells = list(cells)
    records = write_predictions(path, [r for r, _ in cells], [p for _, p in cells])
    return ResultsStore(path).append(records)


def _run(path: Path, seeds=(1, 2), **kw):
    cells = [_cell(layer, seed, **kw) for layer in (0, 1, 2) for seed in seeds]
    _write(path, cells)
    return {(r.layer, r.seed): p for r, p in cells}


def _expected_pvi(preds, layer, seeds):
    return np.mean([preds[(layer, s)].pvi for s in seeds], axis=0)


def _md_rows(md: str) -> List[List[str]]:
    block = md.split(f"## {SECTION_TITLE}")[1].split("\n## ")[0]
    lines = [line for line in block.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in _split(line)] for line in lines[2:]]


def _split(line: str) -> List[str]:
    """A Markdown table line's cells (an escaped pipe stays inside its cell)."""
    cells, cur, prev = [], "", ""
    for ch in line.strip()[1:-1]:
        if ch == "|" and prev != "\\":
            cells.append(cur)
            cur = ""
        else:
            cur += ch
        prev = ch
    return cells + [cur]


def test_lowest_and_highest_pvi_of_the_best_layer_with_texts_and_labels(tmp_path):
    path = tmp_path / "run.jsonl"
    preds = _run(path)
    write_report([path], tmp_path / "rep", formats="md,json,html", examples=3)
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    assert f"## {SECTION_TITLE}" in md
    # right after the V-information section
    assert md.index("## V-information (bits)") < md.index(f"## {SECTION_TITLE}")
    rows = _md_rows(md)
    assert len(rows) == 6
    pvi = _expected_pvi(preds, 1, (1, 2))  # layer 1 has the most V-information
    first = preds[(1, 1)]
    order = np.argsort(pvi, kind="stable")
    want = {"lowest": list(order[:3]), "highest": list(np.argsort(-pvi, kind="stable")[:3])}
    assert [float(r[5]) for r in rows[:3]] == [round(float(pvi[i]), 2) for i in want["lowest"]]
    assert [float(r[5]) for r in rows[3:]] == [round(float(pvi[i]), 2)
                                              for i in want["highest"]]
    assert sorted(pvi)[:3] == [pvi[i] for i in want["lowest"]]
    assert sorted(pvi)[-3:][::-1] == [pvi[i] for i in want["highest"]]
    for row, side, i in [(r, "lowest", i) for r, i in zip(rows[:3], want["lowest"])] + \
            [(r, "highest", i) for r, i in zip(rows[3:], want["highest"])]:
        dataset, layer, seeds, shown_side, index, _, gold, predicted, text = row
        assert dataset == "A"
        assert (layer, seeds, shown_side, index) == ("1", "1, 2", side, str(i))
        assert gold == NAMES[first.gold[i]]
        assert predicted.split(" (")[0] in NAMES
        assert text == first.texts[i] or text.endswith("…")
    doc = json.loads((tmp_path / "rep" / "report.json").read_text(encoding="utf-8"))
    listed = doc["examples"]
    assert [e["index"] for e in listed if e["side"] == "lowest"] == [int(i) for i in
                                                                      want["lowest"]]
    assert [e["index"] for e in listed if e["side"] == "highest"] == [int(i) for i in
                                                                       want["highest"]]
    for e in listed:
        assert e["task"] == "toy:A" and e["layer"] == 1 and e["seeds"] == [1, 2]
        assert e["pvi"] == round(float(pvi[e["index"]]), 6)
        assert e["gold"] == NAMES[first.gold[e["index"]]]
        assert e["text"] == first.texts[e["index"]]
        votes = [int(preds[(1, s)].predicted[e["index"]]) for s in (1, 2)]
        assert e["predicted"] in {NAMES[v] for v in votes}
        assert e["predicted_votes"] == votes.count(NAMES.index(e["predicted"]))
    assert [e["rank"] for e in listed] == [1, 2, 3, 1, 2, 3]
    page = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    assert SECTION_TITLE in page and first.texts[int(want["lowest"][0])] in page


def test_select_orders_by_pvi_and_a_pipe_is_escaped_and_long_texts_cut(tmp_path):
    pvi = np.array([0.5, -1.0, 2.0, -1.0, 0.1])
    assert select(pvi, 2) == {"lowest": [1, 3], "highest": [2, 0]}
    path = tmp_path / "run.jsonl"
    _run(path)
    write_report([path], tmp_path / "rep", formats="md", examples=N)  # every example
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    rows = _md_rows(md)
    assert len(rows) == 2 * N and all(len(r) == 9 for r in rows)
    assert "a \\| pipe ‖ and a line break" in md
    long = [r[8] for r in rows if r[4] == "5"]
    assert long and all(len(t) == MAX_SHOWN and t.endswith("…") for t in long)


def test_seeds_tested_on_other_examples_use_the_first_seed(tmp_path):
    path = tmp_path / "run.jsonl"
    cells = [_cell(layer, 1) for layer in (0, 1, 2)] + \
        [_cell(layer, 2, gold_seed=8) for layer in (0, 1, 2)]
    _write(path, cells)
    content = build_report([path], examples=2)
    assert content.examples and all(e["seeds"] == [1] and e["seeds_left_out"] == [2]
                                    for e in content.examples)
    pvi = {(r.layer, r.seed): p for r, p in cells}[(1, 1)].pvi
    assert [e["pvi"] for e in content.examples if e["side"] == "lowest"] == \
        [round(float(v), 6) for v in np.sort(pvi)[:2]]
    from estratos.report.writers import to_markdown

    assert "| 1 (first) |" in to_markdown(content)


def test_cells_without_texts_or_log2p_get_a_notice_not_an_error(tmp_path):
    path = tmp_path / "run.jsonl"
    _run(path, texts=False)
    content = build_report([path], examples=2)
    assert content.examples == []
    assert all(s.title != SECTION_TITLE for s in content.sections)
    assert any("without the test examples' texts" in str(n) for n in content.notices)
    other = tmp_path / "bits.jsonl"
    _run(other, bits=False)
    content = build_report([other], examples=2)
    assert any("before the per-example log2-probabilities" in str(n)
               for n in content.notices)
    names = tmp_path / "names.jsonl"
    _run(names, names=False)
    content = build_report([names], examples=2)
    assert content.examples and content.examples[0]["gold"] in {"0", "1", "2"}
    assert any("without class names" in str(n) for n in content.notices)


def test_no_examples_option_no_section_and_no_json_key(tmp_path):
    path = tmp_path / "run.jsonl"
    _run(path)
    write_report([path], tmp_path / "a", formats="md,json,html")
    write_report([path], tmp_path / "b", formats="md,json,html", examples=1)
    md = (tmp_path / "a" / "report.md").read_text(encoding="utf-8")
    assert SECTION_TITLE not in md
    assert "examples" not in json.loads((tmp_path / "a" / "report.json").read_text("utf-8"))
    assert SECTION_TITLE not in (tmp_path / "a" / "report.html").read_text(encoding="utf-8")
    # with the option, the rest of the report is the same: only the section is added
    with_md = (tmp_path / "b" / "report.md").read_text(encoding="utf-8")
    head, tail = with_md.split(f"## {SECTION_TITLE}")
    rest = tail.split("\n## ", 1)
    assert (head + "## " + rest[1] if len(rest) == 2 else head.rstrip("\n") + "\n") == md


def test_cli_examples_option(tmp_path):
    path = tmp_path / "run.jsonl"
    _run(path)
    out = tmp_path / "rep"
    res = CliRunner().invoke(cli, ["report", str(path), "--out", str(out), "--examples", "2"])
    assert res.exit_code == 0, res.output
    assert f"## {SECTION_TITLE}" in (out / "report.md").read_text(encoding="utf-8")
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert len(doc["examples"]) == 4
    bad = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "x"),
                                   "--examples", "0"])
    assert bad.exit_code == 2 and not (tmp_path / "x").exists()
