"""The relay between a launched engine's output and its log file: every secret hidden, however the
engine's writes split it, and every byte else kept, in order."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from fastbench.redact import Secrets
from fastbench.server import logrelay


def _through_relay(pieces: list[bytes], secrets: Secrets, tmp_path: Path) -> bytes:
    """What the relay writes for ``pieces`` written one at a time into its pipe."""
    read_end, write_end = os.pipe()
    out = tmp_path / "log"
    with open(out, "wb") as sink:
        reader = threading.Thread(target=logrelay.relay, args=(read_end, sink.fileno(), secrets))
        reader.start()
        for piece in pieces:
            os.write(write_end, piece)
        os.close(write_end)
        reader.join(timeout=30)
    os.close(read_end)
    return out.read_bytes()


def test_a_secret_split_across_writes_is_hidden_and_nothing_else_changes(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logrelay, "LONG_LINE", 64)  # a progress bar's long line, made short
    key = "sk-relay-0123456789"
    text = (f"INFO args: ['--api-key', '{key}']\nEMPTYING EMPTY\n"
            + "progress " * 20 + f"\r{key} " + "x" * 80 + "\nlast line, no newline " + key[:5])
    data = text.encode()
    # cut the stream at every third byte: the key straddles many writes
    written = _through_relay([data[i:i + 3] for i in range(0, len(data), 3)], Secrets([key, "EMPTY"]), tmp_path)
    assert written.decode() == text.replace(key, "***").replace("EMPTYING EMPTY", "EMPTYING ***")


def test_the_relay_process_ends_with_its_input_having_written_all(tmp_path: Path) -> None:
    key = "hf_relay_process_0123456789"
    with open(tmp_path / "log", "ab") as log:
        log.write(b"# fastbench line before\n")
        log.flush()
        process, write_end = logrelay.start_relay(log, Secrets([key]))
        os.write(write_end, f"token {key}\nno newline at the end {key}".encode())
        os.close(write_end)
        assert process.wait(timeout=60) == 0
    assert (tmp_path / "log").read_text() == "# fastbench line before\ntoken ***\nno newline at the end ***"
