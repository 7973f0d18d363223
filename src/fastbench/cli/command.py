"""Command line: argparse -> BenchConfig -> api.run. Flag names follow `vllm bench serve`."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from fastbench._version import __version__
from fastbench.cli import tomlconfig
from fastbench.cli.argtypes import HelpFormatter, Parser, goodput_slo, json_object, shell_words, whole_number
from fastbench.config import ENGINES, BenchConfig, LaunchConfig
from fastbench.exceptions import FastbenchError, ResultWriteError, ServerDiedError

EPILOG = """\
Without --base-url, fastbench starts its built-in synthetic server (TTFT 50 ms, 20 ms between
chunks) and benchmarks that. Subcommands: `fastbench validate --help` (the client's own accuracy
and overhead, against the synthetic server), `fastbench synthetic-server --help`.
Values that start with a dash need the = form: --engine-args="--enforce-eager".
Exit status: 0 done (every request, or up to --max-seconds), 1 the run stopped early (--max-error-rate,
the server died) or collapsed (no request completed, or most failed), 2 bad input, an unreachable
server or a result file that could not be written, 130 interrupted.
"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="fastbench",
        description="Benchmark an OpenAI-compatible LLM server (vLLM, SGLang, TGI, llama.cpp) with "
        "timestamps taken at socket read.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"fastbench {__version__}")
    g = p.add_argument_group("server")
    g.add_argument("--base-url", help="server root, e.g. http://127.0.0.1:8000; omitted: the built-in "
                   "synthetic server")
    g.add_argument("--model", help="model name to request (default: the first one /v1/models lists)")
    g.add_argument("--endpoint", default="/v1/completions",
                   choices=("/v1/completions", "/v1/chat/completions"), help="API endpoint")
    g.add_argument("--api-key", default=None,
                   help="bearer token (default: $OPENAI_API_KEY); never printed or stored")
    g.add_argument("--insecure", action="store_true", help="https: skip certificate verification")
    g = p.add_argument_group("load")
    g.add_argument("--concurrency", "--max-concurrency", dest="concurrency", type=whole_number,
                   default=None, help="most requests in flight at once: without --request-rate (closed "
                   "loop) this many are kept in flight (default 16); with it, a cap (default none, as "
                   "vllm bench serve without --max-concurrency)")
    g.add_argument("--request-rate", type=float, default=None,
                   help="open loop: arrivals per second (Poisson; see --burstiness); default inf = closed loop")
    g.add_argument("--burstiness", type=float, default=1.0,
                   help="gamma shape of inter-arrival times: 1 is Poisson, <1 burstier, >1 steadier")
    g.add_argument("--num-prompts", type=whole_number, default=200, help="measured requests to send")
    g.add_argument("--max-seconds", type=float, default=None,
                   help="hard cap on the measured window in seconds; requests in flight then are cancelled")
    g.add_argument("--num-warmups", type=whole_number, default=0,
                   help="requests sent and discarded before measuring")
    g.add_argument("--seed", type=whole_number, default=0, help="seed for datasets and arrivals (>= 0)")
    g.add_argument("--request-timeout", type=float, default=None,
                   help="seconds a request may take before it is failed as a timeout (default: none)")
    g.add_argument("--max-error-rate", type=float, default=None,
                   help="stop early once failed/finished exceeds this fraction (after 20 requests)")
    g.add_argument("--coalesce-ms", type=float, default=0.0,
                   help="read the sockets at least every this many ms instead of on every arrival (streams about to "
                   "end are still watched on every arrival): less client CPU per chunk at many streams; "
                   "kernel stamps keep arrival times; keep it under half the chunk gap (default 0: off)")
    g = p.add_argument_group("requests")
    g.add_argument("--max-tokens", type=whole_number, default=None,
                   help="output tokens per request (default: the dataset's output length)")
    g.add_argument("--ignore-eos", action="store_true", help="ask the server to ignore EOS (vLLM)")
    g.add_argument("--extra-body", type=json_object, default={},
                   help="JSON object merged into every request body, e.g. '{\"temperature\":0}'")
    g = p.add_argument_group("dataset")
    g.add_argument("--dataset-name", default="random",
                   choices=("random", "sharegpt", "jsonl", "prefix_repetition", "generated-shared-prefix"),
                   help="where prompts come from")
    g.add_argument("--dataset-path", default=None, help="ShareGPT V3 JSON or JSONL file")
    g.add_argument("--dataset-order", default="random", choices=("random", "file"),
                   help="sharegpt: sample as vllm bench serve does, or take in file order")
    g.add_argument("--random-input-len", type=whole_number, default=1024, help="random: prompt tokens")
    g.add_argument("--random-output-len", type=whole_number, default=128, help="random: output tokens")
    g.add_argument("--random-range-ratio", type=float, default=0.0,
                   help="random: lengths drawn uniformly in [len*(1-r), len*(1+r)]")
    _add_shared_prefix_args(p, g)
    g.add_argument("--tokenizer", default=None,
                   help="local tokenizer directory or tokenizer.json for exact prompt lengths (never downloaded)")
    g.add_argument("--max-model-len", type=whole_number, default=None,
                   help="context length to screen prompts against (default: what /v1/models reports)")
    g = p.add_argument_group("results")
    g.add_argument("--goodput", nargs="+", type=goodput_slo, default=[], metavar="KEY:MS",
                   help="SLOs for goodput, e.g. ttft:500 tpot:50 e2el:10000 (milliseconds)")
    g.add_argument("--result-json", default=None, help="write the result (versioned JSON schema) here")
    g.add_argument("--result-card", default=None, help="write a Markdown run card here")
    g.add_argument("--save-detailed", default=None, help="write one JSON line per request here")
    g.add_argument("--save-outputs", action="store_true",
                   help="keep response texts and write them into --save-detailed records (off: memory stays "
                   "bounded)")
    g.add_argument("--label", default=None, help="a name for this run, kept in the result")
    g.add_argument("--card-row", action="append", default=[], metavar="LABEL=VALUE",
                   help="a row of the card's Configuration that only you know, e.g. --card-row 'Why this "
                   "quant=NVFP4 base plus EAGLE3' (repeatable); a label the card fills itself (Model, "
                   "Family, Parameters...) replaces that row")
    g.add_argument("--card-note", action="append", default=[], metavar="TEXT",
                   help="a line of the card's Notes (repeatable)")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress line on stderr (default: only when stderr is a terminal)")
    g.add_argument("--synthetic-args", type=shell_words, default="",
                   help="without --base-url: flags for the synthetic server, e.g. \"--itl-ms 10\"; one flag "
                   "alone needs the = form: --synthetic-args=\"--no-usage\"")
    _add_launch_args(p)
    return p


def _add_shared_prefix_args(p: argparse.ArgumentParser, g: argparse._ArgumentGroup) -> None:
    """Shared prefixes, for prefix-cache studies: vllm bench serve's and SGLang's flags and meanings."""
    g.add_argument("--random-prefix-len", type=whole_number, default=0,
                   help="random: one fixed random prefix of this many tokens before every prompt; the prompt is "
                   "this plus --random-input-len's draw (as vllm bench serve)")
    g = p.add_argument_group("shared-prefix datasets", "prefix_repetition (vllm bench serve's): each prompt is one "
                             "of N random prefixes plus its own random suffix; generated-shared-prefix (SGLang's): "
                             "groups of prompts sharing a system prompt, each with its own question")
    g.add_argument("--prefix-repetition-prefix-len", type=whole_number, default=256, help="prefix tokens")
    g.add_argument("--prefix-repetition-suffix-len", type=whole_number, default=256, help="suffix tokens")
    g.add_argument("--prefix-repetition-num-prefixes", type=whole_number, default=10, help="distinct prefixes")
    g.add_argument("--prefix-repetition-output-len", type=whole_number, default=128, help="output tokens")
    g.add_argument("--gsp-num-groups", type=whole_number, default=64, help="groups (system prompts)")
    g.add_argument("--gsp-prompts-per-group", type=whole_number, default=16, help="prompts per group")
    g.add_argument("--gsp-system-prompt-len", type=whole_number, default=2048, help="system prompt tokens")
    g.add_argument("--gsp-question-len", type=whole_number, default=128, help="question tokens")
    g.add_argument("--gsp-output-len", type=whole_number, default=256, help="output tokens")
    g.add_argument("--reset-prefix-cache", action="store_true",
                   help="empty the server's prefix cache before the first request (vLLM's POST /reset_prefix_cache, "
                   "served with VLLM_SERVER_DEV_MODE=1; SGLang's /flush_cache); where impossible, the notes say so")


def _add_launch_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "launch a server", "fastbench starts the server, waits until /v1/models lists the model, benchmarks "
        "it and stops it (SIGTERM, then SIGKILL, to its process group and any descendant that left it); "
        "without --launch, --base-url attaches")
    g.add_argument("--config", metavar="RUN.TOML", default=None,
                   help="take options from a TOML file ([server] and [benchmark] tables); flags override it")
    g.add_argument("--launch", choices=ENGINES, default=None, help="the engine to start")
    g.add_argument("--launch-model", metavar="MODEL", default=None,
                   help="what the engine loads (Hugging Face id, directory, GGUF file)")
    g.add_argument("--engine-args", type=shell_words, default="", metavar="\"ARGS\"",
                   help="engine flags passed through, e.g. \"--max-model-len 8192 --gpu-memory-utilization 0.85 "
                   "--speculative-config '{...}'\"; one flag alone needs the = form: --engine-args=\"--enforce-eager\"")
    g.add_argument("--docker-image", metavar="IMAGE[@sha256:...]", default=None,
                   help="run the engine in this image (docker run --gpus all --ipc=host -p PORT:PORT)")
    g.add_argument("--docker-args", type=shell_words, default="", metavar="\"ARGS\"",
                   help="extra docker run flags, e.g. \"-v ~/.cache/huggingface:/root/.cache/huggingface\" (a value "
                   "starting with a dash alone: --docker-args=\"--rm\")")
    g.add_argument("--server-env", action="append", default=[], metavar="NAME[=VALUE]",
                   help="environment for the server; NAME alone passes fastbench's own value (repeatable)")
    g.add_argument("--server-host", default="127.0.0.1", help="address the launched server listens on")
    g.add_argument("--server-port", type=whole_number, default=None,
                   help="port of the launched server (default: vLLM 8000, SGLang 30000, llama.cpp 8080)")
    g.add_argument("--ready-timeout", type=float, default=1800.0,
                   help="seconds from launch until the model must be served")
    g.add_argument("--server-log", default=None,
                   help="server log file (default: fastbench-server-ENGINE-TIME.log beside the result)")
    g.add_argument("--engine-bin", default=None,
                   help="the engine executable (vllm, python for SGLang, llama-server; docker with "
                   "--docker-image); default: found on PATH")
    g.add_argument("--server-stop-grace", type=float, default=20.0,
                   help="seconds between SIGTERM and SIGKILL at teardown")
    g.add_argument("--memory-interval", type=float, default=None,
                   help="seconds between memory samples (default: 1 when launching a server, else off; 0: off)")
    g.add_argument("--metrics-interval", type=float, default=2.0,
                   help="seconds between reads of the server's /metrics during the run (0: start and end only)")


def _launch_config(ns: argparse.Namespace) -> LaunchConfig | None:
    if ns.launch is None:
        if ns.launch_model or ns.docker_image or ns.engine_args:
            raise FastbenchError("--launch-model, --engine-args and --docker-image need --launch ENGINE")
        given = [flag for flag, value in (("--docker-args", ns.docker_args), ("--server-env", ns.server_env),
                                          ("--server-port", ns.server_port), ("--server-log", ns.server_log),
                                          ("--engine-bin", ns.engine_bin)) if value not in (None, (), [])]
        if given:
            raise FastbenchError(f"{', '.join(given)}: only with --launch ENGINE (they configure a launched server)")
        return None
    return LaunchConfig(
        engine=ns.launch,
        model=ns.launch_model or "",  # none: refused with the config's other values
        engine_args=ns.engine_args,
        docker_image=ns.docker_image,
        docker_args=ns.docker_args,
        env=tuple(ns.server_env),
        host=ns.server_host,
        port=ns.server_port,
        ready_timeout_s=ns.ready_timeout,
        log_path=ns.server_log,
        engine_bin=ns.engine_bin,
        stop_grace_s=ns.server_stop_grace,
    )


def config_from_args(ns: argparse.Namespace, argv: Sequence[str]) -> BenchConfig:
    """The BenchConfig the parsed command line stands for; its values are checked when it runs."""
    return BenchConfig(
        base_url=ns.base_url,
        model=ns.model,
        endpoint=ns.endpoint,
        api_key=ns.api_key or os.environ.get("OPENAI_API_KEY") or None,
        insecure=ns.insecure,
        concurrency=ns.concurrency,
        request_rate=ns.request_rate,
        burstiness=ns.burstiness,
        num_prompts=ns.num_prompts,
        max_seconds=ns.max_seconds,
        num_warmups=ns.num_warmups,
        seed=ns.seed,
        request_timeout_s=ns.request_timeout,
        coalesce_ms=ns.coalesce_ms,
        max_error_rate=ns.max_error_rate,
        max_tokens=ns.max_tokens,
        ignore_eos=ns.ignore_eos,
        extra_body=ns.extra_body,
        dataset_name=ns.dataset_name,
        dataset_path=ns.dataset_path,
        dataset_order=ns.dataset_order,
        random_input_len=ns.random_input_len,
        random_output_len=ns.random_output_len,
        random_range_ratio=ns.random_range_ratio,
        random_prefix_len=ns.random_prefix_len,
        prefix_repetition_prefix_len=ns.prefix_repetition_prefix_len,
        prefix_repetition_suffix_len=ns.prefix_repetition_suffix_len,
        prefix_repetition_num_prefixes=ns.prefix_repetition_num_prefixes,
        prefix_repetition_output_len=ns.prefix_repetition_output_len,
        gsp_num_groups=ns.gsp_num_groups,
        gsp_prompts_per_group=ns.gsp_prompts_per_group,
        gsp_system_prompt_len=ns.gsp_system_prompt_len,
        gsp_question_len=ns.gsp_question_len,
        gsp_output_len=ns.gsp_output_len,
        reset_prefix_cache=ns.reset_prefix_cache,
        tokenizer=ns.tokenizer,
        max_model_len=ns.max_model_len,
        goodput=dict(ns.goodput),
        result_json=ns.result_json,
        result_card=ns.result_card,
        save_detailed=ns.save_detailed,
        save_outputs=ns.save_outputs,
        progress=ns.progress,
        synthetic_args=ns.synthetic_args,
        launch=_launch_config(ns),
        metrics_interval_s=ns.metrics_interval,
        memory_interval_s=ns.memory_interval,
        config_file=ns.config,
        command_line=("fastbench", *argv),
        label=ns.label,
        card_rows=tuple(ns.card_row),
        card_notes=tuple(ns.card_note),
    )


class _ProgressLine:
    """One self-overwriting status line on stderr."""

    def __call__(self, p: dict[str, Any]) -> None:
        cap = f"/{p['max_seconds']:.0f}" if p["max_seconds"] else ""
        rate = p["output_tokens"] / p["elapsed_s"] if p["elapsed_s"] > 0 else 0.0
        sys.stderr.write(
            f"\r  {p['completed']}/{p['total']} done, {p['failed']} failed, {p['in_flight']} in flight, "
            f"{rate:,.0f} tok/s, {p['elapsed_s']:.0f}{cap} s   "
        )
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "synthetic-server":
        from fastbench import synthetic

        return synthetic.main(argv[1:], prog="fastbench synthetic-server")
    if argv and argv[0] == "validate":
        from fastbench.cli import validate

        return validate.main(argv[1:])
    parser = build_parser()
    try:
        config_file, argv = tomlconfig.expand(argv, parser)
    except FastbenchError as exc:
        print(f"fastbench: error: {exc}", file=sys.stderr)
        return 2
    ns = parser.parse_args(argv)
    ns.config = config_file
    try:
        config = config_from_args(ns, argv)
        return _run(config)
    except FastbenchError as exc:
        print(f"fastbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fastbench: interrupted", file=sys.stderr)
        return 130


# A second signal this soon after the first is the same interrupt, delivered again (``timeout`` sends
# two within microseconds); a person who means "abandon" presses again after reading the "stopping"
# line, which takes longer than this.
SAME_INTERRUPT_S = 1.0


async def _run_with_signals(config: BenchConfig, progress: _ProgressLine | None) -> Any:
    """The first Ctrl-C or SIGTERM ends the run early and keeps what was measured (the result
    files are written, marked partial); one that comes ``SAME_INTERRUPT_S`` or more later abandons it.
    Closer ones are the same interrupt delivered twice: coreutils ``timeout`` signals the child and
    then its own process group, and a script may signal the process and then its group."""
    from fastbench import api

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    main = asyncio.current_task()
    first_signal_s: float | None = None

    def on_signal() -> None:
        nonlocal first_signal_s
        now = time.monotonic()
        if first_signal_s is None:
            first_signal_s = now
            stop.set()
            print("\nfastbench: stopping; writing what was measured (signal again, a second later, to abandon)",
                  file=sys.stderr)
        elif now - first_signal_s >= SAME_INTERRUPT_S:
            assert main is not None
            main.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        return await api.arun(config, on_progress=progress, stop=stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def exit_status(stopped_reason: str, collapsed: bool = False) -> int:
    """The exit status the epilog promises for a run that ended for this reason."""
    if stopped_reason == "interrupted":
        return 130
    if stopped_reason in ("completed", "time cap") and not collapsed:  # the run did what it was asked to
        return 0
    return 1  # stopped early (--max-error-rate, the server died, ...), or nothing much completed


def _run(config: BenchConfig) -> int:
    import uvloop

    from fastbench.results import writers

    show = config.progress if config.progress is not None else sys.stderr.isatty()
    progress = _ProgressLine() if show else None
    failure: ResultWriteError | ServerDiedError | None = None
    try:
        result = uvloop.run(_run_with_signals(config, progress))
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
    except (ResultWriteError, ServerDiedError) as exc:  # the run was measured: show it anyway
        failure, result = exc, exc.result
    finally:
        if progress is not None:
            progress.close()
    print(writers.render_console(result))
    if failure is not None:
        print(f"fastbench: error: {failure}", file=sys.stderr)
        return 2 if isinstance(failure, ResultWriteError) else 1
    return exit_status(result.stopped_reason, result.collapsed)


if __name__ == "__main__":
    sys.exit(main())
