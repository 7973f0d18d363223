"""What a run leaves behind: the JSON result file, the Markdown run card, the console table, the JSONL.

The card's text is worded in ``card``; it is written here. The result file is the contract with other
harnesses (documented in docs/result-schema.md): ``vllm bench serve``'s flat keys at the top level,
fastbench's richer fields under ``"fastbench"``. Every file is written atomically (temp file in the
same directory, fsync, ``os.replace``), so a reader never sees half a file. No secret of the run is
written anywhere: each file passes the run's ``redact.Secrets`` (a server may echo the key into an error).
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from fastbench._version import __version__
from fastbench.atomicfile import write_bytes_atomic
from fastbench.config import BenchConfig
from fastbench.datasetoptions import flattened
from fastbench.exceptions import ConfigError
from fastbench.redact import NO_SECRETS, Secrets, redact_headers, redact_text
from fastbench.results import adapters, agentic, failures, pooling, steady
from fastbench.results.cache import LABEL as PREFIX_CACHE_LABEL
from fastbench.results.cache import summary_to_dict
from fastbench.results.definitions import DEFINITIONS, histogram_unit
from fastbench.results.figures import error_name
from fastbench.results.notes import console_notes, wrapped
from fastbench.results.records import COL, HDR_DIGITS, HDR_HIGHEST, HDR_LOWEST, ErrorClass, RunData, UsageSource
from fastbench.results.result import Distribution, Result
from fastbench.results.vllm_keys import (
    percentile_word,
    result_date,
    selected_percentiles,
    to_vllm_keys,
    vllm_backend,
)

RESULT_SCHEMA_VERSION = 1
HISTOGRAM_ENCODING = "HdrHistogram V2 compressed, base64 (hdrh HdrHistogram.encode / decode)"


# -- the result file -----------------------------------------------------------------------------------


def config_to_dict(config: BenchConfig) -> dict[str, Any]:
    """Every BenchConfig field except ``api_key`` (replaced by ``api_key_set``), every dataset's options
    under their flat names (``random_input_len``: the defaults where none were given); command line redacted."""
    out: dict[str, Any] = {}
    secrets = Secrets.of_config(config)
    for field in dataclasses.fields(config):
        if field.name == "api_key":
            out["api_key_set"] = config.api_key is not None
            continue
        value = getattr(config, field.name)
        if field.name == "command_line":
            value = secrets.argv(value)
        elif field.name == "base_url" and value is not None:
            value = redact_text(value)
        elif field.name == "headers":
            value = redact_headers(value)
        elif field.name == "dataset_options":  # each dataset's options under their flat names, as ever
            out.update(flattened(value))
            continue
        elif field.name == "launch" and value is not None:
            value = dataclasses.asdict(value)
            value["engine_args"] = secrets.argv(value["engine_args"])
            value["docker_args"] = secrets.argv(value["docker_args"])
            value["env"] = [secrets.log(item) for item in value["env"]]
        elif isinstance(value, tuple):
            value = list(value)
        out[field.name] = value
    return out


def distribution_to_dict(dist: Distribution) -> dict[str, Any]:
    """A distribution with its unit in every key: ``mean_ms`` ... or ``mean_tok_s`` ..."""
    suffix = "ms" if dist.unit == "ms" else "tok_s"
    values = {
        "mean": dist.mean,
        "median": dist.median,
        "p90": dist.p90,
        "p99": dist.p99,
        "p99.9": dist.p99_9,
        "max": dist.max,
        "min": dist.min,
        "std": dist.std,
    }
    out: dict[str, Any] = {"count": dist.count}
    out.update({f"{name}_{suffix}": value for name, value in values.items()})
    return out


def histogram_to_dict(name: str, hist: Any) -> dict[str, Any]:
    return {
        "unit": histogram_unit(name),
        "count": int(hist.get_total_count()),
        "lowest_trackable": HDR_LOWEST,
        "highest_trackable": HDR_HIGHEST,
        "significant_digits": HDR_DIGITS,
        "encoding": HISTOGRAM_ENCODING,
        "data": hist.encode().decode("ascii"),
    }


def result_to_json_dict(
    result: Result, config: BenchConfig, *, environment: Mapping[str, Any]
) -> dict[str, Any]:
    """The result file: vllm's flat keys at the top level, fastbench's fields under ``"fastbench"``."""
    secrets = Secrets.of_config(config)
    server = dict(result.server_info)
    if isinstance(server.get("launch_command"), str):
        server["launch_command"] = secrets.log(server["launch_command"])
    tp = result.throughput
    fastbench: dict[str, Any] = {
        "schema_version": RESULT_SCHEMA_VERSION,
        "fastbench_version": __version__,
        "created_at": result.created_at,
        "definitions": dict(DEFINITIONS),
        "config": config_to_dict(config),
        "command_line": secrets.argv(config.command_line),
        "environment": dict(environment),
        "workload": dict(result.workload_info),
        "server": server,
        "run": {
            "duration_s": result.duration_s,
            "cap_hit": result.cap_hit,
            "stopped_reason": result.stopped_reason,
            "collapsed": result.collapsed,
            "collapse_reason": result.collapse_reason,
        },
        "counts": dataclasses.asdict(result.counts),
        "tokens": {
            "total_input": result.total_input_tokens,
            "total_output": result.total_output_tokens,
            "mean_tokens_per_chunk": result.mean_tokens_per_chunk,
        },
        "throughput": {
            "request_throughput_per_s": tp.request_throughput,
            "request_goodput_per_s": tp.request_goodput,
            "good_requests": tp.good_requests,
            "goodput_slos_ms": dict(config.goodput),
            "input_throughput_tok_s": tp.input_throughput,
            "output_throughput_tok_s": tp.output_throughput,
            "total_token_throughput_tok_s": tp.total_token_throughput,
            "prefill_throughput_tok_s": tp.prefill_throughput,
        },
        "distributions": {name: distribution_to_dict(d) for name, d in result.distributions.items()},
        "errors": {name: dataclasses.asdict(e) for name, e in result.errors.items()},
        "usage": dataclasses.asdict(result.usage),
        "timestamps": dataclasses.asdict(result.timestamps),
        "skew": distribution_to_dict(result.distributions["skew"])
        if "skew" in result.distributions
        else None,
        "client": dataclasses.asdict(result.client),
        "histograms": {name: histogram_to_dict(name, h) for name, h in result.histograms.items()},
        "notes": list(result.notes),
    }
    if result.workers is not None:  # --workers: the processes and each one's figures
        fastbench["workers"] = result.workers
    if result.sessions is not None:
        fastbench["sessions"] = result.sessions
    if result.agentic is not None:  # agent trees (results.agentic)
        fastbench["agentic"] = result.agentic
    if result.adapters is not None:  # --lora-modules: each adapter's figures (results.adapters)
        fastbench["adapters"] = result.adapters
    if result.steady is not None:
        fastbench["steady"] = steady.section(result.steady) | {
            "distributions": {name: distribution_to_dict(d) for name, d in result.steady.distributions.items()}}
    if result.prefix_cache is not None:
        fastbench["prefix_cache"] = summary_to_dict(result.prefix_cache)
    if result.timeline is not None:  # per second: in flight, rates, latency quantiles, the server's gauges
        fastbench["timeline"] = result.timeline
    out = to_vllm_keys(result)
    if result.pooling is not None:  # whole answers: inputs/s, and null for what streams (results.pooling)
        fastbench["pooling"] = pooling.section(result.pooling)
        fastbench["throughput"] |= {key: None for key in ("output_throughput_tok_s", "prefill_throughput_tok_s")}
        out.update(pooling.flat_keys(result.pooling, out))
    spec = server.get("spec_decode_stats") or {}
    out.update(spec.get("vllm_keys") or {})  # vllm bench serve's spec_decode_* keys, over the window
    out.update(steady.flat_keys(result.steady))  # fastbench's, beside vllm's whole-window figures
    if result.prefix_cache is not None:  # fastbench's flat keys beside vllm's: what a sweep or a dashboard reads
        out.update(result.prefix_cache.flat())
    out["fastbench"] = fastbench
    return secrets.obj(out)  # a key a server echoed into an error message, a token an engine logged


# -- atomic writes --------------------------------------------------------------------------------------


def check_output_path(flag: str, path: str | os.PathLike[str]) -> None:
    """Raise ConfigError unless ``path`` can be written as :func:`write_bytes_atomic` writes it.

    Called before a run, so that a finished run is never thrown away for want of a place to put it.
    The directory is probed with a real temp file: permission bits alone do not tell (root, ACLs,
    read-only mounts).
    """
    target = Path(path)
    if not str(path):
        raise ConfigError(f"{flag} needs a file path")
    if target.is_dir():
        raise ConfigError(f"{flag} {path}: is a directory; give a file path")
    if target.exists() and not target.is_file():  # a device or a pipe: os.replace would swap it out
        raise ConfigError(f"{flag} {path}: is not a regular file")
    directory = target.parent
    if not directory.is_dir():
        why = "is not a directory" if directory.exists() else "does not exist"
        raise ConfigError(f"{flag} {path}: {directory} {why}")
    probe = directory / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write in {directory} ({exc.strerror or exc})") from None


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    option = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
    write_bytes_atomic(path, orjson.dumps(obj, option=option))


def write_card_atomic(path: str | os.PathLike[str], text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


# -- vllm bench serve's result file (--save-result, --append-result) ----------------------------------


def vllm_result_path(result: Result, config: BenchConfig) -> str:
    """Where --save-result writes, named as vllm bench serve names it:
    ``{label}-{rate}qps[-concurrency{N}]-{model}-{date}.json`` (a ramp-up:
    ``{label}-ramp-up-{strategy}-{start}qps-{end}qps...``) in --result-dir (default: here), or
    --result-filename there. The label is --label or the backend; the model the last part of --model
    (else of the served model); the concurrency only when --max-concurrency was given; the rate as
    vllm prints its float (``inf``, ``10.0``)."""
    if config.result_filename:
        name = config.result_filename
    else:
        label = config.label or vllm_backend(config)
        model = str(config.model or result.server_info.get("model") or "model").split("/")[-1]
        concurrency = f"-concurrency{config.concurrency}" if config.concurrency is not None else ""
        if config.ramp_up_strategy is not None:
            rate = (f"ramp-up-{config.ramp_up_strategy}-{_vllm_number(config.ramp_up_start_rps)}qps-"
                    f"{_vllm_number(config.ramp_up_end_rps)}qps")
        else:
            rate = f"{float(config.request_rate) if config.request_rate is not None else math.inf}qps"
        name = f"{label}-{rate}{concurrency}-{model}-{result_date(result)}.json"
    return os.path.join(os.fspath(config.result_dir), name) if config.result_dir else name


def _vllm_number(value: float | None) -> str:
    """A ramp-up rate as vllm writes its int flags: 10, not 10.0."""
    return f"{value:g}" if value is not None else "None"


def write_vllm_result(path: str | os.PathLike[str], doc: Any, *, append: bool = False) -> None:
    """The result as vllm bench serve saves it: one line of JSON; ``append`` adds it to what the file
    holds, after a newline (vllm's --append-result), still through a temp file and a rename."""
    line = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    before = b""
    if append:
        try:
            before = Path(path).read_bytes()
        except FileNotFoundError:
            pass
    write_bytes_atomic(path, before + b"\n" + line if before else line)


# -- the console table ----------------------------------------------------------------------------------


def session_console_lines(sessions: Mapping[str, Any]) -> list[str]:
    """The multi-turn block of the console summary: sessions, then one line per turn index."""
    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}"

    turns, duration = sessions["turns_completed"], sessions["duration_s"]
    lines = [f"{'Multi-turn sessions':-^50}",
             f"{'Sessions completed / failed / cut short:':<40} {sessions['completed']} / "
             f"{sessions['ended_by_failure']} / {sessions['cut_short']}",
             f"{'Turns completed per session, mean:':<40} {ms(turns['mean'])}",
             f"{'Session duration, median (s):':<40} {ms(duration['median'])}",
             f"{'Turn':>4} {'done':>6} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} {'prompt tok':>11}"]
    for t in sessions["per_turn"]:
        prompt = "n/a" if t["mean_prompt_tokens"] is None else f"{t['mean_prompt_tokens']:.0f}"
        lines.append(f"{t['turn']:>4} {t['completed']:>6} {ms(t['ttft_ms_p50']):>12} {ms(t['ttft_ms_p99']):>12} "
                     f"{prompt:>11}")
    return lines


def render_console(result: Result) -> str:
    """A summary in the shape of vllm bench serve's result block, with fastbench's extra lines."""
    cfg, n, tp, d = result.config, result.counts, result.throughput, result.distributions
    lines: list[str] = []

    def head(title: str, fill: str = "-") -> None:
        lines.append(f"{title:{fill}^50}")

    def row(label: str, value: Any, digits: int = 2) -> None:
        if value is None:
            text = "n/a"
        elif isinstance(value, float):
            text = f"{value:.{digits}f}"
        else:
            text = str(value)
        lines.append(f"{label:<40} {text:<10}")

    head(" Serving Benchmark Result ", "=")
    if result.stopped_reason == "server went away":  # load.gone's rule held: say it before any figure
        lines += wrapped(f"SERVER WENT AWAY: every connection refused for {cfg.server_gone_s:g} s; the run stopped "
                         "there and keeps what it measured", "")
    if result.collapsed:
        lines.append(f"COLLAPSED RUN: {result.collapse_reason}")
        lines.append("(its throughput figures describe no working server: do not plot them)")
    failure = failures.most_common_failure(result)
    if failure is not None:  # the server's own words and what to check, not only a count by class
        lines += wrapped(failure[0], "") + wrapped(failure[1], "  check: ")
    row("Successful requests:", n.completed)
    row("Failed requests:", n.failed)
    if n.cancelled or n.not_started:
        row("Cancelled / not started:", f"{n.cancelled} / {n.not_started}")
    if cfg.effective_concurrency is not None:  # as vllm bench serve: no row without a cap
        row("Maximum request concurrency:", cfg.effective_concurrency)
    if cfg.request_rate is not None:
        row("Request rate (req/s):", float(cfg.request_rate))
    elif cfg.ramp_up_strategy is not None:
        row("Request rate ramp-up (req/s):", cfg.rate_text)
    row("Benchmark duration (s):", result.duration_s)
    row("Total input tokens:", result.total_input_tokens)
    row("Total generated tokens:", result.total_output_tokens)
    row("Request throughput (req/s):", tp.request_throughput)
    if tp.request_goodput is not None:
        row("Request goodput (req/s):", tp.request_goodput)
    if result.pooling is not None:
        lines.extend(pooling.console_lines(result.pooling))
    else:
        row("Output token throughput (tok/s):", tp.output_throughput)
        row("Steady-state output (tok/s):", steady.console_text(result.steady))
    row("Peak concurrent requests:", result.client.max_concurrent_requests)
    row("Total Token throughput (tok/s):", tp.total_token_throughput)
    sections = (
        ("ttft", "TTFT", "Time to First Token"),
        ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
        ("itl", "ITL", "Inter-token Latency"),
        ("e2el", "E2EL", "End-to-end Latency"),
    )
    chosen = selected_percentiles(cfg)
    prefix_rate = (result.server_info.get("prefix_cache_stats") or {}).get("hit_rate")
    cache = result.prefix_cache
    for key, short, title in sections:
        if result.pooling is not None and key != "e2el":
            continue  # no stream: said once above
        dist = d.get(key) or Distribution.empty("ms")
        head(title)
        row(f"Mean {short} (ms):", dist.mean)
        row(f"Median {short} (ms):", dist.median)
        if chosen is None:
            row(f"P99 {short} (ms):", dist.p99)
        elif key in chosen[0]:  # --percentile-metrics / --metric-percentiles
            for p in chosen[1]:
                row(f"P{percentile_word(p)} {short} (ms):", dist.selected.get(p))
        if key == "ttft" and prefix_rate is not None:  # the server's counters over the window
            row("Prefix cache hit rate (%):", 100 * prefix_rate)
        if key == "ttft" and cache is not None:
            if cache.cached_tokens_share is not None:  # the server's usage, per request
                row("Cached prompt tokens (%):", 100 * cache.cached_tokens_share)
            if cache.expected_prefix_share is not None and cache.observed is not None:
                row("Expected from the workload (%):", 100 * cache.expected_prefix_share)
            if cache.warning:
                lines += wrapped(PREFIX_CACHE_LABEL + cache.warning, "WARNING ")
    head("fastbench")
    prefill, decode = d.get("prefill_rate"), d.get("decode_rate")
    row("Prefill rate, median (tok/s):", prefill.median if prefill else None)
    row("Per-stream decode, median (tok/s):", decode.median if decode else None)
    itl_token = d.get("itl_token")
    row("ITL per token, median (ms):", itl_token.median if itl_token else None)
    row("Mean tokens per chunk:", result.mean_tokens_per_chunk)
    if cfg.open_loop:
        raw, late = d.get("ttft_raw"), d.get("lateness")
        row("Median TTFT from send (ms):", raw.median if raw else None)
        # sent - scheduled: with a cap it holds the wait for a slot too, so not "the client's lateness"
        row("P99 scheduled to sent (ms):", late.p99 if late else None)
        late_share = result.client.late_share
        row("Sent > 0.1 ms late (%):", None if late_share is None else 100 * late_share, 1)
    skew = d.get("skew")
    if skew is not None and skew.count:
        row("P99 client skew (ms):", skew.p99, 3)
    row("Timestamps:", result.timestamps.source.lower())
    ratio = result.timestamps.multi_event_read_ratio
    row("Multi-event reads (%):", None if ratio is None else 100 * ratio, 1)
    row("Client CPU per event (us):", result.client.cpu_per_event_us, 1)
    if result.sessions is not None:
        lines += session_console_lines(result.sessions)
    if result.agentic is not None:
        lines += agentic.console_lines(result.agentic, cache.hit_rate if cache is not None else None)
    if result.adapters is not None:
        lines += adapters.console_lines(result.adapters)
    spec = (result.server_info.get("spec_decode_stats") or {}).get("vllm_keys")
    if spec:  # vllm bench serve's block, from the server's counters over the window
        head("Speculative Decoding")
        row("Acceptance rate (%):", spec["spec_decode_acceptance_rate"])
        row("Acceptance length:", spec["spec_decode_acceptance_length"])
        row("Drafts:", spec["spec_decode_num_drafts"])
        row("Draft tokens:", spec["spec_decode_draft_tokens"])
        row("Accepted tokens:", spec["spec_decode_accepted_tokens"])
        rates = spec["spec_decode_per_position_acceptance_rates"]
        row("Per-position acceptance (%):", ", ".join(f"{100 * r:.2f}" for r in rates) if rates else None)
    lines.append("=" * 50)
    lines += console_notes(result.notes, "* ")  # each whole, wrapped
    return "\n".join(lines) + "\n"


# -- per-request JSONL -----------------------------------------------------------------------------------

_TIME_COLUMNS = ("scheduled_ns", "sent_ns", "first_byte_ns", "first_token_ns", "first_answer_ns", "end_ns")


def _request_status(row: Sequence[int]) -> str:
    if not any(row):
        return "not_started"
    code = row[COL["error"]]
    if code == ErrorClass.OK:
        return "completed" if row[COL["end_ns"]] > 0 else "cancelled"
    return "cancelled" if code == ErrorClass.CANCELLED else "failed"


def detailed_records(data: RunData) -> Iterable[dict[str, Any]]:
    """One dict per row of the request table (never-started requests included, marked so)."""
    for position, values in enumerate(data.rows.tolist()):
        status = _request_status(values)
        started = status != "not_started"
        index = values[COL["index"]] if started else position
        v = dict(zip(COL, values))
        rec: dict[str, Any] = {"id": index, "status": status}
        for name in _TIME_COLUMNS:
            stamp = v[name]
            rec[name] = stamp or None
            rec[name[:-3] + "_ms"] = (stamp - data.start_ns) / 1e6 if stamp else None
        sched, sent, first, end = v["scheduled_ns"], v["sent_ns"], v["first_token_ns"], v["end_ns"]
        start = sched if data.open_loop else sent  # as the result file's TTFT and E2E (metrics.DEFINITIONS)
        rec["ttft_ms"] = (first - start) / 1e6 if first and start else None
        rec["ttft_raw_ms"] = (first - sent) / 1e6 if first and sent else None
        rec["e2el_ms"] = (end - start) / 1e6 if status == "completed" else None
        out = v["output_tokens"]
        rec["tpot_ms"] = (
            (end - first) / 1e6 / (out - 1) if status == "completed" and first and out >= 2 else None
        )
        rec["connect_ms"] = v["connect_ns"] / 1e6 if v["connect_ns"] else None
        rec["prompt_tokens"] = v["prompt_tokens"] if v["prompt_tokens"] >= 0 else None
        rec["cached_tokens"] = v["cached_tokens"] if v["cached_tokens"] >= 0 and started else None
        rec["output_tokens"] = out
        rec["chunks"] = v["chunks"]
        rec["events"] = v["events"]
        rec["max_chunk_tokens"] = v["max_chunk_tokens"]
        try:
            usage = UsageSource(v["usage_source"]).name
        except ValueError:
            usage = f"UNKNOWN_{v['usage_source']}"
        rec["usage_source"] = usage if started else None
        rec["http_status"] = v["http_status"] or None
        rec["error"] = error_name(v["error"]) if v["error"] else None
        rec["error_message"] = data.error_messages.get(index) if started and v["error"] else None
        outputs = data.extra.get("outputs")
        if outputs is not None:  # --save-outputs
            text, reasoning = outputs.get(index, (None, None))
            rec["output_text"] = text
            rec["reasoning_text"] = reasoning
        yield rec


def write_detailed_jsonl(path: str | os.PathLike[str], data: RunData, secrets: Secrets = NO_SECRETS) -> int:
    """Write one JSON line per request (see :func:`detailed_records`), atomically; return the line count.

    Times are CLOCK_MONOTONIC ns (``*_ns``, null when it did not happen) and ms from the start of
    the measured window (``*_ms``).
    """
    records = detailed_jsonl_bytes(data, secrets)
    write_bytes_atomic(path, records)
    return records.count(b"\n")  # orjson escapes a newline inside a string: one per record


def detailed_jsonl_bytes(data: RunData, secrets: Secrets = NO_SECRETS) -> bytes:
    """The per-request records as :func:`write_detailed_jsonl` writes them, in memory (for the store),
    with ``secrets`` hidden (a server's error message may echo the key it was sent)."""
    records = b"".join(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE) for rec in detailed_records(data))
    return secrets.data(records)
