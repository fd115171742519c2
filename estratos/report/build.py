"""``estratos report``: paper-style tables (and figures) from results files alone.

The report needs no cache, no model and no torch. It reads results JSON lines
(:mod:`estratos.results`), averages seeds
(:mod:`~estratos.report.aggregate`), lays out the tables
(:mod:`~estratos.report.tables`), optionally calibrates them by a baseline and
computes the EN-ES gap (:mod:`~estratos.report.odesia`), and writes Markdown, LaTeX, CSV,
JSON (:mod:`~estratos.report.writers`) and PNG figures
(:mod:`~estratos.report.plots`).

Everything is computed and rendered in memory before the first file is written, and each
file is written atomically, so a failing report leaves no half-written output.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from estratos.errors import OptionError, ResultsError
from estratos.files import write_atomic
from estratos.outputs import check_output_folder
from estratos.registry import unknown_name
from estratos.report import odesia
from estratos.report.aggregate import Aggregate, Stat, aggregate, layer_label
from estratos.report.erasure import INTRO as ERASURE_INTRO
from estratos.report.erasure import SECTION_TITLE as ERASURE_TITLE
from estratos.report.erasure import erasure_tables
from estratos.report.examples import example_section
from estratos.report.html import to_html
from estratos.report.information import (
    CONDITIONAL_INTRO,
    CONDITIONAL_TITLE,
    conditional_tables,
    information_tables,
)
from estratos.report.information import INTRO as INFORMATION_INTRO
from estratos.report.information import SECTION_TITLE as INFORMATION_TITLE
from estratos.report.intervals import Applied, StatsOptions, correction_text
from estratos.report.intervals import apply as apply_stats
from estratos.report.similarity import similarity_figures, similarity_sections
from estratos.report.surface import SURFACE_INTRO, surface_tables
from estratos.report.tables import Cell, Footnotes, Table, dataset_tables, group_table, layer_tables
from estratos.report.writers import DELTA_LEGEND, UNDEFINED, WRITERS, ReportContent, Section
from estratos.results import LoadedResults, Located, Notice, expand_paths, load_results
from estratos.results.provenance import check_copies, data_builds, describe_builds
from estratos.results.similarity import read_maps
from estratos.vocab import RANDOM_INIT_PREFIX

log = logging.getLogger(__name__)

#: format name -> writer; ``html`` lays the same tables out with the figures (report/html.py)
FORMAT_WRITERS = {**WRITERS, "html": lambda content: {"report.html": to_html(content)}}
FORMATS: Tuple[str, ...] = tuple(FORMAT_WRITERS)
PathLike = Union[str, os.PathLike]


def parse_formats(formats: Union[str, Sequence[str]]) -> Tuple[str, ...]:
    """'md,latex' or ['md', 'latex'] -> ('md', 'latex'); unknown names name ``--format``."""
    items = formats.split(",") if isinstance(formats, str) else list(formats)
    names = [f.strip().lower() for f in items if f.strip()]
    unknown = [n for n in names if n not in FORMATS]
    if unknown or not names:
        raise unknown_name("format", unknown[0] if unknown else "", FORMATS, "--format")
    return tuple(dict.fromkeys(names))


@dataclass
class ReportSummary:
    """What :func:`write_report` did: the files written and what the reader must know."""

    out: Path
    files: List[Path] = field(default_factory=list)
    notices: List[Notice] = field(default_factory=list)
    n_records: int = 0
    n_rows: int = 0
    n_datasets: int = 0

    def describe(self) -> str:
        """One line per file written, then a count (what the CLI prints)."""
        lines = [f"wrote {path}" for path in self.files]
        lines.append(f"report of {self.n_records} cells ({self.n_rows} rows x "
                     f"{self.n_datasets} datasets) in {self.out}"
                     + (f"; {len(self.notices)} notice(s), see the report" if self.notices
                        else ""))
        return "\n".join(lines)


def _unique_paths(paths: Sequence[PathLike]) -> List[str]:
    seen: Dict[str, str] = {}
    for p in paths:
        seen.setdefault(os.path.realpath(p), os.fspath(p))
    return list(seen.values())


def _rule_text(reference: odesia.Reference) -> str:
    if reference == "auto":
        return "upper bound when b >= the midpoint of its range, else its lower bound"
    if isinstance(reference, str):
        return f"{reference} bound"
    return f"fixed reference point r = {reference:g} (--reference)"


def _delta_sections(agg: Aggregate, calib: Dict[str, odesia.Calibration],
                    dagg: Aggregate, notes: Footnotes, baseline_label: str,
                    reference: odesia.Reference) -> List[Section]:
    """Delta versions of the group and per-dataset tables."""

    def group_cell(row, group) -> Cell:
        stat = dagg.group_cell(row, group)
        return Cell(stat=stat, partial=bool(stat and stat.partial))

    def dataset_cell(row, ds) -> Cell:
        cal = calib.get(ds.task)
        has_score = (row, ds.task) in agg.seeds
        if cal is None:
            return Cell(notes=(notes.number(f"{ds.task}: no baseline result, so no Delta"),)
                        if has_score else ())
        if cal.undefined:
            return Cell(undefined=has_score, notes=(
                notes.number(f"{ds.task}: Delta undefined: {cal.undefined}"),)
                if has_score else ())
        return Cell(stat=dagg.cell(row, ds.task))

    # rows whose every Delta is undefined still belong in the per-dataset tables
    shown = Aggregate(dagg.rows, dagg.datasets, dagg.groups,
                      {k: v for k, v in agg.seeds.items() if k[0].system.kind != "baseline"})
    intro = DELTA_LEGEND.format(baseline=baseline_label, rule=_rule_text(reference),
                                undefined=UNDEFINED)
    tables = [group_table(dagg, notes, cell_fn=group_cell, key="delta-groups",
                          title="Delta vs baseline: groups")]
    tables += dataset_tables(shown, notes, cell_fn=dataset_cell, key="delta-datasets",
                             title="Delta vs baseline")
    return [Section("Delta vs baseline (ODESIA)", tables, intro, in_score_files=True)]


def _gap_table(gap: odesia.Gap, notes: Footnotes) -> Table:
    header = ["Model", "Pooling", "Layer", "Seeds"] + [p.name for p in gap.pairs]
    note_of = {p.name: tuple(notes.number(n) for n in gap.notes if n.startswith(p.name + ":"))
               for p in gap.pairs}
    header_notes = [()] * 4 + [note_of[p.name] for p in gap.pairs]
    rows = []
    for row in list(gap.rows) + [None]:
        cells_here = [gap.cells.get((row, p.name)) for p in gap.pairs]
        if row is None and not any(cells_here):
            continue
        counts = sorted({n for c in cells_here if c for n in (c.n_en, c.n_es)}) or [0]
        seeds = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        label = [Cell(row.system.label), Cell(row.system.pooling or "n/a"),
                 Cell(layer_label(row.layer))] if row is not None else [
                     Cell("best of each language"), Cell(""), Cell("")]
        values = []
        for c in cells_here:
            if c is None or c.ind is None:
                values.append(Cell())
            else:
                values.append(Cell(stat=Stat(c.ind, None, min(c.n_en, c.n_es))))
        rows.append(label + [Cell(seeds)] + values)
    return Table("gap", "EN-ES gap: Ind = Delta_EN - Delta_ES", header, header_notes, rows,
                 caption="per pair of datasets; the last row pairs the best Delta of each "
                         "language")


def _control_sections(agg: Aggregate, records: Sequence[Located],
                      control: Sequence[PathLike], notes: Footnotes,
                      stats: Optional[StatsOptions]) -> List[Section]:
    """The "Controls" section: selectivity, MDL, control-model comparisons (each present
    only when the results allow it)."""
    from estratos.report import controls as ctl

    out = []
    tables = ctl.selectivity_tables(agg)
    if tables:
        out.append(Section("Controls: selectivity", tables, ctl.SELECTIVITY_INTRO))
    tables = ctl.mdl_tables(agg)
    if tables:
        out.append(Section("Controls: MDL compression", tables, ctl.MDL_INTRO))
    if control:
        kw: Dict[str, Any] = {} if stats is None else {
            "resamples": stats.resamples, "level": stats.level, "seed": stats.seed}
        tables = ctl.control_model_tables(agg, records, [os.fspath(p) for p in control], notes,
                                          **kw)
        if not tables:
            named = ", ".join(os.fspath(p) for p in control)
            raise OptionError(f"--control: no cell of {named} "
                              "matches a layer of the other results (same pooling, "
                              "classifier and task)")
        level = kw.get("level", ctl.DEFAULT_LEVEL)
        resamples = kw.get("resamples", ctl.DEFAULT_RESAMPLES)
        intro = ctl.CONTROL_INTRO.format(
            control=", ".join(f"`{os.fspath(p)}`" for p in control), level=100 * level,
            resamples=resamples)
        wanted = {os.path.realpath(p) for p in control}
        revisions = {loc.record.revision for loc in records
                     if os.path.realpath(loc.path) in wanted}
        if not any(str(r or "").startswith(RANDOM_INIT_PREFIX) for r in revisions):
            named = ", ".join(os.fspath(p) for p in control)
            warning = (f"--control: {named} holds no random-init control model (its cells' "
                       f"revision is {', '.join(sorted(str(r) for r in revisions))}, not "
                       f"{RANDOM_INIT_PREFIX}SEED from `estratos encode --random-init SEED`): "
                       "this section compares two models, not a model and its control")
            log.warning("%s", warning)
            intro = f"**Note:** {warning}.\n\n{intro}"
        out.append(Section("Controls: control model", tables, intro))
    return out


def build_report(results: Sequence[PathLike] = (), *, baseline: Sequence[PathLike] = (),
                 gap: Optional[Tuple[PathLike, PathLike]] = None,
                 pairs: Optional[PathLike] = None,
                 reference: odesia.Reference = "auto",
                 stats: Optional[StatsOptions] = None,
                 control: Sequence[PathLike] = (),
                 similarity: Sequence[PathLike] = (),
                 examples: Optional[int] = None) -> ReportContent:
    """Load results and compute every table of a report (nothing is written).

    ``baseline`` files (of ``estratos baseline``) add Delta tables; ``gap=(EN, ES)`` adds
    Ind(EN, ES) over the dataset ``pairs`` (default: the shipped pairs file). All files,
    including the baseline and gap ones, also appear in the score tables. ``stats`` adds
    bootstrap intervals and/or significance marks from the stored predictions
    (:mod:`estratos.report.intervals`). ``control`` files hold a control model's results
    (e.g. ``encode --random-init``): they join the tables and curves, and a "Controls"
    section compares them layer by layer (:mod:`estratos.report.controls`), which also shows
    selectivity (control-label cells) and MDL compression when the results have them.
    ``similarity`` files (of ``estratos similarity`` / ``geometry``) add their sections
    (:mod:`estratos.report.similarity`); with them, RESULTS may be empty. ``examples`` = N
    adds the N lowest- and N highest-PVI test examples of each task's best layer
    (:mod:`estratos.report.examples`) and report.json's ``examples``.
    """
    reference = odesia.parse_reference(reference)
    if examples is not None and (isinstance(examples, bool) or not isinstance(examples, int)
                                 or examples < 1):
        raise OptionError(f"--examples: must be a positive integer, got {examples!r}")
    paths = _unique_paths(expand_paths(list(results)) + list(baseline) + list(gap or ())
                          + list(control))
    maps = _similarity_records(similarity)
    if not paths and maps is not None:
        return ReportContent(_unique_paths(expand_paths(list(similarity))), [], aggregate([]),
                             similarity_sections(maps), Footnotes(), maps=maps)
    if not paths:
        raise OptionError("give at least one RESULTS file (or --gap EN ES, or --similarity)")
    loaded = _load_checked(paths, baseline)
    agg = aggregate(loaded.records)
    builds = _build_notices(loaded)
    notes = Footnotes()
    applied = Applied() if stats is None or not stats.active \
        else apply_stats(agg, loaded.records, stats)
    intervals, marks = applied.intervals, applied.marks
    sections = _score_sections(agg, notes, intervals, marks, stats, applied.information)
    listed: Optional[List[Dict[str, Any]]] = None
    example_notices: List[Notice] = []
    if examples is not None:
        section, listed, example_notices = example_section(agg, loaded.records, examples)
        if section is not None:  # right after the V-information section
            at = next((i + 1 for i, s in enumerate(sections) if s.title == INFORMATION_TITLE),
                      len(sections))
            sections.insert(at, section)
    sections += _control_sections(agg, loaded.records, control, notes, stats)
    content = ReportContent(loaded.sources,
                            loaded.notices + builds + applied.notices + example_notices, agg,
                            sections,
                            notes, reference=reference, intervals=intervals, marks=marks,
                            information_intervals=applied.information, examples=listed)
    base_scores = odesia.baseline_scores(agg) if (baseline or gap) else {}
    if baseline:
        _add_delta(content, baseline, base_scores)
    if gap:
        _add_gap(content, gap, pairs, base_scores)
    if maps is not None:
        sections += similarity_sections(maps)
        content.maps = maps
        content.sources += _unique_paths(expand_paths(list(similarity)))
    return content


def _load_checked(paths: Sequence[str], baseline: Sequence[PathLike]) -> LoadedResults:
    """The records of ``paths``, refused before any table is computed when a ``--baseline``
    file holds a probe cell, when there is nothing to report, or when one cell comes from
    vectors of other encode settings in two files (:func:`check_copies`)."""
    loaded: LoadedResults = load_results(paths)
    baseline_paths = {os.path.realpath(p) for p in baseline}
    for rec in loaded.records:
        if os.path.realpath(rec.path) in baseline_paths and rec.record.kind != "baseline":
            raise ResultsError(f"{rec.path}:{rec.line}: --baseline files may hold only "
                               f"baseline results (kind \"baseline\"), found kind "
                               f"{rec.record.kind!r}")
    if not loaded.records:
        raise ResultsError(f"no results to report in {', '.join(paths)}")
    check_copies(loaded.copies)  # one cell from vectors of other encode settings: refused
    return loaded


def _build_notices(loaded: LoadedResults) -> List[Notice]:
    """A notice (also logged) for each task whose cells were computed on different builds
    of its data: the report shows them side by side, but the reader must know their scores
    are not comparable."""
    builds = [Notice("report", None, describe_builds(task, found) + "; their scores are "
                     "not comparable and are shown side by side only with this notice")
              for task, found in data_builds(loaded.records).items()]
    for notice in builds:
        log.warning("%s", notice)
    return builds


def _stats_caption(stats: Optional[StatsOptions]) -> str:
    """The caption that says what the intervals and significance marks of ``stats`` are
    (empty without them)."""
    ci_caption = (f"[lo, hi] = {100 * stats.level:g}% percentile bootstrap interval over test "
                  f"examples ({stats.resamples} resamples)") if stats and stats.ci else ""
    mark_caption = correction_text(stats.significance, stats.alpha, stats.resamples) \
        if stats and stats.significance else ""
    return ". ".join(c for c in (ci_caption, mark_caption) if c)


def _score_sections(agg: Aggregate, notes: Footnotes, intervals: Dict[Any, Any],
                    marks: Dict[Any, Any], stats: Optional[StatsOptions],
                    information: Optional[Dict[Any, Any]] = None) -> List[Section]:
    """The score sections every report has (group averages, per dataset), then those the
    results allow (per layer, V-information, surface baselines); the per-dataset and
    per-layer cells carry their bootstrap ``intervals`` and the not-worse-than-the-best
    ``marks``, the V-information cells their own ``information`` intervals."""

    def decorate(row, task, cell):
        ci = intervals.get((row, task))
        mark = marks.get((row, task))
        return dataclasses.replace(
            cell, ci=None if ci is None or ci.lo is None else (ci.lo, ci.hi),
            not_worse=bool(mark and mark.not_worse and not mark.best))

    stats_caption = _stats_caption(stats)
    sections = [Section("Group averages", [group_table(agg, notes)], in_score_files=True),
                Section("Per dataset", dataset_tables(agg, notes, title="Datasets",
                                                      decorate=decorate, caption=stats_caption),
                        in_score_files=True)]
    layers = layer_tables(agg, notes, decorate=decorate, caption=stats_caption)
    if layers:
        sections.append(Section("Per layer", layers))
    if agg.information:  # only results that record it: older reports stay as they were
        ci_caption = (f"[lo, hi] = {100 * stats.level:g}% percentile bootstrap interval over "
                      f"test examples of the mean pointwise V-information ({stats.resamples} "
                      "resamples; none where the predictions hold no log2-probabilities)"
                      ) if stats and stats.ci else ""
        bits = information_tables(agg, information or {}, ci_caption)
        if bits:
            sections.append(Section(INFORMATION_TITLE, bits, INFORMATION_INTRO))
        gains = conditional_tables(agg, information or {}, ci_caption.replace(
            "pointwise V-information", "pointwise gain"))
        if gains:
            sections.append(Section(CONDITIONAL_TITLE, gains, CONDITIONAL_INTRO))
    erased = erasure_tables(agg)
    if erased:
        sections.append(Section(ERASURE_TITLE, erased, ERASURE_INTRO))
    surface = surface_tables(agg)
    if surface:
        sections.append(Section("Surface baselines", surface, SURFACE_INTRO))
    return sections


def _add_delta(content: ReportContent, baseline: Sequence[PathLike],
               base_scores: Dict[str, Any]) -> None:
    """``--baseline``: each cell calibrated by its dataset's baseline (ODESIA's Delta), kept
    in ``content`` and shown as a section; refused when the files hold no baseline cell."""
    if not base_scores:
        raise ResultsError(f"--baseline: no baseline results in {', '.join(map(str, baseline))}"
                           " (make them with `estratos baseline`)")
    agg, reference = content.agg, content.reference
    content.calib = odesia.calibrations(agg, base_scores, reference)
    content.delta = odesia.delta_aggregate(agg, content.calib)
    labels = sorted({r.system.label for r in odesia.delta_baselines(agg).values()})
    content.sections += _delta_sections(agg, content.calib, content.delta, content.footnotes,
                                        ", ".join(labels), reference)


def _add_gap(content: ReportContent, gap: Tuple[PathLike, PathLike],
             pairs: Optional[PathLike], base_scores: Dict[str, Any]) -> None:
    """``--gap EN ES``: ODESIA's Ind over the dataset ``pairs``, both sides calibrated by
    the baselines, kept in ``content`` and shown as a section; refused when a side has no
    baseline."""
    reference = content.reference
    pair_list = odesia.load_pairs(pairs)
    en, es = (aggregate(load_results([p]).records) for p in gap)
    calib_en = odesia.calibrations(en, base_scores, reference)
    calib_es = odesia.calibrations(es, base_scores, reference)
    if not calib_en or not calib_es:
        side = "EN" if not calib_en else "ES"
        raise ResultsError(f"--gap: no baseline results for the {side} datasets; add them "
                           "with --baseline (from `estratos baseline`) or in the results")
    content.gap = odesia.compute_gap(en, es, pair_list, calib_en, calib_es)
    content.sections.append(Section("EN-ES gap (ODESIA Ind)",
                                    [_gap_table(content.gap, content.footnotes)],
                                    f"EN: `{os.fspath(gap[0])}`, ES: `{os.fspath(gap[1])}`.",
                                    in_score_files=True))


def _similarity_records(similarity: Sequence[PathLike]) -> Optional[list]:
    """The records of ``--similarity`` files (None when none is given; an error when
    they hold none)."""
    if not similarity:
        return None
    files = expand_paths(list(similarity))
    records = read_maps(files)
    if not records:
        raise ResultsError(f"--similarity: no records in {', '.join(map(str, files))} (make "
                           "them with `estratos similarity` or `estratos geometry`)")
    return records


def write_report(results: Sequence[PathLike], out: PathLike, *,
                 formats: Union[str, Sequence[str]] = FORMATS, plot: bool = False,
                 baseline: Sequence[PathLike] = (),
                 gap: Optional[Tuple[PathLike, PathLike]] = None,
                 pairs: Optional[PathLike] = None,
                 reference: odesia.Reference = "auto",
                 stats: Optional[StatsOptions] = None,
                 control: Sequence[PathLike] = (),
                 similarity: Sequence[PathLike] = (),
                 examples: Optional[int] = None) -> ReportSummary:
    """Build a report and write it to the folder ``out`` (see :func:`build_report`).

    Files: report.md, report.tex, groups.csv + datasets.csv (+ gap.csv), report.json,
    report.html, and with ``plot`` PNG figures under ``out/plots`` (needs the ``plot``
    extra), which report.html then embeds. ``examples`` = N: see :func:`build_report`.
    """
    fmts = parse_formats(formats)
    out_dir = Path(out)
    check_output_folder(out_dir)  # before any reading: one Error line, nothing written
    if plot:
        from estratos.report.plots import require_matplotlib

        require_matplotlib()
    content = build_report(results, baseline=baseline, gap=gap, pairs=pairs,
                           reference=reference, stats=stats, control=control,
                           similarity=similarity, examples=examples)
    if plot:
        from estratos.report.plots import render_figures

        content.figures = render_figures(content.agg)
        if content.maps:
            content.figures += similarity_figures(content.maps)
    rendered: Dict[str, str] = {}
    for fmt in fmts:
        rendered.update(FORMAT_WRITERS[fmt](content))
    summary = ReportSummary(out_dir, notices=list(content.notices),
                            n_records=sum(len(v) for v in content.agg.seeds.values()),
                            n_rows=len(content.agg.rows), n_datasets=len(content.agg.datasets))
    for name, text in rendered.items():
        write_atomic(out_dir / name, text)
        summary.files.append(out_dir / name)
    if plot:
        from estratos.report.plots import write_figures

        summary.files += write_figures(content.figures, out_dir / "plots")
    log.info("report of %d cells written to %s", summary.n_records, out_dir)
    return summary
