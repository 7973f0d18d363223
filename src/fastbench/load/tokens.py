"""Token counts of prompts: a local tokenizer, the server's ``/tokenize``, or an estimate.

Text prompts are counted, in order of preference, by the local tokenizer (``--tokenizer``, a
``tokenizer.json`` read with the optional ``tokenizers`` package; never downloaded), by the server's
``/tokenize`` endpoint, or estimated as characters / 4. Each count's source is named by one of the
``SOURCE_*`` strings (or ``tokenizer:PATH``), as ``Workload.input_length_source`` states it.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from fastbench.exceptions import ConfigError

# Length sources, as stated in Workload.input_length_source.
SOURCE_TOKEN_IDS = "token-ids"
SOURCE_SERVER = "server /tokenize"
SOURCE_CHARS = "estimate (chars/4)"
SOURCE_WORDS = "estimate (words)"

_TOKENIZE_CONCURRENCY = 32  # concurrent /tokenize calls

# A server's /tokenize as the load reads it: a prompt's token count (server/control.py's tokenizer()).
TokenizeFn = Callable[[str], Awaitable[int]]


class LocalTokenizer:
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
                "--tokenizer needs the optional package 'tokenizers': pip install 'fastbench-llm[tokenizer]' "
                "(or pip install tokenizers)"
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
        # what the tokenizer adds to one prompt (a BOS): vLLM's random dataset draws its lengths without them
        self.special_tokens = int(self._tok.num_special_tokens_to_add(False))

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


class TokenizeFailed(Exception):
    """The server's /tokenize failed: rebuild the workload with the estimate."""


class TokenCounter:
    """Counts tokens of text prompts: local tokenizer, server /tokenize, or characters / 4."""

    def __init__(self, local: LocalTokenizer | None, tokenize: TokenizeFn | None) -> None:
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
            raise TokenizeFailed(f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from exc
        return [int(c) for c in counts]


def draw_generator(seed: int, *shape: object) -> np.random.Generator:
    """The generator a dataset draws its prompts from: ``seed`` with ``shape`` (the dataset's name and the
    options that shape its prompts: lengths, counts), hashed. Without the shape, one seed's prompts of
    two lengths would begin alike (numpy draws the same tokens from the same state, whatever the count),
    and a cache would serve the longer ones the shorter ones' tokens; with it, only the same seed and the
    same shape draw the same prompts."""
    digest = hashlib.sha256("\x1f".join(str(part) for part in shape).encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "big")])


def _estimate_chars(text: str) -> int:
    return (len(text) + 3) // 4
