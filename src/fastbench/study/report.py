"""``fastbench report``'s two files from a set of runs (a sweep's, a store query's, or runs named):

- ``report.html``: ONE self-contained page that opens offline. The figures are inline SVG (text kept
  as text, ids made unique per figure), the CSS is inline, there is no script, and nothing in it
  names anything outside the file: no ``src``, ``href`` or ``url()`` leaves the page (a card's links
  to URLs stay text, see ``markdown``), a Content-Security-Policy of ``default-src 'none'`` makes
  the browser refuse any fetch that slipped in, and the favicon is an empty ``data:`` URI so that a
  browser asks for none. The figures, the table of cells, then each run's card.
- ``study.md``: the study card in the run cards' layout (title line, status, Configuration, Measured
  results, Full run command, Notes), with the cells table and the crossover figure (``crossover.svg``
  beside it).

The cells: runs of one grid point (the sweep's cell key less its repeat; without a sweep, variant and
load) are repeats, shown as their mean and 95% t-interval. Only complete runs (runfile.is_complete) are
averaged, in the table and the figures alike; the others (interrupted, capped before their first
completion, stopped early) are listed apart with their status, and the page's counts say both. A
sweep's journal adds the points that have no complete run, failed or skipped, with the reason recorded.
"""

from __future__ import annotations

import dataclasses
import datetime
import html
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from fastbench.exceptions import ConfigError, FastbenchError
from fastbench.results.card import escape_markdown
from fastbench.results.writers import write_bytes_atomic
from fastbench.study import markdown
from fastbench.study.figures_data import (
    NO_VARIANT,
    RunPoint,
    complete_points,
    left_out,
    mean_interval,
    point_document,
    point_records,
)
from fastbench.study.runfile import flat_failed, flat_why
from fastbench.study.store import CARD_FILE
from fastbench.study.sustained import SUSTAINED_KEY, THROUGHPUT_TEXT, runs_fallback_line

__all__ = ("CellRow", "Figure", "cell_rows", "inline_svg", "render_html", "render_study_card", "write_report")

HTML_FILE = "report.html"
CARD_NAME = "study.md"

# The cells table's figures: (flat key, column heading, digits)
COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("median_decode_rate_tok_s", "Per-stream decode tok/s", 1),
    (SUSTAINED_KEY, "Steady output tok/s", 1),  # the whole window's where a run has no steady interval
    ("median_ttft_ms", "TTFT p50 ms", 1),
    ("p99_ttft_ms", "TTFT p99 ms", 1),
    ("median_tpot_ms", "TPOT p50 ms", 2),
    ("median_e2el_ms", "E2E p50 ms", 0),
    ("spec_decode_acceptance_length", "Acceptance length", 2),
    ("prefix_cache_hit_rate", "Prefix-cache hit rate", 2),  # near 1 with random prompts: the cell measured the cache
)


@dataclasses.dataclass(frozen=True)
class CellRow:
    """One grid point: its runs' figures as mean and 95% half-width, or why it has none."""

    variant: str
    values: Mapping[str, Any]  # the point's crossed values (concurrency, max_tokens, ...)
    load: float | None
    run_ids: tuple[str, ...]
    figures: Mapping[str, tuple[float, float | None] | None]  # key -> (mean, half-width) or None
    status: str  # "done", or the journal's / the runs' word for it
    reason: str
    incomplete: tuple[str, ...] = ()  # its runs that are no complete cell: listed apart, never averaged


@dataclasses.dataclass(frozen=True)
class Figure:
    name: str  # crossover, pareto, ...
    caption: str
    svg: str  # the SVG document as matplotlib wrote it
    lines: tuple[str, ...]  # what it says in words (crossings, the frontier)


def _sweep_key(flat: Mapping[str, Any]) -> dict[str, Any] | None:
    text = flat.get("sweep_cell")
    if not isinstance(text, str):
        return None
    try:
        key = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return key if isinstance(key, dict) else None


def _ident(variant: str, values: Mapping[str, Any]) -> str:
    """A grid point's identity, as text."""
    return orjson.dumps({"variant": variant, **values}, option=orjson.OPT_SORT_KEYS).decode()


def _point_values(point: RunPoint) -> tuple[str, dict[str, Any]]:
    """The grid point a run measured: (variant, its crossed values)."""
    key = _sweep_key(point.flat)
    if key is not None:
        return str(key.get("variant") or point.variant), {k: v for k, v in key.items() if k not in ("variant",
                                                                                                     "repeat")}
    values: dict[str, Any] = {}
    if point.concurrency is not None:
        values["concurrency"] = point.concurrency
    if point.request_rate is not None:
        values["request_rate"] = point.request_rate
    return point.variant, values


def _load_of(values: Mapping[str, Any]) -> float | None:
    for key in ("concurrency", "request_rate"):
        value = values.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def cell_rows(points: Sequence[RunPoint], journal: Sequence[Mapping[str, Any]] = ()) -> list[CellRow]:
    """The table of cells: a row per grid point with runs (complete runs averaged; a point whose runs
    all ended otherwise shows why), and a row per point the journal recorded failed or skipped that has
    no complete run. Ordered by variant, then the values (load last)."""
    grouped: dict[str, tuple[str, dict[str, Any], list[RunPoint]]] = {}
    several = len({point.sweep for point in points}) > 1  # two sweeps' runs at one point are never repeats
    for point in points:
        variant, values = _point_values(point)
        if several:
            variant = f"{point.sweep or '(no sweep)'}: {variant}"
        grouped.setdefault(_ident(variant, values), (variant, values, []))[2].append(point)
    rows: list[CellRow] = []
    for variant, values, runs in grouped.values():
        done = complete_points(runs)
        figures: dict[str, tuple[float, float | None] | None] = {}
        for key, _, _ in COLUMNS:
            numbers = [v for p in done if (v := p.value(key)) is not None]
            if not numbers:
                figures[key] = None
                continue
            mean, low, high = mean_interval(numbers)
            figures[key] = (mean, (high - mean) if len(numbers) > 1 else None)
        left = tuple(p.run_id for p in runs if not p.complete)
        why = ", ".join(sorted({flat_why(p.flat) for p in runs if not p.complete}))
        if done:
            status, reason = "done", ""
        elif any(flat_failed(p.flat) for p in runs):  # the server did not work: a failed cell
            status, reason = "failed", why
        else:
            status, reason = "incomplete", why
        rows.append(CellRow(variant, values, _load_of(values), tuple(p.run_id for p in done), figures, status,
                            reason, left))
    seen = {_ident(r.variant, r.values) for r in rows if r.status == "done"}
    latest: dict[str, tuple[str, dict[str, Any], str, str]] = {}
    for event in journal:
        if event.get("event") not in ("failed", "skipped", "incomplete") or not isinstance(event.get("cell"), str):
            continue
        cell = _sweep_key({"sweep_cell": event["cell"]})
        if cell is None:
            continue
        cell_variant = str(cell.get("variant") or NO_VARIANT)
        cell_values = {k: v for k, v in cell.items() if k not in ("variant", "repeat")}
        if _ident(cell_variant, cell_values) not in seen:  # the last event of a point not done says why
            latest[_ident(cell_variant, cell_values)] = (cell_variant, cell_values, str(event["event"]),
                                                         str(event.get("reason") or ""))
    by_ident = {_ident(r.variant, r.values): i for i, r in enumerate(rows)}
    for ident, (variant, values, status, reason) in latest.items():
        if ident in by_ident:  # runs, none complete: the journal says why
            row = rows[by_ident[ident]]
            rows[by_ident[ident]] = dataclasses.replace(row, status=status, reason=reason or row.reason)
        else:
            rows.append(CellRow(variant, values, _load_of(values), (), {k: None for k, _, _ in COLUMNS}, status,
                                reason))

    def order(row: CellRow) -> tuple[Any, ...]:
        others = tuple(str(v) for k, v in sorted(row.values.items()) if k not in ("concurrency", "request_rate"))
        return (row.variant, others, row.load if row.load is not None else math.inf)

    return sorted(rows, key=order)


def _fmt(figure: tuple[float, float | None] | None, digits: int) -> str:
    if figure is None:
        return ""
    mean, half = figure
    text = f"{mean:,.{digits}f}"
    return text + (f" ± {half:,.{digits}f}" if half is not None else "")


def _values_text(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v if not isinstance(v, (list, dict)) else orjson.dumps(v).decode()}"
                     for k, v in values.items()) or "-"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _status_text(row: CellRow) -> str:
    text = row.status + (f": {row.reason}" if row.reason else "")
    if row.incomplete and row.status == "done":
        n = len(row.incomplete)
        text += f" ({n} incomplete run{'s' if n != 1 else ''} not averaged: see Incomplete runs)"
    return text


def cells_table_markdown(rows: Sequence[CellRow]) -> str:
    head = ["Variant", "Point", "Runs", *(label for _, label, _ in COLUMNS), "Status"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        status = _status_text(row)
        cells = [row.variant, _values_text(row.values), str(len(row.run_ids)),
                 *(_fmt(row.figures.get(key), digits) for key, _, digits in COLUMNS), status]
        lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
    return "\n".join(lines)


# -- the figures, inline --------------------------------------------------------------------------

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


# -- the page ---------------------------------------------------------------------------------------

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
        status = html.escape(_status_text(row))
        figures = "".join(f'<td class="num">{html.escape(_fmt(row.figures.get(key), digits))}</td>'
                          for key, _, digits in COLUMNS)
        out.append(f"<tr{_row_class(row)}><td>{html.escape(row.variant)}</td>"
                   f"<td>{html.escape(_values_text(row.values))}</td><td>{runs or '-'}</td>{figures}"
                   f"<td>{status}</td></tr>")
    out += ["</tbody>", "</table>"]
    return "\n".join(out)


# -- the runs no cell averages ------------------------------------------------------------------------

INCOMPLETE_HEAD = ("Run", "Variant", "Point", "Status", "Completed", "Why")


def incomplete_rows(points: Sequence[RunPoint]) -> list[tuple[str, ...]]:
    """A row per run that is no complete cell (collapsed, interrupted, capped before its first completion,
    stopped early: runfile.is_complete), as INCOMPLETE_HEAD: listed apart, never averaged into the cells table
    or a figure."""
    rows: list[tuple[str, ...]] = []
    for point in points:
        if point.complete:
            continue
        variant, values = _point_values(point)
        completed, total = point.flat.get("completed"), point.flat.get("num_prompts")
        done = f"{completed}/{total}" if completed is not None and total is not None else str(completed or "-")
        rows.append((point.run_id, variant, _values_text(values), point.status, done,
                     flat_why(point.flat)))
    return rows


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


def counts_text(points: Sequence[RunPoint], rows: Sequence[CellRow]) -> str:
    """The page's count of runs and grid points: the complete runs (those the table and the figures
    average) and, apart, the incomplete ones."""
    complete = sum(p.complete for p in points)
    text = f"{complete} complete run{'s' if complete != 1 else ''}, {len(rows)} grid point" + (
        "s" if len(rows) != 1 else "")
    left = len(points) - complete
    if left:
        text += f" (and {left} incomplete run{'s' if left != 1 else ''}, listed apart and not averaged)"
    return text


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
    """The whole page (see the module docstring)."""
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


# -- the study card ---------------------------------------------------------------------------------

def _span(values: Sequence[float]) -> str:
    if not values:
        return ""
    low, high = min(values), max(values)
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def render_study_card(title: str, points: Sequence[RunPoint], rows: Sequence[CellRow], *,
                      configuration: Sequence[tuple[str, str]], commands: Sequence[str], notes: Sequence[str],
                      figure_file: str | None) -> str:
    """The Markdown study card, in the run cards' layout."""
    models = sorted({str(p.flat.get("model_id")) for p in points if p.flat.get("model_id")})
    variants = sorted({r.variant for r in rows})
    loads = sorted({r.load for r in rows if r.load is not None})
    head = [title, *models[:2], " vs ".join(variants)]
    if loads:
        head.append(f"conc {_span(loads)}")
    failed = [r for r in rows if r.status not in ("done", "skipped")]
    done = sum(r.status == "done" for r in rows)
    status = "done" if not failed else f"partial ({done} of {len(rows)} points done)"
    lines = [f"# {' · '.join(h for h in head if h)}", "", f"status: {status}", "", "## Configuration", ""]
    lines += ["| " + " | ".join(_md_cell(x) for x in pair) + " |" for pair in configuration[:1]]
    lines.append("|---|---|")
    lines += ["| " + " | ".join(_md_cell(x) for x in pair) + " |" for pair in configuration[1:]]
    lines += ["", "## Measured results", "", cells_table_markdown(rows), ""]
    incomplete = incomplete_rows(points)
    if incomplete:
        lines += ["Incomplete runs (kept, not averaged into the table or the figures):", "",
                  "| " + " | ".join(INCOMPLETE_HEAD) + " |", "|" + "---|" * len(INCOMPLETE_HEAD)]
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in incomplete]
        lines.append("")
    if figure_file is not None:
        lines += [f"![The crossover: per-stream decode rate and aggregate throughput against load]({figure_file})",
                  ""]
    lines += ["## Full run command", "", "```", *commands, "```", "", "## Notes", ""]
    lines += [f"- {n}" for n in notes]
    return escape_markdown("\n".join(lines)) + "\n"  # labels and model names never become raw HTML


# -- both ---------------------------------------------------------------------------------------------

FIGURE_CAPTIONS = {
    "crossover": "Per-stream decode rate (median of each request's own rate) and steady-state aggregate output "
                 "throughput against load, one line per variant; where the lines cross is marked.",
    "pareto": "Per-stream rate against steady-state aggregate throughput, one point per variant and load; the "
              "Pareto frontier joined.",
    "latency": "TTFT, TPOT, ITL and E2E latency p50 / p90 / p99 against load.",
    "acceptance": "Speculative decoding: mean acceptance length (server) and tokens per chunk (client), and "
                  "per-position acceptance, against load.",
}


def draw_figures(points: Sequence[RunPoint], out_dir: Path) -> list[Figure]:
    """The study's figures, each written as OUT/NAME.svg and .png with its numbers in OUT/NAME.json (as
    `fastbench plot` writes them, with ``left_out``: the incomplete runs no point averages); a figure
    the runs cannot make (no speculative decoding, no load) is left out. Only complete runs reach the
    drawing."""
    import importlib.util

    from fastbench.study import plots  # matplotlib only now

    if importlib.util.find_spec("matplotlib") is None:  # else every figure would be left out, silently
        raise ConfigError("fastbench report draws its figures with matplotlib: pip install 'fastbench-llm[plot]'")
    drawn: list[Figure] = []
    complete, left = complete_points(points), left_out(points)
    for name, draw in (("crossover", plots.draw_crossover), ("pareto", plots.draw_pareto),
                       ("latency", plots.draw_latency), ("acceptance", plots.draw_acceptance)):
        try:
            paths, summary = draw(complete, out_dir, ("svg", "png"))
        except ConfigError:
            continue
        write_bytes_atomic(out_dir / f"{summary.get('figure', name)}.json", orjson.dumps(
            {**summary, "left_out": left}, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
        svg = next(p for p in paths if p.suffix == ".svg").read_text(encoding="utf-8")
        drawn.append(Figure(name, FIGURE_CAPTIONS[name], svg, tuple(summary.get("lines", ()))))
    return drawn + _timelines(complete, out_dir)


MAX_TIMELINES = 8  # a run over time each, for the first complete runs: a 24-cell study's page stays readable


def _timelines(points: Sequence[RunPoint], out_dir: Path) -> list[Figure]:
    """Each of the first MAX_TIMELINES complete runs over time, as `fastbench plot timeline` draws it (the
    curves the live view showed: in flight, tokens/s, latency quantiles second by second, the server's
    gauges); the runs past them are named in the last one's lines."""
    from fastbench.study import plots

    drawn: list[Figure] = []
    for point in points[:MAX_TIMELINES]:
        try:
            paths, summary = plots.draw_timeline(point, point_document(point), point_records(point), out_dir,
                                                 ("svg",))
        except FastbenchError:  # nothing kept to draw over time, or its files cannot be read: no figure
            continue
        svg = paths[0].read_text(encoding="utf-8")
        drawn.append(Figure(str(summary["figure"]), f"Run {point.run_id} over time ({point.variant}): requests in "
                            "flight, output tokens/s, latency p50 / p99 each second, the server's gauges.", svg, ()))
    if len(points) > MAX_TIMELINES and drawn:
        last = drawn[-1]
        drawn[-1] = dataclasses.replace(last, lines=(f"runs over time: the first {MAX_TIMELINES} of {len(points)} "
                                                     "drawn (fastbench plot timeline RUN draws any other)",))
    return drawn


def write_report(points: Sequence[RunPoint], out_dir: Path, *, title: str, source: str, commands: Sequence[str],
                 journal: Sequence[Mapping[str, Any]] = (), configuration: Sequence[tuple[str, str]] = ()
                 ) -> tuple[Path, Path]:
    """Draw the figures and write OUT/report.html and OUT/study.md; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = draw_figures(points, out_dir)
    rows = cell_rows(points, journal)
    notes = list(dict.fromkeys(line for figure in figures for line in figure.lines))  # each line once
    notes += [f"{r.variant} {_values_text(r.values)}: {r.status}{': ' + r.reason if r.reason else ''}"
              for r in rows if r.status != "done"]
    for point in points:  # a run whose server's cache hit far more than its prompts share (results/)
        warning = point.flat.get("prefix_cache_warning")
        if isinstance(warning, str) and warning:
            variant, values = _point_values(point)
            notes.append(f"{variant} {_values_text(values)}, run {point.run_id}: prefix cache: {warning}")
    notes.append("per-stream decode rate: the median over requests of (output tokens - 1) / (E2E latency - TTFT); "
                 "vllm bench sweep's \"per user\" rate divides aggregate throughput by concurrency instead")
    notes += [x for x in (THROUGHPUT_TEXT, runs_fallback_line(points))
              if x and x not in notes]  # the figures' lines may say it already
    created = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %z")
    subtitle = f"{counts_text(points, rows)} · {source} · made {created} by fastbench report"
    page = render_html(title, subtitle, figures, rows, points, notes)
    html_path = out_dir / HTML_FILE
    write_bytes_atomic(html_path, page.encode("utf-8"))
    variants = sorted({r.variant for r in rows})
    config_rows = [("Study", title), *configuration,
                   ("Variants", ", ".join(variants)),
                   ("Runs", f"{counts_text(points, rows)} ({source})"),
                   ("Made", f"{created} · fastbench report")]
    card = render_study_card(title, points, rows, configuration=config_rows, commands=commands, notes=notes,
                             figure_file="crossover.svg" if any(f.name == "crossover" for f in figures) else None)
    card_path = out_dir / CARD_NAME
    write_bytes_atomic(card_path, card.encode("utf-8"))
    return html_path, card_path
