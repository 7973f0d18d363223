"""A page opened in a real headless Chromium, watched through the Chrome DevTools protocol (over
aiohttp's WebSocket client, already a dependency): what the page logged, every request it made, and a
screenshot.

How "no network request" is proven, twice over:

- the DevTools Network domain reports every request the page starts (``Network.requestWillBeSent``:
  images, styles, fonts, scripts, iframes, prefetches, file:// reads of other files too), before it
  is sent: a request refused or failed later is still reported. The page's own file:// URL and
  ``data:`` URLs are the only ones a self-contained page may have;
- and nothing can leave the machine all the same: every host name resolves to nothing
  (``--host-resolver-rules``) and every connection goes to a proxy of ours on 127.0.0.1 that counts
  the request line and closes the connection. Chromium's flags switch most of its own traffic off;
  the calls they do not (network time, the component updater, sign-in: Google service hosts,
  ``browser_own``) are told apart by their host, and any other attempt is the page's.

``tests/study/test_report_browser.py`` checks that both detectors see a page that does reach out.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """$FASTBENCH_CHROMIUM when it names a program, else the first browser on PATH."""
    given = os.environ.get("FASTBENCH_CHROMIUM", "")
    if given and given.lower() not in ("1", "true", "yes") and shutil.which(given):
        return shutil.which(given)
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


# Chromium's own calls that its flags do not switch off (seen with Chromium 156: network time at
# clients2.google.com, the component updater at update.googleapis.com, sign-in at accounts.google.com;
# other versions call other Google service hosts) are told apart from the page's by their host. A
# page's request to such a host is still caught by the DevTools Network domain, and web fonts, the
# one such host pages do load, are not excused.
BROWSER_OWN_DOMAINS = ("google.com", "googleapis.com")
PAGE_HOSTS = frozenset({"fonts.googleapis.com"})


def browser_own(host: str) -> bool:
    return host not in PAGE_HOSTS and any(host == d or host.endswith("." + d) for d in BROWSER_OWN_DOMAINS)


def _host(request_line: str) -> str:
    """The host a proxy request line names (``CONNECT h:443 ...``, ``GET http://h/... ...``)."""
    parts = request_line.split()
    if len(parts) < 2:
        return ""
    target = parts[1].split("://", 1)[-1]
    return target.split("/", 1)[0].rsplit(":", 1)[0]


@dataclasses.dataclass
class PageReport:
    url: str
    console: list[str]  # console messages of level error or warning, "level: text"
    exceptions: list[str]  # uncaught exceptions
    log_errors: list[str]  # the browser's log entries of level error (failed loads, CSP violations)
    requests: list[str]  # every URL the page asked for, its own included
    proxy_attempts: list[str]  # the request line of each connection to the refusing proxy
    facts: dict[str, Any]  # what the page's DOM says (Runtime.evaluate of FACTS)
    screenshot: Path

    @property
    def outside_requests(self) -> list[str]:
        """What the page asked for beyond itself and data: URLs."""
        return [u for u in self.requests if u != self.url and not u.startswith("data:")]

    @property
    def page_proxy_attempts(self) -> list[str]:
        """The attempts to reach out that were not Chromium's own calls."""
        return [line for line in self.proxy_attempts if not browser_own(_host(line))]


# What the rendered page shows: evaluated in it after load.
FACTS = """(() => {
  const svgs = [...document.querySelectorAll('svg')];
  return {
    title: document.title,
    svgs: svgs.length,
    svgs_drawn: svgs.filter(s => {
      const r = s.getBoundingClientRect(); return r.width > 100 && r.height > 100;
    }).length,
    svg_texts: svgs.reduce((n, s) => n + s.querySelectorAll('text').length, 0),
    table_rows: document.querySelectorAll('#cells ~ table tbody tr').length,
    cards: document.querySelectorAll('details[id^="run-"]').length,
    card_tables: document.querySelectorAll('details .card table').length,
    height: document.documentElement.scrollHeight,
    text: document.body ? document.body.innerText.slice(0, 20000) : '',
  };
})()"""


class _RefusingProxy:
    """Keeps the first line of every request made to it (``CONNECT host:443 HTTP/1.1``, ``GET http://...``)
    and closes the connection without an answer."""

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                line = await asyncio.wait_for(reader.readline(), 5)
            except (asyncio.TimeoutError, OSError):
                line = b""
            self.attempts.append(line.decode("latin-1").strip() or "(a connection, no request line)")
            writer.close()

        self.server = await asyncio.start_server(refuse, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def _flags(profile: str, proxy_port: int) -> list[str]:
    flags = [
        "--headless", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,900",
        f"--user-data-dir={profile}", "--remote-debugging-port=0",
        # nothing leaves the machine: no name resolves, every connection goes to our refusing proxy
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", f"--proxy-server=http://127.0.0.1:{proxy_port}",
        "--proxy-bypass-list=<-loopback>",
        # Chromium's own traffic off, so that whatever the proxy sees is the page's
        "--no-first-run", "--no-default-browser-check", "--disable-background-networking", "--disable-sync",
        "--disable-component-update", "--disable-default-apps", "--disable-extensions",
        "--disable-domain-reliability", "--disable-client-side-phishing-detection", "--metrics-recording-only",
        "--disable-features=OptimizationHints,MediaRouter,Translate,InterestFeedContentSuggestions",
        "about:blank",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        flags.insert(0, "--no-sandbox")  # Chromium refuses to run as root with its sandbox (CI containers)
    return flags


async def _devtools_port(profile: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    deadline = asyncio.get_running_loop().time() + timeout_s
    marker = profile / "DevToolsActivePort"
    while asyncio.get_running_loop().time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with status {proc.returncode} before it listened")
        if marker.exists():
            text = marker.read_text().split()
            if text:
                return int(text[0])
        await asyncio.sleep(0.05)
    raise RuntimeError(f"chromium did not open its DevTools port in {timeout_s:.0f} s")


async def open_page(chromium: str, page: Path, screenshot: Path, *, timeout_s: float = 60.0,
                    settle_s: float = 1.0) -> PageReport:
    """Open ``page`` (a file) in headless Chromium and report what happened (see the module docstring)."""
    proxy = _RefusingProxy()
    proxy_port = await proxy.start()
    profile = Path(tempfile.mkdtemp(prefix="fastbench-chromium-"))
    proc = subprocess.Popen([chromium, *_flags(str(profile), proxy_port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = page.resolve().as_uri()
    console: list[str] = []
    exceptions: list[str] = []
    log_errors: list[str] = []
    requests: list[str] = []
    try:
        port = await _devtools_port(profile, proc, timeout_s)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = await response.json()
            ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
            async with session.ws_connect(ws_url, max_msg_size=0) as ws:
                ids = itertools.count(1)
                pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
                loaded = asyncio.Event()
                last_event = [asyncio.get_running_loop().time()]

                async def reader() -> None:
                    async for message in ws:
                        data = message.json()
                        if "id" in data:
                            future = pending.pop(data["id"], None)
                            if future is not None and not future.done():
                                future.set_result(data)
                            continue
                        last_event[0] = asyncio.get_running_loop().time()
                        method, params = data.get("method"), data.get("params", {})
                        if method == "Network.requestWillBeSent":
                            requests.append(params["request"]["url"])
                        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning",
                                                                                              "assert"):
                            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
                            console.append(f"{params['type']}: {text}")
                        elif method == "Runtime.exceptionThrown":
                            details = params["exceptionDetails"]
                            exceptions.append(str(details.get("exception", {}).get("description") or details["text"]))
                        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                            log_errors.append(f"{params['entry']['source']}: {params['entry']['text']}")
                        elif method == "Page.loadEventFired":
                            loaded.set()

                async def call(method: str, **params: Any) -> dict[str, Any]:
                    number = next(ids)
                    future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
                    pending[number] = future
                    await ws.send_json({"id": number, "method": method, "params": params})
                    reply = await asyncio.wait_for(future, timeout_s)
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return dict(reply.get("result", {}))

                task = asyncio.create_task(reader())
                try:
                    for domain in ("Network", "Runtime", "Log", "Page"):
                        await call(f"{domain}.enable")
                    await call("Page.navigate", url=url)
                    await asyncio.wait_for(loaded.wait(), timeout_s)
                    # quiet for settle_s: whatever the page would start late has started
                    while asyncio.get_running_loop().time() - last_event[0] < settle_s:
                        await asyncio.sleep(0.1)
                    facts = (await call("Runtime.evaluate", expression=FACTS, returnByValue=True))["result"]["value"]
                    height = min(int(facts.get("height") or 900), 16000)
                    await call("Emulation.setDeviceMetricsOverride", width=1280, height=height, deviceScaleFactor=1,
                               mobile=False)
                    shot = await call("Page.captureScreenshot", format="png")
                    screenshot.parent.mkdir(parents=True, exist_ok=True)
                    screenshot.write_bytes(base64.b64decode(shot["data"]))
                    await asyncio.sleep(0.2)  # a request the resize started is reported too
                finally:
                    task.cancel()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        await proxy.stop()
        shutil.rmtree(profile, ignore_errors=True)
    return PageReport(url, console, exceptions, log_errors, requests, proxy.attempts, facts, screenshot)
