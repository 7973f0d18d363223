"""The ``random`` dataset: input and output lengths drawn uniformly, prompts made to measure.

Input and output lengths are drawn uniformly from ``[len*(1-r), len*(1+r)]`` (``r`` = range ratio).
With a local tokenizer, the prompt is random token ids decoded to text, re-encoded and adjusted until
its length is exactly the drawn one (length source ``tokenizer:PATH``). Without one,
``/v1/completions`` gets the prompt as a list of token ids, which vLLM accepts and counts exactly
(``token-ids``; ids are drawn from ``[1000, 30000)``, clear of the control tokens most vocabularies keep
at either end), and chat gets random common English words, one word taken as one token
(``estimate (words)``).

Only the run's prompts are drawn (``--num-prompts`` + warm-ups, and the draws that screening replaces),
each made straight into its final form: a token-id prompt is serialised at once (orjson, from numpy) and
kept as its JSON bytes, never as a list of Python ints (36 bytes a token). A prompt then costs its body's
bytes, about 6 per token id (5 digits and a comma), or its text's.

``--random-prefix-len N`` (vllm bench serve's meaning): one random prefix of N tokens, drawn once, goes
before every prompt, so the prompt has N plus the drawn input length tokens; the prompts are then made
by ``prefixed`` (the same three forms).
"""

from __future__ import annotations

import math

import numpy as np
import orjson

from fastbench.config import BenchConfig
from fastbench.datasetoptions import RandomOptions
from fastbench.exceptions import ConfigError
from fastbench.load.screening import Candidate, JsonPrompt, Prompt
from fastbench.load.sources import Context
from fastbench.load.sources.prefixed import TOKEN_ID_HIGH, TOKEN_ID_LOW, WORDS, PromptMaker
from fastbench.load.tokens import SOURCE_TOKEN_IDS, SOURCE_WORDS

_RANDOM_DRAW_FACTOR = 100  # random dataset: give up after this many draws per needed request
# The words as an array: a prompt's words are taken by one index of it, in C, not one Python lookup a word
_WORD_ARRAY = np.array(WORDS, dtype=object)


def length_range(length: int, ratio: float) -> tuple[int, int]:
    low = max(1, math.floor(length * (1 - ratio)))
    high = max(low, math.ceil(length * (1 + ratio)))
    return low, high


def _random_ranges(config: BenchConfig) -> tuple[tuple[int, int], tuple[int, int]]:
    """The random dataset's (input, output) length ranges (the lengths and the ratio were checked by
    ``check_config``)."""
    options = config.options(RandomOptions)
    inputs = length_range(options.input_len, options.range_ratio)
    if config.max_tokens is not None:
        return inputs, (config.max_tokens, config.max_tokens)
    return inputs, length_range(options.output_len, options.range_ratio)


def check(config: BenchConfig) -> None:
    """Nothing to read ahead: the random dataset's options are numbers that ``check_config`` checks."""


async def offer(ctx: Context) -> str:
    config, selector, local, chat, notes = ctx.config, ctx.selector, ctx.local, ctx.chat, ctx.notes
    (in_low, in_high), (out_low, out_high) = _random_ranges(config)
    mml = selector.max_model_len
    prefix_len = config.options(RandomOptions).prefix_len
    if mml is not None and prefix_len and prefix_len + in_low + out_low > mml:
        raise ConfigError(
            f"--random-prefix-len {prefix_len} + --random-input-len's shortest draw {in_low} + output >= {out_low} "
            f"tokens exceed max_model_len {mml}: no random request fits; shorten the prefix or the prompt"
        )
    if mml is not None and in_low + out_low > mml:
        raise ConfigError(
            f"no random request fits max_model_len {mml}: input >= {in_low} plus output >= {out_low} tokens; "
            "lower --random-input-len/--random-output-len/--max-tokens"
        )
    if prefix_len:
        return await _offer_prefixed(ctx, (in_low, in_high), (out_low, out_high))
    if local is not None:
        source = local.source
        notes.append(
            "random: prompt_len counts the prompt without special tokens (as vLLM); the server may add BOS"
        )
    elif chat:
        source = SOURCE_WORDS
        notes.append("random: chat prompts are random common words, one word taken as one token")
    else:
        source = SOURCE_TOKEN_IDS
        notes.append(
            f"random: prompts sent as token-id lists, ids drawn from [{TOKEN_ID_LOW}, {TOKEN_ID_HIGH})"
        )
    rng = np.random.default_rng(config.seed)
    drawn, most = 0, _RANDOM_DRAW_FACTOR * selector.need + 1000
    while selector.remaining > 0 and drawn < most:
        k = selector.remaining
        in_lens = rng.integers(in_low, in_high + 1, size=k)
        out_lens = rng.integers(out_low, out_high + 1, size=k)
        batch: list[Candidate] = []
        for n_in, n_out in zip(in_lens.tolist(), out_lens.tolist()):
            prompt: Prompt
            if local is not None:
                prompt, n_in = local.random_text(rng, n_in)
            elif chat:
                prompt = " ".join(_WORD_ARRAY[rng.integers(0, len(WORDS), size=n_in)])
            else:
                ids = rng.integers(TOKEN_ID_LOW, TOKEN_ID_HIGH, size=n_in)  # the draws .tolist() would give
                # an exact-size copy: orjson's own buffer holds ~32 KB for a 6 KB array (datasets._make_spec)
                prompt = JsonPrompt((bytes(memoryview(orjson.dumps(ids, option=orjson.OPT_SERIALIZE_NUMPY))),), 0)
            batch.append(Candidate(prompt, n_in, n_out, source))
        drawn += k
        selector.offer(batch)
    return "random"


async def _offer_prefixed(ctx: Context, inputs: tuple[int, int], outputs: tuple[int, int]) -> str:
    """The random dataset behind one fixed prefix of ``--random-prefix-len`` tokens."""
    config, selector = ctx.config, ctx.selector
    rng = np.random.default_rng(config.seed)
    maker = PromptMaker(ctx, rng, separator="")
    prefix = maker.prefix(config.options(RandomOptions).prefix_len)
    ctx.notes.append(f"random: one fixed prefix of {prefix.tokens} tokens before every prompt (vllm bench serve's "
                     f"--random-prefix-len), then --random-input-len's draw; {maker.note()}")
    drawn, most = 0, _RANDOM_DRAW_FACTOR * selector.need + 1000
    while selector.remaining > 0 and drawn < most:
        k = selector.remaining
        in_lens = rng.integers(inputs[0], inputs[1] + 1, size=k).tolist()
        out_lens = rng.integers(outputs[0], outputs[1] + 1, size=k).tolist()
        selector.offer(maker.prompts([prefix] * k, in_lens, out_lens))
        drawn += k
    return "random"
