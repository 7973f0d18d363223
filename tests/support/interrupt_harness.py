"""Interrupts a fastbench run many times over, as ``timeout -s INT`` and a terminal do, and reports each run.

Run as a script (``python tests/support/interrupt_harness.py OUT_DIR REPEATS [--builtin]``) so that its forks come
from a process with no threads of pytest's. Each repetition forks a child that becomes its own process
group's leader (as a shell's foreground job is) and runs ``fastbench`` (the CLI's ``main``, imported once
here, so a repetition costs the run, not an interpreter start). Once the server has seen two measured
requests, the parent sends SIGINT to the child and at once to its group: what coreutils ``timeout`` does,
and what a terminal's Ctrl-C does (the group only). It prints one JSON line per repetition: the exit
status, stderr and the result file's run section.

Without ``--builtin`` the runs share one synthetic server started here, outside the group; with it each
run starts its built-in server, so the group signal would reach that server if it shared the group.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from fastbench.cli import main
from fastbench.synthetic import SyntheticServer
from fastbench.synthetic import server as synthetic_server

SERVER = {"ttft_ms": 2, "itl_ms": 2}
ARGS = ["--num-prompts", "2000", "--concurrency", "4", "--random-input-len", "8", "--random-output-len", "8",
        "--num-warmups", "0"]


def _generations(base_url: str) -> int:
    with urllib.request.urlopen(base_url + "/fb/stats", timeout=5) as answer:
        return int(json.load(answer)["generation_requests"])


def _child(argv: list[str], url_file: Path) -> None:
    os.setpgid(0, 0)
    start = synthetic_server.SyntheticServer.start

    def start_and_say_where(self: SyntheticServer) -> SyntheticServer:  # the built-in server's URL, for the parent
        started = start(self)
        url_file.write_text(self.base_url)
        return started

    synthetic_server.SyntheticServer.start = start_and_say_where  # type: ignore[method-assign]
    err = os.open(url_file.with_suffix(".err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(err, 2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        status = 99
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _one(out: Path, i: int, shared_url: str | None) -> dict[str, object]:
    result = out / f"r{i}.json"
    url_file = out / f"url{i}"
    argv = [*ARGS, "--result-json", str(result)]
    if shared_url:
        argv += ["--base-url", shared_url]
    else:
        argv += ["--synthetic-args", f"--ttft-ms {SERVER['ttft_ms']} --itl-ms {SERVER['itl_ms']}"]
    pid = os.fork()
    if pid == 0:
        _child(argv, url_file)
    deadline = time.monotonic() + 60
    base_url = shared_url
    while base_url is None:
        if url_file.exists() and url_file.read_text():
            base_url = url_file.read_text()
        elif time.monotonic() > deadline:
            break
        else:
            time.sleep(0.005)
    seen = _generations(base_url) if base_url else 0
    while base_url and _generations(base_url) < seen + 8 and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(pid, signal.SIGINT)  # timeout: the child first,
    try:
        os.killpg(pid, signal.SIGINT)  # then the group (a terminal sends this one alone)
    except ProcessLookupError:
        pass
    _, wait_status = os.waitpid(pid, 0)
    doc = json.loads(result.read_text()) if result.exists() else None
    return {
        "status": os.waitstatus_to_exitcode(wait_status),
        "stderr": url_file.with_suffix(".err").read_text(),
        "run": doc["fastbench"]["run"] if doc else None,
        "completed": doc["completed"] if doc else None,
        "failed": doc["fastbench"]["counts"]["failed"] if doc else None,
    }


def run(out: Path, repeats: int, builtin: bool) -> None:
    server = None if builtin else SyntheticServer(**SERVER).start()
    try:
        for i in range(repeats):
            print(json.dumps(_one(out, i, None if server is None else server.base_url)), flush=True)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(dir=sys.argv[1]) as work:
        run(Path(work), int(sys.argv[2]), "--builtin" in sys.argv[3:])
