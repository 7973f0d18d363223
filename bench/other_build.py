"""Another build of fastbench to measure beside this one: a venv's path as it is, or a git revision
exported and built once in its own venv under ~/.cache/fastbench/builds/<commit>, reused after.

The revision is exported with ``git archive``, not checked out as a worktree: nothing is registered in
the repository that other checkouts share, and a cache folder deleted leaves nothing stale behind.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fastbench" / "builds"
BUILT = "fastbench-build-done"  # written in the venv last: a build cut short is built again
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Build:
    label: str  # how the output names it: the revision as given and its commit, or the venv's path
    python: str


def python_of(path: Path) -> Path | None:
    """The interpreter a path names: itself, a venv's bin/python, or a tree's .venv/bin/python."""
    for candidate in (path, path / "bin" / "python", path / ".venv" / "bin" / "python"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def commit_of(revision: str, repo: Path = REPO) -> str | None:
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def build_revision(commit: str, repo: Path = REPO, cache: Path = CACHE, log: TextIO = sys.stderr) -> Path:
    """The python of ``commit``'s build, built first if the cache has no finished one. A lock keeps two
    runs from building the same commit at once."""
    tree = cache / commit
    python = tree / ".venv" / "bin" / "python"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{commit}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (tree / ".venv" / BUILT).exists():
            return python
        print(f"building {commit[:12]} in {tree} (once; a few minutes)", file=log, flush=True)
        if tree.exists():  # a build cut short: start clean
            subprocess.run(["rm", "-rf", str(tree)], check=True)
        tree.mkdir()
        archive = subprocess.Popen(["git", "-C", str(repo), "archive", commit], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise RuntimeError(f"git archive {commit} failed")
        # In place: an editable install and a venv keep absolute paths, so the tree is never moved after.
        subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "setuptools>=69", "Cython>=3.1,<4", "wheel"], check=True)
        subprocess.run([*pip, "--no-build-isolation", "-e", str(tree)], check=True, cwd=tree)
        (tree / ".venv" / BUILT).touch()
    return python


def resolve(spec: str, repo: Path = REPO, cache: Path = CACHE) -> Build:
    """A venv (or its python, or a tree holding .venv) if ``spec`` is such a path; else a git revision."""
    python = python_of(Path(spec).expanduser())
    if python is not None:
        return Build(label=spec, python=os.path.abspath(python))  # not resolved: a venv's python is a link
    commit = commit_of(spec, repo)
    if commit is None:
        raise ValueError(f"{spec!r} is neither a python, a venv nor a git revision of {repo}")
    return Build(label=f"{spec} ({commit[:7]})" if not commit.startswith(spec) else commit[:7],
                 python=str(build_revision(commit, repo, cache)))


def this_build() -> Build:
    """The interpreter running the harness, named by the commit its tree is at."""
    head = commit_of("HEAD")
    # changed where the build is made from (a bench script's change is no other build)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--",
                            "src", "csrc", "setup.py", "pyproject.toml"], capture_output=True, text=True).stdout.strip()
    label = "this tree" + (f" ({head[:7]}{', changed' if dirty else ''})" if head else "")
    return Build(label=label, python=sys.executable)
