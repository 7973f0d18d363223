"""The server under test: launch (local process or docker), readiness, provenance, teardown.

``LaunchedServer`` starts an engine in its own process group with its output in a log file, through
``logrelay``, which hides the run's secrets on the way (its subclasses, one per engine, are in
``engines``); ``external.ExternalServer`` attaches to a server that is already running. All share:

* ``start()`` / ``wait_ready(timeout_s)`` (or ``await astart()``) / ``stop()``;
* ``base_url``, ``log_path``, ``load_time_s`` (launch until /v1/models lists the model);
* ``provenance()``: engine version (/version), under docker the image's id and repository digest
  (``docker image inspect``), the exact command line with secrets redacted;
* ``mark_window_start()`` / ``mark_window_end()`` and ``window_log_lines()``: what the server logged
  during the measured window (warnings, "SpecDecoding metrics:" lines).

A launched server also gives ``facts()`` (``observations.LaunchFacts``: what the result and the card
say of it) and, after ``stop()``, ``teardown`` (``observations.Teardown``).

Readiness polls /health, then /v1/models until the model is listed (``control.probe_ready``). Loading
fails fast, with a one-line message and the log's last lines, when the process exits, prints a fatal
error (out of memory, "Address already in use", a top-level Python traceback, ...: ``serverlog``), or
the timeout passes. Teardown (on success, failure, Ctrl-C and the time cap alike) sends SIGTERM to the
whole process group, SIGKILL after a grace period (``docker stop`` and ``docker rm`` for a container),
and checks that the port is free again (``processes``).

Under docker (``container.DockerContainer``) the engine runs in a container started with ``docker run -d``
after the checks a launch needs (the daemon, the image, containers a killed fastbench left, the port);
the process fastbench watches is ``docker logs -f``, whose output is the log as a local engine's is,
and whose end is the container's; the container's main pid and memory cgroup are the sampler's.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import shutil
import signal
import subprocess
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from fastbench.config import BenchConfig, LaunchConfig
from fastbench.exceptions import ConfigError, ServerError
from fastbench.redact import Secrets, shell_join
from fastbench.results.observations import LaunchFacts, Teardown
from fastbench.server import container, control, logrelay, processes
from fastbench.server.serverlog import ServerLog

__all__ = (
    "DEFAULT_PORTS",
    "LaunchedServer",
    "ServerLaunchError",
    "engine_option",
    "log_dir_for",
)

DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000, "llama.cpp": 8080}
LOG_TAIL_LINES = 25


class ServerLaunchError(ServerError):
    """The launched server did not become ready: it exited, logged a fatal error or timed out."""


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


def _tail(text: str, n: int = LOG_TAIL_LINES) -> str:
    lines = [line for line in text.splitlines() if line.strip()][-n:]
    return "\n".join("  | " + line for line in lines) if lines else "  | (the log is empty)"


# -- the servers ------------------------------------------------------------------------------------


class LaunchedServer:
    """A server that fastbench starts and stops (see the module docstring). Subclasses give the argv."""

    engine = ""
    engine_name = ""
    default_bin = ""

    def __init__(self, launch: LaunchConfig, *, api_key: str | None = None, log_dir: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        self.launch = launch
        self.api_key = api_key
        # the key, the engine's own --api-key / --hf-token, secret-named --server-env values, HF_TOKEN...
        self.secrets = Secrets.of_run(api_key=api_key, headers=headers, engine_args=launch.engine_args,
                                      docker_args=launch.docker_args, env=launch.env)
        self.relay: subprocess.Popen[bytes] | None = None  # logrelay: the engine's output into the log
        self.host = launch.host
        self.port = launch.port if launch.port is not None else DEFAULT_PORTS[launch.engine]
        self.base_url = f"http://{_url_host(self.host)}:{self.port}"
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        # the pid too: two runs started in the same second must not share (and parse) one log
        default_log = Path(log_dir or ".") / f"fastbench-server-{launch.engine}-{stamp}-{os.getpid()}.log"
        self.log_path = Path(launch.log_path) if launch.log_path else default_log
        self.docker = container.DockerContainer(launch, self.port) if launch.docker_image else None
        self.container = self.docker.name if self.docker is not None else None
        self.process: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        self.t_launch: float | None = None
        self.load_time_s: float | None = None
        self.version: str | None = None
        self.image_digest: str | None = None
        self.image_id: str | None = None
        self._hurry = threading.Event()  # see hurry()
        self.exit_status: int | None = None
        self.port_free_after_stop: bool | None = None
        self.teardown: Teardown | None = None  # how stop() went
        self.stopped = False
        self.log = ServerLog(self.log_path)
        self._finalizer: weakref.finalize[Any, Any] | None = None

    # -- the command ---------------------------------------------------------------------------

    @property
    def served_model(self) -> str:
        """The name /v1/models will list: --served-model-name (first), else the model argument."""
        name = engine_option(self.launch.engine_args, "--served-model-name")
        return name.split()[0] if name else self.launch.model

    @property
    def pid(self) -> int | None:
        """The server's own process: the engine, or under docker the container's main process (in this
        machine's pid namespace; None before it runs: the docker client's memory is not the server's)."""
        if self.docker is not None:
            return self.docker.pid
        return self.process.pid if self.process is not None else None

    @property
    def memory_cgroup(self) -> tuple[str, str] | None:
        """A container's memory cgroup, ``(directory, "v1" | "v2")``; None for a local process."""
        return self.docker.cgroup if self.docker is not None else None

    def server_args(self, host: str) -> list[str]:
        """The engine's own arguments (after the executable, or after the image under docker)."""
        raise NotImplementedError

    def local_argv(self) -> list[str]:
        """The engine's argv as a local process."""
        raise NotImplementedError

    def docker_argv(self) -> list[str]:
        launch = self.launch
        assert launch.docker_image is not None and self.docker is not None
        return [self.docker.docker, *self.docker.run_flags(), *launch.docker_args, launch.docker_image,
                *self.docker_server_args()]

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
        return shell_join(self.secrets.argv([*prefix, *self.argv()]))

    # -- launch and readiness ------------------------------------------------------------------

    def start(self) -> None:
        """Launch the server in its own process group, its output appended to ``log_path``."""
        if self.process is not None:
            raise RuntimeError("server already started")
        argv = self.argv() if self.docker is None else [self.docker.docker]
        exe = shutil.which(argv[0])
        if exe is None:
            what = "docker" if self.launch.docker_image else f"the {self.engine_name} executable"
            if self.launch.engine_bin is not None:
                why = "not an executable file" if os.path.exists(self.launch.engine_bin) else "no such file"
                raise ConfigError(f"--engine-bin {self.launch.engine_bin}: {why}")
            raise ConfigError(f"cannot find {what} {argv[0]!r} on PATH; pass --engine-bin PATH")
        if self.docker is not None:
            return self._start_container(exe)
        if not processes.port_is_free(self.host, self.port):
            raise ServerLaunchError(
                f"port {self.port} on {self.host} is already in use: stop what holds it or choose "
                "another with --server-port")
        try:
            log_file = self.log.open()  # a reused --server-log holds earlier runs: read from here on
        except OSError as exc:
            raise ConfigError(f"--server-log {self.log_path}: {exc.strerror or exc}") from None
        self.log.note(f"launching: {self.display_command()}")
        self.t_launch = time.monotonic()
        self.relay, output = logrelay.start_relay(log_file, self.secrets)
        try:
            self.process = subprocess.Popen(
                [exe, *argv[1:]], stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                env=self.process_env(), start_new_session=True,
                # Only for a local engine: a docker client's death would not stop its container.
                preexec_fn=None if self.launch.docker_image else processes.die_with_parent,
            )
        except OSError as exc:  # e.g. a script whose #! interpreter is missing: ENOENT naming the script
            raise ServerLaunchError(f"cannot run {exe}: {exc.strerror or exc} (a script's #! interpreter "
                                    "missing, or not an executable for this machine?)") from None
        finally:
            os.close(output)  # the engine holds it now: the relay ends when the engine's output does
        self.pgid = self.process.pid  # a new session: the leader's pid is the group's id
        self._finalizer = weakref.finalize(self, processes.kill_group_at_exit, self.pgid)

    def _start_container(self, exe: str) -> None:
        """The checks, ``docker run -d``, then ``docker logs -f`` into the log: the process watched."""
        assert self.docker is not None
        try:
            log_file = self.log.open()
        except OSError as exc:
            raise ConfigError(f"--server-log {self.log_path}: {exc.strerror or exc}") from None
        try:
            for line in self.docker.prepare(self.log.note):
                if line.startswith("removed container"):
                    warnings.warn(line, RuntimeWarning, stacklevel=3)
            if not processes.port_is_free(self.host, self.port):
                raise container.DockerError(
                    f"port {self.port} on {self.host} is already in use: stop what holds it or choose "
                    "another with --server-port")
            facts = self.docker.image_facts
            self.image_id = facts.id if facts is not None else None
            self.image_digest = container.image_digest(self.docker.image, facts)
            self.log.note(f"launching: {self.display_command()}")
            self.t_launch = time.monotonic()
            self.docker.run([exe, *self.argv()[1:]], self.process_env())
        except container.DockerError as exc:
            self.log.note(f"not launched: {exc}")
            self.log.close()
            raise ServerLaunchError(str(exc)) from None
        self._finalizer = weakref.finalize(self, container.remove_at_exit, exe, self.docker.name)
        if self.docker.pid is not None and self.docker.cgroup is None:
            self.log.note("the container's memory cgroup was not found under /sys/fs/cgroup: its memory is "
                          "measured as its process tree's RSS only")
        self.relay, output = logrelay.start_relay(log_file, self.secrets)
        try:
            self.process = subprocess.Popen(
                [exe, "logs", "-f", self.docker.name], stdin=subprocess.DEVNULL, stdout=output,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=processes.die_with_parent)
        finally:
            os.close(output)
        self.pgid = self.process.pid

    def log_text(self, last_bytes: int | None = None, *, until_window: bool = False,
                 until_first_window: bool = False) -> str:
        """What this launch logged (see ``ServerLog.text``)."""
        return self.log.text(last_bytes, until_window=until_window, until_first_window=until_first_window)

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        """The last lines of the log, for an error message: read from the end, secrets redacted (an
        engine may log its arguments, vLLM its --api-key among them)."""
        return _tail(self.redact(self.log.text(last_bytes=64 * 1024)), n)

    def redact(self, text: str) -> str:
        """``text`` without the launch's secrets (``self.secrets``) or what looks like one."""
        return self.secrets.log(text)

    def _elapsed(self) -> float:
        return time.monotonic() - self.t_launch if self.t_launch is not None else 0.0

    def _failure(self, what: str) -> ServerLaunchError:
        return ServerLaunchError(
            f"{self.engine_name} {what} (after {self._elapsed():.1f} s); log: {self.log_path}; "
            f"last lines:\n{self.log_tail()}")

    def _exit_how(self) -> str | None:
        """How the process ended ("exited with status 1", "was killed by signal 9"; a container's "container
        exited with status 1"); None while it runs."""
        if self.process is None:
            return None
        status = self.process.poll()
        if self.docker is not None and (status is not None or self.docker.ended is not None):
            how = self.docker.end()  # its log stream ended with it
            self.exit_status = self.docker.exit_code
            return how
        if status is None:
            return None
        if self.exit_status is None:  # the first look after its end: its last lines are the message's
            self._drain_relay(1.0, stop=False)
        self.exit_status = status
        return f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"

    def exit_message(self) -> str | None:
        """A one-line description of the process's exit, or None while it runs."""
        how = self._exit_how()
        if how is None or self.process is None:
            return None
        if self.docker is not None:
            return f"{self.engine_name} ({self.docker.name}) {how}"
        return f"{self.engine_name} (pid {self.process.pid}) {how}"

    def _ready_step(self) -> tuple[bool, str]:
        """One readiness check: raises when loading has failed; (ready, what the probe saw)."""
        if self.process is None:
            raise RuntimeError("server not started")
        self.log.scan()
        how = self._exit_how()
        if how is not None:
            raise self._failure(f"{how} while loading")
        fatal = self.log.fatal()
        if fatal is not None:
            raise self._failure(f"failed while loading: {fatal}")
        return control.probe_ready(self.base_url, self._expected_models(), self.api_key)

    def _expected_models(self) -> tuple[str, ...] | None:
        return (self.served_model,)

    def _on_ready(self) -> float:
        self.load_time_s = self._elapsed()
        self.log.note(f"ready after {self.load_time_s:.1f} s")
        self.version = control.engine_version(self.base_url, self.api_key)
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
            time.sleep(control.READY_POLL_S)

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
            await asyncio.sleep(control.READY_POLL_S)

    async def astart(self, stop: asyncio.Event | None = None,
                     on_started: Callable[[int], None] | None = None) -> float:
        """start() and await_ready(); on any failure the server is stopped before the error propagates.
        ``on_started(pid)`` as soon as the engine's process (or the container's main process) runs,
        so that memory sampling sees the loading too."""
        try:
            self.start()
            if on_started is not None and self.pid is not None:
                on_started(self.pid)
            return await self.await_ready(stop=stop)
        except BaseException:
            await self.astop()  # off the loop: a further Ctrl-C hurries it
            raise

    # -- the measured window -------------------------------------------------------------------

    def mark_window_start(self) -> None:
        self.log.mark_window_start()

    def mark_window_end(self) -> None:
        self.log.mark_window_end()

    def window_log_lines(self) -> list[str]:
        """What the card reads of the window's log lines (see ``ServerLog.window_lines``)."""
        return self.log.window_lines()

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
        if self.docker is not None:
            how = self.docker.stop(grace, self._hurry, self.log.note)
        pgid = self.pgid
        assert pgid is not None
        self.process.poll()
        # Descendants that left the group get the same signals (a snapshot: one that double-forked
        # away earlier is no longer a descendant, and is not found).
        # Only while the engine is unreaped: once reaped, its pid may be another process's.
        look_for_strays = self.docker is None and self.process.returncode is None
        strays = processes.strays_of(self.process.pid, pgid) if look_for_strays else []
        if strays:
            self.log.note(f"processes {[pid for pid, _ in strays]} left the server's process group: signalled too")

        def running() -> list[int]:
            self.process.poll()  # type: ignore[union-attr]
            return processes.group_members(pgid) + [pid for pid, start in strays if processes.start_time(pid) == start]

        if self.docker is not None:  # `docker logs -f` ends with its container: give it a moment
            deadline = time.monotonic() + 5
            while running() and time.monotonic() < deadline:
                time.sleep(0.05)
        if running():
            how = "SIGTERM"
            self.log.note("stopping: SIGTERM to the process group")
            processes.signal_group(pgid, signal.SIGTERM)
            processes.signal_strays(strays, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and not self._hurry.is_set():
                if not running():
                    break
                time.sleep(0.05)
            else:
                asked = " (asked again)" if self._hurry.is_set() else ""
                waited = f"{time.monotonic() - t0:.1f}" if asked else f"{grace:g}"
                self.log.note(f"still running {waited} s after SIGTERM: SIGKILL{asked}")
                how = f"SIGKILL, {waited} s after SIGTERM{asked}"
                processes.signal_group(pgid, signal.SIGKILL)
                processes.signal_strays(strays, signal.SIGKILL)
                deadline = time.monotonic() + 5
                while running() and time.monotonic() < deadline:
                    time.sleep(0.05)
        try:
            self.exit_status = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self._finalizer is not None:
            self._finalizer.detach()
        self.port_free_after_stop = processes.wait_port_free(self.host, self.port, 10.0)
        left = running()
        problems = [f"port {self.port} still in use"] if not self.port_free_after_stop else []
        if left:
            problems.append(f"processes {left} of its group (or that left it) still running")
        self._drain_relay()
        self.log.note("stopped" + (": " + "; ".join(problems) if problems else ""))
        self.teardown = Teardown(how=how, seconds=round(time.monotonic() - t0, 2), exit=self._exit_how(),
                                 port_free=self.port_free_after_stop, processes_left=left,
                                 left_the_group=[pid for pid, _ in strays])
        if problems:
            warnings.warn(f"{self.engine_name} teardown: {'; '.join(problems)}", RuntimeWarning, stacklevel=2)
        self.log.close()

    def _drain_relay(self, timeout_s: float = 5.0, *, stop: bool = True) -> None:
        """Wait for the relay to write the engine's last lines: it ends when the output does, with
        the last process that holds it (one that outlived its group holds it open: the relay is then
        stopped, with ``stop``, once what it read is written, which takes it far less than a second)."""
        if self.relay is None or self.relay.returncode is not None:
            return
        try:
            self.relay.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            if stop:
                self.relay.kill()
                self.relay.wait()

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
            "argv": self.secrets.argv(self.argv()),
            "env": [self.secrets.log(item) for item in launch.env],
            "command": self.display_command(),
            "engine_bin": shutil.which(self.argv()[0]),
            "image": launch.docker_image,
            "image_digest": self.image_digest,
            "image_id": self.image_id,
            "container": self.container,
            "container_id": self.docker.id if self.docker is not None else None,
            "docker_gpus": self.docker.gpus()[1] if self.docker is not None else None,
            "memory_cgroup": self.memory_cgroup[0] if self.memory_cgroup is not None else None,
            "pid": self.pid,
            "base_url": self.base_url,
            "log_path": str(self.log_path),
            "load_time_s": self.load_time_s,
            "shared_launch": False,  # a run handed this server says otherwise (WindowReport.for_shared_launch)
            "run_of_launch": self.log.windows_ended,
        }

    def facts(self) -> LaunchFacts:
        """What the result and the card say of this launch (after the window: its precision is read
        from the loading phase of the log)."""
        launch = self.launch
        return LaunchFacts(
            engine_name=self.engine_name,
            version=self.version,
            launcher="docker" if launch.docker_image else "local process",
            command=self.display_command(),
            engine_args=tuple(self.secrets.argv(launch.engine_args)),
            log_path=str(self.log_path),
            port=self.port,
            load_time_s=self.load_time_s,
            docker_image=launch.docker_image,
            image_digest=self.image_digest,
            image_id=self.image_id,
            docker_gpus=self.docker.gpus()[1] if self.docker is not None else None,
            precision=self.precision(),
            device=self.device(),
            quantization=engine_option(launch.engine_args, "--quantization", "-q"),
            speculative_method=_speculative_method(launch.engine_args),
            gpu_memory_utilization=engine_option(launch.engine_args, "--gpu-memory-utilization"),
            run_of_launch=self.log.windows_ended,
        )

    def precision(self) -> str | None:
        """The quantization and dtype the engine logged it runs in; None where it does not say."""
        return None

    def device(self) -> str | None:
        """The device the engine logged it runs on ("cpu", "cuda"); None where it does not say."""
        return None

    def footprint(self) -> dict[str, Any] | None:
        """What the engine logged of its memory while loading (weights, KV cache...); None where it
        does not say."""
        return None


def _speculative_method(engine_args: Sequence[str]) -> str | None:
    """--speculative-config's "method" ("" when it names none); None without --speculative-config."""
    spec = engine_option(engine_args, "--speculative-config")
    if not spec:
        return None
    try:
        method = orjson.loads(spec).get("method")
    except (orjson.JSONDecodeError, AttributeError):
        method = None
    return str(method) if method else ""


def log_dir_for(config: BenchConfig) -> str:
    """Where a server log goes by default: beside the result file or card, else the working directory."""
    for path in (config.result_json, config.result_card):
        if path:
            return str(Path(path).resolve().parent)
    return "."
