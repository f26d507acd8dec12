"""Browser and web tools from a script, on real Chromium and the local test shop:

- each browser step (navigate, snapshot, click, type, type+submit, back), from a script, per call;
- the first navigation of a session, timed inside the script from its first line: Chromium's
  launch ahead of it (Tool.warm) against none (`sandbox.warm_tools = "off"`, as before), and in a
  session that names the browser tools, after a pause such as a model's first turn;
- the same steps through `@playwright/mcp` (npm, installed into ~/.cache/herald-tests by this
  bench), driven by the MCP SDK client on the same pages, side by side in the same run; it runs
  with `--snapshot-mode none` so that its actions, like Herald's, do not also return a snapshot;
- the wall time of extracting ten 200 ms pages in one script (keyless and Firecrawl).

`python -m bench.browser_bench` runs this table alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from herald.browser.launch import find_chromium
from tests.fakes.firecrawl import FakeDocument, FakeFirecrawl
from tests.fixtures.browsers import LocalWebApp, chromium_problem

from .report import Metric, print_table

ROUNDS = 20
FIRST_NAV_SAMPLES = 6
PLAYWRIGHT_MCP = "0.0.83"
STEPS = ("navigate", "snapshot", "click", "type", "type+submit", "back")
NOTES = {
    "navigate": "a results page, loaded",
    "snapshot": "the page just navigated to (its first)",
    "click": "link 'Next page', until loaded",
    "type": "search box, no submit",
    "type+submit": "search box, Enter, results loaded",
    "back": "to the previous page, loaded",
}

# One round of every step, each call timed on its own; the refs come from the snapshots.
HERALD_STEPS = """
import json, re, time
from hermes_tools import browser_navigate, browser_snapshot, browser_click, browser_type, browser_back

def ref(snapshot, role, name):
    return re.search(r'- %s "%s"[^\\n]*? (@e\\d+)' % (role, re.escape(name)), snapshot).group(1)

def timed(step, fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    samples.setdefault(step, []).append((time.perf_counter() - t) * 1000)
    return out

samples = {}
browser_navigate(BASE + "/form")  # the browser is up before the first sample
for i in range(ROUNDS):
    timed("navigate", browser_navigate, BASE + "/results?page=%d" % (i % 18 + 1))
    page = timed("snapshot", browser_snapshot)["snapshot"]
    timed("click", browser_click, ref(page, "link", "Next page"))
    timed("back", browser_back)
    browser_navigate(BASE + "/form")
    form = browser_snapshot()["snapshot"]
    timed("type", browser_type, ref(form, "searchbox", "Search products"), "garden")
    timed("type+submit", browser_type, ref(form, "searchbox", "Search products"), "kitchen", True)
print(json.dumps(samples))
"""
FIRST_NAVIGATION = """
import time
t = time.perf_counter()
from hermes_tools import browser_navigate
browser_navigate(URL)
print((time.perf_counter() - t) * 1000)
"""
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


def _step_metrics(runtime: Runtime, app: LocalWebApp) -> list[Metric]:
    samples: dict[str, list[float]] = _run(runtime, HERALD_STEPS, BASE=app.url, ROUNDS=ROUNDS)
    return [Metric(f"Herald browser {step}", "ms", None, samples[step], note=NOTES[step] + "; from a script")
            for step in STEPS]


def _pair_metrics(runtime: Runtime, app: LocalWebApp) -> list[Metric]:
    nav = Metric("browser_navigate + browser_snapshot", "ms", None, note="local page, from a script, per pair")
    click = Metric("browser_click (link) -> browser_snapshot", "ms", None, note="next results page, from a script")
    nav.samples.extend(_run(runtime, NAVIGATE_SNAPSHOT, BASE=app.url, ROUNDS=30))
    click.samples.extend(_run(runtime, CLICK_SNAPSHOT, BASE=app.url, ROUNDS=30))
    return [nav, click]


def _first_navigation(work: Path, app: LocalWebApp) -> list[Metric]:
    """A new session each sample; the script is sent at once (as `herald exec` does), or after a
    pause in a session that names the browser tools (as a model thinks before its first script)."""
    cases = [
        ("off", None, 0.0, "sandbox.warm_tools off: Chromium launched by the call (before this work)"),
        ("auto", None, 0.0, "default: the script names the tool, the launch starts with the run"),
        ("auto", ["browser_navigate"], 3.0, "session names the browser tools; script 3 s later"),
    ]
    metrics = []
    for mode, tools, pause, note in cases:
        metric = Metric(f"first browser_navigate of a session ({mode}{', pause' if pause else ''})", "ms", None,
                        note=note)
        settings = Settings(data_dir=work / "data").with_overrides({"sandbox.warm_tools": mode})
        for _ in range(FIRST_NAV_SAMPLES):
            with LocalBackend(str(work), settings=settings) as backend, Runtime(backend, settings=settings,
                                                                                   tools=tools) as runtime:
                time.sleep(pause)
                metric.samples.append(_run(runtime, FIRST_NAVIGATION, URL=app.url + "/results?page=1"))
        metrics.append(metric)
    return metrics


# -- @playwright/mcp on the same pages ---------------------------------------------------------------

def playwright_mcp() -> str | None:
    """The path of @playwright/mcp's command, installed once into the test cache; None when npm
    cannot install it (the rows are then skipped, saying so)."""
    prefix = (
        Path(os.environ.get("HERALD_TEST_CACHE", Path.home() / ".cache" / "herald-tests"))
        / f"playwright-mcp-{PLAYWRIGHT_MCP}"
    )
    command = prefix / "node_modules" / ".bin" / "playwright-mcp"
    if not command.exists():
        if shutil.which("npm") is None:
            return None
        done = subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                               f"@playwright/mcp@{PLAYWRIGHT_MCP}"], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            print(f"@playwright/mcp rows skipped: npm install failed: {done.stderr.strip()[-300:]}")
            return None
    return str(command)


def _mcp_ref(snapshot: str, role: str, name: str) -> str:
    found = re.search(rf'- {role} "{re.escape(name)}"[^\n]*?\[ref=([\w-]+)\]', snapshot)
    if found is None:
        raise RuntimeError(f"no {role} {name!r} in @playwright/mcp's snapshot:\n{snapshot[:2000]}")
    return found.group(1)


async def _mcp_session(
    command: str, app: LocalWebApp, work: Path, extra: list[str]
) -> tuple[float, dict[str, list[float]]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    chromium = find_chromium("")
    assert chromium is not None
    params = StdioServerParameters(command="node", args=[
        command, "--headless", "--isolated", "--no-sandbox", "--executable-path", chromium, "--snapshot-mode", "none",
        "--output-dir", str(work / "playwright-mcp"), *extra,
    ], cwd=str(work))  # its console logs go there, not into the checkout
    samples: dict[str, list[float]] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()

        async def call(step: str | None, tool: str, args: dict[str, Any]) -> str:
            started = time.perf_counter()
            reply = await session.call_tool(tool, args)
            if step is not None:
                samples.setdefault(step, []).append((time.perf_counter() - started) * 1000)
            if reply.is_error:
                raise RuntimeError(f"@playwright/mcp {tool} failed: {reply.content}")
            return "\n".join(getattr(block, "text", "") for block in reply.content)

        started = time.perf_counter()
        await call(None, "browser_navigate", {"url": app.url + "/form"})
        first = (time.perf_counter() - started) * 1000
        for i in range(ROUNDS):
            await call("navigate", "browser_navigate", {"url": f"{app.url}/results?page={i % 18 + 1}"})
            page = await call("snapshot", "browser_snapshot", {})
            await call(
                "click", "browser_click", {"element": "Next page", "target": _mcp_ref(page, "link", "Next page")}
            )
            await call("back", "browser_navigate_back", {})
            await call(None, "browser_navigate", {"url": app.url + "/form"})
            box = _mcp_ref(await call(None, "browser_snapshot", {}), "searchbox", "Search products")
            await call("type", "browser_type", {"element": "Search products", "target": box, "text": "garden"})
            await call("type+submit", "browser_type", {"element": "Search products", "target": box, "text": "kitchen",
                                                        "submit": True})
    return first, samples


def _mcp_metrics(app: LocalWebApp, work: Path) -> list[Metric]:
    command = playwright_mcp()
    if command is None:
        print("@playwright/mcp rows skipped: npm is not installed")
        return []
    rows = []
    # Its default waits 500 ms after an action for what it set off to settle; 0 measures the
    # action alone, as Herald's (which waits for a navigation's load, as both do).
    for label, extra in (("", []), (", settle 0", ["--timeout-settle", "0"])):
        first, samples = asyncio.run(_mcp_session(command, app, work, extra))
        rows += [
            Metric(f"@playwright/mcp {step}{label}", "ms", None, samples[step], note=NOTES[step] + "; MCP SDK client")
            for step in STEPS
            if not label or step in ("click", "type", "type+submit")
        ]
        rows.append(
            Metric(f"@playwright/mcp first browser_navigate{label}", "ms", None, [first], note="after initialize")
        )
    return rows


# -- web_extract -------------------------------------------------------------------------------------

def _extract_metrics(work: Path, app: LocalWebApp) -> list[Metric]:
    keyless = Metric("web_extract 10 pages × 200 ms, keyless", "s", 0.5, note="one call; httpx + trafilatura")
    urls = [f"{app.url}/article/{n}?delay=200" for n in range(1, 11)]
    settings = Settings(data_dir=work / "data")
    with LocalBackend(str(work), settings=settings) as backend, Runtime(backend, settings=settings) as rt:
        for _ in range(7):
            keyless.samples.append(_run(rt, EXTRACT_ONE_CALL, URLS=urls))
    firecrawl_row = Metric(
        "web_extract 10 pages × 200 ms, Firecrawl", "s", 0.5, note="parallel() of 10 calls; local v2 server"
    )
    docs = [
        FakeDocument(f"https://pages.example.org/{n}", f"Page {n}", f"# Page {n}\n\n" + "text " * 2000)
        for n in range(10)
    ]
    with FakeFirecrawl(docs, api_key="fc-bench", latency=0.2) as firecrawl:
        tuned = settings.with_overrides({"web.firecrawl_api_url": firecrawl.url, "web.firecrawl_api_key": "fc-bench"})
        with LocalBackend(str(work), settings=tuned) as backend, Runtime(backend, settings=tuned) as rt:
            for _ in range(7):
                firecrawl_row.samples.append(_run(rt, EXTRACT_PARALLEL, URLS=[d.url for d in docs]))
    return [keyless, firecrawl_row]


def run(*, web: bool = True) -> list[Metric]:
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
                    metrics.extend(_step_metrics(runtime, app))
                    metrics.extend(_pair_metrics(runtime, app))
                metrics.extend(_mcp_metrics(app, work))
                metrics.extend(_first_navigation(work, app))
            if web:
                metrics.extend(_extract_metrics(work, app))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return metrics


if __name__ == "__main__":
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print_table("Browser tools", run(web=False))
