"""A launched server's processes and port: its process group, the strays that left it, signals, the port.

The launcher starts an engine in a session of its own (its pid is the group's id), so that one
signal to the group reaches the engine and its workers; descendants that called setsid() are
found and signalled apart (:func:`strays_of`). A process is told from a later one given the same
pid by its start time.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = (
    "die_with_parent",
    "group_members",
    "kill_group_at_exit",
    "port_is_free",
    "signal_group",
    "signal_strays",
    "start_time",
    "strays_of",
    "wait_port_free",
)

# If fastbench itself is killed (SIGKILL leaves no chance to tear down), the kernel sends the
# server SIGTERM: prctl(PR_SET_PDEATHSIG) in the child, armed between fork and exec. libc is
# loaded here, before any fork, so the child only makes one foreign call.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1
_SIGTERM = int(signal.SIGTERM)


def die_with_parent() -> None:
    """In the child, between fork and exec (``preexec_fn``): SIGTERM when fastbench dies."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, _SIGTERM)


def port_is_free(host: str, port: int) -> bool:
    """Whether a listener could bind ``host:port`` now (SO_REUSEADDR, as servers bind)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bind_host = "" if host in ("0.0.0.0", "::") else host
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind_host, port))
        except OSError:
            return False
    return True


def wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if port_is_free(host, port):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, from /proc; falls back to ``killpg(pgid, 0)``."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def start_time(pid: int) -> int | None:
    """A live (non-zombie) process's start time in clock ticks since boot (/proc/PID/stat field
    22), which tells it from a later process given the same pid; None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def strays_of(root: int, pgid: int) -> list[tuple[int, int]]:
    """Descendants of ``root`` that left its process group (setsid: Ray-style helpers, a
    daemonised child), as (pid, start time): a signal to the group does not reach them."""
    from fastbench.server.memory import process_tree

    out = []
    for pid in process_tree(root)[1:]:
        try:
            if os.getpgid(pid) == pgid:
                continue
        except OSError:
            continue
        start = start_time(pid)
        if start is not None:
            out.append((pid, start))
    return out


def signal_strays(strays: Sequence[tuple[int, int]], sig: int) -> list[int]:
    """Send ``sig`` to each stray still alive as itself (not a reused pid); the pids signalled."""
    signalled = []
    for pid, start in strays:
        if start_time(pid) == start:
            try:
                os.kill(pid, sig)
                signalled.append(pid)
            except OSError:
                pass
    return signalled


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group_at_exit(pgid: int) -> None:
    """Last resort (interpreter exit without teardown): no orphaned server."""
    signal_group(pgid, signal.SIGKILL)
