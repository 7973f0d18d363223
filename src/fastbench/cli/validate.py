"""``fastbench validate``: prove that fastbench's figures are the server's, not the client's own.

The command line only: the run is :mod:`fastbench.api.validation` (``validate_client``), where what it
measures and how each figure is derived is written out.
"""


from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import orjson

from fastbench import atomicfile
from fastbench.api.lookups import STREAMED_BACKENDS, STREAMED_ENDPOINTS, check_base_url, check_tokens_per_chunk
from fastbench.api.validation import DEFAULT_OUTPUT_LEN, ENDPOINT, checked_settings, validate_client
from fastbench.api.validation_whole import WHOLE_BACKENDS, validate_whole
from fastbench.cli.argfields import from_args
from fastbench.cli.argtypes import HelpFormatter, Parser, coalesce_window
from fastbench.exceptions import ConfigError, FastbenchError
from fastbench.results import writers
from fastbench.results.validation_report import verdict_line

__all__ = ("build_parser", "main")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="fastbench validate",
        description="Measure fastbench's own timing error and overhead against the built-in synthetic "
                    "server, which stamps its send time into every chunk; prints a table and a verdict.",
        formatter_class=HelpFormatter,
        epilog="Exit status: 0 PASS, 1 FAIL, 2 bad input, the run could not be made or --json could not be "
               "written.",
    )
    p.add_argument("--pooling-ms", type=float, default=5.0, help="with --backend: the server answers after this long")
    p.add_argument("--batch-size", type=int, default=1, help="with --backend: inputs per request")
    p.add_argument("--concurrency", type=int, default=16, help="streams kept open (closed loop)")
    p.add_argument("--request-rate", type=float, default=None,
                   help="open-loop arrivals per second (Poisson), --concurrency caps streams")
    p.add_argument("--tokens-per-chunk", type=check_tokens_per_chunk, default="1", metavar="N|A-B",
                   help="tokens per decode step after the first chunk (1-4 mimics speculative decoding)")
    p.add_argument("--itl-ms", type=float, default=20.0, help="server: time between chunks")
    p.add_argument("--ttft-ms", type=float, default=50.0, help="server: time to first token")
    p.add_argument("--coalesce-ms", type=coalesce_window, default="auto", metavar="auto|X",
                   help="client: drain the sockets at least every X ms, not on every arrival (fewer "
                   "wake-ups per chunk; kernel stamps keep arrival times; streams about to end are still "
                   "watched on every arrival; keep it under half the chunk gap, or chunks of one stream "
                   "share a read); 0: on every arrival; auto (default): a tick chosen from the chunk gaps")
    p.add_argument("--workers", type=int, default=None,
                   help="client processes sharing the streams, merged exactly (default 1); the report is of the "
                   "merged figures. With --ray: that many Ray actors spread over the nodes")
    p.add_argument("--ray", default=None, metavar="auto|ADDRESS",
                   help="the client workers as Ray actors on a Ray cluster's nodes (auto: the cluster this machine "
                   "belongs to; or host:port, ray://host:port), one per node unless --workers or "
                   "--workers-per-node says otherwise; the server stays here. Each node's clock offset and its "
                   "uncertainty are in the report, and skews and bounds are widened by it. Needs "
                   "pip install 'fastbench-llm[ray]'")
    p.add_argument("--workers-per-node", type=int, default=None, metavar="K",
                   help="with --ray: K workers on each node")
    p.add_argument("--num-requests", type=int, default=None, help="default: 3 x --concurrency")
    p.add_argument("--endpoint", default=None, choices=STREAMED_ENDPOINTS,
                   help="the API the requests speak, streamed by the synthetic server as its servers do "
                   f"(default {ENDPOINT})")
    p.add_argument("--backend", default=None, metavar="{" + ",".join((*STREAMED_BACKENDS, *WHOLE_BACKENDS)) + "}",
                   help="vllm bench serve's name for the endpoint (openai-responses: /v1/responses, "
                   "anthropic-messages: /v1/messages, ...); an API answered whole (openai-embeddings, vllm-pooling, "
                   "vllm-rerank...) is validated by the client's E2E end stamps against the server's send log, and "
                   "its input tokens against the server's usage (--concurrency, --num-requests, --tolerance-ms, "
                   "--base-url, --no-warmup, --json apply)")
    p.add_argument("--output-len", type=int, default=DEFAULT_OUTPUT_LEN, help="output tokens per request")
    p.add_argument("--tolerance-ms", type=float, default=0.5,
                   help="limit on p99 skew and on the p99-level error bounds")
    p.add_argument("--max-seconds", type=float, default=None, help="cap on the measured window")
    p.add_argument("--base-url", default=None,
                   help="use a synthetic server already running with the same --ttft-ms/--itl-ms/"
                        "--tokens-per-chunk instead of starting one")
    p.add_argument("--pin", action="store_true", help="pin server and client to different CPUs")
    p.add_argument("--no-warmup", action="store_true",
                   help="skip the warm-up (one 1-token request per stream, opening the connections)")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON ('-' for stdout)")
    p.add_argument("--quiet", action="store_true", help="no table: only the verdict line (on stderr with --json -)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    endpoint = ns.endpoint or ENDPOINT
    if ns.backend in WHOLE_BACKENDS:
        return _whole(parser, ns)
    if ns.backend is not None:
        if ns.backend not in STREAMED_BACKENDS:
            parser.error(f"--backend {ns.backend}: validate speaks {', '.join((*STREAMED_BACKENDS, *WHOLE_BACKENDS))}")
        if ns.endpoint is not None and ns.endpoint != STREAMED_BACKENDS[ns.backend]:
            parser.error(f"--backend {ns.backend} calls {STREAMED_BACKENDS[ns.backend]}, --endpoint says "
                         f"{ns.endpoint}: give one of them")
        endpoint = STREAMED_BACKENDS[ns.backend]
    settings = from_args(ns, checked_settings, warmup=not ns.no_warmup)  # the run's settings, as checked
    try:  # before the run, so that nothing is started for settings that cannot work
        checked_settings(**settings)
        if ns.base_url is not None:
            check_base_url(ns.base_url, endpoint)
        if ns.json and ns.json != "-":  # before the run, so that the run is not thrown away
            writers.check_output_path("--json", ns.json)
    except ConfigError as exc:
        parser.error(str(exc))
    try:
        report = validate_client(**settings, base_url=ns.base_url, endpoint=endpoint)
    except (FastbenchError, OSError, RuntimeError, ValueError) as exc:
        print(f"fastbench validate: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fastbench validate: interrupted", file=sys.stderr)
        return 130
    if not ns.quiet:
        print(report.render())
    else:  # stdout may be the JSON (--json -)
        print(verdict_line(report), file=sys.stderr if ns.json == "-" else sys.stdout)
    if ns.json:
        text = orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        if ns.json == "-":
            sys.stdout.write(text.decode() + "\n")
        else:
            try:
                atomicfile.write_bytes_atomic(ns.json, text + b"\n")
            except OSError as exc:  # disk full, the directory gone: the table at least is shown
                if ns.quiet:
                    print(report.render())
                print(f"fastbench validate: error: could not write --json {ns.json}: {exc.strerror or exc}",
                      file=sys.stderr)
                return 2
    return 0 if report.passed else 1


def _whole(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> int:
    """validate --backend: an API answered whole (api.validation_whole)."""
    if ns.json and ns.json != "-":
        try:
            writers.check_output_path("--json", ns.json)
        except ConfigError as exc:
            parser.error(str(exc))
    try:
        report = validate_whole(ns.backend, ns.concurrency, ns.num_requests, ns.pooling_ms, ns.batch_size,
                                ns.tolerance_ms, base_url=ns.base_url, warmup=not ns.no_warmup)
    except ConfigError as exc:
        parser.error(str(exc))
    except (FastbenchError, OSError, RuntimeError, ValueError) as exc:
        print(f"fastbench validate: error: {exc}", file=sys.stderr)
        return 2
    text = report.render()
    print(text if not ns.quiet else text.splitlines()[-1], file=sys.stderr if ns.json == "-" else sys.stdout)
    if ns.json:
        data = orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2) + b"\n"
        if ns.json == "-":
            sys.stdout.write(data.decode())
        else:
            atomicfile.write_bytes_atomic(ns.json, data)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
