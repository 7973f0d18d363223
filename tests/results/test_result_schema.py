"""docs/result-schema.md names every key a result file holds.

Depth rule: every key of every JSON object in the file is checked, at any depth, including the
objects inside arrays (their key path gets ``[]``: ``...intervals[].drafts``). Arrays of plain values
(per-request lists, series, ranges) and scalars are leaves: their elements are not keys.

A key is documented when the doc has a section whose heading names the key's parent object
(``### `fastbench.server.provenance```; a ``*`` segment in a heading matches any one key; the
"Top level" section is the root object) and, in that section, a table row whose first cell holds in
backticks the key, or its path relative to the heading (``gauges.running``), after shell-style
``{a,b}`` expansion (``{mean,median}_ttft_ms``).

Keys that are data rather than schema are not checked by name, as the doc describes those maps as a
group: in ``NAMED_BY_DATA`` maps (ErrorClass names, UsageSource names, SLO names) each value is still
checked, under a ``*`` segment; ``OPAQUE`` maps (user JSON, run-card rows keyed by their labels, vLLM's
log fields) are not entered at all.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import orjson

from support.result_schema import DOC, undocumented
import fastbench
from fastbench.config import BenchConfig, LaunchConfig


def test_every_key_of_a_synthetic_run_is_documented(tmp_path: Path) -> None:
    config = BenchConfig(
        base_url=None, num_prompts=6, concurrency=2, random_input_len=8, random_output_len=8,
        synthetic_args=("--ttft-ms", "2", "--itl-ms", "1", "--tokens-per-chunk", "1-4"),
        result_json=str(tmp_path / "r.json"),
    )
    fastbench.run(config)
    doc = orjson.loads((tmp_path / "r.json").read_bytes())
    assert "fastbench" in doc and "spec_decode_num_drafts" in doc  # the run reached the sections it should
    assert doc["fastbench"]["server"]["synthetic_stats"]
    assert undocumented(doc) == []


def test_the_checker_catches_an_undocumented_key() -> None:
    assert undocumented({"completed": 1, "fastbench": {"run": {"duration_s": 1.0}}}) == []
    assert undocumented({"fastbench": {"run": {"new_key": 1}, "brand_new": {}}}) == [
        "fastbench.run.new_key", "fastbench.brand_new"]
    assert undocumented({"fastbench": {"errors": {"TIMEOUT": {"count": 1, "surprise": 2}}}}) == [
        "fastbench.errors.*.surprise"]


def test_launched_server_sections_are_documented(tmp_path: Path) -> None:
    """What only a launched server (or memory sampling) writes, built by the code that writes it."""
    from safetensors.numpy import save_file

    from fastbench.results import modelcard, serversections
    from fastbench.results import writers as report
    from fastbench.results.observations import MemoryReport, Teardown
    from fastbench.server import memory as memsampler
    from fastbench.server import modelinfo
    from fastbench.server.engines import VLLMServer
    from fastbench.server.monitor import WindowMonitor
    from fastbench.server.serverlog import parse_vllm_footprint, spec_log_summary

    launch = LaunchConfig(model="org/model", docker_image="vllm/vllm-openai:latest", engine_bin=sys.executable,
                          engine_args=("--quantization", "awq", "--speculative-config", '{"method":"ngram"}'))
    config = BenchConfig(launch=launch)
    vllm = VLLMServer(launch)
    vllm.load_time_s = 1.0
    window = WindowMonitor("http://127.0.0.1:1", config, vllm, on_server_death=lambda _: None).report()
    series = memsampler.MemorySeries(
        interval_s=1.0, baseline=memsampler.Baseline(t_ns=0, mem_total=2 << 30, mem_available=1 << 30),
        samples=[memsampler.Sample(t_ns=10**9, mem_total=2 << 30, mem_available=1 << 29, mem_available_drop=1 << 29,
                                   server_rss=1 << 28, server_procs=2,
                                   gpus=(memsampler.GpuReading(1, 2, 3.0, 4.0, 5),))],
        gpus=[memsampler.GpuInfo(label="card0", source="amdgpu", name="AMD GPU")],
        gpu_sources={"nvml": "pynvml not importable", "amdgpu": "1 card"}, server_pid=1, notes=["a note"],
    )
    log = ("Model loading took 0.51 GiB memory\nAvailable KV cache memory: 2.25 GiB\n"
           "GPU KV cache size: 110,733 tokens, Maximum concurrency for 2,048 tokens per request: 54.07x\n"
           "Graph capturing finished in 3 secs, took 0.25 GiB\n")
    spec_line = ("SpecDecoding metrics: Mean acceptance length: 2.32, Accepted: 342 tokens, Drafted: 777 tokens, "
                 "Per-position acceptance rate: 0.707, 0.413, Avg Draft acceptance rate: 44.0%")
    # /metrics never read: server_metrics says it is unavailable
    window = dataclasses.replace(window, warnings=["WARNING: something"], spec_log=spec_log_summary([spec_line]))
    memory = MemoryReport(series=series.to_dict(), peaks=series.peaks(), footprint=parse_vllm_footprint(log))
    teardown = Teardown(how="SIGTERM", seconds=1.5, exit="exited with status 0", port_free=True, processes_left=[],
                        left_the_group=[])
    info = serversections.server_sections(window, memory=memory, teardown=teardown, client_tokens_per_chunk=1.2)
    (tmp_path / "config.json").write_text('{"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}')
    save_file({"model.layers.0.experts.0.w1.weight": np.zeros((4, 4), np.float16)}, str(tmp_path / "model.safetensors"))
    info.update(modelcard.model_sections(modelinfo.facts_or_error(str(tmp_path))))
    assert info["model_files"]["active_params"] == 4 and info["model_card"]["Family"] == "Mixtral (mixtral)"
    assert undocumented({"server": {"model_files": {"error": "x"}}}, ("fastbench",)) == []
    assert {"engine", "launch_command", "load", "variant", "card_config", "teardown"} <= info.keys()
    assert len(info["footprint"]) == 5 and info["memory_series"]["series"]["gpus"]
    fastbench_part = {"server": info, "config": report.config_to_dict(config)}
    assert undocumented(fastbench_part, ("fastbench",)) == []


def test_definitions_are_in_the_doc_verbatim() -> None:
    from fastbench.results.definitions import DEFINITIONS

    text = DOC.read_text()
    for name, definition in DEFINITIONS.items():
        assert f"| `{name}` | {definition} |" in text, name


def test_every_key_of_a_workers_run_is_documented(tmp_path: Path) -> None:
    """--workers adds its section (fastbench.workers); a worker's errors are keyed by class."""
    config = BenchConfig(
        base_url=None, num_prompts=8, concurrency=2, random_input_len=8, random_output_len=8, workers=2,
        max_seconds=0.1, synthetic_args=("--ttft-ms", "2", "--itl-ms", "20"), result_json=str(tmp_path / "r.json"),
    )
    fastbench.run(config)
    doc = orjson.loads((tmp_path / "r.json").read_bytes())
    assert doc["fastbench"]["workers"]["per_worker"][0]["errors"]  # the cap cancelled some: keyed by class
    assert undocumented(doc) == []
