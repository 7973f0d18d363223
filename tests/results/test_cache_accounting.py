"""Per-request cache accounting and the prefix-cache warning, end to end against the synthetic server: the
cached tokens each request's usage reports (vLLM's prompt_tokens_details), the run's share of them beside the
/metrics hit rate, the share the workload's own sharing predicts, and the warning where the cache served far
more than that (the same seed sent twice to a caching server)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from support.synthetic_helpers import Response, request, stream_body
from fastbench import BenchConfig, run
from fastbench.load.datasets import build_workload_sync
from fastbench.load.screening import Candidate, JsonPrompt
from fastbench.load.sharing import SharedBlocks, shared_prompt_tokens
from fastbench.results.cache import FLAT_KEYS, WARN_MARGIN, PrefixCacheSummary
from fastbench.results.card import render_card
from fastbench.results.definitions import DEFINITIONS
from fastbench.results.result import Distribution, Result
from fastbench.results.writers import render_console
from fastbench.study.runfile import flat_keys
from fastbench.synthetic import SyntheticServer

BLOCK = 16
PROMPT = 256  # token ids: the server counts them exactly
CACHED = (PROMPT - 1) // BLOCK * BLOCK  # a prompt sent before: its full blocks but the last token's (vLLM's rule)


def _post(base_url: str, body: dict[str, Any]) -> Response:
    return asyncio.run(request(base_url, "POST", "/v1/chat/completions" if "messages" in body else "/v1/completions",
                               body))


def test_the_synthetic_server_reports_cached_tokens_as_vllm_does() -> None:
    """Read with the tests' own raw client: the final usage (streamed or whole) carries
    prompt_tokens_details.cached_tokens with --enable-prompt-tokens-details, left out when nothing was cached
    (vLLM's `if enable_prompt_tokens_details and num_cached_tokens`), never in the per-chunk usage."""
    prompt = list(range(100, 140))  # 40 token ids: 2 full blocks of 16 cacheable, the last token computed
    with SyntheticServer(enable_prefix_caching=True, enable_prompt_tokens_details=True, block_size=BLOCK,
                         ttft_ms=1, itl_ms=1) as server:
        cold = _post(server.base_url, stream_body(3, prompt=prompt))  # type: ignore[arg-type]
        warm = _post(server.base_url, stream_body(3, prompt=prompt))  # type: ignore[arg-type]
        whole = _post(server.base_url, {"prompt": prompt, "max_tokens": 2})
        chat = [_post(server.base_url, stream_body(2, chat=True, prompt=" ".join(["w"] * 40))) for _ in range(2)]
    assert cold.chunks()[-1]["usage"] == {"prompt_tokens": 40, "total_tokens": 43, "completion_tokens": 3}
    final = warm.chunks()[-1]
    assert final["choices"] == [] and final["usage"] == {"prompt_tokens": 40, "total_tokens": 43,
                                                          "completion_tokens": 3,
                                                          "prompt_tokens_details": {"cached_tokens": 32}}
    assert all("prompt_tokens_details" not in c["usage"] for c in warm.chunks()[:-1])
    assert whole.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 32}
    assert "prompt_tokens_details" not in chat[0].chunks()[-1]["usage"]
    assert chat[1].chunks()[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    with SyntheticServer(enable_prefix_caching=True, block_size=BLOCK, ttft_ms=1, itl_ms=1) as server:  # flag off
        for _ in range(2):
            plain = _post(server.base_url, stream_body(3, prompt=prompt))  # type: ignore[arg-type]
    assert "prompt_tokens_details" not in plain.chunks()[-1]["usage"]


def _random(base_url: str, tmp_path: Path, seed: int, name: str, **changes: Any) -> tuple[Result, dict[str, Any],
                                                                                            list[dict[str, Any]]]:
    """16 random prompts of 256 tokens drawn with ``seed``; the result, its file and its per-request records."""
    config = BenchConfig(base_url=base_url, num_prompts=16, concurrency=4, random_input_len=PROMPT,
                         random_output_len=3, seed=seed, metrics_interval_s=0.2,
                         result_json=str(tmp_path / f"{name}.json"), save_detailed=str(tmp_path / f"{name}.jsonl"))
    result = run(config.replace(**changes))
    doc = orjson.loads((tmp_path / f"{name}.json").read_bytes())
    records = [orjson.loads(line) for line in (tmp_path / f"{name}.jsonl").read_bytes().splitlines()]
    return result, doc, records


def test_the_same_seed_sent_twice_to_a_caching_server_is_warned_and_other_seeds_are_not(tmp_path: Path) -> None:
    with SyntheticServer(enable_prefix_caching=True, enable_prompt_tokens_details=True, block_size=BLOCK,
                         ttft_ms=1, itl_ms=1) as server:
        first, first_doc, first_records = _random(server.base_url, tmp_path, 7, "first")
        again, doc, records = _random(server.base_url, tmp_path, 7, "again")
        other, other_doc, _ = _random(server.base_url, tmp_path, 8, "other")
    # the first run found nothing cached: vLLM's usage then leaves prompt_tokens_details out, so no request
    # carried cached tokens (null, not 0), and the hit rate is the /metrics counters'
    assert first.prefix_cache is not None and first.prefix_cache.cached_tokens_share is None
    assert first.prefix_cache.hit_rate == 0.0 and first.prefix_cache.expected_prefix_share == 0.0
    assert first.prefix_cache.warning is None and first_doc["prefix_cache_warning"] is None
    assert {r["cached_tokens"] for r in first_records} == {None}
    # the same seed again: every prompt is in the cache before the run
    cache = again.prefix_cache
    assert cache is not None and cache.requests_reporting == cache.requests_counted == 16
    assert [r["cached_tokens"] for r in records] == [CACHED] * 16 and {r["prompt_tokens"] for r in records} == {PROMPT}
    assert cache.cached_tokens_share == pytest.approx(CACHED / PROMPT)
    assert cache.hit_rate == pytest.approx(CACHED / PROMPT)  # the /metrics counters agree with the usage
    assert (cache.cached_tokens.mean, cache.cached_tokens.median, cache.cached_tokens.p99) == (CACHED,) * 3
    assert cache.expected_prefix_share == 0.0 and cache.observed_from == "cached_tokens_share"
    warning = cache.warning
    assert warning is not None and "94 % of prompt tokens came from the server's cache" in warning
    assert f"first request sent already found {CACHED} of {PROMPT} prompt tokens cached" in warning
    assert "seed 7" in warning and "\n" not in warning
    # where it shows: the flat keys (what a sweep, report or compare read), the notes, the console, the card
    assert {key: doc[key] for key in FLAT_KEYS} == {
        "prefix_cache_hit_rate": cache.hit_rate, "cached_tokens_share": cache.cached_tokens_share,
        "mean_cached_tokens": CACHED, "median_cached_tokens": CACHED, "p99_cached_tokens": CACHED,
        "expected_prefix_share": 0.0, "prefix_cache_warning": warning}
    assert flat_keys(doc)["prefix_cache_warning"] == warning
    # the label once: the warning has none of its own (a report that labels it said "prefix cache: prefix cache:")
    assert not warning.startswith("prefix cache") and doc["fastbench"]["prefix_cache"]["warning"] == warning
    assert f"prefix cache: {warning}" in doc["fastbench"]["notes"]
    # the console: the whole warning, wrapped under its WARNING
    lines = render_console(again).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("WARNING "))
    block = [lines[at], *itertools.takewhile(lambda line: line.startswith(" " * len("WARNING ")), lines[at + 1:])]
    assert block[0].startswith("WARNING prefix cache: 94 % of prompt tokens came from the server's cache")
    assert all(len(line) <= 80 for line in block) and "…" not in "".join(block)
    assert " ".join(line.strip() for line in block) == "WARNING prefix cache: " + " ".join(warning.split())
    card = render_card(again, again.config)
    assert f"| Cached prompt tokens | {100 * CACHED / PROMPT:.2f} % (the server's usage, 16 of 16 requests" in card
    assert "| Expected prefix share | 0.00 % (the prompts' shared prefixes" in card and "WARNED" in card
    assert f"- prefix cache: {warning}" in card
    assert "- the prompts were drawn with seed 7 (--seed) and the server's prefix cache served 94 %" in card
    # other prompts (another seed) on the same warm server: nothing of them was cached, nothing warned
    assert other.prefix_cache is not None and other.prefix_cache.warning is None
    assert other.prefix_cache.hit_rate == 0.0 and other_doc["prefix_cache_warning"] is None
    assert "the prompts were drawn with seed" not in render_card(other, other.config)
    assert "the prompts were drawn with seed" not in render_card(first, first.config)


def test_a_server_without_prompt_tokens_details_gives_no_cached_tokens_and_the_hit_rate_is_judged(
        tmp_path: Path) -> None:
    with SyntheticServer(enable_prefix_caching=True, block_size=BLOCK, ttft_ms=1, itl_ms=1) as server:
        _random(server.base_url, tmp_path, 3, "first")
        again, doc, records = _random(server.base_url, tmp_path, 3, "again")
    cache = again.prefix_cache
    assert cache is not None
    assert {r["cached_tokens"] for r in records} == {None}  # not 0: the server never said
    assert cache.cached_tokens_share is None and cache.requests_reporting == 0 and cache.cached_tokens.count == 0
    assert doc["cached_tokens_share"] is None and doc["mean_cached_tokens"] is None
    assert cache.hit_rate == pytest.approx(CACHED / PROMPT) and cache.observed_from == "prefix_cache_hit_rate"
    assert cache.warning is not None and "(the server's /metrics hit rate)" in cache.warning
    assert "first request" not in cache.warning  # no per-request figure to say it with


def test_a_prefix_dataset_at_its_own_share_is_not_warned(tmp_path: Path) -> None:
    """20 prompts behind one 200-token prefix: all but the first could find it cached, 19 x 200 of 20 x 240
    prompt tokens; the server caches its 12 full blocks (192 tokens) of it, a little less, and no warning."""
    with SyntheticServer(enable_prefix_caching=True, enable_prompt_tokens_details=True, block_size=BLOCK,
                         ttft_ms=1, itl_ms=1) as server:
        result = run(BenchConfig(base_url=server.base_url, num_prompts=20, concurrency=1, random_prefix_len=200,
                                 random_input_len=40, random_output_len=2, metrics_interval_s=0.2))
    cache = result.prefix_cache
    assert cache is not None
    assert cache.expected_prefix_share == pytest.approx(19 * 200 / (20 * 240))
    assert cache.cached_tokens_share == pytest.approx(19 * 192 / (20 * 240))
    assert cache.requests_reporting == 19 and cache.requests_counted == 20  # the first: usage without details, 0
    assert cache.cached_tokens.median == 192 and cache.cached_tokens.min == 0
    assert cache.warning is None and "random" in cache.expected_from


def _trace(tmp_path: Path, rows: list[tuple[int, list[int]]]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"timestamp": i, "input_length": n, "output_length": 2, "hash_ids": ids})
                              + b"\n" for i, (n, ids) in enumerate(rows)))
    return path


def test_what_a_workload_shares_is_found_from_its_prompts(tmp_path: Path) -> None:
    """The expected share's per-request tokens, worked out by hand (load.sharing)."""
    def shared(**options: Any) -> list[int] | None:
        return build_workload_sync(BenchConfig(**options), "m", max_model_len=None).shared_prompt_tokens

    assert shared(num_prompts=5, random_input_len=8) == [0] * 5
    # a trace's hash ids: a block counts only where every block before it was sent before; 32 tokens each
    path = _trace(tmp_path, [(96, [1, 2, 3]), (96, [1, 2, 4]), (90, [1, 2, 3]), (40, [5]), (128, [1, 9, 3]),
                             (64, [5, 7])])
    assert shared(dataset_name="timed_trace", dataset_path=path, num_prompts=6, timed_trace_chunk_hash_size=32,
                  self_timed=False) == [0, 64, 90, 0, 32, 32]
    # warm-ups go first: here the trace's 5th and 6th requests
    assert shared(dataset_name="timed_trace", dataset_path=path, num_prompts=4, num_warmups=2,
                  timed_trace_chunk_hash_size=32, self_timed=False) == [32, 64, 90, 32]
    # two prefixes taking turns (in a shuffled order): each prompt after the first of its prefix shares it
    turns = shared(dataset_name="prefix_repetition", num_prompts=6, prefix_repetition_prefix_len=10,
                   prefix_repetition_suffix_len=5, prefix_repetition_num_prefixes=2)
    assert turns is not None and sorted(turns) == [0, 0, 10, 10, 10, 10] and turns[0] == 0
    # a dataset that ran short reuses its prompts: a repeat shares the whole prompt
    gsp = shared(dataset_name="generated-shared-prefix", num_prompts=6, gsp_num_groups=1, gsp_prompts_per_group=3,
                 gsp_system_prompt_len=12, gsp_question_len=4)
    assert gsp == [0, 12, 12, 16, 16, 16]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "a b c"}\n{"prompt": "a b d"}\n')
    # a file's sharing: unknown
    assert shared(dataset_name="jsonl", dataset_path=jsonl, num_prompts=2, max_tokens=2) is None


def test_a_file_dataset_is_not_judged_and_says_why(tmp_path: Path) -> None:
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text("".join(f'{{"prompt": "{" ".join(["w"] * 40)} {i}"}}\n' for i in range(4)))
    with SyntheticServer(enable_prefix_caching=True, enable_prompt_tokens_details=True, ttft_ms=1, itl_ms=1) as server:
        config = BenchConfig(base_url=server.base_url, dataset_name="jsonl", dataset_path=jsonl, num_prompts=4,
                             concurrency=1, max_tokens=2)
        run(config)
        again = run(config)
    cache = again.prefix_cache
    assert cache is not None and cache.cached_tokens_share is not None and cache.cached_tokens_share > 0.5
    assert cache.expected_prefix_share is None and cache.warning is None
    assert cache.expected_from.startswith("unknown: what jsonl's prompts share is not known")
    assert "| Expected prefix share | unknown: what jsonl's prompts share" in render_card(again, again.config)


def test_the_warning_rule_is_the_one_its_definition_states() -> None:
    assert f"by more than {WARN_MARGIN}" in DEFINITIONS["prefix_cache_warning"]


def test_a_multi_turn_run_expects_its_history_cached_and_is_not_warned(tmp_path: Path) -> None:
    """Each turn's history is the turn before's prompt and reply: the expected share counts them, and the
    server's cache (which keeps prompt blocks, not replies) serves less than that."""
    path = tmp_path / "c.jsonl"
    lines = []
    for i in range(3):
        messages = [{"role": "system", "content": "be brief"}]
        for t in range(3):
            messages += [{"role": "user", "content": " ".join([f"s{i}-{t}"] * 60)},
                         {"role": "assistant", "content": "ok"}]
        lines.append(orjson.dumps({"id": str(i), "messages": messages}).decode())
    path.write_text("\n".join(lines) + "\n")
    with SyntheticServer(enable_prefix_caching=True, enable_prompt_tokens_details=True, ttft_ms=1, itl_ms=1) as server:
        result = run(BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions", dataset_name="jsonl",
                                 dataset_path=path, multi_turn=True, max_tokens=8, num_prompts=3, concurrency=1))
    cache = result.prefix_cache
    assert cache is not None and result.counts.completed == 9
    assert cache.expected_from == "multi-turn history: each turn's previous turn's prompt and the server's reply"
    assert cache.cached_tokens_share is not None and cache.expected_prefix_share is not None
    assert 0.3 < cache.cached_tokens_share <= cache.expected_prefix_share < 0.7
    assert cache.warning is None


def test_the_numpy_walk_of_a_traces_ids_is_the_plain_one() -> None:
    """A trace's hash ids are walked in numpy; the same chains given as lists take the plain loop."""
    rng = np.random.default_rng(5)
    for _ in range(50):
        chains = [rng.integers(0, 12, size=rng.integers(0, 6)) for _ in range(int(rng.integers(1, 30)))]
        lens = rng.integers(0, 200, size=len(chains)).tolist()
        block = int(rng.integers(1, 40))
        as_arrays = [Candidate(JsonPrompt((b"[]",), 0), n, 1, "t", shares=SharedBlocks(ids, block))
                     for ids, n in zip(chains, lens)]
        as_lists = [dataclasses.replace(c, shares=SharedBlocks(c.shares.keys.tolist(), block))  # type: ignore[union-attr]
                    for c in as_arrays]
        order = rng.permutation(len(chains)).tolist()
        measured = int(rng.integers(0, len(chains) + 1))
        fast = shared_prompt_tokens("mooncake", as_arrays, order, measured)
        assert fast == shared_prompt_tokens("mooncake", as_lists, order, measured)


def test_the_cards_seed_note_names_the_seed_that_drew_the_prompts() -> None:
    def summary(observed: float | None, expected: float | None) -> PrefixCacheSummary:
        return PrefixCacheSummary(hit_rate=observed, cached_tokens=Distribution.empty("tokens"),
                                  cached_tokens_share=None, requests_reporting=0, requests_counted=0,
                                  expected_prefix_share=expected, expected_from="",
                                  observed_from="prefix_cache_hit_rate", warning=None)

    config = BenchConfig(seed=11)
    note = summary(0.6, 0.0).seed_note(config)
    assert note is not None and note.startswith("the prompts were drawn with seed 11 (--seed)") and "60 %" in note
    stated = {"prompt_seed": {"seed": 12, "varies_prompts": True, "draws": "x"}}
    assert "seed 12" in (summary(0.6, None).seed_note(config, stated) or "")
    in_order = {"prompt_seed": {"seed": 11, "varies_prompts": False, "draws": "none"}}
    assert (summary(0.6, None).seed_note(config, in_order) or "").startswith("these prompts are the same whatever")
    assert summary(0.5, 0.48).seed_note(config) is None  # what the workload's own sharing explains
    assert summary(0.03, None).seed_note(config) is None and summary(None, 0.0).seed_note(config) is None
