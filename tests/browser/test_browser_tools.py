"""Browser tools on real Chromium against the local web app: what the model sends and gets back."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from herald.runtime.toolset import default_registry
from herald.tools import ToolError
from tests.fixtures.browsers import CATALOGUE, LocalWebApp, free_port

from .conftest import BrowserCaller, MakeBrowser


def ref_of(snapshot: str, role: str, name: str) -> str:
    """The ref of the element `role "name"` in a snapshot's text."""
    match = re.search(rf'- {role} "{re.escape(name)}"[^\n]*? (@e\d+)', snapshot)
    assert match, f'no {role} "{name}" with a ref in:\n{snapshot}'
    return match.group(1)


def test_navigate_reports_where_the_page_is(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    result = browser("browser_navigate", url=web_app.url + "/")
    assert result == {"url": web_app.url + "/", "title": "Herald test shop", "status": 200}


def test_snapshot_gives_refs_to_interactive_elements_only(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/form")
    result = browser("browser_snapshot")
    text = result["snapshot"]
    assert result["url"] == web_app.url + "/form" and result["title"] == "Search the shop"
    refs = re.findall(r"@e\d+", text)
    assert refs == [f"@e{i}" for i in range(1, len(refs) + 1)] and result["refs"] == len(refs) == 6
    for role, name in [("searchbox", "Search products"), ("checkbox", "In stock only"), ("button", "Search"),
                       ("button", "Say hello"), ("combobox", "Sort by")]:
        ref_of(text, role, name)
    assert re.search(r'- heading "Search the shop" \[level=1\]\n', text)  # no ref on a heading
    assert "paragraph: Nobody said anything" in text
    assert "[ref=" not in text and "cursor=" not in text


def test_compact_view_folds_wrappers_and_full_view_keeps_them(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/form")
    compact = browser("browser_snapshot")
    full = browser("browser_snapshot", full=True)
    assert "- generic" not in compact["snapshot"]
    assert "- generic" in full["snapshot"]
    assert compact["refs"] == full["refs"]
    assert len(compact["snapshot"]) < len(full["snapshot"])


def test_click_a_button_changes_the_page_in_place(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/form")
    hello = ref_of(browser("browser_snapshot")["snapshot"], "button", "Say hello")
    result = browser("browser_click", ref=hello)
    assert result["clicked"] == hello and result["url"] == web_app.url + "/form"
    assert "paragraph: Hello from the button" in browser("browser_snapshot")["snapshot"]


def test_click_a_link_follows_it(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/results?page=1")
    result = browser("browser_click", ref=ref_of(browser("browser_snapshot")["snapshot"], "link", "Next page"))
    assert result["url"] == web_app.url + "/results?page=2" and result["title"] == "Results page 2"
    assert 'cell "Product 006"' in browser("browser_snapshot")["snapshot"]


def test_a_link_that_opens_a_new_tab_is_followed(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/")
    result = browser(
        "browser_click", ref=ref_of(browser("browser_snapshot")["snapshot"], "link", "A survey in a new tab")
    )
    assert f"the link opened a new tab ({web_app.url}/article/2)" in result["note"]
    assert result["note"].endswith("act on that tab.")
    assert result["url"] == web_app.url + "/article/2"
    snapshot = browser("browser_snapshot")
    assert snapshot["url"] == web_app.url + "/article/2" and snapshot["title"] == "Survey of Betelgeuse"
    assert "note" not in snapshot


def test_a_tab_opened_later_is_taken_over_by_the_next_call(make_browser: MakeBrowser, web_app: LocalWebApp) -> None:
    browser = make_browser()
    browser("browser_navigate", url=web_app.url + "/keys")
    result = browser(
        "browser_click", ref=ref_of(browser("browser_snapshot")["snapshot"], "button", "Open a window later")
    )
    assert result["url"] == web_app.url + "/keys"  # the window opens 100 ms after the click
    deadline = time.monotonic() + 60  # only bounds a hang
    while "note" not in (snapshot := browser("browser_snapshot")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert f"the page had opened a new tab ({web_app.url}/article/3)" in snapshot["note"]
    assert snapshot["title"] == "Survey of Capella"  # this call already acted on the new tab


def test_type_then_submit_a_form(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/form")
    box = ref_of(browser("browser_snapshot")["snapshot"], "searchbox", "Search products")
    typed = browser("browser_type", ref=box, text="toys")
    assert typed["submitted"] is False and typed["url"] == web_app.url + "/form"
    assert re.search(r'searchbox "Search products" @e\d+: toys', browser("browser_snapshot")["snapshot"])
    box = ref_of(browser("browser_snapshot")["snapshot"], "searchbox", "Search products")
    result = browser("browser_type", ref=box, text="kitchen", submit=True)
    assert result["submitted"] is True and result["url"].startswith(web_app.url + "/results?q=kitchen")
    text = browser("browser_snapshot")["snapshot"]
    assert "Results for “kitchen”" in text
    assert set(re.findall(r'cell "(garden|kitchen|tools|toys)"', text)) == {"kitchen"}


def test_typing_into_a_drop_down_picks_the_option(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/form")
    sort = ref_of(browser("browser_snapshot")["snapshot"], "combobox", "Sort by")
    browser("browser_type", ref=sort, text="price")
    assert 'option "price" [selected]' in browser("browser_snapshot")["snapshot"]
    sort = ref_of(browser("browser_snapshot")["snapshot"], "combobox", "Sort by")
    with pytest.raises(ToolError, match=r"drop-down without an option 'colour'. Its options: 'name', 'price'"):
        browser("browser_type", ref=sort, text="colour")


def test_typing_into_a_button_says_what_takes_text(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/form")
    hello = ref_of(browser("browser_snapshot")["snapshot"], "button", "Say hello")
    with pytest.raises(ToolError, match=r"does not take text.*Type into a textbox"):
        browser("browser_type", ref=hello, text="hi")


def test_scroll_moves_through_a_long_page(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/scroll")
    down = browser("browser_scroll", direction="down")
    assert down["scroll_y"] > 0 and not down["at_top"] and not down["at_bottom"]
    further = browser("browser_scroll", direction="down")
    assert further["scroll_y"] > down["scroll_y"]
    bottom = browser("browser_scroll", direction="bottom")
    assert bottom["at_bottom"] and bottom["scroll_y"] > further["scroll_y"]
    up = browser("browser_scroll", direction="up")
    assert up["scroll_y"] < bottom["scroll_y"]
    assert browser("browser_scroll", direction="top")["at_top"]


def test_back_returns_to_the_previous_page(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/results?page=3")
    browser("browser_navigate", url=web_app.url + "/keys")
    result = browser("browser_back")
    assert result["url"] == web_app.url + "/results?page=3" and result["title"] == "Results page 3"


def test_back_with_no_history_says_to_navigate(make_browser: MakeBrowser, web_app: LocalWebApp) -> None:
    browser = make_browser()
    browser("browser_navigate", url=web_app.url + "/keys")
    browser("browser_back")  # to the blank page the tab started on
    with pytest.raises(ToolError, match=r"no earlier page in this tab's history\. Navigate"):
        browser("browser_back")


def test_press_sends_keys_to_the_page_and_enter_submits(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/keys")
    assert browser("browser_press", key="x")["pressed"] == "x"
    assert 'paragraph: "Last key: x"' in browser("browser_snapshot")["snapshot"]
    browser("browser_press", key="ArrowDown")
    assert "Last key: ArrowDown" in browser("browser_snapshot")["snapshot"]

    browser("browser_navigate", url=web_app.url + "/form")
    box = ref_of(browser("browser_snapshot")["snapshot"], "searchbox", "Search products")
    browser("browser_type", ref=box, text="garden")
    result = browser("browser_press", key="Enter")  # the focused field's form is submitted
    assert result["url"].startswith(web_app.url + "/results?q=garden")


def test_unknown_key_lists_key_names(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/keys")
    with pytest.raises(ToolError, match=r"unknown key 'Foo'. Use a key name such as Enter"):
        browser("browser_press", key="Foo")


def test_stale_refs_say_to_take_a_new_snapshot(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/results?page=1")
    next_page = ref_of(browser("browser_snapshot")["snapshot"], "link", "Next page")
    browser("browser_click", ref=next_page)
    with pytest.raises(ToolError) as navigated:
        browser("browser_click", ref=next_page)
    assert "is stale: the page has navigated" in str(navigated.value)
    assert "Take a new snapshot with browser_snapshot()" in str(navigated.value)
    assert navigated.value.error_type == "StaleRef"

    browser("browser_navigate", url=web_app.url + "/form")
    dismiss = ref_of(browser("browser_snapshot")["snapshot"], "button", "Dismiss this button")
    browser("browser_click", ref=dismiss)  # the button removes itself
    with pytest.raises(ToolError, match=r"is stale: that element is no longer on the page\. Take a new snapshot"):
        browser("browser_click", ref=dismiss)

    with pytest.raises(ToolError, match=r"@e99 is not in the latest snapshot \(its refs: @e1–@e\d+\)"):
        browser("browser_click", ref="@e99")
    with pytest.raises(ToolError, match=r"'Search' is not an element ref\. Refs look like @e3"):
        browser("browser_click", ref="Search")


def test_refs_before_any_snapshot_are_refused(make_browser: MakeBrowser, web_app: LocalWebApp) -> None:
    browser = make_browser()
    browser("browser_navigate", url=web_app.url + "/form")
    with pytest.raises(ToolError, match="no snapshot of this page yet"):
        browser("browser_click", ref="@e1")


def test_navigation_timeout_names_the_url_and_the_wait(make_browser: MakeBrowser, web_app: LocalWebApp) -> None:
    browser = make_browser({"browser.navigation_timeout": 1})
    url = web_app.url + "/slow?ms=120000"  # far past the 1 s, however slow the machine
    with pytest.raises(ToolError) as info:
        browser("browser_navigate", url=url)
    assert f"{url} did not finish loading within 1 s (browser.navigation_timeout)" in str(info.value)
    assert info.value.error_type == "NavigationTimeout"


def test_unreachable_url_is_a_navigation_error(browser: BrowserCaller) -> None:
    url = f"http://127.0.0.1:{free_port()}/"
    with pytest.raises(ToolError, match=rf"could not load {re.escape(url)}: net::ERR_CONNECTION_REFUSED"):
        browser("browser_navigate", url=url)


def test_long_snapshot_is_cut_with_a_marker_and_spilled(make_browser: MakeBrowser, web_app: LocalWebApp) -> None:
    browser = make_browser({"browser.snapshot_max_bytes": 2000})
    browser("browser_navigate", url=web_app.url + "/big?words=5000")
    result = browser("browser_snapshot")
    assert result["truncated"] is True
    assert "[... snapshot truncated:" in result["snapshot"] and result["spill_path"] in result["snapshot"]
    assert len(result["snapshot"].encode()) < 2600
    full = Path(result["spill_path"]).read_text()
    assert "word0 " in full and "THE END" in full and "word2500 " in full


def test_screenshot_and_close_are_direct_only(browser: BrowserCaller, web_app: LocalWebApp, tmp_path: Path) -> None:
    script_tools = {t.name for t in default_registry().sandbox_tools(None)}
    assert {"browser_screenshot", "browser_close"}.isdisjoint(script_tools)
    assert {"browser_navigate", "browser_snapshot", "browser_click", "browser_type", "browser_scroll",
            "browser_back", "browser_press"} <= script_tools
    browser("browser_navigate", url=web_app.url + "/")
    shot = browser("browser_screenshot", path=str(tmp_path / "shot.png"))
    assert shot["path"] == str(tmp_path / "shot.png")
    assert (tmp_path / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    default = browser("browser_screenshot", full_page=True)
    assert Path(default["path"]).is_file() and default["bytes"] > 1000


def test_close_then_the_next_call_starts_a_new_browser(make_browser: MakeBrowser, web_app: LocalWebApp) -> None:
    browser = make_browser()
    assert browser("browser_close") == {"closed": False, "note": "no browser was open"}
    browser("browser_navigate", url=web_app.url + "/keys")
    assert browser("browser_close")["closed"] is True
    result = browser("browser_navigate", url=web_app.url + "/")
    assert result["title"] == "Herald test shop" and "note" not in result


def test_catalogue_is_what_the_pages_show(browser: BrowserCaller, web_app: LocalWebApp) -> None:
    browser("browser_navigate", url=web_app.url + "/results?page=20")
    text = browser("browser_snapshot")["snapshot"]
    last = CATALOGUE[-1]
    assert f'cell "{last["name"]}"' in text and "Next page" not in text
