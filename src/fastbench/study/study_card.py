"""The study card, study.md: the report's Markdown, in the run cards' layout."""

from __future__ import annotations

from collections.abc import Sequence

from fastbench.results.card import escape_markdown
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

__all__ = ("cells_table_markdown", "render_study_card")


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def cells_table_markdown(rows: Sequence[CellRow]) -> str:
    head = ["Variant", "Point", "Runs", *(label for _, label, _ in COLUMNS), "Status"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        status = status_text(row)
        cells = [row.variant, values_text(row.values), str(len(row.run_ids)),
                 *(figure_text(row.figures.get(key), digits) for key, _, digits in COLUMNS), status]
        lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
    return "\n".join(lines)


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
