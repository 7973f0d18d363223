"""Command line of the synthetic server: ``python -m fastbench.synthetic`` / ``fastbench synthetic-server``.

Also the entry point of the subprocess that ``SyntheticServer`` starts (see ``BOOTSTRAP`` there).
"""

from __future__ import annotations

import argparse
import difflib
import math
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from fastbench.synthetic.contracts import ServerConfig
from fastbench.synthetic.engine import FAULTS, serve

HOUR_MS = 3_600_000.0
MAX_TOKENS_PER_CHUNK = 1_000_000


def tokens_per_chunk_range(text: str) -> tuple[int, int]:
    """``--tokens-per-chunk``'s value, N or A-B, as (least, most)."""
    try:
        if "-" in text:
            lo_s, hi_s = text.split("-", 1)
            lo, hi = int(lo_s), int(hi_s)
        else:
            lo = hi = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or A-B, got {text!r}") from None
    if not 1 <= lo <= hi <= MAX_TOKENS_PER_CHUNK:
        raise argparse.ArgumentTypeError(f"need 1 <= A <= B <= {MAX_TOKENS_PER_CHUNK:,}, got {text!r}")
    return lo, hi


# What each --fault does, one line each (the package docstring says it at length).
FAULT_HELP: dict[str, str] = {
    "refuse": "the port is bound but never listened on: every connection is refused (ignores --fault-every)",
    "reset-before-headers": "TCP RST as soon as the request is read",
    "reset-mid-stream": "TCP RST at the middle of the stream",
    "http-500": "answer 500 with an error body",
    "http-429": "answer 429 with Retry-After: 1",
    "not-sse": "a streaming request gets 200 with the JSON body of a whole response",
    "malformed-sse": "the middle chunk is 'data: {not json'",
    "oversized-event": "one extra data event of --oversized-bytes before the first chunk",
    "no-done": "the chunked body ends without [DONE]",
    "error-event": "vLLM's {\"error\": {...}} event at the middle of the stream, then [DONE]",
    "stall": "the schedule from the middle of the stream on shifts by --stall-s",
    "trickle": "the whole response is written one byte at a time, --trickle-us apart",
    "close-after-response": "Connection: close, and the connection closed after the response",
    "usage-contradictory": "per-chunk usage decreases from the middle on; the final usage reports half the tokens",
}


class _Parser(argparse.ArgumentParser):
    """No abbreviations (--itl would be taken as --itl-ms without a word): an unknown flag is an error
    naming the closest known one. The client's parser does the same; this server shares no code with
    the client (a bug common to both would hide itself)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        ns, extras = self.parse_known_args(args, namespace)
        flags = [arg.split("=", 1)[0] for arg in extras if arg.startswith("--")]
        if flags:
            known = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
            close = difflib.get_close_matches(flags[0], known, n=1, cutoff=0.6)
            self.error(f"unrecognized option {flags[0]}" + (f"; did you mean {close[0]}?" if close else ""))
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")  # one line: fastbench repeats it as the reason


def build_parser(prog: str = "python -m fastbench.synthetic") -> argparse.ArgumentParser:
    faults = "\n".join(f"  {name:<22} {FAULT_HELP[name]}" for name in FAULTS)
    p = _Parser(prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
                description="fastbench's synthetic OpenAI-compatible streaming server (the yardstick). Prints "
                "'READY http://HOST:PORT' once listening.",
                epilog=f"fault modes (--fault; every --fault-every-th generation request gets it):\n{faults}")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (default 8000)")
    p.add_argument("--model", default="fastbench-synthetic", help="served model name")
    p.add_argument("--strict-model", action="store_true",
                   help="answer 404 to requests naming another model (default: accept any name, echo it)")
    p.add_argument("--lora-modules", nargs="+", default=[], metavar="NAME[=PATH]",
                   help="LoRA adapters served beside --model, as vLLM's flag: listed by /v1/models, accepted with "
                   "--strict-model, each name's requests counted in /fb/stats (requests_by_model)")
    p.add_argument("--max-model-len", type=int, default=4096,
                   help="context length /v1/models reports; longer requests get vLLM's 400 (default 4096)")
    p.add_argument("--default-max-tokens", type=int, default=16, help="max_tokens when a request omits it")
    p.add_argument("--exit-with-parent", type=int, default=None, metavar="PID",
                   help="stop when process PID exits (fastbench passes its own, so that a fastbench killed "
                   "with SIGKILL does not leave its built-in server running)")
    t = p.add_argument_group("timing")
    t.add_argument("--ttft-ms", type=float, default=None,
                   help="time to first token (default 50, or 0 when --prefill-tok-s is given)")
    t.add_argument("--prefill-tok-s", type=float, default=None, help="adds prompt_tokens / rate to TTFT")
    t.add_argument("--itl-ms", type=float, default=20.0, help="time between chunks (default 20)")
    t.add_argument("--pooling-ms", type=float, default=5.0,
                   help="embeddings, pooling, score, rerank: each whole answer after this long (default 5)")
    t.add_argument("--jitter-ms", type=float, default=0.0, help="uniform +- jitter on each due time")
    t.add_argument("--tokens-per-chunk", type=tokens_per_chunk_range, default=(1, 1), metavar="N|A-B",
                   help="tokens per decode step after the first chunk: fixed N or uniform A..B (default 1)")
    t.add_argument("--seed", type=int, default=0,
                   help="seed of the output words, jitter, tokens per chunk and --eos-prob (default 0)")
    t.add_argument("--eos-prob", type=float, default=0.0,
                   help="per-token probability of stopping early (requests without ignore_eos)")
    t.add_argument("--timer", choices=("auto", "timerfd", "call_at"), default="auto",
                   help="timerfd: ns-precise (Linux); call_at: uvloop's 1 ms timers, rounded up")
    e = p.add_argument_group(
        "engine model", "batched engine steps instead of each request's own schedule, on when any of these is\n"
        "given: a step takes --step-ms + --step-per-seq-ms x sequences + --step-per-token-ms x tokens\n"
        "verified ((K+1) per decoding sequence) + K x --draft-ms + its joining prompts' tokens / --prefill-tok-s,\n"
        "and every sequence in it sends one chunk at its end (--ttft-ms then defaults to 0)")
    e.add_argument("--step-ms", type=float, default=None, metavar="MS",
                   help="fixed time of every step, the weights' read (default --itl-ms)")
    e.add_argument("--step-per-seq-ms", type=float, default=None, metavar="MS",
                   help="added per sequence in the step, its KV cache's read (default 0)")
    e.add_argument("--step-per-token-ms", type=float, default=None, metavar="MS",
                   help="added per token the step decodes or verifies, the compute (default 0)")
    e.add_argument("--max-num-seqs", type=int, default=None, metavar="N",
                   help="most sequences in a step; later requests wait, in arrival order (default 256)")
    e.add_argument("--spec-tokens", type=int, default=None, metavar="K",
                   help="speculative decoding: draft tokens each decoding sequence verifies a step (default 0)")
    e.add_argument("--spec-acceptance", type=float, default=None, metavar="A",
                   help="probability a draft token is accepted, given the ones before it were; draft position "
                   "i is accepted at A^(i+1) (default 0.7)")
    e.add_argument("--draft-ms", type=float, default=None, metavar="MS",
                   help="drafter time per draft position, once a step (default 0)")
    c = p.add_argument_group("prefix cache", "vLLM's automatic prefix caching, modelled: cached prompt tokens "
                             "cost no prefill time (see --prefill-tok-s); counters in /metrics")
    c.add_argument("--enable-prefix-caching", action="store_true",
                   help="cache prompt blocks (off by default here; vLLM V1 has it on)")
    c.add_argument("--block-size", type=int, default=16, help="tokens per cached block")
    c.add_argument("--prefix-cache-blocks", type=int, default=65536,
                   help="blocks the cache holds before evicting the least recently used")
    c.add_argument("--enable-prompt-tokens-details", action="store_true",
                   help="the final usage carries prompt_tokens_details.cached_tokens: the prompt tokens the "
                   "cache served, left out when none (as vLLM's flag of the name)")
    c.add_argument("--no-reset-prefix-cache", action="store_true",
                   help="answer 404 to POST /reset_prefix_cache, as vLLM does without VLLM_SERVER_DEV_MODE=1")
    o = p.add_argument_group("output shape")
    o.add_argument("--reasoning-tokens", type=int, default=0,
                   help="chat: the first N output tokens stream as delta.reasoning")
    o.add_argument("--reasoning-field", default="reasoning", choices=("reasoning", "reasoning_content"),
                   help="the delta field reasoning tokens stream in: vLLM's 'reasoning', or the older "
                   "'reasoning_content' (default reasoning)")
    o.add_argument("--no-usage", action="store_true", help="never send usage")
    o.add_argument("--final-usage-only", action="store_true",
                   help="usage only in the last content chunk (like llama.cpp), whatever stream_options say")
    f = p.add_argument_group("faults")
    f.add_argument("--fault", choices=FAULTS, default=None, metavar="MODE",
                   help="inject this fault (the modes are listed below; default none)")
    f.add_argument("--fault-every", type=int, default=1, help="every Nth generation request is faulty")
    f.add_argument("--stall-s", type=float, default=1.0, help="stall: pause length")
    f.add_argument("--trickle-us", type=int, default=200, help="trickle: gap between bytes")
    f.add_argument("--oversized-bytes", type=int, default=10 * 1024 * 1024, help="oversized-event: size")
    return p


MAX_OVERSIZED_BYTES = 256 << 20


ENGINE_FLAGS = ("step_ms", "step_per_seq_ms", "step_per_token_ms", "max_num_seqs", "spec_tokens",
                "spec_acceptance", "draft_ms")


def engine_model_on(ns: argparse.Namespace) -> bool:
    return any(getattr(ns, name) is not None for name in ENGINE_FLAGS)


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def config_from_args(ns: argparse.Namespace) -> ServerConfig:
    engine = engine_model_on(ns)
    ttft_ms = ns.ttft_ms
    if ttft_ms is None:
        ttft_ms = 0.0 if ns.prefill_tok_s or engine else 50.0
    lo, hi = ns.tokens_per_chunk
    return ServerConfig(
        host=ns.host, port=ns.port, model=ns.model, max_model_len=ns.max_model_len,
        default_max_tokens=ns.default_max_tokens, ttft_ms=ttft_ms, prefill_tok_s=ns.prefill_tok_s,
        itl_ms=ns.itl_ms, jitter_ms=ns.jitter_ms, tpc_min=lo, tpc_max=hi, seed=ns.seed,
        eos_prob=ns.eos_prob, reasoning_tokens=ns.reasoning_tokens, reasoning_field=ns.reasoning_field,
        no_usage=ns.no_usage, final_usage_only=ns.final_usage_only, strict_model=ns.strict_model,
        lora_modules=tuple(dict.fromkeys(m.partition("=")[0] for m in ns.lora_modules)),
        fault=ns.fault, fault_every=ns.fault_every, stall_s=ns.stall_s, trickle_us=ns.trickle_us,
        oversized_bytes=ns.oversized_bytes, timer=ns.timer, enable_prefix_caching=ns.enable_prefix_caching,
        exit_with_parent=ns.exit_with_parent,
        block_size=ns.block_size, prefix_cache_blocks=ns.prefix_cache_blocks,
        reset_prefix_cache_endpoint=not ns.no_reset_prefix_cache,
        engine_model=engine, step_ms=ns.step_ms, step_per_seq_ms=_or(ns.step_per_seq_ms, 0.0),
        step_per_token_ms=_or(ns.step_per_token_ms, 0.0), max_num_seqs=_or(ns.max_num_seqs, 256),
        spec_tokens=_or(ns.spec_tokens, 0), spec_acceptance=_or(ns.spec_acceptance, 0.7),
        draft_ms=_or(ns.draft_ms, 0.0),
        prompt_tokens_details=ns.enable_prompt_tokens_details, pooling_ms=ns.pooling_ms,
    )


MAX_SPEC_TOKENS = 64  # speculative methods draft a few dozen tokens a step at most
MAX_NUM_SEQS = 1_000_000


def _check_engine_flags(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    if not engine_model_on(ns):
        return
    for flag, value in (("--step-ms", ns.step_ms), ("--step-per-seq-ms", ns.step_per_seq_ms),
                        ("--step-per-token-ms", ns.step_per_token_ms), ("--draft-ms", ns.draft_ms)):
        if value is not None and not 0 <= value <= HOUR_MS:
            parser.error(f"{flag} must be a number between 0 and {HOUR_MS:.0f}, got {value}")
    if ns.max_num_seqs is not None and not 1 <= ns.max_num_seqs <= MAX_NUM_SEQS:
        parser.error(f"--max-num-seqs must be between 1 and {MAX_NUM_SEQS:,}, got {ns.max_num_seqs}")
    if ns.spec_tokens is not None and not 0 <= ns.spec_tokens <= MAX_SPEC_TOKENS:
        parser.error(f"--spec-tokens must be between 0 and {MAX_SPEC_TOKENS}, got {ns.spec_tokens}")
    if ns.spec_acceptance is not None and not 0.0 <= ns.spec_acceptance <= 1.0:
        parser.error(f"--spec-acceptance must be in [0, 1], got {ns.spec_acceptance}")
    if not ns.spec_tokens and (ns.spec_acceptance is not None or ns.draft_ms):
        parser.error("--spec-acceptance and --draft-ms need --spec-tokens K (K >= 1)")
    if ns.tokens_per_chunk != (1, 1):
        parser.error("--tokens-per-chunk shapes each request's own schedule; the engine model's tokens per "
                     "chunk come from --spec-tokens and --spec-acceptance")
    if ns.fault == "stall":
        parser.error("--fault stall moves one request's own schedule; it cannot be used with the engine model")


def main(argv: list[str] | None = None, prog: str = "python -m fastbench.synthetic") -> int:
    """Run the synthetic server until SIGTERM or SIGINT; returns the exit status."""
    parser = build_parser(prog)
    ns = parser.parse_args(argv)
    if not 0 <= ns.port <= 65535:
        parser.error(f"--port must be between 0 and 65535, got {ns.port}")
    # Each check says what must hold, so that nan (which fails every comparison) fails it too.
    # Delays past an hour are a typo, and would overflow the nanosecond timers.
    for flag, value, most in (("--itl-ms", ns.itl_ms, HOUR_MS), ("--jitter-ms", ns.jitter_ms, HOUR_MS),
                              ("--ttft-ms", ns.ttft_ms, HOUR_MS),
                              ("--pooling-ms", ns.pooling_ms, HOUR_MS), ("--stall-s", ns.stall_s, HOUR_MS / 1e3)):
        if value is not None and not 0 <= value <= most:
            parser.error(f"{flag} must be a number between 0 and {most:.0f}, got {value}")
    if ns.prefill_tok_s is not None and not 0 < ns.prefill_tok_s < math.inf:
        parser.error(f"--prefill-tok-s must be a finite number > 0, got {ns.prefill_tok_s}")
    if not 0.0 <= ns.eos_prob <= 1.0:
        parser.error("--eos-prob must be in [0, 1]")
    if ns.fault_every < 1 or ns.max_model_len < 1 or ns.default_max_tokens < 1:
        parser.error("--fault-every, --max-model-len and --default-max-tokens must be >= 1")
    if ns.block_size < 1 or ns.prefix_cache_blocks < 1:
        parser.error("--block-size and --prefix-cache-blocks must be >= 1")
    if ns.reasoning_tokens < 0 or ns.seed < 0:
        parser.error("--reasoning-tokens and --seed must be >= 0")
    # Each oversized event is built in memory, and a trickled byte waits this long: past these, a typo.
    if not 0 <= ns.oversized_bytes <= MAX_OVERSIZED_BYTES:
        parser.error(f"--oversized-bytes must be between 0 and {MAX_OVERSIZED_BYTES:,}, got {ns.oversized_bytes:,}")
    if not 0 <= ns.trickle_us <= 1_000_000:
        parser.error(f"--trickle-us must be between 0 and 1,000,000, got {ns.trickle_us:,}")
    _check_engine_flags(parser, ns)
    cfg = config_from_args(ns)
    import uvloop

    try:
        return int(uvloop.run(serve(cfg)))
    except OSError as e:
        print(f"fastbench-synthetic: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
