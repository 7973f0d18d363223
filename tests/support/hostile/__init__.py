"""The hostile server (server.py beside this file) as a test fixture: ``with HostileServer("flood") as s:``
starts it in its own process on loopback, ``s.base_url`` is where it listens, and leaving the block
kills it. Its modes are the ways a broken or hostile server answers (server.py lists them)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

SERVER = pathlib.Path(__file__).with_name("server.py")


class HostileServer:
    def __init__(self, mode: str, gap_ms: float = 1.0, events: int = 8) -> None:
        self.args = [sys.executable, str(SERVER), mode, "--gap-ms", str(gap_ms), "--events", str(events)]
        self.process: subprocess.Popen[str] | None = None
        self.port = 0

    def __enter__(self) -> HostileServer:
        self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.process.kill()
            raise RuntimeError(f"the hostile server did not start: {line!r}")
        self.port = int(line)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
