"""A fake ``vllm`` (and ``docker``) executable for the server-manager tests, written into a test's tmp_path.

``vllm serve MODEL --host H --port P [engine args]`` behaves as FAKE_VLLM_MODE says:

* ``ok``: logs vLLM-style loading lines (weights, KV cache, CUDA graphs), then runs the synthetic server
  (``python -m fastbench.synthetic``, flags from FAKE_SYNTH_ARGS) as a child and, every 0.3 s while it
  serves, logs a "SpecDecoding metrics:" line from the child's /metrics deltas, and a WARNING once
  requests run; POST /reset_prefix_cache answers 404 unless VLLM_SERVER_DEV_MODE=1, as vLLM's;
* ``die-mid-run``: as ``ok``, then kills the engine FAKE_DIE_AFTER seconds after generation starts;
* ``never-ready``: logs and sleeps, never listening;
* ``die-loading``: exits with status 3 while loading;
* ``fatal-hang``: prints a CUDA out-of-memory traceback and hangs;
* ``port-in-use``: prints uvicorn's "address already in use" error and hangs;
* ``ignore-term``: serves /health and /v1/models itself and ignores SIGTERM.

The fake ``docker`` keeps its containers in FAKE_DOCKER_STATE (a record each, its log, its exit status):
``run -d ... IMAGE MODEL ARGS`` starts the same script's ``serve`` detached, in a session of its own (the
container's processes), and prints an id; ``logs -f`` follows its log until it exits; ``info`` lists the
runtimes of FAKE_DOCKER_RUNTIMES (default ``runc``); ``image inspect`` knows every image but those named
``missing/...`` or holding twelve zeros (``local/...`` ones have no repository digest, the others
FAKE_DIGEST), and ``pull`` always fails; ``ps`` filters by label and published port; ``container inspect``
gives the state; ``stop`` / ``kill`` / ``rm`` signal the container's session (``stop`` first waits its
``-t`` seconds with FAKE_DOCKER_STOP_WAITS set). FAKE_DOCKER_DOWN: no daemon answers;
FAKE_DOCKER_RUN_FAILS: ``run`` leaves a created container and fails as a port already allocated does.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

FAKE_DIGEST = "sha256:" + "ab" * 32

FAKE_VLLM = r'''
import http.server, json, os, shlex, signal, subprocess, sys, time, urllib.request

def opt(args, name, default=None):
    value = default
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value

def log(msg):
    print(msg, flush=True)

def stamp():
    return time.strftime("%m-%d %H:%M:%S")

def read_metrics(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            text = r.read().decode()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name_labels, value = line.rsplit(" ", 1)
        name = name_labels.split("{", 1)[0]
        if "position=" in name_labels:
            name += "@" + name_labels.split('position="', 1)[1].split('"', 1)[0]
        out[name] = out.get(name, 0.0) + float(value)
    return out

def serve(args):
    mode = os.environ.get("FAKE_VLLM_MODE", "ok")
    model = args[0]
    host = opt(args, "--host", "127.0.0.1")
    port = int(opt(args, "--port", "8000"))
    served = opt(args, "--served-model-name", model)
    pid = os.getpid()
    log(f"(APIServer pid={pid}) INFO {stamp()} [api_server.py:1] vLLM API server version 0.0.0+fake")
    log(f"(APIServer pid={pid}) INFO {stamp()} [api_server.py:2] args: {args}")
    if mode == "never-ready":
        while True:
            log("INFO still loading ...")
            time.sleep(0.5)
    if mode == "die-loading":
        time.sleep(0.3)
        log("RuntimeError: fake vllm could not load the model")
        sys.exit(3)
    if mode == "fatal-hang":
        time.sleep(0.2)
        log("Traceback (most recent call last):")
        log('  File "/fake/vllm/worker.py", line 1, in load_model')
        log("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
        time.sleep(3600)
    if mode == "port-in-use":
        log(f"ERROR:    [Errno 98] error while attempting to bind on address ('{host}', {port}): "
            "address already in use")
        time.sleep(3600)
    # the engine-config line vLLM logs at start (abridged from vLLM 0.11's)
    log(f"(EngineCore pid={pid}) INFO {stamp()} [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
        "model='fake/model', speculative_config=None, tokenizer='fake/model', dtype=torch.bfloat16, "
        "max_seq_len=2048, quantization=modelopt_fp4, quantization_config=None, enforce_eager=True")
    log(f"(Worker pid={pid}) INFO {stamp()} [gpu_model_runner.py:1] Model loading took 0.51 GiB memory and "
        "1.234567 seconds")
    log(f"(Worker pid={pid}) INFO {stamp()} [gpu_worker.py:2] Available KV cache memory: 2.25 GiB")
    log(f"(EngineCore pid={pid}) INFO {stamp()} [kv_cache_utils.py:3] GPU KV cache size: 110,733 tokens, "
        "Maximum concurrency for 2,048 tokens per request: 54.07x")
    log(f"(Worker pid={pid}) INFO {stamp()} [gpu_model_runner.py:4] Graph capturing finished in 3 secs, "
        "took 0.25 GiB")
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = b""
                if self.path == "/v1/models":
                    body = json.dumps({"object": "list", "data": [{"id": served}]}).encode()
                elif self.path != "/health":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        http.server.HTTPServer((host, port), Handler).serve_forever()
    synth = [sys.executable, "-m", "fastbench.synthetic", "--host", host, "--port", str(port),
             "--model", served, *shlex.split(os.environ.get("FAKE_SYNTH_ARGS", ""))]
    if os.environ.get("VLLM_SERVER_DEV_MODE") != "1":  # as vLLM: no /reset_prefix_cache outside its dev mode
        synth.append("--no-reset-prefix-cache")
    child = subprocess.Popen(synth)

    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not re-enter child.wait()
        child.terminate()
        child.wait()
        log(f"(APIServer pid={pid}) INFO {stamp()} [launcher.py:9] Shutting down FastAPI HTTP server.")
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    last = None
    warned = False
    started_at = None
    die_after = float(os.environ.get("FAKE_DIE_AFTER", "0.5"))
    while True:
        time.sleep(0.3)
        if child.poll() is not None:
            log(f"engine exited with {child.returncode}")
            sys.exit(1)
        m = read_metrics(port)
        if m is None:
            continue
        if m.get("vllm:generation_tokens_total", 0) > 0 and started_at is None:
            started_at = time.monotonic()
        if m.get("vllm:num_requests_running", 0) > 0 and not warned:
            warned = True
            log(f"(EngineCore pid={pid}) WARNING {stamp()} [scheduler.py:7] Consider increasing "
                "max_num_batched_tokens to accommodate the additional draft token slots")
        if mode == "die-mid-run" and started_at is not None and time.monotonic() - started_at > die_after:
            child.kill()
            log("RuntimeError: fake engine died in the middle of the run")
            os._exit(1)
        if last is not None and "vllm:spec_decode_num_drafts_total" in m:
            d = {k: m[k] - last.get(k, 0.0) for k in m}
            drafts = d["vllm:spec_decode_num_drafts_total"]
            if drafts > 0:
                acc = d["vllm:spec_decode_num_accepted_tokens_total"]
                dt = d["vllm:spec_decode_num_draft_tokens_total"]
                k = len([n for n in m if n.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total@")])
                rates = ", ".join(
                    f"{d['vllm:spec_decode_num_accepted_tokens_per_pos_total@' + str(i)] / drafts:.3f}"
                    for i in range(k))
                log(f"(APIServer pid={pid}) INFO {stamp()} [metrics.py:120] SpecDecoding metrics: Mean "
                    f"acceptance length: {1 + acc / drafts:.2f}, Accepted throughput: {acc / 0.3:.2f} tokens/s, "
                    f"Drafted throughput: {dt / 0.3:.2f} tokens/s, Accepted: {int(acc)} tokens, Drafted: "
                    f"{int(dt)} tokens, Per-position acceptance rate: {rates}, Avg Draft acceptance rate: "
                    f"{100 * acc / dt:.1f}%")
        last = m

def record(state, name):
    path = os.path.join(state, "containers", name + ".json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def save(state, c):
    os.makedirs(os.path.join(state, "containers"), exist_ok=True)
    tmp = os.path.join(state, "containers", c["name"] + ".tmp")
    with open(tmp, "w") as f:
        json.dump(c, f)
    os.replace(tmp, os.path.join(state, "containers", c["name"] + ".json"))

def all_containers(state):
    try:
        names = sorted(os.listdir(os.path.join(state, "containers")))
    except OSError:
        return []
    return [c for c in (record(state, n[:-5]) for n in names if n.endswith(".json")) if c]

def find(state, key):
    for c in all_containers(state):
        if key in (c["name"], c["id"]) or (len(key) >= 12 and c["id"].startswith(key)):
            return c
    return None

def status_of(state, c):
    if c.get("status") == "created":
        return "created"
    if os.path.exists(os.path.join(state, c["name"] + ".exit")):
        return "exited"
    return "running"

def exit_code(state, c):
    try:
        with open(os.path.join(state, c["name"] + ".exit")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0

def call(state, what):
    with open(os.path.join(state, "calls"), "a") as f:
        f.write(what + "\n")

def signal_container(c, sig):
    try:
        os.killpg(c["pid"], sig)  # the container's processes: the engine's session
    except (ProcessLookupError, PermissionError, KeyError):
        pass

def wait_exit(state, c, timeout):
    deadline = time.monotonic() + timeout
    while status_of(state, c) == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    return status_of(state, c) != "running"

TAKES_VALUE = {"--name", "--label", "-p", "--env", "-e", "-v", "-w", "--gpus", "--device", "--group-add",
               "--security-opt", "--entrypoint", "--shm-size"}

def docker(args):
    state = os.environ["FAKE_DOCKER_STATE"]
    if os.environ.get("FAKE_DOCKER_DOWN") and args[0] not in ("__container__", "__serve__"):
        sys.exit("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?")
    if args[0] == "info":
        runtimes = os.environ.get("FAKE_DOCKER_RUNTIMES", "runc").split(",")
        print(json.dumps({r: {"path": r} for r in runtimes}))
    elif args[:2] == ["image", "inspect"]:
        image = args[2]
        if image.startswith("missing/") or "0" * 12 in image:
            sys.exit(f"Error response from daemon: no such image: {image}: No such image: {image}")
        repo = image.split("@")[0].rsplit(":", 1)[0]
        digest = os.environ.get("FAKE_DIGEST", "sha256:" + "ab" * 32)
        digests = [] if image.startswith("local/") else [repo + "@" + digest]
        print(json.dumps([{"Id": "sha256:" + "cd" * 32, "RepoDigests": digests, "RepoTags": [image]}]))
    elif args[0] == "pull":
        call(state, "pull")
        sys.exit(f"Error response from daemon: pull access denied for {args[1].split(':')[0]}, repository does "
                 "not exist or may require 'docker login'")
    elif args[0] == "ps":
        filters = [args[i + 1] for i, a in enumerate(args) if a == "--filter"]
        for c in all_containers(state):
            ok = True
            for f in filters:
                key, _, value = f.partition("=")
                if key == "label":
                    ok = ok and value.partition("=")[0] in c["labels"]
                elif key == "publish":
                    ok = ok and str(c.get("port")) == value
            if ok:
                print(c["id"])
    elif args[:2] == ["container", "inspect"] or args[0] == "inspect":
        out = []
        for key in args[2:] if args[0] == "container" else args[1:]:
            c = find(state, key)
            if c is None:
                continue
            st = status_of(state, c)
            out.append({"Id": c["id"], "Name": "/" + c["name"], "Config": {"Image": c["image"], "Labels": c["labels"]},
                        "State": {"Status": st, "Pid": c.get("pid", 0) if st == "running" else 0,
                                  "ExitCode": exit_code(state, c), "OOMKilled": False, "Error": ""}})
        print(json.dumps(out))
        if not out:
            sys.exit(1)
    elif args[0] == "run":
        assert args[1] == "-d", args
        name = args[args.index("--name") + 1]
        labels, port, rest, i = {}, None, args[2:], 0
        while i < len(rest):  # docker's own flags, then IMAGE, then the image's arguments
            if rest[i] in TAKES_VALUE:
                if rest[i] == "--label":
                    k, _, v = rest[i + 1].partition("=")
                    labels[k] = v
                elif rest[i] == "-p":
                    port = int(rest[i + 1].split(":")[0])
                elif rest[i] in ("--env", "-e") and "=" in rest[i + 1]:
                    k, v = rest[i + 1].split("=", 1)
                    os.environ[k] = v
                i += 2
            elif rest[i].startswith("-"):
                i += 1
            else:
                break
        with open(os.path.join(state, "argv"), "w") as f:
            json.dump(args, f)
        import hashlib
        c = {"id": hashlib.sha256(name.encode()).hexdigest(), "name": name, "image": rest[i], "labels": labels,
             "port": port}
        if os.environ.get("FAKE_DOCKER_RUN_FAILS"):
            c["status"] = "created"
            save(state, c)
            sys.exit(f"docker: Error response from daemon: driver failed programming external connectivity on "
                     f"endpoint {name}: Bind for 0.0.0.0:{port} failed: port is already allocated.")
        save(state, c)
        subprocess.Popen([sys.argv[0], "__container__", name, *rest[i + 1:]], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while "pid" not in (record(state, name) or {}) and time.monotonic() < deadline:
            time.sleep(0.02)
        print(c["id"])
    elif args[0] == "__container__":  # the container: the engine in a session of its own, its exit recorded
        name = args[1]
        with open(os.path.join(state, name + ".log"), "ab") as log_file:
            engine = subprocess.Popen([sys.argv[0], "__serve__", *args[2:]], stdout=log_file, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        c = record(state, name)
        c["pid"] = engine.pid
        save(state, c)
        status = engine.wait()
        with open(os.path.join(state, name + ".exit"), "w") as f:
            f.write(str(128 - status if status < 0 else status))
    elif args[0] == "__serve__":
        serve(args[1:])
    elif args[0] == "logs":
        c = find(state, args[-1])
        if c is None:
            sys.exit(f"Error: No such container: {args[-1]}")
        path = os.path.join(state, c["name"] + ".log")
        while not os.path.exists(path) and status_of(state, c) == "running":
            time.sleep(0.05)
        with open(path, "rb") as f:
            while True:
                chunk = f.read(65536)
                if chunk:
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.buffer.flush()
                    continue
                if status_of(state, c) != "running" or find(state, c["name"]) is None:
                    break
                time.sleep(0.05)
    elif args[0] in ("stop", "kill", "rm"):
        c = find(state, args[-1])
        if c is None:
            sys.exit(f"Error: No such container: {args[-1]}")
        call(state, args[0])
        if args[0] == "stop":
            grace = float(args[args.index("-t") + 1])
            if os.environ.get("FAKE_DOCKER_STOP_WAITS"):  # a container slow to stop
                time.sleep(grace)
            signal_container(c, signal.SIGTERM)
            if not wait_exit(state, c, grace):
                signal_container(c, signal.SIGKILL)
                wait_exit(state, c, 5)
        else:
            if status_of(state, c) == "running":
                signal_container(c, signal.SIGKILL)
                wait_exit(state, c, 5)
            if args[0] == "rm":
                os.remove(os.path.join(state, "containers", c["name"] + ".json"))
    else:
        sys.exit(f"fake docker: unsupported {args[:1]}")

if os.path.basename(sys.argv[0]) == "docker":
    docker(sys.argv[1:])
elif sys.argv[1:2] == ["serve"]:
    serve(sys.argv[2:])
else:
    sys.exit("usage: vllm serve MODEL [--host H] [--port P] ...")
'''


def write_fake_engines(directory: Path) -> tuple[Path, Path]:
    """Write the fake ``vllm`` and ``docker`` executables into directory; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in ("vllm", "docker"):
        path = directory / name
        path.write_text(f"#!{sys.executable}\n{FAKE_VLLM}")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        paths.append(path)
    return paths[0], paths[1]


def free_port() -> int:
    """A port free now, for a server started later. Taken below the kernel's ephemeral range: a
    port from that range (what binding port 0 gives) can be handed to any outgoing connection or
    port-0 server of the suite before the launched server binds it."""
    import random
    import socket

    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    for _ in range(100):
        port = random.randrange(10000, max(ephemeral_low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in 10000-{ephemeral_low}")


def fake_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


# What a run keeps of its measured window (the store's server.log after this header): the same rule
# as the card's, stated again here so that the tests judge the kept lines against the raw log.
KEPT_WINDOW_HEADER = "# fastbench: the measured window's warnings, errors and \"SpecDecoding metrics\" lines\n"


def windows_in_log(raw: str) -> list[list[str]]:
    """Each measured window of a launch's raw log, in order: the lines between the window's last
    "measured window starts" mark and its "measured window ends" mark that a run keeps (WARNING,
    ERROR and CRITICAL lines, "SpecDecoding metrics" lines; not fastbench's own)."""
    import re

    kept = re.compile(r"\b(?:WARNING|ERROR|CRITICAL)\b|SpecDecoding metrics")
    windows: list[list[str]] = []
    current: list[str] | None = None
    for line in raw.splitlines():
        if line.startswith("# fastbench "):
            if line.endswith("measured window starts"):
                current = []
            elif line.endswith("measured window ends") and current is not None:
                windows.append(current)
                current = None
        elif current is not None and kept.search(line):
            current.append(line)
    return windows
