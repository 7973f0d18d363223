"""The synthetic server's token model: how many tokens a prompt has, and which tokens it answers with.

Part of the synthetic server (see ``fastbench.synthetic``); imports nothing from the fastbench client.

A string prompt has one token per whitespace-separated word; a token-id prompt one per id; a chat
request, per message, the words of its content plus ``CHAT_MESSAGE_OVERHEAD`` (4). Output tokens are
single words (" tok", " the", ...), drawn once at startup from the seed.
"""

from __future__ import annotations

import random
import zlib
from typing import Any

CHAT_MESSAGE_OVERHEAD = 4  # tokens added per chat message: <start> role <sep> ... <end>
VOCAB: tuple[str, ...] = (
    "tok", "the", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "are", "with",
    "as", "be", "at", "one", "have", "this", "from", "by", "hot", "word", "but", "what", "some",
    "we", "can", "out", "other", "were",
)  # fmt: skip


def count_text_tokens(text: str) -> int:
    """Tokens of a string: its whitespace-separated words."""
    return len(text.split())


def _word_id(word: str) -> int:
    return 100 + zlib.crc32(word.encode("utf-8", "surrogatepass")) % 31900


def tokenize_text(text: str) -> list[int]:
    return [_word_id(w) for w in text.split()]


def message_text(content: Any) -> str:
    """The text of a chat message's content: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return " ".join(parts)
    raise ValueError("message content must be a string, a list of parts or null")


def tokenize_messages(messages: Any) -> list[int]:
    """Token ids of a chat: per message [1, role, 2] + content words + [3]."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    ids: list[int] = []
    for m in messages:
        if not isinstance(m, dict):
            raise TypeError("each message must be an object")
        ids += (1, _word_id(str(m.get("role", ""))), 2)
        ids += tokenize_text(message_text(m.get("content")))
        ids.append(3)
    return ids


def count_messages_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    n = 0
    for m in messages:
        if not isinstance(m, dict):
            raise TypeError("each message must be an object")
        n += CHAT_MESSAGE_OVERHEAD + count_text_tokens(message_text(m.get("content")))
    return n


def tokenize_prompt(prompt: Any) -> list[int]:
    """Token ids of a completions prompt: a string, a list of ids, or a one-element list of either."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tokenize_text(prompt)
    if isinstance(prompt, list) and all(type(t) is int for t in prompt):
        return list(prompt)
    raise ValueError("prompt must be a string or a list of token ids (batched prompts are not supported)")


def count_prompt_tokens(prompt: Any) -> int:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return count_text_tokens(prompt)
    if isinstance(prompt, list) and all(type(t) is int for t in prompt):
        return len(prompt)
    raise ValueError("prompt must be a string or a list of token ids (batched prompts are not supported)")


def output_words(seed: int, n: int) -> list[str]:
    """The first ``n`` output tokens of every response of a server started with ``seed``."""
    rng = random.Random(seed)
    return [" " + rng.choice(VOCAB) for _ in range(n)]
