"""The engines fastbench launches: vLLM, SGLang and llama.cpp, each its command line and what its log says.

Everything else (the process, readiness, the log, teardown) is ``launch.LaunchedServer``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from fastbench.config import LaunchConfig
from fastbench.exceptions import ConfigError
from fastbench.server.launch import LaunchedServer, engine_option
from fastbench.server.serverlog import parse_vllm_device, parse_vllm_footprint, parse_vllm_precision

__all__ = ("RESET_ENV", "LlamaCppServer", "SGLangServer", "VLLMServer", "make_server", "with_prefix_cache_reset")

# What each engine needs in its environment to serve a prefix-cache reset: vLLM's API server registers
# POST /reset_prefix_cache only in its development mode (VLLM_SERVER_DEV_MODE=1, which also adds its
# other dev endpoints: sleep, wake_up, ...; no effect on serving); SGLang's POST /flush_cache needs
# nothing; llama.cpp has no reset.
RESET_ENV: dict[str, tuple[str, ...]] = {"vllm": ("VLLM_SERVER_DEV_MODE=1",)}


class VLLMServer(LaunchedServer):
    """``vllm serve MODEL --host H --port P ...`` (docker: the vllm/vllm-openai image's entrypoint)."""

    engine = "vllm"
    engine_name = "vLLM"
    default_bin = "vllm"

    def server_args(self, host: str) -> list[str]:
        # per-request cached tokens in usage (fastbench's cached_tokens), unless the user chose either way
        details = _unless_given(self.launch.engine_args, "--enable-prompt-tokens-details")
        return ["--host", host, "--port", str(self.port), *details, *self.launch.engine_args]

    def local_argv(self) -> list[str]:
        return [self.launch.engine_bin or self.default_bin, "serve", self.launch.model,
                *self.server_args(self.host)]

    def docker_server_args(self) -> list[str]:
        return [self.launch.model, *self.server_args("0.0.0.0")]

    def precision(self) -> str | None:
        return parse_vllm_precision(self.log.text(until_first_window=True))

    def device(self) -> str | None:
        return parse_vllm_device(self.log.text(until_first_window=True))

    def footprint(self) -> dict[str, Any] | None:
        # logged while loading: the windows' request lines may be hundreds of MB (a launch may
        # serve several runs)
        return parse_vllm_footprint(self.log.text(until_first_window=True)) or None


class SGLangServer(LaunchedServer):
    """``python -m sglang.launch_server --model-path MODEL --host H --port P ...``."""

    engine = "sglang"
    engine_name = "SGLang"
    default_bin = "python3"

    def server_args(self, host: str) -> list[str]:
        report = _unless_given(self.launch.engine_args, "--enable-cache-report")  # cached tokens in usage
        return ["-m", "sglang.launch_server", "--model-path", self.launch.model, "--host", host,
                "--port", str(self.port), *report, *self.launch.engine_args]

    def local_argv(self) -> list[str]:
        return [self.launch.engine_bin or self.default_bin, *self.server_args(self.host)]

    def docker_server_args(self) -> list[str]:
        return ["python3", *self.server_args("0.0.0.0")]


class LlamaCppServer(LaunchedServer):
    """``llama-server -m MODEL --host H --port P ...`` (add ``--metrics`` to engine args for /metrics)."""

    engine = "llama.cpp"
    engine_name = "llama.cpp"
    default_bin = "llama-server"

    @property
    def served_model(self) -> str:
        return engine_option(self.launch.engine_args, "--alias", "-a") or self.launch.model

    def _expected_models(self) -> tuple[str, ...] | None:
        return None  # one model per server; its id is the alias or a path llama.cpp chooses

    def server_args(self, host: str) -> list[str]:
        return ["-m", self.launch.model, "--host", host, "--port", str(self.port), *self.launch.engine_args]

    def local_argv(self) -> list[str]:
        return [self.launch.engine_bin or self.default_bin, *self.server_args(self.host)]


def _unless_given(engine_args: tuple[str, ...], flag: str) -> list[str]:
    """``[flag]``, unless the engine arguments give it or its ``--no-`` form already."""
    negated = "--no-" + flag[2:]
    given = any(arg.split("=", 1)[0] in (flag, negated) for arg in engine_args)
    return [] if given else [flag]


_SERVERS: dict[str, type[LaunchedServer]] = {
    "vllm": VLLMServer, "sglang": SGLangServer, "llama.cpp": LlamaCppServer,
}


def with_prefix_cache_reset(launch: LaunchConfig) -> LaunchConfig:
    """``launch`` with what its engine needs to serve a prefix-cache reset added to its environment
    (RESET_ENV), unless the user set those variables (then theirs stand). A docker launch passes them
    on by name (``--env NAME``), as every ``env`` item."""
    given = {item.partition("=")[0] for item in launch.env}
    extra = tuple(item for item in RESET_ENV.get(launch.engine, ()) if item.partition("=")[0] not in given)
    return dataclasses.replace(launch, env=(*launch.env, *extra)) if extra else launch


def make_server(launch: LaunchConfig, *, api_key: str | None = None, log_dir: str | None = None,
                headers: Mapping[str, str] | None = None) -> LaunchedServer:
    """The server class for ``launch.engine``, not started yet (``headers``: the client's, whose
    credentials its log must not show either)."""
    try:
        cls = _SERVERS[launch.engine]
    except KeyError:
        raise ConfigError(f"--launch takes {', '.join(_SERVERS)}, got {launch.engine!r}") from None
    return cls(launch, api_key=api_key, log_dir=log_dir, headers=headers)
