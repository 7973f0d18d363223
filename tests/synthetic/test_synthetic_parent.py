"""A fastbench killed outright (SIGKILL: no finaliser runs) does not leave its built-in server running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from fastbench import SyntheticServer

STARTS_A_SERVER = (
    "import time\n"
    "from fastbench import SyntheticServer\n"
    "server = SyntheticServer().start()\n"
    "print(server.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a container's init may never reap an orphan)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_the_built_in_server_stops_when_the_process_that_started_it_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", STARTS_A_SERVER], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    server_pid = int(parent.stdout.readline())
    try:
        assert _running(server_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30  # a pidfd tells it at once; the fallback polls every 0.5 s
        while _running(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(server_pid)
    finally:
        if _running(server_pid):
            os.kill(server_pid, signal.SIGKILL)


def test_a_server_started_by_hand_is_told_no_parent_to_watch() -> None:
    """`fastbench synthetic-server` run by a person keeps running when its shell is gone (nohup): only
    SyntheticServer asks for the watch, with its own pid."""
    server = SyntheticServer()
    assert server.command().count("--exit-with-parent") == 1
    assert server.command()[server.command().index("--exit-with-parent") + 1] == str(os.getpid())
    from fastbench.synthetic.cli import build_parser

    assert build_parser("x").parse_args([]).exit_with_parent is None
