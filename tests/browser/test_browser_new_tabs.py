"""Which clicks open another tab (so the click waits for it and moves the session there): the
nearest link or form around the element, by its target, whatever its case; nothing else."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from herald.browser.actions import OPENS_TAB, snapshot
from herald.browser.session import BrowserSession
from herald.browser.tab import Tab
from herald.config import Settings
from tests.fixtures.browsers import LocalWebApp

PAGE = """<!doctype html><title>Targets</title>
<a href="/article/1" target="_blank">blank link</a>
<a href="/article/2" target="_BLANK">upper-case blank link</a>
<a href="/article/3" target="reports">named target link</a>
<a href="/article/4" target="_self">self link</a>
<a href="/article/5" target="_top">top link</a>
<a href="/article/6">plain link</a>
<a href="/article/7" target="_blank"><button>button inside a blank link</button></a>
<form action="/results" target="_blank"><button>submit to a blank form</button></form>
<form action="/results"><button>submit to a plain form</button></form>
<button>lone button</button>
"""
OPENS = {"blank link", "upper-case blank link", "named target link", "button inside a blank link",
         "submit to a blank form"}


@pytest.fixture
def session(chromium: str, tmp_path: Path, web_app: LocalWebApp) -> Iterator[BrowserSession]:
    made = BrowserSession(Settings(data_dir=tmp_path / "data").browser, tmp_path)
    made.navigate(web_app.url + "/")
    yield made
    made.close()


def test_the_clicks_that_open_a_tab_are_told_apart(session: BrowserSession, web_app: LocalWebApp) -> None:
    def opens(tab: Tab) -> dict[str, object]:
        tab.page.set_content(PAGE)
        text = snapshot(tab, False)["snapshot"]
        found: dict[str, object] = {}
        for name, ref in re.findall(r'- (?:link|button) "([^"]+)"[^\n]*? (@e\d+)', text):
            found[name] = tab.page.locator(f"aria-ref={tab.refs[ref]}").locator(OPENS_TAB).count() > 0
        return found

    found = session.run(opens)
    assert len(found) == 10, found
    assert {name for name, yes in found.items() if yes} == OPENS


def test_a_form_that_submits_to_a_new_tab_moves_the_session_there(session: BrowserSession) -> None:
    def show_page(tab: Tab) -> dict[str, object]:
        tab.page.set_content(PAGE)
        return {}

    session.run(show_page)
    text = session.snapshot()["snapshot"]
    ref = re.search(r'- button "submit to a blank form" (@e\d+)', text)
    assert ref is not None, text
    result = session.click(ref.group(1))
    assert "opened a new tab" in result.get("note", ""), result
    assert "/results" in result["url"]
