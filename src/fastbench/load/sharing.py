"""What a run's prompts share with one another: per measured request, the prompt tokens a prefix cache could
serve from the requests sent before it in the same run. Summed over the run (``results.cache``), this is the
workload's own sharing, against which the server's prefix-cache hit rate is judged (``expected_prefix_share``).

A dataset that makes its prompts says what they share, as ``Candidate.shares``: the prompt's leading blocks,
each named so that equal names mean equal tokens with everything before them equal too. A shared prefix is one
block of its length (``random`` with ``--random-prefix-len``, ``prefix_repetition``, ``generated-shared-prefix``);
a trace's hash ids are its blocks (``timed_trace``, ``mooncake``; ``weka``'s agent trees call
``shared_by_ids`` with theirs). Walking the requests in the order the run sends
them (warm-ups first, then the measured requests by index), a prompt's shareable tokens are its leading blocks
already sent (a block counts only when every block before it did, as a prefix cache matches), or the whole prompt
when the same prompt went before (a dataset that ran short reuses its prompts). ``random`` and ``burstgpt``
prompts share nothing of their own (a chat template's tokens are the server's, counted apart). Prompts read from
a file (``sharegpt``, ``jsonl``, ``custom``, ``spec_bench``) share what nothing here knows: None.

Where this is simpler than a server: no eviction (a cache that holds less shares less), no block rounding (vLLM
caches full blocks of 16 tokens), and requests in flight together count as sent one after the other.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple, Protocol

import numpy as np

__all__ = ("KNOWN_DATASETS", "SharedBlocks", "Sharing", "shared_by_ids", "shared_prompt_tokens")

# The datasets whose prompts are made here, so that what they share is known (see the docstring).
KNOWN_DATASETS = frozenset({"random", "burstgpt", "prefix_repetition", "generated-shared-prefix", "timed_trace",
                            "mooncake", "weka"})


class SharedBlocks(NamedTuple):
    """A prompt's leading blocks that other prompts may share: their names in order (a trace's hash ids, as
    an int64 array, or any hashable values) and the tokens of each (the prompt's length caps the last)."""

    keys: Sequence[Hashable] | np.ndarray
    block_tokens: int


class Sharing(Protocol):
    """What is read here of a prompt (a ``screening.Candidate``, which names ``SharedBlocks`` in its turn)."""

    @property
    def prompt_len(self) -> int | None: ...

    @property
    def shares(self) -> SharedBlocks | None: ...


def shared_prompt_tokens(dataset: str, candidates: Sequence[Sharing], sent: Sequence[int],
                         measured: int) -> list[int] | None:
    """Per measured request, its shareable prompt tokens (see the docstring); None for a dataset whose
    sharing is unknown.

    :param candidates: the run's distinct prompts.
    :param sent: indexes into ``candidates`` in the order the run sends them: the warm-ups, then the
        ``measured`` requests (the last ``measured`` entries).
    """
    if dataset not in KNOWN_DATASETS:
        return None
    chains = [c for c in (candidates[i].shares for i in sent) if c is not None and isinstance(c.keys, np.ndarray)]
    if chains and len(chains) == len(sent):  # a trace's hash ids
        by_ids = _id_chains_shared(chains, [candidates[i].prompt_len or 0 for i in sent])
        return by_ids[len(by_ids) - measured:] if measured else []
    seen_blocks: set[Hashable] = set()
    seen_prompts: set[int] = set()
    shared: list[int] = []
    for index in sent:
        candidate = candidates[index]
        tokens = candidate.prompt_len or 0
        if index in seen_prompts:
            shared.append(tokens)
            continue
        seen_prompts.add(index)
        blocks = candidate.shares
        if blocks is None:
            shared.append(0)
            continue
        keys = blocks.keys.tolist() if isinstance(blocks.keys, np.ndarray) else blocks.keys
        matched = 0
        for key in keys:
            if key not in seen_blocks:
                break
            matched += 1
        seen_blocks.update(keys)
        shared.append(min(tokens, matched * blocks.block_tokens))
    return shared[len(shared) - measured:] if measured else []


def _id_chains_shared(chains: Sequence[SharedBlocks], tokens: Sequence[int]) -> list[int]:
    """What the loop above finds, for prompts whose blocks are int64 ids (a trace's hash ids: a trace never
    reuses a prompt), in numpy (bench/bench_trace.py builds 100,000 requests of 32 ids each)."""
    lengths = np.fromiter((len(c.keys) for c in chains), dtype=np.int64, count=len(chains))
    if not lengths.sum():
        return [0] * len(chains)
    ids = np.concatenate([np.asarray(c.keys, dtype=np.int64) for c in chains])
    block = np.fromiter((c.block_tokens for c in chains), dtype=np.int64, count=len(chains))
    return shared_by_ids(ids, lengths, np.asarray(tokens, dtype=np.int64), block)


def shared_by_ids(ids: np.ndarray, lengths: np.ndarray, tokens: np.ndarray, block: np.ndarray,
                  starts: np.ndarray | None = None) -> list[int]:
    """Per request, in the order sent, its shareable prompt tokens, where each request's blocks are int64 ids:
    request k's are ``lengths[k]`` of ``ids`` from ``starts[k]`` (default: the next ones, in order), ``block[k]``
    tokens each, its prompt ``tokens[k]``. Every id of ``ids`` belongs to one request."""
    n = len(lengths)
    if not len(ids):
        return [0] * n
    if starts is None:
        starts = np.cumsum(lengths) - lengths
    by_start = np.argsort(starts, kind="stable")
    # the request (in the order sent) each id belongs to; int32: a copy per id of tens of millions costs page faults
    owner = np.repeat(by_start.astype(np.int32 if n < 1 << 31 else np.int64), lengths[by_start])
    low, high = int(ids.min()), int(ids.max())
    span = high - low + 1
    if low >= 0 and high < 4 * len(ids) + (1 << 16):  # numbered from near 0 (a trace's usually are): as they are
        numbers, span = ids, high + 1
    elif span <= 4 * len(ids) + (1 << 16):
        numbers = ids - low
    else:
        distinct, numbers = np.unique(ids, return_inverse=True)
        numbers, span = numbers.reshape(-1), len(distinct)
    first = np.full(span, n, dtype=owner.dtype)
    np.minimum.at(first, numbers, owner)  # each id's first request, in the order sent
    # each request's leading run of ids sent before: up to its first id that was not
    not_before = np.flatnonzero(first[numbers] >= owner)
    at = np.searchsorted(not_before, starts)
    first_new = np.append(not_before, len(ids))[at]
    matched = np.minimum(first_new - starts, lengths)
    shared: list[int] = np.minimum(tokens, matched * block).tolist()
    return shared
