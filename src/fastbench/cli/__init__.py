"""The command line: ``fastbench`` (``command``), its ``--config`` TOML files (``tomlconfig``),
``fastbench validate`` (``validate``), ``fastbench runs`` and ``fastbench compare``. The faces over the
Python API; nothing below imports them."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from fastbench.cli import command

__all__ = ("main",)


def main(argv: Sequence[str] | None = None) -> int:
    """``fastbench``. Output piped into a reader that stops early (``| head``) ends it quietly, as
    other command-line tools do, with the status a SIGPIPE would give."""
    try:
        try:
            return command.main(argv)
        finally:
            sys.stdout.flush()  # here (--help's SystemExit too), so that a closed pipe is found inside the try
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush cannot fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # SIGPIPE
