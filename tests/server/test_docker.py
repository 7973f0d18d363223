"""Docker launches against the fake ``docker`` of tests/support/fakevllm.py: the GPU flags chosen from the host,
the seeds' other flags in the card's Full run command, a container left by a killed fastbench found by its label,
the memory cgroup found from the container's pid, and each bad input (no daemon, no image, a port published
already, a ``docker run`` that fails, a container that exits at once) as one line naming the cause, with the
container removed and no result written. tests/server/test_realdocker.py runs the same against a real daemon."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import orjson
import pytest

from support.fakevllm import FAKE_DIGEST, free_port, write_fake_engines
from fastbench import api
from fastbench.config import BenchConfig, LaunchConfig
from fastbench.server import container, processes
from fastbench.server.engines import make_server
from fastbench.server.launch import ServerLaunchError

SYNTH = "FAKE_SYNTH_ARGS=--tokens-per-chunk 1-4 --itl-ms 4 --ttft-ms 10"


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(the fake docker, its state folder)."""
    _, fake = write_fake_engines(tmp_path / "bin")
    state = tmp_path / "docker-state"
    (state / "containers").mkdir(parents=True)
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(state))
    monkeypatch.setenv("FAKE_DIGEST", FAKE_DIGEST)
    return fake, state


def launch(docker: Path, tmp_path: Path, image: str = "vllm/vllm-openai:v9.9", **changes: object) -> LaunchConfig:
    options: dict[str, object] = {
        "model": "fake/model", "engine_bin": str(docker), "port": free_port(), "docker_image": image,
        "env": (SYNTH,), "log_path": str(tmp_path / "server.log"), "ready_timeout_s": 20.0, "stop_grace_s": 3.0,
        "docker_hf_cache": str(tmp_path / "hf"),
    }
    options.update(changes)
    return LaunchConfig(**options)  # type: ignore[arg-type]


def run(config: LaunchConfig, tmp_path: Path) -> dict[str, object]:
    out = tmp_path / "r.json"
    api.run(BenchConfig(launch=config, num_prompts=4, concurrency=2, random_input_len=8, random_output_len=8,
                        result_json=str(out), result_card=str(tmp_path / "c.md")))
    doc: dict[str, object] = orjson.loads(out.read_bytes())
    return doc


# -- the GPUs ------------------------------------------------------------------------------------------


def test_gpu_flags_follow_the_host(tmp_path: Path) -> None:
    no_hook = ""  # "" : looked for and not found
    assert container.gpu_flags("auto", {"runc", "nvidia"}, str(tmp_path), no_hook)[0] == ["--gpus", "all"]
    flags, why = container.gpu_flags("auto", {"runc"}, str(tmp_path), "/usr/bin/nvidia-container-runtime-hook")
    assert flags == ["--gpus", "all"] and "nvidia-container-runtime-hook" in why
    flags, why = container.gpu_flags("auto", {"runc"}, str(tmp_path), no_hook)
    assert flags == [] and why.startswith("GPUs: none found on this host") and "--docker-gpus" in why
    (tmp_path / "kfd").touch()
    assert container.gpu_flags("auto", {"runc"}, str(tmp_path), no_hook)[0] == []  # /dev/dri too, or none
    (tmp_path / "dri").mkdir()
    flags, why = container.gpu_flags("auto", {"runc"}, str(tmp_path), no_hook)
    assert flags == ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video",
                     "--security-opt", "seccomp=unconfined"] and "ROCm" in why
    # by hand, whatever the host has
    assert container.gpu_flags("none", {"nvidia"}, str(tmp_path), no_hook)[0] == []
    assert container.gpu_flags("rocm", set(), "/nonexistent", no_hook)[0] == list(container.ROCM_FLAGS)
    assert container.gpu_flags("device=0,1", set(), "/nonexistent", no_hook)[0] == ["--gpus", "device=0,1"]


def test_the_seeds_flags_are_in_the_full_run_command(docker: tuple[Path, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """NVIDIA's runtime on the daemon -> --gpus all; --ipc=host; the Hugging Face cache mounted; HF_TOKEN by
    name (its value nowhere); a local model mounted read-only where it is; the image by id and digest."""
    fake, state = docker
    monkeypatch.setenv("FAKE_DOCKER_RUNTIMES", "runc,nvidia")
    monkeypatch.setenv("HF_TOKEN", "hf_value_never_written_42")
    model = tmp_path / "model"
    model.mkdir()
    doc = run(launch(fake, tmp_path, model=str(model), engine_args=("--served-model-name", "fake-model")), tmp_path)
    server = doc["fastbench"]["server"]  # type: ignore[index]
    prov = server["provenance"]
    card = (tmp_path / "c.md").read_text()
    command = card.split("## Full run command", 1)[1].split("```")[1]
    for needle in ("docker run -d", "--gpus all", "--ipc=host", f"-v {tmp_path / 'hf'}:/root/.cache/huggingface",
                   "--env HF_TOKEN", f"-v {model}:{model}:ro", "--label fastbench.run=" + prov["container"]):
        assert needle in command, needle
    assert "hf_value_never_written_42" not in card + (tmp_path / "r.json").read_text()
    assert prov["docker_gpus"] == "GPUs: --gpus all (the nvidia runtime in docker info)"
    assert "| Container GPUs | --gpus all (the nvidia runtime in docker info) |" in card
    assert prov["image_id"] == "sha256:" + "cd" * 32 and prov["image_digest"] == FAKE_DIGEST
    assert (tmp_path / "hf").is_dir()  # made by fastbench, not by the daemon
    argv = orjson.loads((state / "argv").read_bytes())
    assert argv[argv.index("vllm/vllm-openai:v9.9") + 1] == str(model)


def test_a_local_image_has_no_repository_digest_and_the_card_says_so(docker: tuple[Path, Path],
                                                                    tmp_path: Path) -> None:
    fake, _ = docker
    doc = run(launch(fake, tmp_path, image="local/built-here", docker_gpus="none", docker_hf_cache="none"), tmp_path)
    prov = doc["fastbench"]["server"]["provenance"]  # type: ignore[index]
    assert prov["image_digest"] is None and prov["docker_gpus"] == "GPUs: none (--docker-gpus none)"
    card = (tmp_path / "c.md").read_text()
    assert "| Image | local/built-here (id sha256:" in card and "no repository digest: built or imported here" in card
    assert "/root/.cache/huggingface" not in card


# -- a container left behind ---------------------------------------------------------------------------


def test_a_container_left_by_a_killed_fastbench_is_removed_by_the_next_launch(
        docker: tuple[Path, Path], tmp_path: Path) -> None:
    """A container whose fastbench is gone (its pid ended) is removed, and said; one whose fastbench still
    runs is left alone."""
    fake, state = docker
    ended = processes.start_time(os.getpid())
    host = socket.gethostname()
    for name, owner in (("fastbench-1-dead", f"{host} {2 ** 22 + 1} 5"),  # above pid_max: no such process
                        ("fastbench-2-alive", f"{host} {os.getpid()} {ended}")):
        record = {"id": name.encode().hex().ljust(64, "0"), "name": name, "image": "vllm/vllm-openai:old",
                  "labels": {"fastbench.run": name, "fastbench.owner": owner}, "port": 1, "status": "created"}
        (state / "containers" / f"{name}.json").write_bytes(orjson.dumps(record))
    server = make_server(launch(fake, tmp_path))
    with pytest.warns(RuntimeWarning, match=r"removed container fastbench-1-dead \(created, image "
                                            r"vllm/vllm-openai:old\): left by a fastbench \(pid 4194305\)"):
        server.start()
    try:
        server.wait_ready(20)
    finally:
        server.stop()
    left = sorted(p.name for p in (state / "containers").iterdir())
    assert left == ["fastbench-2-alive.json"]
    assert "removed container fastbench-1-dead" in server.log_text()


# -- bad input: one line naming the cause, the container removed, nothing written ---------------------------


def refused(config: LaunchConfig, tmp_path: Path) -> str:
    out = tmp_path / "r.json"
    with pytest.raises(ServerLaunchError) as info:
        api.run(BenchConfig(launch=config, num_prompts=4, result_json=str(out), result_card=str(tmp_path / "c.md")))
    assert not out.exists() and not (tmp_path / "c.md").exists()
    return str(info.value)


def test_no_daemon(docker: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, state = docker
    monkeypatch.setenv("FAKE_DOCKER_DOWN", "1")
    message = refused(launch(fake, tmp_path), tmp_path)
    assert message.startswith("the docker daemon is not running or not reachable (Cannot connect to the Docker "
                              "daemon at unix:///var/run/docker.sock.") and "\n" not in message


def test_an_image_that_does_not_exist(docker: tuple[Path, Path], tmp_path: Path) -> None:
    fake, state = docker
    message = refused(launch(fake, tmp_path, image="missing/image:1"), tmp_path)
    assert message == ("--docker-image missing/image:1: no such image here, and docker pull failed: pull access "
                       "denied for missing/image, repository does not exist or may require 'docker login'")
    assert (state / "calls").read_text().split() == ["pull"] and not list((state / "containers").iterdir())
    message = refused(launch(fake, tmp_path, image="sha256:" + "0" * 64), tmp_path)  # an id: nothing to pull
    assert "no image here has this id" in message and (state / "calls").read_text().split() == ["pull"]


def test_a_port_published_by_another_container(docker: tuple[Path, Path], tmp_path: Path) -> None:
    fake, state = docker
    config = launch(fake, tmp_path)
    record = {"id": "ab" * 32, "name": "someone-elses", "image": "nginx:1", "labels": {}, "port": config.port}
    (state / "containers" / "someone-elses.json").write_bytes(orjson.dumps(record))
    message = refused(config, tmp_path)
    assert message == (f"port {config.port} is already published by container someone-elses (image nginx:1): "
                       "stop it (docker rm -f someone-elses) or choose another port with --server-port")
    assert [p.name for p in (state / "containers").iterdir()] == ["someone-elses.json"]  # not ours: left


def test_a_docker_run_that_fails_leaves_no_container(docker: tuple[Path, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The port taken where docker's own check sees it and fastbench's does not (docker-proxy off)."""
    fake, state = docker
    monkeypatch.setenv("FAKE_DOCKER_RUN_FAILS", "1")
    config = launch(fake, tmp_path)
    message = refused(config, tmp_path)
    assert message.startswith(f"port {config.port} is already in use on this host (driver failed programming "
                              "external connectivity") and message.endswith("choose another with --server-port")
    assert (state / "calls").read_text().split() == ["rm"] and not list((state / "containers").iterdir())


def test_a_container_that_exits_at_once(docker: tuple[Path, Path], tmp_path: Path) -> None:
    fake, state = docker
    config = launch(fake, tmp_path, env=("FAKE_VLLM_MODE=die-loading",))
    message = refused(config, tmp_path)
    first = message.splitlines()[0]
    assert first.startswith("vLLM container exited with status 3 while loading (after "), message
    assert "log: " in first and not list((state / "containers").iterdir())


# -- the memory cgroup ---------------------------------------------------------------------------------


def test_the_memory_cgroup_is_found_from_the_containers_pid(tmp_path: Path) -> None:
    proc, cgroups, cid = tmp_path / "proc", tmp_path / "cgroup", "e" * 64
    (proc / "42").mkdir(parents=True)
    # a hybrid host (this one): memory in v1
    (proc / "42" / "cgroup").write_text(f"4:memory:/docker/{cid}\n1:cpu:/docker/{cid}\n0::/docker/{cid}\n")
    v1 = cgroups / "memory" / "docker" / cid
    v1.mkdir(parents=True)
    (v1 / "memory.usage_in_bytes").write_text("1000\n")
    assert container.memory_cgroup(42, cid, str(proc), str(cgroups)) == (str(v1), "v1")
    # v2 only, the systemd driver's scope
    (proc / "42" / "cgroup").write_text(f"0::/system.slice/docker-{cid}.scope\n")
    v2 = cgroups / "system.slice" / f"docker-{cid}.scope"
    v2.mkdir(parents=True)
    (v2 / "memory.current").write_text("2000\n")
    assert container.memory_cgroup(42, cid, str(proc), str(cgroups)) == (str(v2), "v2")
    # a cgroup namespace shows "/": docker's usual places for the id
    (proc / "42" / "cgroup").write_text("0::/\n")
    assert container.memory_cgroup(42, cid, str(proc), str(cgroups)) == (str(v1), "v1")
    assert container.memory_cgroup(43, "f" * 64, str(proc), str(cgroups)) is None


def test_image_digest_of_a_reference() -> None:
    facts = container.ImageFacts(id="sha256:1", repo_digests=("other/x@sha256:o", "host:5000/vllm@sha256:v"),
                                 tags=())
    assert container.image_digest("host:5000/vllm:tag", facts) == "sha256:v"
    assert container.image_digest("vllm/vllm-openai@sha256:pinned", facts) == "sha256:pinned"
    assert container.image_digest("x", container.ImageFacts(id="sha256:1", repo_digests=(), tags=())) is None
