"""Build and run ``bench/fast_server.c``: fastbench's synthetic server in C, for loads past one Python core.

The Python synthetic server (``fastbench.synthetic``) saturates one core at ~138k chunks/s; this C
twin speaks the same wire format in its plain mode (no faults, jitter, EOS or reasoning tokens) and
keeps its schedule far beyond that, so it can show whether one client process takes >= 200k chunks/s.

It is compiled with the system C compiler (``$CC``, else ``cc``, ``gcc`` or ``clang``) into
``~/.cache/fastbench/fast_server-<hash>/`` (``$XDG_CACHE_HOME`` is honoured) the first time, keyed by
a hash of the source, the compiler and the flags; later starts reuse the binary.

From Python, as :class:`fastbench.synthetic.SyntheticServer` (same options, same start/stop/stats)::

    with FastServer(ttft_ms=10, itl_ms=1.28, tokens_per_chunk="1-4") as srv:
        run_client(srv.base_url)
        print(srv.stats()["lateness"]["p99_ms"])

From the shell (builds if needed, then runs the server in the foreground with the flags given)::

    .venv/bin/python bench/fast_server.py --port 8001 --itl-ms 1.28
    .venv/bin/python bench/fast_server.py --build-only      # prints the binary's path
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from fastbench.synthetic import SyntheticServer

SOURCE = Path(__file__).resolve().parent / "fast_server.c"
CFLAGS: tuple[str, ...] = ("-O2", "-Wall", "-Wextra", "-std=gnu11")

__all__ = ["CFLAGS", "SOURCE", "CompilerNotFoundError", "FastServer", "build", "cache_dir", "find_compiler"]


class CompilerNotFoundError(RuntimeError):
    """No C compiler on this machine."""


def find_compiler() -> list[str] | None:
    """The C compiler's argv: ``$CC`` (may hold arguments, e.g. "ccache gcc"), else cc, gcc, clang."""
    env_cc = shlex.split(os.environ.get("CC", ""))
    if env_cc and shutil.which(env_cc[0]):
        return env_cc
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return [path]
    return None


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fastbench"


def build(force: bool = False) -> Path:
    """Compile fast_server.c unless the cached binary for this source, compiler and flags exists;
    returns the binary's path. Raises CompilerNotFoundError (no compiler) or RuntimeError (it failed)."""
    cc = find_compiler()
    if cc is None:
        raise CompilerNotFoundError("fast_server: no C compiler found (set $CC, or install cc, gcc or clang)")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + b"\0" + " ".join([*cc, *CFLAGS]).encode()).hexdigest()[:16]
    out_dir = cache_dir() / f"fast_server-{key}"
    exe = out_dir / "fast_server"
    if exe.is_file() and not force:
        return exe
    out_dir.mkdir(parents=True, exist_ok=True)
    # Compile the bytes that were hashed (a copy), to a temporary name, then rename: a concurrent build
    # or an edit of the source while this one runs can never leave a binary under the wrong hash.
    src_copy = out_dir / "fast_server.c"
    src_copy.write_bytes(source)
    tmp = out_dir / f"fast_server.tmp{os.getpid()}"
    proc = subprocess.run([*cc, *CFLAGS, "-o", str(tmp), str(src_copy)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"fast_server: {' '.join(cc)} failed (status {proc.returncode}):\n{proc.stderr}")
    os.replace(tmp, exe)
    return exe


class FastServer(SyntheticServer):
    """Starts the C server in a subprocess; the API of :class:`~fastbench.synthetic.SyntheticServer`.

    ``FastServer(ttft_ms=50, itl_ms=20, tokens_per_chunk="1-4", seed=0, model=...)``: keyword options
    become flags of the C server (--host, --port are set here; also --max-model-len, --default-max-tokens).
    Options of the Python server that the C one lacks (faults, jitter, --eos-prob, ...) make it exit
    with an error at start. ``metrics()`` is not served (404).
    """

    def __init__(self, *args: str, host: str = "127.0.0.1", startup_timeout_s: float = 20.0,
                 env: dict[str, str] | None = None, **options: Any) -> None:
        super().__init__(*args, host=host, startup_timeout_s=startup_timeout_s, env=env, **options)
        self.binary: Path | None = None

    def command(self) -> list[str]:
        if self.binary is None:
            self.binary = build()
        return [str(self.binary), "--host", self.host, "--port", "0", *self.argv]

    def __repr__(self) -> str:
        return f"FastServer({self.base_url or 'not started'}, args={self.argv!r})"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        exe = build(force="--rebuild" in args)
    except (CompilerNotFoundError, RuntimeError) as exc:
        print(exc, file=sys.stderr)
        return 2
    args = [a for a in args if a != "--rebuild"]
    if "--build-only" in args:
        print(exe)
        return 0
    os.execv(exe, [str(exe), *args])  # the server in this process: signals and exit status are its own


if __name__ == "__main__":
    sys.exit(main())
