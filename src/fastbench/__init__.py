"""fastbench: a load generator for LLM inference servers whose figures are the server's.

Public API::

    from fastbench import BenchConfig, run
    from fastbench.metrics import to_vllm_keys

    result = run(BenchConfig(base_url="http://127.0.0.1:8000", concurrency=64, num_prompts=500))
    print(result.distributions["ttft"].median, to_vllm_keys(result)["p99_tpot_ms"])
"""

from fastbench._version import __version__
from fastbench.api import arun, run
from fastbench.config import BenchConfig, LaunchConfig
from fastbench.exceptions import (
    ConfigError,
    DatasetError,
    FastbenchError,
    ResultWriteError,
    ServerDiedError,
    ServerError,
)
from fastbench.results.result import Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fastbench.synthetic import SyntheticServer


def __getattr__(name: str) -> object:
    # Lazy, so that `python -m fastbench.synthetic` does not import itself twice.
    if name == "SyntheticServer":
        from fastbench.synthetic import SyntheticServer

        return SyntheticServer
    raise AttributeError(f"module 'fastbench' has no attribute {name!r}")

__all__ = (
    "BenchConfig",
    "ConfigError",
    "DatasetError",
    "FastbenchError",
    "LaunchConfig",
    "Result",
    "ResultWriteError",
    "ServerDiedError",
    "ServerError",
    "SyntheticServer",
    "__version__",
    "arun",
    "run",
)
