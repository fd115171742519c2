"""The report as one self-contained HTML page: the tables and, with ``--plot``, the figures.

For people who would rather look than read: the same display tables as Markdown and LaTeX
(:mod:`~estratos.report.tables`, so every format shows the same numbers and marks) and the
PNG figures of :mod:`~estratos.report.plots` embedded as base64 ``data:`` URIs. The page
loads nothing from anywhere (no scripts, fonts, style sheets or images outside the file),
so it can be mailed, archived or opened offline; it needs only the standard library (plus
matplotlib for the figures, which ``--plot`` asks for).
"""

from __future__ import annotations

import base64
import html
import re
from typing import List, Sequence

from estratos import __version__
from estratos.report.tables import Cell, Footnotes, Table
from estratos.report.writers import (
    LEGEND,
    MISSING,
    ONE_CLASS_NOTE,
    ReportContent,
    Section,
    has_one_class,
    value_text,
)

#: the page's whole style: readable tables, numbers right-aligned, figures scaled to fit
STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
       color: #1d1d1f; background: #fff; line-height: 1.45; }
header, main, footer { max-width: 1200px; margin: 0 auto; padding: 0 24px; }
header { padding-top: 16px; border-bottom: 1px solid #ddd; }
h1 { font-size: 1.6em; margin: 0.3em 0; }
h2 { font-size: 1.3em; margin-top: 1.6em; border-bottom: 1px solid #eee; }
h3 { font-size: 1.05em; margin-top: 1.3em; }
nav a { margin-right: 1em; }
.legend, .notes, figcaption, footer { font-size: 0.88em; color: #444; }
.scroll { overflow-x: auto; margin: 0.5em 0; }
table { border-collapse: collapse; font-size: 0.86em; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { padding: 3px 9px; border-bottom: 1px solid #e4e4e4; white-space: nowrap; }
thead th { border-bottom: 2px solid #999; background: #f6f6f6; position: sticky; top: 0; }
th { text-align: left; }
td.num { text-align: right; }
td.best { font-weight: 700; background: #e8f3e8; }
td.second { text-decoration: underline; background: #f4f9f4; }
td.missing, td.undefined { color: #999; text-align: center; }
tbody tr:hover { background: #fafae6; }
sup { font-size: 0.7em; color: #555; }
figure { margin: 1.2em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
code { background: #f3f3f3; padding: 0 3px; border-radius: 3px; }
footer { padding: 24px; border-top: 1px solid #ddd; margin-top: 2em; }
"""


def _text(text: str) -> str:
    """Escaped text; `code` spans (as the Markdown intros use them) become <code>."""
    parts = re.split(r"`([^`]*)`", text)
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p)
                   for i, p in enumerate(parts))


def _sup(notes: Sequence[int]) -> str:
    return f"<sup>{','.join(str(n) for n in notes)}</sup>" if notes else ""


def _cell(cell: Cell) -> str:
    if not cell.is_value:
        return f"<td>{html.escape(cell.text or '')}</td>"
    text = value_text(cell, " ± ")
    classes = ["num"]
    if cell.undefined:
        classes.append("undefined")
    elif cell.stat is None:
        classes.append("missing")
    if cell.all_degenerate:
        classes.append("degenerate")
    if cell.mark:
        classes.append(cell.mark)
    dagger = " †" if cell.not_worse else ""  # not significantly worse than the best layer
    # greyed inline (the page's style sheet stays as it was for reports without such cells)
    style = ' style="color:#999;font-style:italic"' if cell.all_degenerate else ""
    return (f'<td class="{" ".join(classes)}"{style}>{html.escape(text)}{dagger}'
            f'{_sup(cell.notes)}</td>')


def _anchor(key: str) -> str:
    return "t-" + re.sub(r"[^A-Za-z0-9_-]+", "-", key)


def html_table(table: Table, footnotes: Footnotes, *, caption: bool = True) -> str:
    """One display table with its footnotes (and its title as caption, unless a heading
    above already says it)."""
    head = "".join(f"<th>{html.escape(h)}{_sup(n)}</th>"
                   for h, n in zip(table.header, table.header_notes))
    body = ["<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in table.rows]
    if not table.rows:
        body.append("<tr>" + "".join(f'<td class="num missing">{MISSING}</td>'
                                     for _ in table.header) + "</tr>")
    used = sorted({n for notes in table.header_notes for n in notes}
                  | {n for row in table.rows for c in row for n in c.notes})
    texts = dict(footnotes.items())
    notes = [f"{_text(table.caption)}."] if table.caption else []
    notes += [f"<sup>{n}</sup> {_text(texts[n])}" for n in used]
    if any(c.partial for row in table.rows for c in row):
        notes.append("* mean over the datasets this row has (fewer than the group has here).")
    if has_one_class(table):
        notes.append(html.escape(ONE_CLASS_NOTE))
    out = [f'<div class="scroll" id="{_anchor(table.key)}"><table>',
           f"<caption>{html.escape(table.title)}</caption>" if caption else "",
           f"<thead><tr>{head}</tr></thead>", "<tbody>", *body, "</tbody></table></div>"]
    if notes:
        out.append('<p class="notes">' + "<br>".join(notes) + "</p>")
    return "\n".join(line for line in out if line)


def _section(section: Section, footnotes: Footnotes, index: int) -> List[str]:
    out = [f'<section id="s{index}"><h2>{html.escape(section.title)}</h2>']
    if section.intro:
        out.append(f'<p class="legend">{_text(section.intro)}</p>')
    for table in section.tables:
        headed = len(section.tables) > 1
        if headed:
            out.append(f"<h3>{html.escape(table.title)}</h3>")
        out.append(html_table(table, footnotes, caption=not headed))
    out.append("</section>")
    return out


def _figures(content: ReportContent) -> List[str]:
    out = ['<section id="figures"><h2>Figures</h2>']
    if not content.figures:
        out.append('<p class="legend">No figures: run <code>estratos report ... --plot</code> '
                   '(needs <code>pip install "estratos[plot]"</code>) to embed the heatmaps and '
                   "layer curves here.</p>")
    for fig in content.figures:
        data = base64.b64encode(fig.png).decode("ascii")
        out.append(f'<figure id="{_anchor(fig.name)}"><img alt="{html.escape(fig.caption)}" '
                   f'src="data:image/png;base64,{data}"><figcaption>{html.escape(fig.caption)}'
                   f" (<code>plots/{html.escape(fig.name)}</code>)</figcaption></figure>")
    out.append("</section>")
    return out


def to_html(content: ReportContent) -> str:
    """The whole page. The figures follow the first section (the group averages), the other
    tables come after them, then the notices."""
    titles = [("s0", content.sections[0].title)] if content.sections else []
    titles.append(("figures", "Figures"))
    titles += [(f"s{i}", s.title) for i, s in enumerate(content.sections) if i > 0]
    if content.notices:
        titles.append(("notices", "Notices"))
    nav = " ".join(f'<a href="#{a}">{html.escape(t)}</a>' for a, t in titles)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>estratos report</title>", f"<style>{STYLE}</style></head><body>",
           "<header><h1>estratos report</h1>",
           "<p>Results: " + ", ".join(f"<code>{html.escape(s)}</code>"
                                      for s in content.sources) + ".</p>",
           f'<p class="legend">{html.escape(LEGEND.format(missing=MISSING))}</p>',
           f"<nav>{nav}</nav></header>", "<main>"]
    for i, section in enumerate(content.sections):
        out += _section(section, content.footnotes, i)
        if i == 0:
            out += _figures(content)
    if not content.sections:
        out += _figures(content)
    if content.notices:
        out.append('<section id="notices"><h2>Notices</h2><ul>')
        out += [f"<li>{html.escape(str(n))}</li>" for n in content.notices]
        out.append("</ul></section>")
    out += ["</main>", f"<footer>Written by estratos {html.escape(__version__)} "
            "(<code>estratos report</code>); every number comes from the results files named "
            "above.</footer>", "</body></html>"]
    return "\n".join(out) + "\n"
