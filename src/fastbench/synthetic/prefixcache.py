"""The synthetic server's prefix cache: vLLM's automatic prefix caching, modelled so that tests can
predict it token for token.

Part of the synthetic server (see ``fastbench.synthetic``); imports nothing from the fastbench client.

A prompt's token ids are cut into blocks of ``block_size``; only full blocks are cached, each named by a
hash of its tokens chained to the block before it, so a block hits only when everything before it
matches too. A request's hit is its longest run of cached leading blocks, capped, as in vLLM, so that
at least its last prompt token is computed (vLLM needs its logits): at most ``(tokens - 1) //
block_size`` blocks. What the counters count is vLLM's: ``queries`` += the request's prompt tokens,
``hits`` += its cached tokens (``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``).

Where the model is simpler than vLLM: a request's blocks count as cached from the moment it is admitted
(vLLM caches them as its prefill computes them, so two requests sharing a prefix that arrive together
may both miss there); the cache holds ``capacity_blocks`` blocks and evicts the least recently used
(vLLM evicts free blocks when it needs room, which depends on the load); a reset always succeeds (vLLM
refuses one while requests hold blocks).
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    """Blocks of token ids seen, least recently used first, and vLLM's two counters."""

    def __init__(self, block_size: int, capacity_blocks: int) -> None:
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.queries = 0  # prompt tokens looked up (vllm:prefix_cache_queries_total)
        self.hits = 0  # of them, tokens found cached (vllm:prefix_cache_hits_total)
        self.resets = 0

    def admit(self, ids: list[int]) -> int:
        """Look a prompt up, count it, cache its full blocks; return its cached tokens."""
        size = self.block_size
        blocks = self._blocks
        most = (len(ids) - 1) // size  # the last token is always computed
        parent = 0
        hit_blocks = 0
        matching = True
        hashes = []
        for start in range(0, len(ids) - size + 1, size):
            parent = hash((parent, *ids[start:start + size]))
            hashes.append(parent)
            if matching and len(hashes) <= most and parent in blocks:
                hit_blocks += 1
            else:
                matching = False
        for h in hashes:
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)
        cached = hit_blocks * size
        self.queries += len(ids)
        self.hits += cached
        return cached

    def reset(self) -> None:
        """Forget every block (vLLM's ``POST /reset_prefix_cache``); the counters keep counting, as
        Prometheus counters do."""
        self._blocks.clear()
        self.resets += 1

    @property
    def blocks(self) -> int:
        return len(self._blocks)
