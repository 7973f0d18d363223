"""fastbench sweep: the grid crossed, every cell a stored run found again (resume), a failing cell recorded
while the rest run, the dry run's plan, repeats' intervals, a stop rule skipping the heavier loads, launched
variants (the fake vLLM) launched once per variant or per linked value, and bad input refused in one line
before anything is launched."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import Any

import orjson
import pytest

from _fakevllm import free_port, write_fake_engines
from fastbench.cli import command
from fastbench.cli.sweep import RunCommand, build_parser, load_plan
from fastbench.study import grid
from fastbench.study.store import Store
from fastbench.study.sweep import StopRules, _stop_reason, t_interval

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
    assert stored(store) == []


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
    assert f"±{half:,.1f}" in out


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
[server]
engine = "vllm"
model = "fake/model"
engine_bin = "{vllm}"
port = {free_port()}
ready_timeout = 30
stop_grace = 3
args = ["--served-model-name", "fake-model"]
env = {{ FAKE_SYNTH_ARGS = "--ttft-ms 2 --itl-ms 1" }}
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


def test_readme_sweep_example_makes_its_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Sweeps: variants x a grid, resumable", 1)[1]
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
