"""The server under test: launch (local process or docker), readiness, log, provenance, teardown.

``VLLMServer``, ``SGLangServer`` and ``LlamaCppServer`` start an engine in its own process group with
its output in a log file; ``ExternalServer`` attaches to one that is already running. All share:

* ``start()`` / ``wait_ready(timeout_s)`` (or ``await astart()``) / ``stop()``;
* ``base_url``, ``log_path``, ``load_time_s`` (launch until /v1/models lists the model);
* ``provenance()``: engine version (/version), image digest under docker (``docker inspect``), the exact
  command line with secrets redacted;
* ``mark_window_start()`` / ``mark_window_end()`` and ``window_log_lines()``: what the server logged
  during the measured window (warnings, "SpecDecoding metrics:" lines).

Readiness polls /health, then /v1/models until the model is listed. Loading fails fast, with a one-line
message and the log's last lines, when the process exits, prints a fatal error (out of memory, "Address
already in use", a top-level Python traceback, ...), or the timeout passes. Teardown (on success,
failure, Ctrl-C and the time cap alike) sends SIGTERM to the whole process group, SIGKILL after a grace
period (``docker stop`` and ``docker rm`` for a container), and checks that the port is free again.
"""

from __future__ import annotations

import asyncio
import ctypes
import datetime
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from fastbench.config import BenchConfig, LaunchConfig
from fastbench.exceptions import ConfigError, ServerError
from fastbench.redact import redact_argv, redact_secret, redact_text, shell_join
from fastbench.server import control, prom, specdecode
from fastbench.server.prom import MetricsScraper

# If fastbench itself is killed (SIGKILL leaves no chance to tear down), the kernel sends the
# server SIGTERM: prctl(PR_SET_PDEATHSIG) in the child, armed between fork and exec. libc is
# loaded here, before any fork, so the child only makes one foreign call.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1
_SIGTERM = int(signal.SIGTERM)


def _die_with_parent() -> None:
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, _SIGTERM)


__all__ = (
    "DEFAULT_PORTS",
    "ExternalServer",
    "LaunchedServer",
    "LlamaCppServer",
    "MemoryRun",
    "SGLangServer",
    "ServerLaunchError",
    "VLLMServer",
    "WindowMonitor",
    "group_members",
    "make_server",
    "parse_vllm_footprint",
    "port_is_free",
)

DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000, "llama.cpp": 8080}
LOG_TAIL_LINES = 25
POLL_S = 0.25

# A line that means loading has failed even if the process has not exited (yet).
FATAL_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError"), "out of memory"),
    (re.compile(r"address already in use", re.IGNORECASE), "the port is already in use"),
    (re.compile(r"Engine core initialization failed"), "the engine failed to start"),
    (re.compile(r"No available memory for the cache blocks"), "no memory left for the KV cache"),
)
# A traceback at column 0 (the main process's; vLLM prefixes its workers' lines) is fatal too, reported
# with its exception line, once that has come or a second has passed.
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
TRACEBACK_WAIT_S = 1.0
_LEVEL = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b")
_WINDOW_LINE = re.compile(rb"\b(?:WARNING|ERROR|CRITICAL)\b|SpecDecoding metrics")  # what the card reads
_LOG_PREFIX = re.compile(
    r"^.*?\b(?:WARNING|ERROR|CRITICAL)\b\s*(?:\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s*)?(?:\[[^\]]*\]\s*)?"
)


class ServerLaunchError(ServerError):
    """The launched server did not become ready: it exited, logged a fatal error or timed out."""


# -- processes and ports ----------------------------------------------------------------------------


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


def _start_time(pid: int) -> int | None:
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
        start = _start_time(pid)
        if start is not None:
            out.append((pid, start))
    return out


def _signal_strays(strays: Sequence[tuple[int, int]], sig: int) -> list[int]:
    """Send ``sig`` to each stray still alive as itself (not a reused pid); the pids signalled."""
    signalled = []
    for pid, start in strays:
        if _start_time(pid) == start:
            try:
                os.kill(pid, sig)
                signalled.append(pid)
            except OSError:
                pass
    return signalled


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group_at_exit(pgid: int) -> None:
    """Last resort (interpreter exit without teardown): no orphaned server."""
    _signal_group(pgid, signal.SIGKILL)


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def engine_option(args: Sequence[str], *names: str) -> str | None:
    """The value of the last ``--name VALUE`` or ``--name=VALUE`` in args (an engine's arguments)."""
    value = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
    return value


_SECRET_NAME = re.compile(r"(TOKEN|KEY|SECRET|PASSWORD)$")


def _tail(text: str, n: int = LOG_TAIL_LINES) -> str:
    lines = [line for line in text.splitlines() if line.strip()][-n:]
    return "\n".join("  | " + line for line in lines) if lines else "  | (the log is empty)"


# -- the servers ------------------------------------------------------------------------------------


class ExternalServer:
    """A server fastbench did not start (``--base-url``, or the built-in synthetic server): the common
    API with nothing to launch, no log and no teardown."""

    engine = "external"

    def __init__(self, base_url: str, *, api_key: str | None = None, pid: int | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.pid = pid
        self.log_path: Path | None = None
        self.load_time_s: float | None = None
        self.version: str | None = None

    def start(self) -> None:
        """Nothing to start."""

    def wait_ready(self, timeout_s: float = 30.0) -> float:
        """Poll /health and /v1/models until the server lists a model; returns the seconds it took."""
        t0 = time.monotonic()
        state = "not polled"
        while time.monotonic() - t0 < timeout_s:
            ready, state = control.probe_ready(self.base_url, None, self.api_key)
            if ready:
                self.version = control.engine_version(self.base_url, self.api_key)
                return time.monotonic() - t0
            time.sleep(POLL_S)
        raise ServerError(f"{self.base_url} is not ready after {timeout_s:g} s ({state})")

    def stop(self) -> None:
        """Not ours to stop."""

    def exit_message(self) -> str | None:
        return None

    def mark_window_start(self) -> None:
        pass

    def mark_window_end(self) -> None:
        pass

    def window_log_lines(self) -> list[str]:
        return []

    def provenance(self) -> dict[str, Any]:
        return {"launched": False, "base_url": self.base_url, "engine_version": self.version}


class LaunchedServer:
    """A server that fastbench starts and stops (see the module docstring). Subclasses give the argv."""

    engine = ""
    engine_name = ""
    default_bin = ""

    def __init__(self, launch: LaunchConfig, *, api_key: str | None = None,
                 log_dir: str | None = None) -> None:
        self.launch = launch
        self.api_key = api_key
        self.host = launch.host
        self.port = launch.port if launch.port is not None else DEFAULT_PORTS[launch.engine]
        self.base_url = f"http://{_url_host(self.host)}:{self.port}"
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        # the pid too: two runs started in the same second must not share (and parse) one log
        default_log = Path(log_dir or ".") / f"fastbench-server-{launch.engine}-{stamp}-{os.getpid()}.log"
        self.log_path = Path(launch.log_path) if launch.log_path else default_log
        self.container = f"fastbench-{os.getpid()}-{uuid.uuid4().hex[:8]}" if launch.docker_image else None
        self.process: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        self.t_launch: float | None = None
        self.load_time_s: float | None = None
        self.version: str | None = None
        self.image_digest: str | None = None
        self.image_id: str | None = None
        self.container_pid: int | None = None  # docker inspect's .State.Pid, in this machine's pid namespace
        self._hurry = threading.Event()  # see hurry()
        self.exit_status: int | None = None
        self.port_free_after_stop: bool | None = None
        self.teardown: dict[str, Any] | None = None  # how stop() went (see stop)
        self.stopped = False
        self.window: tuple[int, int | None] | None = None
        self._log: IO[bytes] | None = None
        self._scan_pos = self._launch_pos = 0
        self._scan_rest = b""
        self._fatal: str | None = None
        self._traceback_at: float | None = None
        self._traceback_line = ""
        self._finalizer: weakref.finalize[Any, Any] | None = None

    # -- the command ---------------------------------------------------------------------------

    @property
    def served_model(self) -> str:
        """The name /v1/models will list: --served-model-name (first), else the model argument."""
        name = engine_option(self.launch.engine_args, "--served-model-name")
        return name.split()[0] if name else self.launch.model

    @property
    def pid(self) -> int | None:
        """The server's own process: the engine, or under docker the container's main process (once
        ready; None before: the `docker run` client's memory is not the server's)."""
        if self.launch.docker_image:
            return self.container_pid
        return self.process.pid if self.process is not None else None

    def server_args(self, host: str) -> list[str]:
        """The engine's own arguments (after the executable, or after the image under docker)."""
        raise NotImplementedError

    def local_argv(self) -> list[str]:
        """The engine's argv as a local process."""
        raise NotImplementedError

    def docker_argv(self) -> list[str]:
        launch = self.launch
        assert launch.docker_image is not None and self.container is not None
        argv = [launch.engine_bin or "docker", "run", "--name", self.container, "--gpus", "all",
                "--ipc=host", "-p", f"{self.port}:{self.port}"]
        for item in launch.env:  # the name only: a value on docker's command line is in /proc for all
            argv += ["--env", item.partition("=")[0]]
        argv += [*launch.docker_args, launch.docker_image, *self.docker_server_args()]
        return argv

    def docker_server_args(self) -> list[str]:
        return self.server_args("0.0.0.0")

    def argv(self) -> list[str]:
        return self.docker_argv() if self.launch.docker_image else self.local_argv()

    def process_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")  # the log in real time, not at exit
        # a local engine inherits them; docker passes them on by name (see docker_argv)
        for item in self.launch.env:
            name, sep, value = item.partition("=")
            if sep:
                env[name] = value
        return env

    def display_command(self) -> str:
        """The command as a shell line, the environment additions first, secrets redacted."""
        prefix = [item for item in self.launch.env if "=" in item]
        return shell_join(redact_argv([*prefix, *self.argv()], self.api_key))

    # -- launch and readiness ------------------------------------------------------------------

    def start(self) -> None:
        """Launch the server in its own process group, its output appended to ``log_path``."""
        if self.process is not None:
            raise RuntimeError("server already started")
        argv = self.argv()
        exe = shutil.which(argv[0])
        if exe is None:
            what = "docker" if self.launch.docker_image else f"the {self.engine_name} executable"
            if self.launch.engine_bin is not None:
                why = "not an executable file" if os.path.exists(self.launch.engine_bin) else "no such file"
                raise ConfigError(f"--engine-bin {self.launch.engine_bin}: {why}")
            raise ConfigError(f"cannot find {what} {argv[0]!r} on PATH; pass --engine-bin PATH")
        if not port_is_free(self.host, self.port):
            raise ServerLaunchError(
                f"port {self.port} on {self.host} is already in use: stop what holds it or choose "
                "another with --server-port")
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")  # noqa: SIM115 (lives as long as the server)
        except OSError as exc:
            raise ConfigError(f"--server-log {self.log_path}: {exc.strerror or exc}") from None
        # A reused --server-log holds earlier runs: everything read from it starts here.
        self._launch_pos = self._scan_pos = self._log.tell()
        self._note(f"launching: {self.display_command()}")
        self.t_launch = time.monotonic()
        try:
            self.process = subprocess.Popen(
                [exe, *argv[1:]], stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                env=self.process_env(), start_new_session=True,
                # Only for a local engine: a docker client's death would not stop its container.
                preexec_fn=None if self.launch.docker_image else _die_with_parent,
            )
        except OSError as exc:  # e.g. a script whose #! interpreter is missing: ENOENT naming the script
            raise ServerLaunchError(f"cannot run {exe}: {exc.strerror or exc} (a script's #! interpreter "
                                    "missing, or not an executable for this machine?)") from None
        self.pgid = self.process.pid  # a new session: the leader's pid is the group's id
        self._finalizer = weakref.finalize(self, _kill_group_at_exit, self.pgid)

    def _note(self, text: str) -> None:
        """A line of fastbench's own in the server log (the file is opened for appending)."""
        if self._log is not None:
            stamp = datetime.datetime.now().isoformat(timespec="seconds")
            self._log.write(f"# fastbench {stamp}: {text}\n".encode())
            self._log.flush()

    def _scan_log(self) -> None:
        """Read what the server logged since the last scan; remember the first fatal line."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._scan_pos)
                data = f.read()
        except OSError:
            return
        self._scan_pos += len(data)
        lines = (self._scan_rest + data).split(b"\n")
        self._scan_rest = lines.pop()
        if self._fatal is not None:
            return
        for raw in lines:
            line = raw.decode("utf-8", errors="replace").rstrip("\r")
            for pattern, reason in FATAL_PATTERNS:
                if pattern.search(line):
                    self._fatal = f"{reason}: {line.strip()[:300]}"
                    return
            if _TRACEBACK.match(line):
                self._traceback_at = self._traceback_at or time.monotonic()
            elif self._traceback_at is not None and not self._traceback_line and line[:1] not in ("", " ", "\t"):
                self._traceback_line = line.strip()[:300]  # the exception: the traceback's first unindented line

    def log_text(self, last_bytes: int | None = None, *, until_window: bool = False) -> str:
        """What this launch logged (from its launch on), or its last ``last_bytes``; with
        ``until_window``, only up to the measured window's start (the loading phase)."""
        try:
            with open(self.log_path, "rb") as f:
                start = self._launch_pos
                if last_bytes is not None:
                    start = max(start, f.seek(0, os.SEEK_END) - last_bytes)
                f.seek(start)
                if until_window and self.window is not None:
                    return f.read(max(0, self.window[0] - start)).decode("utf-8", errors="replace")
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        """The last lines of the log, for an error message: read from the end, secrets redacted (an
        engine may log its arguments, vLLM its --api-key among them)."""
        return _tail(self.redact(self.log_text(last_bytes=64 * 1024)), n)

    def redact(self, text: str) -> str:
        """``text`` without the API key or the values of secret-named --server-env variables."""
        text = redact_text(text, self.api_key)
        for item in self.launch.env:
            name, sep, value = item.partition("=")
            if sep and value and _SECRET_NAME.search(name):
                text = redact_secret(text, value)
        return text

    def _elapsed(self) -> float:
        return time.monotonic() - self.t_launch if self.t_launch is not None else 0.0

    def _failure(self, what: str) -> ServerLaunchError:
        return ServerLaunchError(
            f"{self.engine_name} {what} (after {self._elapsed():.1f} s); log: {self.log_path}; "
            f"last lines:\n{self.log_tail()}")

    def _exit_how(self) -> str | None:
        """How the process ended ("exited with status 1", "was killed by signal 9"); None while it runs."""
        if self.process is None:
            return None
        status = self.process.poll()
        if status is None:
            return None
        self.exit_status = status
        return f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"

    def exit_message(self) -> str | None:
        """A one-line description of the process's exit, or None while it runs."""
        how = self._exit_how()
        if how is None or self.process is None:
            return None
        return f"{self.engine_name} (pid {self.process.pid}) {how}"

    def _ready_step(self) -> tuple[bool, str]:
        """One readiness check: raises when loading has failed; (ready, what the probe saw)."""
        if self.process is None:
            raise RuntimeError("server not started")
        self._scan_log()
        how = self._exit_how()
        if how is not None:
            raise self._failure(f"{how} while loading")
        if self._fatal is None and self._traceback_at is not None and (
                self._traceback_line or time.monotonic() - self._traceback_at > TRACEBACK_WAIT_S):
            self._fatal = f"a Python traceback at top level: {self._traceback_line or 'Traceback ...'}"
        if self._fatal is not None:
            raise self._failure(f"failed while loading: {self._fatal}")
        return control.probe_ready(self.base_url, self._expected_models(), self.api_key)

    def _expected_models(self) -> tuple[str, ...] | None:
        return (self.served_model,)

    def _on_ready(self) -> float:
        self.load_time_s = self._elapsed()
        self._note(f"ready after {self.load_time_s:.1f} s")
        self.version = control.engine_version(self.base_url, self.api_key)
        if self.launch.docker_image:
            self._inspect_image()
        return self.load_time_s

    def _timeout(self, timeout_s: float, state: str) -> ServerLaunchError:
        return self._failure(f"was not ready within {timeout_s:g} s ({state})")

    def wait_ready(self, timeout_s: float | None = None) -> float:
        """Block until /v1/models lists the model; returns the load time (launch to ready) in s.

        :raises ServerLaunchError: the process exited, logged a fatal error, or the time ran out.
        """
        timeout = self.launch.ready_timeout_s if timeout_s is None else timeout_s
        while True:
            ready, state = self._ready_step()
            if ready:
                return self._on_ready()
            if self._elapsed() > timeout:
                raise self._timeout(timeout, state)
            time.sleep(POLL_S)

    async def await_ready(self, timeout_s: float | None = None,
                          stop: asyncio.Event | None = None) -> float:
        """:meth:`wait_ready` for an event loop; setting ``stop`` abandons the wait (CancelledError)."""
        timeout = self.launch.ready_timeout_s if timeout_s is None else timeout_s
        while True:
            ready, state = await asyncio.to_thread(self._ready_step)
            if ready:
                return await asyncio.to_thread(self._on_ready)
            if stop is not None and stop.is_set():
                raise asyncio.CancelledError(f"interrupted while waiting for {self.engine_name} to load")
            if self._elapsed() > timeout:
                raise self._timeout(timeout, state)
            await asyncio.sleep(POLL_S)

    async def astart(self, stop: asyncio.Event | None = None,
                     on_started: Callable[[int], None] | None = None) -> float:
        """start() and await_ready(); on any failure the server is stopped before the error propagates.
        ``on_started(pid)`` as soon as the engine's process runs (a local one), so that memory
        sampling sees the loading too."""
        try:
            self.start()
            if on_started is not None and self.pid is not None:
                on_started(self.pid)
            return await self.await_ready(stop=stop)
        except BaseException:
            await self.astop()  # off the loop: a further Ctrl-C hurries it
            raise

    def _inspect_image(self) -> None:
        docker = self.launch.engine_bin or "docker"
        image = self.launch.docker_image
        assert image is not None
        if "@sha256:" in image:
            self.image_digest = image.split("@", 1)[1]
        for target, fmt, attr in ((image, "{{json .RepoDigests}}", "image_digest"),
                                  (self.container, "{{.Image}}", "image_id"),
                                  (self.container, "{{.State.Pid}}", "container_pid")):
            try:
                out = subprocess.run([docker, "inspect", "--format", fmt, str(target)], capture_output=True,
                                     text=True, timeout=30, check=True).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                continue
            if attr == "image_digest":
                try:
                    digests = orjson.loads(out)
                except orjson.JSONDecodeError:
                    continue
                if digests and getattr(self, attr) is None:
                    self.image_digest = str(digests[0]).split("@", 1)[-1]
            elif attr == "container_pid":
                self.container_pid = int(out) if out.isdigit() and int(out) > 0 else None
            elif out:
                self.image_id = out

    # -- the measured window -------------------------------------------------------------------

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def mark_window_start(self) -> None:
        self._note("measured window starts")
        self.window = (self._log_size(), None)

    def mark_window_end(self) -> None:
        if self.window is not None:
            self.window = (self.window[0], self._log_size())
            self._note("measured window ends")

    def window_log_lines(self) -> list[str]:
        """The lines the server logged between the window marks that the card reads: warnings and
        errors, and "SpecDecoding metrics" lines. Read a block at a time: a server that logs every
        request writes hundreds of MB in a long window."""
        if self.window is None:
            return []
        start, end = self.window
        kept: list[str] = []
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                left = None if end is None else max(0, end - start)
                rest = b""
                while left is None or left > 0:
                    block = f.read(1 << 20 if left is None else min(1 << 20, left))
                    if not block:
                        break
                    if left is not None:
                        left -= len(block)
                    lines = (rest + block).split(b"\n")
                    rest = lines.pop()
                    kept += [line for raw in lines if _WINDOW_LINE.search(raw)
                             and not (line := raw.decode("utf-8", errors="replace")).startswith("# fastbench ")]
                if _WINDOW_LINE.search(rest) and not rest.startswith(b"# fastbench "):
                    kept.append(rest.decode("utf-8", errors="replace"))
        except OSError:
            return []
        return kept

    # -- teardown ------------------------------------------------------------------------------

    def hurry(self) -> None:
        """From any thread: a stop() under way sends SIGKILL now instead of waiting out the grace
        period (the user asked again)."""
        self._hurry.set()

    async def astop(self) -> None:
        """stop() in a thread, so that the event loop (and its signal handlers) runs meanwhile; a
        cancellation (a second Ctrl-C) hurries it, waits for it, and goes on."""
        teardown = asyncio.ensure_future(asyncio.to_thread(self.stop))
        try:
            await asyncio.shield(teardown)
        except asyncio.CancelledError:
            self.hurry()
            await teardown
            raise

    def stop(self) -> None:
        """SIGTERM to the process group (``docker stop`` for a container), SIGKILL after the grace
        period (or at once after hurry()), then wait (briefly) for the port to be free. Safe to call
        more than once.

        Records ``teardown``: ``how`` (what it took), ``seconds``, ``exit`` (how the process
        ended, None if it did not), ``port_free`` and ``processes_left`` (pids of the group)."""
        if self.stopped or self.process is None:
            self.stopped = True
            return
        self.stopped = True
        t0 = time.monotonic()
        grace = self.launch.stop_grace_s
        how = "nothing: it had exited already"
        if self.container is not None:
            how = self._docker_stop(grace)
        pgid = self.pgid
        assert pgid is not None
        self.process.poll()
        # Descendants that left the group get the same signals (a snapshot: one that double-forked
        # away earlier is no longer a descendant, and is not found).
        # Only while the engine is unreaped: once reaped, its pid may be another process's.
        strays = strays_of(self.process.pid, pgid) if self.container is None and self.process.returncode is None else []
        if strays:
            self._note(f"processes {[pid for pid, _ in strays]} left the server's process group: signalled too")

        def running() -> list[int]:
            self.process.poll()  # type: ignore[union-attr]
            return group_members(pgid) + [pid for pid, start in strays if _start_time(pid) == start]

        if self.container is not None:  # the `docker run` client ends with its container: give it a moment
            deadline = time.monotonic() + 5
            while running() and time.monotonic() < deadline:
                time.sleep(0.05)
        if running():
            how = "SIGTERM"
            self._note("stopping: SIGTERM to the process group")
            _signal_group(pgid, signal.SIGTERM)
            _signal_strays(strays, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and not self._hurry.is_set():
                if not running():
                    break
                time.sleep(0.05)
            else:
                asked = " (asked again)" if self._hurry.is_set() else ""
                waited = f"{time.monotonic() - t0:.1f}" if asked else f"{grace:g}"
                self._note(f"still running {waited} s after SIGTERM: SIGKILL{asked}")
                how = f"SIGKILL, {waited} s after SIGTERM{asked}"
                _signal_group(pgid, signal.SIGKILL)
                _signal_strays(strays, signal.SIGKILL)
                deadline = time.monotonic() + 5
                while running() and time.monotonic() < deadline:
                    time.sleep(0.05)
        try:
            self.exit_status = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self._finalizer is not None:
            self._finalizer.detach()
        self.port_free_after_stop = wait_port_free(self.host, self.port, 10.0)
        left = running()
        problems = [f"port {self.port} still in use"] if not self.port_free_after_stop else []
        if left:
            problems.append(f"processes {left} of its group (or that left it) still running")
        self._note("stopped" + (": " + "; ".join(problems) if problems else ""))
        self.teardown = {"how": how, "seconds": round(time.monotonic() - t0, 2), "exit": self._exit_how(),
                         "port_free": self.port_free_after_stop, "processes_left": left,
                         "left_the_group": [pid for pid, _ in strays]}
        if problems:
            warnings.warn(f"{self.engine_name} teardown: {'; '.join(problems)}", RuntimeWarning, stacklevel=2)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _docker_stop(self, grace: float) -> str:
        """``docker stop -t GRACE`` (``docker kill`` at once after hurry()), then ``docker rm -f``;
        returns what it took."""
        docker = self.launch.engine_bin or "docker"
        quiet: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
                                 "stderr": subprocess.DEVNULL}
        how = "docker stop"
        stopping = None
        try:
            try:
                stopping = subprocess.Popen([docker, "stop", "-t", str(int(grace)), str(self.container)], **quiet)
            except OSError:
                return how
            deadline = time.monotonic() + grace + 30
            while stopping.poll() is None and time.monotonic() < deadline:
                if self._hurry.is_set():
                    self._note("asked again: docker kill")
                    how = "docker kill (asked again)"
                    try:
                        subprocess.run([docker, "kill", str(self.container)], timeout=30, check=False, **quiet)
                    except (OSError, subprocess.SubprocessError):
                        pass
                    break
                time.sleep(0.05)
        finally:  # also on an interrupt: no docker client or container left behind
            if stopping is not None and stopping.poll() is None:
                stopping.kill()
                stopping.wait()
            try:
                subprocess.run([docker, "rm", "-f", str(self.container)], timeout=30, check=False, **quiet)
            except (OSError, subprocess.SubprocessError):
                pass
        return how

    # -- what the result records ---------------------------------------------------------------

    def provenance(self) -> dict[str, Any]:
        launch = self.launch
        return {
            "launched": True,
            "engine": launch.engine,
            "engine_version": self.version,
            "model": launch.model,
            "served_model": self.served_model,
            "launcher": "docker" if launch.docker_image else "local process",
            "argv": redact_argv(self.argv(), self.api_key),
            "env": [redact_text(item, self.api_key) for item in launch.env],
            "command": self.display_command(),
            "engine_bin": shutil.which(self.argv()[0]),
            "image": launch.docker_image,
            "image_digest": self.image_digest,
            "image_id": self.image_id,
            "container": self.container,
            "pid": self.pid,
            "base_url": self.base_url,
            "log_path": str(self.log_path),
            "load_time_s": self.load_time_s,
        }


class VLLMServer(LaunchedServer):
    """``vllm serve MODEL --host H --port P ...`` (docker: the vllm/vllm-openai image's entrypoint)."""

    engine = "vllm"
    engine_name = "vLLM"
    default_bin = "vllm"

    def server_args(self, host: str) -> list[str]:
        return ["--host", host, "--port", str(self.port), *self.launch.engine_args]

    def local_argv(self) -> list[str]:
        return [self.launch.engine_bin or self.default_bin, "serve", self.launch.model,
                *self.server_args(self.host)]

    def docker_server_args(self) -> list[str]:
        return [self.launch.model, *self.server_args("0.0.0.0")]


class SGLangServer(LaunchedServer):
    """``python -m sglang.launch_server --model-path MODEL --host H --port P ...``."""

    engine = "sglang"
    engine_name = "SGLang"
    default_bin = "python3"

    def server_args(self, host: str) -> list[str]:
        return ["-m", "sglang.launch_server", "--model-path", self.launch.model, "--host", host,
                "--port", str(self.port), *self.launch.engine_args]

    def local_argv(self) -> list[str]:
        return [self.launch.engine_bin or self.default_bin, *self.server_args(self.host)]

    def docker_server_args(self) -> list[str]:
        return ["python3", *self.server_args("0.0.0.0")]


class LlamaCppServer(LaunchedServer):
    """``llama-server -m MODEL --host H --port P ...`` (add ``--metrics`` to engine args for /metrics)."""

    engine = "llama.cpp"
    engine_name = "llama.cpp"
    default_bin = "llama-server"

    @property
    def served_model(self) -> str:
        return engine_option(self.launch.engine_args, "--alias", "-a") or self.launch.model

    def _expected_models(self) -> tuple[str, ...] | None:
        return None  # one model per server; its id is the alias or a path llama.cpp chooses

    def server_args(self, host: str) -> list[str]:
        return ["-m", self.launch.model, "--host", host, "--port", str(self.port), *self.launch.engine_args]

    def local_argv(self) -> list[str]:
        return [self.launch.engine_bin or self.default_bin, *self.server_args(self.host)]


_SERVERS: dict[str, type[LaunchedServer]] = {
    "vllm": VLLMServer, "sglang": SGLangServer, "llama.cpp": LlamaCppServer,
}


def make_server(launch: LaunchConfig, *, api_key: str | None = None,
                log_dir: str | None = None) -> LaunchedServer:
    """The server class for ``launch.engine``, not started yet."""
    try:
        cls = _SERVERS[launch.engine]
    except KeyError:
        raise ConfigError(f"--launch takes {', '.join(_SERVERS)}, got {launch.engine!r}") from None
    return cls(launch, api_key=api_key, log_dir=log_dir)


# -- vLLM's log: footprint against reservation -----------------------------------------------------

_FOOTPRINT = {
    "weights_gib": re.compile(r"Model loading took ([\d.]+) ?GiB"),
    "kv_cache_gib": re.compile(
        r"Available KV cache memory: ([\d.]+) ?GiB|(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB for KV cache"),
    "kv_cache_tokens": re.compile(r"KV cache size: ([\d,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
    "cuda_graph_gib": re.compile(r"Graph capturing finished in [\d.]+ secs?, took ([\d.]+) ?GiB"),
}


_ENGINE_CONFIG = re.compile(r"with config: (.*)")
_CONFIG_VALUE = r"\b{}=(?:torch\.)?'?([A-Za-z0-9_.-]+)"


def parse_vllm_precision(text: str) -> str | None:
    """"Quant / precision" from the engine-config line vLLM logs at start ("... with config: ...,
    dtype=torch.bfloat16, ..., quantization=modelopt_fp4, ..."): its quantization, with the dtype it
    computes in; None when no such line was logged. A checkpoint's own quantization (NVFP4, AWQ) is
    found there without --quantization on the command line."""
    for line in text.splitlines():
        config = _ENGINE_CONFIG.search(line)
        if config is None:
            continue
        quant = re.search(_CONFIG_VALUE.format("quantization"), config.group(1))
        dtype = re.search(_CONFIG_VALUE.format("dtype"), config.group(1))
        dtype_text = dtype.group(1) if dtype else None
        if quant and quant.group(1) != "None":
            return f"{quant.group(1)} ({dtype_text})" if dtype_text else quant.group(1)
        if dtype_text:
            return f"{dtype_text} (no quantization)"
    return None


def parse_vllm_footprint(text: str) -> dict[str, Any]:
    """Model weights, KV-cache size (GiB and tokens) and CUDA-graph memory from a vLLM log, per worker
    (one value per line that says it); absent keys were not logged."""
    out: dict[str, Any] = {}
    for key, pattern in _FOOTPRINT.items():
        values: list[Any] = []
        for m in pattern.finditer(text):
            if key == "max_concurrency":
                values.append({"tokens_per_request": int(m.group(1).replace(",", "")),
                               "concurrency": float(m.group(2))})
            elif key == "kv_cache_tokens":
                values.append(int(m.group(1).replace(",", "")))
            else:
                values.append(float(next(g for g in m.groups() if g is not None)))
        if values:
            out[key] = values
    return out


def _gib(values: Sequence[float]) -> str:
    if len(values) > 1 and len(set(values)) == 1:
        return f"{values[0]:.2f} GiB × {len(values)} workers"
    return " + ".join(f"{v:.2f}" for v in values) + " GiB"


def footprint_rows(footprint: dict[str, Any], engine_args: Sequence[str]) -> dict[str, str]:
    """The card's footprint lines (vLLM log) and what they add up to against the reservation."""
    rows: dict[str, str] = {}
    if "weights_gib" in footprint:
        rows["Model weights"] = f"{_gib(footprint['weights_gib'])} (vLLM log: Model loading took …)"
    if "kv_cache_gib" in footprint or "kv_cache_tokens" in footprint:
        parts = []
        if "kv_cache_gib" in footprint:
            parts.append(_gib(footprint["kv_cache_gib"]))
        if "kv_cache_tokens" in footprint:
            parts.append(f"{footprint['kv_cache_tokens'][0]:,} tokens")
        if "max_concurrency" in footprint:
            mc = footprint["max_concurrency"][0]
            parts.append(f"{mc['concurrency']:.2f}x concurrency at {mc['tokens_per_request']:,} tokens")
        rows["KV cache"] = ", ".join(parts) + " (reserved up front, used or not)"
    if "cuda_graph_gib" in footprint:
        rows["CUDA graphs"] = _gib(footprint["cuda_graph_gib"])
    keys = {"weights": "weights_gib", "KV cache": "kv_cache_gib", "CUDA graphs": "cuda_graph_gib"}
    logged = [name for name, key in keys.items() if key in footprint]
    total = sum(sum(footprint.get(key, [])) for key in keys.values())
    if total:
        util = engine_option(engine_args, "--gpu-memory-utilization")
        text = f"{total:.2f} GiB = {' + '.join(logged)}"
        missing = [name for name in keys if name not in logged]
        if missing:
            text += f" ({', '.join(missing)}: not in the log)"
        if util:
            text += (f", inside a --gpu-memory-utilization {util} reservation: a GPU memory peak near the "
                     "reservation is vLLM's up-front allocation, not the model's footprint")
        rows["Footprint vs reservation"] = text
    return rows


# -- the measured window ---------------------------------------------------------------------------


def window_warnings(lines: Sequence[str], limit: int = 8) -> list[str]:
    """Distinct WARNING / ERROR lines (message text, with a count), in order of first appearance."""
    counts: dict[str, int] = {}
    for line in lines:
        if not _LEVEL.search(line) or "SpecDecoding metrics" in line:
            continue
        level = _LEVEL.search(line)
        assert level is not None
        message = _LOG_PREFIX.sub("", line).strip()[:300]
        key = f"{level.group(1)}: {message}"
        counts[key] = counts.get(key, 0) + 1
    out = [key + (f" (×{n})" if n > 1 else "") for key, n in counts.items()]
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more distinct lines (see the server log)"]
    return out


def _variant(engine_args: Sequence[str]) -> str:
    """The card title's variant from the engine arguments, e.g. "awq + NGRAM" (quantisation, speculation)."""
    parts = []
    quant = engine_option(engine_args, "--quantization", "-q")
    if quant:
        parts.append(quant)
    spec = engine_option(engine_args, "--speculative-config")
    if spec:
        try:
            method = orjson.loads(spec).get("method")
        except (orjson.JSONDecodeError, AttributeError):
            method = None
        parts.append(f"{str(method).upper()} speculative decoding" if method else "speculative decoding")
    return " + ".join(parts)


class WindowMonitor:
    """What fastbench watches during the measured window, without touching the client's hot path:
    the server's /metrics (any server that has it: launched, attached or synthetic), read at the start,
    every ``metrics_interval_s`` and at the end; the launched server's process (its death stops the
    run) and its log (warnings, "SpecDecoding metrics:" lines)."""

    def __init__(self, base_url: str, config: BenchConfig, server: LaunchedServer | ExternalServer,
                 on_server_death: Callable[[str], None]) -> None:
        self.server = server
        self.config = config
        self.scraper = MetricsScraper(base_url, interval_s=config.metrics_interval_s, api_key=config.api_key,
                                      verify_tls=not config.insecure)
        self.on_server_death = on_server_death
        self.server_died: str | None = None
        self.window_start = "at the first request"
        self._watch: asyncio.Task[None] | None = None
        self._restart: asyncio.Task[None] | None = None
        self.analysis: dict[str, Any] = {}

    async def start(self) -> None:
        self.server.mark_window_start()
        await self.scraper.start()
        if isinstance(self.server, LaunchedServer):
            self._watch = asyncio.get_running_loop().create_task(self._watch_process())

    def restart_window_soon(self) -> None:
        """Move the window's start to now (after warm-ups), from a synchronous progress callback."""
        if self._restart is None:
            self.server.mark_window_start()
            self.window_start = "after the warm-ups (at the first progress tick, within 0.5 s of the first request)"
            self._restart = asyncio.get_running_loop().create_task(self.scraper.restart_window())

    def _check_process(self) -> bool:
        """Whether the launched server has exited (then ``server_died`` says how)."""
        message = self.server.exit_message()
        if message is None or not isinstance(self.server, LaunchedServer):
            return False
        if self.server_died is None:
            self.server_died = (f"{message} during the measured window; log: {self.server.log_path}; "
                                f"last lines:\n{self.server.log_tail()}")
        return True

    async def _watch_process(self) -> None:
        """Stop the run when the launched server's process exits: at once where the kernel gives a
        pidfd (Linux 5.3+), else within 0.2 s. Until then every request is refused at once, and a
        closed loop fails hundreds of them a second (1,478 in 0.2 s with a dead fake vLLM)."""
        assert isinstance(self.server, LaunchedServer) and self.server.process is not None
        try:
            pidfd = os.pidfd_open(self.server.process.pid)
        except (AttributeError, OSError):  # no pidfd here, or the process is already gone
            pidfd = None
        if pidfd is not None:
            loop = asyncio.get_running_loop()
            exited: asyncio.Future[None] = loop.create_future()

            def on_exit() -> None:
                if not exited.done():
                    exited.set_result(None)

            loop.add_reader(pidfd, on_exit)
            try:
                await exited
            finally:
                loop.remove_reader(pidfd)
                os.close(pidfd)
        while not self._check_process():  # readable pidfd: waitpid reaps it now
            await asyncio.sleep(0.2 if pidfd is None else 0.001)
        self.on_server_death("server exited")

    async def finish(self) -> None:
        for task in (self._watch, self._restart):
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        self._check_process()  # a death the watcher had no time to see: requests fail fast without a server
        scrapes = await self.scraper.stop()
        self.server.mark_window_end()
        self.analysis = specdecode.analyze(scrapes, interval_s=self.scraper.interval_s) if scrapes else {}

    def server_info(self) -> dict[str, Any]:
        """What goes into Result.server_info: provenance, load, spec-decode figures, gauges, warnings."""
        info: dict[str, Any] = {}
        notes: list[str] = []
        server = self.server
        info["provenance"] = server.provenance()
        if isinstance(server, LaunchedServer):
            version = server.version
            info["engine"] = f"{server.engine_name} {version}" if version else server.engine_name
            info["launch_command"] = (
                f"# server, started by fastbench ({server.provenance()['launcher']}; ready in "
                f"{server.load_time_s:.1f} s):\n{server.display_command()}"
                if server.load_time_s is not None else server.display_command()
            )
            if server.load_time_s is not None:
                info["load"] = {"Load time": f"ready in {server.load_time_s:.1f} s (launch until /v1/models "
                                             "lists the model)"}
                notes.append(f"Load: ready in {server.load_time_s:.1f} s")
            card_config = {"Launched": f"by fastbench ({server.provenance()['launcher']}), log {server.log_path}"}
            if server.launch.engine_args:
                card_config["Engine arguments"] = shell_join(redact_argv(server.launch.engine_args, server.api_key))
            if server.launch.docker_image:
                digest = server.image_digest or "unknown (docker inspect gave none)"
                card_config["Image"] = f"{server.launch.docker_image} (digest {digest})"
            if isinstance(server, VLLMServer):
                precision = parse_vllm_precision(server.log_text(until_window=True))
                if precision:
                    card_config["Quant / precision"] = f"{precision}, from the engine's config line"
            info["card_config"] = card_config
            variant = _variant(server.launch.engine_args)
            if variant:
                info["variant"] = variant
            info["server_log"] = str(server.log_path)
        lines = server.window_log_lines()
        warnings = window_warnings(lines)
        if warnings:
            info["server_warnings"] = warnings
            notes += [f"server log during the measured window: {w}" for w in warnings]
        spec_log = specdecode.spec_log_summary(lines)
        if not self.scraper.available:
            info["server_metrics"] = {"available": False, "error": self.scraper.last_error}
            if self.scraper.last_status == 501:  # llama-server's answer without --metrics
                notes.append("server /metrics answered 501 Not Implemented (llama.cpp serves it only with "
                             "--metrics): no server gauges or speculative-decoding counters in this run")
        elif self.analysis:
            spec = self.analysis.get("spec_decode")
            info["server_metrics"] = {
                "available": True, "scrapes": self.analysis["scrapes"], "failures": self.scraper.failures,
                "interval_s": self.analysis["interval_s"], "span_s": self.analysis["span_s"],
                "window_start": self.window_start, "gauges": self.analysis["gauges"],
                "engine": self.analysis.get("engine"),
            }
            if self.scraper.interval_s != self.scraper.interval_asked_s:
                notes.append(f"server /metrics: the window outlasted {prom.MAX_KEPT_SCRAPES} reads "
                             f"{self.scraper.interval_asked_s:g} s apart, so every other read was dropped "
                             f"until those kept were {self.scraper.interval_s:g} s apart")
            rows = specdecode.gauge_rows(self.analysis["gauges"])
            if rows:
                info["server_metrics_card"] = rows
            cache = self.analysis.get("cache_config")
            if cache is not None:
                info["server_metrics"]["cache_config"] = cache
                info["server_metrics"]["cache_config_engines"] = self.analysis["cache_config_engines"]
                row = specdecode.cache_config_row(cache, self.analysis["cache_config_engines"])
                if row:
                    info.setdefault("card_config", {})["KV cache (server)"] = row
            if spec is not None:
                info["spec_decode_stats"] = {**spec, "server_log": spec_log}
                # llama.cpp exports its counters, at zero, without a draft model: no section of zeros
                last = spec.get("counters_last") or {}
                never_drafted = spec_log is None and bool(last) and \
                    all(not last.get(key) for key in ("drafts", "draft_tokens", "accepted"))
                if not never_drafted:
                    info["spec_decode"] = specdecode.card_rows(spec, log=spec_log)
                    notes += [f"Speculative decoding: {note}" for note in spec.get("notes") or []]
        if spec_log is not None and "spec_decode_stats" not in info:
            info["spec_decode_stats"] = {"server_log": spec_log}
        info["notes"] = notes
        return info


def add_teardown(info: dict[str, Any], launched: LaunchedServer) -> None:
    """Into Result.server_info, after ``launched.stop()``: the teardown record, a row of the card's
    Load section, and a note when the server did not go quietly (SIGKILL, port or processes left)."""
    t = launched.teardown
    if t is None:
        return
    problems = [] if t["port_free"] else [f"port {launched.port} still in use"]
    if t["processes_left"]:
        problems.append(f"processes {t['processes_left']} of its group still running")
    text = f"{t['how']}; {t['exit'] or 'had not exited'} after {t['seconds']:.1f} s; "
    text += "; ".join(problems) if problems else "port free"
    info["teardown"] = t
    info.setdefault("load", {})["Teardown"] = text
    if problems or t["how"].startswith("SIGKILL"):
        info.setdefault("notes", []).append(f"Teardown: {text}")


def annotate(result: Any) -> None:
    """Add the client's tokens per chunk beside the server's acceptance length (needs the Result)."""
    info = result.server_info
    stats = info.get("spec_decode_stats")
    if not stats or "window" not in stats:
        return
    tpc = result.mean_tokens_per_chunk
    info["spec_decode"] = specdecode.card_rows(stats, log=stats.get("server_log"), client_tokens_per_chunk=tpc)
    length = stats["window"]["acceptance_length"]
    per_step = stats.get("tokens_per_step")
    if tpc is not None and length is not None:
        text = (f"Speculative decoding: mean acceptance length {length:.2f} over the window (vLLM's definition: "
                f"steps that drafted only); the client saw {tpc:.2f} tokens per chunk")
        if per_step is not None:
            text += (f", against {per_step:.2f} tokens per engine step on the server (every step, prefill and "
                     "undrafted ones included)")
        info.setdefault("notes", []).append(text)


# -- the memory sampler (src/fastbench/server/memory.py) ------------------------------------------------


class MemoryRun:
    """The memory sampler of one run (src/fastbench/server/memory.py); ``stop()`` may be called twice."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.series: Any = None
        self.stopped = False

    def set_server_pid(self, pid: int) -> None:
        self.sampler.set_server_pid(pid)

    def stop(self) -> Any:
        """Stop sampling (once) and return the MemorySeries."""
        if not self.stopped:
            self.stopped = True
            self.series = self.sampler.stop()
        return self.series


def start_memory_sampler(config: BenchConfig) -> MemoryRun | None:
    """A started memory sampler when sampling is on for this run: ``--memory-interval`` (default 1 s
    when fastbench launches the server, off otherwise). None when off or when the module is missing."""
    interval = config.memory_interval_s
    if interval is None:
        interval = 1.0 if config.launch is not None else 0.0
    if not interval > 0:
        return None
    try:
        from fastbench.server.memory import MemorySampler, SamplerError
    except ImportError:  # pragma: no cover - the module ships with fastbench
        return None
    sampler = MemorySampler(interval_s=interval, server_pid=None)
    try:
        sampler.start()
    except SamplerError as exc:  # memory figures are lost, the benchmark is not
        warnings.warn(f"memory sampling is off for this run: {exc}", RuntimeWarning, stacklevel=2)
        return None
    return MemoryRun(sampler)


def memory_info(series: Any, server: LaunchedServer | ExternalServer, *,
                baseline_before_server: bool = True) -> dict[str, Any]:
    """The memory series for the result, its peaks and the vLLM footprint lines for the card.
    ``baseline_before_server`` False: fastbench attached to a server already running."""
    info: dict[str, Any] = {}
    section: dict[str, str] = {}
    if series is not None:
        info["memory_series"] = series.to_dict()
        info["memory_peaks"] = series.peaks()
        for i, line in enumerate(series.summary_lines(baseline_before_server)):
            label, sep, value = str(line).partition(": ")
            key = label if sep else f"sample_{i}"
            if key in section:  # several lines of one kind (e.g. notes): keep them all
                key = f"{key} ({i})"
            section[key] = value if sep else label
    if isinstance(server, VLLMServer):
        # vLLM logs its footprint while loading: the window's request lines may be hundreds of MB
        footprint = parse_vllm_footprint(server.log_text(until_window=True))
        if footprint:
            info["footprint"] = footprint
            section.update(footprint_rows(footprint, server.launch.engine_args))
    if section:
        info["memory"] = section
    return info


def log_dir_for(config: BenchConfig) -> str:
    """Where a server log goes by default: beside the result file or card, else the working directory."""
    for path in (config.result_json, config.result_card):
        if path:
            return str(Path(path).resolve().parent)
    return "."
