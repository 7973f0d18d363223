"""BenchConfig: every option of a run, frozen. The CLI builds one; embedders build one directly."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Optional

Endpoint = Literal["/v1/completions", "/v1/chat/completions"]
DatasetName = Literal["random", "sharegpt", "jsonl"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchConfig:
    """Options of one benchmark run. Times at this edge are float seconds (``_s``) or ms (``_ms``).

    :param base_url: server root, e.g. ``http://127.0.0.1:8000``; None starts the built-in
        synthetic server and runs against it.
    :param model: model name sent in each request; None asks the server's /v1/models.
    :param endpoint: ``/v1/completions`` or ``/v1/chat/completions``.
    :param concurrency: most requests in flight at once (closed loop when request_rate is None).
    :param request_rate: open-loop arrival rate in requests/s; None for closed loop.
    :param burstiness: gamma shape of inter-arrival times; 1.0 is Poisson.
    :param num_prompts: requests to send (after warm-ups).
    :param max_seconds: hard cap on the measured window; in-flight requests are cancelled at it.
    :param num_warmups: requests sent and discarded before the measured window.
    """

    base_url: Optional[str] = None
    model: Optional[str] = None
    endpoint: Endpoint = "/v1/completions"
    api_key: Optional[str] = dataclasses.field(default=None, repr=False)  # never printed or stored
    insecure: bool = False  # skip TLS certificate verification
    # load
    concurrency: int = 16
    request_rate: Optional[float] = None
    burstiness: float = 1.0
    num_prompts: int = 200
    max_seconds: Optional[float] = None
    num_warmups: int = 0
    seed: int = 0
    request_timeout_s: Optional[float] = None
    max_error_rate: Optional[float] = None  # stop early when failed / finished exceeds this (after 20 requests)
    # requests
    max_tokens: Optional[int] = None  # overrides the dataset's output length when set
    ignore_eos: bool = False
    extra_body: dict[str, Any] = dataclasses.field(default_factory=dict)
    # dataset
    dataset_name: DatasetName = "random"
    dataset_path: Optional[str] = None
    dataset_order: Literal["random", "file"] = "random"  # sharegpt: sample as vllm does, or file order
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    tokenizer: Optional[str] = None  # local tokenizer directory or tokenizer.json; never downloaded
    max_model_len: Optional[int] = None  # overrides what /v1/models reports, for screening
    # goodput SLOs in ms, e.g. {"ttft": 500.0, "tpot": 50.0}
    goodput: dict[str, float] = dataclasses.field(default_factory=dict)
    # outputs
    result_json: Optional[str] = None
    result_card: Optional[str] = None
    save_detailed: Optional[str] = None
    save_outputs: bool = False
    progress: Optional[bool] = None  # None: on when stderr is a terminal
    # the synthetic server started when base_url is None
    synthetic_args: tuple[str, ...] = ()
    # the command line that built this config, recorded in the result
    command_line: tuple[str, ...] = ()
    label: Optional[str] = None

    def replace(self, **changes: Any) -> "BenchConfig":
        return dataclasses.replace(self, **changes)
