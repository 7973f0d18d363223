"""The live view drawn in a real pseudo-terminal, ending on the figures the result holds, and turned off by
its flags; --metrics-port on a port already taken and an --otlp-endpoint that is no URL are one-line errors;
a sweep's grid with its skipped cells."""

from __future__ import annotations

import io
import json
import os
import pathlib
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")


def _run_in_pty(args: list[str], timeout_s: float = 120.0) -> tuple[int, str, str]:
    """fastbench with stderr (and stdin) on a pseudo-terminal: (exit status, the terminal's text, stdout)."""
    env = dict(os.environ, COLUMNS="160", LINES="40", TERM="xterm")  # the installed fastbench, as a user runs it
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "fastbench", *args], stdin=slave, stdout=subprocess.PIPE,
                            stderr=slave, env=env)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    return proc.wait(timeout=30), ANSI.sub("", seen.decode(errors="replace")), out


def test_live_view_in_a_terminal_ends_on_the_results_figures(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("rich")
    result_path = tmp_path / "r.json"
    status, screen, out = _run_in_pty(["--num-prompts", "120", "--concurrency", "8", "--random-input-len", "16",
                                       "--random-output-len", "24", "--result-json", str(result_path)])
    assert status == 0, screen[-2000:]
    doc = json.loads(result_path.read_text())
    assert "p50 / p99 ms" in screen and "TTFT" in screen  # the view was drawn
    frames = screen.split("(finished)")
    assert len(frames) >= 2, screen[-2000:]
    last = frames[-1]
    assert f"done {doc['completed']:,}/{doc['num_prompts']:,}" in last
    assert f"{doc['total_output_tokens']:,} tokens" in last
    assert "skew" in last  # against the synthetic server's stamps
    # the summary on stdout is the one printed without the view
    assert "Successful requests" in out or str(doc["completed"]) in out


def test_no_live_and_disable_tqdm_turn_the_view_off(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("rich")
    for flag in ("--no-live", "--disable-tqdm"):
        status, screen, _ = _run_in_pty(["--num-prompts", "20", "--concurrency", "4", "--random-input-len", "8",
                                         "--random-output-len", "8", flag])
        assert status == 0, screen[-2000:]
        assert "p50 / p99 ms" not in screen, flag


def test_metrics_port_taken_is_one_line_error() -> None:
    pytest.importorskip("prometheus_client")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "fastbench", "--num-prompts", "4", "--metrics-port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(f"fastbench: error: --metrics-port {port}: cannot listen")


def test_the_final_figures_stay_scrapeable_after_the_run(tmp_path: pathlib.Path) -> None:
    """--metrics-linger: once the run ended and its result was written, a scrape still answers, with every
    request the result counts and fastbench_run_finished at 1; Ctrl-C ends the wait, exit status 0."""
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    out = tmp_path / "r.json"
    args = ["--num-prompts", "12", "--concurrency", "4", "--random-input-len", "16", "--random-output-len", "4",
            "--synthetic-args", "--ttft-ms 1 --itl-ms 1", "--metrics-port", "0", "--metrics-linger", "120",
            "--result-json", str(out), "--label", "linger"]
    proc = subprocess.Popen([sys.executable, "-m", "fastbench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        said = ""
        while "stay at" not in said:  # printed after the summary and the result file
            said = proc.stderr.readline()
            assert said, "fastbench ended without keeping its figures"
        url = re.search(r"(http://\S+/metrics)", said)
        assert url is not None and "for 120 s (--metrics-linger" in said
        assert proc.poll() is None  # still serving
        with urllib.request.urlopen(url.group(1), timeout=10) as resp:
            text = resp.read().decode()
        samples = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
                   if s.labels.get("label") == "linger"}
        completed = json.loads(out.read_text())["completed"]
        assert completed == 12
        assert samples["fastbench_requests_completed_total"] == completed
        assert samples["fastbench_run_finished"] == 1.0
        proc.send_signal(signal.SIGINT)  # ends the wait, not the run: it was done
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_otlp_endpoint_that_is_no_url_is_one_line_error() -> None:
    args = ["--num-prompts", "4", "--otlp-endpoint", "localhost:4318"]
    proc = subprocess.run([sys.executable, "-m", "fastbench", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    # without the extra installed, the line says how to install it
    assert len(lines) == 1 and lines[0].startswith("fastbench: error: --otlp-endpoint"), proc.stderr


def test_a_sweeps_grid_shows_skipped_cells_with_the_reason_and_leaves_them_out_of_the_time_left() -> None:
    pytest.importorskip("rich")
    from rich.console import Console

    from fastbench.cli.liveproc import Screen

    console = Console(record=True, width=160, file=io.StringIO())
    screen = Screen()
    for message in ({"cells": ["c1", "c2", "c4", "c8"]}, {"started": "c1", "at": 100.0},
                    {"finished": "c1", "state": "done", "figures": "9.00 req/s", "at": 130.0},
                    {"started": "c2", "at": 130.0},
                    {"finished": "c2", "state": "done", "figures": "9.10 req/s", "at": 160.0},
                    {"finished": "c4", "state": "skipped", "figures": "saturated at load 2", "at": 160.1},
                    {"finished": "c8", "state": "skipped", "figures": "saturated at load 2", "at": 160.1}):
        screen.take(message, console)
    assert screen.state == {"c1": "done", "c2": "done", "c4": "skipped", "c8": "skipped"}
    assert screen.spent == [30.0, 30.0]  # the skipped cells took no time of their own
    assert screen.time_left_s() == 0.0  # none waiting: nothing left
    console.print(screen.render())
    text = console.export_text()
    assert "2 of 4 cells measured, 2 skipped" in text
    rows = {line.split()[1]: line for line in text.splitlines() if re.match(r"\W*c\d", line)}
    assert "skipped" in rows["c4"] and "saturated at load 2" in rows["c4"] and "waiting" not in text

