"""The random datasets' prompt lengths and draws: the input length counts the tokenizer's special tokens as
vllm bench serve's random dataset counts them (its own source, where scripts/fetch_vllm_parsers.py kept it),
and one seed's prompts of other lengths, or of another dataset, share no prefix."""

from __future__ import annotations

import ast
import asyncio
import logging
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from fastbench.config import BenchConfig
from fastbench.load.datasets import Workload, build_workload
from fastbench.load.tokens import LocalTokenizer

tokenizers = pytest.importorskip("tokenizers", reason="the optional 'tokenizers' package is not installed")

VLLM_PARSERS = Path(os.environ.get("FASTBENCH_VLLM_PARSERS") or Path.home() / ".cache" / "fastbench" / "vllm-parsers")
WORDS = ["[UNK]", "[BOS]", *(f"w{i}" for i in range(200))]


def _tokenizer(directory: Path, bos: bool) -> str:
    """A word-level tokenizer (one word, one token), with or without a BOS added to each prompt."""
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.add_special_tokens(["[UNK]", "[BOS]"])
    if bos:
        tok.post_processor = tokenizers.processors.TemplateProcessing(single="[BOS] $A",
                                                                       special_tokens=[("[BOS]", 1)])
    directory.mkdir()
    tok.save(str(directory / "tokenizer.json"))
    return str(directory)


def build(config: BenchConfig) -> Workload:
    return asyncio.run(build_workload(config, "m", max_model_len=None))


def prompts(work: Workload) -> list[Any]:
    out = []
    for spec in work.requests:
        doc = orjson.loads(bytes(spec.body))
        out.append(doc["messages"][0]["content"] if "messages" in doc else doc["prompt"])
    return out


@pytest.mark.parametrize("bos", [True, False])
@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/chat/completions"])
def test_random_text_leaves_room_for_the_tokenizers_bos(tmp_path: Path, bos: bool, endpoint: str) -> None:
    """--random-input-len 40 with a BOS-adding tokenizer: every text is 39 tokens, so the server, which adds
    the BOS, counts 40 (vLLM 0.32 sends 4,096 tokens for 32 x 128; fastbench sent 4,128 before); without a
    BOS, 40. The note says so."""
    tok_dir = _tokenizer(tmp_path / "tok", bos)
    tok = tokenizers.Tokenizer.from_file(str(Path(tok_dir) / "tokenizer.json"))
    work = build(BenchConfig(endpoint=endpoint, num_prompts=12, random_input_len=40, tokenizer=tok_dir))
    texts = prompts(work)
    assert [len(tok.encode(t, add_special_tokens=False).ids) for t in texts] == [40 - bos] * 12
    assert [len(tok.encode(t).ids) for t in texts] == [40] * 12  # as the server counts them
    assert [spec.prompt_len for spec in work.requests] == [40 - bos] * 12  # the text, as vLLM's prompt_len
    note = next(n for n in work.notes if n.startswith("random:"))
    assert ("drawn 1 token(s) shorter than --random-input-len" if bos else "adds no special tokens") in note, note


def _vllm_sampling(root: Path) -> Any:
    """vLLM's ``get_sampling_params`` from its release's source (without importing vLLM, which needs torch):
    the function and what it calls, compiled alone; its log line gives the ranges it draws from."""
    path = root / "vllm" / "benchmarks" / "datasets" / "utils.py"
    tree = ast.parse(path.read_text())
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef)
              and n.name in ("_resolve_range_ratios", "get_sampling_params")]
    assert len(wanted) == 2, f"{path}: vLLM's sampling functions moved"
    for fn in wanted:  # the annotations name vLLM's types
        fn.returns = None
        for arg in fn.args.args:
            arg.annotation = None
    logged: list[tuple[Any, ...]] = []

    class Log:
        def info(self, message: str, *args: Any) -> None:
            if message.startswith("Sampling input_len"):
                logged.append(args)

    space: dict[str, Any] = {"math": math, "np": np, "logger": Log(), "logging": logging,
                             "RangeRatio": float}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec"), space)  # noqa: S102

    def ranges(input_len: int, ratio: float, special: int) -> tuple[int, int]:
        tokenizer = type("Tok", (), {"num_special_tokens_to_add": lambda self: special, "vocab_size": 1000})()
        space["get_sampling_params"](np.random.default_rng(0), 4, ratio, input_len, 8, tokenizer)
        low, high = logged.pop()[:2]
        return int(low), int(high)

    return ranges


def _releases() -> list[Path]:
    found = sorted(VLLM_PARSERS.glob("*/vllm/benchmarks/datasets/utils.py")) if VLLM_PARSERS.is_dir() else []
    return [p.parents[3] for p in found]


@pytest.mark.parametrize(("input_len", "ratio"), [(40, 0.0), (40, 0.5), (9, 0.3), (64, 0.25)])
def test_random_lengths_are_vllms_for_the_same_flags(tmp_path: Path, input_len: int, ratio: float) -> None:
    """The lengths drawn are within the range each vLLM release (0.32 on, as fetched) draws from for the same
    flags, and reach both its ends; skipped where no release's source was fetched."""
    releases = _releases()
    if not releases:
        pytest.skip(f"no vLLM release source in {VLLM_PARSERS} (python scripts/fetch_vllm_parsers.py)")
    tok_dir = _tokenizer(tmp_path / "tok", bos=True)
    work = build(BenchConfig(num_prompts=300, random_input_len=input_len, random_range_ratio=ratio,
                             tokenizer=tok_dir))
    lens = [spec.prompt_len for spec in work.requests]
    for root in releases:
        low, high = _vllm_sampling(root)(input_len, ratio, 1)
        assert (min(lens), max(lens)) == (low, high), (root.name, low, high)


def _common_prefix(a: list[Any], b: list[Any]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _longest_shared(first: list[list[Any]], second: list[list[Any]]) -> int:
    return max(_common_prefix(a, b) for a in first for b in second)


def test_one_seeds_prompts_of_other_lengths_share_no_prefix() -> None:
    """Seed 0 at 128 and at 512 tokens: before, each 512-token prompt began with a 128-token one (a cache served
    16.6 % of the second run); now no two share more than a chance token. The same flags draw the same prompts,
    and another output length the same prompts too (only the input's shape picks them)."""
    short = prompts(build(BenchConfig(num_prompts=8, random_input_len=128)))
    long = prompts(build(BenchConfig(num_prompts=8, random_input_len=512)))
    assert _longest_shared(short, long) <= 1
    ratio = prompts(build(BenchConfig(num_prompts=8, random_input_len=128, random_range_ratio=0.5)))
    assert _longest_shared(short, ratio) <= 1
    assert prompts(build(BenchConfig(num_prompts=8, random_input_len=128))) == short
    assert prompts(build(BenchConfig(num_prompts=8, random_input_len=128, random_output_len=7))) == short
    assert _longest_shared(short, prompts(build(BenchConfig(num_prompts=8, random_input_len=128, seed=1)))) <= 1


def test_one_seeds_datasets_share_no_prefix() -> None:
    """Seed 0's random prompts, a random prefix, prefix_repetition's prefixes and generated-shared-prefix's
    system prompts: none begins with another's tokens, nor do two prefix lengths of one dataset."""
    def words(config: BenchConfig) -> list[list[str]]:
        return [p.split() for p in prompts(build(config.replace(endpoint="/v1/chat/completions")))]

    drawn = {
        "random": words(BenchConfig(num_prompts=4, random_input_len=64)),
        "random, prefix": words(BenchConfig(num_prompts=4, random_input_len=64, random_prefix_len=32)),
        "prefix_repetition": words(BenchConfig(dataset_name="prefix_repetition", num_prompts=4,
                                               prefix_repetition_prefix_len=64, prefix_repetition_suffix_len=8,
                                               prefix_repetition_num_prefixes=2)),
        "prefix_repetition, longer": words(BenchConfig(dataset_name="prefix_repetition", num_prompts=4,
                                                       prefix_repetition_prefix_len=128,
                                                       prefix_repetition_suffix_len=8,
                                                       prefix_repetition_num_prefixes=2)),
        "generated-shared-prefix": words(BenchConfig(dataset_name="generated-shared-prefix", num_prompts=4,
                                                     gsp_num_groups=2, gsp_prompts_per_group=2,
                                                     gsp_system_prompt_len=64, gsp_question_len=8)),
    }
    names = list(drawn)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            # words come from a list of 256: two chance words in a row are rare, four never seen
            assert _longest_shared(drawn[a], drawn[b]) < 4, (a, b)


@pytest.mark.parametrize("reranker", [True, False])
def test_rerank_texts_leave_room_for_the_bos_as_vllms(tmp_path: Path, reranker: bool) -> None:
    """random-rerank with a BOS-adding tokenizer, input 40: vLLM draws the query around 40 // 2 - 1 less the BOS
    (18) and each document around 40 - 18 - 1 less it (20); without a reranker, the documents around 40 less it."""
    from fastbench.load.sources.random_rerank import draw

    tok_dir = _tokenizer(tmp_path / "tok", bos=True)
    local = LocalTokenizer(tok_dir)
    tok = tokenizers.Tokenizer.from_file(str(Path(tok_dir) / "tokenizer.json"))
    config = BenchConfig(num_prompts=6, random_input_len=40, random_batch_size=2, no_reranker=not reranker,
                         endpoint="/rerank" if reranker else "/score")
    requests, source = draw(config, local)
    lengths = [[len(tok.encode(text, add_special_tokens=False).ids) for text in inputs] for inputs, _ in requests]
    query, docs = (18, 20) if reranker else (39, 39)
    assert source == local.source and all(lens[0] == query and set(lens[1:]) == {docs} for lens in lengths), lengths
