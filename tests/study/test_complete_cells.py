"""Only complete cells reach a study's figures and summaries: how a run ended has one word (runfile.run_status)
and one rule says whether it is a complete cell (runfile.is_complete), read alike by the sweep, the report,
the figures and the store's listing. Checked end to end by interrupting a sweep's cell before its first
completion (SIGINT, as Ctrl-C), resuming it, and reading the report's counts, table and figure data and
`fastbench runs` against each other."""

from __future__ import annotations

import html
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from support.study import fastbench
from fastbench.results.notes import collapse_reason
from fastbench.results.result import Counts
from fastbench.study.figures_data import RunPoint, group_series
from fastbench.study.runfile import is_complete, run_status
from fastbench.synthetic import SyntheticServer


@pytest.mark.parametrize("reason,completed,failed,collapsed,status,complete", [
    ("completed", 8, 0, False, "ok", True),
    ("completed", 0, 8, True, "COLLAPSED", False),  # the whole workload ran on a server that did not work
    ("completed", 4, 8, True, "COLLAPSED", False),  # an engine that died mid-cell: 4 done, 8 HTTP 500
    ("time cap", 3, 0, False, "time cap", True),
    ("time cap", 0, 0, True, "CAPPED-EMPTY", False),  # the cap came before the first completion
    ("interrupted", 0, 0, False, "INTERRUPTED", False),
    ("interrupted", 0, 0, True, "INTERRUPTED", False),  # as stores written before this rule hold it
    ("interrupted", 5, 0, False, "INTERRUPTED", False),
    ("interrupted", 0, 3, True, "COLLAPSED", False),  # requests failed: the server's doing
    ("max error rate", 1, 6, True, "COLLAPSED", False),
    ("server exited", 2, 0, False, "FAILED (server exited)", False),
    ("worker lost", 2, 0, False, "FAILED (worker lost)", False),
    (None, None, None, False, "ok", True),  # a result without the field (written by hand)
])
def test_each_way_a_run_ends_has_its_word_and_one_completeness_rule(
        reason: str | None, completed: int | None, failed: int | None, collapsed: bool, status: str,
        complete: bool) -> None:
    assert run_status(reason, completed, failed, collapsed) == status
    assert is_complete(reason, completed, collapsed) is complete


def _counts(completed: int, failed: int, total: int = 8) -> Counts:
    return Counts(total=total, completed=completed, failed=failed, failed_by_class={"HTTP_500": failed} if failed
                  else {}, cancelled=0, not_started=total - completed - failed, warmups=0)


def test_an_interrupt_before_the_first_completion_is_no_collapse() -> None:
    assert collapse_reason(_counts(0, 0), "interrupted", None) is None  # the client stopped it
    assert collapse_reason(_counts(0, 0), "time cap", None) == "no request completed"  # exit status 1 kept
    assert collapse_reason(_counts(0, 0), "completed", None) == "no request completed"
    assert collapse_reason(_counts(0, 3), "interrupted", None) == "no request completed"  # failures: collapsed


def test_figures_average_only_complete_runs() -> None:
    def point(run: str, throughput: float, reason: str, completed: int) -> RunPoint:
        flat = {"output_throughput": throughput, "stopped_reason": reason, "completed": completed}
        return RunPoint(run, "base", 64, None, flat, None)

    points = [point("a", 6000.0, "completed", 64), point("b", 6200.0, "completed", 64),
              point("cut", 0.0, "interrupted", 0), point("empty", 0.0, "time cap", 0)]
    (cell,) = group_series(points, "output_throughput")["base"]
    assert cell.run_ids == ("a", "b") and cell.mean == 6100.0


# -- end to end: interrupt a cell, resume, report ---------------------------------------------------------

SLOW_TTFT_MS = 1500  # the interrupted variant's first token: no request of its cells completes sooner


def _wait_for_requests(server: SyntheticServer, before: int, deadline_s: float) -> None:
    """Until the server has received a generation request beyond ``before`` (the cell's run is sending)."""
    while server.stats()["generation_requests"] <= before:
        if time.monotonic() > deadline_s:
            raise AssertionError("the cell never sent a request")
        time.sleep(0.01)


def _cells_row(page: str, variant: str, point: str) -> list[str]:
    """The cells table's row of one grid point, as text cells."""
    table = page.split('<h2 id="cells">', 1)[1].split("</table>", 1)[0]
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        if cells[:2] == [variant, point]:
            return cells
    raise AssertionError(f"no row {variant} {point}")


def test_an_interrupted_cell_is_kept_listed_apart_and_never_averaged(tmp_path: Path) -> None:
    with SyntheticServer("--ttft-ms", "5", "--itl-ms", "2") as fast, \
            SyntheticServer("--ttft-ms", str(SLOW_TTFT_MS), "--itl-ms", "2") as slow:
        sweep = tmp_path / "s.toml"
        sweep.write_text(f"""
[sweep]
name = "cut"
store = "store"
repeats = 2
warmup = 0
[variants.base]
base_url = "{fast.base_url}"
[variants.slow]
base_url = "{slow.base_url}"
[benchmark]
concurrency = [2, 4]
num_prompts = 4
random_input_len = 16
random_output_len = 4
""")
        target = '"concurrency":4,"repeat":0,"variant":"slow"'
        proc = subprocess.Popen([sys.executable, "-m", "fastbench", "sweep", sweep.name], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("  cell {") and target in line:  # the console announces the cell's start
                announced = time.monotonic()
                before = slow.stats()["generation_requests"]
                break
        _wait_for_requests(slow, before, announced + 60)
        proc.send_signal(signal.SIGINT)  # well before the slow server's first token: nothing completed
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, out + err

        again = fastbench("sweep", sweep.name, cwd=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
        summary = next(line for line in again.stdout.splitlines() if line.startswith("slow") and " 4 " in line)
        assert summary.split()[:3] == ["slow", "4", "2"] and summary.rstrip().endswith("done")

    store = tmp_path / "store"
    listing = fastbench("runs", "--store", str(store), cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    lines = [line for line in listing.stdout.splitlines() if line.startswith("20")]
    assert len(lines) == 9  # 8 cells, and the one interrupted
    (cut_line,) = [line for line in lines if "INTERRUPTED" in line]
    cut_id = cut_line.split()[0]
    assert "COLLAPSED" not in listing.stdout and " 0/0 " in cut_line
    result = orjson.loads((store / "runs" / cut_id / "result.json").read_bytes())
    assert result["completed"] == 0 and result["max_concurrency"] == 4
    assert result["fastbench"]["run"]["stopped_reason"] == "interrupted"
    assert result["fastbench"]["run"]["collapsed"] is False

    report = fastbench("report", sweep.name, "--out", "rep", cwd=tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
    page = (tmp_path / "rep" / "report.html").read_text()
    meta = html.unescape(page.split('<p class="meta">', 1)[1].split("</p>", 1)[0])
    assert meta.startswith("8 complete runs, 4 grid points (and 1 incomplete run, listed apart and not averaged)")
    # the cells table: the slow c=4 point averages its two complete repeats, not the cut run
    row = _cells_row(page, "slow", "concurrency=4")
    assert cut_id not in row[2] and len(row[2].split(", ")) == 2
    assert row[-1].startswith("done (1 incomplete run not averaged")
    incomplete = page.split('<h2 id="incomplete">', 1)[1].split("</table>", 1)[0]
    assert cut_id in incomplete and "INTERRUPTED" in incomplete and "0/4" in incomplete
    # the figure data beside the figures: the same runs and the same mean as the table
    crossover = orjson.loads((tmp_path / "rep" / "crossover.json").read_bytes())
    assert crossover["left_out"] == [
        {"run": cut_id, "variant": "slow", "status": "INTERRUPTED", "reason": "interrupted"}]
    (at_4,) = [c for c in crossover["throughput"]["slow"] if c["load"] == 4.0]
    assert sorted(at_4["runs"]) == sorted(row[2].split(", "))
    table_mean = float(row[4].split(" ± ")[0].replace(",", ""))  # "Output tok/s", one decimal
    assert at_4["mean"] == pytest.approx(table_mean, abs=0.051)
    latency = orjson.loads((tmp_path / "rep" / "latency.json").read_bytes())
    assert latency.pop("left_out") == crossover["left_out"] and cut_id not in orjson.dumps(latency).decode()
    every = [run for series in crossover["throughput"].values() for c in series for run in c["runs"]]
    assert len(every) == 8 and cut_id not in every
    card = (tmp_path / "rep" / "study.md").read_text()
    assert f"| {cut_id} | slow | concurrency=4 | INTERRUPTED | 0/4 | interrupted |" in card
