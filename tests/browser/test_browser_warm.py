"""Chromium started ahead of the first navigation (the browser tools' warm hook): one launch,
never two; none for a session that does not name the browser; and a session closed while it
starts leaves no Chromium behind."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest

from herald import Runtime
from herald.config import Settings
from tests.fixtures.browsers import LocalWebApp
from tests.runtime._helpers import run_ok, wait_for

from .conftest import chromium_pids

BROWSER_TOOLS = ["browser_navigate", "browser_snapshot", "browser_click"]
MakeRuntime = Callable[..., Runtime]


def _gone(pids: list[int]) -> bool:
    return not set(pids) & set(chromium_pids())


def test_a_browser_session_launches_chromium_before_any_call_and_the_first_call_uses_it(
    chromium: str, make_runtime: MakeRuntime, web_app: LocalWebApp
) -> None:
    runtime = make_runtime(tools=BROWSER_TOOLS)
    assert wait_for(lambda: len(chromium_pids()) == 1, timeout=60), "no Chromium was started ahead"
    (warmed,) = chromium_pids()
    result = run_ok(runtime, f"""
        from hermes_tools import browser_navigate, browser_snapshot
        browser_navigate({web_app.url + '/results?page=3'!r})
        print(browser_snapshot()["title"])
    """, timeout=120)
    assert result.output == "Results page 3\n"
    assert chromium_pids() == [warmed]  # the call used the browser started ahead
    runtime.close()
    assert wait_for(lambda: _gone([warmed]))


def test_the_first_navigation_waits_for_the_launch_under_way_instead_of_a_second_one(
    chromium: str, make_runtime: MakeRuntime, web_app: LocalWebApp
) -> None:
    """The script starts at once, while Chromium is still starting: its navigation queues
    behind that launch. Every browser process seen meanwhile is the same one."""
    seen: set[int] = set()
    runtime = make_runtime(tools=BROWSER_TOOLS)
    url = web_app.url + "/results?page=2"
    result = runtime.execute(f"from hermes_tools import browser_navigate\nprint(browser_navigate({url!r})['url'])",
                             timeout=120, on_output=lambda stream, data: seen.update(chromium_pids()))
    assert result.ok, result
    seen.update(chromium_pids())
    assert len(seen) == 1, seen


def test_a_session_whose_scripts_do_not_browse_starts_no_chromium(chromium: str, make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()  # every tool offered, the browser among them, none named
    run_ok(runtime, "from hermes_tools import terminal\nprint(terminal('echo hi')['output'])")
    assert chromium_pids() == []


def test_a_script_that_names_a_browser_tool_starts_chromium_as_it_starts(
    chromium: str, make_runtime: MakeRuntime, web_app: LocalWebApp
) -> None:
    runtime = make_runtime()
    # The script never gets to call it: naming it is enough to start the browser for the next call.
    run_ok(runtime, "import hermes_tools\nprint(callable(hermes_tools.browser_snapshot))")
    assert wait_for(lambda: len(chromium_pids()) == 1, timeout=60)


def test_closing_the_session_while_chromium_starts_leaves_none_behind(chromium: str, settings: Settings,
                                                                     make_runtime: MakeRuntime) -> None:
    """Closed at once, and closed at several points of the launch (bounded loop): every Chromium
    it started is gone after close, which returns promptly."""
    for delay in (0.0, 0.05, 0.2, 0.5, 1.0, 2.0):
        runtime = make_runtime(tools=BROWSER_TOOLS)
        time.sleep(delay)
        started = time.monotonic()
        seen = set(chromium_pids())
        runtime.close()
        seen |= set(chromium_pids())
        assert time.monotonic() - started < 30, "close waited for the launch"
        assert wait_for(lambda: chromium_pids() == [], timeout=30), (delay, seen, chromium_pids())


def test_a_warm_up_that_fails_is_logged_and_the_first_call_says_why(
    make_runtime: MakeRuntime, caplog: pytest.LogCaptureFixture, tmp_path_factory: pytest.TempPathFactory
) -> None:
    broken = tmp_path_factory.mktemp("bin") / "chromium"
    broken.write_text("#!/bin/sh\necho 'this chromium is broken' >&2\nexit 3\n")
    broken.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="herald.browser.session"):
        runtime = make_runtime(tools=BROWSER_TOOLS, overrides={"browser.executable": str(broken),
                                                                "browser.launch_timeout": 20})
        assert wait_for(lambda: any("ahead of its first call failed" in r.getMessage() for r in caplog.records),
                        timeout=60)
    result = runtime.execute("from hermes_tools import browser_navigate\nbrowser_navigate('http://127.0.0.1:9/')",
                             timeout=60)
    assert result.status == "error"
    assert "ToolError" in result.error
