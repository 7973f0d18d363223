"""A server in a docker container: the daemon, the image, the host's GPU flags, containers a killed
fastbench left behind, the container's state and its memory cgroup.

``launch.LaunchedServer`` runs an engine so (``--docker-image``). Before ``docker run -d`` it checks
that the daemon answers (``docker info``, which also says whether NVIDIA's runtime is there), finds
the image here (``docker image inspect``: its id and repository digest; ``docker pull`` where it is
missing), removes the containers a fastbench that is gone left running (each carries the label
``fastbench.run``, and ``fastbench.owner``: the host, pid and start time of the fastbench that started
it) and names any other container that publishes the port. The container's log is followed with
``docker logs -f`` into the log file a local process writes, and parsed the same way; its memory is
its cgroup's (:func:`memory_cgroup`), read by the memory sampler beside MemAvailable and the RSS of
its process tree.

Every failure here is a one-line ``DockerError`` that names its cause.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from fastbench.config import LaunchConfig
from fastbench.exceptions import ServerError
from fastbench.server import processes

__all__ = (
    "CONTAINER_HF_CACHE",
    "LABEL",
    "OWNER_LABEL",
    "ROCM_FLAGS",
    "ContainerInfo",
    "DockerContainer",
    "DockerError",
    "ImageFacts",
    "check_daemon",
    "clear_leftovers",
    "container_info",
    "ensure_image",
    "gpu_flags",
    "image_digest",
    "memory_cgroup",
    "owner_label",
    "port_holders",
    "remove_at_exit",
)

LABEL = "fastbench.run"  # its value: the container's name
OWNER_LABEL = "fastbench.owner"  # "HOST PID START": the fastbench that started it (start: /proc/PID/stat)
DOCKER_TIMEOUT_S = 60.0
PULL_TIMEOUT_S = 3600.0
CONTAINER_HF_CACHE = "/root/.cache/huggingface"  # HF_HOME in vLLM's and SGLang's images (they run as root)
# What ROCm's vLLM images document (rocm.docs.amd.com, "vLLM inference"; "Run ROCm Docker containers"):
# the compute and render devices, the video group that owns them, and seccomp off (ROCm's runtime
# makes calls the default profile refuses). Their --cap-add=SYS_PTRACE is for debuggers: left out.
ROCM_FLAGS = ("--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video",
              "--security-opt", "seccomp=unconfined")
Note = Callable[[str], None]


class DockerError(ServerError):
    """docker could not do what a launch needs: no daemon, no image, a port taken, a failed ``docker run``."""


def run_docker(docker: str, args: Sequence[str], timeout: float = DOCKER_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``docker ARGS``, its output captured; DockerError when the client cannot run or hangs."""
    try:
        return subprocess.run([docker, *args], capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise DockerError(f"cannot run {docker}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise DockerError(f"docker {args[0]} did not answer within {timeout:g} s (is the daemon hung?)") from None


def error_line(text: str) -> str:
    """docker's error in one line: the first one that says something, without the client's prefixes."""
    for line in text.splitlines():
        line = line.strip()
        for prefix in ("docker: ", "Error response from daemon: "):
            line = line.removeprefix(prefix)
        if line and not line.startswith("See 'docker"):
            return line
    return "(no message)"


# -- the daemon and the GPUs ---------------------------------------------------------------------------


def check_daemon(docker: str) -> set[str]:
    """The daemon's runtimes (``docker info``); DockerError when no daemon answers."""
    proc = run_docker(docker, ["info", "--format", "{{json .Runtimes}}"])
    if proc.returncode != 0:
        raise DockerError(
            f"the docker daemon is not running or not reachable ({error_line(proc.stderr or proc.stdout)}): "
            "start it (systemctl start docker, or dockerd as root), or point DOCKER_HOST at one")
    try:
        runtimes = orjson.loads(proc.stdout.strip() or "null")
    except orjson.JSONDecodeError:
        runtimes = None
    return set(runtimes) if isinstance(runtimes, dict) else set()


def gpu_flags(mode: str, runtimes: set[str], dev_root: str = "/dev",
              nvidia_hook: str | None = None) -> tuple[list[str], str]:
    """The ``docker run`` flags that give the container this host's GPUs, and a line that says why.

    ``mode``: ``auto`` (from the host: NVIDIA's runtime in ``docker info`` or its hook on PATH ->
    ``--gpus all``; ROCm's devices ``/dev/kfd`` and ``/dev/dri`` -> ``ROCM_FLAGS``; neither -> none),
    ``none``, ``rocm``, or a value of docker's own ``--gpus`` (``all``, ``2``, ``device=0,1``).
    ``nvidia_hook``: where ``nvidia-container-runtime-hook`` is (None: looked up on PATH), which
    ``--gpus`` needs when no ``nvidia`` runtime is registered."""
    if mode == "none":
        return [], "GPUs: none (--docker-gpus none)"
    if mode == "rocm":
        return list(ROCM_FLAGS), "GPUs: AMD ROCm devices (--docker-gpus rocm)"
    if mode != "auto":
        return ["--gpus", mode], f"GPUs: --gpus {mode} (--docker-gpus)"
    hook = nvidia_hook if nvidia_hook is not None else shutil.which("nvidia-container-runtime-hook")
    if "nvidia" in runtimes or hook:
        why = "the nvidia runtime in docker info" if "nvidia" in runtimes else f"NVIDIA's container hook {hook}"
        return ["--gpus", "all"], f"GPUs: --gpus all ({why})"
    kfd, dri = os.path.join(dev_root, "kfd"), os.path.join(dev_root, "dri")
    if os.path.exists(kfd) and os.path.exists(dri):
        return list(ROCM_FLAGS), f"GPUs: AMD ROCm devices ({kfd} and {dri} exist)"
    return [], (f"GPUs: none found on this host (no nvidia runtime in docker info, no {kfd} and {dri}): the "
                "container gets no GPU flags; --docker-gpus sets them")


# -- the image -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ImageFacts:
    """A local image, as ``docker image inspect`` gives it."""

    id: str  # "sha256:..."
    repo_digests: tuple[str, ...]  # "repo@sha256:..."; none for an image built or imported here
    tags: tuple[str, ...]


_ID = re.compile(r"(sha256:)?[0-9a-f]{12,64}")


def inspect_image(docker: str, image: str) -> ImageFacts | None:
    """The local image ``image`` names; None where there is none."""
    proc = run_docker(docker, ["image", "inspect", image])
    if proc.returncode != 0:
        if "no such image" in proc.stderr.lower():
            return None
        raise DockerError(f"docker image inspect {image}: {error_line(proc.stderr)}")
    try:
        found = orjson.loads(proc.stdout)[0]
    except (orjson.JSONDecodeError, IndexError, KeyError, TypeError):
        raise DockerError(f"docker image inspect {image}: unreadable answer {proc.stdout[:80]!r}") from None
    return ImageFacts(id=str(found.get("Id") or ""), repo_digests=tuple(found.get("RepoDigests") or ()),
                      tags=tuple(found.get("RepoTags") or ()))


def ensure_image(docker: str, image: str, note: Note) -> ImageFacts:
    """The image, pulled first where it is not here; DockerError naming why when it cannot be had."""
    facts = inspect_image(docker, image)
    if facts is not None:
        return facts
    if _ID.fullmatch(image):
        raise DockerError(f"--docker-image {image}: no image here has this id (an id is local: build or pull it)")
    note(f"image {image} is not here: docker pull {image}")
    proc = run_docker(docker, ["pull", image], timeout=PULL_TIMEOUT_S)
    if proc.returncode != 0:
        raise DockerError(f"--docker-image {image}: no such image here, and docker pull failed: "
                          f"{error_line(proc.stderr or proc.stdout)}")
    facts = inspect_image(docker, image)
    if facts is None:
        raise DockerError(f"--docker-image {image}: docker pull succeeded but the image is not there")
    note(f"pulled {image}: {facts.id}")
    return facts


def image_digest(image: str, facts: ImageFacts | None) -> str | None:
    """The repository digest ("sha256:...") of the image a reference names: the one it pins, else the
    one its repository has here; None for an image that was never pushed or pulled."""
    if "@sha256:" in image:
        return image.split("@", 1)[1]
    if facts is None or not facts.repo_digests:
        return None
    repository = re.sub(r":[^:/]+$", "", image)  # the tag off ("host:5000/repo:tag" keeps its port)
    for entry in facts.repo_digests:
        if entry.split("@", 1)[0] == repository:
            return entry.split("@", 1)[1]
    return facts.repo_digests[0].split("@", 1)[-1]


# -- containers ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ContainerInfo:
    """One container, as ``docker container inspect`` gives it."""

    id: str
    name: str
    image: str  # what it was started from, as given
    labels: Mapping[str, str]
    status: str  # "created", "running", "exited", ...
    pid: int  # its main process in this host's pid namespace; 0 when it is not running
    exit_code: int
    oom_killed: bool
    error: str

    @property
    def running(self) -> bool:
        return self.status in ("running", "restarting", "paused")

    def ended(self) -> str:
        """How it ended, in words."""
        if self.oom_killed:
            return f"was killed by the kernel for memory (OOMKilled, exit status {self.exit_code})"
        how = f"exited with status {self.exit_code}"
        return f"{how}: {self.error}" if self.error else how


def _container(found: Mapping[str, Any]) -> ContainerInfo:
    state = found.get("State") or {}
    return ContainerInfo(
        id=str(found.get("Id") or ""), name=str(found.get("Name") or "").lstrip("/"),
        image=str((found.get("Config") or {}).get("Image") or ""),
        labels=dict((found.get("Config") or {}).get("Labels") or {}),
        status=str(state.get("Status") or ""), pid=int(state.get("Pid") or 0),
        exit_code=int(state.get("ExitCode") or 0), oom_killed=bool(state.get("OOMKilled")),
        error=str(state.get("Error") or ""))


def container_info(docker: str, *names: str) -> list[ContainerInfo]:
    """The containers these names or ids denote (those that exist)."""
    if not names:
        return []
    proc = run_docker(docker, ["container", "inspect", *names])
    try:
        found = orjson.loads(proc.stdout or "[]")
    except orjson.JSONDecodeError:
        return []
    return [_container(item) for item in found if isinstance(item, dict)]


def _listed(docker: str, *filters: str) -> list[ContainerInfo]:
    args = ["ps", "-a", "-q", "--no-trunc"]
    for f in filters:
        args += ["--filter", f]
    proc = run_docker(docker, args)
    return container_info(docker, *proc.stdout.split()) if proc.returncode == 0 else []


def owner_label() -> str:
    """This fastbench, as its containers' OWNER_LABEL says it: host, pid and the pid's start time."""
    pid = os.getpid()
    return f"{socket.gethostname()} {pid} {processes.start_time(pid)}"


def _owner_gone(owner: str) -> bool:
    """Whether the fastbench an OWNER_LABEL names has ended (False where it cannot be told: another host)."""
    host, _, rest = owner.partition(" ")
    pid, _, start = rest.partition(" ")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return str(processes.start_time(int(pid))) != start  # None (no such pid) or a later process given it


def clear_leftovers(docker: str, note: Note) -> list[str]:
    """Remove the containers a fastbench that is gone (killed: it could not tear down) left behind,
    each said in a line; returns those lines."""
    said = []
    for c in _listed(docker, f"label={LABEL}"):
        owner = c.labels.get(OWNER_LABEL, "")
        if not _owner_gone(owner):
            continue
        run_docker(docker, ["rm", "-f", c.id])
        pid = owner.split(" ")[1] if owner.count(" ") >= 1 else "?"
        line = (f"removed container {c.name} ({c.status}, image {c.image}): left by a fastbench (pid {pid}) "
                "that ended without stopping it")
        note(line)
        said.append(line)
    return said


def port_holders(docker: str, port: int) -> list[ContainerInfo]:
    """The running containers that publish ``port`` on this host."""
    return [c for c in _listed(docker, f"publish={port}") if c.running]


# -- its memory ----------------------------------------------------------------------------------------


def memory_cgroup(pid: int, container_id: str, proc_root: str = "/proc",
                  cgroup_root: str = "/sys/fs/cgroup") -> tuple[str, str] | None:
    """The container's memory cgroup: ``(directory, "v2" | "v1")``, or None where none is found.

    From ``/proc/PID/cgroup`` of its main process: the v1 memory controller's line where there is one
    (a hybrid host keeps memory in v1), else the v2 line (``0::PATH``). Where that path is not a
    directory here (a cgroup namespace shows "/"), docker's usual places for the id:
    ``docker/ID`` (cgroupfs driver) and ``system.slice/docker-ID.scope`` (systemd driver)."""
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup")) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    v1 = os.path.join(cgroup_root, "memory")
    tried = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "memory" in controllers.split(","):
            tried.append((os.path.join(v1, path.lstrip("/")), "v1"))
        elif controllers == "" and line.startswith("0::"):
            tried.append((os.path.join(cgroup_root, path.lstrip("/")), "v2"))
    tried.sort(key=lambda t: t[1] != "v1")
    for base, version in ((v1, "v1"), (cgroup_root, "v2")):
        tried += [(os.path.join(base, "docker", container_id), version),
                  (os.path.join(base, "system.slice", f"docker-{container_id}.scope"), version)]
    files = {"v1": "memory.usage_in_bytes", "v2": "memory.current"}
    for directory, version in tried:
        if os.path.isfile(os.path.join(directory, files[version])):
            return directory, version
    return None


# -- one launch's container ----------------------------------------------------------------------------


class DockerContainer:
    """The container of one launch: its ``docker run -d`` flags, the checks before it, its state, its stop.

    The flags, in order: the name and labels, the GPUs (:func:`gpu_flags`, from ``launch.docker_gpus``),
    ``--ipc=host`` (vLLM's and SGLang's workers share tensors through /dev/shm), the port, the Hugging
    Face cache at CONTAINER_HF_CACHE (so that a model downloads once; ``launch.docker_hf_cache``: the host's
    directory, default ``$HF_HOME`` or ``~/.cache/huggingface``, ``none`` for no mount), a local model
    path read-only at the same path, and ``--env NAME`` for each environment item and for HF_TOKEN where
    it is set here: by name, so that no value is on a command line (``/proc``, the card)."""

    def __init__(self, launch: LaunchConfig, port: int) -> None:
        assert launch.docker_image is not None
        self.launch = launch
        self.docker = launch.engine_bin or "docker"
        self.image = launch.docker_image
        self.port = port
        self.name = f"fastbench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.owner = owner_label()
        self.image_facts: ImageFacts | None = None
        self.id: str | None = None
        self.pid: int | None = None  # its main process, in this host's pid namespace
        self.cgroup: tuple[str, str] | None = None  # its memory cgroup (memory_cgroup)
        self.ended: str | None = None  # how it ended, read before it was removed
        self.exit_code: int | None = None
        self._runtimes: set[str] | None = None
        self._gpus: tuple[list[str], str] | None = None

    # -- the command

    def gpus(self) -> tuple[list[str], str]:
        """The GPU flags and the line that says why (the daemon is asked once: see :meth:`prepare`)."""
        if self._gpus is not None:
            return self._gpus
        runtimes = self._runtimes
        if runtimes is None and self.launch.docker_gpus == "auto":
            try:
                runtimes = self._runtimes = check_daemon(self.docker)
            except DockerError:  # a command shown before any launch: not kept, prepare() asks again
                return gpu_flags("auto", set())
        self._gpus = gpu_flags(self.launch.docker_gpus, runtimes or set())
        return self._gpus

    def env_names(self) -> list[str]:
        names = [item.partition("=")[0] for item in self.launch.env]
        if "HF_TOKEN" in os.environ and "HF_TOKEN" not in names:
            names.append("HF_TOKEN")
        return names

    def mounts(self) -> list[str]:
        flags = []
        cache = self.launch.docker_hf_cache
        if cache != "none":
            flags += ["-v", f"{self.hf_cache_dir()}:{CONTAINER_HF_CACHE}"]
        model = self.launch.model
        if model and os.path.exists(model):  # a local directory or file: where the engine looks for it
            path = os.path.abspath(model)
            flags += ["-v", f"{path}:{path}:ro"]
            if not os.path.isabs(model):
                flags += ["-w", os.getcwd()]
        return flags

    def hf_cache_dir(self) -> str:
        given = self.launch.docker_hf_cache or os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
        return os.path.abspath(given)  # a bare name would be a named volume to docker

    def run_flags(self) -> list[str]:
        """``run -d`` and fastbench's flags, before the user's ``--docker-args`` and the image."""
        return ["run", "-d", "--name", self.name, "--label", f"{LABEL}={self.name}",
                "--label", f"{OWNER_LABEL}={self.owner}", *self.gpus()[0], "--ipc=host",
                "-p", f"{self.port}:{self.port}", *self.mounts(),
                *[word for name in self.env_names() for word in ("--env", name)]]

    # -- before the run

    def prepare(self, note: Note) -> list[str]:
        """The checks before ``docker run``: the daemon answers, what a killed fastbench left is removed,
        no other container publishes the port, the image is here (pulled if need be). Returns what
        was said (the GPU line, the containers removed); DockerError naming the cause."""
        self._runtimes = check_daemon(self.docker)
        self._gpus = None
        said = clear_leftovers(self.docker, note)
        for holder in port_holders(self.docker, self.port):
            owner = holder.labels.get(OWNER_LABEL)
            whose = f", started by a fastbench still running (pid {owner.split(' ')[1]})" if owner else ""
            raise DockerError(
                f"port {self.port} is already published by container {holder.name} (image {holder.image}{whose}): "
                f"stop it (docker rm -f {holder.name}) or choose another port with --server-port")
        if self.launch.docker_hf_cache != "none":
            os.makedirs(self.hf_cache_dir(), exist_ok=True)  # made here, not by the daemon as root
        self.image_facts = ensure_image(self.docker, self.image, note)
        why = self.gpus()[1]
        note(why)
        return [*said, why]

    def run(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        """``docker run -d``; on failure the container (created or not) is removed and DockerError says why."""
        try:
            proc = subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, check=False,
                                  timeout=DOCKER_TIMEOUT_S * 2, stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise DockerError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
        except subprocess.TimeoutExpired:
            self.remove()
            raise DockerError(f"docker run did not answer within {DOCKER_TIMEOUT_S * 2:g} s") from None
        if proc.returncode != 0:
            self.remove()  # a failed start (a port bind, a device) leaves the container created
            line = error_line(proc.stderr or proc.stdout)
            if "port is already allocated" in line or "address already in use" in line:
                raise DockerError(f"port {self.port} is already in use on this host ({line}): choose another "
                                  "with --server-port")
            raise DockerError(f"docker run failed (exit status {proc.returncode}): {line}")
        self.id = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else self.name
        found = container_info(self.docker, self.id)
        if found and found[0].pid > 0:
            self.pid = found[0].pid
            self.cgroup = memory_cgroup(self.pid, found[0].id)

    # -- while it runs

    def state(self) -> ContainerInfo | None:
        """Its state now; None when it is gone (or the daemon does not answer)."""
        try:
            found = container_info(self.docker, self.id or self.name)
        except DockerError:
            return None
        return found[0] if found else None

    def end(self) -> str:
        """How it ended, in words (read once, after its log stream ended)."""
        if self.ended is None:
            state = self.state()
            if state is None:
                self.ended = "container was removed"
            elif state.running:
                return "container is running, but its log stream ended"
            else:
                self.exit_code = state.exit_code
                self.ended = "container " + state.ended()
        return self.ended

    # -- teardown

    def stop(self, grace: float, hurry: threading.Event, note: Note) -> str:
        """``docker stop -t GRACE`` (``docker kill`` at once after ``hurry``), how it ended read, then
        ``docker rm -f``; returns what it took."""
        quiet: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
                                 "stderr": subprocess.DEVNULL}
        how = "docker stop"
        stopping = None
        try:
            try:
                stopping = subprocess.Popen([self.docker, "stop", "-t", str(int(grace)), self.name], **quiet)
            except OSError:
                return how
            deadline = time.monotonic() + grace + 30
            while stopping.poll() is None and time.monotonic() < deadline:
                if hurry.is_set():
                    note("asked again: docker kill")
                    how = "docker kill (asked again)"
                    try:
                        subprocess.run([self.docker, "kill", self.name], timeout=30, check=False, **quiet)
                    except (OSError, subprocess.SubprocessError):
                        pass
                    break
                time.sleep(0.05)
        finally:  # also on an interrupt: no docker client or container left behind
            if stopping is not None and stopping.poll() is None:
                stopping.kill()
                stopping.wait()
            if self.ended is None:
                state = self.state()
                if state is not None and not state.running:
                    self.exit_code = state.exit_code
                    self.ended = "container " + state.ended()
            self.remove()
        return how

    def remove(self) -> None:
        remove_at_exit(self.docker, self.name)


def remove_at_exit(docker: str, name: str) -> None:
    """``docker rm -f NAME``, quietly (teardown, a failed start, or the interpreter's exit without one)."""
    try:
        subprocess.run([docker, "rm", "-f", name], timeout=30, check=False, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        pass
