"""Datasets -> request bodies: random, ShareGPT, JSONL; screening, warm-ups, length sources; server helpers."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from support.fakevllm import free_port
from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError, DatasetError, ServerError
from fastbench.load.datasets import RequestSpec, Workload, build_workload, build_workload_sync
from fastbench.load.screening import output_limit_known
from fastbench.server.control import fetch_model_info, make_server_tokenize, server_tokenize

try:
    import tokenizers  # noqa: F401

    HAVE_TOKENIZERS = True
except ImportError:
    HAVE_TOKENIZERS = False
needs_tokenizers = pytest.mark.skipif(
    not HAVE_TOKENIZERS, reason="the optional 'tokenizers' package is not installed (pip install tokenizers)"
)

MODEL = "test-model"


def build(config: BenchConfig, max_model_len: int | None = None, tokenize: Any = None) -> Workload:
    return asyncio.run(build_workload(config, MODEL, max_model_len=max_model_len, tokenize=tokenize))


def body(spec: RequestSpec) -> dict[str, Any]:
    doc = orjson.loads(bytes(spec.body))
    assert isinstance(doc, dict)
    return doc


def prompt_of(spec: RequestSpec) -> Any:
    doc = body(spec)
    return doc["messages"][0]["content"] if "messages" in doc else doc["prompt"]


def conv(human: str, gpt: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": extra.get("id", "x"),
        "conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": gpt}],
    }


def write_json(path: Path, doc: Any) -> str:
    path.write_bytes(orjson.dumps(doc))
    return str(path)


def write_jsonl(path: Path, rows: list[Any]) -> str:
    path.write_text("\n".join(r if isinstance(r, str) else orjson.dumps(r).decode() for r in rows) + "\n")
    return str(path)


# ---------------------------------------------------------------------------------------------------
# random


def test_random_completions_sends_token_ids() -> None:
    cfg = BenchConfig(
        num_prompts=40, random_input_len=100, random_output_len=10, random_range_ratio=0.5, seed=1
    )
    wl = build(cfg)
    assert len(wl.requests) == 40 and wl.warmups == []
    assert wl.input_length_source == "token-ids"
    assert wl.dataset == "random"
    assert wl.screened_out == 0 and wl.max_model_len is None
    assert "not screened" in wl.screened_reason
    in_lens, out_lens = set(), set()
    for spec in wl.requests:
        doc = body(spec)
        prompt = doc["prompt"]
        assert isinstance(prompt, list) and all(1000 <= t < 30000 for t in prompt)
        assert spec.prompt_len == len(prompt)
        assert 50 <= len(prompt) <= 150
        assert 5 <= spec.max_tokens <= 15 and doc["max_tokens"] == spec.max_tokens
        assert spec.prompt_text_chars == 0
        assert doc["model"] == MODEL
        assert doc["stream"] is True
        assert doc["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        assert "ignore_eos" not in doc and "messages" not in doc and "max_completion_tokens" not in doc
        in_lens.add(len(prompt))
        out_lens.add(spec.max_tokens)
    assert len(in_lens) > 5 and len(out_lens) > 3  # lengths really vary


def test_random_fixed_lengths_and_max_tokens_override() -> None:
    wl = build(BenchConfig(num_prompts=5, random_input_len=64, random_output_len=999, max_tokens=16))
    assert [s.prompt_len for s in wl.requests] == [64] * 5
    assert [s.max_tokens for s in wl.requests] == [16] * 5


def test_random_chat_uses_words() -> None:
    cfg = BenchConfig(
        endpoint="/v1/chat/completions", num_prompts=10, random_input_len=30, random_output_len=8
    )
    wl = build(cfg)
    assert wl.input_length_source == "estimate (words)"
    for spec in wl.requests:
        doc = body(spec)
        assert "prompt" not in doc
        assert doc["messages"][0]["role"] == "user" and len(doc["messages"]) == 1
        text = doc["messages"][0]["content"]
        assert len(text.split()) == spec.prompt_len == 30
        assert spec.prompt_text_chars == len(text)
        assert doc["max_tokens"] == 8 and "max_completion_tokens" not in doc
    assert any("chat template" in n for n in wl.notes)


def test_random_is_deterministic_by_seed() -> None:
    cfg = BenchConfig(num_prompts=8, random_input_len=20, random_range_ratio=0.5, seed=7)
    a, b = build(cfg), build(cfg)
    c = build(cfg.replace(seed=8))
    assert [s.body for s in a.requests] == [s.body for s in b.requests]
    assert [s.body for s in a.requests] != [s.body for s in c.requests]


def test_ignore_eos_and_extra_body_override() -> None:
    cfg = BenchConfig(
        num_prompts=3,
        random_input_len=10,
        random_output_len=50,
        ignore_eos=True,
        extra_body={"temperature": 0.0, "max_tokens": 7},
    )
    wl = build(cfg)
    for spec in wl.requests:
        doc = body(spec)
        assert doc["ignore_eos"] is True
        assert doc["temperature"] == 0.0
        assert doc["max_tokens"] == 7 and spec.max_tokens == 7  # the user's keys win


def test_extra_body_must_be_json() -> None:
    with pytest.raises(ConfigError, match="extra_body"):
        build(BenchConfig(num_prompts=1, random_input_len=4, extra_body={"x": object()}))


def test_random_screening_replaces_dropped_requests() -> None:
    cfg = BenchConfig(num_prompts=50, random_input_len=100, random_range_ratio=0.5, max_tokens=10, seed=3)
    wl = build(cfg, max_model_len=120)
    assert len(wl.requests) == 50
    assert wl.screened_out > 0
    assert all(s.prompt_len is not None and s.prompt_len + s.max_tokens <= 120 for s in wl.requests)
    assert wl.max_model_len == 120 and "120" in wl.screened_reason
    assert not any("ran short" in n for n in wl.notes)


@pytest.mark.parametrize(("extra_body", "screened_for"), [
    ({"max_tokens": None}, 1),  # lifted: the server fills what the prompt leaves
    ({"max_tokens": None, "n_predict": 20}, 20),
    ({"max_completion_tokens": 5}, 30),  # the dataset's max_tokens is still sent, and may be applied
    ({"max_completion_tokens": 50}, 50),
    ({"max_tokens": 40}, 40),
])
def test_screening_uses_the_largest_output_limit_the_body_carries(extra_body: dict[str, Any],
                                                                  screened_for: int) -> None:
    cfg = BenchConfig(num_prompts=50, random_input_len=100, random_range_ratio=0.5, max_tokens=30, seed=3,
                      extra_body=extra_body)
    wl = build(cfg, max_model_len=120)
    lengths = [s.prompt_len for s in wl.requests]
    assert all(n is not None and n + screened_for <= 120 for n in lengths)
    assert any(n is not None and n + screened_for > 120 - 10 for n in lengths)  # the limit is not stricter
    assert wl.screened_out > 0
    assert "the largest output limit sent" in wl.screened_reason


def test_config_max_model_len_overrides_server() -> None:
    cfg = BenchConfig(
        num_prompts=20, random_input_len=100, random_range_ratio=0.5, max_tokens=10, max_model_len=100
    )
    wl = build(cfg, max_model_len=100_000)
    assert wl.max_model_len == 100
    assert all(s.prompt_len is not None and s.prompt_len <= 90 for s in wl.requests)


def test_random_nothing_fits() -> None:
    with pytest.raises(ConfigError, match="max_model_len") as info:
        build(BenchConfig(num_prompts=5, random_input_len=100, random_output_len=50), max_model_len=120)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("ratio", [-0.1, 1.0, 1.5])
def test_random_bad_range_ratio(ratio: float) -> None:
    with pytest.raises(ConfigError, match="range-ratio"):
        build(BenchConfig(num_prompts=1, random_range_ratio=ratio))


def test_options_are_checked_by_their_rules() -> None:
    """build_workload is public: it refuses what check_config refuses, in the same words."""
    with pytest.raises(ConfigError, match="^--dataset-name must be one of random, sharegpt, jsonl, prefix_repetition, "
                       "generated-shared-prefix, timed_trace, mooncake, burstgpt, custom, spec_bench, random-mm, "
                       "custom_image, random-rerank, weka, got 'nope'$"):
        build(BenchConfig(dataset_name="nope"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="^--random-range-ratio must be in"):
        build(BenchConfig(random_range_ratio=1.0))
    with pytest.raises(ConfigError, match="stream_options"):
        build(BenchConfig(extra_body={"stream_options": {"include_usage": True}}))
    with pytest.raises(ConfigError, match="^--endpoint must be one of"):
        build(BenchConfig(endpoint="/v1/nope"))  # type: ignore[arg-type]


def test_sync_wrapper() -> None:
    wl = build_workload_sync(BenchConfig(num_prompts=2, random_input_len=5), MODEL, max_model_len=None)
    assert len(wl.requests) == 2


# ---------------------------------------------------------------------------------------------------
# sharegpt


def test_sharegpt_file_order(tmp_path: Path) -> None:
    doc = [
        conv("Tell me about cats, please.", "x" * 40, id="a"),
        {"id": "one-turn", "conversations": [{"from": "human", "value": "alone"}]},
        {
            "id": "gpt-first",
            "conversations": [
                {"from": "gpt", "value": "Hello! How can I help?"},
                {"from": "human", "value": "What is the capital of France?"},
                {"from": "gpt", "value": "y" * 400},
            ],
        },
        conv("hi", "ok", id="short"),
        {"id": "no-convs"},
    ]
    cfg = BenchConfig(
        dataset_name="sharegpt",
        dataset_path=write_json(tmp_path / "sg.json", doc),
        dataset_order="file",
        num_prompts=3,
    )
    wl = build(cfg)
    assert [prompt_of(s) for s in wl.requests] == [
        "Tell me about cats, please.",
        "What is the capital of France?",
        "hi",
    ]
    assert [s.max_tokens for s in wl.requests] == [10, 100, 4]  # chars/4, at least 4
    assert [s.prompt_len for s in wl.requests] == [7, 8, 1]
    assert wl.input_length_source == "estimate (chars/4)"
    assert wl.dataset.startswith("sharegpt:")
    assert any("skipped 2 entries" in n for n in wl.notes)


def _long_convs(n: int) -> list[dict[str, Any]]:
    return [
        conv(f"Question number {i}: please explain topic {i} in detail.", "answer " * (5 + i))
        for i in range(n)
    ]


def test_sharegpt_random_order_follows_vllm(tmp_path: Path) -> None:
    doc = _long_convs(30)
    doc.insert(5, conv("hi", "a fine and long enough answer"))  # prompt under 4 tokens: vLLM drops it
    doc.insert(9, {"conversations": [{"from": "human", "value": "lonely single turn here"}]})
    cfg = BenchConfig(
        dataset_name="sharegpt", dataset_path=write_json(tmp_path / "sg.json", doc), num_prompts=30, seed=5
    )
    wl = build(cfg)

    expected = [e for e in doc if len(e["conversations"]) >= 2]
    random.Random(5).shuffle(expected)
    expected_prompts = [
        e["conversations"][0]["value"] for e in expected if e["conversations"][0]["value"] != "hi"
    ]
    assert [prompt_of(s) for s in wl.requests] == expected_prompts
    assert any("filtered 1" in n for n in wl.notes)
    assert any("random.Random(5)" in n for n in wl.notes)
    assert build(cfg).requests == wl.requests  # deterministic
    assert [prompt_of(s) for s in build(cfg.replace(seed=6)).requests] != expected_prompts


def test_sharegpt_max_tokens_given(tmp_path: Path) -> None:
    doc = [conv("A question long enough to keep.", "ok"), conv("Another question that is kept.", "y" * 80)]
    cfg = BenchConfig(
        dataset_name="sharegpt",
        dataset_path=write_json(tmp_path / "sg.json", doc),
        num_prompts=2,
        max_tokens=2,
    )
    wl = build(cfg)
    # With --max-tokens, vLLM skips the short-reply check, and the user's value is kept as is.
    assert sorted(prompt_of(s) for s in wl.requests) == sorted(c["conversations"][0]["value"] for c in doc)
    assert [s.max_tokens for s in wl.requests] == [2, 2]


def test_sharegpt_screening_and_short_dataset(tmp_path: Path) -> None:
    short = [conv(f"short prompt number {i:02d}....", "z" * 40) for i in range(4)]  # 8 tokens each
    long = [conv("L" * 400, "z" * 40) for _ in range(3)]  # 100 tokens
    doc = [short[0], long[0], short[1], long[1], short[2], long[2], short[3]]
    path = write_json(tmp_path / "sg.json", doc)
    cfg = BenchConfig(
        dataset_name="sharegpt", dataset_path=path, dataset_order="file", num_prompts=3, max_tokens=10
    )
    wl = build(cfg, max_model_len=50)
    assert [prompt_of(s) for s in wl.requests] == [c["conversations"][0]["value"] for c in short[:3]]
    assert wl.screened_out == 2  # the long ones met on the way
    assert not any("ran short" in n for n in wl.notes)

    wl = build(cfg.replace(num_prompts=6, num_warmups=1), max_model_len=50)
    prompts = [c["conversations"][0]["value"] for c in short]
    assert [prompt_of(s) for s in wl.requests] == prompts + prompts[:2]
    assert [prompt_of(s) for s in wl.warmups] == [prompts[2]]
    assert wl.screened_out == 3
    assert any("ran short" in n and "4 usable" in n for n in wl.notes)
    assert any("warm-ups repeat" in n for n in wl.notes)


def test_sharegpt_nothing_fits(tmp_path: Path) -> None:
    path = write_json(tmp_path / "sg.json", [conv("L" * 400, "z" * 40)])
    cfg = BenchConfig(
        dataset_name="sharegpt", dataset_path=path, dataset_order="file", num_prompts=3, max_tokens=10
    )
    with pytest.raises(DatasetError, match="screened out"):
        build(cfg, max_model_len=50)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "not found"),
        (b'{"prompt": "a"}\n{"prompt": "b"}\n', "jsonl"),
        (b"[1, 2", "not valid JSON"),
        (b'{"conversations": []}', "not a ShareGPT file"),
        (b"[]", "empty"),
        (b'[{"id": 1, "turns": []}]', "not a ShareGPT file"),
        (b'[{"id": 1, "conversations": [{"from": "human", "value": "q"}]}]', "no usable prompt"),
        # the reason is in the message: vLLM's length filter (a prompt under 4 tokens)
        (b'[{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello there"}]}]',
         r"no usable prompt \(sharegpt: filtered 1 conversations as vllm bench serve does"),
    ],
)
def test_sharegpt_errors(tmp_path: Path, content: bytes | None, match: str) -> None:
    path = tmp_path / "sg.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DatasetError, match=match) as info:
        build(BenchConfig(dataset_name="sharegpt", dataset_path=str(path), num_prompts=1))
    assert "\n" not in str(info.value)


def test_dataset_path_required_and_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--dataset-path"):
        build(BenchConfig(dataset_name="sharegpt"))
    with pytest.raises(DatasetError, match="directory"):
        build(BenchConfig(dataset_name="jsonl", dataset_path=str(tmp_path)))


# ---------------------------------------------------------------------------------------------------
# jsonl


def test_jsonl_prompts(tmp_path: Path) -> None:
    rows: list[Any] = [
        {"prompt": "first prompt here", "max_tokens": 5},
        "",
        "   ",
        {"prompt": [11, 12, 13], "output_len": 6},
        {"prompt": "third", "max_tokens": 7, "other": "ignored"},
    ]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    cfg = BenchConfig(dataset_name="jsonl", dataset_path=path, dataset_order="file", num_prompts=3)
    wl = build(cfg)
    assert [prompt_of(s) for s in wl.requests] == ["first prompt here", [11, 12, 13], "third"]
    assert [s.max_tokens for s in wl.requests] == [5, 6, 7]
    assert [s.prompt_len for s in wl.requests] == [5, 3, 2]
    assert [s.prompt_text_chars for s in wl.requests] == [17, 0, 5]
    assert wl.input_length_source == "estimate (chars/4) + token-ids"

    wl = build(cfg.replace(max_tokens=9))
    assert [s.max_tokens for s in wl.requests] == [9, 9, 9]

    shuffled = build(cfg.replace(dataset_order="random", num_prompts=3, seed=1))
    assert sorted(map(str, (prompt_of(s) for s in shuffled.requests))) == sorted(
        map(str, (prompt_of(s) for s in wl.requests))
    )


def test_jsonl_warmups_after_measured(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": f"prompt {i}", "max_tokens": 4} for i in range(10)])
    wl = build(
        BenchConfig(
            dataset_name="jsonl", dataset_path=path, dataset_order="file", num_prompts=5, num_warmups=3
        )
    )
    assert [prompt_of(s) for s in wl.requests] == [f"prompt {i}" for i in range(5)]
    assert [prompt_of(s) for s in wl.warmups] == [f"prompt {i}" for i in range(5, 8)]
    assert not wl.notes or not any("ran short" in n for n in wl.notes)


@pytest.mark.parametrize(
    ("line3", "match"),
    [
        ("{not json", "line 3: not valid JSON"),
        ('["a list"]', "line 3: expected a JSON object"),
        ('{"text": "no prompt", "max_tokens": 3}', "line 3: needs a 'prompt'"),
        ('{"prompt": "", "max_tokens": 3}', "line 3: 'prompt' is empty"),
        ('{"prompt": [1, "x"], "max_tokens": 3}', "line 3: a list 'prompt'"),
        ('{"prompt": "ok", "max_tokens": 0}', "line 3: 'max_tokens'"),
        ('{"prompt": "ok", "max_tokens": true}', "line 3: 'max_tokens'"),
        ('{"prompt": "ok"}', "line 3: no 'max_tokens'"),
    ],
)
def test_jsonl_bad_line(tmp_path: Path, line3: str, match: str) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a", "max_tokens": 1}, "", line3])
    with pytest.raises(DatasetError, match=match) as info:
        build(BenchConfig(dataset_name="jsonl", dataset_path=path, num_prompts=1))
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


def test_jsonl_empty_and_token_ids_on_chat(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(DatasetError, match="no prompts"):
        build(BenchConfig(dataset_name="jsonl", dataset_path=str(empty)))
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": [1, 2, 3], "max_tokens": 4}])
    with pytest.raises(DatasetError, match="chat endpoint"):
        build(
            BenchConfig(
                dataset_name="jsonl", dataset_path=path, endpoint="/v1/chat/completions", num_prompts=1
            )
        )


# ---------------------------------------------------------------------------------------------------
# length sources: server /tokenize callback, fallback


def test_tokenize_callback_is_used(tmp_path: Path) -> None:
    calls: list[str] = []

    async def tokenize(text: str) -> int:
        calls.append(text)
        return 2 * len(text.split())

    path = write_jsonl(
        tmp_path / "p.jsonl",
        [{"prompt": "one two three", "max_tokens": 4}, {"prompt": [5, 6], "max_tokens": 4}],
    )
    wl = build(
        BenchConfig(dataset_name="jsonl", dataset_path=path, dataset_order="file", num_prompts=2),
        tokenize=tokenize,
    )
    assert calls == ["one two three"]  # token-id prompts need no counting
    assert [s.prompt_len for s in wl.requests] == [6, 2]
    assert wl.input_length_source == "server /tokenize + token-ids"


def test_tokenize_failure_falls_back(tmp_path: Path) -> None:
    async def tokenize(text: str) -> int:
        raise ServerError("POST http://h/tokenize answered HTTP 404")

    doc = _long_convs(5)
    path = write_json(tmp_path / "sg.json", doc)
    wl = build(BenchConfig(dataset_name="sharegpt", dataset_path=path, num_prompts=5), tokenize=tokenize)
    assert wl.input_length_source == "estimate (chars/4)"
    assert any("server /tokenize failed" in n and "404" in n for n in wl.notes)
    assert len(wl.requests) == 5


# ---------------------------------------------------------------------------------------------------
# local tokenizer (optional 'tokenizers' package)

VOCAB = ["[UNK]", "[BOS]"] + [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "dog",
    "ran",
    "far",
    "and",
    "then",
    "slept",
    "under",
    "warm",
    "sun",
]


def _word_level_tokenizer(directory: Path) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["[UNK]", "[BOS]"])
    tok.post_processor = processors.TemplateProcessing(single="[BOS] $A", special_tokens=[("[BOS]", 1)])
    directory.mkdir()
    tok.save(str(directory / "tokenizer.json"))
    return str(directory)


@needs_tokenizers
def test_local_tokenizer_random_exact_lengths(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    tok_dir = _word_level_tokenizer(tmp_path / "tok")
    tok = Tokenizer.from_file(str(Path(tok_dir) / "tokenizer.json"))
    for endpoint in ("/v1/completions", "/v1/chat/completions"):
        cfg = BenchConfig(
            endpoint=endpoint, num_prompts=10, random_input_len=40, random_range_ratio=0.5, tokenizer=tok_dir
        )
        wl = build(cfg)
        assert wl.input_length_source == f"tokenizer:{tok_dir}"
        for spec in wl.requests:
            text = prompt_of(spec)
            assert isinstance(text, str) and "[UNK]" not in text and "[BOS]" not in text
            assert spec.prompt_len == len(tok.encode(text, add_special_tokens=False).ids)
            assert 20 <= spec.prompt_len <= 60
            assert spec.prompt_text_chars == len(text)


@needs_tokenizers
def test_local_tokenizer_bpe_lengths_are_rechecked(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["the quick brown fox jumps over the lazy dog", "pack my box with five dozen liquor jugs"] * 50
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>"]))
    path = tmp_path / "bpe.json"
    tok.save(str(path))
    wl = build(BenchConfig(num_prompts=20, random_input_len=50, tokenizer=str(path)))
    exact = 0
    for spec in wl.requests:
        text = prompt_of(spec)
        assert spec.prompt_len == len(
            tok.encode(text, add_special_tokens=False).ids
        )  # always the measured length
        exact += spec.prompt_len == 50
    assert exact >= 18  # and, for nearly all, the drawn one


@needs_tokenizers
def test_local_tokenizer_counts_sharegpt_and_wins_over_server(tmp_path: Path) -> None:
    tok_dir = _word_level_tokenizer(tmp_path / "tok")
    doc = [conv("the cat sat on a mat and then slept", "the dog ran far and then slept under the warm sun")]
    path = write_json(tmp_path / "sg.json", doc)

    async def tokenize(text: str) -> int:
        raise AssertionError("the server must not be asked when a local tokenizer is given")

    wl = build(
        BenchConfig(dataset_name="sharegpt", dataset_path=path, num_prompts=1, tokenizer=tok_dir),
        tokenize=tokenize,
    )
    assert wl.requests[0].prompt_len == 10  # 9 words + [BOS], as vLLM's tokenizer(prompt) counts
    assert wl.requests[0].max_tokens == 12  # 11 words + [BOS], as vLLM counts the reply
    assert wl.input_length_source == f"tokenizer:{tok_dir}"


def test_tokenizers_package_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text("{}")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # makes `import tokenizers` raise ImportError
    with pytest.raises(ConfigError, match="pip install tokenizers"):
        build(BenchConfig(num_prompts=1, tokenizer=str(path)))


def test_tokenizer_not_found(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="never downloads"):
        build(BenchConfig(num_prompts=1, tokenizer=str(tmp_path / "missing")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="tokenizer not found"):
        build(BenchConfig(num_prompts=1, tokenizer=str(tmp_path / "empty")))


# ---------------------------------------------------------------------------------------------------
# server helpers against a small aiohttp server

API_KEY = "sk-test-SECRET-123"


def _app(*, with_tokenize: bool = True, max_model_len: int | None = 4096,
         meta: dict[str, Any] | None = None) -> web.Application:
    async def models(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if auth != f"Bearer {API_KEY}":
            # A careless server that echoes the credential back: it must not reach our messages.
            return web.json_response({"error": f"bad credential {auth}"}, status=401)
        first: dict[str, Any] = {"id": "m1", "object": "model", "root": "/models/m1"}
        if max_model_len is not None:
            first["max_model_len"] = max_model_len
        if meta is not None:
            first["meta"] = meta
        second = {"id": "m2", "object": "model", "root": "", "meta": {"n_params": 7}}  # llama.cpp's meta
        return web.json_response({"object": "list", "data": [first, second]})

    async def tokenize(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {API_KEY}":
            return web.json_response({"error": "unauthorised"}, status=401)
        doc = await request.json()
        assert doc["model"] == "m1"
        ids = list(range(len(doc["prompt"].split()) + 1))  # + BOS
        return web.json_response({"count": len(ids), "max_model_len": 4096, "tokens": ids})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    if with_tokenize:
        app.router.add_post("/tokenize", tokenize)
    return app


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    runner = web.AppRunner(app)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


def test_fetch_model_info_and_tokenize() -> None:
    async def main() -> None:
        async with serve(_app()) as url, aiohttp.ClientSession() as session:
            assert await fetch_model_info(url, session, API_KEY) == (["m1", "m2"], 4096, {"m1": "/models/m1"},
                                                                   {"m2": {"n_params": 7}})
            assert await server_tokenize(url, session, API_KEY, "m1", "one two three") == 4
            count = make_server_tokenize(url, session, API_KEY, "m1")
            assert await count("a b") == 3
        async with serve(_app(max_model_len=None)) as url, aiohttp.ClientSession() as session:
            assert await fetch_model_info(url, session, API_KEY) == (["m1", "m2"], None, {"m1": "/models/m1"},
                                                                   {"m2": {"n_params": 7}})
        # llama.cpp: no max_model_len, a slot's context in meta.n_ctx (-c 2048 -np 2: 1024)
        async with serve(_app(max_model_len=None, meta={"n_ctx": 1024, "n_ctx_train": 32768})) as url, \
                aiohttp.ClientSession() as session:
            assert (await fetch_model_info(url, session, API_KEY)).max_model_len == 1024

    asyncio.run(main())


def test_server_errors_never_show_the_key() -> None:
    async def main() -> None:
        async with serve(_app(with_tokenize=False)) as url, aiohttp.ClientSession() as session:
            with pytest.raises(ServerError, match="401") as info:
                await fetch_model_info(url, session, "sk-WRONG-key-456")
            assert "sk-WRONG-key-456" not in str(info.value) and "\n" not in str(info.value)
            assert "***" in str(info.value)  # the echo was redacted
            with pytest.raises(ServerError, match="404") as info:
                await server_tokenize(url, session, API_KEY, "m1", "hello")
            assert API_KEY not in str(info.value)
        async with aiohttp.ClientSession() as session:
            with pytest.raises(ServerError) as info:
                await fetch_model_info(f"http://127.0.0.1:{free_port()}", session, API_KEY)
            assert isinstance(info.value, ConnectionError) and API_KEY not in str(info.value)
            assert str(info.value).endswith("(Connection refused)") and "ssl:default" not in str(info.value)

    asyncio.run(main())


def test_build_workload_with_server_tokenize(tmp_path: Path) -> None:
    path = write_json(tmp_path / "sg.json", _long_convs(6))
    cfg = BenchConfig(dataset_name="sharegpt", dataset_path=path, dataset_order="file", num_prompts=6)

    async def main(app: web.Application) -> Workload:
        async with serve(app) as url, aiohttp.ClientSession() as session:
            mml = (await fetch_model_info(url, session, API_KEY)).max_model_len
            count = make_server_tokenize(url, session, API_KEY, "m1")
            return await build_workload(cfg, "m1", max_model_len=mml, tokenize=count)

    wl = asyncio.run(main(_app()))
    assert wl.input_length_source == "server /tokenize" and wl.max_model_len == 4096
    assert [s.prompt_len for s in wl.requests] == [len(prompt_of(s).split()) + 1 for s in wl.requests]
    assert not any("failed" in n for n in wl.notes)

    wl = asyncio.run(main(_app(with_tokenize=False)))  # an OpenAI-compatible server without /tokenize
    assert wl.input_length_source == "estimate (chars/4)"
    assert any("server /tokenize failed" in n for n in wl.notes)
    assert all(API_KEY not in n for n in wl.notes)


def test_server_tokenize_speaks_llama_cpp() -> None:
    """llama.cpp's /tokenize reads "content" and answers {"tokens": []} to a "prompt"."""

    async def tokenize(request: web.Request) -> web.Response:
        doc = await request.json()
        return web.json_response({"tokens": list(range(len(doc.get("content", "").split())))})

    app = web.Application()
    app.router.add_post("/tokenize", tokenize)

    async def main() -> int:
        async with serve(app) as url, aiohttp.ClientSession() as session:
            return await server_tokenize(url, session, None, "m1", "one two three")

    assert asyncio.run(main()) == 3


@pytest.mark.parametrize(("extra_body", "known"), [
    ({}, True),
    ({"max_tokens": 32}, True),
    ({"max_tokens": None}, False),  # null lifts the limit
    ({"max_completion_tokens": 64}, False),
    ({"n_predict": 10}, False),
    ({"temperature": 0.5}, True),
])
def test_output_limit_known(extra_body: dict[str, Any], known: bool) -> None:
    assert output_limit_known(extra_body) is known


def test_a_sharegpt_file_given_as_jsonl_gets_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    for text, problem in (('[\n  {"conversations": []}\n]\n', "not valid JSON .*"),  # pretty-printed
                          ('[{"conversations": []}]\n', "expected a JSON object with a 'prompt', found a list")):
        path.write_text(text)
        with pytest.raises(DatasetError, match=rf"line 1: {problem}; a JSON array \(a ShareGPT file\) needs "
                                               r"--dataset-name sharegpt$"):
            build_workload_sync(BenchConfig(dataset_name="jsonl", dataset_path=str(path), num_prompts=1), "m",
                                max_model_len=None)
    path.write_text('"just a string"\n')
    with pytest.raises(DatasetError, match=r"found a str$"):
        build_workload_sync(BenchConfig(dataset_name="jsonl", dataset_path=str(path), num_prompts=1), "m",
                            max_model_len=None)


# ---------------------------------------------------------------------------------------------------
# shared prefixes: random --random-prefix-len, prefix_repetition, generated-shared-prefix


def _common_prefix(a: list[Any] | str, b: list[Any] | str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_random_prefix_len_puts_one_fixed_prefix_before_every_prompt() -> None:
    cfg = BenchConfig(num_prompts=20, random_prefix_len=50, random_input_len=10, random_range_ratio=0.5, seed=3)
    wl = build(cfg, max_model_len=1000)
    prompts = [prompt_of(spec) for spec in wl.requests]
    prefix = prompts[0][:50]
    for spec, prompt in zip(wl.requests, prompts):
        assert prompt[:50] == prefix and all(type(t) is int for t in prompt)
        # vllm bench serve's meaning: the prefix plus the drawn input length
        assert spec.prompt_len == len(prompt) and 50 + 5 <= spec.prompt_len <= 50 + 15
        assert 64 <= body(spec)["max_tokens"] == spec.max_tokens <= 192 and spec.prompt_text_chars == 0
    assert len({tuple(p[50:]) for p in prompts}) == 20  # every suffix its own
    assert wl.input_length_source == "token-ids" and any("--random-prefix-len" in n for n in wl.notes)
    assert [prompt_of(s) for s in build(cfg, max_model_len=1000).requests] == prompts  # seeded
    # chat: words, the prefix's words first in every prompt
    chat = build(cfg.replace(endpoint="/v1/chat/completions"), max_model_len=1000)
    words = [prompt_of(spec).split() for spec in chat.requests]
    assert all(w[:50] == words[0][:50] and len(w) == spec.prompt_len for w, spec in zip(words, chat.requests))


def test_random_without_prefix_is_unchanged_by_the_shared_prefix_code() -> None:
    # --random-prefix-len 0 keeps the random dataset's own draws (seeded runs stay comparable across versions)
    plain = build(BenchConfig(num_prompts=5, random_input_len=12, seed=7))
    assert len({tuple(prompt_of(s)[:4]) for s in plain.requests}) == 5


def test_prefix_repetition_follows_vllm() -> None:
    cfg = BenchConfig(dataset_name="prefix_repetition", num_prompts=10, prefix_repetition_prefix_len=32,
                      prefix_repetition_suffix_len=8, prefix_repetition_num_prefixes=3, seed=1)
    wl = build(cfg)
    prompts = [prompt_of(spec) for spec in wl.requests]
    by_prefix: dict[tuple[int, ...], int] = {}
    for spec, prompt in zip(wl.requests, prompts):
        assert spec.prompt_len == len(prompt) == 40 and body(spec)["max_tokens"] == 128
        by_prefix[tuple(prompt[:32])] = by_prefix.get(tuple(prompt[:32]), 0) + 1
    assert sorted(by_prefix.values()) == [3, 3, 4]  # every prompt sent, the prefixes taking turns
    assert len({tuple(p[32:]) for p in prompts}) == 10
    first_prefixes = [tuple(p[:32]) for p in prompts[:3]]
    assert len(set(first_prefixes)) < 3 or [tuple(p[:32]) for p in prompts[3:6]] != first_prefixes  # shuffled
    assert wl.dataset == "prefix_repetition"
    assert build(cfg.replace(max_tokens=5)).requests[0].max_tokens == 5
    assert build(cfg.replace(prefix_repetition_output_len=7)).requests[0].max_tokens == 7


def test_generated_shared_prefix_follows_sglang() -> None:
    cfg = BenchConfig(dataset_name="generated-shared-prefix", endpoint="/v1/chat/completions", num_prompts=12,
                      gsp_num_groups=3, gsp_prompts_per_group=4, gsp_system_prompt_len=20, gsp_question_len=5)
    wl = build(cfg)
    groups: dict[str, int] = {}
    for spec in wl.requests:
        text = prompt_of(spec)
        system, sep, question = text.partition("\n\n")  # SGLang's f"{system_prompt}\n\n{question}"
        assert sep and len(system.split()) == 20 and len(question.split()) == 5
        assert spec.prompt_len == 25 and spec.prompt_text_chars == len(text) and body(spec)["max_tokens"] == 256
        groups[system] = groups.get(system, 0) + 1
    assert sorted(groups.values()) == [4, 4, 4]
    assert any("SGLang sends all 12" in n for n in wl.notes)
    # fewer prompts than groups x per group: the first of the shuffled order, no reuse
    few = build(cfg.replace(num_prompts=5))
    assert len(few.requests) == 5 and not any("ran short" in n for n in few.notes)
    # more: reused in order, and said
    many = build(cfg.replace(num_prompts=15))
    assert [s.body for s in many.requests[12:]] == [s.body for s in many.requests[:3]]
    assert any("ran short" in n for n in many.notes)
    # completions without a tokenizer: token ids, the system prompt's ids first, nothing between
    ids = build(cfg.replace(endpoint="/v1/completions"))
    firsts = {tuple(prompt_of(s)[:20]) for s in ids.requests}
    assert len(firsts) == 3 and all(len(prompt_of(s)) == 25 for s in ids.requests)


@needs_tokenizers
def test_shared_prefix_token_counts_with_a_local_tokenizer(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    tok_dir = _word_level_tokenizer(tmp_path / "tok")
    tok = Tokenizer.from_file(str(Path(tok_dir) / "tokenizer.json"))
    for cfg in (
        BenchConfig(num_prompts=6, random_prefix_len=30, random_input_len=10, tokenizer=tok_dir),
        BenchConfig(dataset_name="prefix_repetition", num_prompts=6, prefix_repetition_prefix_len=30,
                    prefix_repetition_suffix_len=10, prefix_repetition_num_prefixes=2, tokenizer=tok_dir),
        BenchConfig(dataset_name="generated-shared-prefix", num_prompts=6, gsp_num_groups=2, gsp_prompts_per_group=3,
                    gsp_system_prompt_len=30, gsp_question_len=10, tokenizer=tok_dir, endpoint="/v1/chat/completions"),
    ):
        wl = build(cfg)
        assert wl.input_length_source == f"tokenizer:{tok_dir}"
        ids = []
        for spec in wl.requests:
            text = prompt_of(spec)
            assert isinstance(text, str) and spec.prompt_text_chars == len(text)
            got = tok.encode(text, add_special_tokens=False).ids
            assert spec.prompt_len == len(got)  # the whole prompt counted as sent
            # random's input counts the BOS the server adds, as vLLM's (30 + 10 - 1); a join may merge or split
            # one token at the boundary
            drawn = 39 if cfg.dataset_name == "random" else 40
            assert drawn - 1 <= spec.prompt_len <= drawn + 1
            ids.append(got)
        shared = max(_common_prefix(a, b) for a in ids for b in ids if a is not b)
        assert shared >= 29  # the prefix's tokens are the same in prompts that share it


@pytest.mark.parametrize(("changes", "words"), [
    ({"random_prefix_len": 3000, "random_input_len": 100, "max_model_len": 2048},
     "--random-prefix-len + --random-input-len make prompts of at least 3,100 tokens, which leave no room for output "
     "in the context of 2,048 tokens (--max-model-len)"),
    ({"dataset_name": "generated-shared-prefix", "max_model_len": 2000},
     "--gsp-system-prompt-len + --gsp-question-len make prompts of at least 2,176 tokens"),
    ({"dataset_name": "prefix_repetition", "num_prompts": 5},
     "--num-prompts 5 is fewer than --prefix-repetition-num-prefixes 10"),
    ({"dataset_name": "sharegpt", "dataset_path": "x.json", "random_prefix_len": 5},
     "--random-prefix-len is for --dataset-name random, not sharegpt"),
    ({"dataset_name": "prefix_repetition", "dataset_path": "x.json"}, "--dataset-path is for --dataset-name sharegpt"),
    ({"random_prefix_len": -1}, "--random-prefix-len must be between 0 and"),
    ({"dataset_name": "generated-shared-prefix", "gsp_num_groups": 10_000, "gsp_prompts_per_group": 10_000},
     "--gsp-num-groups x --gsp-prompts-per-group must be at most 10,000,000"),
])
def test_shared_prefix_bad_options_get_one_line(changes: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as info:
        build(BenchConfig(**changes))
    assert words in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("cfg", "words"), [
    (BenchConfig(random_prefix_len=4000, random_input_len=8), "--random-prefix-len 4000"),
    (BenchConfig(dataset_name="prefix_repetition", prefix_repetition_prefix_len=4000),
     "--prefix-repetition-prefix-len"),
    (BenchConfig(dataset_name="generated-shared-prefix"), "--gsp-system-prompt-len 2048"),
])
def test_a_prefix_longer_than_the_servers_context_is_one_line(cfg: BenchConfig, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        build(cfg, max_model_len=2048)  # the context the server reports
    assert words in str(info.value) and "max_model_len 2048" in str(info.value) and "\n" not in str(info.value)


def test_extra_body_that_replaces_the_prompt_still_builds_shared_prefix_bodies() -> None:
    cfg = BenchConfig(num_prompts=2, random_prefix_len=8, random_input_len=4, extra_body={"prompt": "fixed"})
    assert [body(s)["prompt"] for s in build(cfg).requests] == ["fixed", "fixed"]
    cfg = BenchConfig(num_prompts=2, random_prefix_len=8, random_input_len=4, extra_body={"temperature": 0})
    assert all(body(s)["temperature"] == 0 and len(body(s)["prompt"]) == 12 for s in build(cfg).requests)
