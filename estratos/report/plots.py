"""Per-layer figures: task x layer heatmaps and per-group score-vs-layer line plots.

matplotlib is an optional extra (``pip install "estratos[plot]"``); :func:`require_matplotlib`
is called before anything is written so a missing extra fails cleanly. Figures are drawn
with matplotlib's object API on an Agg canvas (no pyplot), so plotting changes no global
state and needs no display.

Heatmaps come in two versions: raw scores, and each task standardized across layers
(z-scores), as DiscoEval's per-layer figure does, so tasks on different scales share one
colour map and the figure shows *where* each task peaks.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

from estratos.errors import EstratosError
from estratos.report.aggregate import Aggregate, System, layer_label
from estratos.atomic import write_atomic

log = logging.getLogger(__name__)

INSTALL_HINT = 'pip install "estratos[plot]"'


def require_matplotlib() -> Any:
    """The matplotlib modules plotting needs, or an EstratosError naming the extra."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise EstratosError(f"--plot needs matplotlib, which is not installed ({exc}); "
                            f"install the optional extra: {INSTALL_HINT}") from None
    return Figure, FigureCanvasAgg


def layer_matrix(agg: Aggregate, system: System) -> Tuple[List[str], List[str], np.ndarray]:
    """(dataset labels, layer labels, matrix of mean scores with NaN for missing cells)."""
    rows = [r for r in agg.layers_of(system) if isinstance(r.layer, int)]
    datasets = [d for d in agg.datasets if any((r, d.task) in agg.seeds for r in rows)]
    matrix = np.full((len(datasets), len(rows)), np.nan)
    for i, ds in enumerate(datasets):
        for j, row in enumerate(rows):
            stat = agg.cell(row, ds.task)
            if stat is not None:
                matrix[i, j] = stat.mean
    return [d.label for d in datasets], [layer_label(r.layer) for r in rows], matrix


def standardize_rows(matrix: np.ndarray) -> np.ndarray:
    """Each task (row) as z-scores across its layers; constant rows become 0."""
    mean = np.nanmean(matrix, axis=1, keepdims=True)
    std = np.nanstd(matrix, axis=1, keepdims=True)
    std[~(std > 0)] = 1.0
    return (matrix - mean) / std


def _save(fig, canvas_cls, path: Path) -> None:
    canvas_cls(fig)  # attach an Agg canvas: no pyplot, no display
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    write_atomic(path, buf.getvalue())


def heatmap(agg: Aggregate, system: System, path: Path, *, standardize: bool = False) -> bool:
    """Write one tasks x layers heatmap; False when the system has no per-layer results."""
    Figure, Canvas = require_matplotlib()
    labels, layers, matrix = layer_matrix(agg, system)
    if matrix.size == 0:
        return False
    shown = standardize_rows(matrix) if standardize else matrix
    width = max(4.5, 2.5 + 0.45 * len(layers))
    height = max(2.5, 1.2 + 0.3 * len(labels))
    fig = Figure(figsize=(width, height))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(np.ma.masked_invalid(shown), aspect="auto",
                      cmap="coolwarm" if standardize else "viridis")
    ax.set_xticks(range(len(layers)), labels=layers)
    ax.set_yticks(range(len(labels)), labels=labels)
    ax.set_xlabel("layer")
    ax.set_title(system.label + (" (z-score per task)" if standardize else ""), fontsize=9)
    fig.colorbar(image, ax=ax, label="z-score" if standardize else "score")
    fig.tight_layout()
    _save(fig, Canvas, path)
    return True


def group_lines(agg: Aggregate, group: str, path: Path) -> bool:
    """Write the group's mean score vs layer, one line per system; baselines dashed."""
    Figure, Canvas = require_matplotlib()
    fig = Figure(figsize=(6.0, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    drawn = False
    for system in agg.systems:
        points = [(r.layer, s.mean) for r in agg.layers_of(system)
                  if isinstance(r.layer, int) and (s := agg.group_cell(r, group)) is not None]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o", markersize=3, label=system.label)
            drawn = True
        for r in agg.layers_of(system):
            s = agg.group_cell(r, group)
            if r.layer is None and s is not None:
                ax.axhline(s.mean, linestyle="--", color="grey", label=system.label)
                drawn = True
    if not drawn:
        return False
    ax.set_xlabel("layer")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel(f"{group} score")
    ax.set_title(group)
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, Canvas, path)
    return True


def write_plots(agg: Aggregate, out_dir: Path) -> List[Path]:
    """All figures of a report into ``out_dir``; returns the files written."""
    require_matplotlib()
    written: List[Path] = []
    slugs: Dict[str, int] = {}
    for system in agg.systems:
        slug = system.slug
        slugs[slug] = slugs.get(slug, 0) + 1
        if slugs[slug] > 1:
            slug = f"{slug}-{slugs[slug]}"
        for standardize, suffix in ((False, ""), (True, "_z")):
            path = out_dir / f"heatmap_{slug}{suffix}.png"
            if heatmap(agg, system, path, standardize=standardize):
                written.append(path)
    for group in agg.groups:
        path = out_dir / f"layers_{group.replace(' ', '-')}.png"
        if group_lines(agg, group, path):
            written.append(path)
    log.info("wrote %d figures to %s", len(written), out_dir)
    return written
