"""The browser loops users write fit the default call budget, and every browser tool returns the
shape its TypedDict declares."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from herald import Runtime
from herald.runtime.toolset import default_registry
from tests.fixtures.browsers import LocalWebApp
from tests.fixtures.shapes import mismatches
from tests.runtime._helpers import run_ok

from .conftest import MakeBrowser

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_browser_example() -> str:
    """The Python block of README's Browser section, as a user copies it."""
    section = README.read_text().split("\n## Browser\n", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None, "README's Browser section lost its example"
    return block.group(1)


def test_readme_browser_example_runs_as_written_under_the_default_budget(
    chromium: str, make_runtime: Callable[..., Runtime], web_app: LocalWebApp
) -> None:
    code = readme_browser_example()
    assert "http://shop.local/search" in code and '"garden"' in code
    # The shop is this test's: its search form, and a query that matches all twenty pages.
    code = code.replace("http://shop.local/search", web_app.url + "/form").replace('"garden"', '"product"')
    result = run_ok(make_runtime(), code, timeout=300)  # no max_tool_calls: the default
    assert result.output == "100 products\n"
    assert (result.tool_calls_made, result.refused_calls) == (3 + 20 + 19, 0)


SEARCH_LOOP = """
import re
from hermes_tools import browser_navigate, browser_snapshot, browser_type, browser_click, browser_back

def ref(snapshot, role, name):
    return re.search(r'- %s "%s"[^\\n]*? (@e\\d+)' % (role, re.escape(name)), snapshot).group(1)

browser_navigate(BASE + "/form")
seen = []
for query in QUERIES:
    form = browser_snapshot()["snapshot"]
    browser_type(ref(form, "searchbox", "Search products"), query, submit=True)
    page = browser_snapshot()["snapshot"]
    browser_click(ref(page, "link", "Next page"))
    page = browser_snapshot()["snapshot"]
    seen.append(re.search(r'cell "(Product \\d+)"', page).group(1))
    browser_back()
    browser_back()
print(len(seen), seen[0], seen[-1])
"""


def test_a_twenty_search_loop_fits_the_default_budget(
    chromium: str, make_runtime: Callable[..., Runtime], web_app: LocalWebApp
) -> None:
    """What a user found stopping after 9 items under the old default of 50: 20 searches, each
    typed, read, paged and read again, then back to the form (7 calls an item)."""
    queries = ["product"] * 10 + ["garden", "kitchen", "tools", "toys"] * 2 + ["Product 0", "Product 01"]
    code = f"BASE = {web_app.url!r}\nQUERIES = {queries!r}\n" + SEARCH_LOOP
    result = run_ok(make_runtime(), code, timeout=600)
    assert result.output.split()[0] == "20"
    assert (result.tool_calls_made, result.refused_calls, result.budget_exhausted) == (1 + 20 * 7, 0, False)


def test_each_browser_tool_returns_its_declared_shape(make_browser: MakeBrowser, web_app: LocalWebApp) -> None:
    browser = make_browser()
    registry = default_registry()
    calls: list[tuple[str, dict[str, Any]]] = [
        ("browser_navigate", {"url": web_app.url + "/form"}),
        ("browser_snapshot", {}),
        ("browser_type", {"ref": "@e1", "text": "garden", "submit": True}),
        ("browser_snapshot", {"full": True}),
        ("browser_scroll", {"direction": "down"}),
        ("browser_press", {"key": "Tab"}),
        ("browser_back", {}),
        ("browser_snapshot", {}),
        ("browser_click", {"ref": "@e5"}),  # "Say hello"
    ]
    for name, args in calls:
        result = browser(name, **args)
        tool = registry.get(name)
        assert tool is not None
        assert mismatches(result, tool.returns) == [], (name, result)
