"""`fastbench report` without a browser (tests/study/test_report_browser.py opens the page in one): the card
renderer, the cells table, the inlined figures, one run over time and per-position acceptance computed
on inputs whose answer is known, and the report end to end on a small real sweep: one file that names
nothing outside itself, and a study card in the run cards' layout."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import orjson
import pytest

from support.study import fastbench, make_study
from fastbench.study.cells import cell_rows
from fastbench.study.figures_data import RunPoint
from fastbench.study.markdown import render
from fastbench.study.report_html import inline_svg
from fastbench.study.runfile import load_result
from fastbench.study.store import Store
from fastbench.study.timeline import in_flight_steps, timeline, token_rate

# lint, types, layout, plots, docs: no native path of their own (the sanitizer stage leaves them out)
pytestmark = pytest.mark.pure_python

# -- the card renderer -----------------------------------------------------------------------------


def test_markdown_renders_the_cards_subset_and_escapes_everything() -> None:
    page = render("# T · <b>x</b>\n\nstatus: done\n\n## Configuration\n\n| Model | a<script> |\n|---|---|\n"
                  "| Rate | 1 \\| 2 |\n\n```\nfastbench --x '<y>'\n```\n\n- one `c<d`\n- **two**\n  more\n")
    assert "<h1>T · &lt;b&gt;x&lt;/b&gt;</h1>" in page and "<h2>Configuration</h2>" in page
    assert "<p>status: done</p>" in page
    assert "<th>Model</th><th>a&lt;script&gt;</th>" in page and "<td>Rate</td><td>1 | 2</td>" in page
    assert "<pre><code>fastbench --x &#x27;&lt;y&gt;&#x27;</code></pre>" in page
    assert "<li>one <code>c&lt;d</code></li>" in page and "<li><strong>two</strong> more</li>" in page
    assert "<script" not in page


def test_markdown_links_to_urls_stay_text_and_in_page_links_work() -> None:
    page = render("see [docs](https://example.com/x) and [the cell](#run-1) and [f](data:text/html,hi)")
    assert "href" not in page.replace('href="#run-1"', "")
    assert "docs (https://example.com/x)" in page and '<a href="#run-1">the cell</a>' in page


# -- one run over time -------------------------------------------------------------------------------


def test_in_flight_counts_sends_and_ends_ends_first_at_one_instant() -> None:
    times, counts = in_flight_steps(np.array([0.0, 1.0, 2.0]), np.array([2.0, 3.0, 4.0]))
    assert list(times) == [0.0, 1.0, 2.0, 2.0, 3.0, 4.0]
    assert list(counts) == [1, 2, 1, 2, 1, 0]  # at t = 2 one ended and one was sent: never 3


def test_token_rate_puts_the_first_token_at_its_stamp_and_spreads_the_rest() -> None:
    # one request: first token at 0.5 s, 9 more spread evenly up to 1.5 s; 4 bins of 0.5 s over 2 s
    (centres, rates), width = token_rate(np.array([0.5]), np.array([1.5]), np.array([10.0]), 2.0, bins=4)
    assert width == 0.5 and list(centres) == [0.25, 0.75, 1.25, 1.75]
    # bin [0.5, 1): the first token and half the other 9; [1, 1.5): the other half
    assert list(rates * width) == pytest.approx([0.0, 5.5, 4.5, 0.0])
    assert (rates * width).sum() == pytest.approx(10.0)


def test_timeline_puts_gauges_and_memory_on_the_requests_clock() -> None:
    start = 5_000_000_000  # the window starts at 5 s on CLOCK_MONOTONIC
    records = [{"id": i, "status": "completed", "sent_ns": start + i * 10**9, "sent_ms": i * 1000.0,
                "first_token_ns": start + i * 10**9 + 10**8, "end_ns": start + i * 10**9 + 5 * 10**8,
                "ttft_ms": 100.0 + i, "output_tokens": 5} for i in range(3)]
    records.append({"id": 3, "status": "failed", "sent_ns": start + 2_500_000_000, "sent_ms": 2500.0,
                    "end_ns": start + 2_600_000_000, "ttft_ms": None, "output_tokens": 0})
    doc = {"duration": 3.0, "fastbench": {"server": {
        "server_metrics": {"available": True, "gauges": {"t0_monotonic_s": 6.0, "samples": [
            {"t_s": 0.0, "running": 1.0, "waiting": 0.0, "kv_cache_usage": 0.25},
            {"t_s": 1.0, "running": 2.0, "waiting": 1.0, "kv_cache_usage": None}]}},
        "memory_series": {"t0_monotonic_ns": 4_000_000_000, "series": {
            "t_s": [0.0, 2.0], "server_rss_bytes": [2**30, None], "mem_available_drop_bytes": [0, 2**31],
            "gpus": [{"label": "GPU0", "used_bytes": [2**32, 2**32 + 2**30]}]}}},
        # the live sampler's seconds: already on the window's clock; a None sample is left out
        "timeline": {"t0_monotonic_ns": start, "interval_s": 1.0, "columns": {
            "t_s": [1.0, 2.0, 3.0], "tokens_per_s": [5.0, 5.0, 5.0], "itl_p99_ms": [None, 12.5, 13.0]}}}}
    line = timeline(doc, records)
    assert list(line.ttft[0]) == [0.0, 1.0, 2.0] and list(line.ttft[1]) == [100.0, 101.0, 102.0]
    assert list(line.failed_sends) == [2.5]
    assert line.in_flight[1].max() == 1  # each ends before the next is sent
    assert list(line.server["running"][0]) == [1.0, 2.0]  # read 1 s into the window, then 2 s
    assert list(line.server["kv_cache_usage"][1]) == [25.0]
    assert list(line.memory["server RSS"][0]) == [-1.0]  # sampled from 1 s before the window
    assert list(line.memory["MemAvailable drop"][1]) == [0.0, 2.0]
    assert list(line.memory["GPU0 used"][1]) == [4.0, 5.0]
    assert line.missing == ()
    assert (line.tokens_per_s[1] * line.bin_s).sum() == pytest.approx(15.0)
    assert list(line.sampled["itl_p99_ms"][0]) == [2.0, 3.0] and list(line.sampled["itl_p99_ms"][1]) == [12.5, 13.0]
    assert list(line.sampled["tokens_per_s"][1]) == [5.0, 5.0, 5.0]
    bare = timeline({"duration": 1.0, "fastbench": {}}, None)
    assert len(bare.missing) == 4 and "no per-request records" in bare.missing[0]
    assert "no timeline kept" in bare.missing[-1] and bare.sampled == {}


# -- the cells table -----------------------------------------------------------------------------------


def cell(variant: str, conc: int, repeat: int, rate: float, reason: str = "completed") -> RunPoint:
    key = orjson.dumps({"concurrency": conc, "repeat": repeat, "variant": variant}).decode()
    return RunPoint(f"{variant}-{conc}-{repeat}", variant, conc, None,
                    {"sweep_cell": key, "median_decode_rate_tok_s": rate, "stopped_reason": reason}, None)


def test_cells_average_repeats_and_the_journal_adds_what_failed() -> None:
    points = [cell("b", 2, 0, 10.0), cell("b", 2, 1, 14.0), cell("b", 1, 0, 20.0), cell("a", 1, 0, 5.0),
              cell("a", 2, 0, 1.0, reason="max error rate")]
    journal = [{"event": "failed", "cell": orjson.dumps({"concurrency": 4, "repeat": 0, "variant": "b"}).decode(),
                "reason": "connection refused"},
               {"event": "incomplete", "cell": orjson.dumps({"concurrency": 2, "repeat": 0, "variant": "a"}).decode(),
                "reason": "max error rate"},
               {"event": "failed", "cell": orjson.dumps({"concurrency": 1, "repeat": 0, "variant": "b"}).decode(),
                "reason": "an earlier failure, since done"}]
    rows = cell_rows(points, journal)
    assert [(r.variant, r.load, r.status) for r in rows] == [
        ("a", 1.0, "done"), ("a", 2.0, "incomplete"), ("b", 1.0, "done"), ("b", 2.0, "done"), ("b", 4.0, "failed")]
    mean, half = rows[3].figures["median_decode_rate_tok_s"] or (0.0, None)
    assert mean == 12.0 and half == pytest.approx(12.706 * 2 * 2**0.5 / 2**0.5)  # s = 2.83, n = 2
    assert rows[2].figures["median_decode_rate_tok_s"] == (20.0, None)  # one run: no interval
    assert rows[1].reason == "max error rate" and rows[1].figures["median_decode_rate_tok_s"] is None
    assert rows[4].reason == "connection refused" and rows[4].run_ids == ()


def test_inline_svg_drops_what_names_urls_and_prefixes_ids() -> None:
    svg = ('<?xml version="1.0"?>\n<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/x.dtd">\n'
           '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
           '<metadata><rdf:RDF xmlns:dc="http://purl.org/dc/elements/1.1/"/></metadata>'
           '<defs><path id="m1" d="M0 0"/><clipPath id="p2"/></defs>'
           '<use xlink:href="#m1"/><g clip-path="url(#p2)"/></svg>')
    out = inline_svg(svg, "f")
    assert "http" not in out and out.startswith("<svg>")
    assert 'id="f-m1"' in out and 'xlink:href="#f-m1"' in out and "url(#f-p2)" in out


# -- end to end ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("report")
    make_study(where)
    return where


@pytest.fixture(scope="module")
def reported(study: Path) -> Path:
    """`fastbench report` of the sweep, into study/rep."""
    done = fastbench("report", "study.toml", "--out", "rep", cwd=study)
    assert done.returncode == 0, done.stderr
    assert "wrote rep/report.html (self-contained), rep/study.md" in done.stdout
    return study / "rep"


def test_report_of_a_sweep_is_one_file_that_names_nothing_outside_itself(study: Path, reported: Path) -> None:
    page = (study / "rep" / "report.html").read_text()
    # a URL may be read in the text (a failed cell's reason names the server it tried), never in markup
    for tag in re.findall(r"<[^>]*>", page):
        assert "://" not in tag, tag
    style = page.split("<style>", 1)[1].split("</style>", 1)[0]
    assert "url(" not in style and "@import" not in style
    for attribute in re.findall(r'\b(?:src|href)\s*=\s*"([^"]*)"', page):
        assert attribute.startswith("#") or attribute.startswith("data:"), attribute
    assert not re.search(r"url\((?!#)", page) and "<script" not in page
    assert "default-src 'none'" in page
    assert page.count("<svg") >= 3 and page.count('<details id="run-') == 4
    with Store(study / "store") as store:
        runs = store.query(label="demo-study")
    assert len(runs) == 4 and all(f'id="run-{r.run_id}"' in page for r in runs)
    # each run over time, drawn inline as `fastbench plot timeline` draws it
    assert all(f'id="figure-timeline-{r.run_id}"' in page for r in runs)
    # each run's card is there, rendered (its first heading, its tables)
    assert page.count("<h2>Measured results</h2>") == 4
    # the gone variant's two points failed, with the reason the journal recorded
    assert len(re.findall(r'<tr class="failed">', page)) == 2


def test_the_study_card_is_in_the_run_cards_layout(reported: Path) -> None:
    card = (reported / "study.md").read_text()
    headings = [line for line in card.splitlines() if line.startswith("#")]
    assert headings[0].startswith("# demo-study · fastbench-synthetic · base vs gone vs spec · conc 1-2")
    assert headings[1:] == ["## Configuration", "## Measured results", "## Full run command", "## Notes"]
    assert "\nstatus: partial (4 of 6 points done)\n" in card
    assert "| Backend | openai |" in card and "| Endpoint |" not in card  # vllm's endpoint_type is the backend
    assert "![The crossover" in card and "(crossover.svg)" in card and (reported / "crossover.svg").is_file()
    table = [line for line in card.splitlines() if line.startswith("| base ") or line.startswith("| gone ")
             or line.startswith("| spec ")]
    assert len(table) == 6 and sum("| failed: " in line for line in table) == 2
    assert "fastbench sweep study.toml" in card and "fastbench report study.toml --out rep" in card


def test_report_of_a_store_query_and_of_runs_named(study: Path) -> None:
    done = fastbench("report", "--store", "store", "--variant", "spec", "--out", "only-spec", "--title", "Spec",
                     cwd=study)
    assert done.returncode == 0, done.stderr
    page = (study / "only-spec" / "report.html").read_text()
    assert "<title>Spec</title>" in page and page.count('<details id="run-') == 2
    with Store(study / "store") as store:
        first = store.query(variant="base")[0]
    done = fastbench("report", first.run_id[:20], "store/runs/" + first.run_id, "--store", "store", "--out", "named",
                     cwd=study)
    assert done.returncode == 0, done.stderr
    assert (study / "named" / "report.html").read_text().count('<details id="run-') == 2


def test_report_bad_input_is_one_line(study: Path) -> None:
    for args, words in ((("report", "study.toml", "store"), "not a mix"),
                        (("report", "study.toml", "--variant", "none*"), "no runs of the sweep 'demo-study'"),
                        (("report", "--store", "store", "--sweep", "nothing"), "no runs of the sweep 'nothing'"),
                        (("report", "--store", "store", "--label", "x*"), "no runs to report"),
                        (("report", "--store", "nowhere"), "no fastbench store")):
        done = fastbench(*args, "--out", "bad", cwd=study)
        assert done.returncode == 2, (args, done.stdout)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("fastbench report: error:") and words in line, (args, line)


def test_timeline_and_per_position_figures_from_the_store(study: Path) -> None:
    with Store(study / "store") as store:
        spec = store.query(variant="spec")
    done = fastbench("plot", "timeline", spec[-1].run_id, "--store", "store", "--out", "plots", cwd=study)
    assert done.returncode == 0, done.stderr
    summary = orjson.loads((study / "plots" / f"timeline-{spec[-1].run_id}.json").read_bytes())
    doc = load_result(Path(spec[-1].folder) / "result.json")
    assert summary["panels"][:3] == ["requests", "tokens", "ttft"]
    assert summary["requests_with_ttft"] == doc["completed"] and summary["max_in_flight"] == doc["max_concurrency"]
    # the live sampler's seconds: latency quantiles drawn, the last sample the result's own counts
    assert "latency" in summary["panels"] and {"ttft_p50_ms", "itl_p99_ms"} <= set(summary["latency_series"])
    columns = doc["fastbench"]["timeline"]["columns"]
    assert columns["completed"][-1] == doc["completed"] and max(columns["in_flight"]) <= doc["max_concurrency"]
    assert any("memory: not sampled" in m for m in summary["missing"])
    assert "not kept: memory" in done.stdout
    done = fastbench("plot", "acceptance", "--store", "store", "--out", "plots", cwd=study)
    assert done.returncode == 0, done.stderr
    acceptance = orjson.loads((study / "plots" / "acceptance.json").read_bytes())
    positions = acceptance["per_position"]
    rates = {float(r.meta.concurrency or 0): load_result(Path(r.folder) / "result.json")[
        "spec_decode_per_position_acceptance_rates"] for r in spec}
    assert len(positions) == len(rates[1.0]) >= 1
    for i, series in enumerate(positions):
        assert [(c["load"], c["mean"]) for c in series["spec"]] == [(load, pytest.approx(r[i]))
                                                                   for load, r in sorted(rates.items())]


def test_the_report_states_a_runs_prefix_cache_warning(tmp_path: Path) -> None:
    from fastbench.study.report import write_report

    warning = "hit rate 0.98 where random prompts share about 0: TTFT and prefill measure the cache"
    points = [RunPoint(f"r{i}", "base", conc, None,
                       {"median_decode_rate_tok_s": 50.0 + i, "output_throughput": 100.0 * conc,
                        "stopped_reason": "completed", "completed": 4,
                        **({"prefix_cache_warning": warning} if i else {})}, None)
              for i, conc in enumerate((1, 2))]
    _, card = write_report(points, tmp_path, title="t", source="test", commands=["fastbench report"])
    notes = card.read_text().split("## Notes", 1)[1]
    assert f"- base concurrency=2, run r1: prefix cache: {warning}" in notes.splitlines()
    assert "run r0" not in notes
