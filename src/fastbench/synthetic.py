"""The built-in synthetic OpenAI-compatible streaming server: the yardstick fastbench is measured against.

Run it on its own (``python -m fastbench.synthetic --port 8000``, or ``fastbench synthetic-server``) or
from Python with :class:`SyntheticServer`, which starts it as a subprocess. It shares no code with the
fastbench client (a bug common to both would hide itself) and runs in its own process, on uvloop, with
a hand-written HTTP/1.1 protocol.

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (vLLM's stream shapes, including
``stream_options.include_usage`` / ``continuous_usage_stats``), ``GET /health``, ``GET /v1/models``,
``GET /version``, ``GET /metrics`` (vLLM-style Prometheus text, with speculative-decoding counters when
``--tokens-per-chunk`` allows more than one token per chunk), ``POST /tokenize``, and its own
``GET /fb/stats`` (self-measured write lateness, chunk and stream counts) and ``POST /fb/reset``.

Token model (deterministic, documented):

* a string prompt has one token per whitespace-separated word; a token-id prompt one per id;
* a chat request has, per message, the words of its content (text parts joined) plus 4 tokens;
* output tokens are single words (" tok", " the", ...): the same sequence for every response of a
  server with a given ``--seed``; the server always produces ``max_tokens`` tokens (default 16) unless
  ``--eos-prob P`` stops a request early (each token ends it with probability P when the request does
  not set ``ignore_eos``; finish_reason "stop").

Timing: chunk ``i`` (``i`` = 0 is the first token) of a request received at ``t`` is due at
``t + TTFT + i * ITL (+ uniform jitter)``, an absolute schedule, so lateness never accumulates.
TTFT = ``--ttft-ms`` (default 50) + ``prompt_tokens / --prefill-tok-s`` when that is given (then
``--ttft-ms`` defaults to 0). ``t`` is the time the request's last bytes were read. Every SSE data
event except ``[DONE]`` carries ``"fb_sent_ns"``: ``time.monotonic_ns()`` taken just before the write.
The first chunk holds one token (the prefill's); each later chunk is one decode step emitting
``1 + accepted`` tokens, with ``K = max tokens per chunk - 1`` draft tokens per step (see /metrics).
Whole (non-streaming) responses are sent when the last chunk would have been.

Fault modes (``--fault``; every ``--fault-every``-th generation request, counting from 1, gets it):
``refuse`` (the port is bound but never listened on: every connection is refused; ignores
--fault-every), ``reset-before-headers`` (TCP RST on receipt), ``reset-mid-stream`` (RST at the
middle of the stream), ``http-500``, ``http-429`` (with Retry-After: 1), ``not-sse`` (200 with the
JSON body of a whole response to a streaming request), ``malformed-sse`` (the middle chunk is
``data: {not json``), ``oversized-event`` (one extra 10 MiB data event before the first chunk),
``no-done`` (the chunked body ends without ``[DONE]``), ``error-event`` (vLLM's
``{"error": {...}}`` event at the middle, then ``[DONE]``), ``stall`` (the schedule from the middle
on shifts by ``--stall-s``), ``trickle`` (the whole response is written one byte at a time,
``--trickle-us`` apart), ``close-after-response`` (``Connection: close`` and a close after the
response), ``usage-contradictory`` (per-chunk usage decreases from the middle on; the final usage
reports half the tokens streamed). Mid-stream faults need at least two chunks.
"""

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

from fastbench._synthetic_cli import build_parser, config_from_args, main
from fastbench._synthetic_engine import FAULTS, ServerConfig
from fastbench._synthetic_util import (
    CHAT_MESSAGE_OVERHEAD,
    count_messages_tokens,
    count_prompt_tokens,
    count_text_tokens,
    output_words,
)

__all__ = [
    "CHAT_MESSAGE_OVERHEAD",
    "FAULTS",
    "ServerConfig",
    "SyntheticServer",
    "SyntheticStartError",
    "build_parser",
    "config_from_args",
    "count_messages_tokens",
    "count_prompt_tokens",
    "count_text_tokens",
    "main",
    "output_words",
]


# --------------------------------------------------------------------------------------------------
# Python helper: run it as a subprocess


# The subprocess's entry. It registers a bare ``fastbench`` package (no __init__) whose modules are the
# files next to this one, so the server process loads the ``_synthetic_*`` modules and ``_version`` and
# nothing of the fastbench client; sys.path[0] ('' for -c) is dropped so the caller's cwd cannot shadow.
BOOTSTRAP = (
    "import sys, types\n"
    "del sys.path[0]\n"
    "pkg = types.ModuleType('fastbench')\n"
    "pkg.__path__ = [sys.argv[1]]\n"
    "sys.modules['fastbench'] = pkg\n"
    "from fastbench._synthetic_cli import main\n"
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
        pkg_dir = str(Path(__file__).resolve().parent)
        return [sys.executable, "-c", BOOTSTRAP, pkg_dir, "--host", self.host, "--port", "0", *self.argv]

    def start(self) -> Self:
        if self.process is not None:
            raise RuntimeError("synthetic server already started")
        env = dict(os.environ if self.env is None else self.env)
        # The yardstick is plain Python: when the client's suite runs under a sanitizer
        # (make test-asan), the server must not inherit the sanitizer runtime and its slowness.
        for name in ("LD_PRELOAD", "PYTHONMALLOC", "ASAN_OPTIONS"):
            env.pop(name, None)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the server)
        proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=self._stderr, env=env)
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


if __name__ == "__main__":
    sys.exit(main())
