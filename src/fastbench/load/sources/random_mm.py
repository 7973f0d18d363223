"""vllm bench serve's ``random-mm`` dataset: the ``random`` dataset's text, with random images per request,
sent as data URLs in the chat message's content after the text, as vLLM's ``openai-chat`` backend sends them.

Each request's images are drawn as vLLM's ``RandomMultiModalDataset`` draws them, with its flags and
defaults (``config.options(RandomMMOptions)``):

* the count, uniform over the whole numbers in ``[max(0, floor(n*(1-r))), min(sum of the limits,
  ceil(n*(1+r)))]`` (``n`` = ``--random-mm-base-items-per-request``, ``r`` =
  ``--random-mm-num-mm-items-range-ratio``): ``rng.integers(low, high + 1)``;
* each item's size, from ``--random-mm-bucket-config``'s buckets (those of probability 0 dropped, the
  rest normalised): ``rng.choice(buckets, p=probabilities)``, which draws one ``rng.random()`` against
  the cumulative probabilities; a modality at its ``--random-mm-limit-mm-per-prompt`` cap has its
  buckets dropped and the rest renormalised (with images only, the count never passes the cap).

The draws come from ``numpy.random.default_rng(--seed)``, one request after another, the count then
its items, as vLLM's loop makes them. vLLM draws every pixel from that same generator between one
request's draws and the next; fastbench's pixels are not vLLM's (``fastbench.load.images``: JPEGs saved
as vLLM saves them, each image's first two MCU rows its own pick from pools, the other rows shared by its
size, from a generator of their own), so the counts and sizes for a seed are those vLLM's rule gives
that generator alone, not those of a vLLM run with the same seed. Video buckets (more than one frame) are
refused: vLLM makes videos with OpenCV.

The bodies are built once, before the run: each size's pools and shared rows are base64-encoded once,
and each body is sent from its parts (the core's ``BodyParts``): its own text, and its images' pieces and
the shared middles as they lie (bench/bench_images.py: tens of thousands of requests a second).
``prompt_len`` counts the text only; the run's input figures take each request's prompt tokens from the
server's usage, which counts the image tokens too.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import orjson

from fastbench._core import TokenRuns
from fastbench.config import BenchConfig
from fastbench.datasetoptions import RandomMMOptions, RandomOptions
from fastbench.exceptions import ConfigError
from fastbench.load.images import IMAGE_PART_CLOSE, IMAGE_PART_OPEN, SyntheticJPEG, pillow
from fastbench.load.screening import JsonPrompt, PartsPrompt, Prompt
from fastbench.load.sources import Context, random_prompts

Bucket = tuple[int, int, int]  # (height, width, num_frames), vLLM's key

# The content of the one user message: the text part, then the image parts, in a list.
CONTENT_OPEN = b'[{"type":"text","text":'
CONTENT_CLOSE = b"]"


@dataclasses.dataclass(frozen=True)
class ItemRule:
    """What vLLM's ``get_mm_item_sampling_params`` makes of the options: the count's range, the limits
    of the modalities present, the normalised buckets."""

    low: int
    high: int
    limits: dict[str, int]
    buckets: dict[Bucket, float]


def modality(bucket: Bucket) -> str:
    return "image" if bucket[2] == 1 else "video"


def _normalised(buckets: dict[Bucket, float]) -> dict[Bucket, float]:
    kept = {k: v for k, v in buckets.items() if v > 0}
    total = sum(kept.values())
    return {k: v / total for k, v in kept.items()}


def item_rule(options: RandomMMOptions) -> ItemRule:
    """The count's range and the buckets, by vLLM's rule (the values' own checks are ``checks``')."""
    buckets = _normalised({(int(h), int(w), int(t)): float(p) for h, w, t, p in options.bucket_config})
    present = {modality(b) for b in buckets}
    limits = {k: int(v) for k, v in options.limit_mm_per_prompt.items() if k in present}
    n, r = options.base_items_per_request, options.num_mm_items_range_ratio
    high = min(sum(limits.values()), math.ceil(n * (1 + r)))
    low = max(0, math.floor(n * (1 - r)))
    if low > high:
        raise ConfigError(f"random-mm: at least {low} images per request (--random-mm-base-items-per-request {n}, "
                          f"range ratio {r:g}) but --random-mm-limit-mm-per-prompt allows {high}")
    return ItemRule(low, high, limits, buckets)


def draw_items(rule: ItemRule, requests: int, rng: np.random.Generator) -> list[list[Bucket]]:
    """Each request's items, drawn from ``rng`` as vLLM's ``get_mm_item_iterator`` draws them: the count,
    then one bucket per item (``rng.choice``'s draw: one ``random()`` against the cumulative probabilities,
    made here directly: the same numbers, without choice's checks per item)."""
    keys = list(rule.buckets)
    full_cdf = _cdf(list(rule.buckets.values()))
    out: list[list[Bucket]] = []
    for _ in range(requests):
        count = int(rng.integers(rule.low, rule.high + 1))
        items: list[Bucket] = []
        counter = dict.fromkeys((modality(k) for k in keys), 0)
        weights, cdf = dict(rule.buckets), full_cdf
        while len(items) < count:
            bucket = keys[int(cdf.searchsorted(rng.random(), side="right"))]
            kind = modality(bucket)
            if counter[kind] < rule.limits[kind]:
                counter[kind] += 1
                items.append(bucket)
                continue
            weights = {k: (0.0 if modality(k) == kind else v) for k, v in weights.items()}
            if not any(weights.values()):
                break
            weights = {k: v / sum(weights.values()) for k, v in weights.items()}
            cdf = _cdf(list(weights.values()))
        out.append(items)
    return out


def _cdf(probabilities: Sequence[float]) -> np.ndarray:
    cdf = np.asarray(probabilities, dtype=np.float64).cumsum()
    cdf /= cdf[-1]
    return cdf


def check(config: BenchConfig) -> None:
    """The count's range can work and, where images can be drawn, Pillow is there to make them (the
    options' own checks are ``checks``')."""
    if item_rule(config.options(RandomMMOptions)).high:
        pillow()


async def offer(ctx: Context) -> str:
    config = ctx.config
    rule = item_rule(config.options(RandomMMOptions))
    await random_prompts.offer(ctx)  # the text, drawn and screened as the random dataset's
    accepted = ctx.selector.accepted
    items = draw_items(rule, len(accepted), np.random.default_rng(config.seed))
    prompts = build_prompts([c.prompt for c in accepted], items, np.random.default_rng((config.seed, 1)))
    for i, prompt in enumerate(prompts):
        accepted[i] = dataclasses.replace(accepted[i], prompt=prompt)
    images = sum(len(x) for x in items)
    sizes = ", ".join(f"{h}x{w} p={p:.3g}" for (h, w, _), p in rule.buckets.items())
    per = f"{rule.low}" if rule.low == rule.high else f"{rule.low}-{rule.high}"
    ctx.notes.append(
        f"random-mm: {images} images over {len(items)} prompts ({per} per request; {sizes}, height x width), "
        "counts and sizes by vLLM's rule from numpy's default_rng(--seed); JPEGs of random pixels saved as vLLM "
        "saves them (Pillow, quality 75), each image's first two MCU rows its own pick and the rest shared by its "
        "size (vLLM draws every pixel)")
    ctx.notes.append("random-mm: prompt_len counts the text only; input figures take each request's prompt tokens "
                     "from the server's usage, which include the image tokens (where usage reports them)")
    text_options = config.options(RandomOptions)
    text = "random" if not text_options.prefix_len else f"random, prefix {text_options.prefix_len}"
    return (f"random-mm ({text}, input {text_options.input_len}, output {text_options.output_len} tokens; "
            f"{per} images per request: {sizes})")


def build_prompts(texts: Sequence[Prompt], items: Sequence[Sequence[Bucket]],
                  rng: np.random.Generator) -> list[PartsPrompt]:
    """Each request's content (its text, then its images) as runs of one buffer: the request's own bytes
    and, between them, each image's parts (``fastbench.load.images``: its own rows' pieces, picked from its
    size's pools, and the size's shared middle), every part held once in the buffer."""
    counts = Counter((b[0], b[1]) for request in items for b in request)
    sizes = {size: SyntheticJPEG(size[0], size[1], counts[size], rng) for size in sorted(counts)}
    pieces: list[bytes] = []
    length = 0
    where: dict[tuple[int, int], tuple[list[list[tuple[int, int]]], tuple[int, int]]] = {}
    for size, jpeg in sizes.items():
        spans: list[list[tuple[int, int]]] = []
        for pool in (*jpeg.pieces, [jpeg.middle]):
            spans.append([])
            for piece in pool:
                spans[-1].append((length, length + len(piece)))
                pieces.append(piece)
                length += len(piece)
        middle = spans.pop()[0]
        where[size] = (spans, middle)
    taken = dict.fromkeys(sizes, 0)
    runs: list[int] = []
    bounds: list[tuple[int, int]] = []
    chars: list[int] = []
    for text, request in zip(texts, items):
        first = len(runs) // 2
        own = [_text_json(text), b"}"]
        for bucket in request:
            size = (bucket[0], bucket[1])
            jpeg = sizes[size]
            spans, middle = where[size]
            own.append(IMAGE_PART_OPEN)
            piece = b"".join(own)
            runs += (length, length + len(piece))
            pieces.append(piece)
            length += len(piece)
            for k, pick in enumerate(jpeg.picks(taken[size])):
                runs += spans[k][pick]
            taken[size] += 1
            if jpeg.middle:
                runs += middle
            own = [IMAGE_PART_CLOSE]
        piece = b"".join(own)
        runs += (length, length + len(piece))
        pieces.append(piece)
        length += len(piece)
        bounds.append((first, len(runs) // 2))
        chars.append(len(text) if isinstance(text, str) else text.chars if isinstance(text, JsonPrompt) else 0)
    source = TokenRuns(b"".join(pieces), np.asarray(runs, dtype=np.int64))
    return [PartsPrompt(source, first, end, CONTENT_OPEN, CONTENT_CLOSE, n)
            for (first, end), n in zip(bounds, chars)]


def _text_json(prompt: Prompt) -> bytes:
    """The text prompt as its JSON string value."""
    if isinstance(prompt, JsonPrompt):
        return prompt.json
    if isinstance(prompt, str):
        return orjson.dumps(prompt)
    raise ConfigError("random-mm sends text prompts: give --endpoint /v1/chat/completions")
