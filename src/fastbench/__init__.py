"""fastbench: a load generator for LLM inference servers whose figures are the server's.

Public API::

    from fastbench import BenchConfig, run, to_vllm_keys

    result = run(BenchConfig(base_url="http://127.0.0.1:8000", concurrency=64, num_prompts=500))
    print(result.distributions["ttft"].median, to_vllm_keys(result)["p99_tpot_ms"])

The names are imported on first use (PEP 562): ``import fastbench`` alone, as every submodule's import
does, then costs milliseconds instead of the API's aiohttp and numpy (a second and more on a busy
machine), so that ``fastbench runs`` starts quickly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from fastbench._version import __version__

if TYPE_CHECKING:
    from fastbench.api import arun, run
    from fastbench.config import BenchConfig, LaunchConfig
    from fastbench.datasetoptions import (
        CustomOptions,
        MooncakeOptions,
        MultiTurnOptions,
        PrefixRepetitionOptions,
        RandomMMOptions,
        RandomOptions,
        SharedPrefixOptions,
        SpecBenchOptions,
        TimedTraceOptions,
    )
    from fastbench.exceptions import (
        ConfigError,
        DatasetError,
        FastbenchError,
        ServerError,
    )
    from fastbench.results.result import Result, ResultWriteError, ServerDiedError
    from fastbench.results.vllm_keys import to_vllm_keys
    from fastbench.server.engines import make_server
    from fastbench.synthetic import SyntheticServer

# Each public name and the module that defines it.
_HOMES = {
    "arun": "fastbench.api", "run": "fastbench.api",
    "BenchConfig": "fastbench.config", "LaunchConfig": "fastbench.config",
    # each dataset's options (BenchConfig.dataset_options)
    **{name: "fastbench.datasetoptions" for name in ("CustomOptions", "MooncakeOptions", "MultiTurnOptions",
                                                     "PrefixRepetitionOptions", "RandomMMOptions", "RandomOptions",
                                                     "SharedPrefixOptions",
                                                     "SpecBenchOptions", "TimedTraceOptions")},
    "ConfigError": "fastbench.exceptions", "DatasetError": "fastbench.exceptions",
    "FastbenchError": "fastbench.exceptions", "ResultWriteError": "fastbench.results.result",
    "ServerDiedError": "fastbench.results.result", "ServerError": "fastbench.exceptions",
    "Result": "fastbench.results.result",
    "to_vllm_keys": "fastbench.results.vllm_keys",  # also fastbench.metrics.to_vllm_keys, its earlier path
    "make_server": "fastbench.server.engines",
    "SyntheticServer": "fastbench.synthetic",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'fastbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found once; later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = (
    "BenchConfig",
    "ConfigError",
    "CustomOptions",
    "DatasetError",
    "FastbenchError",
    "LaunchConfig",
    "MooncakeOptions",
    "MultiTurnOptions",
    "PrefixRepetitionOptions",
    "RandomMMOptions",
    "RandomOptions",
    "Result",
    "ResultWriteError",
    "ServerDiedError",
    "ServerError",
    "SharedPrefixOptions",
    "SpecBenchOptions",
    "SyntheticServer",
    "TimedTraceOptions",
    "__version__",
    "arun",
    "make_server",
    "run",
    "to_vllm_keys",
)
