"""The similarity and geometry part of a report (``report --similarity FILE``).

Why its own module: these records have no task, seed or score, so they never enter the
aggregate of probe cells; they become their own tables (each layer's most similar layer of
the other cache; each layer's geometry) and, with ``--plot``, one heatmap figure per cache
pair, pooling and feature reading (a panel per measure), embedded in report.html like the
other figures.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from estratos.report.tables import Cell, Table
from estratos.report.writers import Section
from estratos.results.similarity import DISTANCES, MapRecord, most_similar
from estratos.vocab import AVG

#: how each measure is named in tables and figures
MEASURE_LABELS = {"linear-cka": "linear CKA", "debiased-cka": "debiased CKA",
                  "procrustes": "Procrustes angle (rad)", "rsa": "RSA (Spearman)",
                  "mutual-knn": "mutual k-NN"}
SIMILARITY_INTRO = (
    "Layer x layer similarity from `estratos similarity` (docs/similarity.md). For each layer "
    "of the first cache: the layer of the other cache (within one cache: another layer) "
    "that is most similar under each measure, and its value (Procrustes: the smallest "
    "angle). CKA and Procrustes use every sentence; RSA and mutual k-NN a seeded subsample "
    "(its size is in the records). Linear CKA recorded with `--bootstrap` shows its "
    "interval over resampled sentences, [lo, hi], and the layers tied with the most "
    "similar one (their paired difference's interval reaches 0): a tie means another "
    "sample of sentences could rank them the other way. A map made with `--residualize "
    "length` is a table of its own (token counts regressed out of every layer first). A "
    "few high-variance dimensions "
    "can dominate CKA on raw features: compare with the standardized reading before "
    "concluding.")
GEOMETRY_INTRO = (
    "Each layer's shape from `estratos geometry` (docs/similarity.md): anisotropy (mean "
    "cosine over all pairs of sentences) and the dimension contributing most to it with its "
    "share (a rogue dimension) and its share of the variance (an offset dimension carries "
    "anisotropy but no variance, and CKA and Procrustes, which centre the data, see only "
    "variance), the dimension with the largest variance share and its share of the "
    "centred Gram's squared norm (what linear CKA normalises by), the largest absolute "
    "activation and its ratio to the median (massive activations), the mean vector norm, "
    "the effective rank of the covariance spectrum and the TwoNN intrinsic dimension (on "
    "the subsample, duplicates dropped).")

GroupKey = Tuple[Any, ...]
#: a model folder's last part that names nothing (its parent is shown instead)
GENERIC_FOLDERS = ("model", "models", "weights", "checkpoint")


def cache_label(part: Optional[Mapping[str, Any]]) -> str:
    """A short name for a cache in a record: the model's last path part, its control seed
    and a prompt mark."""
    if not part:
        return "?"
    parts = str(part.get("model") or "?").rstrip("/").split("/")
    # a packaged model's folder is often just "model": its parent names it
    name = parts[-2] if len(parts) > 1 and parts[-1].lower() in GENERIC_FOLDERS else parts[-1]
    if part.get("random_init") is not None:
        name += f" (random-init {part['random_init']})"
    if part.get("prompt"):
        name += " (prompt)"
    return name


def _layer_order(layer: Any) -> Tuple[int, int]:
    return (1, 0) if layer == AVG else (0, int(layer))


def _layer_text(layer: Any) -> str:
    return str(layer)


def _identity(part: Optional[Mapping[str, Any]]) -> Tuple[Any, ...]:
    if not part:
        return ()
    return tuple(part.get(k) for k in ("model", "revision", "random_init", "prompt"))


def _groups(records: Sequence[MapRecord], kind: str) -> Dict[GroupKey, List[MapRecord]]:
    out: Dict[GroupKey, List[MapRecord]] = {}
    for r in records:
        if r.kind != kind:
            continue
        key = (_identity(r.a), _identity(r.b), r.pooling, r.features,
               r.sentences.get("digest"), r.settings.get("residualize"))
        out.setdefault(key, []).append(r)
    return out


def _title(first: MapRecord) -> str:
    a = cache_label(first.a)
    pair = a if first.b is None or _identity(first.b) == _identity(first.a) \
        else f"{a} vs {cache_label(first.b)}"
    residualized = first.settings.get("residualize")
    return (f"{pair}, {first.pooling} pooling, {first.features} features, "
            f"{first.sentences.get('n')} sentences"
            + (f", {residualized} regressed out" if residualized else ""))


def _fmt(value: Optional[float]) -> str:
    return "undef." if value is None else f"{value:.3f}"


def _fmt1(record: Optional[MapRecord]) -> str:
    """One decimal; "undef." for a record without a value, "—" for no record."""
    if record is None:
        return "—"
    return "undef." if record.value is None else f"{record.value:.1f}"


def matrices(group: Sequence[MapRecord]) -> Tuple[List[Any], List[Any], Dict[str, Dict]]:
    """Layers of A, layers of B and measure -> {(layer_a, layer_b): value} of one group."""
    rows = sorted({r.layer_a for r in group}, key=_layer_order)
    cols = sorted({r.layer_b for r in group}, key=_layer_order)
    values: Dict[str, Dict] = {}
    for r in group:
        values.setdefault(r.measure, {})[(r.layer_a, r.layer_b)] = r.value
    ordered = {m: values[m] for m in MEASURE_LABELS if m in values}
    return rows, cols, ordered


def most_similar_table(group: Sequence[MapRecord], index: int) -> Table:
    """Per layer of A, the most similar layer of B under each measure."""
    rows, _, values = matrices(group)
    records = {(r.measure, r.layer_a, r.layer_b): r for r in group}
    within = group[0].b is None or _identity(group[0].b) == _identity(group[0].a)
    header = ["Layer"] + [MEASURE_LABELS[m] for m in values]
    out = []
    for la in rows:
        line = [Cell(_layer_text(la))]
        for m, cells in values.items():
            pick = most_similar([(lb, v) for (a, lb), v in cells.items()
                                 if a == la and not (within and lb == la)], m)
            if pick is None:
                line.append(Cell("—"))
                continue
            line.append(Cell(f"{_layer_text(pick[0])} ({_fmt(pick[1])}"
                             + _uncertainty(records, m, la, pick[0]) + ")"))
        out.append(line)
    other = "the other layers of this cache" if within else cache_label(group[0].b)
    return Table(f"similarity-{index}", _title(group[0]), header, [()] * len(header), out,
                 caption=f"each cell: the most similar layer among {other} (its value)")


def _uncertainty(records: Mapping[Tuple[Any, Any, Any], MapRecord], measure: str, la: Any,
                 best: Any) -> str:
    """`` [lo, hi]; tie: L, ...`` of a most similar layer whose record holds a bootstrap
    (the layers whose paired difference with it reaches 0), else nothing."""
    boot = records[(measure, la, best)].detail.get("bootstrap") or {}
    if boot.get("lo") is None or boot.get("hi") is None:
        return ""
    tied = [lb for (m, a, lb), r in records.items() if m == measure and a == la
            and (r.detail.get("bootstrap") or {}).get("tie")]
    text = f" [{boot['lo']:.3f}, {boot['hi']:.3f}]"
    if tied:
        text += "; tie: " + ", ".join(_layer_text(t) for t in sorted(tied, key=_layer_order))
    return text


def geometry_table(group: Sequence[MapRecord], index: int) -> Table:
    """Per layer: the geometry measures."""
    by: Dict[Tuple[Any, str], MapRecord] = {(r.layer_a, r.measure): r for r in group}
    layers = sorted({r.layer_a for r in group}, key=_layer_order)
    header = ["Layer", "anisotropy", "top dim (share; variance share)", "top variance dim",
              "max |a|", "max / median", "mean norm", "effective rank", "TwoNN"]
    out = []
    for la in layers:
        aniso, act, norm, erank, twonn = (by.get((la, m)) for m in (
            "anisotropy", "max-abs", "norm", "effective-rank", "twonn"))
        top = spread = "—"
        if aniso is not None and aniso.detail.get("top_dims"):
            first = aniso.detail["top_dims"][0]
            share, var = first.get("share"), first.get("variance_share")
            top = (f"{first['dim']} ({'undef.' if share is None else f'{share:.2f}'}"
                   + ("" if var is None else f"; {var:.3f}") + ")")
        if aniso is not None and aniso.detail.get("top_variance_dims"):
            most = aniso.detail["top_variance_dims"][0]
            gram = most.get("gram_share")
            spread = (f"{most['dim']} ({most['variance_share']:.3f}"
                      + ("" if gram is None else f"; Gram {gram:.3f}") + ")")
        ratio = None if act is None else act.detail.get("ratio")
        out.append([Cell(_layer_text(la)),
                    Cell(_fmt(aniso.value) if aniso else "—"), Cell(top), Cell(spread),
                    Cell(f"{act.value:.2f}" if act and act.value is not None else "—"),
                    Cell(f"{ratio:.1f}" if isinstance(ratio, (int, float)) else "—"),
                    Cell(f"{norm.value:.2f}" if norm and norm.value is not None else "—"),
                    Cell(_fmt1(erank)),
                    Cell(_fmt1(twonn))])
    first = group[0]
    title = (f"{cache_label(first.a)}, {first.pooling} pooling, {first.features} features, "
             f"{first.sentences.get('n')} sentences")
    sample = first.sample or {}
    return Table(f"geometry-{index}", title, header, [()] * len(header), out,
                 caption=f"median activation and TwoNN on a subsample of {sample.get('size')} "
                         f"sentences (seed {sample.get('seed')})")


def similarity_sections(records: Sequence[MapRecord]) -> List[Section]:
    """The report's similarity and geometry sections (absent when there are no records)."""
    out = []
    sim = [most_similar_table(g, i) for i, g in enumerate(_groups(records, "similarity")
                                                          .values())]
    if sim:
        out.append(Section("Similarity: most similar layers", sim, SIMILARITY_INTRO))
    geo = [geometry_table(g, i) for i, g in enumerate(_groups(records, "geometry").values())]
    if geo:
        out.append(Section("Geometry", geo, GEOMETRY_INTRO))
    return out


def similarity_figures(records: Sequence[MapRecord]) -> List[Any]:
    """One heatmap figure per similarity group (a panel per measure), as
    :class:`estratos.report.plots.RenderedFigure`."""
    import numpy as np

    from estratos.report.plots import RenderedFigure, _cmap, _png, require_matplotlib

    Figure, Canvas = require_matplotlib()
    figures = []
    for index, group in enumerate(_groups(records, "similarity").values()):
        rows, cols, values = matrices(group)
        first = group[0]
        panels = len(values)
        width = max(2.8, 0.3 * len(cols) + 1.6)  # a panel's columns: layers of the other
        height = max(2.8, 0.22 * len(rows) + 1.4)
        fig = Figure(figsize=(width * panels + 0.6, height), layout="constrained")
        for p, (m, cells) in enumerate(values.items()):
            ax = fig.add_subplot(1, panels, p + 1)
            grid = np.full((len(rows), len(cols)), np.nan)
            for (la, lb), v in cells.items():
                if v is not None:
                    grid[rows.index(la), cols.index(lb)] = v
            high = math.pi / 2 if m in DISTANCES else 1.0
            low = 0.0 if m != "debiased-cka" else min(0.0, float(np.nanmin(grid))
                                                      if np.isfinite(grid).any() else 0.0)
            image = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto",
                              cmap=_cmap("viridis_r" if m in DISTANCES else "viridis"),
                              vmin=low, vmax=high)
            ax.set_title(MEASURE_LABELS[m], fontsize=9)
            ax.set_xticks(range(len(cols)), [_layer_text(c) for c in cols], fontsize=7)
            ax.set_yticks(range(len(rows)), [_layer_text(r) for r in rows], fontsize=7)
            ax.set_xlabel(cache_label(first.b or first.a), fontsize=8)
            if p == 0:
                ax.set_ylabel(cache_label(first.a), fontsize=8)
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=7)
        part = re.sub(r"[^A-Za-z0-9]+", "-", _title(first)).strip("-")[:80]
        figures.append(RenderedFigure(
            f"similarity_{index}_{part}.png",
            f"{_title(first)}: layer x layer similarity, one panel per measure; brighter = "
            "more similar in every panel (Procrustes, an angle, has its colours reversed: a "
            "small angle is bright); grey: undefined", _png(fig, Canvas)))
    return figures


__all__ = ["DISTANCES", "MEASURE_LABELS", "cache_label", "geometry_table", "matrices",
           "most_similar_table", "similarity_figures", "similarity_sections"]
