"""The Python API: bad options are refused before anything runs; a finished run is never thrown away."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import os
import resource
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from fastbench import BenchConfig, ConfigError, ResultWriteError, ServerError, api, checks, datasetoptions, run
from fastbench.config import LaunchConfig
from fastbench.load.driver import LoadGenerator
from fastbench.results import card as run_card
from fastbench.results import writers as report
from fastbench.results.environment import environment
from fastbench.server import control
from fastbench.synthetic import SyntheticServer

# Nothing listens on port 1: a config that got past validation would fail there with a ServerError.
UNREACHABLE = "http://127.0.0.1:1"


@pytest.mark.parametrize("changes,words", [
    ({"concurrency": 2.5}, "BenchConfig.concurrency must be a whole number or None, got 2.5 (float)"),
    ({"concurrency": "4"}, "BenchConfig.concurrency must be a whole number"),
    ({"num_prompts": True}, "BenchConfig.num_prompts must be a whole number, got True (bool)"),
    ({"num_warmups": 1.5}, "BenchConfig.num_warmups must be a whole number"),
    ({"seed": -1}, "--seed must be >= 0, got -1"),
    ({"coalesce_ms": None}, "BenchConfig.coalesce_ms must be a number or 'auto', got None"),
    ({"metrics_interval_s": None}, "BenchConfig.metrics_interval_s must be a number, got None"),
    ({"extra_body": "x"}, "BenchConfig.extra_body must be a dict, got 'x' (str)"),
    # a 400 for every request otherwise (vLLM: "Stream options can only be defined when stream=True")
    ({"extra_body": {"stream": False}}, "--extra-body cannot set stream: fastbench always streams"),
    ({"extra_body": {"stream_options": {"include_usage": False}}}, "--extra-body cannot set stream_options"),
    ({"goodput": {"ttft": -1}}, "--goodput ttft must be a number of milliseconds > 0, got -1"),
    ({"goodput": {"ttft": "abc"}}, "--goodput ttft must be a number of milliseconds > 0, got 'abc'"),
    ({"goodput": {"ttfb": 5}}, "--goodput takes ttft, tpot and e2el, got 'ttfb'"),
    ({"dataset_order": "zzz"}, "--dataset-order must be one of random, file, got 'zzz'"),
    ({"synthetic_args": "--itl-ms 5"}, "synthetic_args must be a tuple of strings"),
    ({"label": 123}, "BenchConfig.label must be a string or None, got 123 (int)"),
    ({"burstiness": float("inf")}, "--burstiness must be > 0"),
    ({"request_timeout_s": float("nan")}, "--request-timeout must be > 0"),
    ({"api_key": "bad\nkey"}, "printable ASCII"),
    ({"result_json": "/nonexistent/x.json"}, "--result-json /nonexistent/x.json: /nonexistent does not exist"),
    ({"result_card": "/nonexistent/x.md"}, "--result-card /nonexistent/x.md: /nonexistent does not exist"),
    ({"save_detailed": "/nonexistent/x.jsonl"}, "--requests-jsonl /nonexistent/x.jsonl: /nonexistent does not"),
    ({"launch": LaunchConfig(model="m", port=99999), "base_url": None}, "--server-port must be between 1"),
    ({"request_rate": 1e-12}, "--request-rate 1e-12 spreads 2 arrivals over 23,148,148 days"),
    ({"num_prompts": 10**20}, "--num-prompts must be between 1 and 10,000,000"),
    ({"max_model_len": 0}, "--max-model-len must be >= 1, got 0"),
    ({"random_output_len": 0}, "--random-output-len must be >= 1, got 0"),
    ({"random_range_ratio": 1.0}, "--random-range-ratio must be in [0, 1), got 1.0"),
    ({"concurrency": 0}, "--concurrency must be at least 1, got 0"),
    ({"coalesce_ms": -1}, "--coalesce-ms must be 'auto' or between 0 and 1000, got -1"),
    ({"memory_interval_s": 1e300}, "--memory-interval must be between 0 and 3600 s"),
    ({"dataset_name": "sharegpt", "dataset_path": "/nonexistent/sg.json"},
     "--dataset-path /nonexistent/sg.json: not found"),
    ({"dataset_name": "jsonl", "dataset_path": "/tmp"}, "--dataset-path /tmp: is a directory"),
    ({"launch": LaunchConfig(model="m", engine_args="--enforce-eager"), "base_url": None},  # type: ignore[arg-type]
     "LaunchConfig.engine_args must be a tuple of strings"),
    ({"save_outputs": True}, "--save-outputs keeps the response texts in --requests-jsonl's file"),
    ({"synthetic_args": ("--itl-ms", "5")}, "--synthetic-args configures the built-in server"),
    ({"dataset_path": "/tmp/sg.json"}, "--dataset-path is for --dataset-name sharegpt or jsonl; the dataset is random"),
    ({"dataset_order": "file"}, "--dataset-order file is for --dataset-name sharegpt or jsonl"),
    ({"label": "caf\udce9"}, "--label: not valid UTF-8 text"),
    ({"result_json": "r\udce9sultat.json"}, "--result-json: not valid UTF-8 text"),
    ({"launch": LaunchConfig(model="m", engine_args=("--x\udce9",)), "base_url": None},
     "--engine-args: not valid UTF-8 text"),
    ({"launch": LaunchConfig(model="m\udce9"), "base_url": None}, "--launch-model: not valid UTF-8 text"),
    # named by its flag, and the value (it may hold a secret) not repeated
    ({"launch": LaunchConfig(model="m", env=("HF_TOKEN=hf_secret\udce9",)), "base_url": None},
     "--server-env: not valid UTF-8 text; result files are UTF-8"),
])
def test_bad_options_are_refused_before_anything_is_sent(changes: dict[str, Any], words: str) -> None:
    config = BenchConfig(**{"base_url": UNREACHABLE, "num_prompts": 2, **changes})
    with pytest.raises(ConfigError) as info:
        run(config)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_the_api_key_is_not_shown_in_a_type_error() -> None:
    with pytest.raises(ConfigError, match=r"BenchConfig.api_key must be a string or None, got \(bytes\)"):
        api.validate(BenchConfig(api_key=b"sk-secret"))  # type: ignore[arg-type]


def test_two_outputs_may_not_name_the_same_file(tmp_path: Path) -> None:
    path = str(tmp_path / "r.json")
    with pytest.raises(ConfigError, match="--result-json and --requests-jsonl name the same file"):
        api.validate(BenchConfig(result_json=path, save_detailed=path))


@pytest.mark.parametrize("owner", [BenchConfig, LaunchConfig])
def test_every_field_is_type_checked(owner: type) -> None:
    """The types come from the dataclasses' own annotations: a value of no type a field takes is
    refused with a message naming the field, for every field, a new one included."""
    for field in dataclasses.fields(owner):
        wrong = {field.name: object()}
        config = (BenchConfig(**wrong) if owner is BenchConfig
                  else BenchConfig(launch=LaunchConfig(**{"model": "m", **wrong})))
        with pytest.raises(ConfigError, match=rf"^{owner.__name__}\.{field.name} must be "):
            api.validate(config)


def test_a_literal_field_takes_only_its_choices() -> None:
    with pytest.raises(ConfigError, match="--launch must be one of vllm, sglang, llama.cpp, got 'tgi'"):
        api.validate(BenchConfig(launch=LaunchConfig(engine="tgi", model="m")))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="--endpoint must be one of /v1/completions, /v1/chat/completions"):
        api.validate(BenchConfig(endpoint="/v1/audio/transcriptions"))  # type: ignore[arg-type]


def test_every_range_names_a_field() -> None:
    """A range stated for a name that is no field would never be checked (a dataset option's by its flat name)."""
    names = {f.name for f in dataclasses.fields(BenchConfig)} | {
        "launch." + f.name for f in dataclasses.fields(LaunchConfig)} | set(datasetoptions.FLAT_NAMES)
    assert set(checks.RANGES) <= names


def test_a_result_file_that_fails_after_the_run_keeps_the_result(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills up between the check and the write: the other files are still written and the
    exception carries the measured Result."""
    def disk_full(path: str | os.PathLike[str], text: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(report, "write_card_atomic", disk_full)
    out_json, card, detailed = tmp_path / "r.json", tmp_path / "card.md", tmp_path / "d.jsonl"
    with SyntheticServer("--ttft-ms", "2", "--itl-ms", "1") as server:
        config = BenchConfig(base_url=server.base_url, concurrency=2, num_prompts=4, random_input_len=8,
                             random_output_len=4, result_json=str(out_json), result_card=str(card),
                             save_detailed=str(detailed))
        with pytest.raises(ResultWriteError) as info:
            run(config)
    assert str(info.value) == f"could not write --result-card {card}: No space left on device"
    assert isinstance(info.value, OSError)
    assert info.value.result.counts.completed == 4
    assert orjson.loads(out_json.read_bytes())["completed"] == 4
    assert len(detailed.read_text().splitlines()) == 4
    assert not card.exists()


def test_path_fields_take_a_pathlib_path(tmp_path: Path) -> None:
    """An embedder passes pathlib.Path for files: it is stored as its str and the run writes there."""
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "hello there", "max_tokens": 3}\n' * 2)
    out, card = tmp_path / "r.json", tmp_path / "card.md"
    config = BenchConfig(num_prompts=2, concurrency=2, dataset_name="jsonl", dataset_path=data,
                         result_json=out, result_card=card)
    assert (config.dataset_path, config.result_json) == (str(data), str(out))
    result = run(config)
    assert result.counts.completed == 2
    assert orjson.loads(out.read_bytes())["completed"] == 2 and "status: done" in card.read_text()


def test_the_open_files_limit_is_raised_for_the_run_and_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Raised to the hard limit while the run holds its sockets; put back after it, so that processes
    started later (a launched server, under the Python API) do not inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(soft, 256)
    during: list[int] = []
    inner = LoadGenerator._run

    async def recording(self: LoadGenerator) -> Any:
        during.append(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        return await inner(self)

    monkeypatch.setattr(LoadGenerator, "_run", recording)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        run(BenchConfig(num_prompts=2, concurrency=2, random_input_len=8, random_output_len=2))
        after = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert during == [hard if hard != resource.RLIM_INFINITY else 1 << 20] and after == low


def test_base_url_with_v1_or_credentials_is_the_servers_root(tmp_path: Path) -> None:
    """--base-url http://h:p/v1 is taken as OpenAI clients take it (models were asked at /v1/v1/models);
    credentials in it are never sent, and never written to the result."""
    out = tmp_path / "r.json"
    with SyntheticServer(ttft_ms=1, itl_ms=1) as server:
        host_port = server.base_url.split("://", 1)[1]
        result = run(BenchConfig(base_url=f"http://bob:s3cret@{host_port}/v1/", num_prompts=2, concurrency=2,
                                 random_input_len=8, random_output_len=4, result_json=str(out)))
    assert result.counts.completed == 2
    assert result.server_info["base_url"] == server.base_url
    text = out.read_text()
    assert "s3cret" not in text and "bob" not in text
    assert orjson.loads(text)["fastbench"]["config"]["base_url"] == f"http://***@{host_port}/v1/"
    card = run_card.render_card(result, result.config)
    assert f"| {server.base_url}/v1/completions |" in card and "s3cret" not in card


def test_usage_past_max_tokens_is_trusted_when_extra_body_sets_the_real_limit() -> None:
    """--extra-body max_tokens null + max_completion_tokens 64 (chat): the server's 64 tokens per request
    are right, not "past max_tokens" (they were distrusted and counted as chunks)."""
    with SyntheticServer(ttft_ms=1, itl_ms=1, tokens_per_chunk="1-4") as server:
        result = run(BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions", num_prompts=4,
                                 concurrency=2, random_input_len=8, random_output_len=8, ignore_eos=True,
                                 extra_body={"max_tokens": None, "max_completion_tokens": 64}))
    assert result.usage.by_source == {"PER_CHUNK": 4}
    assert result.total_output_tokens == 4 * 64


def test_a_built_in_server_gone_after_the_run_is_a_server_death_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib.error

    from fastbench import ServerDiedError
    from fastbench.synthetic import SyntheticServer as Synthetic

    def gone(self: Synthetic) -> dict[str, Any]:
        raise urllib.error.URLError("[Errno 111] Connection refused")

    monkeypatch.setattr(Synthetic, "stats", gone)
    out = tmp_path / "r.json"
    with pytest.raises(ServerDiedError, match="the built-in synthetic server stopped answering") as info:
        run(BenchConfig(num_prompts=2, concurrency=2, random_input_len=8, random_output_len=4,
                        synthetic_args=("--itl-ms", "1"), result_json=str(out)))
    assert info.value.result.counts.completed == 2
    assert "stopped answering" in out.read_text()  # the result is written, with the note


def test_an_output_may_not_overwrite_an_input(tmp_path: Path) -> None:
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text('{"prompt": "hi", "max_tokens": 4}\n')
    with pytest.raises(ConfigError, match="--dataset-path and --requests-jsonl name the same file"):
        run(BenchConfig(base_url=UNREACHABLE, dataset_name="jsonl", dataset_path=str(dataset),
                        save_detailed=str(dataset)))
    toml = tmp_path / "run.toml"
    toml.write_text("")
    with pytest.raises(ConfigError, match="--config and --result-json name the same file"):
        run(BenchConfig(base_url=UNREACHABLE, config_file=str(toml), result_json=str(toml)))
    assert dataset.read_text() == '{"prompt": "hi", "max_tokens": 4}\n'


def test_a_stop_abandons_the_workload_build() -> None:
    """Counting prompts with /tokenize can take minutes; a stop (first Ctrl-C) must end it at once,
    as it ends a launch, and the work under way is cancelled, not left running."""
    from fastbench.api.runsteps import unless_stopped

    async def main() -> tuple[bool, float]:
        cancelled = False

        async def slow_build() -> int:
            nonlocal cancelled
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled = True
                raise
            return 1

        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.1, stop.set)
        t0 = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await unless_stopped(slow_build(), stop, "interrupted while preparing the workload")
        return cancelled, time.monotonic() - t0

    cancelled, took = asyncio.run(main())
    assert cancelled and took < 5


def test_a_workload_build_that_ends_first_gives_its_result_or_error() -> None:
    from fastbench.api.runsteps import unless_stopped

    async def fails() -> int:
        raise ConfigError("bad dataset")

    async def main() -> int:
        stop = asyncio.Event()
        with pytest.raises(ConfigError, match="bad dataset"):
            await unless_stopped(fails(), stop, "")
        return await unless_stopped(asyncio.sleep(0.01, result=3), stop, "")

    assert asyncio.run(main()) == 3


def test_request_rate_inf_is_closed_loop_as_on_the_command_line() -> None:
    config = BenchConfig(request_rate=float("inf"))
    assert config.request_rate is None
    assert config.effective_concurrency == 16


def test_a_dataset_that_is_a_pipe_is_read(tmp_path: Path) -> None:
    """--dataset-path <(...) names a pipe, not a regular file; it is read like one."""
    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)
    lines = b"".join(orjson.dumps({"prompt": f"p {i}", "max_tokens": 3}) + b"\n" for i in range(4))

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(lines)

    import threading

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        result = run(BenchConfig(num_prompts=4, dataset_name="jsonl", dataset_path=str(fifo), progress=False))
    finally:
        writer.join(5)
    assert result.counts.completed == 4


def test_a_launch_with_a_bad_dataset_fails_before_the_engine_starts(tmp_path: Path) -> None:
    """The dataset is read (without the server) before the engine is started: a launch would
    otherwise spend minutes loading a model only to be told the file is bad."""
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    engine, marker = _marking_engine(tmp_path)
    config = BenchConfig(num_prompts=2, dataset_name="sharegpt", dataset_path=str(bad), progress=False,
                         launch=LaunchConfig(model="m", engine_bin=str(engine), ready_timeout_s=5,
                                             log_path=str(tmp_path / "server.log")))
    with pytest.raises(ConfigError):
        run(config)
    assert not marker.exists()


class _TlsOpenAIServer:
    """An https OpenAI-like server with a self-signed certificate, on a loop in its own thread:
    /v1/models lists "m", a POST streams two chunks, anything else is 404."""

    def __init__(self) -> None:
        import asyncio
        import ssl
        import threading

        import trustme

        from support.scripted import stream_script

        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        trustme.CA().issue_cert("localhost").configure_cert(ctx)
        models = orjson.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    method, path = head.split(b" ", 2)[:2]
                    length = head.lower().split(b"content-length:")
                    if len(length) > 1:
                        await reader.readexactly(int(length[1].split(b"\r\n")[0]))
                    if method == b"POST" and path.startswith(b"/v1/completions"):
                        writer.write(b"".join(step for step in stream_script([1, 2]) if isinstance(step, bytes)))
                    elif path == b"/v1/models":
                        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     b"Content-Length: %d\r\n\r\n%s" % (len(models), models))
                    else:
                        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                writer.close()

        self.loop = asyncio.new_event_loop()
        server = self.loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx))
        self.base_url = f"https://localhost:{server.sockets[0].getsockname()[1]}"
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_insecure_takes_a_self_signed_server_for_every_request() -> None:
    """--insecure covers the side requests (/v1/models, /metrics, /tokenize) as well as the streams."""
    pytest.importorskip("trustme")
    server = _TlsOpenAIServer()
    try:
        config = BenchConfig(base_url=server.base_url, num_prompts=3, concurrency=1, progress=False)
        with pytest.raises(ServerError, match="certificate"):
            run(config)
        result = run(config.replace(insecure=True))
    finally:
        server.close()
    assert result.counts.completed == 3
    assert result.server_info["model"] == "m"



def _marking_engine(tmp_path: Path) -> tuple[Path, Path]:
    """A fake engine that only marks that it was started (and never gets ready)."""
    marker = tmp_path / "engine-started"
    engine = tmp_path / "engine.sh"
    engine.write_text(f"#!/bin/sh\ntouch {marker}\nexec sleep 30\n")
    engine.chmod(0o755)
    return engine, marker


def test_a_launch_with_a_dataset_from_a_pipe_launches_the_engine(tmp_path: Path) -> None:
    """A pipe is read once, by the run itself: no check before the launch, and the launch happens
    (it used to be skipped, and the built-in synthetic server benchmarked instead)."""
    import threading

    from fastbench import FastbenchError

    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)
    engine, marker = _marking_engine(tmp_path)
    config = BenchConfig(num_prompts=2, dataset_name="jsonl", dataset_path=str(fifo), progress=False,
                         launch=LaunchConfig(model="m", engine_bin=str(engine), ready_timeout_s=2,
                                             log_path=str(tmp_path / "server.log")))
    with pytest.raises(FastbenchError):  # the fake never gets ready
        run(config)
    assert marker.exists()
    unblock = threading.Thread(target=lambda: open(fifo, "wb").close(), daemon=True)  # no reader came
    unblock.start()
    open(fifo, "rb").close()
    unblock.join(5)


def test_a_stop_before_the_launch_starts_no_engine(tmp_path: Path) -> None:
    engine, marker = _marking_engine(tmp_path)
    config = BenchConfig(num_prompts=2, progress=False, launch=LaunchConfig(model="m", engine_bin=str(engine),
                                                                        log_path=str(tmp_path / "server.log")))

    async def main() -> None:
        stop = asyncio.Event()
        stop.set()
        await api.arun(config, stop=stop)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert not marker.exists()


def test_the_check_before_a_launch_reads_the_file_but_does_not_filter_lengths(tmp_path: Path) -> None:
    """Lengths need the server's /tokenize; estimated without it, these two-character prompts would
    all fall to vLLM's length filter, so the check must not judge them (the run with the server may
    count them otherwise)."""
    from fastbench.exceptions import DatasetError
    from fastbench.load import datasets as workload

    short = tmp_path / "short.json"
    short.write_text(json.dumps([{"conversations": [{"from": "human", "value": "你好"},
                                                    {"from": "gpt", "value": "好的"}]}] * 5))
    config = BenchConfig(num_prompts=2, dataset_name="sharegpt", dataset_path=str(short))
    workload.check_inputs(config)
    with pytest.raises(DatasetError, match="no usable prompt"):
        workload.build_workload_sync(config, "m", max_model_len=None)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DatasetError, match="not valid JSON"):
        workload.check_inputs(config.replace(dataset_path=str(bad)))


def test_the_environment_names_the_machine_and_its_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU model and RAM from /proc; GPUs from nvidia-smi when it is on the PATH (a fake one here)."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA H200, 570.86.15'\necho 'NVIDIA H200, 570.86.15'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    env = environment()
    assert env["gpus"] == ["NVIDIA H200 (driver 570.86.15)"] * 2
    assert env["cpu_model"] and env["mem_total_gib"] and env["mem_total_gib"] > 0
    row = run_card._machine(env)
    assert row.startswith(f"{os.cpu_count()} x {env['cpu_model']}, {env['mem_total_gib']:g} GiB RAM; GPU: NVIDIA H200")
    fake.write_text("#!/bin/sh\nexit 9\n")  # a broken driver: no GPU named, no error
    assert environment()["gpus"] == []
    assert run_card._machine({"cpu_count": 2}) == "2 x unknown CPU; GPU: none found (nvidia-smi)"


def test_the_card_names_the_models_family_and_size_from_its_local_files(tmp_path: Path) -> None:
    """An attached server whose model is a directory here: Family and Parameters come from its files;
    a row the user gives (--card-row) is theirs."""
    from safetensors.numpy import save_file

    model_dir = tmp_path / "tiny-gemma"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"model_type": "gemma3_text", "torch_dtype": "bfloat16"}')
    save_file({"embed.weight": np.zeros((1000, 300), np.float16)}, str(model_dir / "model.safetensors"))
    card = tmp_path / "card.md"
    with SyntheticServer(ttft_ms=1, itl_ms=1, model=str(model_dir)) as server:
        result = run(BenchConfig(base_url=server.base_url, concurrency=2, num_prompts=2, random_input_len=8,
                                 random_output_len=2, result_card=str(card), card_rows=("Family=Gemma 3",)))
    assert result.server_info["model_files"]["total_params"] == 300_000
    lines = card.read_text().splitlines()
    params = lines.index("| Parameters | 300K (dense), counted from the safetensors headers |")
    engine = next(i for i, line in enumerate(lines) if line.startswith("| Engine |"))
    assert lines[0].startswith("# ") and lines.index(f"| Model | {model_dir} |") < params < engine  # the seeds' order
    assert "| Family | Gemma 3 |" in lines and not any(line.startswith("| Family | Gemma (") for line in lines)
    assert "| Quant / precision | bfloat16, from config.json |" in lines
    assert f"| Model files | {model_dir} |" in lines


def test_an_attached_servers_model_files_are_found_by_the_root_it_names(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM serves a local directory under --served-model-name and gives the directory as the
    model's ``root`` in /v1/models: that is where the files are."""
    from safetensors.numpy import save_file

    model_dir = tmp_path / "weights"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"model_type": "qwen2"}')
    save_file({"w": np.zeros((10, 10), np.float16)}, str(model_dir / "model.safetensors"))
    fetch = control.fetch_model_info

    async def served_from_the_directory(*args: Any, **kwargs: Any) -> control.ServedModels:
        ids, max_model_len, _, metas = await fetch(*args, **kwargs)
        return control.ServedModels(ids, max_model_len, {ids[0]: str(model_dir)}, metas)

    monkeypatch.setattr(control, "fetch_model_info", served_from_the_directory)
    with SyntheticServer(ttft_ms=1, itl_ms=1, model="qwen-small") as server:
        result = run(BenchConfig(base_url=server.base_url, num_prompts=1, random_input_len=8, random_output_len=2))
    assert result.server_info["model"] == "qwen-small"
    assert result.server_info["model_files"]["source"] == str(model_dir)
    assert result.server_info["model_card"]["Family"] == "Qwen (qwen2)"


def test_a_launched_servers_model_files_are_read_with_its_environment_and_revision(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--server-env HF_HUB_CACHE=... and --engine-args '--revision B' are what the server loads from."""
    from safetensors.numpy import save_file

    from fastbench.results.observations import ModelFacts
    from fastbench.server.engines import VLLMServer
    from fastbench.server.external import ExternalServer

    repo = tmp_path / "hub" / "models--acme--m"
    for commit, size in (("c1", 2), ("c2", 3)):
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text('{"model_type": "llama"}')
        save_file({"w": np.zeros(size, np.float16)}, str(repo / "snapshots" / commit / "model.safetensors"))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c1")
    (repo / "refs" / "b").write_text("c2")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    launch = LaunchConfig(model="acme/m", env=(f"HF_HUB_CACHE={tmp_path / 'hub'}",),
                          engine_args=("--max-model-len", "64", "--revision=b"))
    facts = asyncio.run(api.runsteps.model_files(VLLMServer(launch), "served-name", None))
    assert isinstance(facts, ModelFacts) and (facts.total_params, facts.revision) == (3, "c2")
    launch = dataclasses.replace(launch, engine_args=())
    facts = asyncio.run(api.runsteps.model_files(VLLMServer(launch), "x", None))
    assert isinstance(facts, ModelFacts) and facts.revision == "c1"
    assert asyncio.run(api.runsteps.model_files(ExternalServer("http://127.0.0.1:1"), "acme/m", None)) is None


def test_model_files_that_do_not_answer_cost_the_run_a_bounded_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung network mount: the lookup is left behind (a daemon thread) after the timeout, and a
    stop abandons it at once."""
    from fastbench.server import modelinfo
    from fastbench.server.external import ExternalServer

    release = threading.Event()
    monkeypatch.setattr(modelinfo, "facts_or_error", lambda *args: release.wait(10) and None)
    monkeypatch.setattr(api.runsteps, "MODEL_FILES_TIMEOUT_S", 0.2)
    attached = ExternalServer("http://127.0.0.1:1")
    t0 = time.monotonic()
    info = asyncio.run(api.runsteps.model_files(attached, "org/m", None))
    assert info == "org/m: its files did not answer in 0.2 s"
    assert time.monotonic() - t0 < 2

    async def stopped_soon() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, stop.set)
        await api.runsteps.model_files(attached, "org/m", stop)

    monkeypatch.setattr(api.runsteps, "MODEL_FILES_TIMEOUT_S", 30.0)
    t0 = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(stopped_soon())
    assert time.monotonic() - t0 < 2
    release.set()


def test_run_inside_a_running_loop_says_to_await_arun() -> None:
    async def in_a_notebook() -> None:
        run(BenchConfig(num_prompts=1))

    with pytest.raises(RuntimeError, match=r"inside a running one .* use `await fastbench.arun\(config\)`"):
        asyncio.run(in_a_notebook())


def test_the_package_imports_its_public_names_on_first_use() -> None:
    """`import fastbench` (and so `fastbench runs`) does not pay for the API's aiohttp and numpy; each
    public name still resolves to its defining module's object."""
    import subprocess
    import sys

    probe = ("import sys, fastbench, fastbench.cli.runs; "
             "print([m for m in ('aiohttp', 'numpy', 'fastbench.api') if m in sys.modules]); "
             "from fastbench import run, BenchConfig, SyntheticServer; import fastbench.api, fastbench.synthetic; "
             "print(run is fastbench.api.run, SyntheticServer is fastbench.synthetic.SyntheticServer, "
             "sorted(set(fastbench.__all__) - set(dir(fastbench))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and out[1] == "True True []"
    import fastbench

    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        fastbench.nothing  # noqa: B018


def test_runs_given_a_launched_server_are_runs_of_that_launch_and_leave_it_up(tmp_path: Path) -> None:
    """arun(server=...): the server launched once serves two runs. Each is recorded as launched (engine,
    arguments, the launch's one load time, its footprint from the loading log), keeps in the store the
    loading log and its own window's lines only, and neither launches nor stops the server."""
    from support.fakevllm import KEPT_WINDOW_HEADER, free_port, windows_in_log, write_fake_engines
    from fastbench.server.engines import make_server
    from fastbench.study.store import Store

    vllm, _ = write_fake_engines(tmp_path / "bin")
    log = tmp_path / "server.log"
    ngram = '{"method": "ngram", "num_speculative_tokens": 3}'
    launch = LaunchConfig(engine="vllm", model="fake/model", engine_bin=str(vllm), port=free_port(),
                          engine_args=("--served-model-name", "fake-model", "--speculative-config", ngram),
                          env=("FAKE_SYNTH_ARGS=--ttft-ms 5 --itl-ms 15 --tokens-per-chunk 3",), log_path=str(log),
                          ready_timeout_s=30.0, stop_grace_s=3.0)
    # ~2 s a run (4 requests one at a time, 32 chunks of 15 ms each): the fake logs a "SpecDecoding
    # metrics" line every 0.3 s while it drafts, so every window has lines of its own
    config = BenchConfig(num_prompts=4, concurrency=1, random_input_len=8, random_output_len=96, progress=False,
                         store=str(tmp_path / "s"))
    server = make_server(launch)

    async def main() -> list[Any]:
        with pytest.raises(ConfigError, match="is not ready: start it"):
            await api.arun(config, server=server)
        await server.astart()
        try:
            results = []
            for _ in range(2):
                results.append(await api.arun(config, server=server))
                assert server.exit_message() is None  # still serving: the run did not stop it
            with pytest.raises(ConfigError, match="leave base_url unset"):
                await api.arun(config.replace(base_url=server.base_url), server=server)
            with pytest.raises(ConfigError, match="not the given server's LaunchConfig"):
                await api.arun(config.replace(launch=dataclasses.replace(launch, port=1)), server=server)
        finally:
            await server.astop()
        with pytest.raises(ServerError, match="was stopped before this run"):
            await api.arun(config, server=server)
        return results

    results = asyncio.run(main())
    assert server.load_time_s is not None
    windows = windows_in_log(log.read_text())
    assert len(windows) == 2 and all(any("SpecDecoding metrics" in line for line in w) for w in windows)
    with Store(tmp_path / "s") as store:
        rows = {r.run_id: r for r in store.query()}
    loadings = []
    for run_of_launch, (result, window) in enumerate(zip(results, windows), 1):
        info = result.server_info
        provenance = info["provenance"]
        assert provenance["launched"] and provenance["shared_launch"] and provenance["engine"] == "vllm"
        assert provenance["run_of_launch"] == run_of_launch and provenance["load_time_s"] == server.load_time_s
        assert info["engine"] == f"vLLM {server.version}" and info["variant"] == "NGRAM speculative decoding"
        assert info["load"]["Launch"].startswith(f"launched once for several runs, this is its run {run_of_launch}")
        assert "teardown" not in info and "Teardown" not in info["load"]  # its launcher stops it, after the last
        assert info["footprint"]["weights_gib"] == [0.51]  # from the loading log, for every run of the launch
        assert info["memory_series"]["series"]  # sampled, as for a launched server
        assert info["spec_decode_stats"]["server_log"]["lines"] == len(
            [line for line in window if "SpecDecoding metrics" in line])
        row = rows[result.run_id]
        assert row.meta.engine == "vllm"
        kept = (Path(row.folder) / "server.log").read_text()
        loading, header, own = kept.partition(KEPT_WINDOW_HEADER)
        assert header and own.splitlines() == window  # its own window's lines, no other run's
        loadings.append(loading.split("\n", 1)[1])
        assert f"this is its run {run_of_launch}" in loading.split("\n", 1)[0]
        card = (Path(row.folder) / "card.md").read_text()
        assert "Engine arguments" in card and "num_speculative_tokens" in card
        assert f"ready in {server.load_time_s:.1f} s" in card
    assert loadings[0] == loadings[1]  # the loading phase, the same for each run
    assert "Model loading took 0.51 GiB" in loadings[0] and "SpecDecoding metrics" not in loadings[0]


def test_a_sweep_runs_from_the_python_api_and_resumes(tmp_path: Path) -> None:
    """The API layer sweeps as `fastbench sweep` does: a sweep file read into its plan, the plan run into
    its store (each cell a stored run), and the same plan run again finds every cell done."""
    from fastbench.cli.sweepfile import plan_from_file
    from fastbench.study.store import Store

    path = tmp_path / "s.toml"
    path.write_text(f"""
[sweep]
store = "{tmp_path / 'store'}"
[variants.fast]
synthetic_args = "--ttft-ms 1 --itl-ms 1"
[benchmark]
concurrency = [1, 2]
num_prompts = 4
random_input_len = 16
random_output_len = 4
""")
    said: list[str] = []
    points = api.sweep(plan_from_file(str(path)), say=said.append)
    assert [p["status"] for p in points] == ["done", "done"], points
    assert any(line.startswith("  cell {") for line in said), said
    with Store(tmp_path / "store") as store:
        assert store.count() == 2
    again: list[str] = []
    points = api.sweep(plan_from_file(str(path)), say=again.append)
    assert [p["status"] for p in points] == ["done", "done"] and not any("cell {" in line for line in again)
    with Store(tmp_path / "store") as store:
        assert store.count() == 2


def test_run_takes_arun_s_progress_and_stop() -> None:
    """run() takes the same arguments as arun(): its progress callback is called, and a stop set from it
    ends the run early, marked interrupted."""
    stop = asyncio.Event()
    seen: list[dict[str, Any]] = []

    def on_progress(counters: dict[str, Any]) -> None:
        seen.append(counters)
        stop.set()  # on the run's own loop: the first report ends it

    config = BenchConfig(num_prompts=10_000, concurrency=2, random_input_len=16, random_output_len=64,
                         synthetic_args=("--ttft-ms", "1", "--itl-ms", "20"))
    result = run(config, on_progress=on_progress, stop=stop)
    assert seen and result.stopped_reason == "interrupted"
    assert result.counts.completed < 10_000
