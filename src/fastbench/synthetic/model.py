"""The synthetic server's token model: how many tokens a prompt has, and which tokens it answers with.

Part of the synthetic server (see ``fastbench.synthetic``); imports nothing from the fastbench client.

A string prompt has one token per whitespace-separated word; a token-id prompt one per id; a chat
request, per message, the words of its content (and of an assistant's tool calls' arguments) plus
``CHAT_MESSAGE_OVERHEAD`` (4), plus, per image part
(``image_url``), one token per ``IMAGE_TILE`` x ``IMAGE_TILE`` pixels (the tiles that cover it, read from a
PNG, GIF or JPEG data URL's header) or ``IMAGE_TOKENS_UNREAD`` (256) for an image whose size it does not
read (a URL, another type). Output tokens are single words (" tok", " the", ...), drawn once at startup
from the seed.
"""

from __future__ import annotations

import base64
import binascii
import random
import struct
import zlib
from typing import Any

CHAT_MESSAGE_OVERHEAD = 4  # tokens added per chat message: <start> role <sep> ... <end>
VOCAB: tuple[str, ...] = (
    "tok", "the", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "are", "with",
    "as", "be", "at", "one", "have", "this", "from", "by", "hot", "word", "but", "what", "some",
    "we", "can", "out", "other", "were",
)  # fmt: skip


IMAGE_TILE = 32  # pixels on a side of the square one image token stands for
IMAGE_TOKENS_UNREAD = 256  # an image whose size is not read from its first bytes


def image_size(url: str) -> tuple[int, int] | None:
    """(width, height) of a PNG, GIF or JPEG ``data:`` URL, from its first bytes; None for anything else."""
    if not url.startswith("data:image/"):
        return None
    start = url.find(",") + 1
    head = _decoded(url, start, 0, 24)
    if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
        width, height = struct.unpack(">II", head[16:24])
        return width, height
    if head[:6] in (b"GIF87a", b"GIF89a"):
        width, height = struct.unpack("<HH", head[6:10])
        return width, height
    if head[:2] == b"\xff\xd8":
        return _jpeg_size(url, start)
    return None


def _decoded(url: str, start: int, first: int, end: int) -> bytes:
    """Bytes ``first`` to ``end`` of the base64 from ``start`` of ``url`` (fewer where it ends or is not
    base64), decoding only the groups that hold them."""
    group = first // 3
    try:
        data = base64.b64decode(url[start + 4 * group:start + 4 * -(-end // 3)])
    except (binascii.Error, ValueError):
        return b""
    return data[first - 3 * group:end - 3 * group]


_JPEG_FRAMES = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))


def _jpeg_size(url: str, start: int) -> tuple[int, int] | None:
    """A JPEG's (width, height) from its frame header (SOFn), walking the segments before it (T.81 B.1.1.2:
    any marker may follow 0xFF fill bytes); None where there is none before the scan."""
    pos = 2
    for _ in range(256):  # segments before the frame: APPn, COM, DQT, DHT, DRI
        head = _decoded(url, start, pos, pos + 9)
        fill = len(head) - len(head.lstrip(b"\xff"))
        if fill == 0 or fill == len(head):
            return None
        if fill > 1:
            pos += fill - 1
            continue
        marker = head[1]
        if marker in _JPEG_FRAMES and len(head) == 9:
            height, width = struct.unpack(">HH", head[5:9])
            return width, height
        if marker == 0xDA or len(head) < 4:  # the scan begins: no frame header came first
            return None
        pos += 2 + int.from_bytes(head[2:4], "big")
    return None


def image_tokens(part: dict[str, Any]) -> int:
    """Tokens of one ``image_url`` part: the tiles covering it, or IMAGE_TOKENS_UNREAD."""
    size = image_size(_url(part))
    if size is None:
        return IMAGE_TOKENS_UNREAD
    return -(-size[0] // IMAGE_TILE) * -(-size[1] // IMAGE_TILE)


def _url(part: dict[str, Any]) -> str:
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, dict) else ref
    return url if isinstance(url, str) else ""


def _image_parts(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return []
    return [p for p in content if isinstance(p, dict) and p.get("type") == "image_url"]


def count_images(messages: Any) -> int:
    """The image parts of a chat's messages."""
    if not isinstance(messages, list):
        return 0
    return sum(len(_image_parts(m.get("content"))) for m in messages if isinstance(m, dict))


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


def _tool_call_text(message: dict[str, Any]) -> str:
    """The words of an assistant message's tool calls: each call's arguments as they are written (a template
    renders them; their whitespace splits them as any text's)."""
    calls = message.get("tool_calls")
    if not calls:
        return ""
    if not isinstance(calls, list):
        raise ValueError("tool_calls must be a list")
    words = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if not isinstance(arguments, str):
            raise ValueError("each tool call needs function.arguments, a string")
        words.append(arguments)
    return " ".join(words)


def tokenize_messages(messages: Any) -> list[int]:
    """Token ids of a chat: per message [1, role, 2] + content words (and tool calls' arguments) + [3]."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    ids: list[int] = []
    for m in messages:
        if not isinstance(m, dict):
            raise TypeError("each message must be an object")
        ids += (1, _word_id(str(m.get("role", ""))), 2)
        ids += tokenize_text(message_text(m.get("content")))
        ids += tokenize_text(_tool_call_text(m))
        for part in _image_parts(m.get("content")):  # one id per image, from its bytes: images differ as ids do
            ids += [100 + zlib.crc32(_url(part).encode()) % 31900] * image_tokens(part)
        ids.append(3)
    return ids


def count_messages_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    n = 0
    for m in messages:
        if not isinstance(m, dict):
            raise TypeError("each message must be an object")
        content = m.get("content")
        n += CHAT_MESSAGE_OVERHEAD + count_text_tokens(message_text(content)) + count_text_tokens(_tool_call_text(m))
        n += sum(image_tokens(part) for part in _image_parts(content))
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
