"""Fetch `vllm bench serve`'s source, for its parser alone, from each vLLM release on PyPI from 0.32 on: the
wheel is downloaded without its requirements (``pip download --no-deps``), only ``vllm/benchmarks/`` is
kept from it (a wheel is a zip; nothing is installed, no model is fetched) and the wheel is deleted.
tests/cli/test_cli_vllm.py reads each kept parser (tests/support/vllm_parser.py) and fails on a flag or
backend fastbench does not know.

    python scripts/fetch_vllm_parsers.py [--cache DIR] [--min 0.32]

The cache (default ~/.cache/fastbench/vllm-parsers, or FASTBENCH_VLLM_PARSERS) holds one folder per
version; a version already there is not fetched again. Prints VERSION=DIR for each. Exit status 3: PyPI
could not be reached (the test then skips with this line), 1: any other failure.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

DEFAULT_CACHE = Path(os.environ.get("FASTBENCH_VLLM_PARSERS") or Path.home() / ".cache" / "fastbench" / "vllm-parsers")
KEPT = "vllm/benchmarks/"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def releases(minimum: str) -> list[str]:
    """vLLM's releases on the package index from ``minimum`` on (pre-releases left out), oldest first."""
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "vllm"], capture_output=True,
                          text=True, timeout=120)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("Available versions:")), None)
    if proc.returncode != 0 or line is None:
        raise ConnectionError(f"pip index versions vllm failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    found = [v.strip() for v in line.split(":", 1)[1].split(",")]
    return sorted((v for v in found if re.fullmatch(r"\d+(\.\d+)+", v) and _version(v) >= _version(minimum)),
                  key=_version)


def fetch(version: str, cache: Path) -> Path:
    """``vllm/benchmarks/`` of vLLM ``version``'s wheel, in ``cache/version``."""
    dest = cache / version
    if (dest / KEPT / "serve.py").exists():
        return dest
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps",
                               "--only-binary", ":all:", "--quiet", "-d", tmp], capture_output=True, text=True,
                              timeout=900)
        wheels = list(Path(tmp).glob("vllm-*.whl"))
        if proc.returncode != 0 or not wheels:
            raise ConnectionError(f"pip download vllm=={version} failed: "
                                  f"{(proc.stderr.strip().splitlines() or ['no wheel'])[-1]}")
        part = Path(tmp) / "tree"
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extractall(part, [n for n in wheel.namelist() if n.startswith(KEPT) and n.endswith(".py")])
        (part / "SOURCE").write_text(wheels[0].name + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        part.rename(dest)  # whole or not at all: a cut fetch leaves no half folder
    return dest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--min", default="0.32", help="the oldest release fetched")
    a = p.parse_args(argv)
    a.cache.mkdir(parents=True, exist_ok=True)
    try:
        for version in releases(a.min):
            print(f"{version}={fetch(version, a.cache)}", flush=True)
    except ConnectionError as exc:
        print(f"vLLM's wheels could not be fetched: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
