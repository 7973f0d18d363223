"""What the command line asks of the wings without running anything, so that it reaches them only
through the API: the streamed APIs and vllm's backend names for them, whether a base URL can be
reached as given, the synthetic server's ``--tokens-per-chunk`` rule, whether a config's prompts vary
with its seed, and a launch that can serve a prefix-cache reset.

Each is the wing's own rule, named once here; the command line words its errors and prints.
"""

from __future__ import annotations

from fastbench.config import BenchConfig
from fastbench.load import protocols
from fastbench.load.datasets import prompt_seed
from fastbench.load.plan import Target
from fastbench.server.engines import with_prefix_cache_reset
from fastbench.synthetic.cli import tokens_per_chunk_range

__all__ = ("STREAMED_BACKENDS", "STREAMED_ENDPOINTS", "check_base_url", "check_tokens_per_chunk",
           "prompts_vary", "with_prefix_cache_reset")

STREAMED_ENDPOINTS: tuple[str, ...] = tuple(protocols.PROTOCOLS)  # the streamed APIs, by endpoint path
STREAMED_BACKENDS: dict[str, str] = protocols.BACKENDS  # vllm bench serve's backend name -> its endpoint


def check_base_url(base_url: str, endpoint: str) -> None:
    """Raise ConfigError (one line) unless ``base_url`` and ``endpoint`` make a target a run can reach."""
    Target.parse(base_url, endpoint)


def check_tokens_per_chunk(text: str) -> str:
    """``text`` unless the synthetic server would refuse it as ``--tokens-per-chunk`` (N or A-B)."""
    tokens_per_chunk_range(text)
    return text


def prompts_vary(config: BenchConfig) -> bool:
    """Whether another seed sends other prompts (False for a file read in order)."""
    return bool(prompt_seed(config)["varies_prompts"])

