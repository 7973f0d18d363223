"""The extension is compiled and importable; prints its build flavour (like uvloop's _debug_cc)."""

import os

from fastbench._core import engine


def test_engine_is_compiled() -> None:
    assert engine.__file__.endswith(".so"), engine.__file__
    print("BUILD_FLAVOUR", engine.BUILD_FLAVOUR)
    assert engine.BUILD_FLAVOUR in ("release", "debug", "asan")
    expected = os.environ.get("FASTBENCH_EXPECT_FLAVOUR")
    if expected:  # set by CI when it runs the suite on a sanitizer build
        assert engine.BUILD_FLAVOUR == expected


def test_clock_is_monotonic_ns() -> None:
    import time

    a = engine.now_ns()
    b = time.monotonic_ns()
    assert 0 <= b - a < 50_000_000
