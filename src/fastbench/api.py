"""The Python API: ``run(config) -> Result`` and ``arun(config)`` for an existing event loop."""

from __future__ import annotations

import asyncio
import os
import platform
import socket
import sys
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from . import metrics, report, server, workload
from ._version import __version__
from .config import BenchConfig
from .exceptions import ConfigError, ServerError
from .loadgen import LoadGenerator, LoadPlan, Target
from .metrics import Result

__all__ = ("run", "arun")


def validate(config: BenchConfig) -> None:
    """Reject options that cannot work, with a one-line message saying what to fix."""
    if config.concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1, got {config.concurrency}")
    if config.request_rate is not None and not config.request_rate > 0:
        raise ConfigError(f"--request-rate must be a positive number of requests/s, got {config.request_rate}")
    if not config.burstiness > 0:
        raise ConfigError(f"--burstiness must be > 0, got {config.burstiness}")
    if config.num_prompts < 1:
        raise ConfigError(f"--num-prompts must be at least 1, got {config.num_prompts}")
    if config.num_warmups < 0:
        raise ConfigError(f"--num-warmups must be >= 0, got {config.num_warmups}")
    if config.max_seconds is not None and not config.max_seconds > 0:
        raise ConfigError(f"--max-seconds must be > 0, got {config.max_seconds}")
    if config.request_timeout_s is not None and not config.request_timeout_s > 0:
        raise ConfigError(f"--request-timeout must be > 0, got {config.request_timeout_s}")
    if not 0 <= config.coalesce_ms <= 1000:
        raise ConfigError(f"--coalesce-ms must be between 0 and 1000, got {config.coalesce_ms}")
    if config.max_error_rate is not None and not 0 <= config.max_error_rate <= 1:
        raise ConfigError(f"--max-error-rate must be between 0 and 1, got {config.max_error_rate}")
    for key in config.goodput:
        if key not in ("ttft", "tpot", "e2el"):
            raise ConfigError(f"--goodput takes ttft, tpot and e2el, got {key!r}")
    if config.base_url is not None:
        Target.parse(config.base_url, config.endpoint)
    if not config.metrics_interval_s >= 0:
        raise ConfigError(f"--metrics-interval must be >= 0, got {config.metrics_interval_s}")
    if config.memory_interval_s is not None and not config.memory_interval_s >= 0:
        raise ConfigError(f"--memory-interval must be >= 0, got {config.memory_interval_s}")
    launch = config.launch
    if launch is not None:
        if config.base_url is not None:
            raise ConfigError("--base-url attaches to a running server and --launch starts one: give one of them")
        if not launch.model:
            raise ConfigError("--launch needs --launch-model MODEL")
        if not launch.ready_timeout_s > 0:
            raise ConfigError(f"--ready-timeout must be > 0, got {launch.ready_timeout_s}")
        if not launch.stop_grace_s >= 0:
            raise ConfigError(f"--server-stop-grace must be >= 0, got {launch.stop_grace_s}")


def run(config: BenchConfig) -> Result:
    """Run a benchmark to the end and return its Result (on uvloop when it is installed).

    :param config: the run's options.
    :raises ConfigError: options that cannot work (before anything is sent).
    :raises ServerError: the server cannot be reached or does not serve the model.
    """
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency, but the API does not need it
        return asyncio.run(arun(config))
    return uvloop.run(arun(config))


async def arun(
    config: BenchConfig,
    *,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    stop: asyncio.Event | None = None,
) -> Result:
    """Run a benchmark inside the running event loop (any asyncio loop) and return its Result.

    With ``config.base_url`` None, the built-in synthetic server is started in its own
    process for the run and stopped after it.

    :param on_progress: called about twice a second with counters (completed, in flight, ...).
    :param stop: set it to end the run early (e.g. on a signal): requests in flight are cancelled,
        and the Result, and any result files, say the run was interrupted and hold what was measured.
    """
    validate(config)
    synthetic = None
    launched = None
    base_url = config.base_url
    # started before any launch, so that its baseline is the machine without the server
    memory = server.start_memory_sampler(config)
    try:
        if config.launch is not None:
            launched = server.make_server(config.launch, api_key=config.api_key,
                                          log_dir=server.log_dir_for(config))
            await launched.astart(stop)  # fails fast (ServerLaunchError) and stops what it started
            base_url = launched.base_url
        elif base_url is None:
            from .synthetic import SyntheticServer

            synthetic = SyntheticServer(*config.synthetic_args)
            await asyncio.get_running_loop().run_in_executor(None, synthetic.start)
            base_url = synthetic.base_url
        watched = launched or server.ExternalServer(
            base_url, api_key=config.api_key, pid=synthetic.pid if synthetic is not None else None)
        if memory is not None and watched.pid is not None:
            memory.set_server_pid(watched.pid)
        return await _run_against(config, base_url, synthetic, on_progress, stop, watched=watched,
                                  memory=memory)
    finally:
        if memory is not None:
            memory.stop()
        if synthetic is not None:
            synthetic.stop()
        if launched is not None:
            launched.stop()  # SIGTERM, SIGKILL after the grace period; checks the port is free


async def _run_against(
    config: BenchConfig, base_url: str, synthetic: Any,
    on_progress: Callable[[dict[str, Any]], None] | None,
    stop: asyncio.Event | None = None,
    *,
    watched: server.LaunchedServer | server.ExternalServer,
    memory: server.MemoryRun | None = None,
) -> Result:
    target = Target.parse(base_url, config.endpoint)
    server_info: dict[str, Any] = {"base_url": base_url, "synthetic": synthetic is not None}
    async with aiohttp.ClientSession() as session:
        models, max_model_len = await workload.fetch_model_info(base_url, session, config.api_key)
        model = config.model or (models[0] if models else None)
        if model is None:
            raise ServerError(f"{base_url}/v1/models lists no model; pass --model")
        if config.model and models and config.model not in models:
            raise ConfigError(f"--model {config.model!r} is not served at {base_url} (it serves: "
                              f"{', '.join(models[:5])})")
        server_info.update(model=model, max_model_len=max_model_len,
                           version=await _server_version(session, base_url))
        tokenize = workload.make_server_tokenize(base_url, session, config.api_key, model)
        work = await workload.build_workload(config, model, max_model_len=max_model_len, tokenize=tokenize)
        plan = LoadPlan(
            bodies=[spec.body for spec in work.requests],
            warmup_bodies=[spec.body for spec in work.warmups],
            concurrency=config.concurrency,
            request_rate=config.request_rate,
            burstiness=config.burstiness,
            seed=config.seed,
            max_seconds=config.max_seconds,
            request_timeout_s=config.request_timeout_s,
            max_error_rate=config.max_error_rate,
            coalesce_s=config.coalesce_ms / 1e3,
            expected_output_tokens=[spec.max_tokens for spec in work.requests],
            verify_tls=not config.insecure,
            save_outputs=config.save_outputs,
            on_progress=on_progress,
            stop_event=stop,
        )
        generator = LoadGenerator(target, plan, config.api_key)
        monitor = server.WindowMonitor(base_url, config, watched, on_server_death=generator.stop)
        if config.num_warmups and work.warmups:  # the window starts after the warm-ups
            plan.on_window_start = monitor.restart_window_soon
        await monitor.start()
        try:
            data = await generator.run()
        finally:
            await monitor.finish()
        server_info.update(monitor.server_info())
        if memory is not None:  # stopped here, before teardown: the series covers launch to window end
            server_info.update(server.memory_info(memory.stop(), watched))
        if isinstance(watched, server.LaunchedServer):
            watched.stop()  # here, not only in arun's finally: the result says how the teardown went
            server.add_teardown(server_info, watched)
        if synthetic is not None:
            server_info["synthetic_stats"] = synthetic.stats()
    workload_info = {
        "dataset": work.dataset,
        "input_length_source": work.input_length_source,
        "screened_out": work.screened_out,
        "screened_reason": work.screened_reason,
        "max_model_len": work.max_model_len,
        "notes": work.notes,
        "prompt_lens": [spec.prompt_len for spec in work.requests],
        "max_tokens": [spec.max_tokens for spec in work.requests],
    }
    result = metrics.summarize(data, config, workload_info=workload_info, server_info=server_info)
    server.annotate(result)
    write_outputs(result, config, data)
    if monitor.server_died is not None:  # what was measured is written; the run itself failed
        raise ServerError(monitor.server_died)
    return result


async def _server_version(session: aiohttp.ClientSession, base_url: str) -> str | None:
    try:
        async with session.get(base_url.rstrip("/") + "/version",
                               timeout=aiohttp.ClientTimeout(total=5)) as resp:
            if resp.status == 200:
                version = orjson.loads(await resp.read()).get("version")
                return str(version) if version is not None else None
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, AttributeError):
        pass
    return None


def environment() -> dict[str, Any]:
    """What the result records about where it ran (nothing secret)."""
    return {
        "fastbench": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
    }


def write_outputs(result: Result, config: BenchConfig, data: Any) -> None:
    """Write whichever of --result-json, --result-card and --save-detailed were asked for."""
    if config.result_json:
        doc = report.result_to_json_dict(result, config, environment=environment())
        report.write_json_atomic(config.result_json, doc)
    if config.result_card:
        status = "partial (interrupted)" if result.stopped_reason == "interrupted" else "done"
        report.write_card_atomic(config.result_card, report.render_card(result, config, status=status))
    if config.save_detailed:
        report.write_detailed_jsonl(config.save_detailed, data)
