"""A sweep's cells are independent samples of a server that caches prefixes: each point and repeat draws
its own prompts (the warm-up others still), unless ``prompt_reuse = "shared"`` asks for one seed; the
prefix cache is emptied before each cell where the sweep asks (by default for launched vLLM and
SGLang, fastbench setting what vLLM needs), each cell recording whether it was and why not; every
dataset's prompts follow the seed, or the result says they cannot; and a resumed sweep finds its cells
by the seed that drew them."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest

from support.fakevllm import free_port, write_fake_engines
from fastbench import BenchConfig, run
from fastbench.cli import command
from fastbench.cli.sweep import RunCommand, load_plan
from fastbench.config import LaunchConfig
from fastbench.exceptions import ConfigError
from fastbench.load.datasets import build_workload_sync, prompt_seed
from fastbench.server.engines import VLLMServer, with_prefix_cache_reset
from fastbench.study import cellstate
from fastbench.study.store import Store
from fastbench.study.sweep import execute
from fastbench.study.sweepplan import Cell, Plan
from fastbench.synthetic import SyntheticServer

# The issue's sweep: a 1,024-token prefill takes 1024 / 20000 s = 51.2 ms on this server; a cached
# prompt's, the last block's 16 tokens, 0.8 ms.
PREFILL_TOK_S = 20000
PREFILL_MS = 1024 / PREFILL_TOK_S * 1e3
CACHED = ("--enable-prefix-caching", "--prefill-tok-s", str(PREFILL_TOK_S), "--itl-ms", "1")


def issue_sweep(store: Path, base_url: str, sweep_keys: str = "") -> str:
    return f"""
[sweep]
name = "cachecheck"
store = "{store}"
repeats = 2
{sweep_keys}
[variants.base]
base_url = "{base_url}"
[benchmark]
concurrency = [1, 4]
num_prompts = 16
random_input_len = 1024
random_output_len = 16
"""


def run_sweep(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "s.toml"
    path.write_text(text)
    capsys.readouterr()
    rc = command.main(["sweep", str(path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    return out


def cells(store: Path) -> list[dict[str, Any]]:
    """Each stored run's result document, in the order the sweep ran them."""
    with Store(store) as s:
        runs = s.query()
    return [orjson.loads((store / "runs" / run.run_id / "result.json").read_bytes()) for run in runs]


def hit_rate(doc: dict[str, Any]) -> float:
    rate = doc["fastbench"]["server"]["prefix_cache_stats"]["hit_rate"]
    assert isinstance(rate, float)
    return rate


def plan_of(tmp_path: Path, text: str) -> Plan:
    path = tmp_path / "p.toml"
    path.write_text(text)
    plan, _ = load_plan(str(path), RunCommand(command.build_parser, command.config_from_args),
                        store=str(tmp_path / "store"))
    return plan


def seeds(plan: Plan) -> dict[tuple[str, str, int], int]:
    return {(c.variant, orjson.dumps(dict(c.values)).decode(), c.repeat): c.config.seed for c in plan.cells}


# -- against an attached server that caches prefixes as vLLM V1 does ---------------------------------------

def test_fresh_prompts_keep_every_cell_of_the_issues_sweep_off_the_cache(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with SyntheticServer(*CACHED) as server:
        out = run_sweep(tmp_path, issue_sweep(tmp_path / "store", server.base_url), capsys)
        stats = server.stats()["prefix_cache"]
    docs = cells(tmp_path / "store")
    assert len(docs) == 4 and "prompts: fresh: each point and repeat its own" in out
    ttfts = [doc["median_ttft_ms"] for doc in docs]
    print(f"TTFT p50 per cell: {ttfts} ms; hit rates {[hit_rate(doc) for doc in docs]}")
    for doc in docs:
        assert hit_rate(doc) < 0.02  # random prompts of their own: nothing of them is cached
        assert doc["prefix_cache_warning"] is None and doc["expected_prefix_share"] == 0.0
        # every cell pays the whole prefill, as the first does (a cached prompt's is 0.8 ms)
        assert doc["median_ttft_ms"] > 0.9 * PREFILL_MS
        assert doc["median_ttft_ms"] < 3 * ttfts[0]
        config = doc["fastbench"]["config"]
        assert doc["prompt_reuse"] == "fresh" and doc["sweep_seed"] == "0"
        assert doc["fastbench"]["workload"]["prompt_seed"] == {
            "seed": config["seed"], "varies_prompts": True, "draws": "the prompts' tokens and lengths"}
        assert doc["fastbench"]["server"]["prefix_cache_reset"]["asked"] is False
        assert doc["sweep_prefix_cache_reset"].startswith("off: an attached server's cache is emptied only when")
    assert len({doc["fastbench"]["config"]["seed"] for doc in docs}) == 4
    assert stats["resets"] == 0 and stats["hits"] == 0  # the warm-up's prompts were no cell's either
    csv = (tmp_path / "store" / "sweeps" / "cachecheck.csv").read_text().splitlines()
    header = csv[0].split(",")
    assert header[-3:] == ["prompt_seeds", "prefix_cache_reset", "prefix_cache_warning"]
    assert all(row.endswith(",0/2,0/2") and len(row.split(",")[-3].split()) == 2 for row in csv[1:])
    assert "WARNING" not in out  # no cell measured the cache: the summary warns of none


def test_shared_prompts_show_the_cache_after_the_first_cell(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    with SyntheticServer(*CACHED) as server:
        out = run_sweep(tmp_path, issue_sweep(tmp_path / "store", server.base_url, 'prompt_reuse = "shared"'),
                        capsys)
    docs = cells(tmp_path / "store")
    assert 'prompts: shared (prompt_reuse = "shared")' in out
    assert {doc["fastbench"]["config"]["seed"] for doc in docs} == {0}
    rates = [hit_rate(doc) for doc in docs]
    ttfts = [doc["median_ttft_ms"] for doc in docs]
    print(f"TTFT p50 per cell: {ttfts} ms; hit rates {rates}")
    # the first cell finds none of its prompts cached (the warm-up sent others), every later one all of
    # them but each prompt's last block, which vLLM always computes: 63 of 64 blocks
    assert rates[0] < 0.02 and all(rate > 0.9 for rate in rates[1:])
    assert ttfts[0] > 0.9 * PREFILL_MS and all(ttft < 0.5 * PREFILL_MS for ttft in ttfts[1:])
    # random prompts share nothing of their own: each later cell's hit rate is warned of, the first's not
    assert docs[0]["prefix_cache_warning"] is None
    assert all("far above the 0 % this workload's own sharing predicts" in doc["prefix_cache_warning"]
               and "seed 0" in doc["prefix_cache_warning"] for doc in docs[1:])
    # the sweep's summary says so under its table, a line per point, and counts the warned runs in its CSV
    summary = out[out.index("variant  concurrency"):].splitlines()
    warned = [line for line in summary if line.startswith("WARNING ")]
    assert [line.split(": prefix cache: ")[0] for line in warned] == [
        "WARNING base concurrency=1: 1 of 2 runs", "WARNING base concurrency=4: 2 of 2 runs"]
    assert all(line.endswith("% of prompt tokens came from the server's cache …") for line in warned)
    csv = [row.split(",") for row in (tmp_path / "store" / "sweeps" / "cachecheck.csv").read_text().splitlines()]
    column = csv[0].index("prefix_cache_warning")
    assert [row[column] for row in csv[1:]] == ["1/2", "2/2"]


def test_the_plan_of_shared_prompts_on_a_kept_cache_warns_first_and_never_says_fresh(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "shared.toml"
    path.write_text(issue_sweep(tmp_path / "store", "http://127.0.0.1:9", 'prompt_reuse = "shared"'))
    capsys.readouterr()
    assert command.main(["sweep", str(path), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("WARNING: base: shared prompts and no prefix-cache reset between cells: every cell "
                               "after the first on a server will measure its cache")
    assert lines[2].startswith('prompts: shared (prompt_reuse = "shared")')
    rule = next(line for line in lines if line.startswith("prefix cache reset before each cell: base: "))
    assert rule.endswith(cellstate.SHARED_CACHE) and "fresh prompts" not in "\n".join(lines)
    # fresh prompts: no warning, and the rule says why the cells stay apart
    path.write_text(issue_sweep(tmp_path / "store", "http://127.0.0.1:9"))
    assert command.main(["sweep", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "WARNING" not in out and "; fresh prompts keep cells apart" in out
    # reset asked: the cache is emptied before each cell, so shared prompts measure no cache
    path.write_text(issue_sweep(tmp_path / "store", "http://127.0.0.1:9",
                                'prompt_reuse = "shared"\nreset_prefix_cache = true'))
    assert command.main(["sweep", str(path), "--dry-run"]) == 0
    assert "WARNING" not in capsys.readouterr().out
    assert cellstate.reset_rule("launch", "llama.cpp", None, "shared") == (
        False, f"off: a launched llama.cpp server has no prefix-cache reset; {cellstate.SHARED_CACHE}")


def test_reset_before_each_cell_empties_the_cache_or_says_why_not(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    keys = 'prompt_reuse = "shared"\nreset_prefix_cache = true'
    text = issue_sweep(tmp_path / "store", "URL", keys).replace("repeats = 2", "repeats = 1")
    text = text.replace("num_prompts = 16", "num_prompts = 8")
    with SyntheticServer(*CACHED) as server:
        out = run_sweep(tmp_path, text.replace("URL", server.base_url), capsys)
        stats = server.stats()["prefix_cache"]
    docs = cells(tmp_path / "store")
    assert "prefix cache reset before each cell: base: on: [sweep] reset_prefix_cache = true" in out
    for doc in docs:
        assert doc["fastbench"]["server"]["prefix_cache_reset"] == {"asked": True, "done": True, "why_not": None,
                                                                   "tries": 1}
        assert hit_rate(doc) < 0.02  # the same prompts as the cell before, but the cache was emptied
        assert doc["median_ttft_ms"] > 0.9 * PREFILL_MS
    with Store(tmp_path / "store") as s:
        flats = s.flat([run.run_id for run in s.query()])
    assert [flat["prefix_cache_reset"] for _, flat in flats.values()] == [True, True]
    # one reset per cell, after the warm-up: what the cache holds at the end is the last cell's prompts
    # alone (8 prompts of 64 full blocks), none of the warm-up's
    assert stats["resets"] == 2 and stats["blocks"] == 8 * 1024 // 16

    refusing = tmp_path / "refusing"
    refusing.mkdir()
    with SyntheticServer(*CACHED, "--no-reset-prefix-cache") as server:
        run_sweep(refusing, text.replace("URL", server.base_url).replace(str(tmp_path / "store"),
                                                                         str(refusing / "store")), capsys)
    docs = cells(refusing / "store")
    for doc in docs:
        record = doc["fastbench"]["server"]["prefix_cache_reset"]
        assert record["asked"] and not record["done"]
        assert record["why_not"].startswith("POST /reset_prefix_cache (vLLM's) answered 404")
        assert any(note.startswith("prefix cache not reset") for note in doc["fastbench"]["server"]["notes"])
    assert hit_rate(docs[1]) > 0.9  # not emptied: the second cell measures the cache


# -- seeds ---------------------------------------------------------------------------------------------

TWO_VARIANTS = """
[sweep]
repeats = 2
{keys}
[variants.a]
synthetic_args = "--itl-ms 1"
[variants.b]
synthetic_args = "--itl-ms 2"
[benchmark]
concurrency = [1, 4]
max_tokens = [8, 16]
num_prompts = 4
{bench}
"""


def test_fresh_seeds_differ_per_point_and_repeat_and_pair_the_variants(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, TWO_VARIANTS.format(keys="", bench=""))
    by_cell = seeds(plan)
    assert len(by_cell) == 2 * 2 * 2 * 2
    a = {(values, repeat): seed for (variant, values, repeat), seed in by_cell.items() if variant == "a"}
    b = {(values, repeat): seed for (variant, values, repeat), seed in by_cell.items() if variant == "b"}
    assert a == b  # the same prompts for both variants at one point and repeat: a paired comparison
    assert len(set(a.values())) == 8  # every point and repeat its own
    assert plan.warmup_seed not in by_cell.values() and plan.warmup_seed >= 2 ** 62 > max(by_cell.values())
    # derived, not drawn: the same file gives the same seeds; another sweep seed others
    assert seeds(plan_of(tmp_path, TWO_VARIANTS.format(keys="", bench=""))) == by_cell
    other = seeds(plan_of(tmp_path, TWO_VARIANTS.format(keys="seed = 7", bench="")))
    assert not set(other.values()) & set(by_cell.values())
    assert seeds(plan_of(tmp_path, TWO_VARIANTS.format(keys="", bench="seed = 7"))) == other
    # the rule itself: a stable digest of the sweep seed, the point's values and the repeat
    cell = plan.cells[0]
    assert cell.config.seed == cellstate.cell_seed(0, cell.values, cell.repeat)
    assert all(c.config.metadata["sweep_seed"] == "0" and c.config.metadata["prompt_reuse"] == "fresh"
               for c in plan.cells)


def test_shared_prompts_give_every_cell_the_sweeps_seed(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, TWO_VARIANTS.format(keys='prompt_reuse = "shared"\nseed = 5', bench=""))
    assert set(seeds(plan).values()) == {5} and plan.warmup_seed != 5
    assert plan_of(tmp_path, TWO_VARIANTS.format(keys='prompt_reuse = "shared"', bench="")).cells[3].config.seed == 0
    # a crossed seed is the cell's own in shared mode, and one more axis of the derivation in fresh mode
    crossed = plan_of(tmp_path, TWO_VARIANTS.format(keys='prompt_reuse = "shared"', bench="seed = [3, 4]"))
    assert {c.config.seed for c in crossed.cells} == {3, 4} and crossed.warmup_seed not in (3, 4)
    fresh = seeds(plan_of(tmp_path, TWO_VARIANTS.format(keys="", bench="seed = [3, 4]")))
    assert len(set(fresh.values())) == 16  # 2 seeds x 2 concurrencies x 2 max_tokens x 2 repeats, per variant


def test_two_sweeps_never_warm_a_server_with_the_same_prompts(tmp_path: Path) -> None:
    """The warm-up's seed has the sweep's name in it: two sweeps of one seed against one server warmed it with
    the same prompts, and the second's warm-up was all cached (24.7 s against 144.7 s). The same sweep keeps
    its own, so it resumes as it was."""
    first = plan_of(tmp_path, TWO_VARIANTS.format(keys='name = "first"', bench=""))
    second = plan_of(tmp_path, TWO_VARIANTS.format(keys='name = "second"', bench=""))
    assert first.warmup_seed != second.warmup_seed and min(first.warmup_seed, second.warmup_seed) >= 2 ** 62
    assert plan_of(tmp_path, TWO_VARIANTS.format(keys='name = "first"', bench="")).warmup_seed == first.warmup_seed


def test_variants_attached_to_one_server_draw_prompts_of_their_own(tmp_path: Path) -> None:
    text = TWO_VARIANTS.format(keys="", bench="").replace(
        'synthetic_args = "--itl-ms 1"', 'base_url = "http://127.0.0.1:9/"').replace(
        'synthetic_args = "--itl-ms 2"', 'base_url = "http://127.0.0.1:9"')
    plan = plan_of(tmp_path, text)
    by_cell = seeds(plan)
    a = {(v, r): s for (variant, v, r), s in by_cell.items() if variant == "a"}
    b = {(v, r): s for (variant, v, r), s in by_cell.items() if variant == "b"}
    assert not set(a.values()) & set(b.values())  # one cache: the pairing would make b measure a's prompts
    assert any("a, b: attached to a server another variant attaches to" in note for note in plan.notes)


@pytest.mark.parametrize(("keys", "message"), [
    ('prompt_reuse = "sometimes"', '[sweep] prompt_reuse must be "fresh" or "shared", got a string'),
    ("seed = -1", "[sweep] seed must be a whole number >= 0, got an integer (-1)"),
    ("seed = 1.5", "[sweep] seed must be a whole number >= 0, got a float (1.5)"),
    ('reset_prefix_cache = "yes"', "[sweep] reset_prefix_cache must be true or false, got a string"),
    ("seed = 1\n[benchmark]\nseed = 2", "[sweep] seed and [benchmark] seed both give the seed"),
    ("reset_prefix_cache = true\n[benchmark]\nreset_prefix_cache = true",
     "[sweep] reset_prefix_cache and [benchmark] reset_prefix_cache both say"),
])
def test_bad_prompt_and_reset_keys_are_one_line_naming_them(tmp_path: Path, keys: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        plan_of(tmp_path, f"[sweep]\n{keys}\n[variants.a]\nsynthetic_args = '--itl-ms 1'\n")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_resumed_sweep_finds_its_cells_by_the_seed_that_drew_them(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    text = f"""
[sweep]
store = "{tmp_path / 'store'}"
repeats = 2
[variants.a]
synthetic_args = "--ttft-ms 1 --itl-ms 1"
[benchmark]
concurrency = [1, 2]
num_prompts = 3
max_tokens = 2
"""
    assert run_sweep(tmp_path, text, capsys).count("  cell {") == 4
    assert "  cell {" not in run_sweep(tmp_path, text, capsys)  # resumed: every cell found
    # shared prompts are other measurements (other seeds): measured, and the fresh cells still found after
    shared = text.replace("repeats = 2", 'repeats = 2\nprompt_reuse = "shared"')
    assert run_sweep(tmp_path, shared, capsys).count("  cell {") == 4
    assert "  cell {" not in run_sweep(tmp_path, text, capsys)
    assert "  cell {" not in run_sweep(tmp_path, shared, capsys)
    docs = cells(tmp_path / "store")
    assert [doc["fastbench"]["config"]["seed"] == 0 for doc in docs] == [False] * 4 + [True] * 4


class _Recorder:
    """A Runner that runs nothing: it records the seed each warm-up and cell was handed."""

    def __init__(self) -> None:
        self.warm_ups: list[tuple[int, bool]] = []
        self.runs: list[int] = []

    async def launch(self, group: Any, stop: asyncio.Event) -> Any:
        raise AssertionError("attached: nothing is launched")

    async def warm_up(self, cell: Cell, base_url: str, requests: int, stop: asyncio.Event) -> None:
        self.warm_ups.append((cell.config.seed, cell.config.reset_prefix_cache))

    async def run(self, cell: Cell, server: Any, stop: asyncio.Event) -> str:
        self.runs.append(cell.config.seed)
        raise RuntimeError("not run")


def test_the_warm_up_draws_from_a_seed_no_cell_has_and_asks_no_reset(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "[sweep]\nreset_prefix_cache = true\n[variants.a]\nbase_url = 'http://127.0.0.1:9'\n"
                             "[benchmark]\nconcurrency = [1, 2]\n")
    runner = _Recorder()
    with Store(plan.store, create=True) as store:
        asyncio.run(execute(plan, store, runner, asyncio.Event(), say=lambda line: None))
    assert runner.warm_ups == [(plan.warmup_seed, False)]  # the cell's own reset comes after it
    assert runner.runs == [c.config.seed for c in plan.cells] and plan.warmup_seed not in runner.runs
    assert all(c.config.reset_prefix_cache for c in plan.cells)


# -- launched servers: the reset on by default, with what vLLM needs ------------------------------------------

def test_a_launched_vllm_variant_resets_before_each_cell_by_default(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    vllm, _ = write_fake_engines(tmp_path / "bin")  # 404s /reset_prefix_cache unless VLLM_SERVER_DEV_MODE=1
    store = tmp_path / "store"
    text = f"""
[sweep]
store = "{store}"
warmup = 2
[server]
engine = "vllm"
model = "fake/model"
engine_bin = "{vllm}"
port = {free_port()}
ready_timeout = 30
stop_grace = 3
args = ["--served-model-name", "fake-model"]
env = {{ FAKE_SYNTH_ARGS = "{' '.join(CACHED)}" }}
[benchmark]
concurrency = [1, 2]
num_prompts = 4
random_input_len = 256
max_tokens = 2
"""
    out = run_sweep(tmp_path, text, capsys)
    assert "prefix cache reset before each cell: default: on: a launched vLLM server (fastbench sets " \
           "VLLM_SERVER_DEV_MODE=1 for it)" in out
    for doc in cells(store):
        assert doc["fastbench"]["server"]["prefix_cache_reset"]["done"] is True
        assert "VLLM_SERVER_DEV_MODE=1" in doc["fastbench"]["config"]["launch"]["env"]
        assert "VLLM_SERVER_DEV_MODE=1" in doc["fastbench"]["server"]["provenance"]["command"]
    # asked not to: no reset, and the engine's environment as the file gives it
    off = tmp_path / "off"
    off.mkdir()
    run_sweep(off, text.replace(str(store), str(off / "store")).replace("warmup = 2", "reset_prefix_cache = false"),
              capsys)
    for doc in cells(off / "store"):
        assert doc["fastbench"]["server"]["prefix_cache_reset"]["asked"] is False
        assert doc["sweep_prefix_cache_reset"] == ("off: [sweep] reset_prefix_cache = false; fresh prompts keep "
                                                   "cells apart")
        assert not any(e.startswith("VLLM_SERVER_DEV_MODE") for e in doc["fastbench"]["config"]["launch"]["env"])


@pytest.mark.parametrize("docker", [False, True])
def test_a_launched_run_asking_for_a_reset_gets_what_vllm_needs_for_it(tmp_path: Path, docker: bool,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    vllm, fake_docker = write_fake_engines(tmp_path / "bin")
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(tmp_path))
    launch = LaunchConfig(engine="vllm", model="fake/model", engine_bin=str(fake_docker if docker else vllm),
                          docker_image="vllm/vllm-openai:fake" if docker else None, port=free_port(),
                          engine_args=("--served-model-name", "fake-model"), ready_timeout_s=30, stop_grace_s=3,
                          env=(f"FAKE_SYNTH_ARGS={' '.join(CACHED)}",), log_path=str(tmp_path / "server.log"))
    config = BenchConfig(launch=launch, num_prompts=3, max_tokens=2, random_input_len=64, reset_prefix_cache=True)
    result = run(config)
    assert result.server_info["prefix_cache_reset"]["done"] is True  # served: the fake 404s it without the mode
    assert "VLLM_SERVER_DEV_MODE=1" in result.server_info["provenance"]["env"]
    plain = run(dataclasses.replace(config, reset_prefix_cache=False))
    assert plain.server_info["prefix_cache_reset"]["asked"] is False
    assert plain.server_info["provenance"]["env"] == [launch.env[0]]


def test_what_each_engine_needs_for_a_reset_is_added_unless_the_user_set_it() -> None:
    vllm = LaunchConfig(engine="vllm", model="m", docker_image="vllm/vllm-openai:v0.11.0", env=("HF_TOKEN",))
    added = with_prefix_cache_reset(vllm)
    assert added.env == ("HF_TOKEN", "VLLM_SERVER_DEV_MODE=1")
    server = VLLMServer(added)
    argv = server.docker_argv()
    assert argv[argv.index("VLLM_SERVER_DEV_MODE") - 1] == "--env"  # docker: passed on by name
    assert server.process_env()["VLLM_SERVER_DEV_MODE"] == "1"
    theirs = dataclasses.replace(vllm, env=("VLLM_SERVER_DEV_MODE=0",))
    assert with_prefix_cache_reset(theirs) == theirs
    for engine in ("sglang", "llama.cpp"):
        other = LaunchConfig(engine=engine, model="m")  # type: ignore[arg-type]
        assert with_prefix_cache_reset(other) == other
    assert cellstate.reset_rule("launch", "sglang", None) == (True, "on: a launched SGLang server")
    assert cellstate.reset_rule("launch", "llama.cpp", None)[0] is False
    assert cellstate.reset_rule("synthetic", None, True) == (True, "on: [sweep] reset_prefix_cache = true")


# -- every dataset follows the seed, or says it cannot ----------------------------------------------------------

def _files(tmp_path: Path) -> dict[str, Path]:
    words = [f"w{i}" for i in range(400)]
    sharegpt = [{"id": str(i), "conversations": [{"from": "human", "value": " ".join(words[i:i + 12])},
                                                 {"from": "gpt", "value": " ".join(words[i + 1:i + 9])}]}
                for i in range(40)]
    paths = {name: tmp_path / name for name in ("sharegpt.json", "prompts.jsonl", "custom.jsonl", "spec.jsonl",
                                                "burst.csv", "trace.jsonl")}
    paths["sharegpt.json"].write_bytes(orjson.dumps(sharegpt))
    paths["prompts.jsonl"].write_text("".join(orjson.dumps({"prompt": " ".join(words[i:i + 9])}).decode() + "\n"
                                              for i in range(40)))
    paths["custom.jsonl"].write_text("".join(orjson.dumps({"prompt": " ".join(words[i:i + 7])}).decode() + "\n"
                                             for i in range(40)))
    paths["spec.jsonl"].write_text("".join(orjson.dumps({"question_id": i, "category": "c", "turns": [
        " ".join(words[i:i + 8])]}).decode() + "\n" for i in range(40)))
    paths["burst.csv"].write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + "".join(
        f"{i},GPT-4,{20 + i % 5},{3 + i % 4},0,API log\n" for i in range(40)))
    paths["trace.jsonl"].write_text("".join(orjson.dumps({"timestamp": i, "input_length": 40, "output_length": 2,
                                                          "hash_ids": [i % 3, 10 + i]}).decode() + "\n"
                                            for i in range(12)))
    return paths


@pytest.mark.parametrize(("dataset", "file", "options"), [
    ("random", None, {"random_input_len": 32}),
    ("random", None, {"random_input_len": 32, "random_prefix_len": 16}),
    ("prefix_repetition", None, {"prefix_repetition_prefix_len": 16, "prefix_repetition_suffix_len": 8,
                                 "prefix_repetition_num_prefixes": 2}),
    ("generated-shared-prefix", None, {"gsp_num_groups": 2, "gsp_prompts_per_group": 4, "gsp_system_prompt_len": 16,
                                       "gsp_question_len": 8}),
    ("sharegpt", "sharegpt.json", {}),
    ("jsonl", "prompts.jsonl", {}),
    ("custom", "custom.jsonl", {}),
    ("spec_bench", "spec.jsonl", {}),
    ("burstgpt", "burst.csv", {}),
    ("timed_trace", "trace.jsonl", {"timed_trace_chunk_hash_size": 16}),
])
def test_every_dataset_draws_other_prompts_from_another_seed(tmp_path: Path, dataset: str, file: str | None,
                                                             options: dict[str, Any]) -> None:
    path = _files(tmp_path)[file] if file else None
    config = BenchConfig(dataset_name=dataset, dataset_path=path, num_prompts=8, max_tokens=2,  # type: ignore[arg-type]
                         **options)

    def prompts(seed: int, order: str = "random") -> list[Any]:
        work = build_workload_sync(config.replace(seed=seed, dataset_order=order), "m", max_model_len=None)
        return [orjson.loads(bytes(spec.body)).get("prompt") for spec in work.requests]

    record = prompt_seed(config.replace(seed=3))
    assert record["seed"] == 3 and record["varies_prompts"] is True and record["draws"]
    assert prompts(1) == prompts(1) and prompts(1) != prompts(2)
    if file is not None and dataset not in ("burstgpt", "timed_trace"):  # these two have no file order
        assert prompts(1, "file") == prompts(2, "file")  # read in order: every seed the same prompts
        fixed = prompt_seed(config.replace(dataset_order="file"))
        assert fixed["varies_prompts"] is False and fixed["draws"].startswith("none of them: --dataset-order file")


def test_a_fresh_sweep_over_a_file_read_in_order_says_its_prompts_cannot_change(tmp_path: Path) -> None:
    prompts = _files(tmp_path)["prompts.jsonl"]
    plan = plan_of(tmp_path, f"[variants.a]\nsynthetic_args = '--itl-ms 1'\n[benchmark]\nconcurrency = [1, 2]\n"
                             f"dataset_name = 'jsonl'\ndataset_path = '{prompts}'\ndataset_order = 'file'\n")
    assert plan.notes == ("a: --dataset-order file sends the file's prompts in order: every cell sends the same "
                          "ones; a server that caches prefixes serves every cell after the first from its cache "
                          "([sweep] reset_prefix_cache = true empties it before each, where the server allows)",)
    assert all(c.config.card_notes[-1].startswith("Prompts: --dataset-order file sends") for c in plan.cells)
