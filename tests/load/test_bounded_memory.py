"""Bounded memory: a 10,000-request run at 256 streams stays far below the 200 MB RSS bound, and
memory does not grow with the number of requests (bench/ measures the 256-token case)."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from support.sanitizer import SANITIZER_REASON, UNDER_SANITIZER

CLIENT = """
import sys
import orjson
from fastbench import BenchConfig, SyntheticServer, run

n = int(sys.argv[1])
with SyntheticServer("--ttft-ms", "0", "--itl-ms", "1") as server:
    result = run(BenchConfig(base_url=server.base_url, concurrency=256, num_prompts=n,
                             random_input_len=8, random_output_len=16, ignore_eos=True))
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across execve, so a child of a big pytest
# process would report the parent's peak.
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(orjson.dumps({"completed": result.counts.completed, "max_rss_kib": hwm}).decode())
"""


def client_run(n: int) -> dict[str, int]:
    # A process of its own, so that its peak RSS is the client's alone (the server is another one).
    proc = subprocess.run([sys.executable, "-c", CLIENT, str(n)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, int] = orjson.loads(proc.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.skipif(UNDER_SANITIZER, reason=SANITIZER_REASON)
def test_rss_bounded_and_flat_in_request_count() -> None:
    small = client_run(1_000)
    large = client_run(10_000)
    assert small["completed"] == 1_000 and large["completed"] == 10_000
    assert large["max_rss_kib"] < 200 * 1024
    # 9,000 more requests may cost their rows and bodies (about 1 KiB each), not per-token memory.
    assert large["max_rss_kib"] - small["max_rss_kib"] < 20 * 1024, (small, large)
