"""Browser sessions: attach over CDP like a cloud browser, recover from a dropped connection or a
crashed Chromium, one browser per session reused across scripts, closed with the session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from herald import Runtime
from herald.tools import ToolError
from tests.fixtures.browsers import CdpChromium, LocalWebApp, free_port
from tests.runtime._helpers import run_ok

from .conftest import MakeBrowser, chromium_pids


def open_pages(cdp: CdpChromium) -> list[str]:
    with urllib.request.urlopen(f"{cdp.url}/json/list", timeout=10) as reply:
        return [t["url"] for t in json.load(reply) if t.get("type") == "page"]


def wait_for_no_pids(pids: list[int], timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in pids if p in chromium_pids()]
    return alive


def test_attach_over_cdp_drives_that_browser(
    make_browser: MakeBrowser, cdp_chromium: CdpChromium, web_app: LocalWebApp
) -> None:
    assert cdp_chromium.proc is not None
    browser = make_browser({"browser.cdp_url": cdp_chromium.url})
    browser("browser_navigate", url=web_app.url + "/results?page=1")
    assert web_app.url + "/results?page=1" in open_pages(cdp_chromium)  # the remote browser shows it
    snapshot = browser("browser_snapshot")["snapshot"]
    assert 'cell "Product 001"' in snapshot
    ref = next(line.split()[-1].rstrip(":") for line in snapshot.splitlines() if 'link "Next page"' in line)
    assert browser("browser_click", ref=ref)["url"] == web_app.url + "/results?page=2"
    assert chromium_pids() == [cdp_chromium.proc.pid]  # nothing was launched here


def test_dropped_cdp_connection_is_recovered_on_the_next_call(
    make_browser: MakeBrowser, cdp_chromium: CdpChromium, web_app: LocalWebApp
) -> None:
    browser = make_browser({"browser.cdp_url": cdp_chromium.url})
    browser("browser_navigate", url=web_app.url + "/form")
    assert browser("browser_snapshot")["refs"] > 0
    old_ref = "@e1"
    cdp_chromium.kill()
    cdp_chromium.start()  # the same endpoint, a new browser: its pages and our refs are gone

    result = browser("browser_navigate", url=web_app.url + "/keys")
    assert result["title"] == "Keys"
    assert "the browser connection dropped" in result["note"]
    assert f"reconnected to {cdp_chromium.url}" in result["note"]
    assert "earlier refs, page state and history are gone" in result["note"]
    assert web_app.url + "/keys" in open_pages(cdp_chromium)
    # Refs from before the drop are refused, and later calls carry no note.
    with pytest.raises(ToolError, match="no snapshot of this page yet"):
        browser("browser_click", ref=old_ref)
    assert "note" not in browser("browser_snapshot")


def test_browser_gone_between_calls_reconnects_and_the_failed_call_says_so(
    make_browser: MakeBrowser, cdp_chromium: CdpChromium, web_app: LocalWebApp
) -> None:
    browser = make_browser({"browser.cdp_url": cdp_chromium.url})
    browser("browser_navigate", url=web_app.url + "/form")
    cdp_chromium.kill()
    with pytest.raises(ToolError) as down:
        browser("browser_navigate", url=web_app.url + "/keys")
    assert f"could not attach to the browser at {cdp_chromium.url}" in str(down.value)
    assert "browser.cdp_url / --browser-cdp" in str(down.value)
    cdp_chromium.start()
    result = browser("browser_snapshot")
    assert "reconnected" in result["note"] and result["url"] == "about:blank"


def test_unreachable_cdp_url_names_the_setting(make_browser: MakeBrowser) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    browser = make_browser({"browser.cdp_url": url, "browser.launch_timeout": 5})
    with pytest.raises(ToolError, match=rf"could not attach to the browser at {url}: .*ECONNREFUSED.*browser.cdp_url"):
        browser("browser_navigate", url="http://127.0.0.1/")


def test_crashed_local_chromium_is_relaunched(make_browser: MakeBrowser, web_app: LocalWebApp) -> None:
    browser = make_browser()
    browser("browser_navigate", url=web_app.url + "/form")
    (pid,) = chromium_pids()
    os.kill(pid, signal.SIGKILL)
    assert not wait_for_no_pids([pid])
    result = browser("browser_navigate", url=web_app.url + "/keys")
    assert result["title"] == "Keys" and "relaunched Chromium" in result["note"]
    assert chromium_pids() and pid not in chromium_pids()


def test_missing_chromium_says_how_to_get_one(make_browser: MakeBrowser) -> None:
    browser = make_browser({"browser.executable": "/nonexistent/chromium"})
    with pytest.raises(ToolError, match=r"no Chromium found .*apt-get install chromium.*browser.cdp_url"):
        browser("browser_navigate", url="http://127.0.0.1/")


def test_one_browser_per_session_across_scripts_closed_with_the_runtime(
    chromium: str, make_runtime: Callable[..., Runtime], web_app: LocalWebApp
) -> None:
    runtime = make_runtime()
    assert chromium_pids() == []  # lazily: no browser until a browser tool runs
    run_ok(runtime, f"from hermes_tools import browser_navigate\nbrowser_navigate({web_app.url + '/results?page=7'!r})")
    pids = chromium_pids()
    assert len(pids) == 1
    result = run_ok(runtime, "from hermes_tools import browser_snapshot\nprint(browser_snapshot()['title'])")
    assert result.output.strip() == "Results page 7"  # the same tab, kept between scripts
    # Calls arriving on several RPC threads at once all run on the browser's own thread.
    result = run_ok(runtime, """
        from hermes_tools import browser_snapshot, browser_scroll, parallel
        out = parallel([browser_snapshot, (browser_scroll, "down"), browser_snapshot, (browser_scroll, "up")])
        print(sorted(set(r["url"].rsplit("=", 1)[-1] for r in out)))
    """)
    assert result.output.strip() == "['7']"
    assert chromium_pids() == pids
    runtime.close()
    assert wait_for_no_pids(pids) == []


def test_herald_exec_browser_cdp_flag_attaches(cdp_chromium: CdpChromium, web_app: LocalWebApp, tmp_path: Path) -> None:
    script = tmp_path / "visit.py"
    script.write_text(
        "from hermes_tools import browser_navigate, browser_snapshot\n"
        f"browser_navigate({web_app.url + '/results?page=4'!r})\n"
        "print(browser_snapshot()['title'])\n"
    )
    env = {**os.environ, "HERALD_DATA_DIR": str(tmp_path / "data"), "HERALD_CONFIG": str(tmp_path / "none.toml")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "herald",
            "exec",
            str(script),
            "--browser-cdp",
            cdp_chromium.url,
            "--cwd",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Results page 4"
    assert web_app.url + "/results?page=4" in open_pages(cdp_chromium)  # it was this browser's page
