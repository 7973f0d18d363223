"""The ``random`` dataset: input and output lengths drawn uniformly, prompts made to measure.

Input and output lengths are drawn uniformly from ``[len*(1-r), len*(1+r)]`` (``r`` = range ratio).
With a local tokenizer, the prompt is random token ids decoded to text, re-encoded and adjusted until
its length is exactly the drawn one (length source ``tokenizer:PATH``). Without one,
``/v1/completions`` gets the prompt as a list of token ids, which vLLM accepts and counts exactly
(``token-ids``; ids are drawn from ``[1000, 30000)``, clear of the control tokens most vocabularies keep
at either end), and chat gets random common English words, one word taken as one token
(``estimate (words)``).

``--random-prefix-len P`` (as vLLM's) puts the same P random tokens before every prompt, drawn once:
the prompt is P + the drawn input length tokens (with a local tokenizer, the joined text is counted).
"""

from __future__ import annotations

import math

import numpy as np

from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError
from fastbench.load.screening import Candidate, Prompt
from fastbench.load.sources import Context
from fastbench.load.tokens import SOURCE_TOKEN_IDS, SOURCE_WORDS

# Random token-id prompts without a tokenizer: ids inside every common vocabulary (Llama 2 has 32000)
# and clear of the control tokens kept at the low end (Mistral's tekken reserves 0-999).
_TOKEN_ID_LOW, _TOKEN_ID_HIGH = 1000, 30000
_RANDOM_DRAW_FACTOR = 100  # random dataset: give up after this many draws per needed request

# Common English words that most BPE vocabularies hold as one token (with the leading space).
_WORD_TEXT = """
the of and to in is was for on that with as by at from his her they this had not are but be have
which one you were all she there would their we him been has when who will more no if out so said
what up its about into than them can only other new some could time these two may then do first any
my now such like our over man me even most made after also did many before must through back years
where much your way well down should because each just those people how too little state good very
make world still own see men work long get here between both life being under never day same another
know while last might us great old year off come since against go came right used take three small
house water place part number sound word light hand high food open tree city earth eye head story
saw far sea draw left late run hold river car feet care second book carry took science room friend
began idea fish mountain stop once base hear horse cut sure watch color face wood main enough plain
girl usual young ready above ever red list though feel talk bird soon body dog family direct pose
leave song measure door product black short class wind question happen complete ship area half rock
order fire south problem piece told knew pass farm top whole king size heard best hour better true
during hundred five remember step early west ground interest reach fast verb sing listen six table
travel less morning ten simple several toward war lay pattern slow center love person money serve
appear road map rain rule govern pull cold notice voice unit power town fine
"""
_WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())


def _length_range(length: int, ratio: float) -> tuple[int, int]:
    low = max(1, math.floor(length * (1 - ratio)))
    high = max(low, math.ceil(length * (1 + ratio)))
    return low, high


def _random_ranges(config: BenchConfig) -> tuple[tuple[int, int], tuple[int, int]]:
    """The random dataset's (input, output) length ranges (the lengths and the ratio were checked by
    ``check_config``)."""
    r = config.random_range_ratio
    inputs = _length_range(config.random_input_len, r)
    if config.max_tokens is not None:
        return inputs, (config.max_tokens, config.max_tokens)
    return inputs, _length_range(config.random_output_len, r)


def check(config: BenchConfig) -> None:
    """Nothing to read ahead: the random dataset's options are numbers that ``check_config`` checks."""


async def offer(ctx: Context) -> str:
    config, selector, local, chat, notes = ctx.config, ctx.selector, ctx.local, ctx.chat, ctx.notes
    (in_low, in_high), (out_low, out_high) = _random_ranges(config)
    mml = selector.max_model_len
    prefix_len = config.random_prefix_len
    if mml is not None and prefix_len + in_low + out_low > mml:
        raise ConfigError(
            f"no random request fits max_model_len {mml}: input >= {prefix_len + in_low} plus output >= {out_low} "
            "tokens; lower --random-input-len/--random-prefix-len/--random-output-len/--max-tokens"
        )
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
            f"random: prompts sent as token-id lists, ids drawn from [{_TOKEN_ID_LOW}, {_TOKEN_ID_HIGH})"
        )
    rng = np.random.default_rng(config.seed)
    # the shared prefix, drawn first: the same for every request of a seed
    prefix_ids: list[int] = []
    prefix_text = ""
    if prefix_len:
        if local is not None:
            prefix_text, _ = local.random_text(rng, prefix_len)
        elif chat:
            prefix_text = " ".join(_WORDS[i] for i in rng.integers(0, len(_WORDS), size=prefix_len).tolist()) + " "
        else:
            prefix_ids = rng.integers(_TOKEN_ID_LOW, _TOKEN_ID_HIGH, size=prefix_len).tolist()
        notes.append(f"random: every prompt begins with the same {prefix_len} random tokens (--random-prefix-len)")
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
                if prefix_text:
                    prompt = prefix_text + prompt
                    n_in = local.count([prompt], special=False)[0]
            elif chat:
                prompt = prefix_text + " ".join(_WORDS[i] for i in rng.integers(0, len(_WORDS), size=n_in).tolist())
                n_in += prefix_len
            else:
                prompt = prefix_ids + rng.integers(_TOKEN_ID_LOW, _TOKEN_ID_HIGH, size=n_in).tolist()
                n_in += prefix_len
            batch.append(Candidate(prompt, n_in, n_out, source))
        drawn += k
        selector.offer(batch)
    return "random"
