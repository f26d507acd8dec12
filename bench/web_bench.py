"""Keyless web_extract: forty generated documentation pages (tests/fixtures/docsites.py,
`pydoc -w` of stdlib modules) served by `python -m http.server` in a process of its own.

- web_extract of the 40 pages in one call from a script, no network delay, against one bare
  process extracting the same pages one after another with the same trafilatura options
  (measured in the same run, interleaved; target: ≤ 0.75× the bare process), with the
  session's default pool (one worker per core) and with one worker.
- 10 pages behind tests/fixtures/latency_proxy.py at 200 ms round trip: a new Herald process and
  session, its first web_extract call timed (target ≤ 0.5 s), then its second.
- A row for a 50-page web_crawl, filled in by the crawl work (`_crawl_metrics`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from tests.fixtures.browsers import free_port
from tests.fixtures.docsites import built_site
from tests.fixtures.latency_proxy import LatencyProxy

from .report import Metric

ROUNDS = 7
EXTRACT_ONE_CALL = """
import time
from hermes_tools import web_extract
t = time.perf_counter()
reply = web_extract(URLS)
elapsed = time.perf_counter() - t
assert reply["failed"] == 0, [r for r in reply["results"] if "error" in r][:2]
print(elapsed)
"""
# One bare process: trafilatura as web_extract's render calls it (markdown with links and tables,
# and the metadata for the title), page after page; imports and a first page not timed.
BARE = """
import json, sys, time
from pathlib import Path
import trafilatura
pages = [(url, Path(path).read_bytes()) for url, path in json.loads(sys.argv[1])]
trafilatura.extract(pages[0][1], url=pages[0][0])
t = time.perf_counter()
for url, body in pages:
    trafilatura.extract(body, url=url, output_format="markdown", include_links=True, include_tables=True,
                        include_comments=False, favor_recall=True)
    trafilatura.extract_metadata(body, default_url=url)
print(time.perf_counter() - t)
"""
# The same process running Herald's own render (what each worker runs: links, navigation, title
# lookup, trafilatura on the parsed tree), page after page: what the workers divide among them.
BARE_RENDER = """
import json, sys, time
from pathlib import Path
from herald.web.page import Fetched
from herald.web.render import render
pages = [Fetched(url, "text/html", None, Path(path).read_bytes()) for url, path in json.loads(sys.argv[1])]
render(pages[0])
t = time.perf_counter()
for page in pages:
    render(page)
print(time.perf_counter() - t)
"""
# A new Herald process: its session's first web_extract, then a second one.
FIRST_CALL = """
import json, sys
from pathlib import Path
from herald import Runtime, Settings
from herald.backends.local import LocalBackend
urls, work = json.loads(sys.argv[1]), Path(sys.argv[2])
script = "URLS = %r\\n" % (urls,) + sys.argv[3]
settings = Settings(data_dir=work / "data")
with LocalBackend(str(work), settings=settings) as backend, Runtime(backend, settings=settings) as runtime:
    times = []
    for _ in range(2):
        result = runtime.execute(script, timeout=120)
        assert result.ok, result.error
        times.append(float(result.output.strip().splitlines()[-1]))
print(json.dumps(times))
"""


@contextlib.contextmanager
def http_server(root: Path) -> Iterator[str]:
    """`python -m http.server` over `root` in a process of its own (not under Herald's GIL)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(root),
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > end or server.poll() is not None:
                    raise RuntimeError("python -m http.server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def _script(runtime: Runtime, urls: list[str]) -> float:
    result = runtime.execute(f"URLS = {urls!r}\n" + EXTRACT_ONE_CALL, timeout=600)
    if not result.ok:
        raise RuntimeError(f"benchmark script failed: {result.error}")
    return float(result.output.strip().splitlines()[-1])


def _bare(code: str, pages: list[tuple[str, str]]) -> float:
    done = subprocess.run([sys.executable, "-c", code, json.dumps(pages)], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def _forty_pages(work: Path, site: Path, url: str) -> list[Metric]:
    files = sorted(site.glob("*.html"))
    urls = [f"{url}/{f.name}" for f in files]
    pages = [(u, str(f)) for u, f in zip(urls, files, strict=True)]
    bare = Metric("one bare process: trafilatura, same options, 40 pages in a row", "s", None,
                  note="extract + extract_metadata, as web_extract did before; no fetching")
    bare_render = Metric("one bare process: Herald's render, 40 pages in a row", "s", None,
                         note="what the workers run; no fetching")
    rows = {workers: Metric(f"web_extract 40 pages, no delay, {workers} worker{'s' if workers > 1 else ''}", "s", None,
                            note="one call from a script; warm session") for workers in (2, 1)}
    with contextlib.ExitStack() as stack:
        runtimes = {}
        for workers in rows:
            settings = Settings(data_dir=work / f"data-{workers}").with_overrides({"web.extract_workers": workers})
            backend = stack.enter_context(LocalBackend(str(work), settings=settings))
            runtimes[workers] = stack.enter_context(Runtime(backend, settings=settings))
            _script(runtimes[workers], urls)  # the pool started, its workers warm
        for _ in range(ROUNDS):  # interleaved: the machine's state moves all three alike
            bare.samples.append(_bare(BARE, pages))
            bare_render.samples.append(_bare(BARE_RENDER, pages))
            for workers, row in rows.items():
                row.samples.append(_script(runtimes[workers], urls))
    default = rows[2]
    default.target = 0.75 * bare.median
    default.note += f"; target 0.75× the bare process ({bare.median:.3f} s)"
    return [default, rows[1], bare, bare_render]


def _latency_first_call(work: Path, url: str) -> list[Metric]:
    first = Metric("web_extract 10 pages × 200 ms RTT, a new session's first call", "s", 0.5,
                   note="new Herald process; latency_proxy.py")
    second = Metric("… the same session's second call", "s", None)
    host, port = url.removeprefix("http://").split(":")
    with LatencyProxy((host, int(port)), rtt=0.2) as proxy:
        names = sorted(p.name for p in built_site("pydoc-bench").glob("*.html"))[:10]
        urls = [f"http://127.0.0.1:{proxy.port}/{name}" for name in names]
        for _ in range(5):
            done = subprocess.run([sys.executable, "-c", FIRST_CALL, json.dumps(urls), str(work), EXTRACT_ONE_CALL],
                                  capture_output=True, text=True, check=True)
            times = json.loads(done.stdout.strip().splitlines()[-1])
            first.samples.append(times[0])
            second.samples.append(times[1])
    return [first, second]


def _crawl_metrics(work: Path, url: str) -> list[Metric]:
    """web_crawl of 50 pages: the crawl work adds its row here (the same served site)."""
    return []


def run() -> list[Metric]:
    work = Path(tempfile.mkdtemp(prefix="herald-bench-web-"))
    try:
        site = built_site("pydoc-bench")
        with http_server(site) as url:
            return [*_forty_pages(work, site, url), *_latency_first_call(work, url), *_crawl_metrics(work, url)]
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    from .report import print_table

    print_table("Web extraction", run())
