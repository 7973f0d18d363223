"""`fastbench report`'s page in a real headless Chromium (marker `browser`: pass --run-browser or set
FASTBENCH_CHROMIUM): it renders, logs no console error, and asks for nothing outside itself. The
screenshot is kept ($FASTBENCH_TEST_OUTPUT, else the test's temporary directory) and its path recorded
in the JUnit report. The harness is first shown a page that does reach out, so that a pass means the
detectors work, not that they are blind."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from support.browser import PageReport, find_chromium, open_page
from support.study import fastbench, make_study

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def chromium() -> str:
    found = find_chromium()
    if found is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium)")
    return found


def shots(tmp_path: Path) -> Path:
    given = os.environ.get("FASTBENCH_TEST_OUTPUT")
    return Path(given) if given else tmp_path


def test_the_harness_sees_a_page_that_reaches_out(chromium: str, tmp_path: Path) -> None:
    page = tmp_path / "leaky.html"
    page.write_text('<!DOCTYPE html><html><head><title>leaky</title>'
                    '<link rel="stylesheet" href="https://cdn.example.com/x.css"></head>'
                    '<body><img src="http://example.com/x.png"><script>console.error("boom")</script>'
                    "<p>text</p></body></html>")
    report = asyncio.run(open_page(chromium, page, tmp_path / "leaky.png"))
    assert report.console == ["error: boom"]
    assert sorted(report.outside_requests) == ["http://example.com/x.png", "https://cdn.example.com/x.css"]
    hosts = " ".join(report.page_proxy_attempts)
    assert "example.com/x.png" in hosts and "cdn.example.com:443" in hosts
    assert report.log_errors  # the failed loads
    assert report.facts["title"] == "leaky" and (tmp_path / "leaky.png").read_bytes().startswith(b"\x89PNG")


def test_the_report_renders_offline_and_quietly(chromium: str, tmp_path: Path,
                                                record_testsuite_property: Callable[[str, object], None]) -> None:
    sweep = make_study(tmp_path)
    done = fastbench("report", sweep.name, "--out", "report", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    screenshot = shots(tmp_path) / "fastbench-report.png"
    report: PageReport = asyncio.run(open_page(chromium, tmp_path / "report" / "report.html", screenshot))
    record_testsuite_property("screenshot", str(screenshot.resolve()))
    print(f"screenshot: {screenshot.resolve()}")
    assert report.console == [] and report.exceptions == [] and report.log_errors == []
    assert report.outside_requests == [], report.outside_requests
    assert report.page_proxy_attempts == [], report.page_proxy_attempts
    facts = report.facts
    assert facts["title"] == "demo-study"
    assert facts["svgs"] == facts["svgs_drawn"] >= 3  # crossover, Pareto, latency (and acceptance), drawn
    assert facts["svg_texts"] > 50  # the figures' text is text
    assert facts["table_rows"] == 6  # base and spec at c = 1, 2 done; gone's two points failed
    assert facts["cards"] == 4 and facts["card_tables"] >= 4 * 2  # each run's card, its tables rendered
    assert "failed" in facts["text"] and "Per-stream decode tok/s" in facts["text"]
    shot = screenshot.read_bytes()
    assert shot.startswith(b"\x89PNG") and len(shot) > 50_000
