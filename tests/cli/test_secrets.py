"""Every secret a run knows is kept out of every file it writes, and only secrets: a run against a server
that echoes the key into its 401 body, launched as an engine that logs its arguments and environment,
leaves no key in any of its files; a card's command runs again to the same configuration."""

from __future__ import annotations

import gzip
import os
import secrets as random_secrets
import shlex
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from support.fakevllm import free_port
from support.keyecho import write_key_echo_engine
from fastbench.redact import REDACTED, Secrets, redact_argv, shell_join


def _secret(prefix: str) -> str:
    return f"{prefix}-{random_secrets.token_hex(8)}"


def _fastbench(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
               timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastbench", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


def _every_file(root: Path) -> dict[Path, str]:
    """Every file under ``root`` as text (a .gz one decompressed)."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        out[path] = data.decode("utf-8", errors="replace")
    return out


def test_no_file_of_a_run_against_a_key_echoing_server_holds_a_secret(tmp_path: Path) -> None:
    """The client's key, the engine's own --api-key, a credential header, a --server-env token and an
    HF_TOKEN of fastbench's environment: the server echoes the first three into every 401 body and its
    log, the engine logs its arguments and secret-named variables. No file fastbench writes (result
    JSON, card, requests JSONL, --save-result, --server-log, the store's run, the report), nor its
    console and live view, holds any of them; the scrubbed lines are there, so they were tested."""
    engine = write_key_echo_engine(tmp_path / "bin")
    client, engine_key, header = _secret("sk-client"), _secret("sk-engine"), _secret("xk-header")
    server_env, ambient = _secret("tok-server-env"), _secret("hf_ambient")
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, HF_TOKEN=ambient, FASTBENCH_STORE=str(out / "store"))
    run = _fastbench(
        "--launch", "vllm", "--launch-model", "m", "--engine-bin", str(engine),
        "--engine-args", f"--api-key {engine_key} --served-model-name m", "--server-port", str(free_port()),
        "--server-log", str(out / "server.log"), "--server-env", f"SECRET_TOKEN={server_env}",
        "--server-stop-grace", "5", "--api-key", client, "--header", f"x-api-key={header}",
        "--num-prompts", "6", "--concurrency", "2", "--random-input-len", "8", "--random-output-len", "4",
        "--result-json", str(out / "r.json"), "--result-card", str(out / "card.md"),
        "--requests-jsonl", str(out / "requests.jsonl"), "--save-result", "--result-dir", str(out / "vllm"),
        "--store", str(out / "store"), "--live", env=env)
    assert (out / "r.json").exists(), run.stderr[-3000:]
    report = _fastbench("report", "--store", str(out / "store"), "--out", str(out / "report"), env=env)
    assert report.returncode == 0, report.stderr[-3000:]

    files = _every_file(out)
    assert {p.name for p in files} >= {"r.json", "card.md", "requests.jsonl", "server.log", "result.json",
                                       "requests.jsonl.gz"}
    assert any(p.parent == out / "report" for p in files) and any(p.parent == out / "vllm" for p in files)
    files[tmp_path / "console"] = run.stdout + run.stderr + report.stdout + report.stderr
    for path, text in files.items():
        for secret in (client, engine_key, header, server_env, ambient):
            assert secret not in text, f"{path} holds {secret[:12]}..."
    # what the server echoed and the engine logged reached the files, hidden
    records = [orjson.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert records and all(r["http_status"] == 401 for r in records)
    assert f"Bearer {REDACTED}; x-api-key {REDACTED}; expected {REDACTED}" in records[0]["error_message"]
    log = (out / "server.log").read_text()
    assert f"'--api-key', '{REDACTED}'" in log and f"HF_TOKEN={REDACTED}" in log and "SECRET_TOKEN=***" in log
    assert "refused: Incorrect API key provided: Bearer ***" in log


def test_a_short_local_key_is_hidden_as_a_whole_word_only() -> None:
    """"EMPTY" (vLLM's placeholder key) hides "Bearer EMPTY", not "EMPTYING" or a number's digits."""
    hide = Secrets(["EMPTY", "1"])
    assert hide.text("Bearer EMPTY; EMPTYING; 'EMPTY'") == "Bearer ***; EMPTYING; '***'"
    assert hide.text("11-30 12:01 1.5 GiB a/1+b key 1") == "11-30 12:01 1.5 GiB a/1+b key ***"
    assert hide.data(b'{"m":"Bearer EMPTY","n":"EMPTYING"}') == b'{"m":"Bearer ***","n":"EMPTYING"}'


def test_the_secrets_of_a_run_come_from_every_place_it_names_one() -> None:
    found = Secrets.of_run(
        api_key="sk-key-0123456789", headers={"Authorization": "Bearer tok-header-0123", "x-tenant": "acme"},
        engine_args=("--api-key", "sk-engine-1", "--hf-token=hf_engine_2", "--max-tokens", "8",
                     "--max-num-batched-tokens=8192"),
        docker_args=("-e", "WANDB_API_KEY=wandb-3"), env=("HF_TOKEN=hf_env_4", "N_WORKERS=2"),
        environ={"HF_TOKEN": "hf_ambient_0123456789", "SHORT_KEY": "1", "HOME": "/root"}).values
    assert set(found) == {"sk-key-0123456789", "Bearer tok-header-0123", "tok-header-0123", "sk-engine-1",
                          "hf_engine_2", "wandb-3", "hf_env_4", "hf_ambient_0123456789"}


def test_only_secrets_are_hidden_in_a_command_line() -> None:
    """By the flag's identity, not a substring of its name: --max-tokens=8 and --tokenizer=PATH stay."""
    argv = ["fastbench", "--max-tokens=8", "--tokenizer=/models/tok", "--tokenizer-mode", "slow",
            "--api-key=sk-a", "--api-key", "sk-b", "--header", "x-tenant=a", "Authorization=Bearer z",
            "--header=x-api-key=k", "--server-env", "HF_TOKEN=hf_c", "--server-env=VLLM_API_KEY=v",
            "--server-env=MAX_TOKENS=9", "--engine-args", "--api-key sk-d --max-model-len 64", "--model", "m"]
    assert redact_argv(argv) == [
        "fastbench", "--max-tokens=8", "--tokenizer=/models/tok", "--tokenizer-mode", "slow",
        "--api-key=***", "--api-key", "***", "--header", "x-tenant=a", "Authorization=***",
        "--header=x-api-key=***", "--server-env", "HF_TOKEN=***", "--server-env=VLLM_API_KEY=***",
        "--server-env=MAX_TOKENS=9", "--engine-args", "--api-key *** --max-model-len 64", "--model", "m"]
    assert shell_join(redact_argv(["fastbench", "--random-prefix-len=4", "--api-key=k"])) == (
        "fastbench --random-prefix-len=4 --api-key=***")


def _tokenizer(directory: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = ["[UNK]", *(f"w{i}" for i in range(300))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    directory.mkdir()
    tok.save(str(directory / "tokenizer.json"))
    return directory


def test_a_cards_command_runs_again_to_the_same_configuration(tmp_path: Path) -> None:
    """The card's full run command, given flags in their ``=`` form as a sweep's cells give them, runs
    again (with the key given again: it is hidden) and configures the same run."""
    pytest.importorskip("tokenizers")
    _tokenizer(tmp_path / "tok")
    first = _fastbench("--num-prompts=3", "--concurrency=1", "--random-input-len=8", "--random-output-len=4",
                       "--max-tokens=4", "--tokenizer=tok", "--seed=7", "--api-key=sk-once-0123456789",
                       "--result-json=r.json", "--result-card=c.md", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    before = orjson.loads((tmp_path / "r.json").read_bytes())["fastbench"]["config"]
    card = (tmp_path / "c.md").read_text()
    block = card.split("## Full run command", 1)[1].split("```")[1]
    (command,) = [line for line in block.splitlines() if line.startswith("fastbench ")]
    assert "--max-tokens=4" in command and "--tokenizer=tok" in command and "--api-key=***" in command
    argv = [arg.replace("--api-key=***", "--api-key=sk-again-0123456789") for arg in shlex.split(command)]
    again = _fastbench(*argv[1:], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    after = orjson.loads((tmp_path / "r.json").read_bytes())["fastbench"]["config"]
    assert after["tokenizer"] == "tok" and after["max_tokens"] == 4
    assert {k: v for k, v in after.items() if k != "command_line"} == {
        k: v for k, v in before.items() if k != "command_line"}


def test_the_live_views_and_exporters_labels_hide_the_runs_secrets(tmp_path: Path) -> None:
    """The labels a live view draws and an exporter serves to whoever scrapes: a key typed into a label
    by mistake is hidden there too, and every other label is kept."""
    from fastbench import BenchConfig
    from fastbench.api.live import live_labels
    from fastbench.cli.live import ViewProcess

    key = _secret("sk-label")
    config = BenchConfig(api_key=key, label=f"run-{key}", variant="fp8")
    assert live_labels(config) == {"label": "run-***", "variant": "fp8"}
    sent = tmp_path / "sent"
    view = ViewProcess.__new__(ViewProcess)  # the pipe's writing end only: no view process behind it
    view.secrets, view.dropped = Secrets([key]), 0
    with open(sent, "wb") as f:
        view._fd = f.fileno()
        view.send({"say": f"cell failed: 401 Incorrect API key provided: Bearer {key}"}, must=True)
    assert orjson.loads(sent.read_bytes()) == {"say": "cell failed: 401 Incorrect API key provided: Bearer ***"}
