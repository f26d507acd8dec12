"""The snapshot text the model reads, from Playwright's AI-mode aria snapshot (no browser needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from herald import load_settings
from herald.browser.errors import BrowserError
from herald.browser.launch import redact
from herald.browser.snapshot import normalize_ref, render

ARIA = """\
- generic [active] [ref=e1]:
  - heading "Shop" [level=1] [ref=e2]
  - generic [ref=e3]:
    - link "Next [ref=e9] page" [ref=e4] [cursor=pointer]:
      - /url: /results?page=2
    - generic [ref=e5] [cursor=pointer]: Open menu
    - generic [ref=e6]
  - textbox "Search" [ref=e7]: garden
  - paragraph [ref=e8]: "Total: 3"
  - checkbox "Agree" [checked] [ref=e10]"""


def test_interactive_elements_get_short_refs_in_order() -> None:
    view = render(ARIA)
    assert view.refs == {"@e1": "e4", "@e2": "e5", "@e3": "e7", "@e4": "e10"}
    assert view.text == (
        '- heading "Shop" [level=1]\n'
        '- link "Next [ref=e9] page" @e1:\n'
        "  - /url: /results?page=2\n"
        "- generic @e2: Open menu\n"
        '- textbox "Search" @e3: garden\n'
        '- paragraph: "Total: 3"\n'
        '- checkbox "Agree" [checked] @e4'
    )


def test_full_view_keeps_the_wrappers_with_the_same_refs() -> None:
    view = render(ARIA, full=True)
    assert view.refs == render(ARIA).refs
    assert view.text.splitlines()[:3] == ["- generic:", '  - heading "Shop" [level=1]', "  - generic:"]
    assert "    - generic\n" in view.text + "\n"


def test_empty_page() -> None:
    assert render("").text == "(the page is empty)" and render("").refs == {}


@pytest.mark.parametrize(("given", "ref"), [("@e3", "@e3"), ("e3", "@e3"), (" @e03 ", "@e3")])
def test_ref_forms(given: str, ref: str) -> None:
    assert normalize_ref(given) == ref


@pytest.mark.parametrize("given", ["", "3", "@x3", "button", "@e"])
def test_bad_refs_show_the_form(given: str) -> None:
    with pytest.raises(BrowserError, match="Refs look like @e3"):
        normalize_ref(given)


def test_cdp_urls_lose_their_secrets_in_messages() -> None:
    assert redact("wss://connect.example.com/session?apiKey=sk-123") == "wss://connect.example.com/session?…"
    assert redact("http://user:pw@127.0.0.1:9222") == "http://127.0.0.1:9222"


def test_browser_and_web_settings_from_file_and_environment(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[browser]\ncdp_url = "ws://10.0.0.5:9222/devtools/browser/x"\nheadless = false\n'
                      '[web]\nextract_char_limit = 5000\nfirecrawl_api_url = "http://firecrawl.lan:3002"\n')
    settings = load_settings(config, env={"HERALD_BROWSER_NAVIGATION_TIMEOUT": "12", "HERALD_WEB_EXTRACT": "direct"})
    assert settings.browser.cdp_url == "ws://10.0.0.5:9222/devtools/browser/x" and settings.browser.headless is False
    assert settings.browser.navigation_timeout == 12.0
    assert settings.web.extract_char_limit == 5000 and settings.web.extract == "direct"
    assert settings.web.firecrawl_api_url == "http://firecrawl.lan:3002"
    copy = settings.with_overrides({"browser.cdp_url": "http://127.0.0.1:9333"})
    assert copy.browser.cdp_url == "http://127.0.0.1:9333" and settings.browser.cdp_url.startswith("ws://")
