import os
import sys

import pytest

# Test helper modules (tests/_*.py) import by bare name under --import-mode=importlib.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-vllm", action="store_true", default=False,
        help="run the tests marked vllm: they install (scripts/setup_realvllm.sh, cached) and launch a real "
        "vLLM; setting FASTBENCH_VLLM_VENV runs them too",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-vllm") or os.environ.get("FASTBENCH_VLLM_VENV"):
        return
    skip = pytest.mark.skip(reason="real vLLM test: pass --run-vllm or set FASTBENCH_VLLM_VENV to run it")
    for item in items:
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(skip)
