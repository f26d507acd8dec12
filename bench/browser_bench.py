"""Browser and web tools from a script: navigate+snapshot and click->snapshot latency on real
Chromium, and the wall time of extracting ten 200 ms pages in one script (keyless and Firecrawl)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from tests.fakes.firecrawl import FakeDocument, FakeFirecrawl
from tests.fixtures.browsers import LocalWebApp, chromium_problem

from .report import Metric

NAVIGATE_SNAPSHOT = """
import json, time
from hermes_tools import browser_navigate, browser_snapshot
browser_navigate(BASE + "/results?page=1"); browser_snapshot()  # the browser starts here
samples = []
for i in range(ROUNDS):
    t = time.perf_counter()
    browser_navigate(BASE + "/results?page=%d" % (i % 20 + 1))
    browser_snapshot()
    samples.append((time.perf_counter() - t) * 1000)
print(json.dumps(samples))
"""
CLICK_SNAPSHOT = """
import json, re, time
from hermes_tools import browser_navigate, browser_snapshot, browser_click
samples = []
browser_navigate(BASE + "/results?page=1")
page = browser_snapshot()["snapshot"]
while len(samples) < ROUNDS:
    next_page = re.search(r'link "Next page" (@e\\d+)', page)
    if next_page is None:
        browser_navigate(BASE + "/results?page=1")
        page = browser_snapshot()["snapshot"]
        continue
    t = time.perf_counter()
    browser_click(next_page.group(1))
    page = browser_snapshot()["snapshot"]
    samples.append((time.perf_counter() - t) * 1000)
print(json.dumps(samples))
"""
EXTRACT_ONE_CALL = """
import time
from hermes_tools import web_extract
t = time.perf_counter()
reply = web_extract(URLS, fresh=True)  # each sample fetches: the session's cache would serve them
assert reply["failed"] == 0, reply
print(time.perf_counter() - t)
"""
EXTRACT_PARALLEL = """
import time
from hermes_tools import web_extract, parallel
t = time.perf_counter()
replies = parallel([(web_extract, [u]) for u in URLS])
assert all(r["failed"] == 0 for r in replies), replies
print(time.perf_counter() - t)
"""


def _run(runtime: Runtime, code: str, **names: Any) -> Any:
    prelude = "".join(f"{name} = {value!r}\n" for name, value in names.items())
    result = runtime.execute(prelude + code, timeout=600, max_tool_calls=10_000)
    if not result.ok:
        raise RuntimeError(f"benchmark script failed: {result.error}")
    return json.loads(result.output.strip().splitlines()[-1])


def _browser_metrics(runtime: Runtime, app: LocalWebApp) -> list[Metric]:
    nav = Metric("browser_navigate + browser_snapshot", "ms", None, note="local page, from a script, per pair")
    click = Metric("browser_click (link) -> browser_snapshot", "ms", None, note="next results page, from a script")
    for _ in range(3):
        nav.samples.extend(_run(runtime, NAVIGATE_SNAPSHOT, BASE=app.url, ROUNDS=30))
        click.samples.extend(_run(runtime, CLICK_SNAPSHOT, BASE=app.url, ROUNDS=30))
    return [nav, click]


def _extract_metrics(work: Path, app: LocalWebApp) -> list[Metric]:
    keyless = Metric("web_extract 10 pages × 200 ms, keyless", "s", 0.5, note="one call; httpx + trafilatura")
    urls = [f"{app.url}/article/{n}?delay=200" for n in range(1, 11)]
    settings = Settings(data_dir=work / "data")
    with LocalBackend(str(work), settings=settings) as backend, Runtime(backend, settings=settings) as rt:
        for _ in range(7):
            keyless.samples.append(_run(rt, EXTRACT_ONE_CALL, URLS=urls))
    firecrawl_row = Metric("web_extract 10 pages × 200 ms, Firecrawl", "s", 0.5, note="parallel() of 10 calls; local v2 server")
    docs = [FakeDocument(f"https://pages.example.org/{n}", f"Page {n}", f"# Page {n}\n\n" + "text " * 2000) for n in range(10)]
    with FakeFirecrawl(docs, api_key="fc-bench", latency=0.2) as firecrawl:
        tuned = settings.with_overrides({"web.firecrawl_api_url": firecrawl.url, "web.firecrawl_api_key": "fc-bench"})
        with LocalBackend(str(work), settings=tuned) as backend, Runtime(backend, settings=tuned) as rt:
            for _ in range(7):
                firecrawl_row.samples.append(_run(rt, EXTRACT_PARALLEL, URLS=[d.url for d in docs]))
    return [keyless, firecrawl_row]


def run() -> list[Metric]:
    work = Path(tempfile.mkdtemp(prefix="herald-bench-browser-"))
    metrics: list[Metric] = []
    try:
        with LocalWebApp() as app:
            problem = chromium_problem()
            if problem:
                print(f"browser rows skipped: {problem}")
            else:
                settings = Settings(data_dir=work / "data")
                with LocalBackend(str(work), settings=settings) as backend, Runtime(
                    backend, settings=settings
                ) as runtime:
                    metrics.extend(_browser_metrics(runtime, app))
            metrics.extend(_extract_metrics(work, app))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return metrics
