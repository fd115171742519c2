"""Per-layer figures: task x layer heatmaps and per-group score-vs-layer curves.

matplotlib is an optional extra (``pip install "estratos[plot]"``); :func:`require_matplotlib`
is called before anything is written so a missing extra fails cleanly. Figures are drawn
with matplotlib's object API on an Agg canvas (no pyplot), so plotting changes no global
state and needs no display. :func:`render_figures` draws every figure in memory (PNG bytes):
``--plot`` writes them under ``plots/`` and the HTML report embeds the same bytes.

What a reader must be able to trust in each figure (docs/report.md):
- heatmaps: one panel and one colour bar per metric (accuracy and Pearson never share a
  scale), the value written in each cell, the ``avg`` column after the layers, model, pooling
  and classifier in the title; a second version standardizes each task across its layers
  (z-scores, as DiscoEval's per-layer figure), so the figure shows *where* each task peaks;
- layer curves: the mean over seeds with a band of +- one sample std, the ``avg`` point after
  the last layer, the level a probe must beat (majority class / 1/K / no correlation) and
  any baseline as horizontal lines, the metric on the y axis over its full range.
"""

from __future__ import annotations

import io
import logging
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from estratos.errors import EstratosError
from estratos.files import write_atomic
from estratos.report.aggregate import Aggregate, Dataset, Row, Stat, System, layer_label
from estratos.vocab import AVG, RAW_FEATURES

log = logging.getLogger(__name__)

INSTALL_HINT = 'pip install "estratos[plot]"'

#: how each metric is named on an axis or colour bar (the paper's scale)
METRIC_LABELS: Dict[str, str] = {"accuracy": "accuracy (%)", "f1": "F1 (%)",
                                 "pearson": "Pearson r x100", "spearman": "Spearman rho x100"}
DPI = 110


@dataclass(frozen=True)
class RenderedFigure:
    """One figure drawn in memory: its file name under ``plots/``, a caption, PNG bytes."""

    name: str
    caption: str
    png: bytes


def require_matplotlib() -> Any:
    """The matplotlib classes plotting needs, or an EstratosError naming the extra."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise EstratosError(f"--plot needs matplotlib, which is not installed ({exc}); "
                            f"install the optional extra: {INSTALL_HINT}") from None
    return Figure, FigureCanvasAgg


def _cmap(name: str) -> Any:
    """A copy of a colour map whose missing cells are light grey."""
    from matplotlib import colormaps

    return colormaps[name].with_extremes(bad="0.92")


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric)


def metric_y_range(metrics: Sequence[str], lowest: float) -> Tuple[float, float]:
    """The y range of a curve panel: 0-100 (percentages, and correlations while all are >=
    0); a correlation below 0 extends the range down to the next multiple of 10."""
    if any(m in ("pearson", "spearman") for m in metrics) and lowest < 0:
        return max(-100.0, 10.0 * math.floor(lowest / 10.0)), 100.0
    return 0.0, 100.0


def curve_y_range(metrics: Sequence[str], lowest: float, highest: float,
                  floor: Optional[float] = None) -> Tuple[float, float]:
    """The y range of a curve panel, fitted to what it draws: the lowest and highest point
    (bands included) and the floor line, with a margin of 8% of that span (at least one
    point), kept within the metric's bounds (0-100; correlations from -100). A fixed 0-100
    axis flattens the 2-10 point differences between layers that the figure is for."""
    lo, hi = lowest, highest
    if floor is not None:
        lo, hi = min(lo, floor), max(hi, floor)
    pad = max(0.08 * (hi - lo), 1.0)
    bottom = -100.0 if any(m in ("pearson", "spearman") for m in metrics) else 0.0
    return max(bottom, lo - pad), min(100.0, hi + pad)


# --------------------------------------------------------------------------- data

def _layer_rows(agg: Aggregate, system: System) -> List[Row]:
    """The system's rows as plotted: layers 0..L, then ``avg``."""
    return [r for r in agg.layers_of(system) if r.layer is not None]


def score_matrix(agg: Aggregate, system: System, datasets: Optional[Sequence[Dataset]] = None
                 ) -> Tuple[List[Dataset], List[str], np.ndarray, np.ndarray]:
    """(datasets, layer labels incl. ``avg``, mean scores with NaN where there is none,
    mask of undefined cells) for one system."""
    rows = _layer_rows(agg, system)
    if datasets is None:
        datasets = [d for d in agg.datasets if any(agg.has_cell(r, d.task) for r in rows)]
    matrix = np.full((len(datasets), len(rows)), np.nan)
    undefined = np.zeros(matrix.shape, dtype=bool)
    for i, ds in enumerate(datasets):
        for j, row in enumerate(rows):
            stat = agg.cell(row, ds.task)
            if stat is not None:
                matrix[i, j] = stat.mean
            undefined[i, j] = agg.is_undefined(row, ds.task)
    return list(datasets), [layer_label(r.layer) for r in rows], matrix, undefined


def standardize_rows(matrix: np.ndarray, reference: Optional[np.ndarray] = None) -> np.ndarray:
    """Each task (row) as z-scores; mean and std come from the ``reference`` columns (default
    all), so the ``avg`` column is placed on its layers' scale; constant rows become 0."""
    ref = matrix if reference is None else matrix[:, reference]
    with warnings.catch_warnings():  # a task with no score at any layer stays all-NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(ref, axis=1, keepdims=True) if ref.size else np.zeros((len(matrix), 1))
        std = np.nanstd(ref, axis=1, keepdims=True) if ref.size else np.ones((len(matrix), 1))
    std[~(std > 0)] = 1.0
    return (matrix - mean) / std


def system_file_part(system: System) -> str:
    """'org-beto-r1_cls-pooling_senteval-classifier': what a figure of the system shows."""
    def clean(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")
    parts = [clean(system.label)[:80] or "model"]
    if system.pooling:
        parts.append(f"{clean(system.pooling)}-pooling")
    if system.classifier:
        parts.append(f"{clean(system.classifier)}-classifier")
    if system.features:
        parts.append(f"{clean(system.features)}-features")
    if system.control:
        parts.append(clean(system.control))
    return "_".join(parts)


def system_title(system: System, name: str) -> str:
    """'NAME, mean pooling, senteval classifier, raw features': ``name`` is the report's
    display name of the model (:meth:`Aggregate.name`); the full identity goes into the
    figure's caption."""
    pooling = f", {system.pooling} pooling" if system.pooling else ""
    clf = f", {system.classifier} classifier" if system.classifier else ""
    features = f", {system.features} features" if system.features else ""
    return f"{name}{pooling}{clf}{features}"


# --------------------------------------------------------------------------- drawing

def _png(fig, canvas_cls) -> bytes:
    canvas_cls(fig)  # attach an Agg canvas: no pyplot, no display
    buf = io.BytesIO()
    # "tight": the saved image grows to hold every legend and label, so none is cut at an edge
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.08)
    return buf.getvalue()


def one_class_mask(agg: Aggregate, system: System, datasets: Sequence[Dataset]) -> np.ndarray:
    """(datasets x layer specs) True where every seed predicted one class (degenerate)."""
    rows = _layer_rows(agg, system)
    mask = np.zeros((len(datasets), len(rows)), dtype=bool)
    for i, ds in enumerate(datasets):
        for j, row in enumerate(rows):
            k, n = agg.degenerate_seeds(row, ds.task)
            mask[i, j] = n > 0 and k == n
    return mask


def _annotate(ax, image, shown: np.ndarray, undefined: np.ndarray, fmt: str,
              one_class: Optional[np.ndarray] = None) -> None:
    """Write each cell's value ('—' none, 'undef.' undefined) readable on its background;
    a cell whose seeds all predicted one class is hatched and says "1 class" (its number
    is a class rate, not a score)."""
    for i in range(shown.shape[0]):
        for j in range(shown.shape[1]):
            value = shown[i, j]
            if np.isnan(value):  # no result, or an undefined score (e.g. constant cosines)
                ax.text(j, i, "undef." if undefined[i, j] else "—", ha="center",
                        va="center", fontsize=6, color="0.35")
                continue
            if one_class is not None and one_class[i, j]:
                from matplotlib.patches import Rectangle

                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="white",
                                       edgecolor="0.5", hatch="///", linewidth=0))
                ax.text(j, i, f"{format(value, fmt)}\n1 class", ha="center", va="center",
                        fontsize=6, color="0.2", style="italic")
                continue
            r, g, b, _ = image.cmap(image.norm(value))
            dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
            ax.text(j, i, format(value, fmt), ha="center", va="center", fontsize=7,
                    color="white" if dark else "black")


def _heatmap_axes(ax, labels: List[str], layers: List[str]) -> None:
    ax.set_xticks(range(len(layers)), labels=layers)
    ax.set_yticks(range(len(labels)), labels=labels)
    if "avg" in layers:  # the avg column is not a layer: set it apart
        ax.axvline(layers.index("avg") - 0.5, color="white", linewidth=3)
    ax.tick_params(labelsize=7)


def _heat_size(n_cols: int, n_rows: int, n_panels: int) -> Tuple[float, float]:
    return (max(5.0, 2.8 + 0.5 * n_cols), max(2.6, 1.1 + 0.32 * n_rows + 0.55 * n_panels))


def colour_range(metric: str, values: np.ndarray, floors: Sequence[float]
                 ) -> Tuple[float, float, str]:
    """(low, high, what) of a heatmap panel's colour scale.

    Anchored, not stretched over the values: a 2-point spread must not fill the whole colour
    range. The top is the metric's best (100); the bottom is the lowest floor a probe must
    beat among the panel's tasks (majority-class rate; 0 for correlations) or the lowest
    value when one lies below it. Without known floors, the metric's lower bound (0).
    """
    finite = values[np.isfinite(values)]
    lowest = float(finite.min()) if finite.size else 0.0
    if metric in ("pearson", "spearman"):
        low, what = 0.0, "r = 0"
    elif floors:
        low, what = float(min(floors)), "lowest majority-class floor"
    else:
        low, what = 0.0, "0"
    if lowest < low:
        low, what = lowest, "lowest value"
    if metric in ("pearson", "spearman"):
        low = metric_y_range([metric], low)[0] if low < 0 else low
    return low, 100.0, what


def heatmap_plot(agg: Aggregate, system: System) -> Any:
    """Mean score per task x layer spec, one panel and colour bar per metric (a matplotlib
    Figure, or None when the system has no per-layer results)."""
    Figure, _ = require_matplotlib()
    datasets, layers, matrix, undefined = score_matrix(agg, system)
    if matrix.size == 0:
        return None
    metrics = list(dict.fromkeys(d.metric for d in datasets))
    panels = [[i for i, d in enumerate(datasets) if d.metric == m] for m in metrics]
    one_class = one_class_mask(agg, system, datasets)
    fig = Figure(figsize=_heat_size(len(layers), len(datasets), len(panels)))
    grid = fig.add_gridspec(len(panels), 1, height_ratios=[max(len(p), 2) + 0.6 for p in panels])
    for k, (metric, idx) in enumerate(zip(metrics, panels)):
        ax = fig.add_subplot(grid[k, 0])
        values = matrix[idx]
        floors = [c[0] for i in idx if (c := datasets[i].chance) is not None]
        low, high, what = colour_range(metric, values, floors)
        image = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap=_cmap("viridis"),
                          vmin=low, vmax=high)
        _heatmap_axes(ax, [datasets[i].label for i in idx], layers)
        _annotate(ax, image, values, undefined[idx], ".1f", one_class[idx])
        # the metric and the colour scale's anchors in the panel title; the colour bar has
        # no label of its own (stacked panels' vertical labels ran into each other)
        ax.set_title(f"{metric_label(metric)}; colours from {low:.1f} ({what}) to "
                     f"{high:.0f}", fontsize=8, loc="left")
        fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02).ax.tick_params(labelsize=6)
        if k == len(panels) - 1:
            ax.set_xlabel("layer (0 = embeddings; avg = mean of all hidden states)", fontsize=7)
    fig.suptitle(f"{system_title(system, agg.name(system))}\nmean test score over seeds per "
                 "layer", fontsize=9)
    fig.tight_layout()
    return fig


def zscore_plot(agg: Aggregate, system: System) -> Any:
    """Each task standardized across its layers: where each task peaks, whatever its metric
    (a matplotlib Figure, or None)."""
    Figure, _ = require_matplotlib()
    datasets, layers, matrix, undefined = score_matrix(agg, system)
    layer_cols = np.array([label != "avg" for label in layers], dtype=bool)
    if matrix.size == 0 or layer_cols.sum() < 2:
        return None  # a z-score across one layer says nothing (its spread is 0)
    shown = standardize_rows(matrix, layer_cols)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        flat = ~(np.nanstd(matrix[:, layer_cols], axis=1) > 0)
    # a task whose layers do not differ has no scale to place its avg on: left blank
    shown[np.ix_(flat, ~layer_cols)] = np.nan
    bound = max(1.0, float(np.nanmax(np.abs(shown))) if np.isfinite(shown).any() else 1.0)
    fig = Figure(figsize=_heat_size(len(layers), len(datasets), 1))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(np.ma.masked_invalid(shown), aspect="auto", cmap=_cmap("coolwarm"),
                      vmin=-bound, vmax=bound)
    # a z-score makes any spread look as large as any other: each task's label says how many
    # points its layers actually span
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        spans = np.nanmax(matrix[:, layer_cols], axis=1) - np.nanmin(matrix[:, layer_cols],
                                                                     axis=1)
    labels = [d.label if not np.isfinite(span) else f"{d.label} (spread {span:.1f})"
              for d, span in zip(datasets, spans)]
    _heatmap_axes(ax, labels, layers)
    _annotate(ax, image, shown, undefined, ".1f", one_class_mask(agg, system, datasets))
    return _finish_layer_heatmap(
        fig, ax, image, "z-score across the task's layers",
        f"{system_title(system, agg.name(system))}\neach task's score as a z-score across its "
        "layers (spread = max - min over layers, in points)")


def information_matrix(agg: Aggregate, system: System
                       ) -> Tuple[List[Dataset], List[str], np.ndarray]:
    """(datasets with some V-information, layer labels incl. ``avg``, mean V-information in
    bits over seeds with NaN where there is none) for one system."""
    rows = _layer_rows(agg, system)
    datasets = [d for d in agg.datasets
                if any(agg.information_cell(r, d.task) is not None for r in rows)]
    matrix = np.full((len(datasets), len(rows)), np.nan)
    for i, ds in enumerate(datasets):
        for j, row in enumerate(rows):
            stat = agg.information_cell(row, ds.task)
            if stat is not None:
                matrix[i, j] = stat.mean
    return datasets, [layer_label(r.layer) for r in rows], matrix


def information_heatmap(agg: Aggregate, system: System) -> Any:
    """Mean V-information (bits) per task x layer spec, on one diverging colour scale
    centred on 0 (above: bits the probe gains over the class prior; below: worse than the
    prior, drawn as such, never clipped). A matplotlib Figure, or None when the system's
    results record no ``information``."""
    Figure, _ = require_matplotlib()
    datasets, layers, matrix = information_matrix(agg, system)
    if matrix.size == 0 or not np.isfinite(matrix).any():
        return None
    bound = max(float(np.nanmax(np.abs(matrix))), 1e-3)
    fig = Figure(figsize=_heat_size(len(layers), len(datasets), 1))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(np.ma.masked_invalid(matrix), aspect="auto", cmap=_cmap("RdBu_r"),
                      vmin=-bound, vmax=bound)
    _heatmap_axes(ax, [d.label for d in datasets], layers)
    _annotate(ax, image, matrix, np.zeros(matrix.shape, dtype=bool), ".2f",
              one_class_mask(agg, system, datasets))
    return _finish_layer_heatmap(
        fig, ax, image, "bits (0 = no better than the class prior)",
        f"{system_title(system, agg.name(system))}\nV-information H(Y|0) - H(Y|X) in bits, "
        "mean over seeds per layer")


def _finish_layer_heatmap(fig: Any, ax: Any, image: Any, bar_label: str, title: str) -> Any:
    """A one-panel task x layer heatmap's layer axis label, labelled colour bar and title."""
    ax.set_xlabel("layer (0 = embeddings; avg = mean of all hidden states)", fontsize=7)
    bar = fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    bar.set_label(bar_label, fontsize=7)
    bar.ax.tick_params(labelsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def compression_plot(agg: Aggregate, system: System) -> Any:
    """MDL compression vs layer, one line per task, mean over seeds with a +- 1 std band, the
    ``avg`` spec as a diamond after the last layer: over the uniform code (left) and over
    the labels-only floor (right, when recorded). A matplotlib Figure, or None without MDL
    results."""
    Figure, _ = require_matplotlib()
    rows = _layer_rows(agg, system)
    last = max((r.layer for r in rows if isinstance(r.layer, int)), default=-1)
    panels = []
    for over_floor, label, line in ((False, "compression (uniform / online bits)",
                                     "uniform code (1)"),
                                    (True, "over the floor (labels-only / online bits)",
                                     "labels alone (1 = no information)")):
        lines = []
        for ds in agg.datasets:
            points = [(r.layer, st) for r in rows
                      if (st := agg.mdl_cell(r, ds.task, over_floor)) is not None]
            if points:
                lines.append((ds, points))
        if lines:
            panels.append((label, line, lines))
    if not panels:
        return None
    fig = Figure(figsize=(6.5 * len(panels), 3.6))
    for i, (label, reference, lines) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        for ds, points in lines:
            layers = [(x, st) for x, st in points if isinstance(x, int)]
            xs = np.array([x for x, _ in layers], dtype=float)
            ys = np.array([st.mean for _, st in layers])
            sd = np.array([st.std or 0.0 for _, st in layers])
            (drawn,) = ax.plot(xs, ys, marker="o", markersize=3, label=ds.label)
            ax.fill_between(xs, ys - sd, ys + sd, alpha=0.2, linewidth=0)
            for x, st in points:
                if x == AVG:
                    ax.errorbar([last + 1], [st.mean], yerr=[st.std or 0.0], marker="D",
                                markersize=4, color=drawn.get_color(), capsize=2)
        ax.axhline(1.0, linestyle="--", linewidth=1, color="0.3", label=reference)
        ticks = list(range(last + 1)) + [last + 1]
        if len(ticks) <= 40:
            ax.set_xticks(ticks, [str(t) for t in ticks[:-1]] + [AVG], fontsize=7)
        ax.set_xlabel("layer (diamond: avg)", fontsize=7)
        ax.set_ylabel(label, fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, frameon=False)
    fig.suptitle(f"{system_title(system, agg.name(system))}\nMDL compression vs layer, mean "
                 "over seeds", fontsize=9)
    fig.tight_layout()
    return fig


@dataclass(frozen=True)
class _Panel:
    """One curve panel: a task, or the group average (``dataset`` None)."""

    title: str
    metrics: Tuple[str, ...]
    dataset: Optional[Dataset]
    chance: Optional[Tuple[float, str]]


def _group_panels(agg: Aggregate, group: str) -> List[_Panel]:
    members = agg.group_datasets(group)
    panels = [_Panel(f"{d.label} ({d.metric})", (d.metric,), d, d.chance) for d in members]
    if len(members) > 1:
        levels = [d.chance for d in members if d.chance is not None]
        chance = None
        if len(levels) == len(members):
            chance = (float(np.mean([c[0] for c in levels])), "mean of the tasks' floors")
        metrics = tuple(dict.fromkeys(d.metric for d in members))
        panels.insert(0, _Panel(f"{group}: mean of its {len(members)} datasets",
                                metrics, None, chance))
    return panels


def _stat(agg: Aggregate, row: Row, panel: _Panel, group: str) -> Optional[Stat]:
    """The panel's point of a row; a group mean over only some of the group's datasets is
    left out (it averages other tasks than its neighbours, as the tables' ``*`` says)."""
    if panel.dataset is None:
        stat = agg.group_cell(row, group)
        return None if stat is None or stat.partial else stat
    return agg.cell(row, panel.dataset.task)


def _draw_curves(ax, agg: Aggregate, group: str, panel: _Panel, colours: Dict[System, Any]
                 ) -> bool:
    """Lines, bands, avg points, baselines and the chance line of one panel."""
    probed = [s for s in agg.systems if any(isinstance(r.layer, int) for r in agg.layers_of(s))]
    last = max((r.layer for s in probed for r in agg.layers_of(s) if isinstance(r.layer, int)),
               default=0)
    avg_x = last + 1.5
    drawn, lowest, highest = False, math.inf, -math.inf
    for system in agg.systems:
        colour = colours[system]
        points = [(r.layer, st) for r in agg.layers_of(system) if isinstance(r.layer, int)
                  and (st := _stat(agg, r, panel, group)) is not None]
        if points:
            xs = np.array([x for x, _ in points], dtype=float)
            ys = np.array([st.mean for _, st in points])
            sd = np.array([st.std or 0.0 for _, st in points])
            ax.plot(xs, ys, marker="o", markersize=3, color=colour,
                    label=system_title(system, agg.name(system)))
            ax.fill_between(xs, ys - sd, ys + sd, color=colour, alpha=0.2, linewidth=0)
            lowest = min(lowest, float((ys - sd).min()))
            highest = max(highest, float((ys + sd).max()))
            drawn = True
        for r in agg.layers_of(system):
            st = _stat(agg, r, panel, group)
            if st is None:
                continue
            if r.layer == "avg":
                ax.errorbar([avg_x], [st.mean], yerr=[st.std or 0.0], fmt="D", markersize=4,
                            color=colour, capsize=3)
                lowest = min(lowest, st.mean - (st.std or 0.0))
                highest = max(highest, st.mean + (st.std or 0.0))
                drawn = True
            elif r.layer is None:
                ax.axhline(st.mean, linestyle=":", linewidth=1.5, color=colour,
                           label=agg.name(system))
                lowest = min(lowest, st.mean)
                highest = max(highest, st.mean)
                drawn = True
    if not drawn:
        return False
    if panel.chance is not None:
        level, what = panel.chance
        ax.axhline(level, linestyle="--", linewidth=1, color="0.3",
                   label="floor: majority class / 1/K / r = 0")
        ax.annotate(f"{what} {level:.1f}", (0, level), xycoords=("axes fraction", "data"),
                    xytext=(2, 2), textcoords="offset points", fontsize=6, color="0.3")
    ticks = list(range(0, last + 1, max(1, (last + 1) // 12 + (1 if last > 12 else 0))))
    has_avg = any(r.layer == "avg" for s in agg.systems for r in agg.layers_of(s))
    ax.set_xticks(ticks + ([avg_x] if has_avg else []),
                  labels=[str(t) for t in ticks] + (["avg"] if has_avg else []))
    ax.set_xlim(-0.5, avg_x + 0.7 if has_avg else last + 0.5)
    ax.set_ylim(*curve_y_range(panel.metrics, lowest, highest,
                               None if panel.chance is None else panel.chance[0]))
    ax.set_ylabel(" / ".join(metric_label(m) for m in panel.metrics), fontsize=7)
    ax.set_xlabel("layer", fontsize=7)
    ax.set_title(panel.title, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    return True


def curves_plot(agg: Aggregate, group: str) -> Any:
    """Score vs layer for one group: its average and each of its datasets, all systems (a
    matplotlib Figure, or None when nothing can be drawn)."""
    Figure, _ = require_matplotlib()
    panels = _group_panels(agg, group)
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    # wide enough for the title and the legend even with a single panel
    fig = Figure(figsize=(max(7.5, 3.9 * ncols), 2.9 * nrows + 0.3 + 0.2 * math.ceil(
        len(agg.systems) / 3)))
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf"]
    colours = {s: palette[i % len(palette)] for i, s in enumerate(agg.systems)}
    drawn = False
    handles: Dict[str, Any] = {}
    for k, panel in enumerate(panels):
        ax = fig.add_subplot(nrows, ncols, k + 1)
        if _draw_curves(ax, agg, group, panel, colours):
            drawn = True
            for handle, label in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(label, handle)
        else:
            ax.set_axis_off()
    if not drawn:
        return None
    fig.suptitle(f"{group}: test score vs layer\nmean over seeds, band = +- 1 sample std; "
                 "diamond = the avg spec (mean of all hidden states)", fontsize=9)
    fig.legend(list(handles.values()), list(handles.keys()), loc="lower center",
               ncol=min(3, len(handles)), fontsize=7, frameon=False)
    legend_inches = 0.1 + 0.2 * math.ceil(len(handles) / 3)
    fig.tight_layout(rect=(0, min(0.4, legend_inches / fig.get_figheight()), 1, 1))
    return fig


# --------------------------------------------------------------------------- files

def _one_class_caption(agg: Aggregate, system: System) -> str:
    """What a heatmap's caption adds when some of its cells are hatched one-class cells."""
    if not any(agg.degenerate_seeds(row, ds.task)[0] for row in _layer_rows(agg, system)
               for ds in agg.datasets):
        return ""
    text = (" Hatched '1 class': the probe predicted one class for at least 99 % of the test "
            "examples of every seed (a class rate, not a score).")
    if system.features == RAW_FEATURES:
        text += (" On raw features this usually means the probe could not read them, not "
                 "that the layer is empty: run the same estratos probe command with "
                 "--features standardized before concluding.")
    return text


def render_figures(agg: Aggregate) -> List[RenderedFigure]:
    """Every figure of a report, drawn in memory (heatmaps per system, curves per group)."""
    _, Canvas = require_matplotlib()
    figures: List[RenderedFigure] = []

    def add(fig: Optional[object], name: str, caption: str) -> None:
        """Keep a drawn figure (a plot function returns None when it has nothing to show)."""
        if fig is not None:
            figures.append(RenderedFigure(name, caption, _png(fig, Canvas)))

    for system in agg.systems:
        if system.is_control:  # a reference for another row: no figures of its own
            continue
        title, part = system_title(system, agg.name(system)), system_file_part(system)
        if agg.name(system) != system.identity:
            title += f" (model: {system.identity})"
        metrics = ", ".join(dict.fromkeys(d.metric for d in score_matrix(agg, system)[0]))
        add(heatmap_plot(agg, system),
            f"heatmap-scores_{part}.png",
            f"{title}: mean test score over seeds of each task (rows) at each layer "
            f"(columns), one colour scale per metric ({metrics}), from the lowest "
            "majority-class floor of its tasks (0 for correlations) to 100, so a small "
            "spread stays a small change of colour." + _one_class_caption(agg, system))
        add(information_heatmap(agg, system),
            f"heatmap-vinfo_{part}.png",
            f"{title}: V-information in bits (the class prior's cross-entropy minus the "
            "probe's held-out cross-entropy) of each classification task (rows) at each "
            "layer (columns), mean over seeds; one colour scale centred on 0, red above "
            "(bits over the prior), blue below (worse than the prior, not clipped)."
            + _one_class_caption(agg, system))
        add(compression_plot(agg, system),
            f"mdl-compression_{part}.png",
            f"{title}: MDL compression of each task at each layer (diamond: avg): uniform / "
            "online code length of the training labels, and labels-only / online code "
            "length (over the floor: about 1 = not above the floor; +/-0.005 around 1 is "
            "the block model's noise).")
        add(zscore_plot(agg, system),
            f"heatmap-zscores_{part}.png",
            f"{title}: each task's mean score standardized across layers 0..L (the avg "
            "column on the same scale), so tasks of any metric share a colour map and the "
            "figure shows where each peaks; each task's spread over its layers (in points) "
            "is beside its name, since a z-score makes a small spread look as strong as a "
            "large one.")
    for group in agg.groups:
        add(curves_plot(agg, group),
            f"layer-curves_{re.sub(r'[^A-Za-z0-9]+', '-', group)}.png",
            f"{group}: score vs layer per system, mean over seeds with a +- 1 sample std "
            "band; the diamond after the last layer is the avg spec; dashed: the floor a "
            "probe must beat (majority-class rate, 1/K, or r = 0); dotted: baselines."
            + (f" Models: {agg.identities()}." if agg.identities() else ""))
    names: Dict[str, int] = {}
    unique = []
    for fig in figures:  # two systems with the same label (e.g. revisions cut to 8 chars)
        count = names[fig.name] = names.get(fig.name, 0) + 1
        stem = fig.name[:-4]
        unique.append(fig if count == 1 else RenderedFigure(f"{stem}-{count}.png", fig.caption,
                                                           fig.png))
    return unique


def write_figures(figures: Sequence[RenderedFigure], out_dir: Path) -> List[Path]:
    """Write rendered figures into ``out_dir`` (atomically); returns the files written."""
    written = []
    for fig in figures:
        path = out_dir / fig.name
        write_atomic(path, fig.png)
        written.append(path)
    log.info("wrote %d figures to %s", len(written), out_dir)
    return written
