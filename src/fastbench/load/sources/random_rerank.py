"""The ``random-rerank`` dataset, as vLLM's ``RandomDatasetForReranking`` draws it: one random query for the
whole run and ``--num-prompts`` random documents, sent ``--random-batch-size`` documents a request, each
request the query and its batch.

Lengths (``r`` the range ratio, each drawn uniformly from ``[len*(1-r), len*(1+r)]``): a native reranker's
query is drawn around ``input_len // 2 - 1`` tokens and each document around ``input_len - query - 1`` (the
separator the server puts between them); a request's count is ``(query + 1) x documents + their tokens``.
With ``--no-reranker`` (an embedding model scoring pairs) the query is one of each batch: ``num_prompts - 1``
documents of ``input_len`` tokens around, ``batch - 1`` a request, counted ``query + their tokens``.
The text: random common words, one word taken as one token (``estimate (words)``), or with ``--tokenizer``
random tokens decoded (``tokenizer:PATH``), each text then drawn around its length less the tokenizer's special
tokens, as vLLM's ``get_sampling_params`` draws it. Seeded by ``--seed`` with the dataset's shape
(``tokens.draw_generator``): each cell of a sweep draws its own.
"""

from __future__ import annotations

import numpy as np

from fastbench.config import BenchConfig
from fastbench.datasetoptions import RandomOptions
from fastbench.exceptions import ConfigError
from fastbench.load.sources.prefixed import WORDS
from fastbench.load.sources.random_prompts import length_range
from fastbench.load.tokens import SOURCE_WORDS, LocalTokenizer, draw_generator

_WORDS = np.array(WORDS)


def draw(config: BenchConfig, local: LocalTokenizer | None) -> tuple[list[tuple[list[str], int]], str]:
    """The requests, each its inputs (the query, then the documents) and its token count, and where the
    counts came from."""
    random = config.options(RandomOptions)
    reranker = not config.no_reranker
    rng = draw_generator(config.seed, config.dataset_name, random.input_len, random.range_ratio, reranker)
    special = local.special_tokens if local is not None else 0  # vLLM draws each text this much short
    sep = int(reranker)
    n_docs, batch = config.num_prompts, config.random_batch_size
    query_around = random.input_len // 2 - sep if reranker else random.input_len
    if query_around < 1:
        raise ConfigError(f"--random-input-len {random.input_len} leaves no room for a query and a document "
                          "(random-rerank splits it between them): give 4 or more")
    low, high = length_range(max(0, query_around - special), random.range_ratio)
    query, query_len = _text(rng, local, int(rng.integers(low, high + 1)))
    if not reranker:  # the query is one of each batch
        n_docs, batch = n_docs - 1, batch - 1
        doc_around = random.input_len
    else:
        doc_around = max(1, random.input_len - query_len - sep)
    low, high = length_range(max(0, doc_around - special), random.range_ratio)
    docs = [_text(rng, local, int(n)) for n in rng.integers(low, high + 1, size=max(n_docs, 0))]
    requests = []
    for i in range(0, len(docs), batch):
        part = docs[i:i + batch]
        count = (query_len + sep) * len(part) if reranker else query_len
        requests.append(([query, *(text for text, _ in part)], count + sum(n for _, n in part)))
    return requests, local.source if local is not None else SOURCE_WORDS


def _text(rng: np.random.Generator, local: LocalTokenizer | None, tokens: int) -> tuple[str, int]:
    if local is not None:
        return local.random_text(rng, tokens)
    return " ".join(_WORDS[rng.integers(0, len(WORDS), size=tokens)].tolist()), tokens
