"""The steps of a run against a ready server, each its own function, in the order ``api.runs`` takes
them: meet the server (ready check, the model it serves, its version, the model's files), reset its prefix
cache, watch the measured window, then gather what the window left (the monitor's report, memory, the
teardown of a server launched for the run, the synthetic server's own counts); and the workload's section
of the result."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import threading
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError, ServerError
from fastbench.load import datasets, lora
from fastbench.results import modelcard
from fastbench.results.observations import MemoryReport, ModelFacts, WindowReport
from fastbench.server import control, launch, modelinfo, prefixcache
from fastbench.server.external import ExternalServer
from fastbench.server.launch import LaunchedServer
from fastbench.server.memoryrun import MemoryRun, memory_report
from fastbench.server.monitor import WindowMonitor

__all__ = ("WindowEnd", "after_window", "meet_server", "model_files", "ready_check", "reset_prefix_cache",
           "server_log_to_keep", "unless_stopped", "watching", "workload_info")

T = TypeVar("T")


async def unless_stopped(work: Awaitable[T], stop: asyncio.Event | None, why: str) -> T:
    """``await work``, abandoned (CancelledError, as for a stop during a launch) once ``stop`` is set."""
    if stop is None:
        return await work
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise asyncio.CancelledError(why)
    return task.result()


# Reading a model's headers takes well under a second (a 262k-token GGUF: 0.5 s); a hung network
# mount must not hold the run.
MODEL_FILES_TIMEOUT_S = 30.0


async def model_files(watched: LaunchedServer | ExternalServer, served: str,
                       stop: asyncio.Event | None) -> ModelFacts | str | None:
    """modelinfo.facts_or_error for the model the server loaded: a launched server's model, with the
    environment and ``--revision`` it was given; else what an attached server names (vLLM's root:
    the path behind a served name). In a daemon thread, so that files that never answer cost at
    most MODEL_FILES_TIMEOUT_S and never the exit."""
    environ: dict[str, str] | None = None
    revision = None
    if isinstance(watched, LaunchedServer):
        model = watched.launch.model
        environ = {**os.environ, **dict(e.split("=", 1) for e in watched.launch.env if "=" in e)}
        revision = launch.engine_option(watched.launch.engine_args, "--revision")
    else:
        model = served
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[ModelFacts | str | None] = loop.create_future()

    def work() -> None:
        info = modelinfo.facts_or_error(model, environ, revision)

        def deliver() -> None:
            if not answer.done():  # not timed out or abandoned meanwhile
                answer.set_result(info)

        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(deliver)

    threading.Thread(target=work, name="fastbench-model-files", daemon=True).start()
    try:
        return await unless_stopped(asyncio.wait_for(answer, MODEL_FILES_TIMEOUT_S), stop,
                                     "interrupted while reading the model's files")
    except asyncio.TimeoutError:
        return f"{model}: its files did not answer in {MODEL_FILES_TIMEOUT_S:g} s"


async def meet_server(config: BenchConfig, base_url: str, session: Any, watched: LaunchedServer | ExternalServer,
                      synthetic: Any, stop: asyncio.Event | None) -> tuple[str, int | None, dict[str, Any]]:
    """The server made ready and asked what it serves: the model name sent, its context length, and the
    result's server section so far (the model, its version, what its files say)."""
    server_info: dict[str, Any] = {"base_url": base_url, "synthetic": synthetic is not None}
    if config.ready_check_timeout_s and synthetic is None and not isinstance(watched, LaunchedServer):
        await unless_stopped(ready_check(base_url, session, config), stop, "interrupted during the ready check")
    models, max_model_len, roots, metas = await control.fetch_model_info(base_url, session, config.api_key)
    # the name sent: --served-model-name, else --model (as vllm bench serve), else what the server lists first
    asked, flag = ((config.served_model_name, "--served-model-name") if config.served_model_name
                   else (config.model, "--model"))
    model = asked or (models[0] if models else None)
    if model is None:
        raise ServerError(f"{base_url}/v1/models lists no model; pass --model")
    if asked and models and asked not in models:
        raise ConfigError(f"{flag} {asked!r} is not served at {base_url} (it serves: {', '.join(models[:5])})")
    server_info.update(model=model, max_model_len=max_model_len,
                       version=await control.server_version(base_url, session, config.api_key))
    if synthetic is None:  # the model's own files, where this machine has them: family, parameters
        found = await model_files(watched, roots.get(model) or model, stop)
        if model in metas:  # the server's own account of what it loaded (llama.cpp)
            server_info["server_model_meta"] = metas[model]
        server_info.update(modelcard.model_sections(found, metas.get(model)))
    return model, max_model_len, server_info


async def reset_prefix_cache(config: BenchConfig, base_url: str, server_info: dict[str, Any]) -> list[str]:
    """--reset-prefix-cache, before the warm-ups (they may be there to fill the cache): what it did goes in
    ``server_info``; returns the card's note where it was not done."""
    server_info["prefix_cache_reset"] = prefixcache.not_asked()
    if not config.reset_prefix_cache:
        return []
    reset = await prefixcache.reset_prefix_cache(base_url, config.api_key, verify_tls=not config.insecure)
    server_info["prefix_cache_reset"] = reset
    return [] if reset["done"] else [f"prefix cache not reset (--reset-prefix-cache): {reset['why_not']}"]


@contextlib.asynccontextmanager
async def watching(monitor: WindowMonitor) -> AsyncIterator[None]:
    """The window monitor for as long as the load runs (its /metrics scrapes, the server's health)."""
    await monitor.start()
    try:
        yield
    finally:
        await monitor.finish()


@dataclasses.dataclass
class WindowEnd:
    """What the measured window left, gathered before the run's figures are worded."""

    window: WindowReport
    memory_seen: MemoryReport | None  # None where memory was not sampled
    launched_here: LaunchedServer | None  # a server launched for this run alone, now stopped
    server_log: str | None  # what the store keeps of a launched server's log
    died: str | None  # how the server died during the run, if it did
    synthetic_stats: dict[str, Any] | None
    later_notes: list[str]  # the card's notes on what went wrong after the window


async def after_window(config: BenchConfig, monitor: WindowMonitor, watched: LaunchedServer | ExternalServer,
                       synthetic: Any, memory: MemoryRun | None, server_info: dict[str, Any],
                       shared_launch: bool) -> WindowEnd:
    """The monitor's report, the memory sampled, a server launched for this run stopped (here, not only
    in arun's finally: the result says how the teardown went), and the synthetic server's counts."""
    window = monitor.report()
    if shared_launch:
        window = window.for_shared_launch()
    if synthetic is not None or str(server_info.get("version") or "").startswith("fastbench-synthetic"):
        # the synthetic server's /metrics mimic vLLM's names: they tell no engine
        window = dataclasses.replace(window, metrics=dataclasses.replace(window.metrics, engine=None))
    memory_seen: MemoryReport | None = None
    launched_here = watched if isinstance(watched, LaunchedServer) and not shared_launch else None
    if memory is not None:  # stopped before teardown: from the launch (a shared one's: this run) to window end
        before = synthetic is not None or launched_here is not None
        memory_seen = memory_report(memory.stop(), watched, baseline_before_server=before)
    if launched_here is not None:
        await launched_here.astop()
    server_log = server_log_to_keep(watched, shared_launch) if config.store is not None else None
    died = monitor.server_died
    synthetic_stats = None
    synthetic_lost: list[str] = []
    if synthetic is not None:
        try:
            synthetic_stats = synthetic.stats()
        except OSError as exc:  # it died: what was measured stands, the run failed
            synthetic_lost.append(f"the built-in synthetic server stopped answering ({exc})")
            died = died or synthetic_lost[0]
    return WindowEnd(window, memory_seen, launched_here, server_log, died, synthetic_stats, synthetic_lost)


def workload_info(config: BenchConfig, work: datasets.Workload) -> dict[str, Any]:
    """The result's workload section: how the requests were made, and each row's part in them."""
    info: dict[str, Any] = {
        "dataset": work.dataset,
        "input_length_source": work.input_length_source,
        "screened_out": work.screened_out,
        "screened_reason": work.screened_reason,
        "max_model_len": work.max_model_len,
        "notes": work.notes,
        "prompt_seed": datasets.prompt_seed(config),
        "prompt_lens": [spec.prompt_len for spec in work.requests],
        "max_tokens": [spec.max_tokens for spec in work.requests],
        "shared_prompt_tokens": work.shared_prompt_tokens,  # what the prompts share (load.sharing)
        "inputs_per_request": work.inputs_per_request,  # the APIs answered whole (load.pooling)
    }
    if work.adapter_of_row is not None:  # --lora-modules: each request's adapter (results.adapters)
        info.update(adapters=lora.adapter_names(config), adapter_of_request=work.adapter_of_row)
    if work.sessions is not None:
        info["session_of_row"] = work.sessions.session_of_row
        info["turn_of_row"] = work.sessions.turn_of_row
    if work.trees is not None:  # the agent trees' rows (results.agentic)
        trees = work.trees
        info.update(tree_of_row=trees.tree_of_row, agent_of_row=trees.agent_of_row,
                    role_of_row=trees.role_of_row, agent_turn_of_row=trees.agent_turn_of_row,
                    tool_result_of_row=trees.tool_result_of_row, trees=trees.trees, agentic_slots=trees.slots)
    return info


# Between tries of the ready check: short, as a server that just came up should be measured soon.
READY_CHECK_INTERVAL_S = 1.0


async def ready_check(base_url: str, session: Any, config: BenchConfig) -> None:
    """--ready-check-timeout-sec: ask /v1/models until it answers, for at most that long (vllm bench
    serve sends a test request instead; a server that lists its model is ready to take one)."""
    deadline = asyncio.get_running_loop().time() + config.ready_check_timeout_s
    while True:
        try:
            await control.fetch_model_info(base_url, session, config.api_key, timeout_s=READY_CHECK_INTERVAL_S * 5)
            return
        except ServerError as exc:
            if asyncio.get_running_loop().time() + READY_CHECK_INTERVAL_S > deadline:
                raise ServerError(f"not ready after --ready-check-timeout-sec {config.ready_check_timeout_s:g}: "
                                  f"{exc}") from None
        await asyncio.sleep(READY_CHECK_INTERVAL_S)


# What the store keeps of a launched server's loading phase: vLLM's is ~100 KB; one that logs every
# warm-up request would otherwise fill the store.
SERVER_LOG_KEPT_CHARS = 256 * 1024


def server_log_to_keep(watched: LaunchedServer | ExternalServer, shared_launch: bool = False) -> str | None:
    """A launched server's log for the store: from its launch to the measured window (the last
    SERVER_LOG_KEPT_CHARS of it), then the window's warnings, errors and "SpecDecoding metrics"
    lines; secrets redacted (a launch serving several runs: up to its first window, the same for each).
    None for a server fastbench did not launch (it has no log here)."""
    if not isinstance(watched, LaunchedServer):
        return None
    if shared_launch:
        loading = watched.log_text(until_first_window=True)
        until = (f"its first measured run (launched once for several runs, this is its run "
                 f"{watched.log.windows_ended}; all of them in {watched.log_path})")
    else:
        loading = watched.log_text(until_window=True)
        until = "the measured window"
    cut = len(loading) > SERVER_LOG_KEPT_CHARS
    parts = [f"# fastbench: the server's log from its launch to {until}"
             f"{' (its last 256 KiB)' if cut else ''}\n",
             loading[-SERVER_LOG_KEPT_CHARS:],
             "\n# fastbench: the measured window's warnings, errors and \"SpecDecoding metrics\" lines\n",
             *(line + "\n" for line in watched.window_log_lines())]
    return watched.redact("".join(parts))
