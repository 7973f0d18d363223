"""``vllm bench serve`` (0.32)'s flags that fastbench takes but does not act on: a script written for it runs
unchanged. Each is accepted with its own arity (a switch, one value, several) and, when given, one line on
stderr says it is ignored and why; a few that would change what is measured, and that fastbench cannot do,
are refused with the reason instead (a result that silently lacks them would mislead).

The flags fastbench implements with vLLM's meaning are in the parser itself (cli/command.py);
tests/cli/test_cli_vllm.py reads the installed vLLM's own parser and fails on any flag of it fastbench lacks.
"""

from __future__ import annotations

import argparse
from typing import Literal, NamedTuple

from fastbench.cli.argtypes import fold_in_help

Arity = Literal["switch", "value", "values", "negatable"]


class Unused(NamedTuple):
    arity: Arity
    why: str
    refused: bool = False  # given, it stops the run (with ``why``) instead of a notice


def _dataset(name: str) -> str:
    return f"configures vLLM's {name} dataset, which fastbench does not have"


# vLLM's datasets fastbench lacks, and the flag prefixes that configure them.
_DATASET_PREFIXES = {
    "--hf-": "hf", "--speed-bench-": "speed_bench",
    "--blazedit-": "blazedit", "--asr-": "ASR", "--bfcl-": "BFCL",
}

UNUSED: dict[str, Unused] = {
    "--trust-remote-code": Unused("switch", "fastbench runs no model code: --tokenizer reads a local tokenizer.json"),
    "--tokenizer-mode": Unused("value", "fastbench counts tokens with a local tokenizer.json (--tokenizer) or the "
                               "server's /tokenize"),
    "--skip-tokenizer-init": Unused("switch", "fastbench loads no tokenizer unless --tokenizer is given"),
    "--no-stream": Unused("switch", "in vllm bench serve it loads a Hugging Face dataset without streaming; fastbench "
                          "reads local files (and always streams responses)"),
    "--no-oversample": Unused("switch", "fastbench reuses prompts in order when the dataset runs short, and the "
                              "result's notes say so"),
    "--skip-chat-template": Unused("switch", "fastbench applies no chat template itself; the server applies its own "
                                   "on /v1/chat/completions"),
    "--enable-multimodal-chat": Unused("switch", "fastbench sends a dataset's images in the chat message's content "
                                       "(random-mm, custom_image), as vllm bench serve's openai-chat backend does"),
    "--chat-template-kwargs": Unused("value", "fastbench applies no chat template itself; for the server's, give "
                                     "--extra-body '{\"chat_template_kwargs\": {...}}'"),
    "--use-beam-search": Unused("switch", "vllm bench serve 0.32 sends nothing for it either"),
    "--plot-timeline": Unused("switch", "fastbench draws no plots; --requests-jsonl and the result's histograms "
                              "hold the data"),
    "--timeline-itl-thresholds": Unused("value", "fastbench draws no plots (--plot-timeline)"),
    "--plot-dataset-stats": Unused("switch", "fastbench draws no plots; the result's input_lens and output_lens "
                                   "hold the data"),
    "--custom-ensure-client-side-data": Unused("switch", "fastbench always reads custom_image's files and sends them "
                                               "as data URLs (it has no custom_audio)"),
    # would change what is measured: refused, with the reason
    "--probe-request-rate": Unused("value", "fastbench sends no probe requests beside the load", refused=True),
    "--profile": Unused("switch", "fastbench does not drive the server's profiler (/start_profile)", refused=True),
}

# The dataset flags of vLLM's other datasets, each with its arity in vllm bench serve 0.32.
for _flag, _arity in (
    ("--hf-subset", "value"), ("--hf-split", "value"), ("--hf-name", "value"), ("--hf-output-len", "value"),
    ("--speed-bench-dataset-subset", "value"), ("--speed-bench-output-len", "value"),
    ("--speed-bench-category", "value"),
    ("--blazedit-min-distance", "value"), ("--blazedit-max-distance", "value"),
    ("--asr-max-audio-len-sec", "value"), ("--asr-min-audio-len-sec", "value"),
    ("--bfcl-categories", "value"),
):
    _name = next(name for prefix, name in _DATASET_PREFIXES.items() if _flag.startswith(prefix))
    UNUSED[_flag] = Unused(_arity, _dataset(_name))  # type: ignore[arg-type]


def dest(flag: str) -> str:
    return "vllm_" + flag[2:].replace("-", "_")


GROUP_TITLE = "vllm bench serve compatibility"


def add_unused_args(parser: argparse.ArgumentParser) -> None:
    """vLLM's flags fastbench does not act on, in a group of their own at the end of --help, which names
    them in one line (each flag's own help, the reason, is in docs/cli.md)."""
    g = parser.add_argument_group(
        GROUP_TITLE,
        f"{len(UNUSED)} more of its flags, taken so that its command lines run unchanged and named on stderr when "
        "given (ignored, or refused), with the reason: docs/cli.md lists them")
    for flag, unused in UNUSED.items():
        what = "refused: " if unused.refused else "ignored: "
        kwargs: dict[str, object] = {"dest": dest(flag), "default": None, "help": what + unused.why}
        if unused.arity == "switch":
            kwargs["action"] = "store_true"
            kwargs["default"] = False
        elif unused.arity == "negatable":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif unused.arity == "values":
            kwargs["nargs"] = "+"
            kwargs["metavar"] = "VALUE"
        else:
            kwargs["metavar"] = "VALUE"
        fold_in_help(g.add_argument(flag, **kwargs))  # type: ignore[arg-type]


def given(ns: argparse.Namespace) -> list[tuple[str, Unused]]:
    """The unused flags the command line gave (a switch set, a value given), in table order."""
    found = []
    for flag, unused in UNUSED.items():
        value = getattr(ns, dest(flag), None)
        if value is None or value is False:
            continue
        if flag == "--probe-request-rate" and _is_zero(value):
            continue  # vllm's default, 0: no probes, as here
        found.append((flag, unused))
    return found


def _is_zero(text: object) -> bool:
    try:
        return float(str(text)) == 0.0
    except ValueError:
        return False


# vllm bench serve's --backend names fastbench does not take, each with its reason (the others are the streamed
# APIs of fastbench.load.protocols and those answered whole of fastbench.load.pooling; openai-audio has its own,
# fastbench.cli.inputflags).
REFUSED_BACKENDS: dict[str, str] = {
    "openai-embeddings-clip": "it embeds images with CLIP's inputs, which fastbench does not build",
    "openai-embeddings-vlm2vec": "it embeds images with VLM2Vec's inputs, which fastbench does not build",
    "infinity-embeddings": "it speaks Infinity's embedding server, not vLLM's or OpenAI's API",
    "infinity-embeddings-clip": "it speaks Infinity's embedding server with CLIP's inputs",
}
