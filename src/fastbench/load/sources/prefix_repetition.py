"""The ``prefix_repetition`` dataset: vllm bench serve's (``PrefixRepetitionRandomDataset``), same flags.

``--prefix-repetition-num-prefixes`` random prefixes of ``--prefix-repetition-prefix-len`` tokens; each
prompt is one of them followed by its own random suffix of ``--prefix-repetition-suffix-len`` tokens,
and asks for ``--prefix-repetition-output-len`` tokens (``--max-tokens`` wins when given). The prompts
go out in a shuffled order (seeded by ``--seed``), so that requests sharing a prefix are spread over the run.

Where fastbench differs: vllm bench serve makes ``num_prompts // num_prefixes`` prompts per prefix and
sends only those (100 prompts over 3 prefixes: 99); fastbench sends every one of ``--num-prompts``, the
prefixes taking turns, so their counts differ by at most one. The tokens are drawn as ``prefixed`` says
(vLLM draws ids over the whole vocabulary and decodes them with its tokenizer).
"""

from __future__ import annotations

import numpy as np

from fastbench.config import BenchConfig
from fastbench.datasetoptions import PrefixRepetitionOptions
from fastbench.load.sources import Context
from fastbench.load.sources.prefixed import PromptMaker, refuse_unless_fits
from fastbench.load.tokens import draw_generator


def check(config: BenchConfig) -> None:
    """Nothing to read ahead: the options are numbers that ``check_config`` checks."""


async def offer(ctx: Context) -> str:
    config, selector = ctx.config, ctx.selector
    options = config.options(PrefixRepetitionOptions)
    prefix_len, suffix_len = options.prefix_len, options.suffix_len
    output = config.max_tokens if config.max_tokens is not None else options.output_len
    refuse_unless_fits(selector.max_model_len, (("--prefix-repetition-prefix-len", prefix_len),
                                                ("--prefix-repetition-suffix-len", suffix_len)),
                       output, "the prefix or the suffix")
    count = options.num_prefixes
    rng = draw_generator(config.seed, config.dataset_name, prefix_len, suffix_len, count)
    maker = PromptMaker(ctx, rng, separator="")
    prefixes = [maker.prefix(prefix_len) for _ in range(count)]
    need = selector.need
    order = np.arange(need) % count  # the prefixes take turns ...
    rng.shuffle(order)  # ... in a shuffled order
    ctx.notes.append(
        f"prefix_repetition: {count} prefixes of {prefix_len} tokens, each prompt one of them plus its own "
        f"{suffix_len}-token suffix, in shuffled order; all {config.num_prompts} prompts are sent (vllm bench "
        f"serve sends num_prompts // num_prefixes per prefix); {maker.note()}"
    )
    selector.offer(maker.prompts([prefixes[i] for i in order.tolist()], [suffix_len] * need, [output] * need))
    return "prefix_repetition"
