"""fastbench sweep: the grid crossed, every cell a stored run found again (resume), a failing cell recorded
while the rest run, the dry run's plan, repeats' intervals, a stop rule skipping the heavier loads, launched
variants (the fake vLLM) launched once per variant or per linked value, and bad input refused in one line
before anything is launched."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from support.fakevllm import free_port, write_fake_engines
from fastbench import ConfigError, api
from fastbench.cli import command
from fastbench.cli.sweep import RunCommand, build_parser, load_plan
from fastbench.study import grid
from fastbench.study.figures_data import load_points
from fastbench.study.report import cell_rows, render_html
from fastbench.study.runfile import load_result
from fastbench.study.store import Store
from fastbench.study.sweep import _stop_reason, auto_loads, execute
from fastbench.study.sweepplan import Cell, Plan, StopRules, t_interval

FAST = '"--ttft-ms 2 --itl-ms 1"'


def sweep(tmp_path: Path, text: str, *flags: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    path = tmp_path / "s.toml"
    path.write_text(text)
    capsys.readouterr()
    rc = command.main(["sweep", str(path), *flags])
    out, err = capsys.readouterr()
    return rc, out, err


def stored(store: Path) -> list[dict[str, Any]]:
    """Every stored run's flat keys, oldest first."""
    with Store(store) as s:
        runs = s.query()
        data = s.flat([r.run_id for r in runs])
    return [data[r.run_id][1] | {"run_id": r.run_id, "variant": r.meta.variant} for r in runs]


def journal(store: Path, name: str = "s") -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (store / "sweeps" / f"{name}.jsonl").read_bytes().splitlines()]



def fake_vllm_server(vllm: Path, synth_args: str, **env: str) -> str:
    """A sweep file's [server] table that launches the fake vLLM (tests/support/fakevllm.py) on a free port,
    serving the synthetic server with ``synth_args``; ``env``: more of the fake's settings."""
    settings = "".join(f', {name} = "{value}"' for name, value in env.items())
    return f"""[server]
engine = "vllm"
model = "fake/model"
engine_bin = "{vllm}"
port = {free_port()}
ready_timeout = 30
stop_grace = 3
args = ["--served-model-name", "fake-model"]
env = {{ FAKE_SYNTH_ARGS = "{synth_args}"{settings} }}"""

def test_grid_crosses_listed_options_with_the_load_axis_last_and_rising() -> None:
    bench = {"concurrency": [8, 1, 4], "max_tokens": [16, 32], "num_prompts": 10,
             "percentile_metrics": ["ttft", "tpot"], "metric_percentiles": [[50, 99], [90]]}
    takes_list = {"percentile_metrics", "metric_percentiles"}.__contains__
    cells = grid.cross(bench, takes_list)
    assert len(cells) == 3 * 2 * 2
    assert [c["concurrency"] for c in cells[:3]] == [1, 4, 8]  # the load axis innermost, rising
    assert {(c["max_tokens"], tuple(c["metric_percentiles"])) for c in cells} == {
        (m, tuple(p)) for m in (16, 32) for p in ([50, 99], [90])}
    assert all(c["percentile_metrics"] == ["ttft", "tpot"] and c["num_prompts"] == 10 for c in cells)
    assert grid.load_key(grid.crossed_keys({"request_rate": [1, 2]}, takes_list)) == "request_rate"


def test_t_interval_is_the_student_t_95_percent_half_width() -> None:
    values = [10.0, 12.0, 14.0]
    mean, half = t_interval(values)
    assert mean == 12.0
    assert half == pytest.approx(4.303 * statistics.stdev(values) / math.sqrt(3), rel=1e-6)
    assert t_interval([5.0]) == (5.0, None)


def test_saturation_rule_needs_flat_throughput_and_rising_latency() -> None:
    rules = StopRules()
    below = {"output_throughput": 1000.0, "median_e2el_ms": 100.0}
    flat = {"output_throughput": 1020.0, "median_e2el_ms": 180.0}
    growing = {"output_throughput": 1500.0, "median_e2el_ms": 180.0}
    assert "saturated at load 8" in (_stop_reason(rules, False, below, flat, False, 8.0) or "")
    assert _stop_reason(rules, False, below, growing, False, 8.0) is None
    assert _stop_reason(StopRules(rules=()), False, below, flat, True, 8.0) is None


def test_sweep_crosses_stores_each_cell_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    text = f"""
[sweep]
store = "{store}"
[variants.fast]
synthetic_args = {FAST}
[variants.slow]
synthetic_args = "--ttft-ms 2 --itl-ms 4"
[benchmark]
concurrency = [1, 2]
max_tokens = [4, 8]
num_prompts = 4
"""
    rc, out, _ = sweep(tmp_path, text, capsys=capsys)
    assert rc == 0, out
    runs = stored(store)
    assert len(runs) == 2 * 2 * 2
    cells = {(r["variant"], r["max_concurrency"], orjson.loads(r["sweep_cell"])["max_tokens"]) for r in runs}
    assert cells == {(v, c, m) for v in ("fast", "slow") for c in (1, 2) for m in (4, 8)}
    assert all(r["sweep"] == "s" and r["completed"] == 4 for r in runs)
    # a cell's max_tokens reached the server: the output lengths are those asked for
    assert {orjson.loads(r["sweep_cell"])["max_tokens"] * 4 for r in runs} == {r["total_output_tokens"] for r in runs}
    csv_lines = (store / "sweeps" / "s.csv").read_text().splitlines()
    assert csv_lines[0].startswith("variant,concurrency,max_tokens,status")
    assert len(csv_lines) == 1 + 8 and all(",done," in line for line in csv_lines[1:])

    rc, out, _ = sweep(tmp_path, text, capsys=capsys)  # again: nothing left to do
    assert rc == 0 and "cell {" not in out
    assert len(stored(store)) == 8
    # an edited cell is measured again; the others are still found
    rc, out, _ = sweep(tmp_path, text.replace("max_tokens = [4, 8]", "max_tokens = [4, 6]"), capsys=capsys)
    assert rc == 0 and out.count("  cell {") == 4 and len(stored(store)) == 12


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    text = f"""
[sweep]
store = "{store}"
repeats = 2
[variants.a]
synthetic_args = {FAST}
[benchmark]
concurrency = [1, 2]
num_prompts = 4
max_seconds = 30
"""
    rc, out, _ = sweep(tmp_path, text, "--dry-run", capsys=capsys)
    assert rc == 0
    assert "4 cells (2 points x 2 repeats), 0 done, 4 to run" in out
    assert out.count(": to run") == 4 and "estimated time: 2.0 min" in out  # 4 cells x their 30 s cap
    assert not store.exists()  # a dry run writes nothing: no index, no journal
    # of a store that exists, it reads what is done and still writes nothing
    rc, out, _ = sweep(tmp_path, text.replace("concurrency = [1, 2]", "concurrency = [1]"), capsys=capsys)
    assert rc == 0 and len(stored(store)) == 2
    before = sorted(p.relative_to(store) for p in store.rglob("*") if "-wal" not in p.name and "-shm" not in p.name)
    rc, out, _ = sweep(tmp_path, text, "--dry-run", capsys=capsys)
    assert rc == 0 and "4 cells (2 points x 2 repeats), 2 done, 2 to run" in out
    assert sorted(p.relative_to(store) for p in store.rglob("*") if "-wal" not in p.name and "-shm" not in p.name) \
        == before


def test_repeats_give_the_mean_and_its_t_interval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    text = f"""
[sweep]
store = "{store}"
repeats = 3
[variants.a]
synthetic_args = "--ttft-ms 2 --itl-ms 1 --jitter-ms 0.5"
[benchmark]
concurrency = 2
num_prompts = 6
max_tokens = 8
"""
    rc, out, _ = sweep(tmp_path, text, capsys=capsys)
    assert rc == 0, out
    throughputs = [r["output_throughput"] for r in stored(store)]
    assert len(throughputs) == 3
    header, row = (line.split(",") for line in (store / "sweeps" / "s.csv").read_text().splitlines())
    mean = float(row[header.index("output_throughput_mean")])
    half = float(row[header.index("output_throughput_ci95")])
    assert mean == pytest.approx(statistics.fmean(throughputs))
    assert half == pytest.approx(4.303 * statistics.stdev(throughputs) / math.sqrt(3))
    # the console's throughput is the steady-state one (each run reached its concurrency), and says so
    steady = [r["steady_output_throughput"] for r in stored(store)]
    assert all(isinstance(x, float) for x in steady)
    assert float(row[header.index("sustained_output_throughput_mean")]) == pytest.approx(statistics.fmean(steady))
    assert f"{statistics.fmean(steady):,.1f} ±{4.303 * statistics.stdev(steady) / math.sqrt(3):,.1f}" in out
    assert "steady out tok/s" in out and "throughput: the steady-state output throughput" in out


def test_a_failing_cell_is_recorded_and_the_rest_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    text = f"""
[sweep]
store = "{store}"
[variants.gone]
base_url = "http://127.0.0.1:{free_port()}"
[variants.ok]
synthetic_args = {FAST}
[benchmark]
concurrency = [1, 2]
num_prompts = 4
max_tokens = 4
"""
    rc, out, _ = sweep(tmp_path, text, capsys=capsys)
    assert rc == 1
    assert {r["variant"] for r in stored(store)} == {"ok"} and len(stored(store)) == 2
    failed = [e for e in journal(store) if e["event"] == "failed"]
    assert len(failed) == 2 and all(orjson.loads(e["cell"])["variant"] == "gone" and e["reason"] for e in failed)
    rows = (store / "sweeps" / "s.csv").read_text().splitlines()[1:]
    assert sum(",failed," in row for row in rows) == 2 and sum(",done," in row for row in rows) == 2


def test_a_stop_rule_skips_the_higher_loads_with_the_reason(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    text = f"""
[sweep]
store = "{store}"
stop = ["slo"]
[variants.a]
synthetic_args = "--ttft-ms 30 --itl-ms 1"
[benchmark]
concurrency = [1, 2, 4]
num_prompts = 4
max_tokens = 4
goodput = {{ ttft = 5 }}
"""
    rc, out, _ = sweep(tmp_path, text, capsys=capsys)
    assert rc == 0, out
    assert [r["max_concurrency"] for r in stored(store)] == [1]  # measured, failed its SLOs: the rest skipped
    skipped = [e for e in journal(store) if e["event"] == "skipped"]
    assert [orjson.loads(e["cell"])["concurrency"] for e in skipped] == [2, 4]
    assert all(e["reason"].startswith("SLOs failed at load 1: 0% of requests met them") for e in skipped)
    assert "skipped: SLOs failed at load 1" in out


def test_launched_variants_launch_once_or_per_linked_value(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    vllm, _ = write_fake_engines(tmp_path / "bin")
    store = tmp_path / "store"
    text = f"""
[sweep]
store = "{store}"
link = {{ "--max-num-seqs" = "concurrency" }}
{fake_vllm_server(vllm, "--ttft-ms 2 --itl-ms 1")}
[variants.base]
[variants.ngram]
args = ["--speculative-config", '{{"method": "ngram", "num_speculative_tokens": 3}}']
[benchmark]
concurrency = [1, 2]
num_prompts = 4
max_tokens = 4
"""
    rc, out, _ = sweep(tmp_path, text, capsys=capsys)
    assert rc == 0, out
    launches = [e for e in journal(store) if e["event"] == "launched"]
    assert [(e["variant"], e["linked"]) for e in launches] == [
        (v, {"--max-num-seqs": c}) for v in ("base", "ngram") for c in (1, 2)]
    assert all(e["load_s"] > 0 for e in launches)
    logs = store / "sweeps" / "s-logs"
    assert "--max-num-seqs=2" in (logs / "ngram-max-num-seqs2.log").read_text()
    assert "ngram" in (logs / "ngram-max-num-seqs2.log").read_text()
    assert len(stored(store)) == 4
    rc, out, _ = sweep(tmp_path, text, capsys=capsys)  # all done: nothing launched
    assert rc == 0 and "launching" not in out
    assert len([e for e in journal(store) if e["event"] == "launched"]) == 4


def test_a_launched_variants_cells_are_stored_as_runs_of_its_launch(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Each cell of a launched variant is a run of that launch, as a --launch run is: the result says the
    server was launched (engine, the variant's arguments, the launch's one load time), the run folder has
    server.log with that cell's window lines only, the card shows the engine settings. Attached and
    synthetic cells are as before. compare and the report read them."""
    from support.fakevllm import KEPT_WINDOW_HEADER, windows_in_log
    from fastbench.synthetic import SyntheticServer

    vllm, _ = write_fake_engines(tmp_path / "bin")
    store = tmp_path / "store"
    ngram = '{"method": "ngram", "num_speculative_tokens": 3}'
    with SyntheticServer("--ttft-ms", "2", "--itl-ms", "1") as remote:
        # ~1-2 s a launched cell (32 chunks of 15 ms a request): "SpecDecoding metrics" lines in each window
        text = f"""
[sweep]
store = "{store}"
warmup = 0
stop = []
{fake_vllm_server(vllm, "--ttft-ms 5 --itl-ms 15 --tokens-per-chunk 3")}
[variants.ngram]
args = ["--speculative-config", '{ngram}']
[variants.synth]
synthetic_args = {FAST}
[variants.remote]
base_url = "{remote.base_url}"
[benchmark]
concurrency = [1, 2]
num_prompts = 4
random_input_len = 8
random_output_len = 96
"""
        rc, out, _ = sweep(tmp_path, text, capsys=capsys)
    assert rc == 0, out
    (load_s,) = [e["load_s"] for e in journal(store) if e["event"] == "launched"]
    windows = windows_in_log((store / "sweeps" / "s-logs" / "ngram.log").read_text())
    assert len(windows) == 2 and all(any("SpecDecoding metrics" in line for line in w) for w in windows)
    with Store(store) as s:
        rows = {r.run_id: r for r in s.query()}
    by_variant: dict[str, list[Any]] = {}
    for row in rows.values():
        by_variant.setdefault(str(row.meta.variant), []).append(row)
    assert sorted((v, len(r)) for v, r in by_variant.items()) == [("ngram", 2), ("remote", 2), ("synth", 2)]
    seen_runs = []
    for row in by_variant["ngram"]:
        assert row.meta.engine == "vllm"
        doc = load_result(Path(row.folder) / "result.json")
        server = doc["fastbench"]["server"]
        provenance = server["provenance"]
        assert provenance["launched"] and provenance["shared_launch"] and provenance["engine"] == "vllm"
        assert provenance["load_time_s"] == load_s  # measured once, at the launch: the same in every cell
        assert ngram in provenance["argv"] and "--served-model-name" in provenance["argv"]
        assert doc["fastbench"]["config"]["launch"]["engine_args"][-2:] == ["--speculative-config", ngram]
        assert server["engine"] == f"vLLM {provenance['engine_version']}"
        assert server["variant"] == "NGRAM speculative decoding"
        assert "memory_series" in server and server["footprint"]["weights_gib"] == [0.51]
        seen_runs.append(provenance["run_of_launch"])
        kept = (Path(row.folder) / "server.log").read_text()
        assert kept.partition(KEPT_WINDOW_HEADER)[2].splitlines() == windows[provenance["run_of_launch"] - 1]
        card = (Path(row.folder) / "card.md").read_text()
        assert f"| Engine | {server['engine']} |" in card
        assert "Engine arguments" in card and "num_speculative_tokens" in card
        assert f"ready in {load_s:.1f} s" in card and "launched once for several runs" in card
        assert "already running (launched by fastbench before this run" in card and "(attached)" not in card
    assert sorted(seen_runs) == [1, 2]
    for variant, engine in (("synth", "synthetic"), ("remote", None)):
        for row in by_variant[variant]:  # as before: not launched, no server log kept
            assert row.meta.engine == engine and not (Path(row.folder) / "server.log").exists()
            provenance = load_result(Path(row.folder) / "result.json")["fastbench"]["server"]["provenance"]
            assert provenance["launched"] is False and "shared_launch" not in provenance
    first, second = sorted(r.run_id for r in by_variant["ngram"])
    capsys.readouterr()
    assert command.main(["compare", first, second, "--store", str(store)]) == 0
    compared = capsys.readouterr().out
    assert compared.startswith(f"A  {first}, label s, variant ngram")
    assert f"B  {second}, label s, variant ngram" in compared
    # the report's reading of them (the figures read the same flat keys as any run's: not drawn here)
    points = load_points([], str(store), {"label": "s"})
    rows = cell_rows(points, journal(store))
    assert sorted((r.variant, r.status, len(r.run_ids)) for r in rows) == [
        (v, "done", 1) for v in ("ngram", "ngram", "remote", "remote", "synth", "synth")]
    page = render_html("s", "", [], rows, points, [])
    assert page.count('<details id="run-') == 6 and page.count("<td>Engine arguments</td>") == 2


def test_a_launch_that_dies_mid_sweep_fails_its_cell_and_the_later_ones_at_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The server dies during a cell: that cell is kept as measured and recorded failed (the server
    exited); each later cell of the launch fails at once, saying how the server had exited, instead of
    being run against nothing."""
    vllm, _ = write_fake_engines(tmp_path / "bin")
    store = tmp_path / "store"
    text = f"""
[sweep]
store = "{store}"
warmup = 0
stop = []
{fake_vllm_server(vllm, "--ttft-ms 2 --itl-ms 5", FAKE_VLLM_MODE="die-mid-run", FAKE_DIE_AFTER="0.3")}
[benchmark]
concurrency = [1, 2, 4]
num_prompts = 400
random_input_len = 8
random_output_len = 32
"""
    rc, out, _ = sweep(tmp_path, text, capsys=capsys)
    assert rc == 1, out
    failed = {orjson.loads(e["cell"])["concurrency"]: e["reason"] for e in journal(store) if e["event"] == "failed"}
    assert sorted(failed) == [1, 2, 4]
    assert "exited with status 1 during the measured window" in failed[1]
    assert all(re.search(r"vLLM \(pid \d+\) exited with status 1 before this run", failed[c]) for c in (2, 4))
    (kept,) = stored(store)  # the dying cell's run, as measured; the later ones never ran
    assert kept["stopped_reason"] == "server exited"


@pytest.mark.parametrize(("change", "message"), [
    ("[benchmark]\nconcurency = [1, 2]", "[benchmark] has no option 'concurency'"),
    ("[variants.a]\nmodle = 'x'", "[variants.a] has no field 'modle'"),
    ("[sweep]\nrepeat = 2", "[sweep] has no key 'repeat'"),
    ("[benchmark]\nresult_json = 'x.json'", "[benchmark] result_json: a sweep sets it per cell"),
    ("[sweep]\nlink = { '--max-num-seqs' = 'concurrency' }", "'concurrency' is not a list in [benchmark]"),
    ("[benchmark]\nconcurrency = []", "[benchmark] concurrency is an empty list"),
    ("[benchmark]\nnum_prompts = 'ten'", "[benchmark] num_prompts must be an integer"),
    ("[plots]\nx = 1", "unknown table [plots]"),
])
def test_bad_input_is_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str,
                                          message: str) -> None:
    rc, out, err = sweep(tmp_path, change + "\n", "--store", str(tmp_path / "store"), capsys=capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err


def test_an_unwritable_store_fails_before_the_first_launch(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    vllm, _ = write_fake_engines(tmp_path / "bin")
    not_a_dir = tmp_path / "store"
    not_a_dir.write_text("a file")
    log = tmp_path / "server.log"
    text = f"""
[server]
engine = "vllm"
model = "fake/model"
engine_bin = "{vllm}"
log = "{log}"
[benchmark]
concurrency = [1, 2]
"""
    rc, out, err = sweep(tmp_path, text, "--store", str(not_a_dir), capsys=capsys)
    assert rc == 2 and err.startswith("fastbench sweep: error: --store ") and err.count("\n") == 1
    assert not log.exists() and not_a_dir.read_text() == "a file"


def test_a_plan_checks_every_cell_before_anything_runs(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("[variants.a]\nsynthetic_args = '--itl-ms 1'\n[benchmark]\nconcurrency = [1, 0]\n")
    with pytest.raises(Exception, match="concurrency"):
        load_plan(str(path), RunCommand(command.build_parser, command.config_from_args), store=str(tmp_path / "store"))
    assert build_parser().parse_args(["f.toml", "--dry-run"]).dry_run


def test_the_sweep_pages_complete_example_makes_its_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "sweep.md").read_text()
    section = page.split("## A complete example, and the crossover it draws", 1)[1]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block is not None
    path = tmp_path / "crossover.toml"
    path.write_text(block.group(1))
    plan, _ = load_plan(str(path), RunCommand(command.build_parser, command.config_from_args),
                        store=str(tmp_path / "runs"))
    assert len(plan.cells) == 2 * 4 * 2 * 3  # variants x concurrency x max_tokens x repeats
    assert len(plan.groups) == 2 * 4  # one launch per variant and linked concurrency
    assert "--max-num-seqs=16" in plan.groups[2].where and plan.has_slos
    capsys.readouterr()
    assert command.main(["sweep", str(path), "--store", str(tmp_path / "runs"), "--dry-run"]) == 0
    assert "48 cells (16 points x 3 repeats), 0 done, 48 to run" in capsys.readouterr().out


# -- searches, stop rules, warm-up, interrupts -----------------------------------------------------------

class ScriptedRunner:
    """Runs each cell for real (the built-in synthetic server), then sets the figures the stop rules and
    searches read to ``figures(load)`` before keeping the run: a server whose answer to load is known."""

    def __init__(self, plan: Plan, tmp_path: Path, figures: Any) -> None:
        self.plan, self.tmp_path, self.figures = plan, tmp_path, figures
        self.loads: list[float] = []

    async def launch(self, group: Any, stop: asyncio.Event) -> Any:
        raise AssertionError("synthetic cells launch nothing")

    async def warm_up(self, cell: Cell, base_url: str, requests: int, stop: asyncio.Event) -> None:
        raise AssertionError("a synthetic cell's run starts its own server: nothing to warm up")

    async def run(self, cell: Cell, server: Any, stop: asyncio.Event) -> str:
        out = self.tmp_path / f"r{len(self.loads)}.json"
        await api.arun(dataclasses.replace(cell.config, store=None, result_json=out), stop=stop)
        doc = load_result(out)
        assert cell.load is not None
        self.loads.append(cell.load)
        doc.update(self.figures(cell.load))
        with Store(self.plan.store) as store:
            return store.add(doc)


def scripted(tmp_path: Path, bench: str, figures: Any, *, sweep_keys: str = "", find_max: str | None = None,
             on_record: Any = None) -> tuple[Plan, ScriptedRunner, list[Any], list[str]]:
    path = tmp_path / "s.toml"
    path.write_text(f"[sweep]\n{sweep_keys}\n[variants.a]\nsynthetic_args = {FAST}\n[benchmark]\n"
                    f"num_prompts = 2\nmax_tokens = 2\n{bench}\n")
    plan, _ = load_plan(str(path), RunCommand(command.build_parser, command.config_from_args),
                        store=str(tmp_path / "store"), find_max=find_max)
    runner = ScriptedRunner(plan, tmp_path, figures)
    said: list[str] = []
    with Store(plan.store) as store:
        points = asyncio.run(execute(plan, store, runner, asyncio.Event(), say=said.append, on_record=on_record))
    return plan, runner, points, said


def test_saturation_rule_skips_the_loads_above_where_throughput_stopped_growing(tmp_path: Path) -> None:
    def figures(load: float) -> dict[str, float]:  # a server that serves 4 streams at once, queueing the rest
        return {"output_throughput": 100.0 * min(load, 4), "median_e2el_ms": 10.0 * max(1.0, load / 4)}

    told: list[tuple[float | None, str, str]] = []  # what a live view is told (api.sweeps: its grid's states)
    plan, runner, points, said = scripted(tmp_path, "concurrency = [1, 2, 4, 8, 16, 32]", figures,
                                          sweep_keys='stop = ["saturation"]',
                                          on_record=lambda cell, state, why: told.append((cell.load, state, why)))
    assert runner.loads == [1, 2, 4, 8]  # 8 is measured and shows it; 16 and 32 are not
    why = "saturated at load 8: throughput +0% while median E2E latency +100%"
    assert told == [(16, "skipped", why), (32, "skipped", why)]
    skipped = [e for e in journal(tmp_path / "store") if e["event"] == "skipped"]
    assert [orjson.loads(e["cell"])["concurrency"] for e in skipped] == [16, 32]
    assert all(e["reason"] == "saturated at load 8: throughput +0% while median E2E latency +100%" for e in skipped)
    assert [p["status"] for p in points] == ["done"] * 4 + ["skipped"] * 2


def test_collapse_rule_skips_the_loads_above_a_collapsed_point(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    text = f"""
[sweep]
store = "{store}"
stop = ["collapse"]
[variants.a]
synthetic_args = "--ttft-ms 2 --itl-ms 1 --fault http-500 --fault-every 1"
[benchmark]
concurrency = [1, 2, 4]
num_prompts = 4
max_tokens = 4
"""
    rc, out, _ = sweep(tmp_path, text, capsys=capsys)
    runs = stored(store)
    assert [r["max_concurrency"] for r in runs] == [1] and runs[0]["collapsed"] is True  # every request failed
    skipped = [e for e in journal(store) if e["event"] == "skipped"]
    assert [orjson.loads(e["cell"])["concurrency"] for e in skipped] == [2, 4]
    assert all(e["reason"] == "the server collapsed at load 1" for e in skipped)
    assert "skipped: the server collapsed at load 1" in out


def test_auto_loads_end_near_twice_the_knee_or_at_the_top() -> None:
    # concurrency 1: 2 requests/s; 64: 16 requests/s, so the knee is 8 and the range ends at 16
    assert auto_loads({"request_throughput": 2.0}, {"request_throughput": 16.0}, 64, 6) == [2, 4, 8, 16]
    # throughput still linear at the top: the range is all of it
    assert auto_loads({"request_throughput": 2.0}, {"request_throughput": 128.0}, 64, 5) == [3, 8, 23]
    # a server that does not scale at all: only 2, to show it; figures missing: nothing between
    assert auto_loads({"request_throughput": 2.0}, {"request_throughput": 2.0}, 64, 6) == [2]
    assert auto_loads({"request_throughput": None}, {"request_throughput": 9.0}, 64, 6) == []


def test_auto_concurrency_measures_the_ends_then_the_loads_between(tmp_path: Path) -> None:
    def figures(load: float) -> dict[str, float]:  # 2 requests/s per stream up to 8 streams
        return {"request_throughput": 2.0 * min(load, 8), "output_throughput": 4.0 * min(load, 8),
                "median_e2el_ms": 500.0 * max(1.0, load / 8)}

    plan, runner, points, said = scripted(tmp_path, 'concurrency = "auto"', figures,
                                          sweep_keys="auto_max = 64\nauto_points = 6\nstop = []")
    between = auto_loads(figures(1), figures(64), 64, 6)
    assert between == [2, 4, 8, 16]  # the knee is at 8: the range ends at 16
    assert runner.loads == [1, 64, *between]
    assert [p["load"] for p in points] == [1, 2, 4, 8, 16, 64] and {p["status"] for p in points} == {"done"}
    assert any("auto range: measured 1 and 64; between: 2, 4, 8, 16" in line for line in said)
    # again: every load is found in the store, none is run
    _, runner, points, _ = scripted(tmp_path, 'concurrency = "auto"', figures,
                                    sweep_keys="auto_max = 64\nauto_points = 6\nstop = []")
    assert runner.loads == [] and len(points) == 6


def test_find_max_bisects_for_the_largest_load_meeting_the_slos(tmp_path: Path) -> None:
    def figures(load: float) -> dict[str, float]:  # every request meets the SLOs up to 6 streams, half above
        return {"request_throughput": 10.0, "request_goodput": 10.0 if load <= 6 else 5.0}

    plan, runner, points, said = scripted(tmp_path, "concurrency = [1, 32]\ngoodput = { ttft = 1000 }", figures,
                                          find_max="concurrency")
    assert runner.loads == [1, 32, 6, 14, 9, 7]  # geometric midpoints, rounded, until 6 passes and 7 fails
    found = [e for e in journal(tmp_path / "store") if e["event"] == "found_max"]
    assert [(e["value"], e["failing"], e["attainment"]) for e in found] == [(6, 7, 1.0)]
    best = next(p for p in points if p["load"] == 6)
    assert best["note"] == "largest concurrency meeting the SLOs (7 does not)" and best["runs"]
    assert any("largest concurrency meeting the SLOs (7 does not): 6" in line for line in said)
    _, runner, _, said = scripted(tmp_path, "concurrency = [1, 32]\ngoodput = { ttft = 1000 }", figures,
                                  find_max="concurrency")
    assert runner.loads == [] and any(": 6, 100% of requests met them" in line for line in said)


def test_find_max_when_even_the_lowest_load_fails(tmp_path: Path) -> None:
    _, runner, points, _ = scripted(tmp_path, "request_rate = [1, 50]\ngoodput = { ttft = 1000 }",
                                    lambda load: {"request_throughput": 10.0, "request_goodput": 1.0},
                                    find_max="rate")
    assert runner.loads == [1]
    assert points[-1]["status"] == "skipped" and points[-1]["reason"] == "even the lowest load 1 fails the SLOs"


@pytest.mark.parametrize(("change", "message"), [
    ('[benchmark]\nrequest_rate = "auto"', 'request_rate = "auto": only concurrency takes "auto"'),
    ("[sweep]\nfind_max = 'rate'\n[benchmark]\nrequest_rate = 4\ngoodput = { ttft = 9 }",
     "find_max rate bisects between two loads: give [benchmark] request_rate = [LOW, HIGH], got 4"),
    ("[sweep]\nfind_max = 'concurrency'\n[benchmark]\nconcurrency = [1, 8]",
     "--find-max needs the SLOs it finds the load for"),
    ("[sweep]\nauto_points = 4", "[sweep] auto_points is for concurrency = \"auto\" or find_max"),
    ("[sweep]\nwarmup = -1", "[sweep] warmup must be a whole number of requests >= 0"),
    ("[server]\nengin = 'vllm'", "[server] has no key 'engin'"),
    ("[variants.b]\nargs = ['--x']\nimage_tag = 'y'", "[variants.b] has no field 'image_tag'"),
    ("[benchmark]\nconcurrency = [1, 2]\nmax_tokns = [8, 16]", "[benchmark] has no option 'max_tokns'"),
])
def test_bad_search_and_grid_input_is_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         change: str, message: str) -> None:
    rc, out, err = sweep(tmp_path, change + "\n", "--store", str(tmp_path / "store"), capsys=capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize("damage", ["runs folder is a file", "read-only runs folder"])
def test_a_store_that_cannot_take_runs_fails_before_the_first_launch(tmp_path: Path, damage: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    vllm, _ = write_fake_engines(tmp_path / "bin")
    store = tmp_path / "store"
    Store(store, create=True).close()
    runs = store / "runs"
    if damage == "runs folder is a file":
        runs.rmdir()
        runs.write_text("not a folder")
    elif os.geteuid() == 0:
        pytest.skip("root writes in a read-only folder")
    else:
        runs.chmod(0o555)
    log = tmp_path / "server.log"
    text = (f'[server]\nengine = "vllm"\nmodel = "m"\nengine_bin = "{vllm}"\nlog = "{log}"\n'
            "[benchmark]\nconcurrency = [1]\n")
    try:
        rc, out, err = sweep(tmp_path, text, "--store", str(store), capsys=capsys)
    finally:
        if runs.is_dir():
            runs.chmod(0o755)
    assert rc == 2 and err.startswith(f"fastbench sweep: error: --store {store}: ") and err.count("\n") == 1, err
    assert not log.exists()


def test_warm_up_runs_after_each_launch_before_the_first_measured_cell(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    vllm, _ = write_fake_engines(tmp_path / "bin")
    store = tmp_path / "store"
    text = f"""
[sweep]
store = "{store}"
warmup = 3
{fake_vllm_server(vllm, "--ttft-ms 2 --itl-ms 1")}
[benchmark]
concurrency = [1, 2]
num_prompts = 4
max_tokens = 4
"""
    rc, out, _ = sweep(tmp_path, text, capsys=capsys)
    assert rc == 0, out
    events = [e["event"] for e in journal(store)]
    assert events == ["launched", "warmed_up"]
    lines = out.splitlines()
    warm = next(i for i, line in enumerate(lines) if "warmed up: 3 requests" in line)
    assert warm < next(i for i, line in enumerate(lines) if line.startswith("  cell {"))
    assert len(stored(store)) == 2  # the warm-up is kept nowhere
    # --warmup 0: none
    rc, out, _ = sweep(tmp_path, text.replace("concurrency = [1, 2]", "concurrency = [3]"), "--warmup", "0",
                       capsys=capsys)
    assert rc == 0 and "warmed up" not in out and [e["event"] for e in journal(store)][-1] == "launched"


def test_ctrl_c_mid_sweep_keeps_every_finished_cell_and_a_rerun_resumes(tmp_path: Path) -> None:
    store = tmp_path / "store"
    path = tmp_path / "s.toml"
    path.write_text(f"""
[sweep]
store = "{store}"
[variants.a]
synthetic_args = "--ttft-ms 5 --itl-ms 25"
[benchmark]
concurrency = [1, 2, 3]
num_prompts = 6
max_tokens = 16
""")
    proc = subprocess.Popen([sys.executable, "-m", "fastbench", "sweep", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    cells_seen = 0
    for line in proc.stdout:
        cells_seen += line.startswith("  cell {")
        if cells_seen == 2:  # the first cell is done and stored, the second is running
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    # the summary says why each cell is not done, not "interrupted: interrupted"
    assert "interrupted: stopped mid-cell; a later sweep runs it again" in rest, rest
    assert "not run: the sweep was stopped before it" in rest and "interrupted: interrupted" not in rest
    runs = stored(store)
    assert [(r["max_concurrency"], r["stopped_reason"]) for r in runs] == [(1, "completed"), (2, "interrupted")]
    first = (store / "runs" / runs[0]["run_id"] / "result.json").read_bytes()
    assert orjson.loads(first)["completed"] == 6

    again = subprocess.run([sys.executable, "-m", "fastbench", "sweep", str(path)], capture_output=True, text=True,
                           timeout=300, check=False)
    assert again.returncode == 0, again.stderr
    ran = [orjson.loads(line.split("cell ", 1)[1])["concurrency"] for line in again.stdout.splitlines()
           if line.startswith("  cell {")]
    assert ran == [2, 3]  # the finished cell is found; the interrupted one runs again
    runs = stored(store)
    assert [(r["max_concurrency"], r["stopped_reason"]) for r in runs] == [
        (1, "completed"), (2, "interrupted"), (2, "completed"), (3, "completed")]
    assert (store / "runs" / runs[0]["run_id"] / "result.json").read_bytes() == first


def test_dry_run_of_a_search_says_what_it_will_choose(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = f"[sweep]\nstore = '{tmp_path / 'store'}'\nauto_max = 32\n[variants.a]\nsynthetic_args = {FAST}\n" \
           "[benchmark]\nconcurrency = 'auto'\nnum_prompts = 4\n"
    rc, out, _ = sweep(tmp_path, text, "--dry-run", capsys=capsys)
    assert rc == 0 and "2 cells (2 points x 1 repeats), 0 done, 2 to run" in out
    assert '{"concurrency":1} repeat 1/1: to run' in out and '{"concurrency":32} repeat 1/1: to run' in out
    assert "then up to 4 concurrencies between" in out
    rc, out, _ = sweep(tmp_path, text.replace("auto_max = 32", "").replace("'auto'", "[2, 16]")
                       + "goodput = { ttft = 50 }\n", "--dry-run", "--find-max", "concurrency", capsys=capsys)
    assert rc == 0 and "find-max concurrency: each series measures its two ends, then bisects" in out


def test_a_grid_over_the_limit_is_refused_before_any_cell_is_made(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []
    monkeypatch.setattr(api, "validate", made.append)  # every cell's configuration is checked as it is made
    loads = ", ".join(str(c) for c in range(1, 2001))
    text = f"""
[variants.a]
synthetic_args = {FAST}
[variants.b]
synthetic_args = {FAST}
[benchmark]
concurrency = [{loads}]
num_prompts = [{", ".join(str(n) for n in range(1, 1601))}]
"""  # 2 x 2,000 x 1,600 = 6.4M cells: the 3.2M-cell dry run never finished
    rc, out, err = sweep(tmp_path, text, "--dry-run", "--store", str(tmp_path / "store"), capsys=capsys)
    assert rc == 2 and out == "" and made == []
    assert err.count("\n") == 1, err
    assert (f"the sweep makes 6,400,000 cells (2 variants x 3,200,000 grid points (2000 concurrency x 1600 "
            f"num_prompts) x 1 repeat), more than the {grid.MAX_CELLS:,} one sweep may make") in err


def test_the_sweep_size_is_the_product_of_the_lists_up_to_the_limit() -> None:
    def takes_list(key: str) -> bool:
        return key == "percentile_metrics"

    bench = {"concurrency": list(range(100)), "num_prompts": list(range(50)), "percentile_metrics": [50, 99]}
    assert grid.check_size(bench, takes_list, variants=2, repeats=1, where="s.toml") == grid.MAX_CELLS
    with pytest.raises(ConfigError, match="10,100 cells"):
        grid.check_size(bench | {"num_prompts": list(range(101))}, takes_list, variants=1, repeats=1, where="s.toml")
    assert grid.check_size({"num_prompts": 4}, takes_list, variants=3, repeats=5, where="s.toml") == 15
