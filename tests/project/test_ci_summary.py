"""The end of .ci/run (scripts/ci_summary.py) on faked stage records: each stage is said to have run, failed,
or skipped with its reason, and a skip where the machine has what the stage needs fails CI. The records'
pytest reports are real ones, written by pytest runs of small test files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import ci_summary  # noqa: E402

VLLM_REASON = "real vLLM cannot run here: setup_realvllm: needs CPython 3.11 (the pinned wheels are cp311)"
TEST_FILES = {
    "passing": "import pytest\n\ndef test_a():\n    pass\n\ndef test_b():\n    pytest.skip('not here')\n",
    "skipping": f"import pytest\n\ndef test_real():\n    pytest.skip({VLLM_REASON!r})\n",
    "failing": "def test_a():\n    pass\n\ndef test_b():\n    assert False\n",
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, bytes]]:
    """(pytest's exit status, its JUnit report) for each of TEST_FILES."""
    out: dict[str, tuple[int, bytes]] = {}
    for name, text in TEST_FILES.items():
        where = tmp_path_factory.mktemp(name)
        (where / f"test_{name}.py").write_text(text)
        report = where / "report.xml"
        env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}  # CI's own report
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                               str(where / f"test_{name}.py")], capture_output=True, cwd=where, env=env, check=False)
        out[name] = (proc.returncode, report.read_bytes())
    return out


def _stage(results: Path, name: str, rc: int | None = None, report: tuple[int, bytes] | None = None,
           skip: str | None = None, note: str | None = None) -> None:
    if report is not None:
        rc = report[0]
        (results / f"{name}.xml").write_bytes(report[1])
    if rc is not None:
        (results / f"{name}.rc").write_text(f"{rc}\n")
    if skip is not None:
        (results / f"{name}.skip").write_text(skip + "\n")
    if note is not None:
        (results / f"{name}.note").write_text(note + "\n")


def _lines(text: str) -> dict[str, str]:
    """label -> the rest of its line, from the summary."""
    out = {}
    for label in (label for _, label in ci_summary.STAGES):
        found = re.search(rf"^  {re.escape(label)} +(?:\d+ min +\d+ s)? +(.*)$", text, re.M)
        assert found is not None, text
        out[label] = found.group(1)
    return out


def test_each_stage_says_what_it_did(tmp_path: Path, reports: dict[str, tuple[int, bytes]]) -> None:
    _stage(tmp_path, "suite", report=reports["passing"])
    wheel = "fastbench_llm-0.1.0-cp311-cp311-manylinux_2_17_x86_64.whl"
    _stage(tmp_path, "wheel", rc=0, note=f"{wheel}: installed with no compiler, 8 of 8 prompts completed")
    _stage(tmp_path, "vllm", report=reports["skipping"])
    _stage(tmp_path, "llamacpp", report=reports["failing"])
    _stage(tmp_path, "browser", report=reports["passing"])
    _stage(tmp_path, "ray", report=reports["passing"])
    _stage(tmp_path, "docker", report=reports["passing"])
    _stage(tmp_path, "sanitizers", skip="gcc has no libasan.so")
    _stage(tmp_path, "fuzzing", rc=0, note="no clang: the seeds replayed under gcc's sanitizers, not fuzzed")
    asked: list[str] = []

    def machine_lacks(name: str) -> str | None:
        asked.append(name)
        return {"vllm": "python3 is not CPython 3.11", "sanitizers": "gcc has no libasan.so"}.get(name)

    passed, text = ci_summary.summarize(tmp_path, machine_lacks)
    lines = _lines(text)
    assert lines["suite"] == "ran      1 passed, 1 skipped"
    assert lines["wheel"] == f"ran      {wheel}: installed with no compiler, 8 of 8 prompts completed"
    assert lines["real vLLM"] == f"skipped  {VLLM_REASON}"
    assert lines["real llama.cpp"] == "FAILED   exit status 1: 1 of 2 tests failed or errored"
    # the failed test is named under its stage, with its message's first line, so a CI log says what broke
    at = next(i for i, line in enumerate(text.splitlines()) if line.startswith("  real llama.cpp "))
    failed_line = text.splitlines()[at + 1]
    assert re.fullmatch(r" +\S*failing::test_b: assert False", failed_line), failed_line
    assert lines["sanitizers"] == "skipped  gcc has no libasan.so"
    assert lines["fuzzing"] == "ran      no clang: the seeds replayed under gcc's sanitizers, not fuzzed"
    assert not passed and text.endswith("CI FAILED: real llama.cpp")
    assert asked == ["vllm", "sanitizers"]  # the machine is asked about skipped stages only


def test_each_stage_says_how_long_it_took_and_the_summary_the_total(tmp_path: Path,
                                                                     reports: dict[str, tuple[int, bytes]]) -> None:
    for seconds, (name, _) in enumerate(ci_summary.STAGES, start=1):
        _stage(tmp_path, name, report=reports["passing"])
        (tmp_path / f"{name}.seconds").write_text(f"{seconds * 61}\n")
    passed, text = ci_summary.summarize(tmp_path, lambda name: None)
    assert passed
    assert re.search(r"^  suite +1 min +1 s  ran ", text, re.M), text
    last = len(ci_summary.STAGES) * 61
    assert re.search(rf"^  fuzzing +{last // 60} min +{last % 60} s  ran ", text, re.M), text
    total = sum(range(1, len(ci_summary.STAGES) + 1)) * 61
    assert re.search(rf"^  in all +{total // 60} min +{total % 60} s$", text, re.M), text


def _timing_run(where: Path, body: str) -> tuple[int, bytes, str]:
    """pytest over one test file that uses tests/support/timing.py under the suite's own conftest.py (both
    copied beside it, as in tests/): (exit status, JUnit report, output)."""
    for helper in ("conftest.py", "support/__init__.py", "support/timing.py"):
        (where / helper).parent.mkdir(exist_ok=True)
        (where / helper).write_text((ROOT / "tests" / helper).read_text())
    (where / "test_timed.py").write_text(body)
    report = where / "report.xml"
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                           "test_timed.py"], capture_output=True, text=True, cwd=where, env=env, check=False)
    return proc.returncode, report.read_bytes(), proc.stdout


TIMED = """import pytest
from support.timing import until_a_round_passes

# lint, types, layout, plots, docs: no native path of their own (the sanitizer stage leaves them out)
pytestmark = pytest.mark.pure_python

rounds = []

@pytest.mark.timing
def test_second_round():
    def one_round():
        rounds.append(1)
        assert len(rounds) >= 2, "a host stall"
    until_a_round_passes(one_round)

@pytest.mark.timing
def test_first_round():
    until_a_round_passes(lambda: None)

def test_unmarked():
    until_a_round_passes(lambda: None)
"""


def test_a_pass_on_a_later_round_is_listed_and_an_unmarked_timing_test_fails(tmp_path: Path) -> None:
    rc, report, out = _timing_run(tmp_path, TIMED)
    assert rc == 1 and "mark it @pytest.mark.timing" in out, out
    _stage(tmp_path, "suite", report=(rc, report))
    got = ci_summary.outcome(tmp_path, "suite")
    assert got.state == "failed" and len(got.failures) == 1 and "test_unmarked" in got.failures[0]
    assert got.later_rounds == ("test_timed::test_second_round (round 2 of 3)",)
    passed, text = ci_summary.summarize(tmp_path, lambda name: None)
    assert "passed on a later round: test_timed::test_second_round (round 2 of 3)" in text

    all_marked = TIMED.replace("\ndef test_unmarked", "\n@pytest.mark.timing\ndef test_unmarked")
    rc, report, out = _timing_run(tmp_path, all_marked)
    assert rc == 0, out
    _stage(tmp_path, "suite", report=(rc, report))
    assert ci_summary.outcome(tmp_path, "suite").detail == "3 passed, 1 on a later round"


def test_a_skip_where_the_machine_has_what_the_stage_needs_fails(tmp_path: Path,
                                                                 reports: dict[str, tuple[int, bytes]]) -> None:
    for name, _ in ci_summary.STAGES:
        _stage(tmp_path, name, report=reports["passing"])
    _stage(tmp_path, "vllm", report=reports["skipping"])
    passed, text = ci_summary.summarize(tmp_path, lambda name: "no cmake" if name == "llamacpp" else None)
    assert _lines(text)["real vLLM"] == f"FAILED   skipped, yet this machine has what it needs: {VLLM_REASON}"
    assert not passed and text.endswith("CI FAILED: real vLLM")

    # the same skip on a machine that lacks what the stage needs is only said
    passed, text = ci_summary.summarize(tmp_path, lambda name: "python3 is not CPython 3.11")
    assert passed and text.endswith("CI passed")


def test_a_stage_that_left_no_record_failed(tmp_path: Path, reports: dict[str, tuple[int, bytes]]) -> None:
    for name, _ in ci_summary.STAGES[:-1]:
        _stage(tmp_path, name, report=reports["passing"])
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_summary.py"), str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert _lines(proc.stdout)["fuzzing"] == "FAILED   did not run (no exit status recorded)"
    _stage(tmp_path, "fuzzing", rc=0)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_summary.py"), str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.endswith("CI passed\n")
    assert _lines(proc.stdout)["fuzzing"] == "ran      passed"


def test_a_machine_without_compilers_lacks_what_fuzzing_needs(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_summary.py"), "--needs", "fuzzing"],
                          capture_output=True, text=True, env={"PATH": str(tmp_path)}, check=False)
    assert (proc.returncode, proc.stdout) == (1, "neither clang nor gcc\n")


def test_a_machine_without_a_compiler_lacks_what_the_wheel_stage_needs(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_summary.py"), "--needs", "wheel"],
                          capture_output=True, text=True, env={"PATH": str(tmp_path)}, check=False)
    assert (proc.returncode, proc.stdout) == (1, "no C compiler (cc) to build the wheel\n")


def test_a_machine_without_chromium_or_apt_lacks_what_the_browser_stage_needs(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "FASTBENCH_CHROMIUM": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_summary.py"), "--needs", "browser"],
                          capture_output=True, text=True, env=env, check=False)
    assert (proc.returncode, proc.stdout) == (1, "no Chromium, and no apt-get to install one\n")
    # a Chromium on PATH is all it needs (a stand-in here: the stage would run it)
    (tmp_path / "chromium").write_text("#!/bin/sh\n")
    (tmp_path / "chromium").chmod(0o755)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_summary.py"), "--needs", "browser"],
                          capture_output=True, text=True, env=env, check=False)
    assert (proc.returncode, proc.stdout) == (0, "")


def test_ci_records_every_stage_and_ends_with_the_summary() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    for name, _ in ci_summary.STAGES:
        assert f'"$STAGES/{name}.rc"' in ci, name
        assert f"\ntook {name}\n" in ci, name  # each stage's duration, for the summary
    assert ci.rstrip().endswith('python scripts/ci_summary.py "$STAGES"')
    assert "pip install '.[test]' && python -m pytest\n" in ci  # the README's command, verbatim


UNJUDGED = """import pytest
from support import timing

pytestmark = pytest.mark.pure_python

def test_a_bound_left_by_a_sanitizer_build(monkeypatch):
    monkeypatch.setattr(timing, "BUILD_FLAVOUR", "asan")
    assert not timing.judges_client_speed()

def test_a_bound_judged_by_a_release_build(monkeypatch):
    monkeypatch.setattr(timing, "BUILD_FLAVOUR", "release")
    assert timing.judges_client_speed()
"""


def test_a_speed_bound_a_sanitizer_build_leaves_is_listed(tmp_path: Path) -> None:
    rc, report, out = _timing_run(tmp_path, UNJUDGED)
    assert rc == 0, out
    _stage(tmp_path, "sanitizers", report=(rc, report))
    got = ci_summary.outcome(tmp_path, "sanitizers")
    assert got.unjudged == ("test_timed::test_a_bound_left_by_a_sanitizer_build (asan build)",)
    _, text = ci_summary.summarize(tmp_path, lambda name: None)
    assert "speed not judged: test_timed::test_a_bound_left_by_a_sanitizer_build (asan build)" in text
