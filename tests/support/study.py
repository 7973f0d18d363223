"""A small real study for the report's tests: `fastbench sweep` over the built-in synthetic server, two
variants (one drafting three tokens a chunk, so it has speculative-decoding counters) x concurrency
1 and 2, and a third variant attached to a port nothing listens on, whose cells fail and are recorded
in the sweep's journal with their reason."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path


def fastbench(*args: str, cwd: Path, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastbench", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=cwd)


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_study(where: Path) -> Path:
    """Run the sweep in ``where``; return the sweep file's path (its store is where/store)."""
    sweep = where / "study.toml"
    sweep.write_text(f"""
[sweep]
name = "demo-study"
store = "store"
[variants.base]
synthetic_args = "--ttft-ms 5 --itl-ms 6"
[variants.spec]
synthetic_args = "--ttft-ms 5 --itl-ms 12 --tokens-per-chunk 3"
[variants.gone]
base_url = "http://127.0.0.1:{closed_port()}"
[benchmark]
concurrency = [1, 2]
num_prompts = 6
random_input_len = 16
random_output_len = 24
""")
    done = fastbench("sweep", sweep.name, cwd=where)
    assert done.returncode == 1, done.stdout + done.stderr  # the gone variant's cells failed
    return sweep
