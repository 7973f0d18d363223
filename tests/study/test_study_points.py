"""A study never pools different things as repeats, and a collapsed cell is failed everywhere.

- A sweep crossing two keys (concurrency x max_tokens): each figure's point is one grid point, its
  repeats only; the key a figure has no axis for makes one labelled series per value.
- A cell whose server collapsed (the synthetic server answering HTTP 500) is recorded failed, with its
  reason, in the journal, the summary, `fastbench runs` (table and CSV), the report's table and the
  figures' numbers; it enters no mean, and the sweep run again runs it again.
- A collapsed repeat among complete ones (an engine that died mid-cell: 4 of 12 completed) is left out
  of its point's mean.
- Runs of two sweeps are two series, never one mean; `fastbench report STORE` over several sweeps asks
  which.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from support.study import fastbench
from fastbench.cli import command
from fastbench.study import plots
from fastbench.study.cells import cell_rows
from fastbench.study.figures_data import RunPoint, group_series, load_points, series_namer
from fastbench.study.store import Store
from fastbench.study.study_card import cells_table_markdown

FAST = "--ttft-ms 2 --itl-ms 1"


def _sweep(tmp_path: Path, name: str, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    capsys.readouterr()
    rc = command.main(["sweep", str(path)])
    return rc, capsys.readouterr().out


def _journal(store: Path, name: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (store / "sweeps" / f"{name}.jsonl").read_bytes().splitlines()]


# -- two crossed keys -----------------------------------------------------------------------------------

def test_a_sweep_of_two_crossed_keys_draws_a_series_per_value_of_the_other_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    rc, out = _sweep(tmp_path, "grid", f"""
[sweep]
store = "{store}"
[variants.base]
synthetic_args = "{FAST}"
[benchmark]
concurrency = [1, 2]
max_tokens = [4, 8]
num_prompts = 4
""", capsys)
    assert rc == 0, out
    points = load_points([], str(store), {})
    assert len(points) == 4
    tput = group_series(points, "output_throughput")
    assert sorted(tput) == ["base max_tokens=4", "base max_tokens=8"]
    for cells in tput.values():  # each point is one grid point: one run, not the two max_tokens pooled
        assert [c.load for c in cells] == [1.0, 2.0] and all(len(c.run_ids) == 1 for c in cells)
    by_run = {p.run_id: p for p in points}
    for name, cells in tput.items():
        for c in cells:
            assert f"max_tokens={by_run[c.run_ids[0]].grid_values()['max_tokens']}" in name

    drawn = plots.figure_pareto(points)
    labels = {(c["variant"], c["load"]) for c in drawn.summary["cells"]}
    assert labels == {(f"base max_tokens={m}", float(c)) for m in (4, 8) for c in (1, 2)}
    assert "base max_tokens=" in drawn.title  # the frontier names the grid point, not "base c=2" twice
    drawn.figure.savefig(io.BytesIO(), format="svg")
    crossover = plots.figure_crossover(points)
    assert sorted(crossover.summary["throughput"]) == ["base max_tokens=4", "base max_tokens=8"]
    latency = plots.figure_latency(points)
    assert sorted(latency.summary["metrics"]["ttft"]["p50"]) == ["base max_tokens=4", "base max_tokens=8"]


def test_the_paretos_rightmost_point_is_inside_the_frame() -> None:
    points = [RunPoint(f"r{c}", "a", c, None, {"median_decode_rate_tok_s": 100.0 / c, plots.THROUGHPUT_KEY: 90.0 * c,
                                                "stopped_reason": "completed"}, None) for c in (1, 2, 4, 8)]
    drawn = plots.figure_pareto(points)
    ax = drawn.figure.axes[0]
    left, right = ax.get_xlim()
    bottom, top = ax.get_ylim()
    assert right >= 720.0 * 1.1 and top >= 100.0 * 1.1  # the largest throughput and rate lie well inside
    assert left == 0.0 and bottom == 0.0


# -- a collapsed cell is failed everywhere -------------------------------------------------------------

def test_a_collapsed_cell_is_failed_everywhere_and_runs_again(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    text = f"""
[sweep]
store = "{store}"
stop = []
[variants.ok]
synthetic_args = "{FAST}"
[variants.broken]
synthetic_args = "{FAST} --fault http-500 --fault-every 1"
[benchmark]
concurrency = [1, 2]
num_prompts = 4
max_tokens = 4
"""
    rc, out = _sweep(tmp_path, "s", text, capsys)
    assert rc == 1, out  # failed cells
    why = "the server collapsed: no request completed"
    assert out.splitlines().count(f"    failed: {why}") == 2  # said as each cell ends
    # the journal: a failed event per broken cell, naming its kept run
    failed = [e for e in _journal(store, "s") if e["event"] == "failed"]
    assert sorted(orjson.loads(e["cell"])["concurrency"] for e in failed) == [1, 2]
    assert all(orjson.loads(e["cell"])["variant"] == "broken" and e["reason"] == why and e["run_id"] for e in failed)
    # the summary: failed with the reason, no figure
    rows = list(csv.DictReader(io.StringIO((store / "sweeps" / "s.csv").read_text())))
    broken = [r for r in rows if r["variant"] == "broken"]
    assert [(r["status"], r["reason"], r["n"]) for r in broken] == [("failed", why, "0")] * 2
    assert all(r["median_ttft_ms_mean"] == "" for r in broken)
    assert all(r["status"] == "done" for r in rows if r["variant"] == "ok")
    # fastbench runs: COLLAPSED, not complete, the reason; no latency for a run that completed nothing
    listed = fastbench("runs", "--store", str(store), "--csv", "-", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    runs = list(csv.DictReader(io.StringIO(listed.stdout)))
    assert sorted((r["variant"], r["status"], r["complete"], r["why_not_complete"]) for r in runs) == [
        ("broken", "COLLAPSED", "0", why)] * 2 + [("ok", "ok", "1", "")] * 2
    table = fastbench("runs", "--store", str(store), "--variant", "broken", cwd=tmp_path).stdout
    line = next(line for line in table.splitlines() if "COLLAPSED" in line)
    assert "0.0" not in line.split("0/4", 1)[1] and " - " in line
    # the report: failed rows with the reason, the runs listed apart, out of every figure
    done = fastbench("report", str(tmp_path / "s.toml"), "--out", "rep", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "rep" / "report.html").read_text()
    cells = page.split('<h2 id="cells">', 1)[1].split("</table>", 1)[0]
    assert cells.count('<tr class="failed"><td>broken</td>') == 2 and cells.count(f"failed: {why}") == 2
    incomplete = page.split('<h2 id="incomplete">', 1)[1].split("</table>", 1)[0]
    assert incomplete.count("COLLAPSED") == 2 and incomplete.count(why) == 2
    figure = orjson.loads((tmp_path / "rep" / "crossover.json").read_bytes())
    assert list(figure["throughput"]) == ["ok"]
    assert sorted((r["variant"], r["reason"]) for r in figure["left_out"]) == [("broken", why)] * 2
    # run again: the collapsed cells run again, the complete ones are found
    rc, out = _sweep(tmp_path, "s", text, capsys)
    ran = [orjson.loads(line.split("cell ", 1)[1]) for line in out.splitlines() if line.startswith("  cell {")]
    assert sorted((c["variant"], c["concurrency"]) for c in ran) == [("broken", 1), ("broken", 2)]


def _repeat(run: str, repeat: int, ttft: float, **flat: Any) -> RunPoint:
    key = orjson.dumps({"concurrency": 4, "repeat": repeat, "variant": "base"}).decode()
    return RunPoint(run, "base", 4, None, {"sweep": "s", "sweep_cell": key, "median_ttft_ms": ttft,
                                           "output_throughput": 100.0, "stopped_reason": "completed",
                                           "completed": 12, "failed": 0, **flat}, None)


def test_a_repeat_whose_engine_died_mid_cell_enters_no_mean() -> None:
    died = _repeat("c", 2, 1_000_000.0, completed=4, failed=8, collapsed=True,
                   collapse_reason="most requests failed (8/12)")
    points = [_repeat("a", 0, 100.0), _repeat("b", 1, 120.0), died]
    (row,) = cell_rows(points)
    assert row.run_ids == ("a", "b") and row.incomplete == ("c",)
    assert row.figures["median_ttft_ms"] is not None and row.figures["median_ttft_ms"][0] == 110.0
    (cells,) = group_series(points, "median_ttft_ms").values()
    assert cells[0].values == (100.0, 120.0)
    # alone at its point, it makes the point failed, with the reason
    (alone,) = cell_rows([died])
    assert (alone.status, alone.reason) == ("failed", "the server collapsed: most requests failed (8/12)")


# -- two sweeps are never one mean ---------------------------------------------------------------------

def test_runs_of_two_sweeps_are_two_series_and_two_rows() -> None:
    fresh = _repeat("a", 0, 100.0)
    shared = RunPoint("b", "base", 4, None, {**fresh.flat, "sweep": "shared", "median_ttft_ms": 1.0}, None)
    name = series_namer([fresh, shared])
    assert (name(fresh), name(shared)) == ("s: base", "shared: base")
    assert sorted(group_series([fresh, shared], "median_ttft_ms")) == ["s: base", "shared: base"]
    rows = cell_rows([fresh, shared])
    assert [(r.variant, r.figures["median_ttft_ms"]) for r in rows] == [("s: base", (100.0, None)),
                                                                       ("shared: base", (1.0, None))]


def test_report_of_a_store_with_two_sweeps_asks_which(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    for name in ("one", "two"):
        rc, out = _sweep(tmp_path, name, f"""
[sweep]
name = "{name}"
store = "{store}"
[variants.base]
synthetic_args = "{FAST}"
[benchmark]
concurrency = [1]
num_prompts = 2
max_tokens = 4
""", capsys)
        assert rc == 0, out
    done = fastbench("report", str(store), "--out", "rep", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "2 sweeps (one, two)" in line and "--sweep NAME" in line and "--compare-sweeps" in line
    done = fastbench("report", str(store), "--compare-sweeps", "--out", "rep", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    figure = orjson.loads((tmp_path / "rep" / "crossover.json").read_bytes())
    assert sorted(figure["throughput"]) == ["one: base", "two: base"]
    done = fastbench("report", "--store", str(store), "--sweep", "two", "--out", "rep2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(orjson.loads((tmp_path / "rep2" / "crossover.json").read_bytes())["throughput"]) == ["base"]


def test_the_store_knows_a_collapsed_run_is_no_complete_cell(tmp_path: Path) -> None:
    doc = {"completed": 4, "failed": 8, "fastbench": {"run": {"stopped_reason": "completed", "collapsed": True,
                                                              "collapse_reason": "most requests failed (8/12)"}}}
    with Store(tmp_path / "s", create=True) as store:
        run_id = store.add(doc)
        (run,) = store.query()
        assert run.run_id == run_id and run.meta.status == "COLLAPSED" and not run.meta.complete


def test_the_cells_table_shows_the_prefix_cache_hit_rate() -> None:
    rows = cell_rows([_repeat("a", 0, 1.0, prefix_cache_hit_rate=0.98),
                      _repeat("b", 1, 1.2, prefix_cache_hit_rate=0.96)])
    hit = rows[0].figures["prefix_cache_hit_rate"]
    assert hit is not None and hit[0] == pytest.approx(0.97)
    head, _, line = cells_table_markdown(rows).splitlines()
    column = head.split(" | ").index("Prefix-cache hit rate")
    assert line.split(" | ")[column].startswith("0.97 ± ")


def test_only_variants_at_the_same_other_values_cross() -> None:
    def run(variant: str, conc: int, max_tokens: int, tput: float) -> RunPoint:
        key = orjson.dumps({"concurrency": conc, "max_tokens": max_tokens, "repeat": 0, "variant": variant}).decode()
        return RunPoint(f"{variant}-{conc}-{max_tokens}", variant, conc, None,
                        {"sweep": "s", "sweep_cell": key, "stopped_reason": "completed",
                         plots.THROUGHPUT_KEY: tput, plots.PER_STREAM_KEY: 10.0}, None)

    # spec overtakes base at max_tokens=64 between loads 1 and 4; at 32 spec stays ahead; base 32 and spec 64
    # cross too, but they differ in max_tokens as well: no crossing of variants
    points = [run("base", 1, 32, 100.0), run("base", 4, 32, 300.0), run("spec", 1, 32, 200.0),
              run("spec", 4, 32, 400.0), run("base", 1, 64, 100.0), run("base", 4, 64, 300.0),
              run("spec", 1, 64, 50.0), run("spec", 4, 64, 350.0)]
    drawn = plots.figure_crossover(points)
    pairs = [(c["first"], c["second"]) for c in drawn.summary["crossings"]["throughput"]]
    assert pairs == [("base max_tokens=64", "spec max_tokens=64")]
