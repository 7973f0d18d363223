"""Runs of the APIs answered whole against the built-in synthetic server: the figures that apply (E2E, requests/s,
inputs/s, input tokens/s from usage), null with the reason for those that do not, the result file, the console,
the card; the fallback without usage; and ``validate --backend`` judged against the server's send log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from support.timing import until_a_round_passes
from fastbench import BenchConfig, api
from fastbench.api.validation_whole import validate_whole
from fastbench.results import writers

EMBED = dict(endpoint="/v1/embeddings", num_prompts=20, random_batch_size=4, random_input_len=12,
             random_range_ratio=0.5, concurrency=3, synthetic_args=("--pooling-ms", "2"))


def test_an_embeddings_run_reports_inputs_and_input_tokens(tmp_path: Path) -> None:
    out, card = tmp_path / "r.json", tmp_path / "card.md"
    result = api.run(BenchConfig(**EMBED, result_json=str(out), result_card=str(card)))  # type: ignore[arg-type]
    assert result.counts.completed == 5 and result.counts.failed == 0
    assert result.pooling is not None and result.pooling.total_inputs == 20
    # the server's usage (whitespace words) equals the client's own count of the words it sent
    lens = result.per_request.input_lens
    assert result.total_input_tokens == sum(lens) and all(n > 0 for n in lens)
    assert result.usage.by_source == {"FINAL": 5} and "from the server's usage for 5/5" in result.usage.statement
    assert result.distributions["e2el"].count == 5 and result.distributions["e2el"].median > 2.0
    assert result.distributions["ttft"].count == 0
    assert result.pooling.input_sequence_throughput == pytest.approx(20 / result.duration_s)
    doc = orjson.loads(out.read_bytes())
    assert doc["backend"] == "openai-embeddings" and doc["total_input_sequences"] == 20
    assert doc["input_sequence_throughput"] == pytest.approx(result.pooling.input_sequence_throughput)
    for key in ("mean_ttft_ms", "p99_tpot_ms", "median_itl_ms", "output_throughput"):
        assert doc[key] is None, key  # null with the reason, never 0
    section = doc["fastbench"]["pooling"]
    assert section["not_applicable"]["ttft"].startswith("does not apply")
    assert doc["fastbench"]["throughput"]["output_throughput_tok_s"] is None
    text = card.read_text()
    assert "| Inputs/s |" in text and "| TTFT (ms) |" not in text and "does not apply" in text
    console = writers.render_console(result)
    assert "Input throughput (inputs/s):" in console and "Mean TTFT" not in console and "Mean E2EL" in console


def test_without_usage_the_input_tokens_are_the_requests_own_count() -> None:
    config = BenchConfig(**{**EMBED, "synthetic_args": ("--no-usage", "--pooling-ms", "1")})  # type: ignore[arg-type]
    result = api.run(config)
    assert result.counts.completed == 5 and result.usage.by_source == {"NONE": 5}
    assert "5/5 had no usage" in result.usage.statement and "estimate (words)" in result.usage.statement
    assert result.total_input_tokens == sum(result.per_request.input_lens) > 0


@pytest.mark.parametrize(("max_model_len", "flagged"), [(20, 0), (10, 5)])
def test_a_batch_is_held_to_the_context_length_per_input(max_model_len: int, flagged: int) -> None:
    """Four inputs of 12 words a request: 48 prompt tokens fit a context of 20 per input (no note), and
    cannot fit one of 10 (the server's usage then says more than it could have computed)."""
    config = BenchConfig(**{**EMBED, "random_range_ratio": 0.0,  # type: ignore[arg-type]
                            "synthetic_args": ("--pooling-ms", "1", "--max-model-len", str(max_model_len))})
    result = api.run(config)
    assert result.counts.completed == 5 and result.per_request.input_lens == [48] * 5
    over = [note for note in result.notes if "max_model_len" in note]
    if flagged:
        assert over == [f"{flagged} completed requests report more prompt tokens than the server's max_model_len "
                        f"({max_model_len}) per input allows: its usage cannot be right there"]
    else:
        assert over == []


@pytest.mark.parametrize("endpoint", ["/rerank", "/v1/rerank", "/score"])
def test_a_rerank_run_counts_as_the_server_counts(endpoint: str) -> None:
    config = BenchConfig(endpoint=endpoint, backend="vllm-rerank", dataset_name="random-rerank",  # type: ignore[arg-type]
                         num_prompts=9, random_batch_size=3, random_input_len=16, random_range_ratio=0.3,
                         synthetic_args=("--pooling-ms", "1"))
    result = api.run(config)
    assert result.counts.completed == 3 and result.pooling is not None and result.pooling.total_inputs == 9
    # the workload's count ((query + 1) x documents + their words) is the server's usage: a request's own count
    # is what the figures would fall back to, so they must agree where both exist
    work = api.run(config.replace(synthetic_args=("--no-usage", "--pooling-ms", "1")))
    assert result.total_input_tokens == work.total_input_tokens > 0


@pytest.mark.timing
@pytest.mark.parametrize("backend,batch", [("openai-embeddings", 4), ("vllm-rerank", 3)])
def test_validate_whole_passes_against_the_servers_log(backend: str, batch: int) -> None:
    def one_round() -> None:
        report = validate_whole(backend, 8, 40, 3.0, batch, 0.5)
        assert report.completed == report.requests == 40 and report.tokens_equal == 40
        assert report.end_skew_ms["min"] is not None and report.end_skew_ms["min"] >= 0  # one clock: never before
        way = report.way_ms["p50"]
        assert way is not None and way > 0  # E2E holds the server's read-to-send time and the ways in and out
        assert report.passed, report.render()  # p99 end skew within 0.5 ms: judged over rounds (a loaded host)
        data: dict[str, Any] = report.to_dict()
        assert data["passed"] and data["settings"]["backend"] == backend

    until_a_round_passes(one_round)
