"""What the server wing saw, as typed records: the launch, the measured window, memory, the teardown,
the model's files. They live here, with the results that read them, so that the server wing (which
fills them) and the results (which word them) meet on records below both.

The launcher, the window monitor and the memory glue fill them; ``api`` hands them to
``fastbench.results.serversections``, which lays out the result file's server sections and words the
card's rows and notes from them. Nothing here is wording: the records hold facts, and their ``as_json``
the data the result file keeps as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ("LaunchFacts", "MemoryReport", "MetricsReport", "ModelFacts", "Teardown", "WindowReport")


@dataclasses.dataclass(frozen=True)
class LaunchFacts:
    """A server fastbench launched."""

    engine_name: str  # "vLLM", "SGLang", "llama.cpp"
    version: str | None  # the engine's own (control.engine_version)
    launcher: str  # "docker" or "local process"
    command: str  # the command line as a shell line, secrets redacted
    engine_args: tuple[str, ...]  # the engine's own arguments, secrets redacted
    log_path: str
    port: int
    load_time_s: float | None  # launch until /v1/models listed the model; None if it never did
    docker_image: str | None
    image_digest: str | None  # its repository digest; None for an image never pushed or pulled
    precision: str | None  # vLLM's engine-config line: "modelopt_fp4 (bfloat16)"
    quantization: str | None  # --quantization
    speculative_method: str | None  # --speculative-config's "method"; "" when it names none, None without one
    gpu_memory_utilization: str | None  # --gpu-memory-utilization, as given
    # Launched before this run and kept up after it, for several runs (a sweep's variant, a server
    # handed to api.arun): this run neither launched nor stopped it.
    shared: bool = False
    run_of_launch: int = 1  # the measured windows this launch has served, this run's included
    image_id: str | None = None  # docker image inspect's Id ("sha256:...")
    docker_gpus: str | None = None  # the container's GPU flags and why ("GPUs: --gpus all (...)")
    device: str | None = None  # the device vLLM's engine-config line names ("cpu", "cuda"); None: not said


@dataclasses.dataclass(frozen=True)
class Teardown:
    """How ``LaunchedServer.stop()`` went."""

    how: str  # what it took: "SIGTERM", "SIGKILL, 30 s after SIGTERM", "docker stop", ...
    seconds: float
    exit: str | None  # how the process ended ("exited with status 0"); None if it did not
    port_free: bool
    processes_left: list[int]  # of its group, or strays, still running
    left_the_group: list[int]  # descendants that had left the process group (signalled apart)

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class MetricsReport:
    """The server's /metrics over the measured window (``prom.MetricsScraper``, ``specdecode.analyze``)."""

    available: bool  # the window's first read was answered
    error: str | None  # the last failed read's reason
    status: int | None  # the HTTP status of the last answer, whatever it was
    failures: int
    interval_asked_s: float
    interval_s: float  # the spacing the kept reads ended at (doubled at each thinning)
    kept_reads: int  # past this many reads, every other one was dropped (prom.MAX_KEPT_SCRAPES)
    window_start: str  # when the reads of the window began, as the result file says it
    analysis: Mapping[str, Any]  # specdecode.analyze's, JSON-ready; empty without reads
    engine: str | None  # the engine its metric names are from; None when unknown or only mimicked

    @property
    def thinned(self) -> bool:
        return self.interval_s != self.interval_asked_s

    def as_json(self) -> dict[str, Any] | None:
        """The result file's ``server_metrics``; None when the server answered but nothing was kept."""
        if not self.available:
            return {"available": False, "error": self.error}
        if not self.analysis:
            return None
        analysis = self.analysis
        out = {
            "available": True, "scrapes": analysis["scrapes"], "failures": self.failures,
            "interval_s": analysis["interval_s"], "span_s": analysis["span_s"],
            "window_start": self.window_start, "gauges": analysis["gauges"], "engine": self.engine,
        }
        if analysis.get("cache_config") is not None:
            out["cache_config"] = analysis["cache_config"]
            out["cache_config_engines"] = analysis["cache_config_engines"]
        return out


@dataclasses.dataclass(frozen=True)
class WindowReport:
    """What the window monitor saw of the server during the measured window."""

    provenance: dict[str, Any]  # the server's provenance(): launched or not, engine version, command...
    launch: LaunchFacts | None  # None for a server fastbench did not launch
    warnings: list[str]  # distinct WARNING / ERROR lines it logged in the window (serverlog.window_warnings)
    spec_log: dict[str, Any] | None  # its "SpecDecoding metrics" lines, summed (serverlog.spec_log_summary)
    metrics: MetricsReport

    @property
    def spec_decode(self) -> dict[str, Any] | None:
        """specdecode.analyze's ``spec_decode`` (from the counters); None without counters."""
        if not self.metrics.available:
            return None
        spec: dict[str, Any] | None = self.metrics.analysis.get("spec_decode")
        return spec

    @property
    def prefix_cache(self) -> dict[str, Any] | None:
        """specdecode.analyze's ``prefix_cache`` (prefixcache.summarize's); None without counters."""
        if not self.metrics.available:
            return None
        stats: dict[str, Any] | None = self.metrics.analysis.get("prefix_cache")
        return stats

    def for_shared_launch(self) -> WindowReport:
        """This report, for a run measuring a server launched before it and kept up after it."""
        launch = dataclasses.replace(self.launch, shared=True) if self.launch is not None else None
        return dataclasses.replace(self, provenance={**self.provenance, "shared_launch": True}, launch=launch)

    def spec_decode_json(self) -> dict[str, Any] | None:
        """The result file's ``spec_decode_stats``: the counters' figures and the log's cross-check."""
        spec = self.spec_decode
        if spec is not None:
            return {**spec, "server_log": self.spec_log}
        return {"server_log": self.spec_log} if self.spec_log is not None else None


@dataclasses.dataclass(frozen=True)
class MemoryReport:
    """The memory sampler's series of the run (server/memory.py), and vLLM's own account."""

    series: dict[str, Any] | None  # MemorySeries.to_dict(); None when nothing was sampled
    peaks: dict[str, Any] | None  # MemorySeries.peaks()
    footprint: dict[str, Any] | None  # vLLM's log while loading (serverlog.parse_vllm_footprint); None if none
    baseline_before_server: bool = True  # False: fastbench attached to a server already running


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """What the model's local files say. ``total_params`` is None where the weights cannot be counted."""

    source: str  # the directory or file read
    family: str | None
    model_type: str | None
    total_params: int | None
    active_params: int | None  # MoE only
    experts: tuple[int, int] | None  # (used per token, total) for a MoE
    precision: str | None  # "bfloat16", "fp8", "gptq 4-bit", "Q4_K_M"...
    why_no_count: str | None = None
    modalities: tuple[str, ...] | None = None  # inputs config.json declares towers for: ("text", "image")
    adapter: str | None = None  # the LoRA adapter served, when these are its base model's facts
    hub_repo: str | None = None  # "org/name" and its commit, where the files are a hub cache snapshot
    revision: str | None = None
    weights_found: bool = True  # False: the directory holds no weight files (they are elsewhere)
