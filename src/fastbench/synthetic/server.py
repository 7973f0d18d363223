"""SyntheticServer: the synthetic server started from Python, as a subprocess that imports nothing of the client."""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import weakref
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self


__all__ = ["SyntheticServer", "SyntheticStartError"]


# --------------------------------------------------------------------------------------------------
# Python helper: run it as a subprocess


# The subprocess's entry. It registers a bare ``fastbench`` package (no __init__) over the package's
# directory, so the server process loads ``fastbench.synthetic`` and ``fastbench._version`` and
# nothing of the fastbench client; sys.path[0] ('' for -c) is dropped so the caller's cwd cannot shadow.
BOOTSTRAP = (
    "import sys, types\n"
    "del sys.path[0]\n"
    "pkg = types.ModuleType('fastbench')\n"
    "pkg.__path__ = [sys.argv[1]]\n"
    "sys.modules['fastbench'] = pkg\n"
    "from fastbench.synthetic.cli import main\n"
    "sys.argv = ['fastbench-synthetic'] + sys.argv[2:]\n"
    "sys.exit(main())\n"
)


def _flag_args(options: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        else:
            out += [flag, str(value)]
    return out


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


class SyntheticStartError(RuntimeError):
    """The synthetic server did not come up: ``status`` is its exit status (2: its flags were
    refused, ``stderr`` says why), or None if it did not exit."""

    def __init__(self, message: str, status: int | None, stderr: str) -> None:
        super().__init__(message)
        self.status = status
        self.stderr = stderr


class SyntheticServer:
    """Starts the synthetic server in a subprocess (as ``python -m fastbench.synthetic --port 0`` would).

    ``SyntheticServer(ttft_ms=50, itl_ms=20, tokens_per_chunk="1-4")``: keyword options become flags
    (``True`` -> a bare flag; ``None``/``False`` -> omitted); ``*args`` are passed through as they are.
    Use as a context manager (sync or async) or call :meth:`start` / :meth:`stop`.
    """

    def __init__(self, *args: str, host: str = "127.0.0.1", startup_timeout_s: float = 20.0,
                 env: dict[str, str] | None = None, **options: Any) -> None:
        self.argv: list[str] = [*args, *_flag_args(options)]
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url = ""
        self.port = 0
        self._stderr: IO[bytes] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("synthetic server not started")
        return self.process.pid

    def command(self) -> list[str]:
        """The subprocess's argv: the same as ``python -m fastbench.synthetic --host H --port 0 ...``,
        through ``BOOTSTRAP`` so that the server process does not import the fastbench client."""
        pkg_dir = str(Path(__file__).resolve().parent.parent)  # fastbench/
        return [sys.executable, "-c", BOOTSTRAP, pkg_dir, "--host", self.host, "--port", "0",
                "--exit-with-parent", str(os.getpid()), *self.argv]

    def start(self) -> Self:
        if self.process is not None:
            raise RuntimeError("synthetic server already started")
        env = dict(os.environ if self.env is None else self.env)
        # The yardstick is plain Python: when the client's suite runs under a sanitizer
        # (make test-asan), the server must not inherit the sanitizer runtime and its slowness.
        for name in ("LD_PRELOAD", "PYTHONMALLOC", "ASAN_OPTIONS"):
            env.pop(name, None)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the server)
        # A session of its own: a terminal's Ctrl-C (sent to the foreground process group) reaches
        # the client alone, which then stops the run, measures what was in flight as cancelled, and
        # stops this server; a server that got the Ctrl-C too would break those requests first.
        proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=self._stderr, env=env, start_new_session=True)
        self.process = proc
        self._finalizer = weakref.finalize(self, _kill, proc)
        assert proc.stdout is not None
        deadline = time.monotonic() + self.startup_timeout_s
        buf = b""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._fail(f"did not print READY within {self.startup_timeout_s} s")
                if sel.select(min(left, 0.1)):
                    data = os.read(proc.stdout.fileno(), 4096)
                    if not data:
                        proc.wait(timeout=5)
                        self._fail(f"exited with status {proc.returncode} before READY")
                    buf += data
                elif proc.poll() is not None:
                    self._fail(f"exited with status {proc.returncode} before READY")
        line = buf.split(b"\n", 1)[0].decode(errors="replace").strip()
        if not line.startswith("READY "):
            self._fail(f"unexpected first line {line!r}")
        self.base_url = line.split(" ", 1)[1]
        self.port = int(self.base_url.rsplit(":", 1)[1])
        return self

    def stderr_text(self) -> str:
        """What the server wrote to stderr so far."""
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def _fail(self, why: str) -> None:
        err = self.stderr_text()
        status = self.stop()
        args = " ".join(["--host", self.host, "--port", "0", *self.argv])
        raise SyntheticStartError(f"synthetic server {why} (flags: {args})\n--- stderr ---\n{err}", status, err)

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after timeout_s; returns the exit status (None if never started)."""
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if self._finalizer is not None:
            self._finalizer.detach()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self.process = None
        return proc.returncode

    # -- convenience -------------------------------------------------------------------------------

    def get(self, path: str, timeout_s: float = 10.0) -> bytes:
        with urllib.request.urlopen(self.base_url + path, timeout=timeout_s) as r:
            body: bytes = r.read()
            return body

    def post(self, path: str, payload: Any = None, timeout_s: float = 30.0) -> bytes:
        data = json.dumps(payload if payload is not None else {}).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            body: bytes = r.read()
            return body

    def stats(self) -> dict[str, Any]:
        """GET /fb/stats: write lateness (ms: p50/p99/p999/max), chunks_sent, streams_open/max, ..."""
        out: dict[str, Any] = json.loads(self.get("/fb/stats"))
        return out

    def reset_stats(self) -> dict[str, Any]:
        """POST /fb/reset: zero the lateness histogram and chunk count (e.g. after a warm-up)."""
        out: dict[str, Any] = json.loads(self.post("/fb/reset"))
        return out

    def metrics(self) -> str:
        return self.get("/metrics").decode()

    async def fetch_stats(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.stats)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await asyncio.to_thread(self.stop)

    def __repr__(self) -> str:
        return f"SyntheticServer({self.base_url or 'not started'}, args={self.argv!r})"

