"""The ``generated-shared-prefix`` dataset: SGLang's (``sglang.bench_serving``), same flags (``--gsp-*``).

``--gsp-num-groups`` groups, each with its own random system prompt of ``--gsp-system-prompt-len`` tokens,
shared by the group's ``--gsp-prompts-per-group`` prompts; each prompt is its group's system prompt, a
blank line (``"\\n\\n"``, as SGLang joins them; nothing between token ids), and its own random question of
``--gsp-question-len`` tokens, and asks for ``--gsp-output-len`` tokens (``--max-tokens`` wins when given).
All groups' prompts are shuffled together (seeded by ``--seed``). The whole prompt goes out as the
prompt (chat: one user message), as SGLang sends it.

Where fastbench differs: SGLang sends every one of groups x prompts-per-group prompts, whatever
``--num-prompts`` says; fastbench sends ``--num-prompts`` of them (the first of the shuffled order; when
there are fewer, they are reused in order and the notes say so). SGLang's later options
(``--gsp-range-ratio``, ``--gsp-num-turns``, ``--gsp-ordered``, ``--gsp-fast-prepare``) are not taken, and
its pickled cache of generated prompts is not kept. The tokens are drawn as ``prefixed`` says.
"""

from __future__ import annotations

from fastbench.config import BenchConfig
from fastbench.datasetoptions import SharedPrefixOptions
from fastbench.load.sources import Context
from fastbench.load.sources.prefixed import Prefix, PromptMaker, refuse_unless_fits
from fastbench.load.tokens import draw_generator


def check(config: BenchConfig) -> None:
    """Nothing to read ahead: the options are numbers that ``check_config`` checks."""


async def offer(ctx: Context) -> str:
    config, selector = ctx.config, ctx.selector
    options = config.options(SharedPrefixOptions)
    system_len, question_len = options.system_prompt_len, options.question_len
    output = config.max_tokens if config.max_tokens is not None else options.output_len
    refuse_unless_fits(selector.max_model_len, (("--gsp-system-prompt-len", system_len),
                                                ("--gsp-question-len", question_len)),
                       output, "the system prompt or the question")
    groups, per_group = options.num_groups, options.prompts_per_group
    rng = draw_generator(config.seed, config.dataset_name, system_len, question_len, groups, per_group)
    maker = PromptMaker(ctx, rng, separator="\n\n")
    total = groups * per_group
    taken = min(selector.need, total)
    # the shuffled order of all groups x per-group prompts, of which the run takes the first
    group_of = (rng.permutation(total)[:taken] // per_group).tolist()
    system_prompts: dict[int, Prefix] = {}
    for group in group_of:  # only the groups the run sends: each system prompt made once
        if group not in system_prompts:
            system_prompts[group] = maker.prefix(system_len)
    ctx.notes.append(
        f"generated-shared-prefix: {groups} groups x {per_group} prompts, each a {system_len}-token system prompt "
        f"shared by its group then a {question_len}-token question, shuffled; {taken} of the {total} prompts "
        f"are made and sent in turn (SGLang sends all {total}, whatever --num-prompts); {maker.note()}"
    )
    selector.offer(maker.prompts([system_prompts[g] for g in group_of], [question_len] * taken, [output] * taken))
    return "generated-shared-prefix"
