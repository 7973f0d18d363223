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

The fake ``docker`` runs the same script for ``docker run ... IMAGE MODEL ARGS``, answers ``inspect``
with a fixed digest, and ``stop`` / ``kill`` / ``rm`` by signalling the process recorded for the container
name (``stop`` first waits its ``-t`` seconds with FAKE_DOCKER_STOP_WAITS set).
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

def docker(args):
    state = os.environ["FAKE_DOCKER_STATE"]
    if args[0] == "run":
        name = args[args.index("--name") + 1]
        for i, a in enumerate(args):
            if a == "--env" and "=" in args[i + 1]:
                k, v = args[i + 1].split("=", 1)
                os.environ[k] = v
        with open(os.path.join(state, name), "w") as f:
            f.write(str(os.getpid()))
        rest = args[1:]
        skip = {"--name", "--gpus", "-p", "--env", "-v"}
        i = 0
        while i < len(rest):  # docker's own flags, then IMAGE, then the image's arguments
            if rest[i] in skip:
                i += 2
            elif rest[i].startswith("--ipc"):
                i += 1
            else:
                break
        with open(os.path.join(state, "argv"), "w") as f:
            json.dump(args, f)
        serve(rest[i + 1:])
    elif args[0] == "inspect":
        fmt, target = args[2], args[3]
        if "RepoDigests" in fmt:
            print(json.dumps([target.split("@")[0].split(":")[0] + "@" + os.environ["FAKE_DIGEST"]]))
        elif "State.Pid" in fmt:
            with open(os.path.join(state, target)) as f:
                print(f.read().strip())
        else:
            print("sha256:" + "cd" * 32)
    elif args[0] in ("stop", "kill", "rm"):
        name = args[-1]
        path = os.path.join(state, name)
        if args[0] == "stop" and os.environ.get("FAKE_DOCKER_STOP_WAITS"):  # a container slow to stop
            time.sleep(float(args[args.index("-t") + 1]))
        if os.path.exists(path):
            with open(path) as f:
                pid = int(f.read())
            try:
                if args[0] == "stop":
                    os.kill(pid, signal.SIGTERM)
                else:  # everything in the "container" dies at once, its engine child too
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
            with open(os.path.join(state, "calls"), "a") as f:
                f.write(args[0] + "\n")
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
