"""The study's figures: what they show computed exactly on inputs whose answer is known (series,
crossings with their intervals, the Pareto set, the percentile spectrum); that each figure reads at a
glance, measured on the rendered figure (labels, panels and titles overlapping nothing, log scales,
gauges as steps, titles without placeholders); and `fastbench plot` end to end on a small store of
real runs against the synthetic server."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import orjson
import pytest
from hdrh.histogram import HdrHistogram

from fastbench import BenchConfig, run
from fastbench.study import plots
from fastbench.study.figures_data import (
    NO_VARIANT,
    Cell,
    RunPoint,
    all_crossings,
    crossings,
    group_series,
    log_axis,
    mean_interval,
    pareto_front,
    spectrum,
)
from fastbench.study.runfile import load_result
from fastbench.study.store import Store

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen

# lint, types, layout, plots, docs: no native path of their own (the sanitizer stage leaves them out)
pytestmark = pytest.mark.pure_python


def cells(loads: list[float], means: list[float], half: float = 0.0) -> list[Cell]:
    return [Cell(x, (m,), m, m - half, m + half) for x, m in zip(loads, means)]


def point(variant: str, conc: int, **flat: float) -> RunPoint:
    return RunPoint(f"{variant}-{conc}-{len(flat)}", variant, conc, None, flat, None)


# -- series ------------------------------------------------------------------------------------------

def test_mean_interval_is_the_t_interval_of_the_mean() -> None:
    assert mean_interval([5.0]) == (5.0, 5.0, 5.0)
    mean, low, high = mean_interval([1.0, 3.0])  # s = sqrt(2), n = 2, t = 12.706
    assert mean == 2.0
    assert high - mean == pytest.approx(12.706 * math.sqrt(2) / math.sqrt(2))
    assert mean - low == pytest.approx(high - mean)
    mean, low, high = mean_interval([10.0, 12.0, 14.0])  # s = 2, n = 3, t = 4.303
    assert (mean, high) == (12.0, pytest.approx(12.0 + 4.303 * 2 / math.sqrt(3)))


def test_group_series_averages_the_repeats_of_each_cell_per_variant() -> None:
    points = [point("spec", 4, rate=10.0), point("base", 1, rate=50.0), point("base", 4, rate=30.0),
              point("spec", 4, rate=14.0), point("spec", 1, rate=80.0), point("base", 2)]  # no rate: left out
    series = group_series(points, "rate")
    assert list(series) == ["base", "spec"]
    assert [(c.load, c.values) for c in series["base"]] == [(1.0, (50.0,)), (4.0, (30.0,))]
    four = series["spec"][1]
    assert (four.load, four.values, four.mean) == (4.0, (10.0, 14.0), 12.0)
    assert four.low < 12.0 < four.high
    assert group_series([RunPoint("r", NO_VARIANT, None, 2.0, {"rate": 1.0}, None)], "rate") == {}
    by_rate = group_series([RunPoint("r", NO_VARIANT, None, 2.0, {"rate": 1.0}, None)], "rate", axis="rate")
    assert [c.load for c in by_rate[NO_VARIANT]] == [2.0]


# -- crossings ---------------------------------------------------------------------------------------

def test_two_lines_cross_where_they_are_equal_interpolated_between_cells() -> None:
    loads = [1.0, 2.0, 3.0, 5.0, 8.0]
    falling = cells(loads, [10 - x for x in loads])  # 10 - x and 2 + x meet at x = 4
    rising = cells(loads, [2 + x for x in loads])
    (found,) = crossings(falling, rising, names=("spec", "base"))
    assert found.load == pytest.approx(4.0)
    assert (found.first, found.second, found.first_above_before) == ("spec", "base", True)
    assert found.low is None and found.high is None  # no repeats: no interval
    (back,) = crossings(rising, falling)
    assert back.load == pytest.approx(4.0) and not back.first_above_before


def test_on_a_log_axis_the_crossing_is_interpolated_in_log_load() -> None:
    # 10 -> 2 and 2 -> 10 between loads 1 and 4: equal half way in log2, at load 2
    (found,) = crossings(cells([1.0, 4.0], [10.0, 2.0]), cells([1.0, 4.0], [2.0, 10.0]), log_x=True)
    assert found.load == pytest.approx(2.0)
    (linear,) = crossings(cells([1.0, 4.0], [10.0, 2.0]), cells([1.0, 4.0], [2.0, 10.0]))
    assert linear.load == pytest.approx(2.5)
    assert log_axis([1, 2, 4, 8]) and not log_axis([1, 2, 3]) and not log_axis([0, 8])


def test_only_shared_loads_count_and_parallel_lines_never_cross() -> None:
    assert crossings(cells([1, 2, 4], [5, 6, 7]), cells([1, 2, 4], [1, 2, 3])) == []
    # the second series lacks load 2: the crossing is interpolated between 1 and 4
    (found,) = crossings(cells([1, 2, 4], [10, 0, 4]), cells([1, 4], [4, 10]))
    assert found.load == pytest.approx(1 + 3 * 6 / 12)


def test_a_cell_where_the_lines_meet_exactly_is_the_crossing_and_a_touch_is_none() -> None:
    (found,) = crossings(cells([1, 2, 3], [3, 5, 7]), cells([1, 2, 3], [5, 5, 5]))
    assert found.load == 2.0
    assert crossings(cells([1, 2, 3], [3, 5, 3]), cells([1, 2, 3], [5, 5, 5])) == []


def test_two_crossings_are_both_found() -> None:
    found = crossings(cells([1, 2, 3, 4], [0, 2, 2, 0]), cells([1, 2, 3, 4], [1, 1, 1, 1]))
    assert [c.load for c in found] == pytest.approx([1.5, 3.5])
    assert [c.first_above_before for c in found] == [False, True]


def test_the_interval_is_where_the_two_bands_overlap() -> None:
    loads = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    # 10 - x and 2 + x, each +-1: they overlap where |8 - 2x| <= 2, from 3 to 5
    (found,) = crossings(cells(loads, [10 - x for x in loads], 1.0), cells(loads, [2 + x for x in loads], 1.0))
    assert found.load == pytest.approx(4.0)
    assert (found.low, found.high) == (pytest.approx(3.0), pytest.approx(5.0))
    assert not found.low_open and not found.high_open
    # wider bands (+-3): |8 - 2x| <= 6 from 1 to 7, the whole grid: open at both ends
    (wide,) = crossings(cells(loads, [10 - x for x in loads], 3.0), cells(loads, [2 + x for x in loads], 3.0))
    assert (wide.low, wide.high, wide.low_open, wide.high_open) == (pytest.approx(1.0), pytest.approx(7.0),
                                                                    True, True)
    # one series with an interval, the other without: overlap where |8 - 2x| <= 1, 3.5 to 4.5
    (half,) = crossings(cells(loads, [10 - x for x in loads], 1.0), cells(loads, [2 + x for x in loads]))
    assert (half.low, half.high) == (pytest.approx(3.5), pytest.approx(4.5))


def test_all_crossings_takes_every_pair() -> None:
    series = {"a": cells([1, 2], [0, 2]), "b": cells([1, 2], [1, 1]), "c": cells([1, 2], [5, 6])}
    assert [(c.first, c.second, c.load) for c in all_crossings(series)] == [("a", "b", 1.5)]


# -- Pareto ------------------------------------------------------------------------------------------

def test_the_pareto_front_keeps_the_undominated_points_by_rate_descending() -> None:
    points = [(100.0, 100.0), (90.0, 300.0), (80.0, 250.0), (50.0, 500.0), (50.0, 400.0), (95.0, 90.0),
              (20.0, 500.0)]
    # (80, 250) is beaten by (90, 300); (50, 400) by (50, 500); (95, 90) by (100, 100); (20, 500) by (50, 500)
    assert pareto_front(points) == [0, 1, 3]
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)]) == [0, 1]  # equal points: both kept
    assert pareto_front([]) == []


# -- spectrum ----------------------------------------------------------------------------------------

def test_the_spectrum_runs_from_the_median_side_to_the_last_sample() -> None:
    hist = HdrHistogram(1, 3_600_000_000_000, 3)
    for i in range(1, 1001):
        hist.record_value(i * 1_000_000)  # 1 .. 1000 ms
    xs, values = spectrum(hist)
    assert xs[0] == 1.0 and xs[-1] == pytest.approx(1000.0)  # 1 / (1 - p) up to the 1000th sample
    assert values[0] == pytest.approx(1.0, rel=1e-3)
    assert values[-1] == pytest.approx(1000.0, rel=1e-3)
    at_10 = values[list(xs).index(min(xs, key=lambda x: abs(x - 10)))]  # p90
    assert at_10 == pytest.approx(900.0, rel=1e-2)
    assert list(values) == sorted(values)
    empty_xs, _ = spectrum(HdrHistogram(1, 3_600_000_000_000, 3))
    assert len(empty_xs) == 0


# -- fastbench plot, end to end ----------------------------------------------------------------------

# Two "variants" of the synthetic server, each cell's speed set as a batch would slow it: base sends a
# token a chunk every 8 + 3c ms, spec three tokens a chunk every 14 + 12c ms (a drafter that pays off
# alone and costs more as the batch grows). Over 23 decode tokens a request's rate is 23 / (23 (8 + 3c))
# ms for base and 23 / (8 (14 + 12c)) ms for spec: spec ahead at c = 1 and 2 (110.6 and 75.7 tok/s
# against 90.9 and 71.4), behind at c = 4 (46.4 against 50.0); on a log axis the lines cross near 2.9.
VARIANTS = {"base": (1, lambda c: 8 + 3 * c), "spec": (3, lambda c: 14 + 12 * c)}
CONCURRENCIES = (1, 2, 4)


def fastbench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastbench", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of real runs: two variants x concurrency 1, 2, 4, the c = 2 cells run twice (repeats)."""
    where = tmp_path_factory.mktemp("study")
    for variant, (per_chunk, itl_ms) in VARIANTS.items():
        for c in CONCURRENCIES:
            for _ in range(2 if c == 2 else 1):
                run(BenchConfig(num_prompts=3 * c, concurrency=c, random_input_len=16, random_output_len=24,
                                store=where / "store", variant=variant,  # type: ignore[arg-type]
                                synthetic_args=("--ttft-ms", "5", "--itl-ms", str(itl_ms(c)),
                                                "--tokens-per-chunk", str(per_chunk))))
    return where


def test_plot_all_draws_the_crossover_pareto_latency_and_acceptance_figures_from_a_store(study: Path) -> None:
    done = fastbench("plot", "all", "--store", "store", "--out", "out", cwd=study)
    assert done.returncode == 0, done.stderr
    out = study / "out"
    for name in ("crossover", "pareto", "latency", "acceptance"):
        png, svg = (out / f"{name}.png").read_bytes(), (out / f"{name}.svg").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
        assert b"<svg" in svg[:1000] and len(svg) > 5_000
    summary = orjson.loads((out / "crossover.json").read_bytes())
    (crossing,) = summary["crossings"]["per_stream"]
    assert summary["log_load"] is True
    assert 2 < crossing["load"] < 4  # spec ahead at c = 2, base at c = 4 (see VARIANTS)
    assert crossing["ahead_below"] == "spec"
    # the c = 2 cells were repeated: an interval around the crossing, within the cells' span (two repeats
    # give a wide t-interval on a busy host, which can reach below c = 2 towards the c = 1 cells)
    assert crossing["low"] is not None and 1 <= crossing["low"] <= crossing["load"] <= crossing["high"] <= 4
    assert [len(c["runs"]) for c in summary["per_stream"]["spec"]] == [1, 2, 1]
    # the same crossing is printed, and written in the SVG as text (its title)
    assert crossing["text"] in done.stdout
    assert f"concurrency {crossing['load']:.3g}" in (out / "crossover.svg").read_text()
    pareto = orjson.loads((out / "pareto.json").read_bytes())
    frontier = [(p["variant"], p["load"]) for p in pareto["frontier"]]
    assert ("spec", 1.0) in frontier and ("base", 4.0) in frontier  # the fastest stream, the most throughput
    assert ("base", 1.0) not in frontier  # spec at c = 1 beats it on both
    assert "Pareto frontier: spec c=1" in done.stdout
    latency = orjson.loads((out / "latency.json").read_bytes())
    tpot = latency["metrics"]["tpot"]["p50"]
    assert [c["load"] for c in tpot["base"]] == [1.0, 2.0, 4.0]
    assert tpot["base"][0]["mean"] < tpot["base"][2]["mean"]  # 11 ms a token at c = 1, 20 at c = 4
    acceptance = orjson.loads((out / "acceptance.json").read_bytes())
    assert (out / "acceptance.png").read_bytes().startswith(b"\x89PNG")
    assert list(acceptance["acceptance_length"]) == ["spec"]  # base drafts nothing: no counters
    with Store(study / "store") as store:
        spec_runs = store.query(variant="spec")
        flat = store.flat([r.run_id for r in spec_runs])
    by_load: dict[float, list[float]] = {}
    for r in spec_runs:
        by_load.setdefault(float(r.meta.concurrency or 0), []).append(float(flat[r.run_id][1][
            "spec_decode_acceptance_length"]))
    assert [(c["load"], c["mean"]) for c in acceptance["acceptance_length"]["spec"]] == [
        (load, pytest.approx(sum(v) / len(v))) for load, v in sorted(by_load.items())]
    assert all(2 < c["mean"] <= 3 for c in acceptance["acceptance_length"]["spec"])  # 3 tokens a chunk at most
    assert [c["mean"] for c in acceptance["tokens_per_chunk"]["base"]] == [1.0, 1.0, 1.0]


def test_plot_filters_and_named_runs_and_the_spectrum(study: Path) -> None:
    with Store(study / "store") as store:
        runs = store.query(variant="spec")
    done = fastbench("plot", "crossover", "--store", "store", "--variant", "spec", "--format", "svg",
                     "--out", "only-spec", cwd=study)
    assert done.returncode == 0, done.stderr
    assert not (study / "only-spec" / "crossover.png").exists()
    summary = orjson.loads((study / "only-spec" / "crossover.json").read_bytes())
    assert list(summary["per_stream"]) == ["spec"] and summary["crossings"]["per_stream"] == []
    assert "per-stream rate: no crossing" in done.stdout
    last = runs[-1]
    done = fastbench("plot", "spectrum", last.run_id[:18], last.folder, "--store", "store", "--out", "spec",
                     cwd=study)
    assert done.returncode == 0, done.stderr
    spectrum_json = orjson.loads((study / "spec" / f"spectrum-{last.run_id}.json").read_bytes())
    doc = load_result(Path(last.folder) / "result.json")
    ttft = spectrum_json["metrics"]["ttft"]
    assert ttft["count"] == doc["completed"]
    # the histogram keeps 3 significant digits: its largest value is the result's within 0.1%
    assert ttft["max_ms"] == pytest.approx(doc["fastbench"]["distributions"]["ttft"]["max_ms"], rel=2e-3)
    assert (study / "spec" / f"spectrum-{last.run_id}.png").read_bytes().startswith(b"\x89PNG")


def test_plot_bad_input_is_one_line(study: Path) -> None:
    with Store(study / "store") as store:
        nine = [run.folder for run in store.query()] * 2
    for args, words in ((("plot", "crossover", "--store", "store", "--format", "jpg"), "--format"),
                        (("plot", "crossover", "--store", "store", "--variant", "spec", nine[0]), "not both"),
                        (("plot", "crossover", "--store", "nowhere"), "no fastbench store"),
                        (("plot", "crossover", "--store", "store", "--label", "nothing*"), "no runs to plot"),
                        (("plot", "spectrum", *nine[:9]), "at most 8"),
                        (("plot", "crossover", "--store", "store", "--x", "rate"), "request rate")):
        done = fastbench(*args, cwd=study)
        assert done.returncode == 2, (args, done.stdout)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("fastbench plot: error:") and words in line, (args, line)


# -- figures a person reads at a glance: measured on the rendered figure ------------------------------

def rendered(fig: Any) -> Any:
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def text_box(text: Any, renderer: Any) -> Any:
    """A text's own box in pixels (an annotation's get_window_extent would include its leader line)."""
    from matplotlib.text import Text

    return Text.get_window_extent(text, renderer)


def assert_apart(boxes: list[Any], what: str) -> None:
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), f"{what}: {a} overlaps {b}"


def cell_points(cells: dict[str, list[tuple[int, float, float]]]) -> list[RunPoint]:
    """variant -> (concurrency, per-stream rate, throughput) cells, one run each."""
    return [RunPoint(f"{variant}-{conc}", variant, conc, None,
                     {plots.PER_STREAM_KEY: rate, plots.THROUGHPUT_KEY: tput}, None)
            for variant, rows in cells.items() for conc, rate, tput in rows]


def batching(step_ms: float, per_seq_ms: float, accept: float) -> list[tuple[int, float, float]]:
    """A batching model's cells at concurrency 1..128 (bench/synthetic_study.py's, without noise)."""
    rows = []
    for conc in (1, 2, 4, 8, 16, 32, 64, 128):
        rate = accept * 1000.0 / (step_ms + per_seq_ms * conc)
        rows.append((conc, rate, conc * rate * 0.95))
    return rows


# Three variants whose cells crowd each other: base and eagle3 cross near c = 16, where a cell of each
# lies at the very same point (the "base c=16" over "eagle3 c=16" of a real study), ngram between them.
CROWDED = {"base": batching(10.0, 0.6, 1.0), "eagle3": batching(14.0, 2.0, 2.4), "ngram": batching(11.0, 1.3, 1.5)}
CROWDED["eagle3"][4] = CROWDED["base"][4]


def test_the_pareto_labels_overlap_nothing_and_name_every_cell() -> None:
    drawn = plots.figure_pareto(cell_points(CROWDED))
    fig = drawn.figure
    (ax,) = fig.axes
    renderer = rendered(fig)
    labels = [text_box(t, renderer) for t in ax.texts]
    assert_apart(labels, "pareto labels")
    panel = ax.get_window_extent(renderer)
    assert all(panel.x0 <= b.x0 and b.x1 <= panel.x1 and panel.y0 <= b.y0 and b.y1 <= panel.y1 for b in labels)
    centres = [ax.transData.transform(xy) for c in ax.collections for xy in c.get_offsets()]
    assert len(centres) == 24
    assert not [(c, b) for c in centres for b in labels if b.contains(*c)]  # no label covers a cell's marker
    assert ax.get_legend().get_window_extent(renderer).x0 > panel.x1  # the key is beside the panel, not on it
    texts = [t.get_text() for t in ax.texts]
    footnote = [t.get_text().replace("\n", " ") for t in fig.texts if t.get_text().startswith("Not labelled")]
    unlabelled = footnote[0].split(": ", 1)[1].split("; ") if footnote else []
    assert len(texts) + len(unlabelled) == 24  # each cell is named, on the panel or below it
    frontier = [f"{p['variant']} c={p['load']:.3g}" for p in drawn.summary["frontier"]]
    assert "base c=16" in frontier and "eagle3 c=16" in frontier  # both cells of the shared point, each named
    assert set(frontier) <= set(texts) | {u.split(" (")[0] for u in unlabelled}
    plt.close(fig)


def test_labels_with_no_room_are_named_below_the_figure_never_stacked() -> None:
    # 30 cells in a clump (one variant, loads 1..30, nearly equal figures) and one far away
    clump = [(c, 100.0 + 0.01 * c, 500.0 + 0.01 * c) for c in range(1, 31)] + [(64, 10.0, 5000.0)]
    fig = plots.figure_pareto(cell_points({"spec": clump})).figure
    (ax,) = fig.axes
    renderer = rendered(fig)
    assert_apart([text_box(t, renderer) for t in ax.texts], "crowded labels")
    (note,) = [t for t in fig.texts if t.get_text().startswith("Not labelled for want of room")]
    named = note.get_text().replace("\n", " ").split(": ", 1)[1].split("; ")
    assert len(ax.texts) + len(named) == 31 and len(named) > 0
    assert note.get_window_extent(renderer).y1 < ax.get_tightbbox(renderer).y0  # below the panel and its labels
    plt.close(fig)


def test_the_crossover_labels_each_crossing_apart_and_its_title_clears_the_panels() -> None:
    # three lines, straight in log load u = log2(c), crossing at u = 3.9, 4 and 4.1 (c = 14.9, 16, 17.1)
    lines = {"a": lambda u: 100 - 10 * u, "b": lambda u: 61 + 0 * u, "c": lambda u: 20 + 10 * u}
    points = cell_points({v: [(2**u, f(u), 10 * f(u)) for u in range(7)] for v, f in lines.items()})
    drawn = plots.figure_crossover(points)
    fig = drawn.figure
    renderer = rendered(fig)
    for ax, key in zip(fig.axes, ("per_stream", "throughput")):
        crossings_here = drawn.summary["crossings"][key]
        assert [c["load"] for c in crossings_here] == pytest.approx([2**3.9, 16.0, 2**4.1])
        assert len(ax.texts) >= 2  # at the foot of the lines, else at their top
        assert_apart([text_box(t, renderer) for t in ax.texts], f"{key} crossing labels")
        assert {t.get_text() for t in ax.texts} <= {f"{c['load']:.3g}" for c in crossings_here}
    panels = [ax.get_tightbbox(renderer) for ax in fig.axes]
    assert_apart([*panels, fig._suptitle.get_window_extent(renderer)], "crossover panels and title")
    plt.close(fig)


def test_the_latency_panels_titles_and_key_never_touch() -> None:
    points = [RunPoint(f"{variant}-{conc}", variant, conc, None,
                       {f"{stat}_{metric}_ms": scale * conc * (1 + k) for metric, scale in
                        (("ttft", 30.0), ("tpot", 5.0), ("itl", 7.0), ("e2el", 2590.0))
                        for k, stat in enumerate(("median", "p90", "p99"))}, None)
              for variant in ("base", "spec") for conc in (1, 4, 16, 64)]
    fig = plots.figure_latency(points).figure
    renderer = rendered(fig)
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes]  # each panel with its ticks, labels, title, key
    assert_apart([*boxes, fig._suptitle.get_window_extent(renderer)], "latency panels")
    assert all(ax.get_legend() is None for ax in fig.axes[:1] + fig.axes[2:])  # one key, for all four
    key = fig.axes[1].get_legend()
    assert [t.get_text() for t in key.get_texts()] == ["base", "spec", "p50", "p90", "p99"]
    plt.close(fig)


def encoded(values_ms: Any) -> dict[str, str]:
    hist = HdrHistogram(1, 3_600_000_000_000, 3)
    for v in values_ms:
        hist.record_value(int(v * 1e6))
    return {"data": hist.encode().decode()}


def test_the_spectrum_has_a_panel_per_figure_on_hdrhistograms_log_scales() -> None:
    # the case: E2E at ~2,590 ms beside TPOT at ~5 ms; ITL spans two decades (a slow tail)
    ms = np.linspace(0.0, 1.0, 2000)
    histograms = {"ttft": encoded(20 + 10 * ms[:200]), "tpot": encoded(5 + ms[:200]),
                  "itl": encoded(np.concatenate([3 + ms, [300.0] * 20])), "e2el": encoded(2500 + 100 * ms[:200])}
    point = RunPoint("r1", NO_VARIANT, 16, None, {}, None)
    drawn = plots.figure_spectrum(point, histograms)
    fig = drawn.figure
    axes = fig.axes
    assert [len(ax.get_lines()) for ax in axes] == [1, 1, 1, 1]  # one figure per panel
    assert all(ax.get_xscale() == "log" for ax in axes)
    assert len({ax.get_xlim() for ax in axes}) == 1  # percentiles line up down the page
    assert [t.get_text() for t in axes[2].get_xticklabels()] == ["0%", "90%", "99%", "99.9%", "99.99%"]
    scales = {ax.get_ylabel().split(" (")[0]: ax.get_yscale() for ax in axes}
    assert scales == {"TTFT": "linear", "TPOT": "linear", "ITL": "log", "E2E latency": "linear"}
    assert axes[1].get_ylim()[1] < 7 and axes[3].get_ylim()[1] > 2590  # each on its own scale
    itl = axes[2].get_lines()[0].get_ydata()
    assert itl[-1] == pytest.approx(300.0, rel=1e-3) and list(itl) == sorted(itl)  # up to the largest value
    assert drawn.title == "Latency by percentile: concurrency 16 (run r1)"
    renderer = rendered(fig)
    assert_apart([ax.get_tightbbox(renderer) for ax in axes], "spectrum panels")
    plt.close(fig)


def test_titles_say_what_is_known_and_no_placeholder() -> None:
    from fastbench.study.drawing import run_description

    assert run_description(RunPoint("r", NO_VARIANT, None, None, {}, None)) == ""
    assert run_description(RunPoint("r", "spec", 16, None, {}, None)) == "spec, concurrency 16"
    assert run_description(RunPoint("r", NO_VARIANT, None, 4.0, {}, None)) == "request rate 4/s"
    histograms = {"ttft": encoded([10.0, 20.0])}
    bare = plots.figure_spectrum(RunPoint("r2", NO_VARIANT, None, None, {}, None), histograms)
    assert bare.title == "Latency by percentile, run r2"
    plt.close(bare.figure)
    unnamed = [RunPoint(f"r{c}", NO_VARIANT, c, None, {plots.PER_STREAM_KEY: 100.0 / c,
                                                      plots.THROUGHPUT_KEY: 90.0 * c}, None) for c in (1, 2, 4)]
    for drawn in (plots.figure_pareto(unnamed), plots.figure_crossover(unnamed), plots.figure_latency(unnamed)):
        shown = [drawn.title, *(t.get_text() for t in drawn.figure.texts),
                 *(ax.get_title() for ax in drawn.figure.axes)]
        assert not [t for t in shown if NO_VARIANT in t], shown
        plt.close(drawn.figure)


def test_the_timeline_draws_the_servers_gauges_as_steps_at_their_reads() -> None:
    start = 5_000_000_000
    records = [{"id": i, "status": "completed", "sent_ns": start + i * 10**8, "sent_ms": i * 100.0,
                "first_token_ns": start + i * 10**8 + 10**7, "end_ns": start + i * 10**8 + 5 * 10**8,
                "ttft_ms": 10.0, "output_tokens": 5} for i in range(30)]
    reads = [{"t_s": 2.0 * k, "running": float(k % 3), "waiting": 0.0, "kv_cache_usage": 0.1 * k} for k in range(3)]
    doc = {"duration": 3.5, "fastbench": {"server": {
        "server_metrics": {"available": True, "gauges": {"t0_monotonic_s": 5.0, "samples": reads}}}}}
    point = RunPoint("r3", NO_VARIANT, 4, None, {}, None)
    drawn = plots.figure_timeline(point, doc, records)
    gauges = {line.get_label(): line for ax in drawn.figure.axes for line in ax.get_lines()
              if "at each read" in line.get_label()}
    assert set(gauges) == {"running (server, at each read)", "waiting (server, at each read)",
                           "KV-cache use\n(at each read)"}
    for line in gauges.values():
        assert line.get_drawstyle() == "steps-post" and line.get_marker() not in ("None", "", None)
        assert list(line.get_xdata()) == [0.0, 2.0, 4.0]  # a step at each read, nothing in between
    assert list(gauges["running (server, at each read)"].get_ydata()) == [0.0, 1.0, 2.0]
    assert drawn.title == "Run r3 over time: concurrency 4"
    renderer = rendered(drawn.figure)
    assert_apart([ax.get_tightbbox(renderer) for ax in drawn.figure.axes], "timeline panels")
    (note,) = [t for t in drawn.figure.texts if t.get_text().startswith("Not kept")]
    assert "memory" in note.get_text()
    assert note.get_window_extent(renderer).y1 < min(ax.get_tightbbox(renderer).y0 for ax in drawn.figure.axes)
    plt.close(drawn.figure)
