"""The written definition of every figure a run reports, and the units its histograms hold.

The strings in :data:`DEFINITIONS` go verbatim into docs/definitions.md, docs/result-schema.md and
every result file (tests check that the three agree); :data:`TIME_METRICS` and :data:`RATE_METRICS` name
the distributions, :data:`CORE_HISTOGRAMS` the ones the native core records itself.
"""

from __future__ import annotations

# Rates (tokens/s) are recorded in HDR histograms as milli-tokens per second.
RATE_SCALE = 1000

DEFINITIONS: dict[str, str] = {
    # latency, per request (completed requests only)
    "ttft": (
        "Time to first token: receive stamp of the first event carrying output of any kind "
        "(reasoning or answer) minus the request's start. The start is its scheduled arrival time "
        "in open loop (coordinated-omission-correct: client lateness and waiting for a concurrency "
        "slot count) and the time its bytes went to the kernel in closed loop, as in vllm bench "
        "serve (the client's turnaround from a freed slot to the send is reported as lateness), "
        "except that a new connection's setup is not in it (vllm bench serve's clock starts before "
        "connecting: ~1 ms more on the first request of each connection on loopback). "
        "This is what the vllm keys *_ttft_ms hold."
    ),
    "ttft_raw": (
        "Raw TTFT: the same first-output stamp minus the time the request's bytes were handed to "
        "the kernel (after any connect). Equal to TTFT in closed loop; in open loop the two differ "
        "when the client was late or requests waited for a slot."
    ),
    "ttfa": (
        "Time to first answer token: receive stamp of the first event carrying answer text (not "
        "reasoning) minus the request's start (as for TTFT). Equals TTFT for models without "
        "reasoning output."
    ),
    "tpot": (
        "Time per output token: (E2E latency - TTFT) / (output tokens - 1), per request with at "
        "least 2 output tokens (the first token is excluded). Output tokens are the server's count."
    ),
    "itl": (
        "Inter-chunk latency: gap between the receive stamps of consecutive output chunks of one "
        "request, once per gap. This is what vllm bench serve calls ITL (*_itl_ms); with "
        "speculative decoding one chunk carries several tokens. Per-request ITL arrays are not "
        "kept, only this histogram."
    ),
    "itl_token": (
        "Per-token inter-token latency: each chunk gap divided by the number of tokens in that "
        "chunk, recorded once per token. Needs per-chunk usage; otherwise every chunk counts as "
        "1 token and it equals the chunk ITL."
    ),
    "e2el": (
        "End-to-end latency: receive stamp of the read that completed the response minus the "
        "request's start (as for TTFT; vllm's *_e2el_ms)."
    ),
    "e2el_raw": "Raw end-to-end latency: the same end stamp minus the send time.",
    "lateness": (
        "Scheduled to sent: send time minus scheduled time, per request: in open loop the arrival "
        "time, in closed loop the moment the request's slot freed (the previous response's end "
        "stamp). Includes opening a new connection and, in open loop, waiting for a free "
        "concurrency slot (the load's queueing); the client's own lateness past the moment a request "
        "could go is late_share's."
    ),
    "connect": "Connect time: time spent opening a new connection, for requests that opened one.",
    "skew": (
        "Client skew: receive stamp minus the send stamp the synthetic server writes into each "
        "chunk, per chunk; only in runs against the built-in synthetic server. It measures the "
        "client's own delay."
    ),
    # rates, per request
    "decode_rate": (
        "Per-stream decode rate: (output tokens - 1) / (E2E latency - TTFT), in tokens/s, per "
        "request with at least 2 output tokens; the decode speed one client sees."
    ),
    "prefill_rate": (
        "Prefill rate: prompt tokens / raw TTFT (from the send time), in tokens/s, per request; "
        "reported as a distribution. Includes connect time and any queueing in the server, so it "
        "is a lower bound on the engine's prefill speed. Never total prompt tokens / run time."
    ),
    # throughputs
    "duration": (
        "Measured window in seconds: from the first scheduled request (after warm-ups) to the "
        "last completion or the time cap."
    ),
    "request_throughput": "Completed requests / duration, in requests/s.",
    "input_throughput": (
        "Prompt tokens of completed requests / duration, in tokens/s; a prompt's tokens are the server's "
        "usage count where it reports one (image tokens included), else the workload's count. A load "
        "figure, not a prefill speed: with few or slow requests it says little about prefill."
    ),
    "output_throughput": (
        "Aggregate decode throughput: output tokens of completed requests / duration, in tokens/s "
        "(vllm's output_throughput)."
    ),
    "total_token_throughput": "(Prompt + output tokens of completed requests) / duration, in tokens/s.",
    "prefill_throughput": (
        "Aggregate prefill throughput: prompt tokens of completed requests / the wall time during "
        "which at least one of them was between send and first output, in tokens/s."
    ),
    "total_input_sequences": (
        "APIs answered whole (embeddings, pooling, score, rerank): the inputs of completed requests, each "
        "request's as --random-batch-size set them (rerank: its documents); vllm's total_input_sequences. "
        "Such an answer has no stream: TTFT, TPOT, ITL and the output throughputs do not apply and are null, "
        "with the reason in fastbench.pooling.not_applicable."
    ),
    "input_sequence_throughput": (
        "Inputs per second: total_input_sequences / duration (vllm's input_sequence_throughput). Its "
        "companion input_throughput counts the input tokens each answer's usage reports (prompt_tokens, else "
        "total_tokens), or the request's own count where an answer has none."
    ),
    "request_goodput": (
        "Goodput: completed requests meeting every SLO in the goodput setting (TTFT, TPOT, E2E "
        "latency, each <= its limit in ms; a request with fewer than 2 output tokens meets any "
        "TPOT limit) / duration, in requests/s. Absent when no SLO was set."
    ),
    # steady state: the part of the window where the load held (results.steady), beside the whole window's
    "steady_interval": (
        "Steady-state interval: the part of the measured window in which the load was the one asked for. "
        "Closed loop: from the instant the requests in flight (each from its send to its end stamp, over "
        "every --workers process) first reached the target concurrency to the instant they last fell below "
        "it, for good (the drain: no request was left to send, or the run stopped); the client's brief dips "
        "between one response's end and the next send lie inside it. Open loop at a set --request-rate: "
        "from the first scheduled arrival to the last one (the drain after it left out). Agent trees "
        "(--dataset-name weka) in closed loop: the same rule over the trees in flight, each from its first "
        "call's send to its last call's end (one the run's stop cut short: to the run's end), against "
        "--concurrency slots: from the instant every slot first held a tree to the instant the trees in "
        "flight last fell below the slots (the pool of trees ran dry, or the run stopped); a tree holds its "
        "slot through its gaps and joins, when few of its calls are in flight. Agent trees at a --request-rate: "
        "from the first tree's arrival plus the longest tree's time (from its arrival to its last call's end) "
        "to the last tree's arrival: every tree in flight then arrived inside the arrivals' span and every "
        "earlier one has ended, so what is in flight is the stationary arrivals' and the trees' own, where "
        "before it the calls ramp up and after it they drain. Warm-ups are never in it. "
        "A run has none, and its result says why, when the closed "
        "loop never reached its target (fewer prompts, or trees, than the concurrency, say), the open loop "
        "had fewer than 2 arrivals, the rate ramped (--ramp-up-strategy: it never held), arrivals followed "
        "a trace's times, requests came as multi-turn sessions (think times set what is in flight), or "
        "agent trees arrived at a --request-rate over no longer than the longest tree took. With Ray its "
        "edges are on the driver's clock, onto which each node's stamps are moved."
    ),
    "steady_output_throughput": (
        "Steady-state output throughput: output tokens generated inside the steady interval / its length, "
        "in tokens/s. The tokens of completed requests, and of those the run's stop cut short, are placed "
        "in time: at their chunks' receive stamps where --save-detailed kept them (each chunk an equal "
        "share of its request's output tokens: per-chunk counts are not kept), otherwise the first at its "
        "first-token stamp and the rest at an even pace up to the end stamp (the pace TPOT assumes); only "
        "those inside the interval count. Failed requests' tokens do not. Where output_throughput counts "
        "the ramp-up and the drain, this is what the server sustained at the target load."
    ),
    "steady_request_throughput": (
        "Steady-state request throughput: completed requests served inside the steady interval / its "
        "length, in requests/s; each counts the share of its send-to-end time inside the interval (1 when "
        "wholly inside), so those the interval's edges cut count for the part they spent in it."
    ),
    "steady_requests": (
        "Requests inside the steady interval: completed requests whose start (the send in closed loop, "
        "the scheduled arrival in open loop, as for TTFT) is at or after the interval's start and whose "
        "end stamp is at or before its end. The steady TTFT, TPOT, ITL and E2E figures are theirs, as "
        "their whole-window figures are defined; ITL from their chunk stamps, so only with --save-detailed "
        "(null without)."
    ),
    # counts and client figures
    "completed": "Requests that finished without error inside the measured window.",
    "failed": "Requests that ended with an error (any class but CANCELLED), by ErrorClass name.",
    "cancelled": ("Requests in flight when the run stopped early (time cap, interrupt, error-rate stop), and in "
                  "open loop those that had arrived but still waited for a free slot: incomplete, not failed."),
    "not_started": "Requests of the workload never scheduled before the run ended.",
    "mean_tokens_per_chunk": (
        "Output tokens / output chunks over completed requests with server usage: a client-side "
        "estimate of the speculative-decoding acceptance length (the server may merge steps into "
        "one chunk under load)."
    ),
    "prefix_cache_hit_rate": (
        "Prefix-cache hit rate: the server's cached prompt tokens / prompt tokens it looked up in its prefix "
        "cache, from the deltas of its /metrics counters vllm:prefix_cache_hits_total and "
        "vllm:prefix_cache_queries_total between the measured window's first and last reads. "
        "The server's figure, not the client's: fastbench only reads it."
    ),
    "cached_tokens": (
        "Cached tokens, per completed request: usage.prompt_tokens_details.cached_tokens, the prompt tokens "
        "the server says its prefix cache served (vLLM with --enable-prompt-tokens-details, SGLang with "
        "--enable-cache-report; fastbench adds the flag to a server it launches). vLLM leaves the field out "
        "when nothing was cached, so where any request of the run carried it, a request whose usage came "
        "without it counts as 0; where none did, there is no figure. Reported as a distribution (mean, "
        "median, p99) in tokens."
    ),
    "cached_tokens_share": (
        "Cached-token share: sum of cached tokens / sum of prompt tokens over the completed requests counted "
        "in cached_tokens (the server's own per-request account, beside its /metrics prefix_cache_hit_rate); "
        "null where no request's usage carried cached_tokens."
    ),
    "expected_prefix_share": (
        "Expected prefix share: the prompt tokens a prefix cache could serve if it held only what this run "
        "sent before each request, over the prompt tokens of the completed requests. Per request, in the "
        "order sent (warm-ups first): the leading tokens it shares with an earlier request (a shared prefix "
        "of --random-prefix-len, prefix_repetition or generated-shared-prefix, a trace's hash-id blocks "
        "already sent, the whole prompt where a dataset ran short and reused it; in a multi-turn session the "
        "previous turn's prompt, and its output where the history carries the server's replies), plus the "
        "tokens the server counts beyond the workload's own (a chat template's); 0 for random and burstgpt "
        "prompts. Null (unknown) for prompts read from a file."
    ),
    "prefix_cache_warning": (
        "Prefix-cache warning: one line, set when the observed share (cached_tokens_share where the server "
        "reports cached tokens, else prefix_cache_hit_rate) exceeds expected_prefix_share by more than 0.2: "
        "the cache held prompts before the run (most often the same prompts, the same --seed, sent before), "
        "so TTFT, prefill rate and E2E latency measure the cache. Null when not warned, and when the expected "
        "share is unknown."
    ),
    "max_concurrent_requests": "Most requests in flight at once (between send and end), exact.",
    "mean_in_flight": "Time-weighted mean of requests in flight over the measured window.",
    "late_share": (
        "Share of started requests the client sent more than 0.1 ms after they could go: after the later "
        "of the arrival and a free concurrency slot in open loop, after the slot freed in closed loop "
        "(its opening ramp left out). Waiting for a slot is the load's queueing, not lateness; the "
        "whole wait is in the 'lateness' distribution. Near 0 means the client kept its schedule."
    ),
    "client_cpu_per_event": "Client process CPU time (user + system) in the window / output events received, in us.",
    "multi_event_read_ratio": (
        "Socket reads that delivered more than one output event / reads that delivered bytes. "
        "Events of one read share its timestamp."
    ),
    # multi-turn sessions (--multi-turn), in the result's "sessions" section
    "turn_ttft": (
        "Per turn index (1 = a session's first turn): p50 and p99 of TTFT (as defined above) over the completed "
        "requests of that turn of every session; read beside the turn's mean prompt tokens, it shows how TTFT "
        "grows with the history and how much a prefix cache takes off."
    ),
    "turn_prompt_tokens": (
        "Per turn index: mean prompt tokens of its completed requests, the server's usage count (the history so "
        "far plus the new user message, with the chat template's tokens), else the workload's count."
    ),
    "session_turns_completed": (
        "Per session that sent at least one turn: its turns that completed. A session ends at its first failed "
        "turn (the rest are not started: their history would be wrong) or when the run stops."
    ),
    "session_duration": (
        "Per session whose every turn completed: its last turn's end stamp minus its first turn's start "
        "(as for TTFT), in seconds; think times included."
    ),
    # agentic trace replays (--dataset-name weka), in the result's "agentic" section
    "agent_tree": (
        "Agent tree: one replayed trace (a replay of it again is another tree, its name with #2), its root agent "
        "and the subagents its calls spawned, joined back into a root call or left running in the background; "
        "each call of each agent is one request. A tree completed when every one of its calls completed, ended "
        "by failure when it began and a call failed (any error but CANCELLED), was cut short when it began and "
        "the run's end (time cap, stop, interrupt) stopped it with no failed call, and was not started when none "
        "of its calls was sent."
    ),
    "tree_duration": (
        "Per tree whose every call completed: its last call's end stamp minus its first call's start (as for "
        "TTFT), in seconds; the trace's gaps (tool calls) and the waits for joined subagents included."
    ),
    "tree_calls": (
        "Per tree: the calls the workload laid out for it, over all its agents; and per tree that began, its "
        "calls that completed."
    ),
    "tree_tokens": (
        "Per tree whose every call completed: the prompt tokens (the server's usage count, else the workload's) "
        "and the output tokens of its calls, summed."
    ),
    "agent_duration": (
        "Per agent (a tree's root or one subagent) whose every call completed: its last call's end stamp minus "
        "its first call's start (as for TTFT), in seconds."
    ),
    "agent_turns": (
        "Per agent: its calls laid out by the workload (its turns); and per agent that began, its calls that "
        "completed."
    ),
    "agent_tokens": (
        "Per agent whose every call completed: the prompt tokens and the output tokens of its calls, summed."
    ),
    "role_figures": (
        "Per role (root: the tree's root agent; subagent: spawned and joined back into a root call; background: "
        "spawned and never waited for): its requests, started, completed and failed; TTFT p50 and p99 and E2E "
        "latency p50 (as defined above) over its completed requests; the mean prompt tokens, the mean tokens of "
        "the tool result each call's prompt begins with (the workload's count) and the mean request_cached_share "
        "of its completed requests."
    ),
    "request_cached_share": (
        "A completed request's cached share: its cached prompt tokens / its prompt tokens (at most 1). The cached "
        "tokens are the server's usage (cached_tokens, as that definition counts them: where any request of the "
        "run carried it, a request whose usage left it out had 0) where the server said, else the workload's "
        "shared_prompt_tokens (what a prefix cache could serve from the requests sent before, the chat "
        "template's tokens counted as shared, as for expected_prefix_share); a request with neither, or without "
        "a prompt token count, has none. cached_share_requests counts the requests of each source."
    ),
    "agentic_cached_share": (
        "The run's cached share: the sum of the counted requests' cached tokens / the sum of their prompt tokens "
        "(request_cached_share's sources). Where the server reported every count it equals cached_tokens_share; "
        "the server's /metrics prefix_cache_hit_rate is the prefix_cache section's."
    ),
    "ttft_by_context": (
        "TTFT against the context: per bin of prompt tokens from 2^k to 2^(k+1) - 1, every bin from the lowest "
        "to the highest one any request fell in, the completed requests with an output event in it, and their "
        "TTFT p50 and p99 (null for an empty bin)."
    ),
    "ttft_by_cached_share": (
        "TTFT against the cached share: per bin of request_cached_share, [0, 0.25), [0.25, 0.5), [0.5, 0.75), "
        "[0.75, 0.9), [0.9, 0.95), [0.95, 0.99) and [0.99, 1], the completed requests with an output event and a "
        "cached share in it, and their TTFT p50 and p99 (null for an empty bin)."
    ),
    "distribution": (
        "mean, median, p90, p99, p99.9, min, max, std. Per-request series (ttft, tpot, e2el, rates, ...) "
        "are exact, as vllm bench serve computes them: numpy's linear-interpolated percentiles and "
        "population standard deviation. Chunk-level series (itl, itl_token, skew) are read from the "
        "core's HDR histogram with 3 significant digits (within 0.1 % of exact); their percentiles are "
        "the highest value equivalent to that rank."
    ),
}

TIME_METRICS: tuple[str, ...] = (
    "ttft",
    "ttft_raw",
    "ttfa",
    "tpot",
    "itl",
    "itl_token",
    "e2el",
    "e2el_raw",
    "lateness",
    "connect",
    "skew",
)
RATE_METRICS: tuple[str, ...] = ("prefill_rate", "decode_rate")
# Names of RunData.histograms -> names of distributions.
CORE_HISTOGRAMS: dict[str, str] = {"itl_chunk": "itl", "itl_token": "itl_token", "skew": "skew"}


def histogram_unit(name: str) -> str:
    """Unit of the values recorded in the HDR histogram of a distribution."""
    return "mtok/s" if name in RATE_METRICS else "ns"
