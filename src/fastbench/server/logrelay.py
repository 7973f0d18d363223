"""A launched engine's output on its way to the log file, with the run's secrets hidden before a byte
reaches the disk (vLLM logs its arguments, ``--api-key`` among them; an engine may print its env).

The relay is a process of its own (``main``, in the fastbench copy this one runs: the engine's output on
stdin, the log file, opened for appending, on stdout), not a thread: a server that logs every request
would otherwise take the interpreter lock from the run's event loop. It writes whole lines, each batch
in one append (fastbench's own ``# fastbench`` lines go in between, never inside one), and a line
longer than ``LONG_LINE`` (a progress bar redrawn with ``\\r``) in parts cut at a space or a ``\\r``.
It ends when the engine's output ends, having written what was left. The secrets come as a JSON
list through a pipe of their own (its descriptor the one argument): not in an argument or the
environment, which other processes of the user can read in /proc.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import IO

from fastbench.redact import Secrets
from fastbench.server import processes

__all__ = ("LONG_LINE", "relay", "start_relay")

LONG_LINE = 1 << 20
_READ = 1 << 16
# The directory that holds the fastbench package this process runs: the relay imports the same copy
# (one that is not installed included), as a relay that cannot start would cut the engine's output.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_relay(log_file: IO[bytes], secrets: Secrets) -> tuple[subprocess.Popen[bytes], int]:
    """The relay process, appending to ``log_file``, and the pipe's write end for the engine's
    stdout and stderr (the caller closes it once the engine has it)."""
    secrets_in, secrets_out = os.pipe()
    with os.fdopen(secrets_out, "wb") as f:  # a few keys: far below a pipe's buffer
        f.write(json.dumps(list(secrets.values)).encode())
    read_end, write_end = os.pipe()
    try:
        relay_process = subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); "
             "from fastbench.server.logrelay import main; main()", str(secrets_in)], stdin=read_end,
            stdout=log_file, stderr=subprocess.DEVNULL, pass_fds=(secrets_in,),
            # its own session: the group's SIGTERM at teardown and a Ctrl-C must not cut the log short
            start_new_session=True, preexec_fn=processes.die_with_parent)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
        os.close(secrets_in)
    return relay_process, write_end


def _cut(pending: bytes) -> int:
    """How much of ``pending`` goes out now: up to its last newline; a line past LONG_LINE up to its
    last space or ``\\r`` (a secret holds neither, so none is cut in two)."""
    cut = pending.rfind(b"\n") + 1
    if cut == 0 and len(pending) > LONG_LINE:
        cut = max(pending.rfind(b" "), pending.rfind(b"\r"), pending.rfind(b"\t")) + 1 or len(pending)
    return cut


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def relay(source: int, sink: int, secrets: Secrets) -> None:
    """Copy ``source`` to ``sink`` until the end, hiding ``secrets``, whole lines at a time."""
    pending = b""
    while True:
        chunk = os.read(source, _READ)
        if not chunk:
            break
        pending += chunk
        cut = _cut(pending)
        if cut:
            _write_all(sink, secrets.data(pending[:cut]))
            pending = pending[cut:]
    if pending:
        _write_all(sink, secrets.data(pending))


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # fastbench stops the engine; the relay drains it
    with os.fdopen(int(sys.argv[1]), "rb") as f:
        secrets = Secrets(json.loads(f.read()))
    relay(sys.stdin.fileno(), sys.stdout.fileno(), secrets)


if __name__ == "__main__":
    main()
