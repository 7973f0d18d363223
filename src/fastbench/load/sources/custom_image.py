"""vllm bench serve's ``custom_image`` dataset (``CustomImageDataset``): a JSONL file of prompts with local
images, sent to the chat endpoint as one user message of the text, then the images, as vLLM sends them.

Each line is ``{"prompt": "How many red blocks?", "image_files": ["a.png", "b.png"]}``, or
``{"content": [{"type": "text", "text": ...}, {"type": "image", "image": "a.png"}, {"type": "image_url",
"image_url": {"url": "b.png"}}]}`` (the parts in that order); an optional ``"output_tokens"`` is taken with
``--custom-output-len -1``. Each request asks for ``--custom-output-len`` tokens (default 256); ``--max-tokens``
wins. The lines are shuffled with ``random.Random(--seed)`` unless ``--disable-shuffle``.

An image given by path (relative to the working directory, or else to the dataset file's folder) or
``file://`` URL is read once, checked to be an image by its first bytes (PNG, JPEG, GIF, WebP, BMP, TIFF)
and sent as a base64 ``data:`` URL, as vLLM's ``--custom-ensure-client-side-data`` sends it (vLLM's default
sends ``file://`` URLs, which only a server on the same machine, started with ``--allowed-local-media-path``,
can open). A file that is not an image stops the run before anything is sent, naming it and its line.
``data:image/`` and ``http(s)://`` URLs go as they are. ``prompt_len`` counts the text only; the input
figures take the prompt tokens, images included, from the server's usage.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from typing import Any

import orjson

from fastbench.config import BenchConfig
from fastbench.datasetoptions import CustomOptions
from fastbench.exceptions import DatasetError
from fastbench.load.images import file_data_url, image_type, resolve
from fastbench.load.screening import Candidate, Messages
from fastbench.load.sources import Context, json_lines, read_dataset_file

_REMOTE = ("http://", "https://", "data:image/")


@dataclasses.dataclass
class _Line:
    where: str
    parts: list[dict[str, Any]]  # the message's content; image references not yet read
    text: str
    output_tokens: int


def check(config: BenchConfig) -> None:
    """Every line parses and every image it names is a readable image (its first bytes are read)."""
    for line in _lines(config):
        for ref in _image_refs(line.parts):
            path = _local_path(ref, config)
            if path is not None:
                _sniff(path, line.where)


async def offer(ctx: Context) -> str:
    config, selector, counter = ctx.config, ctx.selector, ctx.counter
    path = os.fspath(config.dataset_path or "")
    lines = await asyncio.to_thread(_lines, config)
    if config.dataset_order == "random":
        random.Random(config.seed).shuffle(lines)
    urls: dict[str, str] = {}  # a file named by several lines is read once
    prompts = await asyncio.to_thread(_messages, lines, config, urls)
    images = sum(len(_image_refs(line.parts)) for line in lines)
    ctx.notes.append(
        f"custom_image: {len(lines)} prompts in {path} with {images} images ({len(urls)} files read once, sent as "
        "data URLs, as vLLM's --custom-ensure-client-side-data)"
        + ("" if config.dataset_order == "file" else f", shuffled (--seed {config.seed})")
        + "; prompt_len counts the text only: the input figures take the server's usage, image tokens included")
    pos = 0
    while selector.remaining > 0 and pos < len(lines):
        chunk = list(range(pos, min(len(lines), pos + max(selector.remaining, 16))))
        pos += len(chunk)
        counts = await counter.count([lines[i].text for i in chunk])
        selector.offer([Candidate(prompts[i], n, lines[i].output_tokens, counter.source)
                        for i, n in zip(chunk, counts)])
    return f"custom_image:{path}"


def _lines(config: BenchConfig) -> list[_Line]:
    path = os.fspath(config.dataset_path or "")
    raw = read_dataset_file(path, "custom_image")
    fixed = config.max_tokens if config.max_tokens is not None else config.options(CustomOptions).output_len
    lines = []
    for _, where, obj in json_lines(raw, path):
        if "content" in obj:
            parts = _content(obj["content"], where)
        elif "prompt" in obj and "image_files" in obj:
            prompt, files = obj["prompt"], obj["image_files"]
            if not isinstance(prompt, str):
                raise DatasetError(f"{where}: 'prompt' must be a string, got {str(prompt)[:60]!r}")
            if not (isinstance(files, list) and files and all(isinstance(f, str) and f for f in files)):
                raise DatasetError(f"{where}: 'image_files' must be a non-empty list of image paths")
            parts = [{"type": "text", "text": prompt}, *({"type": "image_url", "image_url": {"url": f}} for f in files)]
        else:
            raise DatasetError(f"{where}: needs 'prompt' and 'image_files', or 'content' (a list of text and image "
                               "parts)")
        out = fixed
        if fixed == -1:
            given = obj.get("output_tokens")
            if not (isinstance(given, int) and not isinstance(given, bool) and given >= 1):
                raise DatasetError(f"{where}: --custom-output-len -1 takes each line's 'output_tokens', an integer "
                                   f">= 1; got {given!r}")
            out = given
        text = "".join(p["text"] for p in parts if p["type"] == "text")
        lines.append(_Line(where, parts, text, out))
    if not lines:
        raise DatasetError(f"{path} has no prompts (only blank lines)")
    return lines


def _content(content: Any, where: str) -> list[dict[str, Any]]:
    """vLLM's interleaved content: text, ``image`` and ``image_url`` parts, each image made an image_url part."""
    if not isinstance(content, list) or not content:
        raise DatasetError(f"{where}: 'content' must be a non-empty list of text and image parts")
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
            continue
        url = part.get("image") if kind == "image" else part.get("image_url") if kind == "image_url" else None
        extra: dict[str, Any] = {}
        if isinstance(url, dict):
            extra = {k: v for k, v in url.items() if k != "url"}
            url = url.get("url")
        if not isinstance(url, str) or not url:
            raise DatasetError(f"{where}: 'content'[{i}] must be a text part {{type: text, text}} or an image part "
                               f"{{type: image, image: PATH}} or {{type: image_url, image_url: {{url}}}}; got "
                               f"{str(part)[:80]}")
        parts.append({"type": "image_url", "image_url": {"url": url, **extra}})
    return parts


def _image_refs(parts: list[dict[str, Any]]) -> list[str]:
    return [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]


def _local_path(ref: str, config: BenchConfig) -> str | None:
    """The file an image reference names; None for a URL sent as it is."""
    if ref.startswith(_REMOTE):
        return None
    if ref.startswith("file://"):
        ref = ref[len("file://"):]
    return resolve(ref, os.fspath(config.dataset_path or ""))


def _sniff(path: str, where: str) -> None:
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        raise DatasetError(f"{where}: image file not found: {path}") from None
    except IsADirectoryError:
        raise DatasetError(f"{where}: image path {path} is a directory; give the image file") from None
    except OSError as exc:
        raise DatasetError(f"{where}: cannot read image file {path}: {exc.strerror}") from None
    if image_type(head) is None:
        kind = "an empty file" if not head else f"it begins {head[:8]!r}"
        raise DatasetError(f"{where}: {path} is not an image (PNG, JPEG, GIF, WebP, BMP or TIFF): {kind}")


def _messages(lines: list[_Line], config: BenchConfig, urls: dict[str, str]) -> list[Messages]:
    """Each line's one user message, its local images read (once per file) into data URLs."""
    out = []
    for line in lines:
        parts = []
        for part in line.parts:
            if part["type"] == "image_url":
                path = _local_path(part["image_url"]["url"], config)
                if path is not None:
                    if path not in urls:
                        urls[path] = file_data_url(path, line.where)
                    part = {"type": "image_url", "image_url": {**part["image_url"], "url": urls[path]}}
            parts.append(part)
        out.append(Messages(orjson.dumps([{"role": "user", "content": parts}]), line.text))
    return out
