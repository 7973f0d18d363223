"""docs/agentic.md's first command runs as written, from the repository's root, on the sample traces the
repository ships (examples/weka-traces/), against the synthetic server in the place of the page's URL."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from fastbench import BenchConfig, ConfigError
from fastbench.api.runs import check as check_run
from fastbench.load.sources.weka import read_corpus
from fastbench.synthetic import SyntheticServer

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "weka-traces"


def _docs_command() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "docs" / "agentic.md").read_text(), re.S)
    assert block is not None
    argv = shlex.split(block.group(1).replace("\\\n", " "))
    assert argv[0] == "fastbench"
    return argv[1:]


def test_the_sample_traces_are_small_and_read_as_three_traces() -> None:
    assert sum(f.stat().st_size for f in SAMPLE.iterdir()) < 8 * 1024
    corpus = read_corpus(str(SAMPLE))
    assert sorted(t.name for t in corpus.traces) == ["background-search", "fix-a-failing-test", "read-the-docs"]
    assert corpus.skipped == 0


def test_the_docs_first_command_runs_as_written_on_the_sample(tmp_path: Path) -> None:
    argv = _docs_command()
    assert argv[argv.index("--dataset-path") + 1] == "examples/weka-traces/"
    trees = int(argv[argv.index("--num-prompts") + 1])
    with SyntheticServer("--ttft-ms", "2", "--itl-ms", "1") as server:
        argv[argv.index("--base-url") + 1] = server.base_url
        out = tmp_path / "result.json"
        proc = subprocess.run([sys.executable, "-m", "fastbench", *argv, "--result-json", str(out)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = orjson.loads(out.read_bytes())["fastbench"]
    assert result["counts"]["failed"] == 0 and result["counts"]["completed"] > trees
    assert any("3 traces in examples/weka-traces/" in note for note in result["workload"]["notes"])


def test_a_directory_is_refused_for_a_dataset_read_from_one_file_only() -> None:
    check_run(BenchConfig(dataset_name="weka", dataset_path=SAMPLE, num_prompts=1))  # the Weka reader reads it
    with pytest.raises(ConfigError, match="is a directory; give the file itself"):
        check_run(BenchConfig(dataset_name="jsonl", dataset_path=SAMPLE, num_prompts=1))
