"""report: the result file, the run card, the console table and the per-request JSONL."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hdrh.histogram import HdrHistogram

from fastbench.atomicfile import write_synced
from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError
from fastbench.redact import redact_argv, redact_text
from fastbench.results import notes as notes_module
from fastbench.results.card import render_card
from fastbench.results.figures import summarize
from fastbench.results.records import COL, NCOLS, ErrorClass, RunData, TimestampSource, UsageSource
from fastbench.results.result import Result
from fastbench.results.writers import (
    RESULT_SCHEMA_VERSION,
    check_output_path,
    detailed_records,
    render_console,
    result_to_json_dict,
    write_card_atomic,
    write_detailed_jsonl,
    write_json_atomic,
)

T0 = 10**12
MS = 1_000_000
KEY = "sk-test-0123456789abcdef"
REL = 1.5e-3


def build_run(
    n: int = 10,
    *,
    total: int | None = None,
    every_ms: float = 200.0,
    ttft_ms: float = 50.0,
    prompt: int = 100,
    chunk_tokens: tuple[int, ...] = (1, 2, 3, 4),
    gap_ms: float = 20.0,
    failed: int = 0,
    duration_ms: float = 2000.0,
    cap_hit: bool = False,
) -> RunData:
    """``n`` sequential requests (the last ``failed`` of them fail with HTTP 500), ``total`` rows."""
    rows = np.zeros((total or n, NCOLS), dtype=np.int64)
    itl_chunk = HdrHistogram(1, 3_600_000_000_000, 3)
    itl_token = HdrHistogram(1, 3_600_000_000_000, 3)
    messages = {}
    for i in range(n):
        start = T0 + round(i * every_ms * MS)
        first = start + round(ttft_ms * MS)
        end = first + round((len(chunk_tokens) - 1) * gap_ms * MS)
        ok = i < n - failed
        values = {
            "index": i,
            "scheduled_ns": start,
            "sent_ns": start,
            "first_byte_ns": first,
            "first_token_ns": first,
            "first_answer_ns": first,
            "end_ns": end,
            "prompt_tokens": prompt,
            "output_tokens": sum(chunk_tokens),
            "chunks": len(chunk_tokens),
            "events": len(chunk_tokens) + 2,
            "max_chunk_tokens": max(chunk_tokens),
            "error": ErrorClass.OK if ok else ErrorClass.HTTP_STATUS,
            "http_status": 200 if ok else 500,
            "usage_source": UsageSource.PER_CHUNK,
            "connect_ns": 0,
        }
        for name, value in values.items():
            rows[i, COL[name]] = value
        if ok:
            for tokens in chunk_tokens[1:]:
                itl_chunk.record_value(round(gap_ms * MS))
                itl_token.record_value(round(gap_ms * MS / tokens), tokens)
        else:
            messages[i] = f"HTTP 500: internal error {i}"
    chunks = n * len(chunk_tokens)
    return RunData(
        rows=rows,
        error_messages=messages,
        histograms={"itl_chunk": itl_chunk, "itl_token": itl_token},
        start_ns=T0,
        end_ns=T0 + round(duration_ms * MS),
        cap_hit=cap_hit,
        stopped_reason="time cap" if cap_hit else "completed",
        timestamp_source=TimestampSource.KERNEL,
        reads=chunks,
        multi_event_reads=0,
        output_events=chunks,
        kernel_stamped_reads=chunks,
        connections_opened=1,
        concurrency_samples=np.zeros((0, 2)),
        mean_in_flight=1.0,
        client_cpu_ns=chunks * 20_000,
        warmups=0,
    )


def make_config(**changes: Any) -> BenchConfig:
    base = BenchConfig(
        base_url="http://127.0.0.1:8000",
        model="google/gemma-4-31B-it",
        api_key=KEY,
        concurrency=1,
        num_prompts=10,
        max_tokens=256,
        dataset_name="sharegpt",
        dataset_path="ShareGPT_V3_unfiltered_cleaned_split.json",
        goodput={"ttft": 60.0},
        command_line=(
            "fastbench", "--base-url", "http://127.0.0.1:8000", "--model", "google/gemma-4-31B-it",
            "--api-key", KEY, "--concurrency", "1", "--api-key=" + KEY,
        ),
    )  # fmt: skip
    return base.replace(**changes)


SERVER_INFO: dict[str, Any] = {"engine": "vLLM 0.32.0", "max_model_len": 65536}


def make_result(data: RunData | None = None, config: BenchConfig | None = None, **server: Any) -> Result:
    return summarize(
        data or build_run(),
        config or make_config(),
        workload_info={"dataset": "ShareGPT V3"},
        server_info={**SERVER_INFO, **server},
    )


ENVIRONMENT = {"python": "3.11", "platform": "linux", "fastbench": "0.1.0", "hostname": "h", "cpu_count": 16}


def test_json_round_trip(tmp_path: Path) -> None:
    config = make_config()
    result = make_result(build_run(12, failed=2), config)
    path = tmp_path / "result.json"
    write_json_atomic(path, result_to_json_dict(result, config, environment=ENVIRONMENT))
    raw = path.read_bytes()
    assert KEY.encode() not in raw
    obj = orjson.loads(raw)
    # vllm's flat keys, same units
    assert obj["completed"] == 10 and obj["failed"] == 2
    assert obj["duration"] == pytest.approx(2.0)
    assert obj["request_throughput"] == pytest.approx(5.0)
    assert obj["output_throughput"] == pytest.approx(50.0)
    assert obj["total_token_throughput"] == pytest.approx(550.0)
    assert obj["total_input_tokens"] == 1000 and obj["total_output_tokens"] == 100
    assert obj["request_goodput"] == pytest.approx(5.0)
    assert obj["max_concurrency"] == 1
    assert obj["median_ttft_ms"] == pytest.approx(50.0, rel=REL)
    assert obj["p99_tpot_ms"] == pytest.approx(60.0 / 9, rel=REL)
    assert obj["p99.9_itl_ms"] == pytest.approx(20.0, rel=REL)
    assert obj["mean_e2el_ms"] == pytest.approx(110.0, rel=REL)
    assert obj["input_lens"] == [100] * 12
    assert obj["output_lens"] == [10] * 10 + [0, 0]
    assert obj["ttfts"] == pytest.approx([0.05] * 12)
    assert obj["errors"][:10] == [""] * 10 and obj["errors"][10] == "HTTP_STATUS: HTTP 500: internal error 10"
    # fastbench's own object
    fb = obj["fastbench"]
    assert fb["schema_version"] == RESULT_SCHEMA_VERSION
    assert "api_key" not in fb["config"] and fb["config"]["api_key_set"] is True
    assert fb["config"]["goodput"] == {"ttft": 60.0}
    assert fb["command_line"][5:7] == ["--api-key", "***"] and fb["command_line"][-1] == "--api-key=***"
    assert fb["environment"] == ENVIRONMENT
    assert fb["definitions"]["tpot"].startswith("Time per output token")
    assert fb["counts"]["failed_by_class"] == {"HTTP_STATUS": 2}
    assert fb["errors"]["HTTP_STATUS"]["examples"] == [
        "HTTP 500: internal error 10",
        "HTTP 500: internal error 11",
    ]
    assert fb["distributions"]["ttft"]["median_ms"] == obj["median_ttft_ms"]
    assert fb["distributions"]["prefill_rate"]["median_tok_s"] == pytest.approx(2000.0, rel=REL)
    assert fb["usage"]["all_per_chunk"] is True
    assert fb["timestamps"]["source"] == "KERNEL"
    assert fb["skew"] is None
    assert fb["notes"] == result.notes
    # histograms decode with hdrh and hold the completed requests only
    ttft = HdrHistogram.decode(fb["histograms"]["ttft"]["data"])
    assert ttft.get_total_count() == 10
    assert ttft.get_value_at_percentile(50) / 1e6 == pytest.approx(50.0, rel=REL)
    assert HdrHistogram.decode(fb["histograms"]["itl"]["data"]).get_total_count() == 30
    assert fb["histograms"]["prefill_rate"]["unit"] == "mtok/s"


def test_json_without_key_and_without_goodput(tmp_path: Path) -> None:
    config = make_config(api_key=None, goodput={}, command_line=())
    obj = result_to_json_dict(make_result(config=config), config, environment={})
    assert obj["fastbench"]["config"]["api_key_set"] is False
    assert obj["request_goodput"] is None
    assert obj["request_rate"] == "inf"


def test_server_launch_command_is_redacted_in_json_and_card() -> None:
    launch = f"docker run --env HF_TOKEN=hf_abcdef vllm/vllm-openai m --api-key {KEY}"
    config = make_config()
    result = make_result(config=config, launch_command=launch)
    obj = result_to_json_dict(result, config, environment={})
    text = orjson.dumps(obj).decode()
    assert KEY not in text and "hf_abcdef" not in text
    assert obj["fastbench"]["server"]["launch_command"].endswith(
        "HF_TOKEN=*** vllm/vllm-openai m --api-key ***"
    )
    card = render_card(result, config)
    assert "HF_TOKEN=***" in card and "hf_abcdef" not in card and KEY not in card


def test_card_sections_and_redaction(tmp_path: Path) -> None:
    config = make_config()
    card = render_card(make_result(config=config), config)
    lines = card.splitlines()
    assert lines[0] == "# google/gemma-4-31B-it · vLLM 0.32.0 · conc 1"
    assert lines[2] == "status: done"
    for section in ("## Configuration", "## Measured results", "## Full run command", "## Notes"):
        assert section in lines
        assert lines[lines.index(section) - 1] == lines[lines.index(section) + 1] == ""  # Markdown blocks
    assert lines.index("## Configuration") < lines.index("## Measured results") < lines.index("## Full run command")
    assert lines.index("## Full run command") < lines.index("## Notes")
    assert "| Model | google/gemma-4-31B-it |" in lines
    assert "| Engine | vLLM 0.32.0 |" in lines
    assert "| Context window | 65536 tokens |" in lines
    assert "| Endpoint | http://127.0.0.1:8000/v1/completions |" in lines
    assert "| Max tokens | 256 |" in lines
    assert "| Completed | 10/10 · " in card
    assert "| Errors | 0 |" in lines
    assert ("| Mean tokens per chunk | 2.50 (with speculative decoding, a client-side estimate of acceptance "
            "length) |") in lines
    assert "| Decode tok/s | 50.00 (aggregate: output tokens ÷ duration) |" in lines
    assert KEY not in card
    assert "--api-key *** --concurrency 1 --api-key=***" in card
    assert "- token counts from the server's per-chunk usage (exact per chunk)" in lines
    assert "- receive timestamps: kernel (SO_TIMESTAMPNS)" in lines
    path = tmp_path / "card.md"
    write_card_atomic(path, card)
    assert path.read_text(encoding="utf-8") == card


def test_card_prefill_is_never_the_total_over_time_artifact() -> None:
    # 19/500 at conc 1 before a 300 s cap, 53-token prompts: total prompt tokens / time = 3.36 tok/s.
    data = build_run(19, total=500, every_ms=15_800, prompt=53, duration_ms=300_000, cap_hit=True)
    config = make_config(num_prompts=500, max_seconds=300.0, goodput={})
    card = render_card(make_result(data, config), config)
    (row,) = [line for line in card.splitlines() if line.startswith("| Prefill tok/s |")]
    assert row.endswith(" (median per-request prompt tokens ÷ raw TTFT, n=19) |")
    assert float(row.split("|")[2].split()[0].replace(",", "")) == pytest.approx(53 / 0.050, rel=REL)
    assert "3.36" not in card and "3.35" not in card
    assert "- 19/500 completed before the 300 s time cap, 0 errors; 481 not started/cancelled" in card


def test_card_of_a_run_interrupted_before_its_first_completion_shows_no_throughput() -> None:
    # Ctrl-C before any request ended, none failed: not collapsed (the client stopped it), and no figure of
    # the server either: no "Decode tok/s 0.00" for a server that never got to answer.
    def measured(result: Result) -> dict[str, str]:
        cells = (line.strip("| ").split(" | ") for line in render_card(result, config).splitlines())
        return {row[0]: row[1] for row in cells if len(row) == 2}

    config = make_config(num_prompts=8, goodput={})
    result = make_result(dataclasses.replace(build_run(0, total=8), stopped_reason="interrupted"), config)
    assert not result.collapsed and result.counts.completed == 0 and result.counts.failed == 0
    rows = measured(result)
    for label in ("Decode tok/s", "Decode tok/s, steady state", "Request throughput"):
        assert rows[label] == "not a throughput: interrupted before any request completed", label
    assert rows["Prefill tok/s"].startswith("n/a")
    # once a request completed, the rates are the run's own again
    rows = measured(make_result(dataclasses.replace(build_run(3, total=8), stopped_reason="interrupted"), config))
    assert rows["Decode tok/s"].endswith("(aggregate: output tokens ÷ duration)")
    assert float(rows["Request throughput"].split()[0]) > 0


def test_card_optional_sections() -> None:
    config = make_config(request_rate=4.0, concurrency=64)
    result = make_result(
        config=config,
        variant="NVFP4 + EAGLE3",
        card_config={"Quant / precision": "NVFP4"},
        load={"ready_s": 404.0},
        spec_decode={"mean_acceptance_length": 2.4},
        memory={"peak_gb": 108.2, "source": "system MemAvailable delta"},
        notes=["Conc-1 point for the EAGLE3 sweep."],
    )
    card = render_card(result, config, status="running")
    lines = card.splitlines()
    assert lines[0] == "# google/gemma-4-31B-it · vLLM 0.32.0 · NVFP4 + EAGLE3 · rate 4 req/s"
    assert lines[2] == "status: running"
    for section in ("## Load", "## Speculative decoding", "## Memory"):
        assert section in lines
    assert "| Ready s | 404.0 |" in lines
    assert "| Quant / precision | NVFP4 |" in lines
    assert "- Conc-1 point for the EAGLE3 sweep." in lines
    assert "(from send: median" in card


def test_card_without_optional_sections_or_command_line() -> None:
    config = make_config(base_url=None, command_line=(), api_key=None)
    result = summarize(build_run(), config, workload_info={}, server_info={})
    card = render_card(result, config)
    assert card.splitlines()[0] == "# google/gemma-4-31B-it · fastbench synthetic · conc 1"
    assert "## Memory" not in card.splitlines() and "## Load" not in card.splitlines()
    assert "run through the Python API" in card


def test_console_table() -> None:
    text = render_console(make_result())
    lines = text.splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert any(line.startswith("Successful requests:") and line.split()[-1] == "10" for line in lines)
    assert "---------------Time to First Token----------------" in lines
    assert any(line.startswith("Median TTFT (ms):") for line in lines)
    assert any(line.startswith("P99 TPOT (ms):") for line in lines)
    assert any(line.startswith("Mean tokens per chunk:") for line in lines)
    assert any(line.startswith("Request goodput (req/s):") for line in lines)
    assert "=" * 50 in lines
    assert "Speculative Decoding" not in text


def test_each_console_note_is_shown_whole_wrapped_under_its_bullet() -> None:
    coalescing = {"changes": [{"at_s": 0.0, "tick_ms": 0.0, "why": "learning"},
                              {"at_s": 0.41, "tick_ms": 0.8, "short_gap_ms": 2.0, "why": "gaps"},
                              {"at_s": 1.9, "tick_ms": 0.8, "short_gap_ms": 2.1, "why": "ends"}],
                  "changes_total": 3, "reads_on_tick": 450, "reads_on_arrival": 550, "multi_event_reads_on_tick": 3,
                  "multi_event_reads_on_arrival": 0, "ends_unwatched": 7}
    workers = {"count": 2, "idle_slot_share": 0.3, "mean_in_flight": 2.8, "concurrency": 4,
               "chosen_because": "2 asked for", "per_worker": [{"index": 0, "ran_out_s": 0.1},
                                                              {"index": 1, "ran_out_s": 1.2}]}
    long = [notes_module.describe_coalescing(coalescing), notes_module._workers_note(workers)]
    result = dataclasses.replace(make_result(), notes=[*make_result().notes, *long])
    lines = render_console(result).splitlines()
    shown = lines[lines.index("=" * 50, 1) + 1:]
    assert all(len(line) <= 80 for line in shown)
    assert not any("…" in line or "whole notes" in line for line in shown)  # nothing cut, nothing sent elsewhere
    # each note starts a "* " line and its continuation lines are indented under it; joined, they are the note
    bullets = [i for i, line in enumerate(shown) if line.startswith("* ")]
    assert len(bullets) == len(result.notes) and bullets[0] == 0
    assert all(line.startswith("  ") for line in shown if not line.startswith("* "))
    for k, note in enumerate(result.notes):
        end = bullets[k + 1] if k + 1 < len(bullets) else len(shown)
        joined = " ".join(line[2:] for line in shown[bullets[k]:end])
        assert joined == " ".join(note.split()), (joined, note)
    assert len(shown) > len(result.notes)  # the long ones took several lines
    # a table cell that has one line still cuts where a clause ends, never inside parentheses
    assert notes_module.console_line("short (a, b; c)") == "short (a, b; c)"
    text = "head: " + "word " * 5 + "(x " * 30 + ")"
    assert notes_module.console_line(text, 40) == "head: word word word word word …"


def test_console_speculative_decoding_block() -> None:
    keys = {"spec_decode_acceptance_rate": 44.0, "spec_decode_acceptance_length": 2.32, "spec_decode_num_drafts": 100,
            "spec_decode_draft_tokens": 300, "spec_decode_accepted_tokens": 132,
            "spec_decode_per_position_acceptance_rates": [0.707, 0.413, 0.2]}
    lines = render_console(make_result(spec_decode_stats={"vllm_keys": keys})).splitlines()
    start = lines.index("---------------Speculative Decoding---------------")
    block = dict(line.rsplit(":", 1) for line in lines[start + 1:start + 7])
    assert block["Acceptance rate (%)"].strip() == "44.00" and block["Acceptance length"].strip() == "2.32"
    assert block["Drafts"].strip() == "100" and block["Accepted tokens"].strip() == "132"
    assert block["Per-position acceptance (%)"].strip() == "70.70, 41.30, 20.00"


def test_detailed_jsonl(tmp_path: Path) -> None:
    data = build_run(6, total=8, failed=1)
    path = tmp_path / "detail.jsonl"
    assert write_detailed_jsonl(path, data) == 8
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert len(records) == 8
    first = records[0]
    for field in (
        "id", "status", "scheduled_ns", "sent_ns", "first_token_ns", "first_answer_ns", "end_ns",
        "scheduled_ms", "sent_ms", "first_token_ms", "first_answer_ms", "end_ms",
        "prompt_tokens", "output_tokens", "chunks", "error", "error_message",
    ):  # fmt: skip
        assert field in first
    assert first["status"] == "completed" and first["error"] is None
    assert first["scheduled_ms"] == 0.0 and first["first_token_ms"] == pytest.approx(50.0)
    assert first["end_ms"] == pytest.approx(110.0) and first["ttft_ms"] == pytest.approx(50.0)
    assert first["tpot_ms"] == pytest.approx(60.0 / 9)
    assert first["first_token_ns"] == T0 + 50 * MS
    assert first["prompt_tokens"] == 100 and first["output_tokens"] == 10 and first["chunks"] == 4
    assert records[5]["status"] == "failed" and records[5]["error"] == "HTTP_STATUS"
    assert records[5]["error_message"] == "HTTP 500: internal error 5"
    assert [r["status"] for r in records[6:]] == ["not_started"] * 2
    assert [r["id"] for r in records] == list(range(8))
    assert records[7]["end_ns"] is None and records[7]["error"] is None


def test_atomic_writes_replace_and_leave_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"a": np.arange(3)})
    assert orjson.loads(path.read_bytes()) == {"a": [0, 1, 2]}
    assert os.listdir(tmp_path) == ["r.json"]
    with pytest.raises(TypeError):
        write_json_atomic(path, {"a": object()})
    assert os.listdir(tmp_path) == ["r.json"]
    assert orjson.loads(path.read_bytes()) == {"a": [0, 1, 2]}


def test_a_synced_write_never_replaces_a_file(tmp_path: Path) -> None:
    # the store's run folder is written file by file with it: a name taken twice is a fault, not an overwrite
    path = tmp_path / "result.json"
    write_synced(path, b"first")
    with pytest.raises(FileExistsError):
        write_synced(path, b"second")
    assert path.read_bytes() == b"first"


def test_a_failed_replace_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "summary.csv"
    write_json_atomic(path, {"a": 1})

    def full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match="No space left"):
        write_json_atomic(path, {"a": 2})
    assert os.listdir(tmp_path) == ["summary.csv"]
    assert orjson.loads(path.read_bytes()) == {"a": 1}


def test_redaction_helpers() -> None:
    assert redact_argv(["x", "--api-key", "abc", "--api-key=abc", "--model", "m"]) == [
        "x", "--api-key", "***", "--api-key=***", "--model", "m",
    ]  # fmt: skip
    assert redact_argv(["--header", "Bearer abcdefgh"], "abcdefgh") == ["--header", "Bearer ***"]
    assert redact_text("run --api-key abc --api-key=def OPENAI_API_KEY=ghi x") == (
        "run --api-key *** --api-key=*** OPENAI_API_KEY=*** x"
    )


def test_output_paths_are_checked_before_a_run(tmp_path: Path) -> None:
    """What write_bytes_atomic would fail on after the run is refused up front, in one line."""
    a_file = tmp_path / "file"
    a_file.write_text("x")
    cases = [
        (tmp_path / "missing" / "r.json", "missing does not exist"),
        (a_file / "r.json", "file is not a directory"),
        (tmp_path, "is a directory"),
        (Path("/dev/null"), "is not a regular file"),
        (Path("/proc/r.json"), "cannot write in /proc"),  # no file can be made there, not even by root
    ]
    for path, words in cases:
        with pytest.raises(ConfigError, match=words) as info:
            check_output_path("--result-json", str(path))
        assert str(info.value).startswith(f"--result-json {path}: ") and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="needs a file path"):
        check_output_path("--result-json", "")
    # writable: a new file, or one to replace; the probe leaves nothing behind
    check_output_path("--result-json", str(tmp_path / "new.json"))
    check_output_path("--result-json", str(a_file))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_detailed_jsonl_times_open_loop_requests_from_their_arrival() -> None:
    """Open loop: ttft_ms and e2el_ms count from the scheduled arrival (as the result file's
    figures), ttft_raw_ms from the send; in closed loop both count from the send."""
    closed = build_run(2)
    closed.rows[:, COL["sent_ns"]] += 5 * MS  # each request went out 5 ms after its slot freed
    opened = dataclasses.replace(closed, open_loop=True)
    (c, _), (o, _) = (list(detailed_records(d)) for d in (closed, opened))
    assert c["ttft_ms"] == pytest.approx(45.0) and c["ttft_raw_ms"] == pytest.approx(45.0)
    assert o["ttft_ms"] == pytest.approx(50.0) and o["ttft_raw_ms"] == pytest.approx(45.0)
    assert o["e2el_ms"] - c["e2el_ms"] == pytest.approx(5.0)


def test_an_attached_servers_engine_is_told_by_its_metrics() -> None:
    """Attached (--base-url), fastbench launched nothing: the engine comes from the prefix of its
    /metrics names; the synthetic server (which mimics vLLM's /metrics) is known by its version."""
    config = make_config()

    def title(**info: Any) -> str:
        result = summarize(build_run(), config, workload_info={}, server_info=info)
        return render_card(result, config).splitlines()[0]

    assert "· vLLM 0.11.0 (told by its /metrics) ·" in title(version="0.11.0", server_metrics={"engine": "vLLM"})
    assert "· SGLang (told by its /metrics) ·" in title(server_metrics={"engine": "SGLang"})
    assert "· unknown engine (version 1.2) ·" in title(version="1.2", server_metrics={"engine": None})
    assert "· fastbench synthetic ·" in title(version="fastbench-synthetic 0.1.0", server_metrics={"engine": "vLLM"})


def test_the_users_own_rows_and_notes_are_on_the_card() -> None:
    """What only the user knows (--card-row, --card-note), in the Configuration and the Notes."""
    config = make_config(card_rows=("Why this quant=NVFP4 base + EAGLE3 head", "Company = Google"),
                         card_notes=("Conc-1 point of the EAGLE3 sweep.",))
    lines = render_card(make_result(config=config), config).splitlines()
    assert "| Why this quant | NVFP4 base + EAGLE3 head |" in lines and "| Company | Google |" in lines
    assert lines.index("| Why this quant | NVFP4 base + EAGLE3 head |") < lines.index("## Measured results")
    assert lines[lines.index("## Notes") + 2] == "- Conc-1 point of the EAGLE3 sweep."


def test_the_users_rows_and_notes_cannot_break_the_cards_markdown() -> None:
    config = make_config(card_rows=("KV|cache dtype=fp8", "Why\nthis=x"), card_notes=("first\n## Injected",))
    lines = render_card(make_result(config=config), config).splitlines()
    assert "| KV\\|cache dtype | fp8 |" in lines and "| Why this | x |" in lines
    assert "- first ## Injected" in lines and "## Injected" not in lines


def test_rows_from_files_keep_the_seeds_order_and_cannot_break_the_table() -> None:
    """Quant / precision follows Engine whoever gave it (the engine's config line, or config.json
    beside another derived row); text from a model's files loses its line breaks, a bare CR too."""
    config = make_config()
    model_card = {"Family": "Llama (llama\rx)", "Parameters": "8.0B (dense)", "Quant / precision": "bfloat16",
                  "Download": "org/m (revision c1)", "Model files": "/m|x"}
    lines = render_card(make_result(config=config, model_card=model_card,
                                    card_config={"KV cache (server)": "1,000 tokens"}), config).splitlines()
    table = lines[lines.index("## Configuration") + 2:]
    labels = [line.split(" | ")[0].removeprefix("| ") for line in table[:7] if line != "|---|---|"]
    assert labels == ["Model", "Family", "Parameters", "Engine", "Quant / precision", "KV cache (server)"]
    assert "| Family | Llama (llama x) |" in lines and "| Model files | /m\\|x |" in lines
    assert not any("\r" in line for line in lines)
    # the engine's own precision wins, in the same place
    lines = render_card(make_result(config=config, model_card=model_card, card_config={
        "Launched": "by fastbench", "Quant / precision": "fp8, from the engine's config line"}), config).splitlines()
    engine = next(i for i, line in enumerate(lines) if line.startswith("| Engine |"))
    assert lines[engine + 1] == "| Quant / precision | fp8, from the engine's config line |"
    assert sum(line.startswith("| Quant / precision |") for line in lines) == 1


def test_a_users_row_of_a_label_fastbench_fills_takes_that_rows_place() -> None:
    config = make_config(card_rows=("Model=google/gemma-4-31B-it (base)", "Family=Gemma 4", "Company=Google",
                                    "Context window=65536", "Note=first", "Note=second"))
    lines = render_card(make_result(config=config, model_card={"Family": "Gemma (gemma4)"}), config).splitlines()
    table = [line for line in lines[lines.index("## Configuration") + 2:lines.index("## Measured results")]
             if line.startswith("| ") and line != "|---|---|"]
    labels = [line.split(" | ")[0].removeprefix("| ") for line in table]
    assert labels[:4] == ["Model", "Family", "Engine", "Company"]
    assert len(labels) == len(set(labels)) + 1  # each label once, but the user's repeated Note
    assert table[0] == "| Model | google/gemma-4-31B-it (base) |" and table[1] == "| Family | Gemma 4 |"
    assert "| Context window | 65536 |" in table
    assert table.index("| Note | first |") + 1 == table.index("| Note | second |")  # repeated: each kept


@pytest.mark.parametrize(("source", "drafts", "positions", "shown"), [
    ("vllm:spec_decode_* counters", 0, 3, " · speculative decoding (3-token drafts, told by its /metrics) · "),
    ("llamacpp:spec_decode_* counters", 0, 0, None),  # llama-server keeps them at zero without a draft model
    ("llamacpp:spec_decode_* counters", 12, 0, " · speculative decoding (told by its /metrics) · "),
])
def test_the_title_of_an_attached_speculating_server(source: str, drafts: int, positions: int,
                                                     shown: str | None) -> None:
    counters = {"prefix": source.split(":")[0] + ":", "drafts": drafts, "per_position": [0] * positions}
    stats = {"source": source, "counters_first": counters, "counters_last": counters}
    config = make_config()
    title = render_card(make_result(config=config, engine=None, spec_decode_stats=stats), config).splitlines()[0]
    assert (shown in title) if shown else "speculative" not in title, title
    # a launched server's variant, from its arguments, stands
    launched = make_result(config=config, variant="NGRAM speculative decoding", spec_decode_stats=stats)
    assert render_card(launched, config).splitlines()[0].count("speculative decoding") == 1
