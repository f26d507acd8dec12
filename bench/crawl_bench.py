"""web_crawl from a script over a generated documentation site (an index, sections, pages with a
sidebar and prev/next links, ~12 KB of HTML each) on 127.0.0.1: 50 pages on the session's first
call, the same crawl again (served by the session's cache), and 50 pages through a proxy that
adds 50 ms each way (the per-host limit and level-by-level parallelism at work)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from tests.fixtures.latency_proxy import LatencyProxy
from tests.web.site import Site, html

from .report import Metric

SECTIONS, PAGES_PER_SECTION = 6, 10
PARAGRAPH = ("The configuration loader reads each file once, merges the values in order and reports the "
             "first key it cannot parse, naming the file and the line. ") * 6
CRAWL = """
import time
from hermes_tools import web_crawl
t = time.perf_counter()
reply = web_crawl(START, max_pages=50, fresh=FRESH)
assert reply["pages"] == 50 and reply["failed"] == 0, reply
print(time.perf_counter() - t)
"""


def docs_site() -> Site:
    site = Site()
    sidebar = [(f"/s{s}/", f"Section {s}") for s in range(SECTIONS)]
    site.add("/", html("Documentation", links=[(href, label) for href, label in sidebar], nav=sidebar))
    for s in range(SECTIONS):
        pages = [(f"/s{s}/p{p}.html", f"Topic {s}.{p}") for p in range(PAGES_PER_SECTION)]
        site.add(f"/s{s}/", html(f"Section {s}", PARAGRAPH, links=pages, nav=sidebar))
        for p, (path, title) in enumerate(pages):
            neighbours = [pages[(p + 1) % len(pages)], pages[p - 1], ("/", "Home")]
            body = " ".join([PARAGRAPH] * 10)
            site.add(path, html(title, body, links=neighbours, nav=sidebar))
    return site


def _crawl(runtime: Runtime, start: str, fresh: bool) -> float:
    code = f"START = {start!r}\nFRESH = {fresh!r}\n" + CRAWL
    result = runtime.execute(code, timeout=600)
    if not result.ok:
        raise RuntimeError(f"benchmark script failed: {result.error}")
    seconds: Any = json.loads(result.output.strip().splitlines()[-1])
    return float(seconds)


def run() -> list[Metric]:
    cold = Metric("web_crawl 50 pages, first call", "s", None, note="new session each; local docs site, no delay")
    cached = Metric("web_crawl 50 pages again", "s", None, note="same session: no request, every page extracted again")
    slow = Metric(
        "web_crawl 50 pages × 50 ms each way", "s", None, note="fresh=True; latency proxy; web.max_per_host 10"
    )
    work = Path(tempfile.mkdtemp(prefix="herald-bench-crawl-"))
    site = docs_site()
    try:
        settings = Settings(data_dir=work / "data").with_overrides({"web.extract": "direct"})
        for _ in range(5):
            with LocalBackend(str(work), settings=settings) as backend, Runtime(backend, settings=settings) as rt:
                cold.samples.append(_crawl(rt, site.url("/"), fresh=False))
                cached.samples.append(_crawl(rt, site.url("/"), fresh=False))
        with LatencyProxy(("127.0.0.1", site.port), rtt=0.1) as proxy, \
                LocalBackend(str(work), settings=settings) as backend, Runtime(backend, settings=settings) as rt:
            start = f"http://127.0.0.1:{proxy.port}/"
            for _ in range(3):
                slow.samples.append(_crawl(rt, start, fresh=True))
    finally:
        site.close()
        shutil.rmtree(work, ignore_errors=True)
    return [cold, cached, slow]
