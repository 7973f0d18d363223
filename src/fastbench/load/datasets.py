"""Datasets -> request bodies, serialised once with orjson and never per send.

Three datasets, as in ``vllm bench serve``:

``random``
    Input and output lengths drawn uniformly from ``[len*(1-r), len*(1+r)]`` (``r`` = range ratio).
    With a local tokenizer, the prompt is random token ids decoded to text, re-encoded and adjusted
    until its length is exactly the drawn one (length source ``tokenizer:PATH``). Without one,
    ``/v1/completions`` gets the prompt as a list of token ids, which vLLM accepts and counts exactly
    (``token-ids``; ids are drawn from ``[1000, 30000)``, clear of the control tokens most vocabularies
    keep at either end), and chat gets random common English words, one word taken as one token
    (``estimate (words)``).
``sharegpt``
    ShareGPT V3 JSON: a list of ``{"id", "conversations": [{"from": "human", "value"}, {"from": "gpt",
    "value"}, ...]}``. The prompt is the first human turn; the output length is ``max_tokens`` when set,
    else the length of the first gpt reply after it (at least 4). Conversations with fewer than two
    turns are dropped first. Order ``random`` then follows vLLM: ``random.Random(seed).shuffle`` and
    vLLM's length filter (prompt or reply under 4 tokens, prompt over 1024, prompt + output over 2048;
    the reply check is skipped when ``max_tokens`` is set). Order ``file`` takes conversations in file
    order and filters nothing more (as the harness behind the seed run cards did).
``jsonl``
    One JSON object per line: ``"prompt"`` (a string, or a list of token ids) and optionally
    ``"max_tokens"`` or ``"output_len"``. Blank lines are skipped. Order ``random`` shuffles as above;
    ``file`` keeps file order.

Text prompts are counted, in order of preference, by the local tokenizer (``--tokenizer``, a
``tokenizer.json`` read with the optional ``tokenizers`` package; never downloaded), by the server's
``/tokenize`` endpoint, or estimated as characters / 4. Counts of chat prompts cover the message text
only: the server's chat template adds tokens of its own.

When ``max_model_len`` is known, requests whose ``prompt_len + max_tokens`` exceeds it are screened
out and replaced by further draws from the dataset (``max_tokens`` here is the largest output limit
the body carries, ``extra_body``'s included; with ``max_tokens`` null and no other limit, only prompts
of ``max_model_len`` tokens or more are screened out). When the dataset runs short, the usable prompts
are reused in order (and ``notes`` says so); warm-ups are taken after the measured requests, cycling
the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import math
import os
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeGuard

import numpy as np
import orjson

from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError, DatasetError

__all__ = (
    "RequestSpec",
    "Workload",
    "build_workload",
    "check_inputs",
    "build_workload_sync",
)

Prompt = str | list[int]
TokenizeFn = Callable[[str], Awaitable[int]]

# Length sources, as stated in Workload.input_length_source.
SOURCE_TOKEN_IDS = "token-ids"
SOURCE_SERVER = "server /tokenize"
SOURCE_CHARS = "estimate (chars/4)"
SOURCE_WORDS = "estimate (words)"

# vLLM's ShareGPT filter (benchmarks/datasets.py, is_valid_sequence defaults).
_VLLM_MIN_LEN = 4
_VLLM_MAX_PROMPT_LEN = 1024
_VLLM_MAX_TOTAL_LEN = 2048
_MIN_OUTPUT_LEN = 4  # least output length taken from a ShareGPT reply
# Random token-id prompts without a tokenizer: ids inside every common vocabulary (Llama 2 has 32000)
# and clear of the control tokens kept at the low end (Mistral's tekken reserves 0-999).
_TOKEN_ID_LOW, _TOKEN_ID_HIGH = 1000, 30000
_TOKENIZE_CONCURRENCY = 32  # concurrent /tokenize calls
_RANDOM_DRAW_FACTOR = 100  # random dataset: give up after this many draws per needed request

# Common English words that most BPE vocabularies hold as one token (with the leading space).
_WORD_TEXT = """
the of and to in is was for on that with as by at from his her they this had not are but be have
which one you were all she there would their we him been has when who will more no if out so said
what up its about into than them can only other new some could time these two may then do first any
my now such like our over man me even most made after also did many before must through back years
where much your way well down should because each just those people how too little state good very
make world still own see men work long get here between both life being under never day same another
know while last might us great old year off come since against go came right used take three small
house water place part number sound word light hand high food open tree city earth eye head story
saw far sea draw left late run hold river car feet care second book carry took science room friend
began idea fish mountain stop once base hear horse cut sure watch color face wood main enough plain
girl usual young ready above ever red list though feel talk bird soon body dog family direct pose
leave song measure door product black short class wind question happen complete ship area half rock
order fire south problem piece told knew pass farm top whole king size heard best hour better true
during hundred five remember step early west ground interest reach fast verb sing listen six table
travel less morning ten simple several toward war lay pattern slow center love person money serve
appear road map rain rule govern pull cold notice voice unit power town fine
"""
_WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())


@dataclasses.dataclass(frozen=True)
class RequestSpec:
    """One request, ready to send.

    :param body: the full JSON body, serialised once with orjson.
    :param prompt_len: input tokens, exact or estimated as ``Workload.input_length_source`` says;
        None when unknown.
    :param max_tokens: the output tokens asked for (``max_tokens`` in the body).
    :param prompt_text_chars: characters of prompt text (0 for a token-id prompt).
    """

    body: bytes
    prompt_len: int | None
    max_tokens: int
    prompt_text_chars: int


@dataclasses.dataclass
class Workload:
    """The requests of one run, measured and warm-up, and how they were made.

    :param requests: the measured requests, ``num_prompts`` of them.
    :param warmups: ``num_warmups`` requests sent and discarded before the measured window.
    :param dataset: dataset name (and file, when there is one).
    :param input_length_source: where ``prompt_len`` came from: ``tokenizer:PATH``, ``token-ids``,
        ``server /tokenize``, ``estimate (chars/4)`` or ``estimate (words)``; several joined by `` + ``.
    :param screened_out: prompts dropped because ``prompt_len + max_tokens > max_model_len``.
    :param screened_reason: the screening rule applied, or why none was.
    :param max_model_len: the context length screened against (None: no screening).
    :param notes: anything the reader of the result should know about how the workload was made.
    """

    requests: list[RequestSpec]
    warmups: list[RequestSpec]
    dataset: str
    input_length_source: str
    screened_out: int
    screened_reason: str
    max_model_len: int | None
    notes: list[str]


# ---------------------------------------------------------------------------------------------------
# Token counting


class _LocalTokenizer:
    """A ``tokenizer.json`` read with the optional ``tokenizers`` package."""

    def __init__(self, path: str) -> None:
        file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        if not os.path.isfile(file):
            raise ConfigError(
                f"tokenizer not found: {file} (give a tokenizer.json or a directory holding one; "
                "fastbench never downloads)"
            )
        try:
            tokenizers = importlib.import_module("tokenizers")
        except ImportError:
            raise ConfigError(
                "--tokenizer needs the optional package 'tokenizers': pip install tokenizers"
            ) from None
        try:
            self._tok: Any = tokenizers.Tokenizer.from_file(file)
        except Exception as exc:
            raise ConfigError(f"cannot read tokenizer {file}: {' '.join(str(exc).split())[:200]}") from exc
        self.source = f"tokenizer:{path}"
        added = set(self._tok.get_added_tokens_decoder())
        size = int(self._tok.get_vocab_size(with_added_tokens=True))
        self._allowed = np.array([i for i in range(size) if i not in added], dtype=np.int64)
        if self._allowed.size == 0:
            raise ConfigError(f"tokenizer {file} has no ordinary tokens to build random prompts from")

    def count(self, texts: Sequence[str], *, special: bool = True) -> list[int]:
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=special)
        return [len(e.ids) for e in encodings]

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))

    def random_text(self, rng: np.random.Generator, length: int) -> tuple[str, int]:
        """Random tokens decoded to text whose re-encoded length is ``length`` where reachable.

        Decoding and re-encoding need not round-trip (merges across token boundaries), so the ids are
        re-read from the text and trimmed or topped up a few times. The length returned is always the
        measured one (without special tokens, as vLLM's random dataset counts).
        """
        ids = self._allowed[rng.integers(0, self._allowed.size, size=length)].tolist()
        text = self.decode(ids)
        for _ in range(10):
            got: list[int] = list(self._tok.encode(text, add_special_tokens=False).ids)
            if len(got) == length:
                return text, length
            if len(got) > length:
                ids = got[:length]
            else:
                extra = self._allowed[rng.integers(0, self._allowed.size, size=length - len(got))]
                ids = got + extra.tolist()
            text = self.decode(ids)
        return text, len(self._tok.encode(text, add_special_tokens=False).ids)


class _TokenizeFailed(Exception):
    """The server's /tokenize failed: rebuild the workload with the estimate."""


class _Counter:
    """Counts tokens of text prompts: local tokenizer, server /tokenize, or characters / 4."""

    def __init__(self, local: _LocalTokenizer | None, tokenize: TokenizeFn | None) -> None:
        self.local = local
        self.tokenize = tokenize if local is None else None
        if local is not None:
            self.source = local.source
        elif self.tokenize is not None:
            self.source = SOURCE_SERVER
        else:
            self.source = SOURCE_CHARS

    async def count(self, texts: Sequence[str]) -> list[int]:
        if self.local is not None:
            return self.local.count(texts)
        if self.tokenize is None:
            return [_estimate_chars(t) for t in texts]
        fn = self.tokenize
        sem = asyncio.Semaphore(_TOKENIZE_CONCURRENCY)

        async def one(text: str) -> int:
            async with sem:
                return await fn(text)

        tasks = [asyncio.ensure_future(one(t)) for t in texts]
        try:
            counts = await asyncio.gather(*tasks)
        except Exception as exc:
            for task in tasks:  # leave no call running behind us
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise _TokenizeFailed(f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from exc
        return [int(c) for c in counts]


def _estimate_chars(text: str) -> int:
    return (len(text) + 3) // 4


# ---------------------------------------------------------------------------------------------------
# Selection: screening against max_model_len, replacements, reuse when short


@dataclasses.dataclass
class _Candidate:
    prompt: Prompt
    prompt_len: int | None
    max_tokens: int
    source: str


class _Selector:
    """Accepts candidates until ``need`` are in hand, screening against ``max_model_len``."""

    def __init__(self, need: int, max_model_len: int | None, extra_body: dict[str, Any]) -> None:
        self.need = need
        self.max_model_len = max_model_len
        self.extra_body = extra_body
        self.accepted: list[_Candidate] = []
        self.screened_out = 0
        self.sources: list[str] = []

    @property
    def remaining(self) -> int:
        return self.need - len(self.accepted)

    def offer(self, candidates: Sequence[_Candidate]) -> None:
        for c in candidates:
            if self.remaining <= 0:
                return
            mml = self.max_model_len
            max_tokens = screening_limit(c.max_tokens, self.extra_body)
            if mml is not None and c.prompt_len is not None and c.prompt_len + max_tokens > mml:
                self.screened_out += 1
                continue
            self.accepted.append(c)
            if c.source not in self.sources:
                self.sources.append(c.source)


# ---------------------------------------------------------------------------------------------------
# Datasets


def _read_dataset_file(path: str | None, name: str) -> bytes:
    if not path:
        raise DatasetError(f"--dataset-name {name} needs --dataset-path (the {name} file to read)")
    if os.path.isdir(path):
        raise DatasetError(f"dataset path {path} is a directory; give the {name} file itself")
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise DatasetError(f"dataset file not found: {path}") from None
    except OSError as exc:
        raise DatasetError(f"cannot read dataset file {path}: {exc.strerror}") from None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _length_range(length: int, ratio: float, what: str) -> tuple[int, int]:
    if length < 1:
        raise ConfigError(f"--random-{what}-len must be >= 1, got {length}")
    low = max(1, math.floor(length * (1 - ratio)))
    high = max(low, math.ceil(length * (1 + ratio)))
    return low, high


def _random_ranges(config: BenchConfig) -> tuple[tuple[int, int], tuple[int, int]]:
    """The random dataset's (input, output) length ranges; ConfigError for options that cannot work."""
    r = config.random_range_ratio
    if not 0.0 <= r < 1.0:
        raise ConfigError(f"--random-range-ratio must be in [0, 1), got {r}")
    inputs = _length_range(config.random_input_len, r, "input")
    if config.max_tokens is not None:
        return inputs, (config.max_tokens, config.max_tokens)
    return inputs, _length_range(config.random_output_len, r, "output")


def check_inputs(config: BenchConfig) -> None:
    """What can be checked of the workload without the server: the dataset file parses and has the
    expected shape, the tokenizer loads, the random lengths can work. Blocking (it reads the file);
    run before a launch, so that a bad input is found before the engine spends minutes loading.
    Token counts and the filters on them need the server and are left to :func:`build_workload`.

    :raises DatasetError: unreadable file, bad JSON, wrong shape.
    :raises ConfigError: a tokenizer that cannot be read, lengths or ratio that cannot work.
    """
    if config.tokenizer:
        _LocalTokenizer(os.fspath(config.tokenizer))
    if config.dataset_name == "random":
        _random_ranges(config)
    elif config.dataset_name == "sharegpt" and config.dataset_path:
        _load_sharegpt(os.fspath(config.dataset_path))
    elif config.dataset_name == "jsonl" and config.dataset_path:
        _load_jsonl(os.fspath(config.dataset_path), config.max_tokens)


async def _random_dataset(
    config: BenchConfig, selector: _Selector, local: _LocalTokenizer | None, chat: bool, notes: list[str]
) -> str:
    (in_low, in_high), (out_low, out_high) = _random_ranges(config)
    mml = selector.max_model_len
    if mml is not None and in_low + out_low > mml:
        raise ConfigError(
            f"no random request fits max_model_len {mml}: input >= {in_low} plus output >= {out_low} tokens; "
            "lower --random-input-len/--random-output-len/--max-tokens"
        )
    if local is not None:
        source = local.source
        notes.append(
            "random: prompt_len counts the prompt without special tokens (as vLLM); the server may add BOS"
        )
    elif chat:
        source = SOURCE_WORDS
        notes.append("random: chat prompts are random common words, one word taken as one token")
    else:
        source = SOURCE_TOKEN_IDS
        notes.append(
            f"random: prompts sent as token-id lists, ids drawn from [{_TOKEN_ID_LOW}, {_TOKEN_ID_HIGH})"
        )
    rng = np.random.default_rng(config.seed)
    drawn, most = 0, _RANDOM_DRAW_FACTOR * selector.need + 1000
    while selector.remaining > 0 and drawn < most:
        k = selector.remaining
        in_lens = rng.integers(in_low, in_high + 1, size=k)
        out_lens = rng.integers(out_low, out_high + 1, size=k)
        batch: list[_Candidate] = []
        for n_in, n_out in zip(in_lens.tolist(), out_lens.tolist()):
            prompt: Prompt
            if local is not None:
                prompt, n_in = local.random_text(rng, n_in)
            elif chat:
                prompt = " ".join(_WORDS[i] for i in rng.integers(0, len(_WORDS), size=n_in).tolist())
            else:
                prompt = rng.integers(_TOKEN_ID_LOW, _TOKEN_ID_HIGH, size=n_in).tolist()
            batch.append(_Candidate(prompt, n_in, n_out, source))
        drawn += k
        selector.offer(batch)
    return "random"


def _load_sharegpt(path: str) -> list[Any]:
    raw = _read_dataset_file(path, "sharegpt")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DatasetError(
            f"{path} is not valid JSON ({exc}); a file of one JSON object per line needs --dataset-name jsonl"
        ) from None
    if not isinstance(doc, list):
        raise DatasetError(
            f"{path} is not a ShareGPT file: expected a JSON list of {{'conversations': [...]}} objects, "
            f"found a JSON {type(doc).__name__}"
        )
    if not doc:
        raise DatasetError(f"{path} holds an empty list: no conversations to send")
    return doc


def _human_and_reply(turns: list[Any]) -> tuple[str, str] | None:
    """The first human turn and the first gpt turn after it, or None when there is no such pair."""
    prompt: str | None = None
    for turn in turns:
        if not isinstance(turn, dict):
            continue
        who, value = turn.get("from"), turn.get("value")
        if not isinstance(value, str):
            continue
        if prompt is None:
            if who in ("human", "user") and value.strip():
                prompt = value
        elif who in ("gpt", "assistant", "chatgpt", "bard"):
            return prompt, value
    return None


async def _sharegpt_dataset(
    config: BenchConfig, selector: _Selector, counter: _Counter, notes: list[str]
) -> str:
    path = os.fspath(config.dataset_path or "")
    doc = await asyncio.to_thread(_load_sharegpt, path)
    # As vLLM: keep entries with at least two turns, then shuffle with random.Random(seed).
    entries = [e for e in doc if isinstance(e, dict) and isinstance(e.get("conversations"), list)]
    if not entries:
        raise DatasetError(
            f"{path} is not a ShareGPT file: no entry has a 'conversations' list "
            "(expected [{'id': ..., 'conversations': [{'from': 'human', 'value': ...}, ...]}, ...])"
        )
    entries = [e for e in entries if len(e["conversations"]) >= 2]
    short = len(doc) - len(entries)
    if short:
        notes.append(f"sharegpt: skipped {short} entries without a conversation of at least 2 turns")
    vllm_order = config.dataset_order == "random"
    if vllm_order:
        random.Random(config.seed).shuffle(entries)
    filtered = unpaired = 0
    pos = 0
    while selector.remaining > 0 and pos < len(entries):
        chunk = entries[pos : pos + max(selector.remaining, 16)]
        pos += len(chunk)
        pairs = [p for p in (_human_and_reply(e["conversations"]) for e in chunk) if p is not None]
        unpaired += len(chunk) - len(pairs)
        prompt_lens = await counter.count([p for p, _ in pairs])
        if config.max_tokens is None:
            reply_lens = await counter.count([r for _, r in pairs])
        else:
            reply_lens = [config.max_tokens] * len(pairs)
        batch = []
        for (prompt, _), n_in, n_out in zip(pairs, prompt_lens, reply_lens):
            if vllm_order and not _vllm_valid(n_in, n_out, skip_output_check=config.max_tokens is not None):
                filtered += 1
                continue
            if config.max_tokens is None:
                n_out = max(n_out, _MIN_OUTPUT_LEN)
            batch.append(_Candidate(prompt, n_in, n_out, counter.source))
        selector.offer(batch)
    if unpaired:
        notes.append(
            f"sharegpt: skipped {unpaired} conversations without a human turn followed by a gpt reply"
        )
    if filtered:
        notes.append(
            f"sharegpt: filtered {filtered} conversations as vllm bench serve does (prompt or reply under "
            f"{_VLLM_MIN_LEN} tokens, prompt over {_VLLM_MAX_PROMPT_LEN}, prompt + output over "
            f"{_VLLM_MAX_TOTAL_LEN}; lengths from {counter.source})"
        )
    if config.max_tokens is None:
        notes.append(
            f"sharegpt: max_tokens = length of the first gpt reply ({counter.source}), at least {_MIN_OUTPUT_LEN}"
        )
    order = f"random (vLLM's: random.Random({config.seed}).shuffle)" if vllm_order else "file"
    notes.append(f"sharegpt: order {order}")
    return f"sharegpt:{path}"


def _vllm_valid(prompt_len: int, output_len: int, *, skip_output_check: bool) -> bool:
    """vLLM's is_valid_sequence with its defaults."""
    return not (
        prompt_len < _VLLM_MIN_LEN
        or (not skip_output_check and output_len < _VLLM_MIN_LEN)
        or prompt_len > _VLLM_MAX_PROMPT_LEN
        or prompt_len + output_len > _VLLM_MAX_TOTAL_LEN
    )


@dataclasses.dataclass
class _JsonlLine:
    lineno: int
    prompt: Prompt
    max_tokens: int


def _load_jsonl(path: str, max_tokens: int | None) -> list[_JsonlLine]:
    raw = _read_dataset_file(path, "jsonl")
    lines: list[_JsonlLine] = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            hint = ("; a JSON array (a ShareGPT file) needs --dataset-name sharegpt"
                    if lineno == 1 and line.lstrip().startswith(b"[") else "")
            raise DatasetError(f"{where}: not valid JSON ({exc}){hint}") from None
        if not isinstance(obj, dict):
            hint = ("; a JSON array (a ShareGPT file) needs --dataset-name sharegpt"
                    if lineno == 1 and isinstance(obj, list) else "")
            raise DatasetError(
                f"{where}: expected a JSON object with a 'prompt', found a {type(obj).__name__}{hint}"
            )
        prompt = obj.get("prompt")
        if isinstance(prompt, str):
            if not prompt:
                raise DatasetError(f"{where}: 'prompt' is empty")
        elif isinstance(prompt, list):
            if not prompt or not all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt
            ):
                raise DatasetError(
                    f"{where}: a list 'prompt' must be a non-empty list of token ids (ints >= 0)"
                )
        else:
            raise DatasetError(f"{where}: needs a 'prompt' that is a string or a list of token ids")
        out = obj.get("max_tokens", obj.get("output_len"))
        if out is not None and not _positive_int(out):
            raise DatasetError(f"{where}: 'max_tokens'/'output_len' must be an integer >= 1, got {out!r}")
        if max_tokens is not None:
            out = max_tokens
        elif out is None:
            raise DatasetError(
                f"{where}: no 'max_tokens' or 'output_len'; add one to each line or pass --max-tokens"
            )
        lines.append(_JsonlLine(lineno, prompt, out))
    if not lines:
        raise DatasetError(f"{path} has no prompts (only blank lines)")
    return lines


async def _jsonl_dataset(
    config: BenchConfig, selector: _Selector, counter: _Counter, local: _LocalTokenizer | None, chat: bool
) -> str:
    path = os.fspath(config.dataset_path or "")
    lines = await asyncio.to_thread(_load_jsonl, path, config.max_tokens)
    if config.dataset_order == "random":
        random.Random(config.seed).shuffle(lines)
    pos = 0
    while selector.remaining > 0 and pos < len(lines):
        chunk = lines[pos : pos + max(selector.remaining, 16)]
        pos += len(chunk)
        prompts: list[Prompt] = []
        for item in chunk:
            if isinstance(item.prompt, list) and chat:
                if local is None:
                    raise DatasetError(
                        f"{path} line {item.lineno}: a token-id prompt cannot go to a chat endpoint; "
                        "use --endpoint /v1/completions or give --tokenizer to decode it"
                    )
                prompts.append(local.decode(item.prompt))
            else:
                prompts.append(item.prompt)
        texts = [p for p in prompts if isinstance(p, str)]
        text_lens = iter(await counter.count(texts))
        batch = []
        for item, prompt in zip(chunk, prompts):
            if isinstance(prompt, str):
                batch.append(_Candidate(prompt, next(text_lens), item.max_tokens, counter.source))
            else:
                batch.append(_Candidate(prompt, len(prompt), item.max_tokens, SOURCE_TOKEN_IDS))
        selector.offer(batch)
    return f"jsonl:{path}"


# ---------------------------------------------------------------------------------------------------
# Request bodies


# Other names servers take for the output limit, which win over max_tokens where they are honoured
# (vLLM's chat: max_completion_tokens; llama.cpp: n_predict; TGI: max_new_tokens).
_OTHER_OUTPUT_LIMITS = ("max_completion_tokens", "n_predict", "max_new_tokens")


def output_limit_known(extra_body: dict[str, Any]) -> bool:
    """Whether each request's max_tokens is the limit the server applies: not when --extra-body
    sets max_tokens to something else than a count (null lifts it), or sets a limit of another name."""
    if "max_tokens" in extra_body and _max_tokens_override(extra_body) is None:
        return False
    return not any(key in extra_body for key in _OTHER_OUTPUT_LIMITS)


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def screening_limit(max_tokens: int, extra_body: dict[str, Any]) -> int:
    """The output tokens a request is screened for against max_model_len: the largest limit its body
    carries (the dataset's max_tokens, or --extra-body's, and any limit of another name: which one a
    server applies differs, so none may overflow the context), or 1 when --extra-body lifts
    max_tokens (null) and sets no other: the server then fills what the prompt leaves."""
    sent = extra_body.get("max_tokens") if "max_tokens" in extra_body else max_tokens
    limits = [v for v in (sent, *(extra_body.get(k) for k in _OTHER_OUTPUT_LIMITS)) if _is_count(v)]
    return max(limits, default=1)


def _max_tokens_override(extra_body: dict[str, Any]) -> int | None:
    """extra_body's ``max_tokens``, which replaces the dataset's in the body."""
    value = extra_body.get("max_tokens")
    return value if _is_count(value) else None


def _make_spec(c: _Candidate, config: BenchConfig, model: str, chat: bool) -> RequestSpec:
    body: dict[str, Any] = {"model": model}
    if chat:
        body["messages"] = [{"role": "user", "content": c.prompt}]
    else:
        body["prompt"] = c.prompt
    body["max_tokens"] = c.max_tokens
    body["stream"] = True
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if config.ignore_eos:
        body["ignore_eos"] = True
    body.update(config.extra_body)  # last: the user's keys win
    try:
        raw = orjson.dumps(body)
    except TypeError as exc:  # orjson.JSONEncodeError
        raise ConfigError(f"extra_body cannot be sent as JSON: {exc}") from None
    return RequestSpec(
        # orjson leaves its output in an over-sized buffer (4 KiB for a short body); a run keeps
        # every body, so keep an exact-size copy: 10,000 short bodies were 40 MB, now ~3 MB.
        body=bytes(memoryview(raw)),
        prompt_len=c.prompt_len,
        max_tokens=_max_tokens_override(config.extra_body) or c.max_tokens,
        prompt_text_chars=len(c.prompt) if isinstance(c.prompt, str) else 0,
    )


# ---------------------------------------------------------------------------------------------------
# Entry points


async def build_workload(
    config: BenchConfig,
    model: str,
    *,
    max_model_len: int | None,
    tokenize: TokenizeFn | None = None,
) -> Workload:
    """Build the measured and warm-up requests of a run from ``config``'s dataset options.

    :param config: the run's options (dataset_*, random_*, num_prompts, num_warmups, max_tokens,
        ignore_eos, extra_body, endpoint, seed, tokenizer, max_model_len).
    :param model: the model name to put in each body.
    :param max_model_len: the context length the server reported; ``config.max_model_len`` overrides it.
        None (and no override) means no screening.
    :param tokenize: counts a text's tokens with the server (see ``control.make_server_tokenize``); used only
        when no local tokenizer is given. If it raises, the workload falls back to characters / 4 and a
        note says why.
    :raises DatasetError: missing or unreadable file, bad JSON, wrong shape, nothing usable, unknown dataset.
    :raises ConfigError: options that cannot work (bad range ratio, nothing fits max_model_len, ...).
    """
    if config.endpoint not in ("/v1/completions", "/v1/chat/completions"):
        raise ConfigError(
            f"endpoint must be /v1/completions or /v1/chat/completions, got {config.endpoint!r}"
        )
    if config.dataset_name not in ("random", "sharegpt", "jsonl"):
        raise DatasetError(f"unknown dataset {config.dataset_name!r}; choose random, sharegpt or jsonl")
    if config.num_prompts < 0 or config.num_warmups < 0:
        raise ConfigError("num_prompts and num_warmups must be >= 0")
    if config.max_tokens is not None and config.max_tokens < 1:
        raise ConfigError(f"--max-tokens must be >= 1, got {config.max_tokens}")
    local = _LocalTokenizer(os.fspath(config.tokenizer)) if config.tokenizer else None
    mml = config.max_model_len if config.max_model_len is not None else max_model_len
    try:
        return await _build(config, model, mml, local, tokenize, [])
    except _TokenizeFailed as exc:
        note = f"server /tokenize failed ({exc}); prompt lengths fell back to {SOURCE_CHARS}"
        return await _build(config, model, mml, local, None, [note])


async def _build(
    config: BenchConfig,
    model: str,
    mml: int | None,
    local: _LocalTokenizer | None,
    tokenize: TokenizeFn | None,
    notes: list[str],
) -> Workload:
    chat = config.endpoint == "/v1/chat/completions"
    counter = _Counter(local, tokenize)
    selector = _Selector(config.num_prompts + config.num_warmups, mml, config.extra_body)
    if config.dataset_name == "random":
        dataset = await _random_dataset(config, selector, local, chat, notes)
    elif config.dataset_name == "sharegpt":
        dataset = await _sharegpt_dataset(config, selector, counter, notes)
    else:
        dataset = await _jsonl_dataset(config, selector, counter, local, chat)

    accepted = selector.accepted
    if not accepted and selector.need > 0:
        reasons = [f"{selector.screened_out} screened out by max_model_len {mml}"] if selector.screened_out else []
        # the dataset's own notes say what it skipped or filtered (e.g. vLLM's length filter)
        reasons += [n for n in notes if "skipped" in n or "filtered" in n]
        why = f" ({'; '.join(reasons)})" if reasons else ""
        raise DatasetError(f"{dataset}: no usable prompt{why}; see the dataset options")
    if selector.remaining > 0:
        notes.append(
            f"dataset ran short: {len(accepted)} usable prompts for {config.num_prompts} requests"
            f" + {config.num_warmups} warm-ups; prompts were reused in order"
        )
        if config.num_warmups:
            notes.append("warm-ups repeat measured prompts, so prefix caching may favour those requests")
    if chat:
        notes.append("chat: prompt_len counts the message text only; the chat template adds tokens")

    specs = [_make_spec(c, config, model, chat) for c in accepted]
    n = config.num_prompts
    requests = [specs[i % len(specs)] for i in range(n)] if specs else []
    warmups = [specs[(n + j) % len(specs)] for j in range(config.num_warmups)] if specs else []
    if mml is None:
        reason = "not screened: max_model_len unknown"
    elif not any(k in config.extra_body for k in ("max_tokens", *_OTHER_OUTPUT_LIMITS)):
        reason = f"prompt_len + max_tokens > max_model_len ({mml})"
    else:
        reason = (f"prompt_len + the largest output limit sent (max_tokens and --extra-body's) > max_model_len "
                  f"({mml}); with max_tokens lifted and no other limit, prompt_len >= max_model_len")
    return Workload(
        requests=requests,
        warmups=warmups,
        dataset=dataset,
        input_length_source=" + ".join(selector.sources) or counter.source,
        screened_out=selector.screened_out,
        screened_reason=reason,
        max_model_len=mml,
        notes=notes,
    )


def build_workload_sync(
    config: BenchConfig,
    model: str,
    *,
    max_model_len: int | None,
    tokenize: TokenizeFn | None = None,
) -> Workload:
    """:func:`build_workload` for callers without an event loop (runs one with ``asyncio.run``)."""
    return asyncio.run(build_workload(config, model, max_model_len=max_model_len, tokenize=tokenize))
