"""The run command's "launch a server" flags: the engine, what it loads and how (a process or a docker
container), where it listens, its log, and how long it may take to start and to stop."""

from __future__ import annotations

import argparse

from fastbench.cli.argtypes import shell_words, whole_number
from fastbench.config import ENGINES

__all__ = ("add_args",)


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "launch a server", "fastbench starts the server, waits until /v1/models lists the model, benchmarks "
        "it and stops it (SIGTERM, then SIGKILL, to its process group and any descendant that left it); "
        "without --launch, --base-url attaches")
    g.add_argument("--config", metavar="RUN.TOML", default=None,
                   help="take options from a TOML file ([server] and [benchmark] tables); flags override it")
    g.add_argument("--launch", choices=ENGINES, default=None, help="the engine to start")
    g.add_argument("--launch-model", metavar="MODEL", default=None,
                   help="what the engine loads (Hugging Face id, directory, GGUF file)")
    g.add_argument("--engine-args", type=shell_words, default="", metavar="\"ARGS\"",
                   help="engine flags passed through, e.g. \"--max-model-len 8192 --gpu-memory-utilization 0.85 "
                   "--speculative-config '{...}'\"; one flag alone needs the = form: --engine-args=\"--enforce-eager\"")
    g.add_argument("--docker-image", metavar="IMAGE[@sha256:...]", default=None,
                   help="run the engine in this image or image id (docker run -d --ipc=host -p PORT:PORT, the GPU "
                   "flags of --docker-gpus, the Hugging Face cache mounted, HF_TOKEN passed by name)")
    g.add_argument("--docker-args", type=shell_words, default="", metavar="\"ARGS\"",
                   help="extra docker run flags, e.g. \"--shm-size 16g\" (a value starting with a dash alone: "
                   "--docker-args=\"--privileged\")")
    g.add_argument("--docker-gpus", default="auto", metavar="auto|none|rocm|GPUS",
                   help="the container's GPUs: auto (from the host: NVIDIA's runtime -> --gpus all; ROCm's /dev/kfd "
                   "and /dev/dri -> those devices, --group-add video, seccomp unconfined; neither -> none), none, "
                   "rocm, or docker's own --gpus value (all, 2, device=0,1)")
    g.add_argument("--docker-hf-cache", metavar="DIR|none", default=None,
                   help="the host's Hugging Face cache, mounted at /root/.cache/huggingface (default: $HF_HOME or "
                   "~/.cache/huggingface; none: no mount)")
    g.add_argument("--server-env", action="append", default=[], metavar="NAME[=VALUE]",
                   help="environment for the server; NAME alone passes fastbench's own value (repeatable)")
    g.add_argument("--server-host", default="127.0.0.1", help="address the launched server listens on")
    g.add_argument("--server-port", type=whole_number, default=None,
                   help="port of the launched server (default: vLLM 8000, SGLang 30000, llama.cpp 8080)")
    g.add_argument("--ready-timeout", type=float, default=1800.0,
                   help="seconds from launch until the model must be served")
    g.add_argument("--server-log", default=None,
                   help="server log file (default: fastbench-server-ENGINE-TIME.log beside the result)")
    g.add_argument("--engine-bin", default=None,
                   help="the engine executable (vllm, python for SGLang, llama-server; docker with "
                   "--docker-image); default: found on PATH")
    g.add_argument("--server-stop-grace", type=float, default=20.0,
                   help="seconds between SIGTERM and SIGKILL at teardown")
    g.add_argument("--memory-interval", type=float, default=None,
                   help="seconds between memory samples (default: 1 when launching a server, else off; 0: off)")
    g.add_argument("--metrics-interval", type=float, default=2.0,
                   help="seconds between reads of the server's /metrics during the run (0: start and end only)")
