"""The command line: help, bad input, the embedded default run and its output files."""

from __future__ import annotations

import dataclasses
import errno
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from support.timing import until_a_round_passes
from fastbench import BenchConfig, ConfigError, LaunchConfig, ServerDiedError, api, checks, datasetoptions, run
from fastbench.cli import command as cli
from fastbench.cli.argtypes import options
from fastbench.datasetoptions import PrefixRepetitionOptions, RandomOptions, SharedPrefixOptions
from fastbench.results import writers as report
from fastbench.synthetic import SyntheticServer


def fastbench(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastbench", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_help_explains_flags() -> None:
    out = fastbench("--help").stdout
    for flag in ("--base-url", "--concurrency", "--max-concurrency", "--request-rate", "--burstiness",
                 "--num-prompts", "--max-seconds", "--num-warmups", "--goodput", "--extra-body",
                 "--dataset-name", "--random-range-ratio", "--result-json", "--result-card",
                 "--save-detailed", "--requests-jsonl", "--api-key", "--insecure", "--ignore-eos"):
        assert flag in out, flag
    assert "default" in out
    flat = " ".join(out.split())
    # a default of 0 is shown too (0 == False hid it)
    for text in ("--seed SEED", "--num-warmups NUM_WARMUPS", "--random-range-ratio RANDOM_RANGE_RATIO"):
        help_text = flat.split(text + " ", 2)[-1]
        assert "(default: 0" in help_text.split(" --")[0], text


@pytest.mark.parametrize("args,words", [
    # a flag, a config file and the Python API meet the same check, with the same message
    (["--concurrency", "0"], "fastbench: error: --concurrency must be at least 1, got 0"),
    (["--concurrency", "1.5"], "argument --concurrency/--max-concurrency: expected a whole number, got '1.5'"),
    (["--request-rate", "-3"], "--request-rate must be a positive number of requests/s, got -3.0"),
    (["--server-port", "0"], "--server-port: only with --launch ENGINE"),
    (["--launch", "vllm", "--launch-model", "m", "--server-port", "0"], "--server-port must be between 1 and 65535"),
    (["--launch", "vllm"], "--launch needs --launch-model MODEL"),
    (["--max-tokens", "0"], "--max-tokens must be >= 1, got 0"),
    (["--goodput", "ttft:-1"], "--goodput ttft must be a number of milliseconds > 0, got -1.0"),
    (["--goodput", "ttfb:5"], "--goodput takes ttft, tpot and e2el, got 'ttfb'"),
    (["--extra-body", "{bad"], "not valid JSON"),
    (["--extra-body", "[1]"], "JSON object"),
    (["--goodput", "ttft:abc"], "KEY:MS"),
    (["--coalesce-ms", "-1"], "--coalesce-ms"),
    (["--base-url", "ftp://x"], "http://host:port"),
    (["--base-url", "http://127.0.0.1:1", "--num-prompts", "1"], "127.0.0.1"),
    (["--dataset-name", "sharegpt", "--dataset-path", "/nonexistent.json", "--num-prompts", "1"], "nonexistent"),
    (["--seed", "-1"], "--seed must be >= 0, got -1"),
    (["--num-warmups", "-2"], "--num-warmups must be >= 0, got -2"),
    (["--synthetic-args", "--itl-ms '5"], "--synthetic-args: No closing quotation"),
    (["--launch", "vllm", "--launch-model", "m", "--engine-args", "--x '"], "--engine-args: No closing quotation"),
    # output paths that cannot be written are refused before the run, not after it
    (["--result-json", "/nonexistent/x.json"], "--result-json /nonexistent/x.json: /nonexistent does not exist"),
    (["--result-card", "/"], "--result-card /: is a directory"),
    (["--requests-jsonl", "/proc/x.jsonl"], "--requests-jsonl /proc/x.jsonl: cannot write in /proc"),
    # the old spelling of --requests-jsonl still works
    (["--save-detailed", "/proc/x.jsonl"], "--requests-jsonl /proc/x.jsonl: cannot write in /proc"),
    # options the others make idle are refused, not silently ignored
    (["--server-port", "8001", "--engine-bin", "/bin/true"],
     "--server-port, --engine-bin: only with --launch ENGINE"),
    (["--dataset-path", "/etc/hostname"], "--dataset-path is for --dataset-name sharegpt or jsonl"),
    (["--save-outputs"], "--save-outputs keeps the response texts in --requests-jsonl's file"),
    (["--base-url", "http://127.0.0.1:1", "--synthetic-args", "--itl-ms 5"], "--synthetic-args configures"),
    (["--label", "caf\udce9"], "--label: not valid UTF-8 text"),
    (["--conf", "run.toml"], "unrecognized option --conf; did you mean --config?"),
    (["--num-prompt", "4"], "unrecognized option --num-prompt; did you mean --num-prompts?"),
    (["--card-row", "no label"], "--card-row takes LABEL=VALUE, got 'no label'"),
    (["--card-note", "caf\udce9"], "--card-note: not valid UTF-8 text"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    proc = fastbench(*args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    err = proc.stderr.strip().splitlines()
    assert words in err[-1], proc.stderr


@pytest.mark.timing
def test_default_run_against_the_synthetic_server(tmp_path: Path) -> None:
    # The medians of 12 requests: a host stall puts TTFT or TPOT past its loose bound in one round (a
    # first token held back and the rest on schedule make TPOT short); a wrong figure fails every round.
    until_a_round_passes(lambda: _default_run_against_the_synthetic_server(tmp_path))


def _default_run_against_the_synthetic_server(tmp_path: Path) -> None:
    key = "sk-fastbench-secret-0123456789"
    out_json, card, detailed = tmp_path / "r.json", tmp_path / "card.md", tmp_path / "d.jsonl"
    proc = fastbench(
        "--num-prompts", "12", "--concurrency", "4", "--random-input-len", "32", "--random-output-len", "8",
        "--synthetic-args", "--ttft-ms 20 --itl-ms 5", "--api-key", key,
        "--result-json", str(out_json), "--result-card", str(card), "--requests-jsonl", str(detailed),
        env={"OPENAI_API_KEY": key},
    )
    assert proc.returncode == 0, proc.stderr
    assert "Serving Benchmark Result" in proc.stdout
    doc = orjson.loads(out_json.read_bytes())
    assert doc["completed"] == 12 and doc["failed"] == 0
    assert 19 < doc["median_ttft_ms"] < 60
    assert 4.5 < doc["median_tpot_ms"] < 8
    assert doc["fastbench"]["schema_version"] == 1
    text = card.read_text()
    for section in ("Configuration", "Measured results", "Full run command", "Notes"):
        assert section in text
    records = [orjson.loads(line) for line in detailed.read_text().splitlines()]
    assert len(records) == 12
    for rec in records:  # closed loop: TTFT from the send, as in the result file
        assert rec["ttft_ms"] == pytest.approx((rec["first_token_ns"] - rec["sent_ns"]) / 1e6)
    for output in (proc.stdout, proc.stderr, out_json.read_text(), text, detailed.read_text()):
        assert key not in output


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_signal_writes_a_partial_result(tmp_path: Path, sig: str) -> None:
    import signal
    import time

    out_json, card = tmp_path / "r.json", tmp_path / "card.md"
    with SyntheticServer(ttft_ms=5, itl_ms=10) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fastbench", "--base-url", server.base_url, "--num-prompts", "400",
             "--concurrency", "4", "--random-input-len", "16", "--random-output-len", "20",
             "--result-json", str(out_json), "--result-card", str(card)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            # Signalled once a few measured requests went out (each takes ~0.2 s), however slow the host.
            deadline = time.monotonic() + 60
            while server.stats()["generation_requests"] < 8 and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.send_signal(getattr(signal, sig))
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 130, stderr
    doc = orjson.loads(out_json.read_bytes())
    assert 0 < doc["completed"] < 400
    assert doc["fastbench"]["run"]["stopped_reason"] == "interrupted"
    assert "partial" in card.read_text()
    assert "Traceback" not in stderr


def test_unknown_endpoint_is_one_line() -> None:
    proc = fastbench("--endpoint", "/v1/audio/transcriptions")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "--endpoint" in proc.stderr


def test_help_says_how_to_pass_a_value_that_starts_with_a_dash() -> None:
    out = " ".join(fastbench("--help").stdout.split())
    assert '--engine-args="--enforce-eager"' in out and '--synthetic-args="--no-usage"' in out
    assert "`fastbench validate --help`" in out and "`fastbench synthetic-server --help`" in out
    assert fastbench("synthetic-server", "--help").stdout.startswith("usage: fastbench synthetic-server")
    proc = fastbench("--num-prompts", "2", "--random-input-len", "8", "--random-output-len", "4",
                     "--synthetic-args=--no-usage")
    assert proc.returncode == 0, proc.stderr


def test_exit_status_follows_the_epilog() -> None:
    assert "1 the run stopped early" in cli.EPILOG
    assert cli.exit_status("completed") == 0
    assert cli.exit_status("time cap") == 0
    assert cli.exit_status("interrupted") == 130
    for early in ("max error rate", "server exited", "client error"):
        assert cli.exit_status(early) == 1
    assert "or collapsed (no request completed, or most failed)" in cli.EPILOG
    assert cli.exit_status("completed", collapsed=True) == 1


def test_a_run_where_every_request_failed_exits_1() -> None:
    proc = fastbench("--num-prompts", "4", "--concurrency", "2", "--random-input-len", "8", "--random-output-len", "4",
                     "--synthetic-args=--fault http-500 --fault-every 1")
    assert proc.returncode == 1, proc.stderr
    assert "collapsed" in proc.stdout + proc.stderr


def test_bad_synthetic_args_are_one_line_exit_2() -> None:
    """Flags the built-in server refuses: its own reason, one line, exit 2 (a traceback, exit 1, before)."""
    proc = fastbench("--num-prompts", "2", "--synthetic-args", "--tokens-per-chunk 4-1")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("fastbench: error: --synthetic-args: argument --tokens-per-chunk: "
                                   "need 1 <= A <= B <= 1,000,000, got '4-1'")


def test_a_run_stopped_by_max_error_rate_exits_1(tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    card = tmp_path / "card.md"
    proc = fastbench("--num-prompts", "100", "--concurrency", "4", "--random-input-len", "8",
                     "--random-output-len", "8", "--max-error-rate", "0.1", "--result-json", str(out_json),
                     "--result-card", str(card), "--synthetic-args", "--fault http-500 --fault-every 2")
    assert proc.returncode == 1, proc.stderr
    assert "Serving Benchmark Result" in proc.stdout
    assert orjson.loads(out_json.read_bytes())["fastbench"]["run"]["stopped_reason"] == "max error rate"
    assert "time cap" not in card.read_text()


def test_a_result_file_that_fails_after_the_run_still_shows_the_summary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The disk fills up after the path check: the summary is printed, the other files are written,
    and one line names the file that is not."""
    def disk_full(path: str | os.PathLike[str], obj: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(report, "write_json_atomic", disk_full)
    out_json, card = tmp_path / "r.json", tmp_path / "card.md"
    rc = cli.main(["--num-prompts", "4", "--concurrency", "2", "--random-input-len", "8", "--random-output-len",
                   "4", "--synthetic-args", "--ttft-ms 2 --itl-ms 1", "--no-progress",
                   "--result-json", str(out_json), "--result-card", str(card)])
    out, err = capsys.readouterr()
    assert rc == 2
    assert "Serving Benchmark Result" in out
    assert err.strip() == f"fastbench: error: could not write --result-json {out_json}: No space left on device"
    assert card.exists() and not out_json.exists()


def test_a_server_that_died_during_the_run_shows_the_summary_and_exits_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with SyntheticServer("--ttft-ms", "2", "--itl-ms", "1") as server:
        measured = run(BenchConfig(base_url=server.base_url, concurrency=2, num_prompts=2, random_input_len=8,
                                   random_output_len=4))

    async def dies(*args: object, **kwargs: object) -> object:
        raise ServerDiedError("server exited with status 1 during the measured window", measured)

    monkeypatch.setattr(api, "arun", dies)
    rc = cli.main(["--num-prompts", "2", "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "Serving Benchmark Result" in out
    assert err.strip() == "fastbench: error: server exited with status 1 during the measured window"


def test_every_field_is_named_by_a_flag_of_the_command() -> None:
    """Messages about a field name its flag: each one is a flag the command takes, for that field."""
    by_dest: dict[str, tuple[str, ...]] = {}
    for option in options(cli.build_parser()):  # --progress and --disable-tqdm set one field
        by_dest[option.dest] = by_dest.get(option.dest, ()) + option.flags
    ns_field = {"request_timeout_s": "request_timeout", "metrics_interval_s": "metrics_interval",
                "memory_interval_s": "memory_interval", "config_file": "config", "card_rows": "card_row",
                "card_notes": "card_note", "launch.engine": "launch", "launch.model": "launch_model",
                "launch.env": "server_env", "launch.host": "server_host", "launch.port": "server_port",
                "launch.ready_timeout_s": "ready_timeout", "launch.log_path": "server_log",
                "launch.stop_grace_s": "server_stop_grace", "save_detailed": "requests_jsonl",
                "per_request_arrays": "save_detailed", "headers": "header",
                "ready_check_timeout_s": "ready_check_timeout_sec"}
    names = [f.name for f in dataclasses.fields(BenchConfig)
             if f.name not in ("command_line", "launch", "dataset_options")]
    names += ["launch." + f.name for f in dataclasses.fields(LaunchConfig)]
    names += list(datasetoptions.FLAT_NAMES)  # a dataset option's flag has its flat name for dest
    for name in names:
        dest = ns_field.get(name, name.removeprefix("launch."))
        assert checks.flag(name) in by_dest[dest], name


def test_the_api_key_comes_from_the_environment_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = cli.build_parser()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    assert cli.config_from_args(parser.parse_args([]), []).api_key == "sk-from-the-environment"
    given = ["--api-key", "sk-from-the-flag"]
    assert cli.config_from_args(parser.parse_args(given), given).api_key == "sk-from-the-flag"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert cli.config_from_args(parser.parse_args([]), []).api_key is None


@pytest.mark.parametrize("name,value", [("concurrency", 0), ("request_rate", -1.0), ("max_seconds", 0.0),
                                        ("coalesce_ms", 1001.0)])
def test_validate_and_a_run_refuse_a_shared_setting_alike(name: str, value: float) -> None:
    """fastbench validate's settings that a run takes too meet the run's rule, with its message,
    before anything is started."""
    from fastbench.api import validation as fv

    with pytest.raises(ConfigError) as run_refused:
        api.validate(BenchConfig(**{name: value}))
    with pytest.raises(ConfigError) as validate_refused:
        fv.validate_client(**{"concurrency": 2, name: value})
    assert str(validate_refused.value) == str(run_refused.value)


def test_shared_prefix_flags_set_their_fields() -> None:
    parser = cli.build_parser()
    argv = ["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "4", "--gsp-prompts-per-group", "8",
            "--gsp-system-prompt-len", "100", "--gsp-question-len", "10", "--gsp-output-len", "20",
            "--reset-prefix-cache"]
    config = cli.config_from_args(parser.parse_args(argv), argv)
    assert (config.dataset_name, config.reset_prefix_cache) == ("generated-shared-prefix", True)
    assert config.options(SharedPrefixOptions) == SharedPrefixOptions(
        num_groups=4, prompts_per_group=8, system_prompt_len=100, question_len=10, output_len=20)
    argv = ["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "64",
            "--prefix-repetition-suffix-len", "8", "--prefix-repetition-num-prefixes", "3",
            "--prefix-repetition-output-len", "5"]
    config = cli.config_from_args(parser.parse_args(argv), argv)
    assert config.options(PrefixRepetitionOptions) == PrefixRepetitionOptions(prefix_len=64, suffix_len=8,
                                                                              num_prefixes=3, output_len=5)
    argv = ["--random-prefix-len", "256"]
    assert cli.config_from_args(parser.parse_args(argv), argv).options(RandomOptions).prefix_len == 256
