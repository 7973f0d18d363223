"""BenchConfig: every option of a run, frozen. The CLI builds one; embedders build one directly.

Building one checks nothing: the values are checked when a run starts (:mod:`fastbench.checks`,
which reads each field's type from the annotations here), so that a config can be built and
changed freely with ``dataclasses.replace()``, and ``run()`` raises the ConfigError.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from fastbench.datasetoptions import (
    FLAT_NAMES,
    DatasetName,
    DatasetOptions,
    MultiTurnHistory,
    ThinkTimeDistribution,
    find,
    folded,
    normalised,
)

Endpoint = Literal["/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings",
                   "/pooling", "/score", "/rerank", "/v1/rerank"]
# vllm bench serve's --backend names fastbench measures (BACKEND_ENDPOINTS: the endpoint each calls by default;
# the streamed APIs' are fastbench.load.protocols', which a test holds alike)
Backend = Literal["openai", "vllm", "openai-chat", "openai-responses", "anthropic-messages", "openai-embeddings",
                  "openai-embeddings-chat", "vllm-pooling", "vllm-rerank"]
BACKEND_ENDPOINTS: dict[str, str] = {
    "openai": "/v1/completions", "vllm": "/v1/completions", "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses", "anthropic-messages": "/v1/messages",
    "openai-embeddings": "/v1/embeddings", "openai-embeddings-chat": "/v1/embeddings", "vllm-pooling": "/pooling",
    "vllm-rerank": "/rerank",
}
# The APIs answered by one whole JSON body per request, not a stream (fastbench.load.pooling builds their
# bodies): each endpoint, and the backends that may call it.
# The streamed APIs' own backend names (other than /v1/completions' "openai").
_STREAM_BACKENDS = {"/v1/chat/completions": "openai-chat", "/v1/responses": "openai-responses",
                    "/v1/messages": "anthropic-messages"}
POOLING_ENDPOINTS: dict[str, tuple[str, ...]] = {
    "/v1/embeddings": ("openai-embeddings", "openai-embeddings-chat"), "/pooling": ("vllm-pooling",),
    "/score": ("vllm-rerank",), "/rerank": ("vllm-rerank",), "/v1/rerank": ("vllm-rerank",),
}
TRACE_DATASETS = ("timed_trace", "mooncake")  # timestamped: sent at the trace's times unless self_timed is False
DatasetOrder = Literal["random", "file"]
Engine = Literal["vllm", "sglang", "llama.cpp"]
RampUpStrategy = Literal["linear", "exponential"]
LoraAssignment = Literal["random", "round-robin"]  # vllm bench serve's --lora-assignment
# Goodput SLO names accepted in BenchConfig.goodput (values in ms), as in vllm bench serve.
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
# Metrics whose percentiles --percentile-metrics selects, named as vllm bench serve names them.
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")
# The sampling parameters vllm bench serve sends as body fields: BenchConfig field -> body key.
SAMPLING_FIELDS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                   "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
                   "repetition_penalty": "repetition_penalty"}
ENGINES: tuple[Engine, ...] = ("vllm", "sglang", "llama.cpp")
DEFAULT_CONCURRENCY = 16  # closed loop's streams when none are asked for
# A path field's type: a Path given is stored as its str (see _paths_as_str), so fastbench reads str.
StrPath = str | os.PathLike[str]
OptionsT = TypeVar("OptionsT", bound=DatasetOptions)


class _NotGiven:
    """The default of a flat keyword: not given (None is a value some of them take)."""

    def __repr__(self) -> str:
        return "<not given>"


_NOT_GIVEN: Any = _NotGiven()


def _paths_as_str(obj: object, names: tuple[str, ...]) -> None:
    """Store a ``pathlib.Path`` (any ``os.PathLike``) given for a path field as its ``str``, so that the
    rest of fastbench, the result file included, sees one type."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, os.PathLike):
            object.__setattr__(obj, name, os.fspath(value))


@dataclasses.dataclass(frozen=True, kw_only=True)
class LaunchConfig:
    """A server that fastbench starts before the run and stops after it (``BenchConfig.launch``).

    :param engine: ``vllm`` (``vllm serve MODEL``), ``sglang`` (``python -m sglang.launch_server``) or
        ``llama.cpp`` (``llama-server -m MODEL``).
    :param model: what the engine loads (a Hugging Face id, a local directory, a GGUF file).
    :param engine_args: passed through after fastbench's own (--host, --port), e.g.
        ``("--max-model-len", "2048", "--speculative-config", '{"method":"ngram",...}')``.
    :param docker_image: run the engine in this image (``IMAGE[@sha256:...]``, or an image id) with
        ``docker run -d --ipc=host -p PORT:PORT`` and the GPU flags of ``docker_gpus``; None runs it as a
        local process.
    :param docker_args: extra ``docker run`` flags (e.g. ``--shm-size 16g``), after fastbench's own.
    :param docker_gpus: the container's GPUs: ``auto`` (from the host: NVIDIA's runtime -> ``--gpus all``,
        ROCm's /dev/kfd and /dev/dri -> those devices, the video group and seccomp unconfined; neither ->
        none), ``none``, ``rocm``, or a value of docker's own ``--gpus`` (``all``, ``device=0,1``).
    :param docker_hf_cache: the host's Hugging Face cache, mounted at /root/.cache/huggingface so that a
        model downloads once; None: ``$HF_HOME`` or ``~/.cache/huggingface``; ``none``: not mounted.
    :param env: the server's environment additions: ``NAME=VALUE``, or ``NAME`` to pass fastbench's
        own value through (docker: ``--env NAME``, so the value never appears in a command line).
    :param host: the address the server listens on and fastbench connects to (default 127.0.0.1).
    :param port: the port to serve on; None: the engine's usual one (vLLM 8000, SGLang 30000,
        llama.cpp 8080).
    :param ready_timeout_s: most seconds from launch until /v1/models lists the model.
    :param log_path: where the server's output goes; None: ``fastbench-server-<engine>-<time>.log``
        beside the result file (or in the working directory).
    :param engine_bin: the executable (``vllm``, ``python`` for SGLang, ``llama-server``, ``docker``);
        None: found on PATH.
    :param stop_grace_s: seconds between SIGTERM (or ``docker stop``) and SIGKILL at teardown.
    """

    engine: Engine = "vllm"
    model: str
    engine_args: tuple[str, ...] = ()
    docker_image: str | None = None
    docker_args: tuple[str, ...] = ()
    docker_gpus: str = "auto"
    docker_hf_cache: str | None = None
    env: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int | None = None
    ready_timeout_s: float = 1800.0
    log_path: str | None = None
    engine_bin: str | None = None
    stop_grace_s: float = 20.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchConfig:
    """Options of one benchmark run. Times at this edge are float seconds (``_s``) or ms (``_ms``).

    :param base_url: server root, e.g. ``http://127.0.0.1:8000``; None starts the built-in
        synthetic server and runs against it.
    :param model: model name sent in each request; None asks the server's /v1/models.
    :param endpoint: ``/v1/completions``, ``/v1/chat/completions``, ``/v1/responses`` (OpenAI's Responses API)
        or ``/v1/messages`` (Anthropic's Messages API): streamed text (``fastbench.load.protocols``); or an API answered
        whole: ``/v1/embeddings``, ``/pooling``, ``/score``, ``/rerank``, ``/v1/rerank``.
    :param backend: vllm bench serve's ``--backend`` name for the request body (``openai-embeddings-chat``:
        ``messages`` on /v1/embeddings); None: the endpoint's own.
    :param random_batch_size, no_reranker: vLLM's embedding and rerank options: inputs per request, and a
        model without a native reranker (random-rerank).
    :param concurrency: most requests in flight at once. Closed loop (request_rate None) keeps this
        many (None: 16); open loop caps at it (None: no cap, as ``vllm bench serve`` without
        ``--max-concurrency``). ``effective_concurrency`` is the value in force.
    :param request_rate: open-loop arrival rate in requests/s; None (or ``math.inf``) for closed loop.
    :param burstiness: gamma shape of inter-arrival times; 1.0 is Poisson.
    :param num_prompts: requests to send (after warm-ups); with ``multi_turn``, sessions (each sends a
        request per turn).
    :param max_seconds: hard cap on the measured window; in-flight requests are cancelled at it.
    :param num_warmups: requests sent and discarded before the measured window.
    :param launch: a server for fastbench to start, wait for, measure and stop (None: attach to
        base_url, or the synthetic server when base_url is None too).
    :param metrics_interval_s: seconds between reads of the server's /metrics during the window
        (speculative-decoding acceptance, KV-cache usage); 0 reads it only at the start and end.
    :param reset_prefix_cache: ask the server to empty its prefix cache before the first request
        (warm-ups included): vLLM's ``POST /reset_prefix_cache`` (a launched vLLM is given
        ``VLLM_SERVER_DEV_MODE=1`` for it) or SGLang's ``/flush_cache``; where the server has neither,
        the run goes on and its notes say so (``server_info["prefix_cache_reset"]`` says how it went).
    :param memory_interval_s: seconds between memory samples; None: 1 s when a server is launched,
        no sampling otherwise; 0: off.
    :param served_model_name: the model name sent in each request when it differs from ``model``
        (``model`` then names the model in the result and vLLM's result file name).
    :param headers: extra HTTP headers sent with every request (``--header KEY=VALUE``).
    :param request_id_prefix: each request carries ``"request_id": PREFIX + index`` in its body
        (vLLM's server takes it as the request's id; warm-ups get ``PREFIX + "warmup-" + j``).
    :param temperature, top_p, top_k, min_p, frequency_penalty, presence_penalty, repetition_penalty:
        sampling parameters put into every request body when set; ``extra_body`` wins over them.
    :param logprobs: log-probabilities per output token: ``"logprobs": N`` on /v1/completions (as vllm
        bench serve), ``"logprobs": true, "top_logprobs": N`` on /v1/chat/completions.
    :param ramp_up_strategy: open loop whose rate moves from ``ramp_up_start_rps`` to
        ``ramp_up_end_rps`` over the run's requests, ``linear`` or ``exponential`` (as vllm bench
        serve); ``request_rate`` stays None.
    :param ready_check_timeout_s: attach only: wait up to this many seconds for the server to answer
        /v1/models before the run (0: no wait, as vllm bench serve's default).
    :param save_result: also write the result file under vllm bench serve's name
        (``{label}-{rate}qps[-concurrency{N}]-{model}-{date}.json``, see ``result_dir``, ``result_filename``).
    :param append_result: as ``save_result``, appending one line to an existing file.
    :param per_request_arrays: the result files carry vllm's per-request arrays beyond the default
        ones (``start_times``, ``latencies``, ``queue_times``, ``generated_texts``) (``--save-detailed``).
    :param percentile_metrics: the metrics whose percentiles the result's flat keys and the console
        show (None: fastbench's default, p90/p99/p99.9 of ttft, tpot, itl and e2el).
    :param metric_percentiles: which percentiles, e.g. ``(50, 90, 99)`` (None: 99 when
        ``percentile_metrics`` is given).
    :param metadata: ``KEY: VALUE`` pairs added to the result's top level (``--metadata``).
    :param dataset_options: each dataset's own options, one frozen object per dataset (``RandomOptions``,
        ``PrefixRepetitionOptions``, ``SharedPrefixOptions``, ``TimedTraceOptions``, ``MooncakeOptions``,
        ``CustomOptions``, ``SpecBenchOptions``, ``MultiTurnOptions``: :mod:`fastbench.datasetoptions`), e.g.
        ``BenchConfig(dataset_options=(RandomOptions(input_len=64),))``; one object alone may be given
        without the tuple. A dataset with none here runs with its defaults; :meth:`options` reads them.
        The options' flat keywords (``random_input_len=64``, the flags' names with underscores) set them too.
    :param multi_turn: multi-turn sessions (``MultiTurnOptions``), see :mod:`fastbench.load.sessions`.

    :param store: a results store directory (created if new): the run's result, card, per-request
        records, histograms and server log are kept in a folder of its own there, indexed for
        ``fastbench runs`` and ``fastbench compare``; checked writable before anything starts.
    :param variant: the name of the server configuration measured (e.g. ``eagle3``); kept in the
        result and the store's index, so that runs can be listed and compared by it.

    Fields that name a file (``dataset_path``, ``tokenizer``, ``result_json``, ``result_card``,
    ``save_detailed`` (the per-request JSONL, ``--requests-jsonl``), ``result_dir``, ``store``,
    ``config_file``, ``MultiTurnOptions.chat_template``) take a ``str`` or a ``pathlib.Path``; a Path is
    stored as its str.
    """

    base_url: str | None = None
    model: str | None = None
    endpoint: Endpoint = "/v1/completions"
    backend: Backend | None = None  # vllm bench serve's name for the API; None: the endpoint's own (see api)
    api_key: str | None = dataclasses.field(default=None, repr=False)  # never printed or stored
    insecure: bool = False  # skip TLS certificate verification
    # load
    concurrency: int | None = None
    request_rate: float | None = None
    burstiness: float = 1.0
    num_prompts: int = 200
    max_seconds: float | None = None
    num_warmups: int = 0
    seed: int = 0
    request_timeout_s: float | None = None
    max_error_rate: float | None = None  # stop early when failed / finished exceeds this (after 20 requests)
    # stop early once every connection attempt for this many seconds failed and nothing answered (the server
    # went away; load.gone); 0: never
    server_gone_s: float = 5.0
    # read the sockets at least this often instead of on every arrival (0: on every arrival); "auto":
    # the client chooses from the chunk gaps it sees (what it chose is in fastbench.client.coalescing)
    coalesce_ms: float | Literal["auto"] = "auto"
    # client processes sharing the schedule, merged exactly (fastbench.load.workers); "auto": from the
    # cores and the concurrency; 1: today's single process
    workers: int | Literal["auto"] = 1
    # workers as Ray actors over a cluster's nodes (fastbench.load.raypool): "auto" (the cluster this
    # machine belongs to) or its address; None: this machine only. Needs the extra fastbench-llm[ray].
    ray: str | None = None
    workers_per_node: int | None = None  # with ray: workers on each node (default 1, unless workers is given)
    # requests
    max_tokens: int | None = None  # overrides the dataset's output length when set
    ignore_eos: bool = False
    extra_body: dict[str, Any] = dataclasses.field(default_factory=dict)
    # dataset
    dataset_name: DatasetName = "random"
    dataset_path: StrPath | None = None
    dataset_order: DatasetOrder = "random"  # sharegpt: sample as vllm does, or file order
    # each dataset's own options, one object per dataset (fastbench.datasetoptions: RandomOptions,
    # SharedPrefixOptions, MultiTurnOptions, ...); a dataset with none here runs with its defaults (see options())
    dataset_options: tuple[DatasetOptions, ...] = ()
    # embeddings, pooling, rerank: inputs (documents) per request, as vLLM's flag, whatever the dataset
    random_batch_size: int = 1
    no_reranker: bool = False  # rerank: the model scores pairs without a native reranker (vLLM's flag)
    # multi-turn sessions (sharegpt or jsonl conversations; see fastbench.load.sessions, MultiTurnOptions):
    # num_prompts counts sessions, each sends one request per turn with the history so far
    multi_turn: bool = False
    self_timed: bool | None = None  # a trace's timestamps pace the run (None: yes for the trace datasets)
    # LoRA traffic (load/lora.py): each measured request's model is one of these adapter names, drawn
    # as vllm bench serve draws it (--lora-assignment random: random.choice seeded by --seed; round-robin)
    lora_modules: tuple[str, ...] = ()
    lora_assignment: LoraAssignment = "random"
    tokenizer: StrPath | None = None  # local tokenizer directory or tokenizer.json; never downloaded
    max_model_len: int | None = None  # overrides what /v1/models reports, for screening
    # goodput SLOs in ms, e.g. {"ttft": 500.0, "tpot": 50.0}
    goodput: dict[str, float] = dataclasses.field(default_factory=dict)
    # outputs
    result_json: StrPath | None = None
    result_card: StrPath | None = None
    save_detailed: StrPath | None = None
    save_outputs: bool = False
    store: StrPath | None = None  # a results store directory to keep the run in (fastbench runs, compare)
    progress: bool | None = None  # None: on when stderr is a terminal
    # the synthetic server started when base_url is None
    synthetic_args: tuple[str, ...] = ()
    # a server launched for the run, the server's /metrics and memory sampling
    launch: LaunchConfig | None = None
    metrics_interval_s: float = 2.0
    reset_prefix_cache: bool = False  # empty the server's prefix cache before the first request
    memory_interval_s: float | None = None
    config_file: StrPath | None = None  # the --config TOML file the options came from, if any
    # the command line that built this config, recorded in the result
    command_line: tuple[str, ...] = ()
    label: str | None = None
    variant: str | None = None  # the name of the server configuration measured (a sweep's variant)
    # what only the user knows, for the run card: Configuration rows as "LABEL=VALUE" (e.g. "Why
    # this quant=...") and lines for its Notes
    card_rows: tuple[str, ...] = ()
    card_notes: tuple[str, ...] = ()
    # what vllm bench serve's command line also says (see the docstring)
    served_model_name: str | None = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    request_id_prefix: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    logprobs: int | None = None
    ramp_up_strategy: RampUpStrategy | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    ready_check_timeout_s: float = 0.0
    save_result: bool = False
    append_result: bool = False
    result_dir: StrPath | None = None
    result_filename: str | None = None
    per_request_arrays: bool = False
    percentile_metrics: tuple[str, ...] | None = None
    metric_percentiles: tuple[float, ...] | None = None
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)

    # The flat keywords of the dataset options that were fields of their own once, as the README and
    # vllm's flags spell them (BenchConfig(random_input_len=64) is BenchConfig(dataset_options=
    # (RandomOptions(input_len=64),))): each sets its field of its dataset's object, and reads back as
    # config.random_input_len. Not fields: dataclasses.replace() takes them and carries none over. A new
    # dataset adds no keyword here: its options object is the way to give them.
    random_input_len: dataclasses.InitVar[int] = _NOT_GIVEN
    random_output_len: dataclasses.InitVar[int] = _NOT_GIVEN
    random_range_ratio: dataclasses.InitVar[float] = _NOT_GIVEN
    random_prefix_len: dataclasses.InitVar[int] = _NOT_GIVEN
    prefix_repetition_prefix_len: dataclasses.InitVar[int] = _NOT_GIVEN
    prefix_repetition_suffix_len: dataclasses.InitVar[int] = _NOT_GIVEN
    prefix_repetition_num_prefixes: dataclasses.InitVar[int] = _NOT_GIVEN
    prefix_repetition_output_len: dataclasses.InitVar[int] = _NOT_GIVEN
    gsp_num_groups: dataclasses.InitVar[int] = _NOT_GIVEN
    gsp_prompts_per_group: dataclasses.InitVar[int] = _NOT_GIVEN
    gsp_system_prompt_len: dataclasses.InitVar[int] = _NOT_GIVEN
    gsp_question_len: dataclasses.InitVar[int] = _NOT_GIVEN
    gsp_output_len: dataclasses.InitVar[int] = _NOT_GIVEN
    multi_turn_history: dataclasses.InitVar[MultiTurnHistory] = _NOT_GIVEN
    think_time_s: dataclasses.InitVar[float] = _NOT_GIVEN
    think_time_distribution: dataclasses.InitVar[ThinkTimeDistribution] = _NOT_GIVEN
    max_turns: dataclasses.InitVar[int | None] = _NOT_GIVEN
    chat_template: dataclasses.InitVar[StrPath | None] = _NOT_GIVEN
    timed_trace_chunk_hash_size: dataclasses.InitVar[int] = _NOT_GIVEN
    timed_trace_sec_multiplier: dataclasses.InitVar[float] = _NOT_GIVEN
    timed_trace_label_timestamp: dataclasses.InitVar[str] = _NOT_GIVEN
    timed_trace_label_input_length: dataclasses.InitVar[str] = _NOT_GIVEN
    timed_trace_label_output_length: dataclasses.InitVar[str] = _NOT_GIVEN
    timed_trace_label_hash_ids: dataclasses.InitVar[str] = _NOT_GIVEN
    mooncake_slowdown_factor: dataclasses.InitVar[float] = _NOT_GIVEN
    custom_output_len: dataclasses.InitVar[int] = _NOT_GIVEN
    spec_bench_output_len: dataclasses.InitVar[int] = _NOT_GIVEN
    spec_bench_category: dataclasses.InitVar[str | None] = _NOT_GIVEN

    def options(self, kind: type[OptionsT]) -> OptionsT:
        """The options object of class ``kind`` (``RandomOptions``, ...) in ``dataset_options``, or its defaults."""
        return find(self.dataset_options, kind)

    if not TYPE_CHECKING:  # (hidden from mypy, which would take any attribute of a BenchConfig for one)
        def __getattr__(self, name: str) -> Any:
            """A flat keyword read back (``config.random_input_len``): its dataset options object's field."""
            if name in FLAT_NAMES:
                kind, field = FLAT_NAMES[name]
                return getattr(self.options(kind), field)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def sampling(self) -> dict[str, float | int]:
        """The sampling parameters set, as request body fields."""
        return {key: getattr(self, name) for name, key in SAMPLING_FIELDS.items() if getattr(self, name) is not None}

    @property
    def rate_text(self) -> str | None:
        """The arrival rate in words ("2.5 req/s", "ramp-up linear 1-10 req/s"); None in closed loop."""
        if self.trace_timed:
            return "the trace's times"
        if self.ramp_up_strategy is not None:
            return (f"ramp-up {self.ramp_up_strategy} {self.ramp_up_start_rps:g}-{self.ramp_up_end_rps:g} req/s")
        return None if self.request_rate is None else f"{self.request_rate:g} req/s"

    @property
    def pooling(self) -> bool:
        """The API answers each request with one whole JSON body (embeddings, pooling, score, rerank): no
        streamed output, so TTFT, TPOT, ITL and output throughput do not apply."""
        return self.endpoint in POOLING_ENDPOINTS

    @property
    def api(self) -> str:
        """vllm bench serve's backend name for what the run calls: ``backend``, else the endpoint's own."""
        if self.backend is not None:
            return self.backend
        if self.endpoint in POOLING_ENDPOINTS:
            return POOLING_ENDPOINTS[self.endpoint][0]
        return _STREAM_BACKENDS.get(self.endpoint, "openai")

    @property
    def open_loop(self) -> bool:
        """Arrivals follow a schedule (--request-rate, a ramp-up or a trace's times) rather than the
        concurrency alone."""
        return self.request_rate is not None or self.ramp_up_strategy is not None or self.trace_timed

    @property
    def trace_timed(self) -> bool:
        """A trace dataset whose timestamps pace the run (not --no-self-timed)."""
        return self.dataset_name in TRACE_DATASETS and self.self_timed is not False

    @property
    def effective_concurrency(self) -> int | None:
        """The cap on requests in flight: ``concurrency``, or when None 16 in closed loop and no cap
        (None) in open loop."""
        if self.concurrency is not None:
            return self.concurrency
        return None if self.open_loop else DEFAULT_CONCURRENCY

    def __post_init__(self, *flat: Any) -> None:
        _paths_as_str(self, ("dataset_path", "tokenizer", "result_json", "result_card",
                             "save_detailed", "config_file", "result_dir", "store"))
        given = {name: value for name, value in zip(_FLAT_KEYWORDS, flat) if value is not _NOT_GIVEN}
        object.__setattr__(self, "dataset_options", folded(normalised(self.dataset_options), given))
        if isinstance(self.request_rate, float) and self.request_rate == math.inf:
            object.__setattr__(self, "request_rate", None)  # closed loop, as --request-rate inf

    def replace(self, **changes: Any) -> BenchConfig:
        return dataclasses.replace(self, **changes)


# The flat keywords in the order the dataclass hands them to __post_init__; then taken out of its field
# table, so that dataclasses.replace() does not carry them over (it would pass each one's value back and
# undo a replaced options object), and out of the class, so that reading one asks __getattr__.
_FLAT_KEYWORDS = tuple(name for name in BenchConfig.__annotations__ if name in FLAT_NAMES)
for _name in _FLAT_KEYWORDS:
    del BenchConfig.__dataclass_fields__[_name]
    delattr(BenchConfig, _name)
