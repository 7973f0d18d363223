"""The server's control plane: /health, /v1/models, /version, /tokenize, and the session /metrics is read with.

Every request fastbench makes of a server besides the measured ones goes through here, built one
way: the URL is the server's root and a path (:func:`url`), the API key goes as a bearer token
(:func:`auth_headers`), each kind of call has its timeout below, and no failure's text holds the key.

Two transports, each where it is the honest fit:

* blocking (urllib): the launcher's readiness probe and the engine's version. ``wait_ready`` blocks
  by contract, and ``await_ready`` runs the same probe in a thread, off the event loop;
* on the event loop (aiohttp, a session from :func:`http_session`): the served models, ``/version``,
  ``/tokenize`` (dozens at once while prompts are counted) and ``/metrics`` (``prom.MetricsScraper``).
"""

from __future__ import annotations

import asyncio
import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple

import aiohttp
import orjson

from fastbench.exceptions import ServerError
from fastbench.redact import redact_secret

__all__ = (
    "ServedModels",
    "auth_headers",
    "engine_version",
    "fetch_model_info",
    "http_session",
    "make_server_tokenize",
    "probe_ready",
    "server_tokenize",
    "server_version",
    "url",
)

# A probe that does not answer in this long counts as "not ready yet": the launcher polls again.
PROBE_TIMEOUT_S = 2.0
# How often the launcher asks whether the server is ready.
READY_POLL_S = 0.25
# /version is a nicety of the result: a server slow to tell it costs the run little.
VERSION_TIMEOUT_S = 5.0
# /v1/models and /tokenize: a loaded server may take a while, but the run needs their answers.
REQUEST_TIMEOUT_S = 30.0
# One /metrics read during the window; a slow one is counted as failed, never waited for long.
METRICS_TIMEOUT_S = 2.0
_SHORT_ERROR_CHARS = 200
# Where each engine tells its version, and under which key (the launcher asks each in turn).
ENGINE_VERSION_SOURCES = (("/version", "version"), ("/props", "build_info"), ("/get_server_info", "version"))


def url(base_url: str, path: str) -> str:
    """The URL of ``path`` (``/v1/models``) on the server whose root is ``base_url``."""
    return base_url.rstrip("/") + path


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The API key as a bearer token, as every OpenAI-compatible server takes it."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


# -- blocking: the launcher's readiness and the engine's version -----------------------------------


def _get(base_url: str, path: str, api_key: str | None) -> tuple[int, bytes]:
    request = urllib.request.Request(url(base_url, path), headers=auth_headers(api_key))
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def probe_ready(base_url: str, expected: Sequence[str] | None, api_key: str | None) -> tuple[bool, str]:
    """/health answers 200 and /v1/models lists an expected model (any model when expected is None);
    returns whether it is ready and what the probe saw."""
    try:
        status, _ = _get(base_url, "/health", api_key)
        if status != 200:
            return False, f"/health answers {status}"
        status, body = _get(base_url, "/v1/models", api_key)
    except (OSError, urllib.error.URLError, http.client.HTTPException) as exc:  # HTTPException: not HTTP
        reason = getattr(exc, "reason", None) or f"{type(exc).__name__}: {exc}"
        return False, f"not answering HTTP ({reason})"
    if status != 200:
        return False, f"/v1/models answers {status}"
    try:
        listed = [str(m.get("id")) for m in orjson.loads(body).get("data", [])]
    except (orjson.JSONDecodeError, AttributeError, TypeError):  # TypeError: {"data": null}
        return False, "/v1/models answers something other than a model list"
    if not listed:
        return False, "/v1/models lists no model yet"
    if expected is not None and not set(expected) & set(listed):
        return False, f"/v1/models lists {', '.join(listed[:5])} but not {', '.join(expected)}"
    return True, "ready"


def engine_version(base_url: str, api_key: str | None) -> str | None:
    """The engine's version: /version (vLLM, SGLang), else llama.cpp's /props build_info, else
    SGLang's /get_server_info; None when none of them tells it."""
    for path, key in ENGINE_VERSION_SOURCES:
        try:
            status, body = _get(base_url, path, api_key)
            if status == 200:
                value = orjson.loads(body).get(key)
                if value:
                    return str(value)
        except (OSError, urllib.error.URLError, http.client.HTTPException, orjson.JSONDecodeError,
                AttributeError):
            continue
    return None


# -- on the event loop: models, version, tokenize, and the session for /metrics ---------------------


def http_session(verify_tls: bool = True, headers: Mapping[str, str] | None = None) -> aiohttp.ClientSession:
    """An aiohttp session for the control plane and /metrics; ``verify_tls`` False (``--insecure``)
    takes an https server's certificate unchecked, as the streams' connections do; ``headers``
    (--header) go with every request, as with the streams (a gateway may need them)."""
    return aiohttp.ClientSession(connector=None if verify_tls else aiohttp.TCPConnector(ssl=False),
                                 headers=dict(headers or {}))


def _one_line(text: str, api_key: str | None) -> str:
    """One short line, with the API key removed even if a server echoed it back."""
    return redact_secret(" ".join(text.split()), api_key)[:_SHORT_ERROR_CHARS]


def client_error_text(exc: aiohttp.ClientError, api_key: str | None) -> str:
    """Why a request failed, in a line. A refused or unresolvable connection is said plainly
    (aiohttp's own text names an "ssl:default" even for http); a TLS failure keeps aiohttp's text,
    which says what was wrong with the certificate."""
    tls = (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError)
    if isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(exc, tls):
        os_error = exc.os_error
        if isinstance(os_error, OSError) and os_error.errno and os_error.errno > 0:
            why = os.strerror(os_error.errno)  # "Connection refused", not asyncio's "Connect call failed"
        else:  # a name that does not resolve (socket.gaierror: its own text), or no errno at all
            why = getattr(os_error, "strerror", None) or str(os_error)
        return f"cannot connect to {exc.host}:{exc.port} ({why})"
    return _one_line(f"{type(exc).__name__}: {exc}", api_key)


async def _request_json(
    session: aiohttp.ClientSession,
    method: str,
    target: str,
    api_key: str | None,
    payload: dict[str, Any] | None,
    timeout_s: float,
) -> Any:
    """One JSON request. Every failure becomes a ServerError whose message never holds the key."""
    headers = auth_headers(api_key)
    data = None
    if payload is not None:
        headers["Content-Type"] = "application/json"
        data = orjson.dumps(payload)
    try:
        async with session.request(
            method, target, data=data, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            raw = await resp.read()
            status = resp.status
    except asyncio.TimeoutError:
        raise ServerError(f"{method} {target}: no answer within {timeout_s:g} s") from None
    except aiohttp.ClientError as exc:
        raise ServerError(f"{method} {target} failed: {client_error_text(exc, api_key)}") from None
    if status != 200:
        body = _one_line(raw.decode("utf-8", "replace"), api_key)
        hint = " (check --api-key)" if status in (401, 403) else ""
        raise ServerError(f"{method} {target} answered HTTP {status}{hint}: {body}")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ServerError(f"{method} {target} answered with a body that is not JSON") from None


class ServedModels(NamedTuple):
    """What ``GET /v1/models`` says: the served ids, the first model's context length (vLLM gives
    ``max_model_len``, llama.cpp a slot's ``meta.n_ctx``), each id's ``root`` where given (vLLM:
    what it loaded, e.g. the local directory behind a ``--served-model-name``) and ``meta`` where
    given (llama.cpp: ``n_params``, ``ftype``, ``n_ctx``... of the loaded GGUF)."""

    ids: list[str]
    max_model_len: int | None
    roots: dict[str, str]
    metas: dict[str, dict[str, Any]]


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


async def fetch_model_info(
    base_url: str, session: aiohttp.ClientSession, api_key: str | None, *,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> ServedModels:
    """Read ``GET /v1/models`` (see :class:`ServedModels`).

    :param base_url: server root, e.g. ``http://127.0.0.1:8000``.
    :param api_key: sent as a bearer token when given; never appears in an error message.
    :raises ServerError: unreachable server, non-200 answer, or a body of the wrong shape.
    """
    target = url(base_url, "/v1/models")
    doc = await _request_json(session, "GET", target, api_key, None, timeout_s)
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise ServerError(f"GET {target}: expected an OpenAI model list ({{'data': [...]}})")
    ids = [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
    max_model_len: int | None = None
    if data and isinstance(data[0], dict):
        meta = data[0].get("meta")
        # vLLM's max_model_len; else llama.cpp's n_ctx, the context of one slot (-c / -np), which is
        # what one request may fill
        for value in (data[0].get("max_model_len"), meta.get("n_ctx") if isinstance(meta, dict) else None):
            if _is_count(value):
                max_model_len = value
                break
    roots = {str(m["id"]): m["root"] for m in data
             if isinstance(m, dict) and "id" in m and isinstance(m.get("root"), str) and m["root"]}
    metas = {str(m["id"]): m["meta"] for m in data
             if isinstance(m, dict) and "id" in m and isinstance(m.get("meta"), dict)}
    return ServedModels(ids, max_model_len, roots, metas)


async def server_version(base_url: str, session: aiohttp.ClientSession, api_key: str | None) -> str | None:
    """What ``GET /version`` says (the result's ``server.version``); None when the server has no
    such endpoint or does not answer it."""
    try:
        doc = await _request_json(session, "GET", url(base_url, "/version"), api_key, None, VERSION_TIMEOUT_S)
    except ServerError:
        return None
    version = doc.get("version") if isinstance(doc, dict) else None
    return str(version) if version is not None else None


async def server_tokenize(
    base_url: str,
    session: aiohttp.ClientSession,
    api_key: str | None,
    model: str,
    prompt: str,
    *,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> int:
    """Count the tokens of ``prompt`` with the server's ``POST /tokenize`` (vLLM): ``{"model", "prompt"}``
    in, ``"count"`` out. The count includes the special tokens the server adds (e.g. BOS).

    :raises ServerError: unreachable server, no /tokenize endpoint, or an answer without a count.
    """
    target = url(base_url, "/tokenize")
    doc = await _request_json(session, "POST", target, api_key, {"model": model, "prompt": prompt}, timeout_s)
    if isinstance(doc, dict):
        count = doc.get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            return count
        tokens = doc.get("tokens")
        if isinstance(tokens, list) and (tokens or not prompt):
            return len(tokens)
    # llama.cpp's /tokenize reads "content" and answers {"tokens": []} to a "prompt".
    doc = await _request_json(session, "POST", target, api_key, {"content": prompt}, timeout_s)
    tokens = doc.get("tokens") if isinstance(doc, dict) else None
    if isinstance(tokens, list) and (tokens or not prompt):
        return len(tokens)
    raise ServerError(f"POST {target}: answer has no token count")


def make_server_tokenize(
    base_url: str, session: aiohttp.ClientSession, api_key: str | None, model: str
) -> Callable[[str], Awaitable[int]]:  # load.tokens.TokenizeFn
    """The ``tokenize`` argument of ``datasets.build_workload``, bound to one server and model."""

    async def tokenize(prompt: str) -> int:
        return await server_tokenize(base_url, session, api_key, model, prompt)

    return tokenize
