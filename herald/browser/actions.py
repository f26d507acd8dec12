"""What each browser tool does to the page. Runs on the session's browser thread only.

Every action returns a small dict (where the page is now, plus what happened); failures the
model can act on raise `BrowserError` with the next step in the message. Playwright errors that
are not understood here propagate, so the session can tell a dropped connection from a bad call.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Locator, Request, Response
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from ..capture import CappedCapture
from ..deadlines import time_left
from .errors import BrowserError
from .guard import REFUSED_HEADER
from .launch import first_line
from .snapshot import normalize_ref, render

if TYPE_CHECKING:
    from .tab import Tab

Result = dict[str, Any]
KEY_HELP = (
    "Use a key name such as Enter, Tab, Escape, Backspace, ArrowDown, PageDown, Home, a single "
    "character, or a combination like Control+A or Shift+Tab."
)
# The nearest link or form around the element (itself included), when its target opens another
# tab. A selector, not a page function: Playwright answers it in the world where the snapshot
# already put its script, while the first page function after a navigation (the main world)
# costs ~35 ms to set up; that was most of a click's own time.
_TARGET = "translate(@target, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')"
OPENS_TAB = (
    "xpath=ancestor-or-self::*[((self::a or self::area) and @href) or self::form][1]"
    f"[@target and {_TARGET} != '' and {_TARGET} != '_self' and {_TARGET} != '_parent' and {_TARGET} != '_top']"
)
_SCROLL = """(direction) => {
  const el = document.scrollingElement || document.documentElement;
  const step = Math.round(window.innerHeight * 0.85);
  if (direction === 'down') window.scrollBy({top: step, behavior: 'instant'});
  else if (direction === 'up') window.scrollBy({top: -step, behavior: 'instant'});
  else if (direction === 'top') window.scrollTo({top: 0, behavior: 'instant'});
  else window.scrollTo({top: el.scrollHeight, behavior: 'instant'});
  return {scroll_y: Math.round(window.scrollY), page_height: el.scrollHeight,
          viewport_height: window.innerHeight};
}"""


def budget_ms(seconds: float) -> float:
    """A Playwright timeout: `seconds` cut to what the run has left, in ms (never 0: that would
    mean no timeout at all)."""
    left = time_left(seconds)
    return max(1.0, (seconds if left is None else left) * 1000)


def page_info(tab: Tab) -> Result:
    try:
        title = tab.page.title()
    except PlaywrightError:  # a navigation replaced the document mid-call
        title = ""
    return {"url": tab.page.url, "title": title}


def _absolute(url: str) -> str:
    url = url.strip()
    if not url:
        raise BrowserError("browser_navigate: the URL is empty. Pass a full URL such as https://example.com/.")
    if "://" not in url and not url.startswith(("about:", "data:", "file:", "chrome:")):
        return "https://" + url  # what a person typing "example.com" into the address bar means
    return url


def _settle(tab: Tab, result: Result) -> Result:
    """Wait for a page load the action started (Playwright already waited for it to commit)."""
    timeout = tab.settings.navigation_timeout
    try:
        tab.page.wait_for_load_state("load", timeout=budget_ms(timeout))
    except PlaywrightTimeout:
        result["note"] = f"the page was still loading after {timeout:g} s; a snapshot may show it incomplete."
    return {**page_info(tab), **result}


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        port = None
    return parts.scheme, parts.hostname or "", port


def _refused(tab: Tab, mark: int, target: str, hops: list[str]) -> BrowserError | None:
    """The navigation's refusal by the URL policy, naming the hop and the rule, if it was one:
    a refusal of one of its hops (the proxy knows an https hop by its host and port only)."""
    refused = tab.refusals.since(mark) if tab.refusals is not None else []
    exact = [r for r in refused if r.url in hops]
    origins = {_origin(hop) for hop in hops}
    matching = exact or [r for r in refused if _origin(r.url) in origins]
    if not matching:
        return None
    hit = matching[0]
    hop = hit.url if hit.url == target else f"{hit.url} (on the way from {target})"
    return BrowserError(
        f"browser_navigate: refused {hop}: {hit.reason}. Not loaded: navigate to an allowed site instead.",
        "PolicyRefused",
    )


def _goto(tab: Tab, target: str, timeout: float) -> Response | None:
    try:
        return tab.page.goto(target, wait_until="load", timeout=budget_ms(timeout))
    except PlaywrightError as exc:
        # The error page of the previous, failed navigation committed just after it failed and
        # took this one's place: the page is settled now, so go again once.
        if 'interrupted by another navigation to "chrome-error://' not in first_line(exc):
            raise
    return tab.page.goto(target, wait_until="load", timeout=budget_ms(timeout))


def navigate(tab: Tab, url: str) -> Result:
    target = _absolute(url)
    timeout = tab.settings.navigation_timeout
    mark = tab.refusals.mark() if tab.refusals is not None else 0
    hops: list[str] = []  # the URLs this navigation requested, redirects included

    def requested(request: Request) -> None:
        if request.is_navigation_request() and request.frame == tab.page.main_frame:
            hops.append(request.url)

    if tab.refusals is not None:
        tab.page.on("request", requested)
    try:
        response = _goto(tab, target, timeout)
    except PlaywrightTimeout:
        raise BrowserError(
            f"browser_navigate: {target} did not finish loading within {timeout:g} s "
            "(browser.navigation_timeout). The site may be slow or unreachable: try again, try "
            "another URL, or take a snapshot to see what did load.",
            "NavigationTimeout",
        ) from None
    except PlaywrightError as exc:
        reason = first_line(exc).removeprefix("Page.goto: ")
        if not reason.startswith("net::") and "invalid url" not in reason.lower():
            raise  # not about this URL: let the session check the connection
        refused = _refused(tab, mark, target, hops)
        if refused is not None:
            # Chromium shows its error page next: let it commit now rather than cut into the
            # model's next navigation.
            with contextlib.suppress(PlaywrightError):
                tab.page.wait_for_url(lambda url: url.startswith("chrome-error://"), wait_until="commit",
                                      timeout=budget_ms(2))
            raise refused from None
        raise BrowserError(
            f"browser_navigate: could not load {target}: {reason}. Check the URL, or try another page.",
            "NavigationFailed",
        ) from None
    finally:
        if tab.refusals is not None:
            tab.page.remove_listener("request", requested)
    if response is not None and response.status == 403 and response.headers.get(REFUSED_HEADER.lower()):
        refused = _refused(tab, mark, target, hops)  # the proxy's answer to a refused http hop
        if refused is not None:
            raise refused
    result = {**page_info(tab), "status": response.status if response is not None else None}
    return result


def snapshot(tab: Tab, full: bool) -> Result:
    generation = tab.generation  # taken first: a navigation during the snapshot makes its refs stale
    aria = tab.page.aria_snapshot(mode="ai", timeout=budget_ms(tab.settings.action_timeout))
    view = render(aria, full=full)
    tab.refs, tab.refs_generation = view.refs, generation
    capture = CappedCapture(
        tab.settings.snapshot_max_bytes,
        spill_dir=tab.spill_dir,
        spill_name=f"snapshot-{os.getpid()}-{secrets.token_hex(4)}.txt",
    )
    try:
        capture.feed(view.text.encode("utf-8"))
    finally:
        capture.close()
    result = {**page_info(tab), "snapshot": capture.text("snapshot"), "refs": len(view.refs)}
    if capture.spill_path is not None:
        result["truncated"] = True
        result["spill_path"] = str(capture.spill_path)
    return result


def _resolve(tab: Tab, ref: str, tool: str) -> Locator:
    ref = normalize_ref(ref)
    again = "Take a new snapshot with browser_snapshot() and use a ref from it."
    if tab.refs_generation < 0:
        raise BrowserError(
            f"{tool}: there is no snapshot of this page yet, so {ref} means nothing. {again}", "StaleRef"
        )
    if tab.refs_generation != tab.generation:
        raise BrowserError(
            f"{tool}: {ref} is stale: the page has navigated since the snapshot it came from. {again}", "StaleRef"
        )
    aria_ref = tab.refs.get(ref)
    if aria_ref is None:
        known = f"@e1–@e{len(tab.refs)}" if tab.refs else "none"
        raise BrowserError(f"{tool}: {ref} is not in the latest snapshot (its refs: {known}). {again}", "StaleRef")
    locator = tab.page.locator(f"aria-ref={aria_ref}")
    if locator.count() == 0:
        raise BrowserError(f"{tool}: {ref} is stale: that element is no longer on the page. {again}", "StaleRef")
    return locator


def _timed_out(tool: str, ref: str, tab: Tab, doing: str) -> BrowserError:
    return BrowserError(
        f"{tool}: could not {doing} {ref} within {tab.settings.action_timeout:g} s: it may be hidden, "
        "covered by another element or disabled. Take a new snapshot, scroll, or pick another element.",
        "ActionTimeout",
    )


def click(tab: Tab, ref: str) -> Result:
    locator = _resolve(tab, ref, "browser_click")
    clicked = False
    try:
        if locator.locator(OPENS_TAB).count():
            # Wait for the new tab itself: its event could otherwise arrive after we return.
            with tab.page.context.expect_page(timeout=budget_ms(tab.settings.navigation_timeout)) as popup:
                locator.click()
                clicked = True
            tab.opened = popup.value
        else:
            locator.click()
    except PlaywrightTimeout:
        if not clicked:
            raise _timed_out("browser_click", ref, tab, "click") from None
        # The link asked for a new tab but none opened (a popup blocker): the click still happened.
    return _settle(tab, {"clicked": normalize_ref(ref)})


def type_text(tab: Tab, ref: str, text: str, submit: bool) -> Result:
    locator = _resolve(tab, ref, "browser_type")
    try:
        # Fill first, a drop-down only when it refuses: asking the element's tag first would be
        # a page function, the slow kind (see OPENS_TAB), on every call.
        try:
            locator.fill(text)
        except PlaywrightError as exc:
            if "not an <input>" not in first_line(exc) or locator.evaluate("e => e.tagName") != "SELECT":
                raise
            _choose(locator, ref, text)
        if submit:
            locator.press("Enter")
    except PlaywrightTimeout:
        raise _timed_out("browser_type", ref, tab, "type into") from None
    except PlaywrightError as exc:
        message = first_line(exc)
        if "not an <input>" not in message and "Element is not" not in message:
            raise
        raise BrowserError(
            f"browser_type: {ref} does not take text ({message}). Type into a textbox, searchbox "
            "or combobox ref from the latest snapshot.",
            "NotEditable",
        ) from None
    return _settle(tab, {"typed": normalize_ref(ref), "submitted": submit})


def _choose(locator: Locator, ref: str, text: str) -> None:
    """Typing into a <select> picks the option with that label (or value)."""
    options: list[list[str]] = locator.evaluate("e => Array.from(e.options).map(o => [o.label, o.value])")
    for label, value in options:
        if text in (label, value):
            locator.select_option(value=value)
            return
    choices = ", ".join(repr(label) for label, _ in options[:30])
    raise BrowserError(
        f"browser_type: {ref} is a drop-down without an option {text!r}. Its options: {choices}.", "NoSuchOption"
    )


def scroll(tab: Tab, direction: str) -> Result:
    before = tab.page.evaluate("() => Math.round(window.scrollY)")
    state: Result = tab.page.evaluate(_SCROLL, direction)
    if state["scroll_y"] == before and direction in ("up", "down"):
        # The window does not scroll: the content may live in a scrolling container instead.
        size = tab.page.viewport_size or {"width": 1280, "height": 720}
        tab.page.mouse.move(size["width"] / 2, size["height"] / 2)
        tab.page.mouse.wheel(0, state["viewport_height"] * (0.85 if direction == "down" else -0.85))
        tab.page.wait_for_timeout(150)
    state["at_top"] = state["scroll_y"] <= 0
    state["at_bottom"] = state["scroll_y"] + state["viewport_height"] >= state["page_height"] - 2
    return {**page_info(tab), **state}


def back(tab: Tab) -> Result:
    before = tab.page.url
    timeout = tab.settings.navigation_timeout
    try:
        response = tab.page.go_back(wait_until="load", timeout=budget_ms(timeout))
    except PlaywrightTimeout:
        raise BrowserError(
            f"browser_back: the previous page did not finish loading within {timeout:g} s. "
            "Take a snapshot to see what loaded, or navigate to the URL again.",
            "NavigationTimeout",
        ) from None
    if response is None and tab.page.url == before:
        raise BrowserError(
            "browser_back: there is no earlier page in this tab's history. Navigate to a URL instead.",
            "NoHistory",
        )
    return page_info(tab)


def press(tab: Tab, key: str) -> Result:
    if not key.strip():
        raise BrowserError(f"browser_press: the key is empty. {KEY_HELP}", "BadKey")
    focused = tab.page.locator("*:focus")
    # Pressing through a locator (not the raw keyboard) makes Playwright wait for a navigation
    # the key starts, e.g. Enter in a form, so the next snapshot sees the new page.
    target = focused.first if focused.count() else tab.page.locator("body")
    try:
        target.press(key)
    except PlaywrightError as exc:
        if "Unknown key" not in str(exc):
            raise
        raise BrowserError(f"browser_press: unknown key {key!r}. {KEY_HELP}", "BadKey") from None
    return _settle(tab, {"pressed": key})


def screenshot(tab: Tab, path: Path, full_page: bool) -> Result:
    path.parent.mkdir(parents=True, exist_ok=True)
    tab.page.screenshot(path=str(path), full_page=full_page)
    return {**page_info(tab), "path": str(path), "bytes": path.stat().st_size}
