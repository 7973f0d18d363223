"""``fastbench report``: the figures drawn, the runs grouped into cells, report.html and study.md written."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastbench.atomicfile import write_bytes_atomic
from fastbench.study.cells import cell_rows, counts_text, point_values, values_text
from fastbench.study.figures_data import RunPoint
from fastbench.study.report_figures import draw_figures
from fastbench.study.report_html import render_html
from fastbench.study.study_card import render_study_card
from fastbench.study.sustained import THROUGHPUT_TEXT, runs_fallback_line

__all__ = ("write_report",)


HTML_FILE = "report.html"
CARD_NAME = "study.md"


def write_report(points: Sequence[RunPoint], out_dir: Path, *, title: str, source: str, commands: Sequence[str],
                 journal: Sequence[Mapping[str, Any]] = (), configuration: Sequence[tuple[str, str]] = ()
                 ) -> tuple[Path, Path]:
    """Draw the figures and write OUT/report.html and OUT/study.md; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = draw_figures(points, out_dir)
    rows = cell_rows(points, journal)
    notes = list(dict.fromkeys(line for figure in figures for line in figure.lines))  # each line once
    notes += [f"{r.variant} {values_text(r.values)}: {r.status}{': ' + r.reason if r.reason else ''}"
              for r in rows if r.status != "done"]
    for point in points:  # a run whose server's cache hit far more than its prompts share (results/)
        warning = point.flat.get("prefix_cache_warning")
        if isinstance(warning, str) and warning:
            variant, values = point_values(point)
            notes.append(f"{variant} {values_text(values)}, run {point.run_id}: prefix cache: {warning}")
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
