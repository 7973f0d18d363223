"""Command line: argparse -> BenchConfig -> api.run. Flag names follow `vllm bench serve`."""

from __future__ import annotations

import argparse
import os
import sys
import typing
from collections.abc import Sequence
from typing import Any

from fastbench import checks
from fastbench._version import __version__
from fastbench.cli import (
    argfields,
    datasetflags,
    inputflags,
    launchflags,
    live,
    multiturn,
    runtext,
    tomlconfig,
    vllmflags,
)
from fastbench.cli.argtypes import (
    HelpFormatter,
    Parser,
    coalesce_window,
    comma_numbers,
    comma_words,
    goodput_slo,
    json_object,
    key_value,
    range_ratio,
    shell_words,
    whole_number,
    workers_count,
)
from fastbench.config import BACKEND_ENDPOINTS, BenchConfig, Endpoint, LaunchConfig
from fastbench.datasetoptions import DatasetName
from fastbench.exceptions import FastbenchError
from fastbench.redact import Secrets

EPILOG = """\
Without --base-url, fastbench starts its built-in synthetic server (TTFT 50 ms, 20 ms between
chunks) and benchmarks that. Subcommands: `fastbench validate --help` (the client's own accuracy
and overhead, against the synthetic server), `fastbench synthetic-server --help`, `fastbench runs
--help` and `fastbench compare --help` (runs kept with --store, listed and compared), `fastbench sweep
--help` (server variants x a grid of loads, into a store), `fastbench plot --help` (its figures) and
`fastbench report --help` (one self-contained HTML page and a study card).
Values that start with a dash need the = form: --engine-args="--enforce-eager".
Exit status: 0 done (every request, or up to --max-seconds), 1 the run stopped early (--max-error-rate,
the server died or went away) or collapsed (no request completed, or most failed), 2 bad input, an unreachable
server or a result file that could not be written, 130 interrupted.
"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="fastbench",
        usage="fastbench [options]\n       fastbench validate [options]          (the client's own accuracy)\n"
        "       fastbench synthetic-server [options]  (the built-in yardstick server)\n"
        "       fastbench runs|compare [options]      (runs kept with --store)\n"
        "       fastbench sweep FILE [options]        (server variants x a grid of loads)\n"
        "       fastbench plot FIGURE [options]       (a study's figures)\n"
        "       fastbench report [SOURCE] [options]   (an offline HTML report and a study card)",
        description="Benchmark an OpenAI-compatible LLM server (vLLM, SGLang, TGI, llama.cpp) with "
        "timestamps taken at socket read.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"fastbench {__version__}")
    _add_server_args(p)
    _add_load_args(p)
    _add_request_args(p)
    _add_dataset_args(p)
    _add_result_args(p)
    launchflags.add_args(p)
    vllmflags.add_unused_args(p)
    return p


def _add_server_args(p: argparse.ArgumentParser) -> None:
    """The server: where it is, which API and model, how to reach it."""
    g = p.add_argument_group("server")
    g.add_argument("--base-url", help="server root, e.g. http://127.0.0.1:8000; omitted: the built-in "
                   "synthetic server")
    g.add_argument("--host", default=None, help="with --port: the server at http://HOST:PORT, as vllm bench serve "
                   "(default 127.0.0.1 once --port is given; --base-url wins over both)")
    g.add_argument("--port", type=whole_number, default=None,
                   help="with --host: the server at http://HOST:PORT (default 8000 once --host is given)")
    g.add_argument("--model", help="model name to request (default: the first one /v1/models lists)")
    g.add_argument("--served-model-name", default=None,
                   help="the model name sent in requests when it differs from --model (which then names the "
                   "model in the result and its file name), as vllm bench serve")
    g.add_argument("--endpoint", default=None, choices=typing.get_args(Endpoint),
                   help="API endpoint (default /v1/completions, or the one --backend calls): /v1/responses is "
                   "OpenAI's Responses API, /v1/messages Anthropic's Messages API; /v1/embeddings, /pooling, "
                   "/score, /rerank and /v1/rerank answer each request whole, with no stream")
    g.add_argument("--backend", default=None, metavar="{" + ",".join(BACKEND_ENDPOINTS) + "}",
                   help="vllm bench serve's name for the API: openai and vllm are /v1/completions, openai-chat "
                   "/v1/chat/completions, openai-responses /v1/responses, anthropic-messages /v1/messages, "
                   "openai-embeddings /v1/embeddings with input, openai-embeddings-chat the same with messages, "
                   "vllm-pooling /pooling, vllm-rerank /rerank (or --endpoint /v1/rerank, /score); its others "
                   "(audio, clip and vlm2vec embeddings, infinity) are refused, each saying why")
    g.add_argument("--header", nargs="*", type=key_value, default=[], metavar="KEY=VALUE",
                   help="HTTP headers sent with every request, e.g. --header x-tenant=a x-trace=1; they replace "
                   "fastbench's own of the same name")
    g.add_argument("--ready-check-timeout-sec", type=whole_number, default=0,
                   help="with --base-url: wait up to this many seconds for the server to list its models before "
                   "the run (0: no wait)")
    g.add_argument("--api-key", default=None,
                   help="bearer token (default: $OPENAI_API_KEY); never printed or stored")
    g.add_argument("--insecure", action="store_true", help="https: skip certificate verification")


def _add_load_args(p: argparse.ArgumentParser) -> None:
    """The load: closed or open loop, how many requests, the window, the client's processes."""
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
    g.add_argument("--ramp-up-strategy", choices=("linear", "exponential"), default=None,
                   help="open loop whose rate moves from --ramp-up-start-rps to --ramp-up-end-rps over the "
                   "requests (instead of --request-rate), as vllm bench serve")
    g.add_argument("--ramp-up-start-rps", type=float, default=None, help="the ramp-up's first rate, requests/s")
    g.add_argument("--ramp-up-end-rps", type=float, default=None, help="the ramp-up's last rate, requests/s")
    g.add_argument("--max-seconds", type=float, default=None,
                   help="hard cap on the measured window in seconds; requests in flight then are cancelled")
    g.add_argument("--num-warmups", type=whole_number, default=0,
                   help="requests sent and discarded before measuring")
    g.add_argument("--seed", type=whole_number, default=0, help="seed for datasets and arrivals (>= 0)")
    g.add_argument("--request-timeout", type=float, default=None,
                   help="seconds a request may take before it is failed as a timeout (default: none)")
    g.add_argument("--max-error-rate", type=float, default=None,
                   help="stop early once failed/finished exceeds this fraction (after 20 requests)")
    g.add_argument("--server-gone-s", type=float, default=5.0, metavar="S",
                   help="stop early, keeping what was measured, once every connection attempt for S seconds was "
                   "refused (or closed before any byte) and the server answered nothing in between: it went away; "
                   "until then a refused slot waits 10 ms doubling to 0.5 s before it tries again (0: never stop)")
    g.add_argument("--coalesce-ms", type=coalesce_window, default="auto", metavar="auto|X",
                   help="read the sockets at least every X ms instead of on every arrival (streams about to end are "
                   "still watched on every arrival): less client CPU per chunk at many streams; kernel stamps keep "
                   "arrival times; keep X under half the chunk gap. 0: on every arrival. auto (default): on every "
                   "arrival until the chunk gaps are known, then a tick chosen from them, backed off when chunks "
                   "of one stream would share a read (the result says what was chosen and when)")
    g.add_argument("--workers", type=workers_count, default=1,
                   help="client processes sharing the load, each with its own event loop and core, merged exactly "
                   "(rows concatenated, histograms added); 'auto' picks from the cores and --concurrency "
                   "(default 1: one process). See docs/workers.md")
    g.add_argument("--ray", default=None, metavar="auto|ADDRESS",
                   help="run the workers as Ray actors spread over a Ray cluster's nodes ('auto': the cluster this "
                   "machine belongs to; or its address, host:port or ray://host:port); this process keeps the "
                   "server, the scraping and the memory sampling. One worker per node unless --workers N or "
                   "--workers-per-node K says otherwise. Needs pip install 'fastbench-llm[ray]'. See docs/workers.md")
    g.add_argument("--workers-per-node", type=whole_number, default=None,
                   help="with --ray: workers on each node of the cluster (default 1)")


def _add_request_args(p: argparse.ArgumentParser) -> None:
    """What each request asks for: its length and sampling, its id, extra body fields."""
    g = p.add_argument_group("requests")
    g.add_argument("--max-tokens", type=whole_number, default=None,
                   help="output tokens per request (default: the dataset's output length)")
    g.add_argument("--ignore-eos", action="store_true", help="ask the server to ignore EOS (vLLM)")
    g.add_argument("--temperature", type=float, default=None, help="sampling temperature sent in every request "
                   "(default: none sent, the server's)")
    g.add_argument("--top-p", type=float, default=None, help="top_p sent in every request")
    g.add_argument("--top-k", type=whole_number, default=None, help="top_k sent in every request (-1: off)")
    g.add_argument("--min-p", type=float, default=None, help="min_p sent in every request")
    g.add_argument("--frequency-penalty", type=float, default=None, help="frequency_penalty sent in every request")
    g.add_argument("--presence-penalty", type=float, default=None, help="presence_penalty sent in every request")
    g.add_argument("--repetition-penalty", type=float, default=None, help="repetition_penalty sent in every request")
    g.add_argument("--logprobs", type=whole_number, default=None,
                   help="log-probabilities per output token: logprobs=N on /v1/completions, top_logprobs=N on chat")
    g.add_argument("--request-id-prefix", default=None,
                   help="each request's body carries request_id PREFIX0, PREFIX1, ... (vLLM's server takes it as "
                   "the request's id)")
    g.add_argument("--extra-body", type=json_object, default={},
                   help="JSON object merged into every request body, e.g. '{\"temperature\":0}'")


def _add_dataset_args(p: argparse.ArgumentParser) -> None:
    """Where prompts come from, with the flags of the datasets' and inputs' own modules."""
    g = p.add_argument_group("dataset")
    g.add_argument("--dataset-name", default="random",
                   choices=typing.get_args(DatasetName),
                   help="where prompts come from")
    g.add_argument("--dataset-path", default=None, help="ShareGPT V3 JSON or JSONL file")
    g.add_argument("--dataset-order", default="random", choices=("random", "file"),
                   help="sharegpt: sample as vllm bench serve does, or take in file order")
    g.add_argument("--random-input-len", type=whole_number, default=1024, help="random: prompt tokens")
    g.add_argument("--random-output-len", type=whole_number, default=128, help="random: output tokens")
    g.add_argument("--random-range-ratio", type=range_ratio, default=0.0,
                   help="random: lengths drawn uniformly in [len*(1-r), len*(1+r)]")
    g.add_argument("--input-len", type=whole_number, default=None, help="as vllm bench serve: --random-input-len")
    g.add_argument("--output-len", type=whole_number, default=None,
                   help="as vllm bench serve: --random-output-len for random, --max-tokens for sharegpt and jsonl")
    g.add_argument("--sharegpt-output-len", type=whole_number, default=None,
                   help="sharegpt: output tokens per request instead of each reply's length (--max-tokens for "
                   "sharegpt)")
    g.add_argument("--disable-shuffle", action="store_true",
                   help="as vllm bench serve: prompts in file order (--dataset-order file)")
    datasetflags.add_shared_prefix_args(p, g)
    multiturn.add_args(p)
    datasetflags.add_file_dataset_args(p)
    inputflags.add_args(p)
    g.add_argument("--tokenizer", default=None,
                   help="local tokenizer directory or tokenizer.json for exact prompt lengths (never downloaded)")
    g.add_argument("--max-model-len", type=whole_number, default=None,
                   help="context length to screen prompts against (default: what /v1/models reports)")


def _add_result_args(p: argparse.ArgumentParser) -> None:
    """What is kept and shown: result files, the card's rows, labels, progress and live views."""
    g = p.add_argument_group("results")
    g.add_argument("--goodput", nargs="+", type=goodput_slo, default=[], metavar="KEY:MS",
                   help="SLOs for goodput, e.g. ttft:500 tpot:50 e2el:10000 (milliseconds)")
    g.add_argument("--result-json", default=None, help="write the result (versioned JSON schema) here")
    g.add_argument("--result-card", default=None, help="write a Markdown run card here")
    g.add_argument("--save-result", action="store_true",
                   help="also write the result under vllm bench serve's name, "
                   "{label}-{rate}qps[-concurrency{N}]-{model}-{date}.json, in --result-dir (one line of JSON)")
    g.add_argument("--append-result", action="store_true",
                   help="as --save-result, appending a line to the file when it exists")
    g.add_argument("--result-dir", default=None, help="where --save-result writes (made if missing; default: here)")
    g.add_argument("--result-filename", default=None, help="--save-result's file name instead of vLLM's")
    g.add_argument("--save-detailed", nargs="?", const=True, default=None, metavar="",
                   help="as vllm bench serve: the result files carry per-request arrays (start_times, latencies, "
                   "queue_times, generated_texts) beside input_lens, output_lens, ttfts and errors")
    g.add_argument("--requests-jsonl", default=None, metavar="PATH",
                   help="write one JSON line per request here (every time stamp, tokens, chunks, status)")
    g.add_argument("--save-outputs", action="store_true",
                   help="keep response texts and write them into --requests-jsonl records (off: memory stays "
                   "bounded)")
    g.add_argument("--percentile-metrics", type=comma_words, default=None, metavar="ttft,tpot,itl,e2el",
                   help="the metrics whose percentiles the result's flat keys and the console show (vllm's "
                   "names, also client_queue_time and e2el_including_client_queue; given: default ttft,tpot,itl; "
                   "neither this nor --metric-percentiles: p90, p99, p99.9 of all four)")
    g.add_argument("--metric-percentiles", type=comma_numbers, default=None, metavar="50,90,99",
                   help="which percentiles (default 99 once --percentile-metrics is given)")
    g.add_argument("--metadata", nargs="*", type=key_value, default=[], metavar="KEY=VALUE",
                   help="pairs written at the top level of the result, e.g. --metadata version=0.3.3 tp=1")
    g.add_argument("--label", default=None, help="a name for this run, kept in the result")
    g.add_argument("--store", metavar="DIR", default=None,
                   help="keep the run in this results store (created if new): see `fastbench runs --help`")
    g.add_argument("--variant", default=None,
                   help="the name of the server configuration measured (e.g. eagle3), kept in the result and "
                   "the store, to list and compare runs by")
    g.add_argument("--card-row", action="append", default=[], metavar="LABEL=VALUE",
                   help="a row of the card's Configuration that only you know, e.g. --card-row 'Why this "
                   "quant=NVFP4 base plus EAGLE3' (repeatable); a label the card fills itself (Model, "
                   "Family, Parameters...) replaces that row")
    g.add_argument("--card-note", action="append", default=[], metavar="TEXT",
                   help="a line of the card's Notes (repeatable)")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress line on stderr (default: only when stderr is a terminal)")
    g.add_argument("--disable-tqdm", dest="progress", action="store_const", const=False,
                   help="as vllm bench serve: no progress line (--no-progress)")
    live.add_live_args(g)
    g.add_argument("--metrics-linger", type=float, default=15.0, metavar="S",
                   help="with --metrics-port: keep serving the run's final figures this many seconds after it ends, "
                   "so that a scrape every 15 s sees them (default 15; Ctrl-C ends the wait; none after an "
                   "interrupted run)")
    g.add_argument("--synthetic-args", type=shell_words, default="",
                   help="without --base-url: flags for the synthetic server, e.g. \"--itl-ms 10\"; one flag "
                   "alone needs the = form: --synthetic-args=\"--no-usage\"")


# The fields whose flag's dest is not their name (the rest take the dest of their own name, or are made
# from several flags in config_from_args and _launch_config).
BENCH_DESTS = {"request_timeout_s": "request_timeout", "metrics_interval_s": "metrics_interval",
               "memory_interval_s": "memory_interval", "config_file": "config"}
LAUNCH_DESTS = {"engine": "launch", "host": "server_host", "port": "server_port", "ready_timeout_s": "ready_timeout",
                "log_path": "server_log", "stop_grace_s": "server_stop_grace"}


def _launch_config(ns: argparse.Namespace) -> LaunchConfig | None:
    if ns.launch is None:
        if ns.launch_model or ns.docker_image or ns.engine_args:
            raise FastbenchError("--launch-model, --engine-args and --docker-image need --launch ENGINE")
        given = [flag for flag, value in (("--docker-args", ns.docker_args), ("--server-env", ns.server_env),
                                          ("--docker-gpus", None if ns.docker_gpus == "auto" else ns.docker_gpus),
                                          ("--docker-hf-cache", ns.docker_hf_cache),
                                          ("--server-port", ns.server_port), ("--server-log", ns.server_log),
                                          ("--engine-bin", ns.engine_bin)) if value not in (None, (), [])]
        if given:
            raise FastbenchError(f"{', '.join(given)}: only with --launch ENGINE (they configure a launched server)")
        return None
    return LaunchConfig(**argfields.from_args(
        ns, LaunchConfig, renamed=LAUNCH_DESTS,
        model=ns.launch_model or "",  # none: refused with the config's other values
        env=tuple(ns.server_env)))


def _endpoint(ns: argparse.Namespace) -> str:
    """--endpoint, or the one --backend names (vllm bench serve's way of saying it)."""
    if ns.backend is None:
        return ns.endpoint or "/v1/completions"
    mapped = BACKEND_ENDPOINTS.get(ns.backend)
    if ns.backend in inputflags.REFUSED_BACKENDS:
        raise FastbenchError(f"--backend {ns.backend}: {inputflags.REFUSED_BACKENDS[ns.backend]}")
    if mapped is None:
        why = vllmflags.REFUSED_BACKENDS.get(ns.backend, "not a backend fastbench knows")
        raise FastbenchError(f"--backend {ns.backend}: fastbench does not measure it ({why}); it takes "
                             f"{', '.join(BACKEND_ENDPOINTS)}")
    return ns.endpoint or mapped  # a mismatch is refused by check_config, with the rule for /v1/rerank and /score


def _base_url(ns: argparse.Namespace) -> str | None:
    """--base-url, or http://HOST:PORT from vllm bench serve's --host/--port (either given)."""
    if ns.host is None and ns.port is None:
        return ns.base_url  # type: ignore[no-any-return]
    if ns.launch is not None:
        raise FastbenchError("--host/--port attach to a running server; a launched one listens on --server-host "
                             "and --server-port")
    if ns.base_url is not None:
        return ns.base_url  # type: ignore[no-any-return]  # as vllm bench serve: --base-url wins (a notice says so)
    port = 8000 if ns.port is None else ns.port
    checks.check_port("--port", port)
    host = ns.host or "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _output_lengths(ns: argparse.Namespace) -> tuple[int, int | None]:
    """(random_output_len, max_tokens) once vllm's --output-len and --sharegpt-output-len are applied:
    for sharegpt and jsonl they fix every request's output, which is --max-tokens here."""
    random_output_len, max_tokens = ns.random_output_len, ns.max_tokens
    fixed = ns.sharegpt_output_len if ns.dataset_name == "sharegpt" else None
    if ns.output_len is not None:
        if ns.dataset_name in ("random", "random-mm"):
            random_output_len = ns.output_len
        else:
            fixed = ns.output_len
    if fixed is not None:
        if max_tokens is not None and max_tokens != fixed:
            raise FastbenchError(f"--max-tokens {max_tokens} and --output-len/--sharegpt-output-len {fixed} disagree: "
                                 "give one")
        max_tokens = fixed
    return random_output_len, max_tokens


def notices(ns: argparse.Namespace) -> list[str]:
    """One line per vllm bench serve flag given that this run does not act on, saying why; raises for
    one that would change what is measured."""
    lines = []
    for flag, unused in vllmflags.given(ns):
        if unused.refused:
            raise FastbenchError(f"{flag}: {unused.why}")
        lines.append(f"fastbench: {flag} ignored: {unused.why}")
    if ns.base_url is not None and (ns.host is not None or ns.port is not None):
        lines.append("fastbench: --host/--port ignored: --base-url names the server (as in vllm bench serve)")
    if ns.sharegpt_output_len is not None and ns.dataset_name != "sharegpt":
        lines.append(f"fastbench: --sharegpt-output-len ignored: the dataset is {ns.dataset_name}")
    if isinstance(ns.save_detailed, str):
        lines.append("fastbench: --save-detailed PATH is the old spelling of --requests-jsonl PATH (--save-detailed "
                     "alone is vllm bench serve's switch)")
    return lines


def config_from_args(ns: argparse.Namespace, argv: Sequence[str]) -> BenchConfig:
    """The BenchConfig the parsed command line stands for; its values are checked when it runs."""
    random_output_len, max_tokens = _output_lengths(ns)
    requests_jsonl = ns.requests_jsonl
    if isinstance(ns.save_detailed, str):  # the old spelling
        if requests_jsonl is not None:
            raise FastbenchError("--save-detailed PATH and --requests-jsonl PATH name the same file: give "
                                 "--requests-jsonl")
        requests_jsonl = ns.save_detailed
    return BenchConfig(**argfields.from_args(
        ns, BenchConfig, renamed=BENCH_DESTS,
        base_url=_base_url(ns),
        endpoint=_endpoint(ns),
        api_key=ns.api_key or os.environ.get("OPENAI_API_KEY") or None,
        max_tokens=max_tokens,
        dataset_order="file" if ns.disable_shuffle else ns.dataset_order,
        dataset_options=datasetflags.dataset_options(
            ns, random_input_len=ns.input_len if ns.input_len is not None else ns.random_input_len,
            random_output_len=random_output_len, **inputflags.random_mm_given(ns)),
        **inputflags.config_fields(ns),
        goodput=dict(ns.goodput),
        save_detailed=requests_jsonl,
        launch=_launch_config(ns),
        command_line=("fastbench", *argv),
        card_rows=tuple(ns.card_row),
        card_notes=tuple(ns.card_note),
        headers=dict(ns.header or ()),
        ready_check_timeout_s=float(ns.ready_check_timeout_sec),
        per_request_arrays=ns.save_detailed is True,
        metadata=dict(ns.metadata or ()),
    ))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "synthetic-server":
        from fastbench import synthetic

        return synthetic.main(argv[1:], prog="fastbench synthetic-server")
    if argv and argv[0] == "validate":
        from fastbench.cli import validate

        return validate.main(argv[1:])
    if argv and argv[0] == "runs":
        from fastbench.cli import runs

        return runs.main(argv[1:])
    if argv and argv[0] == "compare":
        from fastbench.cli import compare

        return compare.main(argv[1:])
    if argv and argv[0] == "sweep":
        from fastbench.cli import sweep

        return sweep.main(argv[1:], sweep.RunCommand(build_parser, config_from_args))
    if argv and argv[0] == "plot":
        from fastbench.cli import plot

        return plot.main(argv[1:])
    if argv and argv[0] == "report":
        from fastbench.cli import report

        return report.main(argv[1:])
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
        for line in notices(ns):
            print(line, file=sys.stderr)
        return _run(config, ns.live, ns.metrics_port, ns.metrics_host, ns.otlp_endpoint, ns.metrics_linger)
    except FastbenchError as exc:
        print(f"fastbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fastbench: interrupted", file=sys.stderr)
        return 130


async def _run_with_signals(config: BenchConfig, progress: runtext.ProgressLine | None, listeners: list[Any]) -> Any:
    """The first Ctrl-C or SIGTERM ends the run early and keeps what was measured (the result
    files are written, marked partial); a later one abandons it (cli/interrupts.py)."""
    from fastbench import api
    from fastbench.cli.interrupts import stop_on_signals

    with stop_on_signals("fastbench: stopping; writing what was measured (signal again, a second later, "
                         "to abandon)") as stop:
        return await api.arun(config, on_progress=progress, stop=stop, on_live=listeners)


def exit_status(stopped_reason: str, collapsed: bool = False) -> int:
    """The exit status the epilog promises for a run that ended for this reason."""
    if stopped_reason == "interrupted":
        return 130
    if stopped_reason in ("completed", "time cap") and not collapsed:  # the run did what it was asked to
        return 0
    return 1  # stopped early (--max-error-rate, the server died, ...), or nothing much completed


def _run(config: BenchConfig, live_flag: bool | None = None, metrics_port: int | None = None,
         metrics_host: str = "127.0.0.1", otlp_endpoint: str | None = None, metrics_linger_s: float = 0.0) -> int:
    import asyncio  # here, as the other heavy imports: `fastbench runs` never needs them

    import uvloop

    from fastbench import api
    from fastbench.results import writers
    from fastbench.results.notes import wrapped
    from fastbench.results.result import ResultWriteError, ServerDiedError

    api.check(config)  # a mistake is its one-line error, before any line says what would be measured
    for line in runtext.opening_lines(config):  # before the run's seconds pass: what is measured
        print("\n".join(wrapped(line, "", 100)), flush=True)
    watchers = live.start_watchers(live_flag, config.progress, metrics_port, metrics_host, otlp_endpoint=otlp_endpoint,
                                   secrets=Secrets.of_config(config))
    show = config.progress if config.progress is not None else sys.stderr.isatty()
    progress = runtext.ProgressLine() if show and watchers.view is None else None
    failure: ResultWriteError | ServerDiedError | None = None
    exporter = None
    try:
        try:
            result = uvloop.run(_run_with_signals(config, progress, watchers.listeners))
        except asyncio.CancelledError:
            raise KeyboardInterrupt from None
        except (ResultWriteError, ServerDiedError) as exc:  # the run was measured: show it anyway
            failure, result = exc, exc.result
        exporter, watchers.exporter = watchers.exporter, None  # measured: its last figures stay a while
        watchers.close()
        if progress is not None:
            progress.close()
            progress = None
        print(writers.render_console(result))
        if result.run_id is not None:
            print(f"stored: run {result.run_id} in {config.store}")
        for line in runtext.closing_lines(config, result, written=not isinstance(failure, ResultWriteError)):
            print(line)  # whole: a path is copied from it
        if failure is not None:
            print(f"fastbench: error: {failure}", file=sys.stderr)
        if exporter is not None and result.stopped_reason != "interrupted":  # interrupted: the result is all
            exporter.linger(metrics_linger_s)
    finally:
        watchers.close()
        if exporter is not None:
            exporter.close()
        if progress is not None:
            progress.close()
    if failure is not None:
        return 2 if isinstance(failure, ResultWriteError) else 1
    return exit_status(result.stopped_reason, result.collapsed)


if __name__ == "__main__":
    sys.exit(main())
