"""Secrets kept out of everything fastbench shows or writes: command lines, logs, result files, pipes.

``Secrets`` knows every secret of one run (the client's API key, the keys and tokens in the engine's
arguments, in --server-env and --header, and secret-named variables of fastbench's own environment
such as HF_TOKEN) and is the one scrubber every writer passes its text, objects, bytes and argv
through. A value is hidden by what it is (a flag's identity, a header's or a variable's name, a known
secret's literal text), never by a substring of a flag's name: ``--max-tokens=8`` and
``--tokenizer=PATH`` stay readable, so a saved command can be run again.

A leaf: the launcher, the datasets and the writers all use it, and it imports nothing of fastbench.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

REDACTED = "***"
# Flags whose value is a secret, by identity: fastbench's --api-key and the engines' (vLLM, SGLang and
# llama.cpp take --api-key; vLLM --hf-token).
SECRET_FLAGS = ("--api-key", "--hf-token")
# Flags whose values are NAME=VALUE items with a secret when NAME says so (fastbench's, and docker's -e).
_NAMED_VALUE_FLAGS = ("--header", "--server-env", "--env", "-e")
# An environment variable whose name says it holds a credential: HF_TOKEN, OPENAI_API_KEY, DB_PASSWORD.
_SECRET_VARIABLE = re.compile(r"(?i)^[a-z_][a-z0-9_]*(?:token|key|secret|password)$")
# NAME_TOKEN=value, NAME_KEY=value, ... as in "--env HF_TOKEN=hf_abc" or "OPENAI_API_KEY=sk-..."
_ENV_SECRET = re.compile(r"\b([A-Z][A-Z0-9_]*(?:TOKEN|KEY|SECRET|PASSWORD)=)(?!\*\*\*)(\S+)")
_FLAG_SECRET = re.compile(r"(--(?:api-key|hf-token)(?:=|\s+))(?!\*\*\*)(\S+)")
# An HTTP header whose name says it carries a credential (Authorization, x-api-key, Cookie, ...).
_CREDENTIAL_HEADER = re.compile(r"(?i)[a-z0-9-]*(?:authorization|cookie|key|token|secret|password)[a-z0-9-]*")
_URL_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?!\*\*\*@)[^/@\s]+@")  # scheme://user:pass@
# A real key is 8 characters or more; a variable of fastbench's environment shorter than that (FOO_KEY=1)
# is no credential worth mangling every "1" of a log for.
LONG_SECRET = 8
_Doc = TypeVar("_Doc")


def _short_pattern(secret: str) -> str:
    # whole tokens only: not inside a word, a flag, a number ("1.5"), a path or base64 ("/1+")
    return r"(?<![\w\-+/.])" + re.escape(secret) + r"(?![\w\-+/]|\.\w)"


def redact_secret(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` replaced by ``***``: wherever it appears when it is 8 characters or
    more (a real key, which may sit inside an escape, a URL-encoded string or a longer token), and
    where it stands as a whole token when shorter, so that a local key such as "EMPTY" or "1"
    does not turn "EMPTYING" or "11-30 12:01" into a mangled log line."""
    if not secret:
        return text
    if len(secret) >= LONG_SECRET:
        return text.replace(secret, REDACTED)
    return re.sub(_short_pattern(secret), REDACTED, text)


def _flag_value(arg: str, flags: Sequence[str]) -> tuple[str, str] | None:
    """``("--flag", "value")`` for an ``--flag=value`` argument of one of ``flags``; else None."""
    name, sep, value = arg.partition("=")
    return (name, value) if sep and name in flags else None


def _secret_item(item: str) -> bool:
    """Whether a NAME=VALUE item (a header, an environment variable) carries a credential by its name."""
    name, sep, value = item.partition("=")
    if not (sep and value) or name.startswith("-"):  # --max-num-batched-tokens=8192 is a flag, no name
        return False
    return bool(_SECRET_VARIABLE.match(name) or _CREDENTIAL_HEADER.fullmatch(name))


class Secrets:
    """Every secret one run knows, and the one way to hide them in what it writes.

    ``values`` holds the literal secrets, longest first (a key inside another is hidden whole);
    :meth:`text` hides them, :meth:`log` also what the rules recognise without knowing the value
    (``--api-key X``, ``NAME_TOKEN=X``, a URL's user:password@), :meth:`obj` a JSON-like object's
    strings, :meth:`data` bytes (a JSONL file, a log read from a pipe), :meth:`argv` a command line."""

    def __init__(self, values: Iterable[str | None] = ()) -> None:
        kept = {value for value in values if value and value.strip() and value != REDACTED}
        self.values = tuple(sorted(kept, key=lambda v: (-len(v), v)))
        short = [_short_pattern(v) for v in self.values if len(v) < LONG_SECRET]
        self._short = re.compile("|".join(short)) if short else None
        self._short_bytes = re.compile("|".join(short).encode()) if short else None
        long_ones = [v for v in self.values if len(v) >= LONG_SECRET]
        # JSON escapes a '"' or a '\\' inside a key: the bytes of a JSON file hold that form
        escaped = {v.replace("\\", "\\\\").replace('"', '\\"') for v in long_ones}
        self._long_bytes = sorted({v.encode() for v in (*long_ones, *escaped)}, key=len, reverse=True)

    @classmethod
    def of_run(cls, *, api_key: str | None = None, headers: Mapping[str, str] | None = None,
               engine_args: Sequence[str] = (), docker_args: Sequence[str] = (), env: Sequence[str] = (),
               environ: Mapping[str, str] | None = None) -> Secrets:
        """The secrets of a run: its API key, the credential headers' values (and a bearer token's
        token), the values of the engine's --api-key / --hf-token and of secret-named NAME=VALUE items
        (--server-env, docker's -e), and of fastbench's own secret-named variables (``environ``,
        default os.environ; those of 8 characters or more)."""
        found: list[str | None] = [api_key]
        for name, value in (headers or {}).items():
            if _CREDENTIAL_HEADER.fullmatch(name):
                found += [value, value.partition(" ")[2]]  # "Bearer X": X alone too, as a server echoes it
        for argv in (engine_args, docker_args):
            for i, arg in enumerate(argv):
                if arg in SECRET_FLAGS and i + 1 < len(argv):
                    found.append(argv[i + 1])
                elif (flag := _flag_value(arg, SECRET_FLAGS)) is not None:
                    found.append(flag[1])
                elif _secret_item(arg):
                    found.append(arg.partition("=")[2])
        found += [item.partition("=")[2] for item in env if _secret_item(item)]
        environ = os.environ if environ is None else environ
        found += [value for name, value in environ.items()
                  if _SECRET_VARIABLE.match(name) and len(value) >= LONG_SECRET]
        return cls(found)

    @classmethod
    def of_config(cls, config: Any) -> Secrets:
        """The secrets of a BenchConfig (read by attribute: this leaf imports no other module)."""
        launch = getattr(config, "launch", None)
        return cls.of_run(api_key=config.api_key, headers=config.headers,
                          engine_args=launch.engine_args if launch is not None else (),
                          docker_args=launch.docker_args if launch is not None else (),
                          env=launch.env if launch is not None else ())

    def __bool__(self) -> bool:
        return bool(self.values)

    def text(self, text: str) -> str:
        """``text`` with every known secret replaced by ``***`` (short ones as whole tokens only)."""
        for value in self.values:
            if len(value) >= LONG_SECRET:
                text = text.replace(value, REDACTED)
        return self._short.sub(REDACTED, text) if self._short is not None else text

    def log(self, text: str) -> str:
        """Free text (a log, a shell command): the known secrets, and what the rules recognise."""
        return redact_text(self.text(text))

    def obj(self, obj: _Doc) -> _Doc:
        """A JSON-like object with every known secret hidden in its strings (dict keys left as they are;
        a tuple comes back a list, as JSON has it)."""
        if not self.values:
            return obj
        if isinstance(obj, str):
            return cast(_Doc, self.text(obj))
        if isinstance(obj, dict):
            return cast(_Doc, {key: self.obj(value) for key, value in obj.items()})
        if isinstance(obj, (list, tuple)):
            return cast(_Doc, [self.obj(value) for value in obj])
        return obj

    def data(self, data: bytes) -> bytes:
        """Bytes (UTF-8 text, a JSONL file) with every known secret hidden, at the speed of bytes.replace."""
        for value in self._long_bytes:
            data = data.replace(value, REDACTED.encode())
        return self._short_bytes.sub(REDACTED.encode(), data) if self._short_bytes is not None else data

    def argv(self, argv: Sequence[str]) -> list[str]:
        """A command line with the secrets hidden: the value of ``--api-key`` and ``--hf-token`` (either
        form), of a credential --header or a secret-named --server-env, and the known secrets wherever
        they stand; every other argument as it was, so that the line runs again."""
        out: list[str] = []
        hide_next = named_values = False
        for arg in argv:
            if hide_next:
                out.append(REDACTED)
                hide_next = False
                continue
            if arg in SECRET_FLAGS:
                out.append(arg)
                hide_next = True
                continue
            named = _flag_value(arg, _NAMED_VALUE_FLAGS)  # --header=Authorization=Bearer x
            flag = _flag_value(arg, SECRET_FLAGS)
            if flag is not None:
                out.append(f"{flag[0]}={REDACTED}")
            elif named is not None and _secret_item(named[1]):
                out.append(f"{named[0]}={named[1].partition('=')[0]}={REDACTED}")
            elif named_values and not arg.startswith("-") and _secret_item(arg):
                out.append(arg.partition("=")[0] + "=" + REDACTED)
            else:
                out.append(self.log(arg))
            if arg.startswith("-"):  # --header takes several NAME=VALUE items; any other flag ends them
                named_values = arg in _NAMED_VALUE_FLAGS
        return out


NO_SECRETS = Secrets()  # the default of a writer given none


def redact_argv(argv: Sequence[str], secret: str | None = None) -> list[str]:
    """A command line with the API key (``secret``) and the secrets its flags say are secrets hidden
    (see :meth:`Secrets.argv`)."""
    return Secrets([secret]).argv(argv)


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` with the value of each one whose name says it carries a credential replaced by ``***``."""
    return {name: REDACTED if _CREDENTIAL_HEADER.fullmatch(name) else value for name, value in headers.items()}


def redact_text(text: str, secret: str | None = None) -> str:
    """Free text (a shell command) with API keys, NAME_TOKEN=/NAME_KEY= values and a URL's
    user:password@ replaced by ``***``."""
    text = redact_secret(text, secret)
    text = _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _FLAG_SECRET.sub(lambda m: m.group(1) + REDACTED, text)
    return _ENV_SECRET.sub(lambda m: m.group(1) + REDACTED, text)


def shell_join(argv: Sequence[str]) -> str:
    """Join a command line for display, quoting as a shell needs but leaving ``***`` readable."""
    parts = []
    for arg in argv:
        if arg == REDACTED or arg.endswith("=" + REDACTED):
            parts.append(arg)
        else:
            parts.append(shlex.quote(arg))
    return " ".join(parts)
