"""The ``random`` dataset: input and output lengths drawn uniformly, prompts made to measure.

Input and output lengths are drawn uniformly from ``[len*(1-r), len*(1+r)]`` (``r`` = range ratio).
With a local tokenizer, the prompt is random token ids decoded to text, re-encoded and adjusted until
its length is exactly the drawn one (length source ``tokenizer:PATH``); as in vllm bench serve (0.32 to
0.34), the input length counts the special tokens the tokenizer adds (a BOS): the text's length is drawn
around ``len`` less them, so the server counts ``len`` tokens. Without one,
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

The draws come from ``tokens.draw_generator``: the seed with the dataset's name and the input's shape (its
length range and the prefix), so prompts of another length never begin with these; the output lengths
come from a generator of their own, so another output length sends the same prompts.
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
from fastbench.load.tokens import SOURCE_TOKEN_IDS, SOURCE_WORDS, draw_generator

_RANDOM_DRAW_FACTOR = 100  # random dataset: give up after this many draws per needed request
# The words as an array: a prompt's words are taken by one index of it, in C, not one Python lookup a word
_WORD_ARRAY = np.array(WORDS, dtype=object)


def length_range(length: int, ratio: float) -> tuple[int, int]:
    low = max(1, math.floor(length * (1 - ratio)))
    high = max(low, math.ceil(length * (1 + ratio)))
    return low, high


def _random_ranges(config: BenchConfig, special: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The random dataset's (input, output) length ranges (the lengths and the ratio were checked by
    ``check_config``); the input's counts the text alone, ``special`` tokens (the tokenizer's BOS) less
    than asked, as vLLM's ``get_sampling_params`` draws it."""
    options = config.options(RandomOptions)
    inputs = length_range(max(0, options.input_len - special), options.range_ratio)
    if config.max_tokens is not None:
        return inputs, (config.max_tokens, config.max_tokens)
    return inputs, length_range(options.output_len, options.range_ratio)


def check(config: BenchConfig) -> None:
    """Nothing to read ahead: the random dataset's options are numbers that ``check_config`` checks."""


async def offer(ctx: Context) -> str:
    config, selector, local, chat, notes = ctx.config, ctx.selector, ctx.local, ctx.chat, ctx.notes
    special = local.special_tokens if local is not None else 0
    (in_low, in_high), (out_low, out_high) = _random_ranges(config, special)
    mml = selector.max_model_len
    prefix_len = config.options(RandomOptions).prefix_len
    shortest = in_low + special  # as the server counts it
    if mml is not None and prefix_len and prefix_len + shortest + out_low > mml:
        raise ConfigError(
            f"--random-prefix-len {prefix_len} + --random-input-len's shortest draw {shortest} + output >= {out_low} "
            f"tokens exceed max_model_len {mml}: no random request fits; shorten the prefix or the prompt"
        )
    if mml is not None and shortest + out_low > mml:
        raise ConfigError(
            f"no random request fits max_model_len {mml}: input >= {shortest} plus output >= {out_low} tokens; "
            "lower --random-input-len/--random-output-len/--max-tokens"
        )
    if prefix_len:
        return await _offer_prefixed(ctx, (in_low, in_high), (out_low, out_high))
    if local is not None:
        source = local.source
        notes.append(
            f"random: the text is drawn {special} token(s) shorter than --random-input-len, the tokenizer's special "
            "tokens (a BOS) that the server adds, as vllm bench serve draws it; prompt_len counts the text alone"
            if special else "random: the tokenizer adds no special tokens: each text is --random-input-len's draw"
        )
    elif chat:
        source = SOURCE_WORDS
        notes.append("random: chat prompts are random common words, one word taken as one token")
    else:
        source = SOURCE_TOKEN_IDS
        notes.append(
            f"random: prompts sent as token-id lists, ids drawn from [{TOKEN_ID_LOW}, {TOKEN_ID_HIGH})"
        )
    rng, outputs = _generators(config, (in_low, in_high))
    drawn, most = 0, _RANDOM_DRAW_FACTOR * selector.need + 1000
    while selector.remaining > 0 and drawn < most:
        k = selector.remaining
        in_lens = rng.integers(in_low, in_high + 1, size=k)
        out_lens = outputs.integers(out_low, out_high + 1, size=k)
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


def _generators(config: BenchConfig, inputs: tuple[int, int]) -> tuple[np.random.Generator, np.random.Generator]:
    """The generators of the prompts (their lengths and tokens) and of the output lengths: the prompts' from
    the seed, the dataset and the input's shape; the outputs' apart, so that they move no prompt."""
    prefix_len = config.options(RandomOptions).prefix_len
    prompts = draw_generator(config.seed, config.dataset_name, "input", *inputs, "prefix", prefix_len)
    return prompts, draw_generator(config.seed, config.dataset_name, "output")


async def _offer_prefixed(ctx: Context, inputs: tuple[int, int], out_lengths: tuple[int, int]) -> str:
    """The random dataset behind one fixed prefix of ``--random-prefix-len`` tokens."""
    config, selector = ctx.config, ctx.selector
    rng, outputs = _generators(config, inputs)
    maker = PromptMaker(ctx, rng, separator="")
    prefix = maker.prefix(config.options(RandomOptions).prefix_len)
    special = ctx.local.special_tokens if ctx.local is not None else 0
    short = f" ({special} token(s) short of it: the server adds them, as vllm bench serve draws it)" if special else ""
    ctx.notes.append(f"random: one fixed prefix of {prefix.tokens} tokens before every prompt (vllm bench serve's "
                     f"--random-prefix-len), then --random-input-len's draw{short}; {maker.note()}")
    drawn, most = 0, _RANDOM_DRAW_FACTOR * selector.need + 1000
    while selector.remaining > 0 and drawn < most:
        k = selector.remaining
        in_lens = rng.integers(inputs[0], inputs[1] + 1, size=k).tolist()
        out_lens = outputs.integers(out_lengths[0], out_lengths[1] + 1, size=k).tolist()
        selector.offer(maker.prompts([prefix] * k, in_lens, out_lens))
        drawn += k
    return "random"
