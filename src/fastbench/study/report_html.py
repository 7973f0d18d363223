"""The report's HTML page, report.html: one self-contained file that opens offline."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from pathlib import Path

from fastbench.study import markdown
from fastbench.study.cells import (
    COLUMNS,
    INCOMPLETE_HEAD,
    CellRow,
    figure_text,
    incomplete_rows,
    status_text,
    values_text,
)
from fastbench.study.figures_data import RunPoint
from fastbench.study.report_figures import Figure
from fastbench.study.store import CARD_FILE

__all__ = ("CSP", "CSS", "inline_svg", "render_html")


_PROLOG = re.compile(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_XMLNS = re.compile(r'\s+xmlns(:\w+)?="[^"]*"')
_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(url\(#|href="#)([^)"]+)')


def inline_svg(svg: str, prefix: str) -> str:
    """A matplotlib SVG document as an element to put in HTML: no XML prolog, DOCTYPE or metadata (the
    DOCTYPE and the RDF metadata name URLs), no namespace declarations (the HTML parser puts <svg> in
    the SVG namespace itself; xlink:href still works there), every id and reference to one prefixed so
    that two figures' ids never clash in one page."""
    svg = _PROLOG.sub("", svg, count=1)
    svg = _METADATA.sub("", svg)
    svg = _XMLNS.sub("", svg)
    svg = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', svg)
    return _REF.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", svg)


CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1a1a1a;
       max-width: 1180px; margin: 0 auto; padding: 1.5em; background: #fff; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.meta { color: #555; margin-top: 0; }
figure { margin: 1.2em 0; } figure svg { max-width: 100%; height: auto; }
figcaption { color: #333; font-size: .92em; }
table { border-collapse: collapse; margin: .6em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .55em; text-align: left; vertical-align: top; }
thead th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.failed td, tr.incomplete td { background: #fdecea; } tr.skipped td { background: #f5f5f5; color: #666; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; font-size: .85em; }
code { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
details { border: 1px solid #ddd; border-radius: 4px; margin: .5em 0; padding: .3em .8em; }
details > summary { cursor: pointer; font-weight: 600; }
.card h1 { font-size: 1.25em; } .card h2 { font-size: 1.05em; border: 0; margin-top: 1em; }
ul.lines { padding-left: 1.2em; }
"""


# Nothing may be fetched: no script, no style or image from anywhere but this file (data: images only).
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _row_class(row: CellRow) -> str:
    return "" if row.status == "done" else f' class="{html.escape(row.status.split()[0])}"'


def _cells_table_html(rows: Sequence[CellRow]) -> str:
    head = ["Variant", "Point", "Runs", *(label for _, label, _ in COLUMNS), "Status"]
    out = ["<table>", "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead>",
           "<tbody>"]
    for row in rows:
        runs = ", ".join(f'<a href="#run-{html.escape(r, quote=True)}">{html.escape(r)}</a>' for r in row.run_ids)
        status = html.escape(status_text(row))
        figures = "".join(f'<td class="num">{html.escape(figure_text(row.figures.get(key), digits))}</td>'
                          for key, _, digits in COLUMNS)
        out.append(f"<tr{_row_class(row)}><td>{html.escape(row.variant)}</td>"
                   f"<td>{html.escape(values_text(row.values))}</td><td>{runs or '-'}</td>{figures}"
                   f"<td>{status}</td></tr>")
    out += ["</tbody>", "</table>"]
    return "\n".join(out)


def _incomplete_html(points: Sequence[RunPoint]) -> list[str]:
    rows = incomplete_rows(points)
    if not rows:
        return []
    out = ['<h2 id="incomplete">Incomplete runs</h2>',
           "<p>Runs kept in the store that are no complete cell: the server collapsed, interrupted, capped "
           "before their first completion, or stopped early. Neither the cells table nor a figure averages "
           "them; a sweep runs their cells again.</p>", "<table>",
           "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in INCOMPLETE_HEAD) + "</tr></thead>", "<tbody>"]
    for run, *rest in rows:
        cells = "".join(f"<td>{html.escape(c)}</td>" for c in rest)
        out.append(f'<tr class="incomplete"><td><a href="#run-{html.escape(run, quote=True)}">{html.escape(run)}</a>'
                   f"</td>{cells}</tr>")
    out += ["</tbody>", "</table>"]
    return out


def _card_html(point: RunPoint) -> str:
    card = None
    if point.folder is not None and (Path(point.folder) / CARD_FILE).is_file():
        card = (Path(point.folder) / CARD_FILE).read_text(encoding="utf-8", errors="replace")
    load = f" · concurrency {point.concurrency}" if point.concurrency is not None else ""
    summary = f"{point.run_id} · {point.variant}{load}"
    body = (f'<div class="card">{markdown.render(card)}</div>' if card is not None
            else "<p>No card kept for this run (a result file named without its card).</p>")
    return (f'<details id="run-{html.escape(point.run_id, quote=True)}"><summary>{html.escape(summary)}</summary>\n'
            f"{body}\n</details>")


def render_html(title: str, subtitle: str, figures: Sequence[Figure], rows: Sequence[CellRow],
                points: Sequence[RunPoint], notes: Sequence[str]) -> str:
    """The whole page: the figures, the table of cells, then each run's card. The figures are inline SVG
    (text kept as text, ids made unique per figure), the CSS is inline, there is no script, and nothing in
    it names anything outside the file: no ``src``, ``href`` or ``url()`` leaves the page (a card's links to
    URLs stay text, see ``markdown``), a Content-Security-Policy of ``default-src 'none'`` makes the browser
    refuse any fetch that slipped in, and the favicon is an empty ``data:`` URI so that a browser asks for
    none."""
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             '<link rel="icon" href="data:,">',
             f"<title>{html.escape(title)}</title>", f"<style>{CSS}</style>", "</head>", "<body>",
             f"<h1>{html.escape(title)}</h1>", f'<p class="meta">{html.escape(subtitle)}</p>']
    if notes:
        parts.append('<ul class="lines">' + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    parts.append('<h2 id="figures">Figures</h2>')
    for figure in figures:
        parts.append(f'<figure id="figure-{figure.name}">{inline_svg(figure.svg, figure.name)}'
                     f"<figcaption>{html.escape(figure.caption)}</figcaption></figure>")
    if not figures:
        parts.append("<p>No figure: the runs have no load or figures to draw.</p>")
    parts += ['<h2 id="cells">Cells</h2>',
              "<p>Each grid point's complete runs: the mean, and ± the half-width of the 95% t-interval of the "
              "mean where it was repeated. Per-stream decode rate is the median of each request's own rate.</p>",
              _cells_table_html(rows), *_incomplete_html(points), '<h2 id="cards">Run cards</h2>']
    parts += [_card_html(point) for point in points]
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)
