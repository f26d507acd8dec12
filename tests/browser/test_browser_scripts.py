"""A browser automation loop in one execute_code run: the headline workflow, end to end."""

from __future__ import annotations

import json
from collections.abc import Callable

from herald import Runtime
from tests.fixtures.browsers import CATALOGUE, PAGES, LocalWebApp
from tests.runtime._helpers import run_ok

SCRAPE_ALL_PAGES = """
import json, re
from hermes_tools import browser_navigate, browser_snapshot, browser_type, browser_click

def ref(snapshot, role, name):
    match = re.search(r'- %s "%s"[^\\n]*? (@e\\d+)' % (role, re.escape(name)), snapshot)
    return match.group(1) if match else None

def rows(snapshot):
    found = []
    for block in snapshot.split("- row")[1:]:
        cells = re.findall(r'cell "([^"]*)"', block)
        if cells:
            found.append(dict(zip(["id", "name", "category", "price"], cells)))
    return found

browser_navigate(BASE + "/form")
page = browser_snapshot()["snapshot"]
browser_type(ref(page, "searchbox", "Search products"), "product", submit=True)

table, pages = [], 0
while True:
    page = browser_snapshot()["snapshot"]
    pages += 1
    table.extend(rows(page))
    next_page = ref(page, "link", "Next page")
    if next_page is None:
        break
    browser_click(next_page)

print(json.dumps({"pages": pages, "rows": table}))
"""


def test_one_script_fills_the_form_and_pages_through_twenty_result_pages(
    chromium: str, make_runtime: Callable[..., Runtime], web_app: LocalWebApp
) -> None:
    runtime = make_runtime()
    code = f"BASE = {web_app.url!r}\n" + SCRAPE_ALL_PAGES
    result = run_ok(runtime, code, timeout=240, max_tool_calls=200)
    out = json.loads(result.output)
    assert out["pages"] == PAGES
    assert out["rows"] == CATALOGUE  # every row of every page, in order, nothing twice
    # 1 navigate + 1 snapshot + 1 type + 20 snapshots + 19 clicks, in one model turn.
    assert result.tool_calls_made == 3 + PAGES + (PAGES - 1)


def test_script_sees_tool_errors_it_can_handle(
    chromium: str, make_runtime: Callable[..., Runtime], web_app: LocalWebApp
) -> None:
    runtime = make_runtime()
    result = run_ok(runtime, f"""
        from hermes_tools import browser_navigate, browser_snapshot, browser_click, ToolError
        browser_navigate({web_app.url + '/results?page=1'!r})
        browser_snapshot()
        browser_navigate({web_app.url + '/results?page=2'!r})
        try:
            browser_click("@e1")
        except ToolError as exc:
            print("refused:", exc)
    """)
    assert "refused:" in result.output and "Take a new snapshot with browser_snapshot()" in result.output
