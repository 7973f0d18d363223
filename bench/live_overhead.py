"""What the live view and the --metrics-port exporter cost the client: CPU per chunk and skew, side by side
in one process, rounds alternating, against one built-in synthetic server at 256 streams.

Four ways, each round:

- bare: the run with its live sampler doing nothing (``LiveSampler.look`` skipped): the floor;
- timeline: as every run is now: a look each 0.5 s, keeping the result's per-second timeline;
- exporter: looks four times a second for a ``PrometheusExporter``, scraped every 0.5 s by another process;
- view+exporter: that, and the live view (its own process, drawing on a pseudo-terminal that ``cat``
  drains), as ``fastbench`` draws it on a terminal;
- otlp: looks four times a second for an ``OtlpExporter`` pushing every 0.5 s (ten times its default)
  to a collector stand-in in another process (left out without ``fastbench-llm[otlp]``).

Per way: the client's CPU per output event (us, the result's ``client.cpu_per_event_us``), the skew's
p99 and max (ms: receive stamp minus the synthetic server's send stamp), and the CPU the view's own
process spent (s). Medians over the rounds are printed.

Usage (from the repository root)::

    .venv/bin/python bench/live_overhead.py                 # 3 rounds, ~2 min
    .venv/bin/python bench/live_overhead.py --rounds 5 --streams 256 --prompts 2560
"""

from __future__ import annotations

import argparse
import os
import pty
import resource
import statistics
import subprocess
import sys
from typing import Any

from fastbench import api
from fastbench.api import live as live_api
from fastbench.api.export import PrometheusExporter
from fastbench.cli import live as live_cli
from fastbench.config import BenchConfig

WAYS = ("bare", "timeline", "exporter", "view+exporter", "otlp")
SCRAPER = """
import sys, time, urllib.request
while True:
    try:
        urllib.request.urlopen(sys.argv[1], timeout=2).read()
    except OSError:
        pass
    time.sleep(0.5)
"""
COLLECTOR = """
import http.server
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def _otlp_available() -> bool:
    try:
        import opentelemetry.proto  # noqa: F401
    except ImportError:
        return False
    return True


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(way: str, config: BenchConfig) -> dict[str, Any]:
    listeners: list[Any] = []
    closers: list[Any] = []
    look = live_api.LiveSampler.look
    if way == "bare":
        live_api.LiveSampler.look = lambda self, progress, final=False: None  # type: ignore[assignment,method-assign,misc,return-value]
    view_cpu = None
    if way in ("exporter", "view+exporter"):
        exporter = PrometheusExporter(0)
        scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, exporter.url])
        listeners.append(exporter)
        closers += [exporter.close, scraper.kill, scraper.wait]
    if way == "otlp":
        from fastbench.api.otlp import OtlpExporter

        collector = subprocess.Popen([sys.executable, "-c", COLLECTOR], stdout=subprocess.PIPE, text=True)
        assert collector.stdout is not None
        otlp = OtlpExporter(f"http://127.0.0.1:{collector.stdout.readline().strip()}", interval_s=0.5)
        listeners.append(otlp)
        closers += [otlp.close, collector.kill, collector.wait]
    saved_stderr = sys.stderr
    drain = None
    if way == "view+exporter":
        master, slave = pty.openpty()
        drain = subprocess.Popen(["cat"], stdin=master, stdout=subprocess.DEVNULL)
        os.close(master)
        sys.stderr = os.fdopen(slave, "w")
        view = live_cli.RunView()
        listeners.append(view)
    try:
        result = api.run(config, on_live=listeners)
    finally:
        live_api.LiveSampler.look = look  # type: ignore[method-assign]
        if way == "view+exporter":
            before = _children_cpu_s()  # the synthetic server has been reaped by now: only the view's follows
            view.close()
            view_cpu = _children_cpu_s() - before
            sys.stderr.close()
            sys.stderr = saved_stderr
            assert drain is not None
            drain.wait(timeout=10)
        for close in closers:
            close()
    skew = result.distributions["skew"]
    return {"cpu_per_event_us": result.client.cpu_per_event_us, "skew_p99_ms": skew.p99, "skew_max_ms": skew.max,
            "view_cpu_s": view_cpu, "completed": result.counts.completed}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--prompts", type=int, default=2048)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--itl-ms", type=float, default=20.0)
    ns = p.parse_args()
    config = BenchConfig(num_prompts=ns.prompts, concurrency=ns.streams, random_input_len=16,
                         random_output_len=ns.output_len, synthetic_args=("--itl-ms", f"{ns.itl_ms:g}"))
    ways = WAYS if _otlp_available() else WAYS[:-1]
    figures: dict[str, list[dict[str, Any]]] = {way: [] for way in ways}
    for round_ in range(ns.rounds):
        order = ways if round_ % 2 == 0 else tuple(reversed(ways))
        for way in order:
            figures[way].append(one_run(way, config))
            got = figures[way][-1]
            print(f"round {round_ + 1} {way:>14}: {got['cpu_per_event_us']:.2f} us/event, skew p99 "
                  f"{got['skew_p99_ms']:.3f} ms, max {got['skew_max_ms']:.3f} ms", file=sys.stderr, flush=True)
    print(f"\n{ns.streams} streams, {ns.prompts} requests x {ns.output_len} tokens, ITL {ns.itl_ms:g} ms, "
          f"{ns.rounds} rounds (medians)")
    print(f"{'way':>14}  {'CPU/event us':>12}  {'skew p99 ms':>11}  {'skew max ms':>11}  {'view CPU s':>10}")
    for way in ways:
        rows = figures[way]

        def med(key: str, rows: list[dict[str, Any]] = rows) -> float | None:
            values = [r[key] for r in rows if r[key] is not None]
            return statistics.median(values) if values else None

        view = med("view_cpu_s")
        print(f"{way:>14}  {med('cpu_per_event_us') or 0:12.2f}  {med('skew_p99_ms') or 0:11.3f}  "
              f"{med('skew_max_ms') or 0:11.3f}  {'-' if view is None else f'{view:.2f}':>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
