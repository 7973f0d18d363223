"""The Python API: ``run(config) -> Result`` and ``arun(config)`` for an existing event loop."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from fastbench.api import runsteps
from fastbench.api.live import LIVE_INTERVAL_S, LiveListener, LiveSampler, live_labels
from fastbench.checks import check_config
from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError, FastbenchError, ServerError
from fastbench.load import datasets, pooling
from fastbench.load.drive import drive
from fastbench.load.generators import make_generator
from fastbench.load.plan import LoadPlan, Target, check_api_key
from fastbench.redact import Secrets
from fastbench.results import card, figures, serversections, writers
from fastbench.results.environment import environment
from fastbench.results.result import Result, ResultWriteError, ServerDiedError
from fastbench.server import control, launch
from fastbench.server.engines import make_server, with_prefix_cache_reset
from fastbench.server.external import ExternalServer
from fastbench.server.launch import LaunchedServer
from fastbench.server.memoryrun import MemoryRun, start_memory_sampler
from fastbench.server.monitor import WindowMonitor
from fastbench.study import store as run_store

__all__ = ("arun", "check", "run", "store_run", "write_outputs")

OUTPUT_FLAGS = {"result_json": "--result-json", "result_card": "--result-card", "save_detailed": "--requests-jsonl"}


def check(config: BenchConfig) -> None:
    """Reject options that cannot work, with a one-line message saying what to fix.

    Everything here is checked before anything is started or sent, the output paths included, so
    that a finished run is not thrown away for want of a place to write its result. The values are
    checked by :func:`fastbench.checks.check_config`; here, what needs more than the values.
    """
    check_config(config)
    if config.pooling:  # what only the APIs answered whole refuse (a binary answer, say)
        pooling.check(config)
    check_api_key(config.api_key)
    if config.base_url is not None:
        Target.parse(config.base_url, config.endpoint)
    _check_dataset_file(config)
    _check_outputs(config)


def _check_dataset_file(config: BenchConfig) -> None:
    path = config.dataset_path
    if config.dataset_name == "random" or not path:
        return
    if os.path.isdir(path) and config.dataset_name != "weka":  # the Weka reader reads a directory of traces
        raise ConfigError(f"--dataset-path {path}: is a directory; give the file itself")
    if not os.path.exists(path):
        raise ConfigError(f"--dataset-path {path}: not found")


def _check_outputs(config: BenchConfig) -> None:
    """Every output file can be written, and no output overwrites another or an input."""
    seen: dict[str, str] = {}
    for flag, path in (("--dataset-path", config.dataset_path), ("--config", config.config_file)):
        if path:
            seen[os.path.realpath(path)] = flag
    for name, flag in OUTPUT_FLAGS.items():
        path = getattr(config, name)
        if path is None:
            continue
        writers.check_output_path(flag, path)
        where = os.path.realpath(path)
        if where in seen:
            raise ConfigError(f"{seen[where]} and {flag} name the same file {path}; give each its own")
        seen[where] = flag
    if config.save_result or config.append_result:
        # vllm's name holds the model and the date, known only later: the directory is checked here
        # (made, as vllm makes it), and a --result-filename in full
        flag = "--append-result" if config.append_result else "--save-result"
        directory = os.fspath(config.result_dir or ".")
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--result-dir {directory}: cannot make it ({exc.strerror or exc})") from None
        probe = os.path.join(directory, config.result_filename or "fastbench-result-probe.json")
        writers.check_output_path(flag, probe)
        if config.result_filename and os.path.realpath(probe) in seen:
            raise ConfigError(f"{seen[os.path.realpath(probe)]} and {flag} name the same file {probe}; "
                              "give each its own")
    if config.store is not None:  # created here if new, so that a run is never measured for nothing
        run_store.check_store_path(config.store)


def run(
    config: BenchConfig,
    *,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    stop: asyncio.Event | None = None,
    server: LaunchedServer | None = None,
    on_live: LiveListener | Sequence[LiveListener] = (),
) -> Result:
    """Run a benchmark to the end and return its Result (on uvloop when it is installed). The same
    arguments as :func:`arun`.

    :param config: the run's options.
    :param on_progress: called about twice a second with counters (completed, in flight, ...).
    :param stop: set it (from another thread: ``loop.call_soon_threadsafe(stop.set)``, or from
        ``on_progress``) to end the run early, as :func:`arun`'s.
    :param server: a launched server, ready, to measure without launching or stopping it (see :func:`arun`).
    :param on_live: called with a :class:`fastbench.results.live.LiveSnapshot` four times a second (see :func:`arun`).
    :raises ConfigError: options that cannot work, or an output path that cannot be written
        (before anything is sent).
    :raises ServerError: the server cannot be reached or does not serve the model;
        :class:`ServerDiedError` (with ``.result``) when it died during the run.
    :raises ResultWriteError: the run finished but a result file could not be written (``.result``).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # none: as it should be
        pass
    else:
        raise RuntimeError("fastbench.run() starts its own event loop: inside a running one (a notebook, an "
                           "async harness) use `await fastbench.arun(config)`")
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency, but the API does not need it
        return asyncio.run(arun(config, on_progress=on_progress, stop=stop, server=server, on_live=on_live))
    return uvloop.run(arun(config, on_progress=on_progress, stop=stop, server=server, on_live=on_live))


async def arun(
    config: BenchConfig,
    *,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    stop: asyncio.Event | None = None,
    server: LaunchedServer | None = None,
    on_live: LiveListener | Sequence[LiveListener] = (),
) -> Result:
    """Run a benchmark inside the running event loop (any asyncio loop) and return its Result.

    With ``config.base_url`` None, the built-in synthetic server is started in its own
    process for the run and stopped after it.

    :param on_progress: called about twice a second with counters (completed, in flight, ...).
    :param stop: set it to end the run early (e.g. on a signal): requests in flight are cancelled,
        and the Result, and any result files, say the run was interrupted and hold what was measured.
    :param server: a server fastbench launched earlier and made ready
        (``server = make_server(launch); await server.astart()``), to serve several runs: this run
        measures it as a launched server (its engine, arguments and load time, memory, /metrics, and
        in a store its loading log with this run's window lines) without launching or stopping it;
        the caller stops it (``await server.astop()``) after its last run. ``config.launch`` is the
        server's own LaunchConfig, or None for it; ``config.base_url`` None.
    :param on_live: one or more callables given a :class:`fastbench.results.live.LiveSnapshot` four times a
        second while the run runs (counters, rates, running latency quantiles, the server's gauges), and a
        last one (``final``) from the finished run's figures: see :mod:`fastbench.api.live`.
    """
    listeners = [on_live] if callable(on_live) else list(on_live)
    if server is not None:
        config = _handed(config, server)
    check(config)
    synthetic = None
    launched = None
    base_url = config.base_url
    # started before any launch, so that its baseline is the machine without the server
    memory = start_memory_sampler(config)
    try:
        if server is not None:  # launched and ready already: watched as a launch, never stopped here
            if memory is not None:
                memory.follow(server)
            return await _run_against(config, server.base_url, None, on_progress, stop, watched=server,
                                      memory=memory, shared_launch=True, listeners=listeners)
        if config.launch is not None:
            if config.dataset_path is None or os.path.isfile(config.dataset_path):  # a pipe is read once
                # A dataset, tokenizer or length option that cannot work is found before the engine
                # spends minutes loading.
                await runsteps.unless_stopped(asyncio.to_thread(datasets.check_inputs, config), stop,
                                      "interrupted while reading the inputs")
            if stop is not None and stop.is_set():
                raise asyncio.CancelledError("interrupted before the launch")
            to_launch = config.launch
            if config.reset_prefix_cache:  # what the engine needs to serve the reset (vLLM: VLLM_SERVER_DEV_MODE=1)
                to_launch = with_prefix_cache_reset(to_launch)
                config = dataclasses.replace(config, launch=to_launch)
            launched = make_server(to_launch, api_key=config.api_key, log_dir=launch.log_dir_for(config),
                                   headers=config.headers)
            # fails fast (ServerLaunchError) and stops what it started; memory is sampled from the launch
            await launched.astart(stop, on_started=_follower(memory, launched))
            base_url = launched.base_url
        elif base_url is None:
            from fastbench.synthetic import SyntheticServer, SyntheticStartError

            synthetic = SyntheticServer(*config.synthetic_args)
            try:
                await asyncio.get_running_loop().run_in_executor(None, synthetic.start)
            except SyntheticStartError as exc:
                if exc.status != 2:
                    raise
                why = exc.stderr.strip().splitlines()[-1] if exc.stderr.strip() else "refused"
                raise ConfigError(f"--synthetic-args: {why.split(' error: ', 1)[-1]}") from None
            base_url = synthetic.base_url
        else:
            # The server's root, where /v1/models, /metrics and /tokenize are: --base-url may end in
            # /v1 (as OpenAI clients take it) or carry credentials, which fastbench never sends.
            base_url = Target.parse(base_url, config.endpoint).base_url
        watched = launched or ExternalServer(
            base_url, api_key=config.api_key, pid=synthetic.pid if synthetic is not None else None)
        if memory is not None and watched.pid is not None and launched is None:
            memory.set_server_pid(watched.pid)  # attached or synthetic
        return await _run_against(config, base_url, synthetic, on_progress, stop, watched=watched,
                                  memory=memory, listeners=listeners)
    except asyncio.CancelledError:
        # Cancelled after the stop was asked (the CLI's second Ctrl-C: "abandon"): no grace period.
        # A cancellation alone (asyncio's own Ctrl-C under the Python API) keeps it.
        if launched is not None and stop is not None and stop.is_set():
            launched.hurry()
        raise
    finally:
        if memory is not None:
            memory.stop()
        if synthetic is not None:
            synthetic.stop()
        if launched is not None:
            await launched.astop()  # SIGTERM, SIGKILL after the grace period; checks the port is free


def _follower(memory: MemoryRun | None, server: LaunchedServer) -> Callable[[int], None] | None:
    """What a launch calls once its process runs: the sampler follows it (its tree, a container's cgroup)."""
    if memory is None:
        return None
    return lambda _pid: memory.follow(server)


def _handed(config: BenchConfig, server: LaunchedServer) -> BenchConfig:
    """The run's config for a server handed to it (its launch filled in); ConfigError when the two
    disagree or the server is not ready, ServerError when it has stopped."""
    if config.base_url is not None:
        raise ConfigError("a run given a launched server measures that server: leave base_url unset")
    if config.launch is not None and config.launch != server.launch:
        raise ConfigError("config.launch is not the given server's LaunchConfig: pass that one, or None")
    if server.stopped:
        raise ServerError(f"the given {server.engine_name} server was stopped before this run")
    if server.process is None or server.load_time_s is None:
        raise ConfigError(f"the given {server.engine_name} server is not ready: start it (await server.astart())")
    died = server.exit_message()
    if died is not None:
        raise ServerError(f"{died} before this run; log: {server.log_path}; last lines:\n{server.log_tail()}")
    return dataclasses.replace(config, launch=server.launch)


async def _run_against(
    config: BenchConfig, base_url: str, synthetic: Any,
    on_progress: Callable[[dict[str, Any]], None] | None,
    stop: asyncio.Event | None = None,
    *,
    watched: LaunchedServer | ExternalServer,
    memory: MemoryRun | None = None,
    shared_launch: bool = False,
    listeners: Sequence[LiveListener] = (),
) -> Result:
    """The run against a ready server (``shared_launch``: launched before this run, kept up after it),
    step by step (:mod:`fastbench.api.runsteps`): meet the server, build the workload and its plan, drive
    the load under the window monitor and the live view, gather what the window left, word the result."""
    target = Target.parse(base_url, config.endpoint)
    async with control.http_session(verify_tls=not config.insecure, headers=config.headers) as session:
        model, max_model_len, server_info = await runsteps.meet_server(
            config, base_url, session, watched, synthetic, stop)
        tokenize = control.make_server_tokenize(base_url, session, config.api_key, model)
        # Counting prompts with /tokenize can take minutes: a stop abandons it, as it does a launch.
        work = await runsteps.unless_stopped(
            datasets.build_workload(config, model, max_model_len=max_model_len, tokenize=tokenize), stop,
            "interrupted while preparing the workload")
        plan = LoadPlan.from_config(config, work, stop_event=stop,
                                    progress_interval_s=LIVE_INTERVAL_S if listeners else 0.5)
        server_here = synthetic is not None or isinstance(watched, LaunchedServer)
        # BenchConfig's workers=1 is its default: "not given", which with --ray is one actor on each node
        generator, workers_chosen = make_generator(
            target, plan, config.api_key, workers=None if config.workers == 1 else config.workers, ray=config.ray,
            workers_per_node=config.workers_per_node, server_here=server_here, concurrency_cap=config.concurrency)
        reset_notes = await runsteps.reset_prefix_cache(config, base_url, server_info)
        monitor = WindowMonitor(base_url, config, watched, on_server_death=generator.stop)
        live = LiveSampler(generator, open_loop=config.open_loop, monitor=monitor, memory=memory,
                           listeners=listeners, then=on_progress, labels=live_labels(config))
        plan.on_progress = live.on_progress  # the timeline is kept for every run; a look costs ~0.4 ms
        if work.warmups:  # the window starts after the warm-ups (weka's staggered start makes its own)
            plan.on_window_start = monitor.restart_window_soon
        data = await drive(generator, watch=runsteps.watching(monitor))
        end = await runsteps.after_window(config, monitor, watched, synthetic, memory, server_info, shared_launch)
    if workers_chosen is not None and "workers" not in data.extra:  # auto chose one process
        data.extra["workers"] = workers_chosen
    if end.window.prefix_cache is not None:  # the hit rate, judged against the workload's sharing (results.cache)
        server_info["prefix_cache_stats"] = end.window.prefix_cache
    result = figures.summarize(data, config, workload_info=runsteps.workload_info(config, work),
                               server_info=server_info)
    live.finish(data, result)  # the view's last frame, and the timeline's last second
    result = dataclasses.replace(result, timeline=live.timeline())
    # The card's server rows set the client's tokens per chunk beside the server's acceptance length:
    # they are worded once the figures are known.
    server_info.update(serversections.server_sections(
        end.window, memory=end.memory_seen,
        teardown=end.launched_here.teardown if end.launched_here is not None else None,
        client_tokens_per_chunk=result.mean_tokens_per_chunk,
        client_in_flight=serversections.ClientInFlight(result.client.mean_in_flight, data.rows),
        later_notes=[*reset_notes, *end.later_notes]))
    if end.synthetic_stats is not None:
        server_info["synthetic_stats"] = end.synthetic_stats
    result = dataclasses.replace(result, server_info=server_info)
    unwritten = write_outputs(result, config, data)
    if config.store is not None:
        result, not_stored = store_run(result, config, data, server_log=end.server_log)
        unwritten += not_stored
    if end.died is not None:  # what was measured is written; the run itself failed
        raise ServerDiedError("; ".join([end.died, *unwritten]), result)
    if unwritten:
        raise ResultWriteError("; ".join(unwritten), result)
    return result


def store_run(result: Result, config: BenchConfig, data: Any, *,
              server_log: str | None = None) -> tuple[Result, list[str]]:
    """Keep the run in ``config.store``: the Result with its ``run_id``, and a "could not store" line
    when it failed (the run's other files are written all the same)."""
    assert config.store is not None
    env = environment()
    doc = writers.result_to_json_dict(result, config, environment=env)
    status = "partial (interrupted)" if result.stopped_reason == "interrupted" else "done"
    card_text = card.render_card(result, config, status=status, environment=env)
    try:
        with run_store.Store(config.store, create=True) as store:
            secrets = Secrets.of_config(config)
            run_id = store.add(doc, card=card_text, records_jsonl=writers.detailed_jsonl_bytes(data, secrets),
                               server_log=secrets.text(server_log) if server_log else server_log)
    except FastbenchError as exc:
        return result, [f"could not store the run in --store {config.store}: {exc}"]
    return dataclasses.replace(result, run_id=run_id), []


def write_outputs(result: Result, config: BenchConfig, data: Any) -> list[str]:
    """Write whichever of --result-json, --result-card, --requests-jsonl and --save-result were asked for.

    A file that cannot be written does not keep the others from being written: returns one
    "could not write FLAG PATH: reason" line per failure (empty when all were written).
    """
    jobs: list[tuple[str, Callable[[str], object]]] = []
    saving = config.result_json or config.result_card or config.save_result or config.append_result
    env = environment() if saving else {}  # it may run nvidia-smi
    if config.result_json:
        doc = writers.result_to_json_dict(result, config, environment=env)
        jobs.append(("result_json", lambda path: writers.write_json_atomic(path, doc)))
    if config.result_card:
        status = "partial (interrupted)" if result.stopped_reason == "interrupted" else "done"
        card_text = card.render_card(result, config, status=status, environment=env)
        jobs.append(("result_card", lambda path: writers.write_card_atomic(path, card_text)))
    if config.save_detailed:
        secrets = Secrets.of_config(config)
        jobs.append(("save_detailed", lambda path: writers.write_detailed_jsonl(path, data, secrets)))
    unwritten = []
    for name, write in jobs:
        path = getattr(config, name)
        try:
            write(path)
        except OSError as exc:
            unwritten.append(f"could not write {OUTPUT_FLAGS[name]} {path}: {exc.strerror or exc}")
    if config.save_result or config.append_result:
        flag = "--append-result" if config.append_result else "--save-result"
        path = writers.vllm_result_path(result, config)
        try:
            writers.write_vllm_result(path, writers.result_to_json_dict(result, config, environment=env),
                                      append=config.append_result)
        except OSError as exc:
            unwritten.append(f"could not write {flag} {path}: {exc.strerror or exc}")
    return unwritten
