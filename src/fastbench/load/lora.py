"""LoRA traffic (``--lora-modules``): each measured request names one of the adapters as its model, chosen as
``vllm bench serve`` chooses it, so that a server's mix of adapters is measured and each adapter's figures
stand beside the whole (``fastbench.results.adapters``).

vLLM's rule (``benchmarks/serve.py``): ``--lora-assignment random`` (the default) draws
``random.choice(names)`` once per measured request, in order, from Python's ``random`` seeded with
``--seed`` at the start; ``round-robin`` gives request ``i`` the name ``i % len(names)``. The request's
``model`` is the name (vLLM sends it as both the model id and name). A name given twice is drawn twice
as often, as in vLLM. Warm-ups keep the run's model, as vLLM's warm-up does.

fastbench draws from ``random.Random(--seed)`` of its own: the same choices as vLLM wherever its dataset
does not draw from Python's ``random`` first (random, random-mm and the other numpy-drawn datasets); the
shuffling datasets (sharegpt, custom) re-seed and consume it in vLLM before the choices are made.
The body is serialised once with the run's model; each request's copy has the adapter's name spliced in
where ``"model"`` leads it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import orjson

from fastbench._core import BodyParts
from fastbench.config import BenchConfig

__all__ = ("adapter_names", "assign", "draw")


def adapter_names(config: BenchConfig) -> list[str]:
    """The distinct adapter names, in the order --lora-modules first gives them."""
    return list(dict.fromkeys(config.lora_modules))


def draw(names: Sequence[str], requests: int, seed: int, assignment: str) -> list[str]:
    """Each measured request's adapter, by vLLM's rule (see the module's docstring)."""
    if assignment == "round-robin":
        return [names[i % len(names)] for i in range(requests)]
    rng = random.Random(seed)
    return [rng.choice(names) for _ in range(requests)]


def assign(bodies: Sequence[bytes | BodyParts], config: BenchConfig,
           model: str) -> tuple[list[bytes | BodyParts], list[int]]:
    """The measured requests' bodies with their adapters as their models, and each one's adapter as an
    index into :func:`adapter_names`."""
    names = list(config.lora_modules)
    chosen = draw(names, len(bodies), config.seed, config.lora_assignment)
    index = {name: i for i, name in enumerate(adapter_names(config))}
    lead = b'{"model":' + orjson.dumps(model)
    heads = {name: b'{"model":' + orjson.dumps(name) for name in index}
    out = [_with_model(body, lead, heads[name]) for body, name in zip(bodies, chosen)]
    return out, [index[name] for name in chosen]


def _with_model(body: bytes | BodyParts, lead: bytes, head: bytes) -> bytes | BodyParts:
    if isinstance(body, BodyParts):
        if not body.head.startswith(lead):
            raise ValueError("a request body that does not begin with its model")
        return BodyParts(head + body.head[len(lead):], body.source, body.first, body.end, body.tail)
    if not body.startswith(lead):
        raise ValueError("a request body that does not begin with its model")
    return head + body[len(lead):]
