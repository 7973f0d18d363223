"""The server's view and the client's view of requests in flight, labelled as such on the card, with
what they differ by measured at the same instants."""

from __future__ import annotations

import re

import numpy as np

from fastbench import BenchConfig, SyntheticServer, run
from fastbench.results.records import COL, NCOLS
from fastbench.results.serversections import ClientInFlight, gauge_rows


def _rows(spans_s: list[tuple[float, float]]) -> np.ndarray:
    rows = np.zeros((len(spans_s), NCOLS), dtype=np.int64)
    for i, (sent, end) in enumerate(spans_s):
        rows[i, COL["sent_ns"]] = round(sent * 1e9)
        rows[i, COL["end_ns"]] = round(end * 1e9)
    return rows


def test_the_client_is_counted_at_the_servers_own_reads() -> None:
    """Reads at 100.5, 101.5, 102.1, 102.5 and 103.5 s; the first and last are the window's edges, left
    out, as the server's own figures leave them out."""
    rows = _rows([(100.0, 103.0), (101.0, 101.6), (101.2, 102.0), (102.4, 102.6)])
    gauges = {
        "t0_monotonic_s": 100.5,
        "running": {"max": 1, "mean": 1.0}, "waiting": {"max": 1, "mean": 0.5},
        "samples": [{"t_s": 0.0, "running": 0, "waiting": 0},
                    {"t_s": 1.0, "running": 1, "waiting": 1},
                    {"t_s": 1.6, "running": 2, "waiting": 0},
                    {"t_s": 2.0, "running": 1, "waiting": 0},
                    {"t_s": 3.0, "running": 0, "waiting": 0}],
    }
    rows_out = gauge_rows(gauges, ClientInFlight(mean=1.7, rows=rows))
    assert rows_out["Requests running (server)"] == "max 1 · mean 1.0"
    assert rows_out["Requests waiting (server)"] == "max 1 · mean 0.5"
    # at 101.5: requests 0, 1, 2; at 102.1: request 0 (request 2 ended at 102.0); at 102.5: requests 0, 3
    assert rows_out["Requests in flight (client)"] == ("mean 1.7 over the window (send to last byte read, "
                                                       "time-weighted); mean 2.0 at the same reads")
    # beyond the server's running + waiting: 3 - 2, 1 - 2 (it still lists one the client has read), 2 - 1
    assert rows_out["Client vs server"].startswith("at the same reads the client had +0.3 requests in flight")
    # without the client, or without the read times, the server's rows alone
    assert "Client vs server" not in gauge_rows(gauges)
    assert "Client vs server" not in gauge_rows({**gauges, "t0_monotonic_s": None}, ClientInFlight(1.7, rows))


def test_a_run_card_sets_the_client_beside_the_server() -> None:
    """Against the synthetic server (its /metrics counts a request running from its read to its last
    write), 8 streams held open: the client's count at the server's reads is the server's, or more by
    the requests on their way; never fewer than the server lists minus those just finished."""
    with SyntheticServer("--ttft-ms", "20", "--itl-ms", "20") as server:
        result = run(BenchConfig(base_url=server.base_url, concurrency=8, num_prompts=40, random_input_len=8,
                                 random_output_len=40, ignore_eos=True, metrics_interval_s=0.2))
    rows = result.server_info["server_metrics_card"]
    assert rows["Requests running (server)"].startswith("max 8")
    client = rows["Requests in flight (client)"]
    found = re.fullmatch(r"mean ([\d.]+) over the window \(send to last byte read, time-weighted\); "
                         r"mean ([\d.]+) at the same reads", client)
    assert found is not None, client
    assert abs(float(found.group(1)) - result.client.mean_in_flight) < 0.05
    beyond = re.match(r"at the same reads the client had ([+-][\d.]+) requests", rows["Client vs server"])
    assert beyond is not None and -1.0 <= float(beyond.group(1)) <= 1.0
    assert any(note.startswith("client's mean in flight (send to last byte read)") for note in result.notes)
