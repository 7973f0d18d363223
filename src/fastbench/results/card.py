"""The run card's wording: :func:`render_card` lays out the Markdown card in the published cards' order
(title, Configuration, Measured results, Load, Speculative decoding, Server metrics, Memory, Multi-turn
sessions, Agent trees, LoRA adapters, the run command, Notes).

The client's figures come from the ``Result``; the server's sections (``card_config``, ``load``,
``spec_decode``, ``server_metrics_card``, ``memory``, ``notes``) from ``Result.server_info``, where
:func:`fastbench.results.serversections.server_sections` laid them out from what the server wing saw.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from typing import Any

from fastbench._version import __version__
from fastbench.config import BenchConfig
from fastbench.datasetoptions import RandomOptions
from fastbench.redact import Secrets, redact_text, shell_join
from fastbench.results import pooling
from fastbench.results.adapters import card_lines as adapter_card_lines
from fastbench.results.agentic import card_lines as agentic_card_lines
from fastbench.results.cache import PrefixCacheSummary
from fastbench.results.result import Distribution, Result
from fastbench.results.steady import card_text as steady_card_text

__all__ = ("escape_markdown", "render_card")


def _num(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def _ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.3f}" if value < 1 else f"{value:,.1f}"


def _median_p99(dist: Distribution | None) -> str:
    if dist is None or dist.count == 0:
        return "n/a"
    return f"median {_ms(dist.median)} · p99 {_ms(dist.p99)}"


_FENCE_OPEN = re.compile(r" {0,3}(`{3,})")
_BACKTICKS = re.compile(r"`+")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def escape_markdown(text: str) -> str:
    """Markdown ``text`` with each ``&``, ``<`` and ``>`` outside code written as an entity, as the HTML report
    escapes them: a label, a card row or a server-supplied model name never becomes raw HTML where the card
    is rendered, and reads the same. Code (fenced blocks, backtick spans, found as CommonMark finds them,
    backslash escapes included) is left as it is: renderers show it literally."""
    out: list[str] = []
    fence = ""
    for line in text.split("\n"):
        if fence:  # inside a fenced block, until a line of at least as many backticks and nothing else
            out.append(line)
            closing = line.strip()
            if len(line) - len(line.lstrip(" ")) < 4 and closing.startswith(fence) and not closing.strip("`"):
                fence = ""
            continue
        opened = _FENCE_OPEN.match(line)
        if opened and "`" not in line[opened.end():]:
            fence = opened.group(1)
            out.append(line)
            continue
        out.append(_escape_line(line))
    return "\n".join(out)


def _escape_line(line: str) -> str:
    out: list[str] = []
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\" and i + 1 < n:  # an escaped character: never a code span's backtick
            escaped = line[i + 1]
            out.append(_ENTITIES.get(escaped, c + escaped))  # "\<" shows "<", as "&lt;" does
            i += 2
        elif c == "`":
            run = _BACKTICKS.match(line, i)
            assert run is not None
            width = run.end() - i
            close = next((m for m in _BACKTICKS.finditer(line, run.end()) if m.end() - m.start() == width), None)
            end = close.end() if close is not None else run.end()  # unclosed: the backticks are plain text
            out.append(line[i:end])
            i = end
        else:
            out.append(_ENTITIES.get(c, c))
            i += 1
    return "".join(out)


# a line break of any kind (CommonMark ends a line at a bare CR too) or another control character
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")


def _table(rows: Iterable[tuple[str, Any]]) -> list[str]:
    """Two-column Markdown table in the seeds' layout: the first row doubles as the header, as the
    seeds' cards have no header row of their own."""
    lines: list[str] = []
    for label, value in rows:
        label, cell = (_CONTROL.sub(" ", str(text)).replace("|", "\\|") for text in (label, value))
        lines.append(f"| {label} | {cell} |")
        if len(lines) == 1:
            lines.append("|---|---|")
    return lines


def _with_user_rows(rows: list[tuple[str, Any] | None], card_rows: Iterable[str]) -> list[tuple[str, Any]]:
    """The Configuration rows with the user's (``--card-row LABEL=VALUE``, each kept, in order): the
    user's rows of a label fastbench also fills take that row's place, the others go where ``rows``
    holds None."""
    user = [(label.strip(), value.strip()) for label, _, value in (r.partition("=") for r in card_rows)]
    known = {row[0] for row in rows if row is not None}
    out: list[tuple[str, Any]] = []
    for row in rows:
        if row is None:
            out += [(label, value) for label, value in user if label not in known]
        else:
            mine = [(label, value) for label, value in user if label == row[0]]
            out += mine or [row]
    return out


def _machine(env: Mapping[str, Any]) -> str:
    """"2 x Intel Xeon ..., 23.5 GiB RAM; GPU: NVIDIA H200 (driver 570.1)" from the result's environment."""
    cpu = f"{env.get('cpu_count') or '?'} x {env.get('cpu_model') or env.get('machine') or 'unknown CPU'}"
    parts = [cpu]
    if env.get("mem_total_gib"):
        parts[0] += f", {env['mem_total_gib']:g} GiB RAM"
    gpus = env.get("gpus") or []
    parts.append("GPU: " + (", ".join(gpus) if gpus else "none found (nvidia-smi)"))
    return "; ".join(parts)


def _engine(result: Result, config: BenchConfig) -> str:
    engine = result.server_info.get("engine")
    if engine:
        return str(engine)
    version = result.server_info.get("version")
    if config.base_url is None or str(version or "").startswith("fastbench-synthetic"):
        return "fastbench synthetic"
    # attached: the engine its /metrics names are from, if any
    family = (result.server_info.get("server_metrics") or {}).get("engine")
    if family:
        return f"{family} {version} (told by its /metrics)" if version else f"{family} (told by its /metrics)"
    return f"unknown engine (version {version})" if version else "unknown engine"


def _variant(result: Result) -> str | None:
    """The title's variant: a launched server's, from its arguments ("NGRAM speculative decoding"); else, where
    the server's /metrics carry vLLM's speculative-decoding counters (it has them only when it speculates;
    llama-server keeps its own at zero without a draft model, so there only drafts tell), that it speculates,
    with how many tokens a draft holds (one counter per position): its /metrics name no method."""
    info = result.server_info
    if info.get("variant"):
        return str(info["variant"])
    stats = info.get("spec_decode_stats") or {}
    source = str(stats.get("source") or "")
    drafted = ((stats.get("counters_last") or {}).get("drafts") or 0) > 0
    if not (source.startswith("vllm:spec_decode") or (source.endswith("spec_decode_* counters") and drafted)):
        return None
    positions = len((stats.get("counters_first") or {}).get("per_position") or [])
    drafts = f"{positions}-token drafts, " if positions else ""
    return f"speculative decoding ({drafts}told by its /metrics)"


def _load(config: BenchConfig) -> str:
    if not config.open_loop:
        return f"conc {config.effective_concurrency}"
    return "trace replay" if config.trace_timed else f"rate {config.rate_text}"


def _endpoint(result: Result, config: BenchConfig) -> str:
    if config.launch is not None and result.server_info.get("base_url"):
        return f"{str(result.server_info['base_url']).rstrip('/')}{config.endpoint} (launched by fastbench)"
    if config.base_url is None:
        return f"built-in synthetic server ({config.endpoint})"
    # the server's root as the run used it (no /v1 twice, no credentials)
    root = result.server_info.get("base_url") or redact_text(config.base_url)
    return str(root).rstrip("/") + config.endpoint


def _dataset(result: Result, config: BenchConfig) -> str:
    described = result.workload_info.get("dataset")
    if described and described != config.dataset_name:
        return str(described)
    if config.dataset_name == "random":
        random = config.options(RandomOptions)
        text = f"random (input {random.input_len}, output {random.output_len} tokens"
        if random.range_ratio:
            text += f", range ratio {random.range_ratio:g}"
        return text + ")"
    path = f" {config.dataset_path}" if config.dataset_path else ""
    order = f" ({config.dataset_order} order)" if config.dataset_name == "sharegpt" else ""
    return f"{config.dataset_name}{path}{order}"


def _humanize(key: str) -> str:
    """``ready_s`` -> "Ready s"; a key already in words ("KV cache") keeps its capitals."""
    text = key.replace("_", " ")
    return text[:1].upper() + text[1:]


def _errors_text(result: Result) -> str:
    n = result.counts
    text = str(n.failed)
    if n.failed_by_class:
        text += " (" + ", ".join(f"{name} {k}" for name, k in n.failed_by_class.items()) + ")"
    if n.cancelled:
        why = result.stopped_reason
        when = "at the time cap" if why == "time cap" else f"when the run stopped ({why})"
        text += f"; {n.cancelled} cancelled {when}"
    return text


def render_card(result: Result, config: BenchConfig, *, status: str = "done",
                environment: Mapping[str, Any] | None = None) -> str:
    """The Markdown run card, in the layout of the published cards (title, Configuration,
    Measured results, optional Load / Speculative decoding / Memory sections, Full run command, Notes).

    Optional parts come from ``result.server_info``: ``engine`` (e.g. "vLLM 0.32.0"), ``variant``
    (e.g. "NVFP4 + EAGLE3", added to the title), ``max_model_len``, ``card_config`` (extra
    Configuration rows), ``model_card`` (Family, Parameters... from the model's files: modelinfo),
    ``load`` / ``spec_decode`` / ``server_metrics_card`` / ``memory`` (dicts rendered as sections),
    ``launch_command`` (the server's command, shown redacted) and ``notes`` (extra note lines).
    """
    model = config.model or result.server_info.get("model") or "unknown model"
    engine = _engine(result, config)
    if result.collapsed:
        status = f"{status}, COLLAPSED: {result.collapse_reason}"
    secrets = Secrets.of_config(config)
    sections = [
        ("Configuration", _table(_configuration_rows(result, config, model, engine, environment))),
        ("Measured results", _table(_measured_rows(result, config))),
        *_server_sections(result.server_info),
        *_workload_sections(result),
        ("Full run command", _command_lines(result, config, secrets)),
        ("Notes", _note_lines(result, config, secrets)),
    ]
    # The seeds' layout, as Markdown: a heading and a blank line around each table, or a renderer
    # runs the next line into the table above it.
    lines = [f"# {_title(result, config, model, engine)}", "", f"status: {status}"]
    for heading, body in sections:
        lines += ["", f"## {heading}", "", *body]
    # a key a server echoed into an error, a label: scrubbed, then escaped as Markdown
    return escape_markdown(secrets.text("\n".join(lines))) + "\n"


def _title(result: Result, config: BenchConfig, model: str, engine: str) -> str:
    """"MODEL · ENGINE · VARIANT · LOAD", the variant only where there is one."""
    variant = _variant(result)
    return " · ".join([str(model), engine, *([variant] if variant else []), _load(config)])


def _load_text(config: BenchConfig) -> str:
    """The Configuration's "Concurrency / request rate" row."""
    if not config.open_loop:
        return f"concurrency {config.effective_concurrency} (closed loop)"
    cap = config.effective_concurrency
    return (
        ("sent at the trace's times, " if config.trace_timed
         else f"request rate {config.rate_text} (burstiness {config.burstiness:g}), ")
        + ("no cap on requests in flight" if cap is None else f"at most {cap} in flight")
    )


def _configuration_rows(result: Result, config: BenchConfig, model: str, engine: str,
                        environment: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    """The Configuration table: the model and engine, the user's own rows, the workload and the client."""
    info = result.server_info
    context = info.get("max_model_len") or config.max_model_len
    # the engine's own word on its precision (its config line) wins over config.json's; either
    # follows Engine, as on the published cards
    model_rows = dict(info.get("model_card") or {})
    derived = dict(info.get("card_config") or {})
    quant = derived.pop("Quant / precision", None) or model_rows.get("Quant / precision")
    model_rows.pop("Quant / precision", None)
    files = model_rows.pop("Model files", None)
    rows: list[tuple[str, Any] | None] = [("Model", model)]
    rows += [(k, model_rows.pop(k)) for k in ("Family", "Parameters") if k in model_rows]
    rows.append(("Engine", engine))
    if quant:
        rows.append(("Quant / precision", quant))
    rows.append(None)  # the user's own rows go here: what only they know, as the published cards put it
    rows += list(derived.items()) + list(model_rows.items())
    if files:
        rows.append(("Model files", files))
    rows += [
        ("Endpoint", _endpoint(result, config)),
        ("Dataset", _dataset(result, config)),
        (
            "Prompts",
            f"{config.num_prompts}" + (f" (+{config.num_warmups} warm-up)" if config.num_warmups else ""),
        ),
        ("Concurrency / request rate", _load_text(config)),
        ("Max tokens", config.max_tokens if config.max_tokens is not None else "from the dataset"),
        ("Context window", f"{context} tokens" if context else "unknown"),
        ("Time cap", f"{config.max_seconds:g} s" if config.max_seconds is not None else "none"),
    ]
    if config.ignore_eos:
        rows.append(("Ignore EOS", "yes"))
    if config.goodput:
        rows.append(("Goodput SLOs", ", ".join(f"{k} ≤ {v:g} ms" for k, v in config.goodput.items())))
    if config.label:
        rows.append(("Label", config.label))
    rows.append(("Client", f"fastbench {__version__}"))
    if environment:
        # the client's machine; a server fastbench started (or its synthetic one) ran on it too
        local = config.launch is not None or config.base_url is None
        rows.append(("Machine (client and server)" if local else "Client machine", _machine(environment)))
    return _with_user_rows(rows, config.card_rows)


def _measured_rows(result: Result, config: BenchConfig) -> list[tuple[str, Any]]:
    """The Measured results table: rates, latencies, the prefix cache, counts; a run that measured no
    working server says so in place of its rates."""
    d = result.distributions
    n = result.counts
    tp = result.throughput
    prefill = d.get("prefill_rate")
    if prefill is not None and prefill.count:
        prefill_text = (
            f"{_num(prefill.median, 1)} (median per-request prompt tokens ÷ raw TTFT, n={prefill.count})"
        )
    else:
        prefill_text = "n/a (no completed request with a prompt token count)"
    decode = d.get("decode_rate")
    ttft_text = _median_p99(d.get("ttft"))
    if config.open_loop:
        raw = d.get("ttft_raw")
        ttft_text += f" (from send: median {_ms(raw.median if raw else None)})"
    itl_text = _median_p99(d.get("itl")) + " per chunk"
    itl_token = d.get("itl_token")
    if itl_token is not None and itl_token.count:
        itl_text += f"; per token median {_ms(itl_token.median)}"
    finished_at = datetime.datetime.fromisoformat(result.created_at).strftime("%Y-%m-%d %H:%M %z")
    completed_text = f"{n.completed}/{n.total} · {finished_at}"
    decode_text = f"{_num(tp.output_throughput)} (aggregate: output tokens ÷ duration)"
    request_text = f"{_num(tp.request_throughput, 3)} req/s"
    if result.collapsed:
        # A collapsed run measured no working server: its rates must not be plotted as one.
        decode_text = request_text = f"not a throughput: the run collapsed ({result.collapse_reason})"
        prefill_text = f"not a rate: the run collapsed ({result.collapse_reason})"
    elif n.completed == 0:
        # Stopped by the client before its first completion, no request failed: it measured nothing of
        # the server, collapsed or working, so a 0 would read as a server that decodes nothing.
        why = ("interrupted before any request completed" if result.stopped_reason == "interrupted"
               else f"no request completed ({result.stopped_reason})")
        decode_text = request_text = f"not a throughput: {why}"
    no_rate = result.collapsed or n.completed == 0
    measured: list[tuple[str, Any]] = [
        ("Prefill tok/s", prefill_text),
        ("Decode tok/s", decode_text),
        ("Decode tok/s, steady state", decode_text if no_rate else steady_card_text(result.steady)),
        (
            "Per-stream decode tok/s",
            f"median {_num(decode.median)} · min {_num(decode.min)}" if decode and decode.count else "n/a",
        ),
        ("TTFT (ms)", ttft_text),
        *_prefix_cache_rows(result.server_info.get("prefix_cache_stats")),
        *_cached_tokens_rows(result.prefix_cache),
        ("TPOT (ms)", _median_p99(d.get("tpot"))),
        ("ITL (ms)", itl_text),
        ("E2E latency (ms)", _median_p99(d.get("e2el"))),
        ("Request throughput", request_text),
    ]
    if tp.request_goodput is not None:
        measured.append(
            ("Goodput", f"{_num(tp.request_goodput, 3)} req/s ({tp.good_requests} met every SLO)")
        )
    measured += [
        ("Completed", completed_text),
        ("Errors", _errors_text(result)),
        (
            "Mean tokens per chunk",
            f"{_num(result.mean_tokens_per_chunk)} (with speculative decoding, a client-side estimate of "
            "acceptance length)"
            if result.mean_tokens_per_chunk is not None
            else "n/a (no server usage)",
        ),
        ("Duration", f"{result.duration_s:,.1f} s"),
    ]
    if result.pooling is not None:  # whole answers: no stream (results.pooling)
        measured = pooling.card_rows(result.pooling, measured)
    return measured


# The server's sections, each from a dict of Result.server_info: (its key, the heading)
_SERVER_SECTIONS = (
    ("load", "Load"),
    ("spec_decode", "Speculative decoding"),
    ("server_metrics_card", "Server metrics"),
    ("memory", "Memory"),
)


def _server_sections(info: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(heading, lines) of each server section the run has."""
    sections = []
    for key, heading in _SERVER_SECTIONS:
        section = info.get(key)
        if isinstance(section, Mapping) and section:
            sections.append((heading, _table((_humanize(str(k)), v) for k, v in section.items())))
    return sections


def _workload_sections(result: Result) -> list[tuple[str, list[str]]]:
    """(heading, lines) of the sections of the workloads beyond single requests: multi-turn sessions,
    agent trees, LoRA adapters."""
    sections = []
    if result.sessions is not None:
        sections.append(("Multi-turn sessions", _session_tables(result.sessions)))
    if result.agentic is not None:
        hit_rate = result.prefix_cache.hit_rate if result.prefix_cache else None
        sections.append(("Agent trees", agentic_card_lines(result.agentic, hit_rate)))
    if result.adapters is not None:
        sections.append(("LoRA adapters", adapter_card_lines(result.adapters)))
    return sections


def _command_lines(result: Result, config: BenchConfig, secrets: Secrets) -> list[str]:
    """The Full run command, fenced: the launched server's command, then fastbench's, redacted."""
    lines = ["```"]
    launch = result.server_info.get("launch_command")
    if isinstance(launch, str) and launch:
        lines.append(secrets.log(launch))
    if config.command_line:
        lines.append(shell_join(secrets.argv(config.command_line)))
    else:
        lines.append("# run through the Python API; configuration as above")
    lines.append("```")
    return lines


def _note_lines(result: Result, config: BenchConfig, secrets: Secrets) -> list[str]:
    """The Notes: the user's, the run's, the server's, then the prefix cache's word on the prompts' seed."""
    extra_notes = list(result.server_info.get("notes") or [])
    seed_note = result.prefix_cache.seed_note(config, result.workload_info) if result.prefix_cache is not None \
        else None
    if seed_note:
        extra_notes.append(seed_note)
    # one item each
    return [f"- {secrets.log(' '.join(str(note).splitlines()))}"
            for note in [*config.card_notes, *result.notes, *extra_notes]]


def _session_tables(sessions: Mapping[str, Any]) -> list[str]:
    """Sessions in a table like the others, then TTFT against history length, one row per turn index."""
    turns, duration = sessions["turns_completed"], sessions["duration_s"]
    lines = _table([
        ("Sessions", f"{sessions['sessions']} ({sessions['completed']} completed, {sessions['ended_by_failure']} "
                     f"ended by a failed turn, {sessions['cut_short']} cut short by the run's end, "
                     f"{sessions['not_started']} not started)"),
        ("Turns completed per session", f"mean {_num(turns['mean'])} · min {_num(turns['min'], 0)} · max "
                                        f"{_num(turns['max'], 0)}"),
        ("Session duration (s)", f"median {_num(duration['median'])} · p99 {_num(duration['p99'])}"),
    ])
    lines += ["", "| Turn | Completed | TTFT p50 (ms) | TTFT p99 (ms) | Mean prompt tokens |", "|---|---|---|---|---|"]
    for t in sessions["per_turn"]:
        lines.append(f"| {t['turn']} | {t['completed']}/{t['requests']} | {_ms(t['ttft_ms_p50'])} | "
                     f"{_ms(t['ttft_ms_p99'])} | {_num(t['mean_prompt_tokens'], 0)} |")
    return lines


# -- the prefix cache beside TTFT ---------------------------------------------------------------------


def _prefix_cache_rows(stats: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The Measured results row beside TTFT: the server's prefix-cache hit rate over the window."""
    if not stats:
        return []
    rate = stats.get("hit_rate")
    if rate is None:
        text = "n/a (" + (stats["notes"][-1] if stats.get("notes") else "no counters") + ")"
    else:
        text = (f"{100 * rate:.2f} % ({stats['hits']:,.0f} of {stats['queries']:,.0f} prompt tokens cached, "
                "the server's counters over the window)")
    return [("Prefix cache hit rate", text)]


def _cached_tokens_rows(cache: PrefixCacheSummary | None) -> list[tuple[str, str]]:
    """The rows beside the hit rate: the cached tokens the server's usage reported per request, and the share
    the workload's own sharing predicts (where a server figure is there to read it against)."""
    if cache is None or cache.observed is None:
        return []
    rows: list[tuple[str, str]] = []
    dist = cache.cached_tokens
    if cache.cached_tokens_share is not None:
        rows.append(("Cached prompt tokens", (
            f"{100 * cache.cached_tokens_share:.2f} % (the server's usage, {cache.requests_reporting} of "
            f"{cache.requests_counted} requests reporting; per request mean {_num(dist.mean, 0)}, median "
            f"{_num(dist.median, 0)}, p99 {_num(dist.p99, 0)})")))
    expected = cache.expected_prefix_share
    rows.append(("Expected prefix share", (
        f"{100 * expected:.2f} % ({cache.expected_from})" if expected is not None else cache.expected_from)
        + (" · WARNED: see the notes" if cache.warning else "")))
    return rows
