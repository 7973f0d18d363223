"""The workload of a run: its datasets' prompts turned into request bodies, serialised once with orjson
and never per send.

The datasets, each a module of ``fastbench.load.sources`` (its docstring says how it draws or reads its
prompts): ``random``, ``sharegpt``, ``jsonl``, ``prefix_repetition``, ``burstgpt``, ``custom``, ``spec_bench``
and ``timed_trace`` as in ``vllm bench serve``, SGLang's ``generated-shared-prefix``, and the Mooncake
traces (``mooncake``, ``trace``); ``DATASETS`` lists them by ``--dataset-name``. A trace's requests carry
their arrival times (``Workload.arrival_offsets_ns``) and are never reused.

Text prompts are counted by the local tokenizer, the server's ``/tokenize`` or an estimate
(``fastbench.load.tokens``); counts of chat prompts cover the message text only: the server's chat
template adds tokens of its own. Prompts that do not fit ``max_model_len`` with the output they ask
for are screened out and replaced by further draws (``fastbench.load.screening``). When the dataset
runs short, the usable prompts are reused in order (and ``notes`` says so); warm-ups are taken after
the measured requests, cycling the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from typing import Any

import orjson

from fastbench._core import BodyParts
from fastbench.checks import check_config
from fastbench.config import BenchConfig
from fastbench.datasetoptions import AgenticOptions, MultiTurnOptions
from fastbench.exceptions import ConfigError, DatasetError
from fastbench.load import agentic, lora, protocols, sessions, sharing, toolturns
from fastbench.load.conversations import read_conversations
from fastbench.load.screening import (
    OTHER_OUTPUT_LIMITS,
    Candidate,
    JsonPrompt,
    Messages,
    PartsPrompt,
    Selector,
    max_tokens_override,
    output_limit_known,
)
from fastbench.load.sources import (
    Context,
    Dataset,
    burstgpt,
    custom,
    custom_image,
    gc_paused,
    jsonl,
    prefix_repetition,
    random_mm,
    random_prompts,
    shared_prefix,
    sharegpt,
    trace,
)
from fastbench.load.tokens import (
    SOURCE_CHARS,
    SOURCE_TOKEN_IDS,
    SOURCE_WORDS,
    LocalTokenizer,
    TokenCounter,
    TokenizeFailed,
    TokenizeFn,
)

__all__ = (
    "DATASETS",
    "RequestSpec",
    "Workload",
    "build_workload",
    "build_workload_sync",
    "check_inputs",
    "output_limit_known",
    "prompt_seed",
)

DATASETS: dict[str, Dataset] = {
    "random": Dataset(random_prompts.check, random_prompts.offer),
    "sharegpt": Dataset(sharegpt.check, sharegpt.offer),
    "jsonl": Dataset(jsonl.check, jsonl.offer),
    "prefix_repetition": Dataset(prefix_repetition.check, prefix_repetition.offer),
    "generated-shared-prefix": Dataset(shared_prefix.check, shared_prefix.offer),
    "burstgpt": Dataset(burstgpt.check, burstgpt.offer),
    "custom": Dataset(custom.check, custom.offer),
    "spec_bench": Dataset(custom.check, custom.offer),
    "timed_trace": Dataset(trace.check, trace.offer),
    "mooncake": Dataset(trace.check, trace.offer),
    "random-mm": Dataset(random_mm.check, random_mm.offer),
    "custom_image": Dataset(custom_image.check, custom_image.offer),
}


@dataclasses.dataclass(frozen=True)
class RequestSpec:
    """One request, ready to send.

    :param body: the full JSON body, serialised once with orjson: bytes, or (a trace's) ``BodyParts``, the
        body as a head, runs of one token buffer the bodies share, and a tail, which the core sends as they
        lie (``bytes(body)`` joins them).
    :param prompt_len: input tokens, exact or estimated as ``Workload.input_length_source`` says;
        None when unknown.
    :param max_tokens: the output tokens asked for (``max_tokens`` in the body).
    :param prompt_text_chars: characters of prompt text (0 for a token-id prompt).
    """

    body: bytes | BodyParts
    prompt_len: int | None
    max_tokens: int
    prompt_text_chars: int


@dataclasses.dataclass(repr=False)
class Workload:
    """The requests of one run, measured and warm-up, and how they were made.

    :param requests: the measured requests, ``num_prompts`` of them.
    :param warmups: ``num_warmups`` requests sent and discarded before the measured window.
    :param dataset: dataset name (and file, when there is one).
    :param input_length_source: where ``prompt_len`` came from: ``tokenizer:PATH``, ``token-ids``,
        ``server /tokenize``, ``estimate (chars/4)`` or ``estimate (words)``; several joined by `` + ``.
    :param screened_out: prompts dropped because ``prompt_len + max_tokens > max_model_len``.
    :param screened_reason: the screening rule applied, or why none was.
    :param max_model_len: the context length screened against (None: no screening).
    :param notes: anything the reader of the result should know about how the workload was made.
    :param arrival_offsets_ns: a trace's send times, one per measured request, in ns from the first
        (None: the load options pace the run).
    """

    requests: list[RequestSpec]
    warmups: list[RequestSpec]
    dataset: str
    input_length_source: str
    screened_out: int
    screened_reason: str
    max_model_len: int | None
    notes: list[str]
    sessions: sessions.SessionPlan | None = None  # --multi-turn: how the requests form sessions
    trees: agentic.TreePlan | None = None  # --dataset-name weka: how the requests form agent trees
    arrival_offsets_ns: list[int] | None = None
    # per measured request, the prompt tokens it shares with requests sent before it (load.sharing); None: unknown
    shared_prompt_tokens: list[int] | None = None
    # --lora-modules: per measured request, its adapter (an index into load.lora.adapter_names); None: none
    adapter_of_row: list[int] | None = None
    # the APIs answered whole: per measured request, the inputs it carries (documents for rerank); None: one prompt
    inputs_per_request: list[int] | None = None

    def __repr__(self) -> str:
        # Short: asyncio.run (3.11) formats its task's result with repr() once a run ends (signal.getsignal's
        # enum lookup of its SIGINT handler), and every body in full made 2.3 s and 100s of MB of 20,000 requests.
        return (f"Workload({self.dataset!r}: {len(self.requests)} requests, {len(self.warmups)} warm-ups, "
                f"lengths from {self.input_length_source})")


# What --seed chooses of each dataset's prompts (the result's workload.prompt_seed); the datasets that
# read a file take an order: "random" is a seeded shuffle, "file" the file's own order.
_SEED_DRAWS = {
    "random": "the prompts' tokens and lengths",
    "random-mm": "the prompts' tokens and lengths, each request's image count and sizes, and the pixels",
    "random-rerank": "the query's and the documents' tokens and lengths",
    "prefix_repetition": "the prefixes, the suffixes and their order",
    "generated-shared-prefix": "the system prompts, the questions and their order",
    "burstgpt": "which rows (lengths) are sent and where the prompts' running token ids start",
    "timed_trace": "the tokens of each hash id's block (the requests, their times and their sharing are the "
                   "trace's, in file order)",
    "mooncake": "the tokens of each hash id's block (the requests, their times and their sharing are the "
                "trace's, in file order)",
}
_SHUFFLED = ("which of the file's entries are sent, and in what order (a seeded shuffle: another seed draws "
             "another sample, overlapping it as much as the file is small)")


def prompt_seed(config: BenchConfig) -> dict[str, Any]:
    """The seed that drew the run's prompts and what it chose of them: ``seed``, ``varies_prompts``
    (False where every seed sends the same prompts: a file read in order) and ``draws`` (one line)."""
    adapters = "; and each request's LoRA adapter" if config.lora_modules and config.lora_assignment == "random" else ""
    if config.dataset_name in _SEED_DRAWS and not config.multi_turn:
        return {"seed": config.seed, "varies_prompts": True, "draws": _SEED_DRAWS[config.dataset_name] + adapters}
    if config.dataset_order == "random":
        return {"seed": config.seed, "varies_prompts": True, "draws": _SHUFFLED + adapters}
    return {"seed": config.seed, "varies_prompts": False,
            "draws": "none of them: --dataset-order file sends the file's entries in order, the same for every seed"
            + adapters}


def check_inputs(config: BenchConfig) -> None:
    """What can be checked of the workload without the server: the dataset file parses and has the
    expected shape, the tokenizer loads, the random lengths can work. Blocking (it reads the file);
    run before a launch, so that a bad input is found before the engine spends minutes loading.
    Token counts and the filters on them need the server and are left to :func:`build_workload`.

    :raises DatasetError: unreadable file, bad JSON, wrong shape.
    :raises ConfigError: a tokenizer that cannot be read, lengths or ratio that cannot work.
    """
    if config.tokenizer:
        LocalTokenizer(os.fspath(config.tokenizer))
    if config.multi_turn and config.dataset_path:
        read_conversations(os.fspath(config.dataset_path), config.dataset_name)
        template = config.options(MultiTurnOptions).chat_template
        sessions.load_template(os.fspath(template) if template else None)
        return
    if config.dataset_name == "weka":
        agentic.check(config)
        return
    dataset = DATASETS.get(config.dataset_name)
    if dataset is not None:
        dataset.check(config)


async def build_workload(
    config: BenchConfig,
    model: str,
    *,
    max_model_len: int | None,
    tokenize: TokenizeFn | None = None,
) -> Workload:
    """Build the measured and warm-up requests of a run from ``config``'s dataset options.

    :param config: the run's options (dataset_*, random_*, num_prompts, num_warmups, max_tokens,
        ignore_eos, extra_body, endpoint, seed, tokenizer, max_model_len).
    :param model: the model name to put in each body.
    :param max_model_len: the context length the server reported; ``config.max_model_len`` overrides it.
        None (and no override) means no screening.
    :param tokenize: counts a text's tokens with the server (see ``control.make_server_tokenize``); used only
        when no local tokenizer is given. If it raises, the workload falls back to characters / 4 and a
        note says why.
    :raises DatasetError: missing or unreadable file, bad JSON, wrong shape, nothing usable, unknown dataset.
    :raises ConfigError: options that cannot work (bad range ratio, nothing fits max_model_len, ...).
    """
    check_config(config)  # the options' own rules, stated once
    local = LocalTokenizer(os.fspath(config.tokenizer)) if config.tokenizer else None
    mml = config.max_model_len if config.max_model_len is not None else max_model_len
    try:
        return await _build(config, model, mml, local, tokenize, [])
    except TokenizeFailed as exc:
        note = f"server /tokenize failed ({exc}); prompt lengths fell back to {SOURCE_CHARS}"
        return await _build(config, model, mml, local, None, [note])


async def _build(
    config: BenchConfig,
    model: str,
    mml: int | None,
    local: LocalTokenizer | None,
    tokenize: TokenizeFn | None,
    notes: list[str],
) -> Workload:
    counter = TokenCounter(local, tokenize)
    if config.pooling:  # one whole answer a request: embeddings, pooling, score, rerank (load.pooling)
        return await _build_pooling(config, model, mml, counter, local, notes)
    chat = protocols.by_endpoint(config.endpoint).chat_form  # a prompt goes as a conversation
    if config.multi_turn:
        return await _build_sessions(config, model, mml, counter, chat, notes)
    if config.dataset_name == "weka":
        return _build_trees(config, model, mml, chat, notes)
    selector = Selector(config.num_prompts + config.num_warmups, mml, config.extra_body)
    dataset = await DATASETS[config.dataset_name].offer(Context(config, chat, selector, counter, local, notes))

    accepted = selector.accepted
    if not accepted and selector.need > 0:
        reasons = [f"{selector.screened_out} screened out by max_model_len {mml}"] if selector.screened_out else []
        # the dataset's own notes say what it skipped or filtered (e.g. vLLM's length filter)
        reasons += [n for n in notes if "skipped" in n or "filtered" in n]
        why = f" ({'; '.join(reasons)})" if reasons else ""
        raise DatasetError(f"{dataset}: no usable prompt{why}; see the dataset options")
    timed = bool(accepted) and accepted[0].arrival_s is not None
    if timed and selector.remaining > 0:
        notes.append(f"the trace ran short: {len(accepted)} usable requests for {config.num_prompts} + "
                     f"{config.num_warmups} warm-ups; each is sent once, at its time")
    elif selector.remaining > 0:
        notes.append(
            f"dataset ran short: {len(accepted)} usable prompts for {config.num_prompts} requests"
            f" + {config.num_warmups} warm-ups; prompts were reused in order"
        )
        if config.num_warmups:
            notes.append("warm-ups repeat measured prompts, so prefix caching may favour those requests")
    if chat:
        notes.append("chat: prompt_len counts the message text only; the chat template adds tokens")

    with gc_paused():  # no await inside: nothing else runs meanwhile
        specs = _make_specs(accepted, config, model, chat)
    n = config.num_prompts
    arrivals = None
    if timed:  # a trace never cycles: its times would repeat
        requests, warmups = specs[:n], specs[n:n + config.num_warmups]
        first = accepted[0].arrival_s or 0.0
        arrivals = [round(((c.arrival_s or 0.0) - first) * 1e9) for c in accepted[:n]]
        sent = [*range(n, n + len(warmups)), *range(len(requests))]
    else:
        requests = [specs[i % len(specs)] for i in range(n)] if specs else []
        warmups = [specs[(n + j) % len(specs)] for j in range(config.num_warmups)] if specs else []
        sent = [(n + j) % len(specs) for j in range(len(warmups))] + [i % len(specs) for i in range(len(requests))]
    shared = sharing.shared_prompt_tokens(config.dataset_name, accepted, sent, len(requests))
    adapter_of_row = None
    if config.lora_modules:  # each measured request's model, drawn as vllm bench serve draws it
        bodies, adapter_of_row = lora.assign([spec.body for spec in requests], config, model)
        requests = [dataclasses.replace(spec, body=body) for spec, body in zip(requests, bodies)]
        notes.append(f"LoRA: each request's model drawn from --lora-modules ({config.lora_assignment}, as vllm bench "
                     "serve: random.choice seeded by --seed, or round-robin); warm-ups use the model itself")
    if config.request_id_prefix is not None:
        prefix = config.request_id_prefix
        requests = [_with_request_id(spec, f"{prefix}{i}") for i, spec in enumerate(requests)]
        warmups = [_with_request_id(spec, f"{prefix}warmup-{j}") for j, spec in enumerate(warmups)]
    if mml is None:
        reason = "not screened: max_model_len unknown"
    elif not any(k in config.extra_body for k in ("max_tokens", *OTHER_OUTPUT_LIMITS)):
        reason = f"prompt_len + max_tokens > max_model_len ({mml})"
    else:
        reason = (f"prompt_len + the largest output limit sent (max_tokens and --extra-body's) > max_model_len "
                  f"({mml}); with max_tokens lifted and no other limit, prompt_len >= max_model_len")
    return Workload(
        requests=requests,
        warmups=warmups,
        dataset=dataset,
        input_length_source=" + ".join(selector.sources) or counter.source,
        screened_out=selector.screened_out,
        screened_reason=reason,
        max_model_len=mml,
        notes=notes,
        arrival_offsets_ns=arrivals,
        shared_prompt_tokens=shared,
        adapter_of_row=adapter_of_row,
    )


async def _build_sessions(config: BenchConfig, model: str, mml: int | None, counter: TokenCounter, chat: bool,
                          notes: list[str]) -> Workload:
    plan, prompt_lens, max_tokens, warmup_bodies, name = await sessions.build_sessions(
        config, model, chat, mml, counter, notes)
    requests = [RequestSpec(body, n, out, 0) for body, n, out in zip(plan.bodies, prompt_lens, max_tokens)]
    warmups = [RequestSpec(body, None, 0, 0) for body in warmup_bodies]
    return Workload(requests=requests, warmups=warmups, dataset=name, input_length_source=counter.source,
                    screened_out=0, screened_reason="multi-turn: a session stops at the first turn whose history "
                    f"+ max_tokens passes max_model_len ({mml})", max_model_len=mml, notes=notes, sessions=plan)


def _build_trees(config: BenchConfig, model: str, mml: int | None, chat: bool, notes: list[str]) -> Workload:
    built = agentic.build_trees(config, chat, mml, notes)
    warm = len(built.warmups)
    if config.options(AgenticOptions).tool_messages:  # one tools list on every call, as an agent's carry theirs
        config = dataclasses.replace(config, extra_body={"tools": toolturns.TOOLS, "tool_choice": toolturns.TOOL_CHOICE,
                                                         **config.extra_body})
    with gc_paused():
        specs = _make_specs([*built.warmups, *built.measured], config, model, chat)
    return Workload(requests=specs[warm:], warmups=specs[:warm], dataset=built.dataset,
                    input_length_source=SOURCE_WORDS if chat else SOURCE_TOKEN_IDS, screened_out=built.screened_out,
                    screened_reason=f"weka: a call whose prompt + max_tokens passes max_model_len ({mml}) is left out "
                    "with the rest of its agent and the subagents it would spawn", max_model_len=mml, notes=notes,
                    shared_prompt_tokens=built.shared_prompt_tokens, trees=built.plan)


async def _build_pooling(config: BenchConfig, model: str, mml: int | None, counter: TokenCounter,
                         local: LocalTokenizer | None, notes: list[str]) -> Workload:
    from fastbench.load import pooling  # it reads DATASETS, so it comes after them

    measured, warm, name, source = await pooling.build(config, model, counter, local, notes, DATASETS)
    return Workload(requests=[RequestSpec(body, count, 0, 0) for body, count, _ in measured],
                    warmups=[RequestSpec(body, None, 0, 0) for body in warm], dataset=name,
                    input_length_source=source, screened_out=0,
                    screened_reason="not screened: the server truncates each input (truncate_prompt_tokens -1)",
                    max_model_len=mml, notes=notes, inputs_per_request=[n for _, _, n in measured])


# Stands for a JsonPrompt's value in a body serialised once; the prompt's JSON is spliced in its place.
_PROMPT_MARK = "\x00fastbench prompt\x00"
_SENT = ""  # a candidate's prompt once its body holds it


def _make_specs(accepted: list[Candidate], config: BenchConfig, model: str, chat: bool) -> list[RequestSpec]:
    """The requests' bodies, one a candidate. Each candidate's prompt is dropped once its body holds it, so
    that 100,000s of prompts are in memory once at the peak, not twice (the prompt and the body)."""
    templates: dict[int, tuple[bytes, bytes] | None] = {}  # max_tokens -> the body around the prompt
    # max_tokens, a PartsPrompt's open and close -> the body's head and tail around its runs
    ends: dict[tuple[int, bytes, bytes], tuple[bytes, bytes] | None] = {}
    override = max_tokens_override(config.extra_body)
    specs = []
    for c in accepted:
        prompt = c.prompt
        if isinstance(prompt, PartsPrompt):
            key = (c.max_tokens, prompt.open, prompt.close)
            if key not in ends:
                around = _template(c, config, model, chat)
                ends[key] = (around[0] + prompt.open, prompt.close + around[1]) if around else None
            head_tail = ends[key]
            if head_tail is not None:  # the body sent from the prompt's runs as they lie: no copy of its tokens
                specs.append(RequestSpec(BodyParts(head_tail[0], prompt.source, prompt.first, prompt.end,
                                                   head_tail[1]), c.prompt_len, override or c.max_tokens,
                                         prompt.chars))
                continue
        elif isinstance(prompt, JsonPrompt):
            if c.max_tokens not in templates:
                templates[c.max_tokens] = _template(c, config, model, chat)
            around = templates[c.max_tokens]
            if around is not None:
                head, tail = around
                specs.append(RequestSpec(b"".join((head, *prompt.parts, tail)), c.prompt_len,
                                         override or c.max_tokens, prompt.chars))
                c.prompt = _SENT
                continue
        specs.append(_make_spec(c, config, model, chat))
        c.prompt = _SENT
    return specs


def _template(c: Candidate, config: BenchConfig, model: str, chat: bool) -> tuple[bytes, bytes] | None:
    """The body of ``c`` serialised once, split where its prompt goes; None when --extra-body
    replaces the prompt (then each body is made whole)."""
    whole = bytes(_make_spec(dataclasses.replace(c, prompt=_PROMPT_MARK), config, model, chat).body)  # bytes already
    parts = whole.split(orjson.dumps(_PROMPT_MARK))
    return (parts[0], parts[1]) if len(parts) == 2 else None


def _make_spec(c: Candidate, config: BenchConfig, model: str, chat: bool) -> RequestSpec:
    protocol = protocols.by_endpoint(config.endpoint)
    prompt = orjson.loads(c.prompt.json) if isinstance(c.prompt, (JsonPrompt, PartsPrompt, Messages)) else c.prompt
    body = protocol.body(model, prompt, c.max_tokens)  # the API's own fields (a conversation's messages as they are)
    if isinstance(c.prompt, Messages):  # a whole conversation (custom's messages)
        prompt = c.prompt.text
    if config.ignore_eos:
        body["ignore_eos"] = True
    body.update(config.sampling)  # --temperature, --top-p, ... (as vllm bench serve, --extra-body wins)
    if config.logprobs is not None:
        body.update({"logprobs": True, "top_logprobs": config.logprobs} if protocol.logprobs == "chat"
                    else {"logprobs": config.logprobs})
    body.update(config.extra_body)  # last: the user's keys win
    try:
        raw = orjson.dumps(body)
    except TypeError as exc:  # orjson.JSONEncodeError
        raise ConfigError(f"extra_body cannot be sent as JSON: {exc}") from None
    return RequestSpec(
        # orjson leaves its output in an over-sized buffer (4 KiB for a short body); a run keeps
        # every body, so keep an exact-size copy: 10,000 short bodies were 40 MB, now ~3 MB.
        body=bytes(memoryview(raw)),
        prompt_len=c.prompt_len,
        max_tokens=max_tokens_override(config.extra_body) or c.max_tokens,
        prompt_text_chars=len(prompt) if isinstance(prompt, str) else 0,
    )


def _with_request_id(spec: RequestSpec, request_id: str) -> RequestSpec:
    """``spec`` whose body carries ``"request_id"`` first: spliced into the serialised body (which
    begins with ``{``), so that a reused prompt is not serialised again."""
    head = b'{"request_id":' + orjson.dumps(request_id) + b","
    body = spec.body
    if isinstance(body, BodyParts):
        return dataclasses.replace(spec, body=BodyParts(head + body.head[1:], body.source, body.first, body.end,
                                                        body.tail))
    return dataclasses.replace(spec, body=head + body[1:])


def build_workload_sync(
    config: BenchConfig,
    model: str,
    *,
    max_model_len: int | None,
    tokenize: TokenizeFn | None = None,
) -> Workload:
    """:func:`build_workload` for callers without an event loop (runs one with ``asyncio.run``)."""
    return asyncio.run(build_workload(config, model, max_model_len=max_model_len, tokenize=tokenize))
