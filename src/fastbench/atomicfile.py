"""Files written whole: a reader, or a process killed mid-write, never leaves or sees half a file.

A leaf: the writers of results, the store and the study's pages all use it, and it imports nothing of
fastbench, so that reading a store (``fastbench runs``) does not pay for what writing a result needs.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ("fsync_directory", "write_bytes_atomic", "write_synced")


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory, fsync and os.replace: the one
    atomic writer of every file fastbench leaves (result files, the study's pages, a sweep's summary)."""
    target = Path(path)
    tmp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        write_synced(tmp, data)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)


def write_synced(path: str | os.PathLike[str], data: bytes) -> None:
    """Create ``path`` (never over an existing file) holding ``data``, on the disk before this returns:
    a file of a folder that is renamed into place whole (the store's runs) or of :func:`write_bytes_atomic`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Put a rename in ``directory`` on the disk; where the file system cannot, the rename still stands."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
