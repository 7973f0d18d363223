"""The flags of inputs beyond text and of LoRA traffic, kept beside cli/command.py's parser with vllm bench
serve's names and meanings: the ``random-mm`` dataset's ``--random-mm-*``, ``--lora-modules`` and
``--lora-assignment``; and the backends fastbench refuses with their own reason."""

from __future__ import annotations

import argparse
import ast
from typing import Any

from fastbench.cli.argtypes import json_object, whole_number
from fastbench.datasetoptions import RandomMMOptions
from fastbench.exceptions import FastbenchError

# vllm bench serve's backends that send no text prompt, each with the reason fastbench refuses it.
REFUSED_BACKENDS = {
    "openai-audio": "fastbench sends no audio: vLLM's openai-audio posts audio files as multipart forms to "
                    "/v1/audio/transcriptions (its ASR datasets), which fastbench's client does not build; it sends "
                    "text and images (--dataset-name random-mm, custom_image) to /v1/chat/completions",
}

_DEFAULTS = RandomMMOptions()


def buckets(text: str) -> tuple[tuple[Any, ...], ...]:
    """vLLM's ``{(HEIGHT, WIDTH, FRAMES): PROBABILITY, ...}`` (a Python literal) as (h, w, frames, p) tuples;
    the values are checked with the other options."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, dict):
        raise FastbenchError("--random-mm-bucket-config takes {(HEIGHT, WIDTH, FRAMES): PROBABILITY, ...}, e.g. "
                             f"'{{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}}'; got {text!r}")
    out = []
    for key, p in value.items():
        if isinstance(key, str):
            try:
                key = ast.literal_eval(key)
            except (ValueError, SyntaxError):
                pass
        if not (isinstance(key, tuple) and len(key) == 3):
            raise FastbenchError(f"--random-mm-bucket-config: bucket {key!r} is not (HEIGHT, WIDTH, FRAMES)")
        out.append((*key, p))
    return tuple(out)


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("random-mm dataset", "vllm bench serve's random-mm: the random dataset's text with random "
                             "images per request (JPEGs, as vLLM makes them: needs pip install "
                             "'fastbench-llm[images]'), sent as data URLs in the chat message (--endpoint "
                             "/v1/chat/completions); counts and sizes drawn by vLLM's rule")
    g.add_argument("--random-mm-base-items-per-request", type=whole_number,
                   default=_DEFAULTS.base_items_per_request, help="images per request, before the range ratio")
    g.add_argument("--random-mm-num-mm-items-range-ratio", type=float, default=_DEFAULTS.num_mm_items_range_ratio,
                   help="each request's count uniform in the whole numbers of [floor(n*(1-r)), ceil(n*(1+r))], the "
                   "top clamped to the limits' sum (r in [0, 1])")
    g.add_argument("--random-mm-limit-mm-per-prompt", type=json_object, default=None, metavar="JSON",
                   help="most items per request by modality, e.g. '{\"image\": 3, \"video\": 0}' (default "
                   "'{\"image\": 255, \"video\": 1}')")
    g.add_argument("--random-mm-bucket-config", default=None, metavar="DICT",
                   help="sizes drawn, {(HEIGHT, WIDTH, FRAMES): PROBABILITY, ...} (normalised; default "
                   "{(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}); images only: FRAMES 1")
    g = p.add_argument_group("LoRA adapters", "each measured request's model one of these adapter names, chosen as "
                             "vllm bench serve chooses it; the result gives each adapter's figures beside the whole")
    g.add_argument("--lora-modules", nargs="+", default=None, metavar="NAME",
                   help="adapter names the server serves (a NAME=PATH keeps NAME)")
    g.add_argument("--lora-assignment", default="random", choices=("random", "round-robin"),
                   help="random: random.choice per request, seeded by --seed (as vllm bench serve); round-robin: "
                   "request i gets name i mod N")


def random_mm_given(ns: argparse.Namespace) -> dict[str, Any]:
    """The random-mm options whose flags parse to another form than the field's (None: not given)."""
    return {
        "random_mm_limit_mm_per_prompt": (dict(_DEFAULTS.limit_mm_per_prompt) if ns.random_mm_limit_mm_per_prompt
                                          is None else ns.random_mm_limit_mm_per_prompt),
        "random_mm_bucket_config": (_DEFAULTS.bucket_config if ns.random_mm_bucket_config is None
                                    else buckets(ns.random_mm_bucket_config)),
    }


def config_fields(ns: argparse.Namespace) -> dict[str, Any]:
    """The BenchConfig fields of the LoRA flags."""
    modules = tuple(name.partition("=")[0] for name in ns.lora_modules or ())
    return {"lora_modules": modules, "lora_assignment": ns.lora_assignment}
