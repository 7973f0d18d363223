"""Big inputs cost what the run sends, not the whole file: a workload built in a process of its own, its
peak RSS compared with the same build from a small input (its own baseline, never the host's speed).

- 100 prompts of a 200,000-line JSON Lines file cost what 100 of a 2,000-line file do, within the 24 bytes
  a line that a random order's scan keeps (a whole-file read kept every parsed line: ~300 MB here);
- random prompts cost their body's bytes each (~6 per token id), not a list of Python ints (~47 KB each
  at 1,024 tokens before).
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from support.sanitizer import SANITIZER_REASON, UNDER_SANITIZER
from fastbench import BenchConfig
from fastbench.exceptions import DatasetError
from fastbench.load.datasets import build_workload_sync
from fastbench.load.sources import jsonarray, trace

pytestmark = pytest.mark.skipif(UNDER_SANITIZER, reason=SANITIZER_REASON)

BUILD = """
import sys
import orjson
from fastbench import BenchConfig
from fastbench.exceptions import DatasetError
from fastbench.load.datasets import build_workload_sync
from fastbench.load.sources import jsonarray, trace

config = BenchConfig(**orjson.loads(sys.argv[1]))
work = build_workload_sync(config, "m", max_model_len=None)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across execve (a child of a big pytest reports its peak)
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(orjson.dumps({"requests": len(work.requests), "body_bytes": sum(len(bytes(s.body)) for s in work.requests),
                    "max_rss_kib": hwm}).decode())
"""


def peak(**config: Any) -> dict[str, int]:
    proc = subprocess.run([sys.executable, "-c", BUILD, orjson.dumps(config).decode()], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, int] = orjson.loads(proc.stdout.strip().splitlines()[-1])
    return out


def write_lines(path: Path, n: int) -> str:
    words = "the quick brown fox jumps over a lazy dog while five boxing wizards jump quickly".split()
    rng = random.Random(n)
    with open(path, "wb") as f:
        for i in range(n):
            f.write(orjson.dumps({"prompt": f"{i} " + " ".join(rng.choices(words, k=40)), "max_tokens": 8}) + b"\n")
    return str(path)


@pytest.mark.parametrize("order", ["random", "file"])
def test_a_few_prompts_of_a_big_file_cost_what_they_do_of_a_small_one(tmp_path: Path, order: str) -> None:
    big, small = write_lines(tmp_path / "big.jsonl", 200_000), write_lines(tmp_path / "small.jsonl", 2_000)
    of_big = peak(dataset_name="jsonl", dataset_path=big, num_prompts=100, dataset_order=order)
    of_small = peak(dataset_name="jsonl", dataset_path=small, num_prompts=100, dataset_order=order)
    assert of_big["requests"] == of_small["requests"] == 100
    # the scan's 24 bytes a line (4.7 MB for 198,000 more lines) and allocator slack; the whole file read and
    # parsed was ~300 MB more for this one (64 MB of JSON)
    assert of_big["max_rss_kib"] - of_small["max_rss_kib"] < 16 * 1024, (of_big, of_small)


def test_random_prompts_cost_about_their_bodies(tmp_path: Path) -> None:
    few = peak(num_prompts=2_000, random_input_len=1024, random_output_len=8)
    many = peak(num_prompts=20_000, random_input_len=1024, random_output_len=8)
    assert many["requests"] == 20_000
    body = many["body_bytes"] / many["requests"]  # ~5.9 KB: 1,024 ids of 5 digits and a comma
    per_prompt = (many["max_rss_kib"] - few["max_rss_kib"]) * 1024 / 18_000
    assert per_prompt < 2 * body, (per_prompt, body, few, many)  # 47 KB a prompt as lists of ints


def test_a_random_order_sends_what_shuffling_the_whole_file_sends(tmp_path: Path) -> None:
    """vLLM's order (random.Random(seed).shuffle of the lines), kept while only the drawn lines are parsed;
    blank lines and a line numbered past them are where they were."""
    lines = [{"prompt": f"prompt {i}", "max_tokens": 3} for i in range(50)]
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(x) + (b"\n\n  " if i % 7 == 0 else b"") for i, x in enumerate(lines)))
    for seed in (0, 1, 7):
        work = build_workload_sync(BenchConfig(dataset_name="jsonl", dataset_path=str(path), num_prompts=10,
                                               seed=seed), "m", max_model_len=None)
        expected = list(lines)
        random.Random(seed).shuffle(expected)
        assert [orjson.loads(bytes(s.body))["prompt"] for s in work.requests] == [x["prompt"] for x in expected[:10]]


@pytest.mark.parametrize("name", ["jsonl", "custom"])
def test_a_file_is_read_as_far_as_the_run_draws(tmp_path: Path, name: str) -> None:
    """A defect past the lines drawn costs nothing; one the run reaches stops it, naming its line."""
    path = tmp_path / "p.jsonl"
    good = [orjson.dumps({"prompt": f"prompt {i}", "max_tokens": 3}) for i in range(20)]
    path.write_bytes(b"\n".join([*good, b"{not json"]) + b"\n")
    config = BenchConfig(dataset_name=name, dataset_path=str(path), num_prompts=10, dataset_order="file")
    work = build_workload_sync(config, "m", max_model_len=None)
    assert [orjson.loads(bytes(s.body))["prompt"] for s in work.requests] == [f"prompt {i}" for i in range(10)]
    with pytest.raises(DatasetError, match=f"^{path} line 21: not valid JSON"):
        build_workload_sync(config.replace(num_prompts=21), "m", max_model_len=None)


def _sharegpt(path: Path, n: int) -> str:
    rng = random.Random(n)
    words = "the quick brown fox jumps over a lazy dog while five boxing wizards jump quickly".split()
    doc = [{"id": str(i), "conversations": [{"from": "human", "value": " ".join(rng.choices(words, k=60))},
                                            {"from": "gpt", "value": " ".join(rng.choices(words, k=100))}]}
           for i in range(n)]
    path.write_bytes(orjson.dumps(doc))
    return str(path)


def test_sharegpt_costs_its_bytes_not_its_parsed_objects(tmp_path: Path) -> None:
    big = _sharegpt(tmp_path / "big.json", 40_000)  # 38 MB
    small = _sharegpt(tmp_path / "small.json", 400)
    of_big, of_small = (peak(dataset_name="sharegpt", dataset_path=p, num_prompts=100) for p in (big, small))
    size = Path(big).stat().st_size
    # the bytes, 16 a conversation and the scan's blocks; parsed whole it was ~4 times the file
    assert (of_big["max_rss_kib"] - of_small["max_rss_kib"]) * 1024 < 1.5 * size, (size, of_big, of_small)


@pytest.mark.parametrize("order", ["random", "file"])
def test_sharegpt_sends_what_the_whole_file_parsed_sends(tmp_path: Path, order: str) -> None:
    """vLLM's sample (entries of two turns, then random.Random(seed).shuffle), element by element; the
    skipped entries are counted as before."""
    rng = random.Random(5)
    doc: list[Any] = [{"id": i, "conversations": [{"from": "human", "value": f"question {i} " + "\\\"[]{},"},
                                                  {"from": "gpt", "value": "answer " * rng.randint(1, 9)}]}
                      for i in range(60)]
    doc[3]["conversations"].pop()  # one turn: skipped
    doc[8] = {"id": 8}  # no conversations: skipped
    path = tmp_path / "sg.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    for seed in (0, 4):
        work = build_workload_sync(BenchConfig(dataset_name="sharegpt", dataset_path=str(path), num_prompts=20,
                                               max_tokens=5, seed=seed, dataset_order=order), "m", max_model_len=None)
        kept = [e for e in doc if len(e.get("conversations", [])) >= 2]
        if order == "random":
            random.Random(seed).shuffle(kept)
        assert [orjson.loads(bytes(s.body))["prompt"] for s in work.requests] == \
            [e["conversations"][0]["value"] for e in kept[:20]]
        assert "sharegpt: skipped 2 entries without a conversation of at least 2 turns" in work.notes


def test_the_array_scan_finds_each_element_as_orjson_parses_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonarray, "_BLOCK", 7)  # blocks of 7 bytes: strings, escapes and runs cut anywhere
    rng = random.Random(2)
    for trial in range(200):
        doc = [{"v": "".join(rng.choice('ab\\"[]{},: \n') for _ in range(rng.randint(0, 20))), "n": [i, {}]}
               for i in range(rng.randint(0, 12))]
        raw = orjson.dumps(doc, option=orjson.OPT_INDENT_2 if trial % 2 else 0)
        bounds = jsonarray.element_bounds(raw)
        assert bounds is not None
        parts = [raw[bounds[k] + 1:bounds[k + 1]] for k in range(len(bounds) - 1)]
        assert [orjson.loads(p) for p in parts if p.strip()] == doc
    for not_one_array in (b'{"a": 1}', b"[1", b"[1]]", b"[1] [2]", b"[1] x", b"[1}", b'"x"', b"", b",[1]"):
        assert jsonarray.element_bounds(not_one_array) is None, not_one_array


def _burstgpt(path: Path, n: int) -> str:
    rng = random.Random(n)
    rows = "".join(f"{i},{rng.choice(['GPT-4', 'ChatGPT'])},{rng.randint(1, 300)},{rng.randint(0, 200)},0,Conversation "
                   "log\n" for i in range(n))
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + rows)
    return str(path)


def test_burstgpt_keeps_16_bytes_a_row(tmp_path: Path) -> None:
    big, small = _burstgpt(tmp_path / "big.csv", 400_000), _burstgpt(tmp_path / "small.csv", 4_000)
    of_big, of_small = (peak(dataset_name="burstgpt", dataset_path=p, num_prompts=100) for p in (big, small))
    # 200,000 more GPT-4 rows at 16 bytes (3.2 MB) and the draw's permutation (8 bytes a row); read whole, the
    # file, its text and a tuple a row were ~110 MB more
    assert of_big["max_rss_kib"] - of_small["max_rss_kib"] < 16 * 1024, (of_big, of_small)


def test_a_burstgpt_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_bytes(b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,GPT-4,\xff\xfe,4,7,x\n")
    with pytest.raises(DatasetError, match=f"^{path}: not a UTF-8 CSV file \\(invalid start byte\\)$"):
        build_workload_sync(BenchConfig(dataset_name="burstgpt", dataset_path=str(path)), "m", max_model_len=None)


def _mooncake(path: Path, n: int) -> str:
    rng = random.Random(n)
    path.write_bytes(b"".join(orjson.dumps({"timestamp": i * 10, "input_length": rng.randint(20, 3000),
                                            "output_length": rng.randint(1, 200),
                                            "hash_ids": list(range(i, i + rng.randint(1, 40)))}) + b"\n"
                              for i in range(n)))
    return str(path)


def test_a_trace_is_read_as_far_as_its_first_requests(tmp_path: Path) -> None:
    big, small = _mooncake(tmp_path / "big.jsonl", 200_000), _mooncake(tmp_path / "small.jsonl", 2_000)
    of_big, of_small = (peak(dataset_name="mooncake", dataset_path=p, num_prompts=100) for p in (big, small))
    # read whole, the 47 MB file and its columns were ~120 MB more
    assert of_big["max_rss_kib"] - of_small["max_rss_kib"] < 16 * 1024, (of_big, of_small)


def test_a_trace_read_in_steps_takes_what_the_whole_file_gives(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Screening that leaves too few of the first lines reads on, four times as many each time, and takes
    the same requests, times and screened count as reading the whole file."""
    path = _mooncake(tmp_path / "t.jsonl", 3_000)

    def build() -> tuple[list[bytes], list[int] | None, int, list[int] | None]:
        work = build_workload_sync(BenchConfig(dataset_name="mooncake", dataset_path=path, num_prompts=300),
                                   "m", max_model_len=400)  # about 9 in 10 screened out
        return [bytes(s.body) for s in work.requests], work.arrival_offsets_ns, work.screened_out, \
            work.shared_prompt_tokens

    whole = build()
    read: list[int] = []
    real = trace.load_trace

    def counted(*args: Any, lines: int | None = None) -> Any:
        read.append(lines or 0)
        return real(*args, lines=lines)

    monkeypatch.setattr(trace, "_FIRST_READ", 10)
    monkeypatch.setattr(trace, "load_trace", counted)
    assert build() == whole and whole[2] > 0
    assert read == [1200, 4800]  # 4 x 300 lines held too few that fit
