import os
import sys

import pytest

# The tests' shared helpers (tests/support/) import as `support.NAME` under --import-mode=importlib.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from support import timing  # noqa: E402 (importable only once the line above ran)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-vllm", action="store_true", default=False,
        help="run the tests marked vllm: they install (scripts/setup_realvllm.sh, cached) and launch a real "
        "vLLM; setting FASTBENCH_VLLM_VENV runs them too",
    )
    parser.addoption(
        "--run-llamacpp", action="store_true", default=False,
        help="run the tests marked llamacpp: they build (scripts/setup_llamacpp.sh, cached) and launch a real "
        "llama.cpp llama-server; setting FASTBENCH_LLAMACPP runs them too",
    )
    parser.addoption(
        "--run-browser", action="store_true", default=False,
        help="run the tests marked browser: they open fastbench report's page in a real headless Chromium "
        "(Debian: apt-get install chromium); setting FASTBENCH_CHROMIUM (1, or the browser's path) runs them too",
    )
    parser.addoption(
        "--run-docker", action="store_true", default=False,
        help="run the tests marked docker: they build local images (scripts/setup_docker_image.sh, which installs "
        "docker.io and starts dockerd where missing) and launch the real vLLM in a container; setting "
        "FASTBENCH_DOCKER runs them too",
    )
    parser.addoption(
        "--run-ray", action="store_true", default=False,
        help="run the tests marked ray: they start a real local Ray cluster of two nodes (needs fastbench-llm[ray]); "
        "setting FASTBENCH_RAY runs them too",
    )


# marker -> (option, environment variable, what it is): skipped unless the option or the variable is given
_REAL_SERVERS = {
    "vllm": ("--run-vllm", "FASTBENCH_VLLM_VENV", "real vLLM test"),
    "llamacpp": ("--run-llamacpp", "FASTBENCH_LLAMACPP", "real llama.cpp test"),
    "browser": ("--run-browser", "FASTBENCH_CHROMIUM", "headless browser test"),
    "ray": ("--run-ray", "FASTBENCH_RAY", "real Ray cluster test"),
    "docker": ("--run-docker", "FASTBENCH_DOCKER", "real docker test"),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, (option, env, what) in _REAL_SERVERS.items():
        if config.getoption(option) or os.environ.get(env):
            continue
        skip = pytest.mark.skip(reason=f"{what}: pass {option} or set {env} to run it")
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """The test running now, for support.timing's record of the round a timing check passed on."""
    timing.current = item
    try:
        return (yield)
    finally:
        timing.current = None
