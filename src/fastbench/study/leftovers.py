"""What a killed writer leaves in a store, found and removed once its process is gone.

A writer is killed (SIGKILL, a power cut) in the middle of writing: a run's folder still under its temporary
name, ``runs/.tmp-PID-RANDOM`` (or ``.tmp-probe-PID-RANDOM``), or a file written whole through a temporary
beside it: ``.NAME.PID.RANDOM.tmp`` (``atomicfile.write_bytes_atomic``, every file's one writer) or
``.NAME.tmp-PID`` (a sweep's summary as earlier versions wrote it). Nothing reads them, and a run's records
make them tens of megabytes. Each names its writer's process: it is removed only when no process of that id
runs on this host, so a writer at work is never disturbed. (A store shared between hosts over a network file
system cannot tell another host's writer from a dead one: clean it from a host while no other writes.)
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

__all__ = ("remove_leftovers",)

_RUN_FOLDER = re.compile(r"\.tmp-(?:probe-)?(\d+)-[0-9a-f]+")
_FILE = re.compile(r"\..+\.(\d+)\.[0-9a-f]+\.tmp|\..+\.tmp-(\d+)")


def remove_leftovers(root: Path, runs_dir: Path) -> list[str]:
    """Remove the temporaries of writers that are no longer running under ``root`` (a run's folder in
    ``runs_dir`` is never entered: it was written whole); return one line per thing removed, with its size."""
    removed: list[str] = []
    for directory, folders, files in os.walk(root):
        here = Path(directory)
        if here == runs_dir:
            for name in folders:
                match = _RUN_FOLDER.fullmatch(name)
                if match is None:
                    continue
                if _gone(int(match.group(1))):
                    size = _size(here / name)
                    shutil.rmtree(here / name, ignore_errors=True)
                    if not (here / name).exists():
                        removed.append(f"{here / name}/ ({_mb(size)}, a run folder its killed writer left)")
            folders[:] = []  # a stored run's folder holds nothing temporary: not entered
        for name in files:
            match = _FILE.fullmatch(name)
            if match is None or not _gone(int(match.group(1) or match.group(2))):
                continue
            path = here / name
            try:
                size = path.stat().st_size
                path.unlink()
            except OSError:
                continue  # gone meanwhile, or not ours to remove: left as it is
            removed.append(f"{path} ({_mb(size)}, a file its killed writer left)")
    return removed


def _gone(pid: int) -> bool:
    """No process of this id runs on this host (one of another user's still counts as running)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _size(folder: Path) -> int:
    total = 0
    for directory, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                pass
    return total


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
