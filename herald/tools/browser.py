"""Browser tools: drive the session's browser (local Chromium or a CDP URL) by snapshot refs.

The session's `BrowserSession` lives in the ToolContext cache: made on the first browser call,
reused by every later call and script of the session, closed with the session. Refs (@e1, @e2,
...) come from `browser_snapshot` and stay valid until the next snapshot or navigation.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired, TypedDict

from ..backends.base import call_cwd
from ..config import Settings
from .context import ToolContext
from .network import backend_dial
from .registry import Tool, ToolError
from .resources import BROWSER, fixed
from .webpackages import installed

if TYPE_CHECKING:
    from ..browser.session import BrowserSession

SESSION_KEY = "browser.session"
Result = dict[str, Any]


class PageResult(TypedDict):
    """Where the page is now; `note` says what else happened (a reconnect, a new tab, a slow load)."""

    url: str
    title: str
    note: NotRequired[str]  # what else happened: a reconnect, a new tab, a slow load


class NavigateResult(PageResult):
    status: Annotated[int | None, "HTTP status"]


class SnapshotResult(PageResult):
    snapshot: Annotated[str, "the accessibility tree; refs like @e3"]
    refs: int
    truncated: NotRequired[Literal[True]]
    spill_path: NotRequired[Annotated[str, "the whole snapshot"]]


class ClickResult(PageResult):
    clicked: str


class TypeResult(PageResult):
    typed: str
    submitted: bool


class ScrollResult(PageResult):
    scroll_y: int
    page_height: int
    viewport_height: int
    at_top: bool
    at_bottom: bool


class PressResult(PageResult):
    pressed: str


class ScreenshotResult(PageResult):
    path: str
    bytes: int


class CloseResult(TypedDict):
    closed: bool
    note: str


def browser_session(ctx: ToolContext) -> BrowserSession:
    """The session's browser, created on first use (the browser itself starts lazily too)."""
    with ctx.cache_lock:
        session: BrowserSession | None = ctx.cache.get(SESSION_KEY)
        if session is None:
            if ctx.closed:  # a browser made now would outlive the session
                raise ToolError("the browser session is closed (the Herald session ended).", "BrowserUnavailable")
            try:
                from ..browser.session import BrowserSession
            except ImportError:
                raise ToolError(
                    "the browser tools need Playwright, which is not installed: pip install "
                    "'herald[browser]' (and Chromium: apt-get install chromium).",
                    "BrowserUnavailable",
                ) from None
            session = BrowserSession(ctx.settings.browser, ctx.spill_dir, ctx.web_policy, dial=backend_dial(ctx))
            ctx.cache[SESSION_KEY] = session
            ctx.closers.append(session.close)
        return session


def warm_browser(ctx: ToolContext) -> None:
    """Launch (or attach to) the session's browser now, on its thread: the first call then finds
    it running, or waits for this launch there (one launch, never two)."""
    if installed("playwright"):
        browser_session(ctx).warm()


def _browser_call(
    tool: str, operation: Callable[[BrowserSession, Result], Result]
) -> Callable[[Result, ToolContext], Result]:
    def handler(args: Result, ctx: ToolContext) -> Result:
        from ..browser.errors import BrowserError

        try:
            return operation(browser_session(ctx), args)
        except BrowserError as exc:
            message = str(exc)
            if not message.startswith("browser_"):
                message = f"{tool}: {message}"
            raise ToolError(message, exc.kind) from None

    return handler


def _screenshot(session: BrowserSession, args: Result, ctx: ToolContext) -> Result:
    if args["path"]:
        path = Path(args["path"]).expanduser()
        if not path.is_absolute():
            # Chromium writes on this machine: a relative path means the local backend's cwd.
            base = Path(call_cwd(ctx.backend)) if ctx.backend.name == "local" else ctx.settings.data_dir / "screenshots"
            path = base / path
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = ctx.settings.data_dir / "screenshots" / f"screenshot-{stamp}-{secrets.token_hex(3)}.png"
    return session.screenshot(path, args["full_page"])


def browser_screenshot(args: Result, ctx: ToolContext) -> Result:
    return _browser_call("browser_screenshot", lambda s, a: _screenshot(s, a, ctx))(args, ctx)


def browser_close(args: Result, ctx: ToolContext) -> Result:
    with ctx.cache_lock:
        session: BrowserSession | None = ctx.cache.get(SESSION_KEY)
    closed = session.close_browser() if session is not None else False
    return {"closed": closed, "note": "the next browser call starts a new browser" if closed else "no browser was open"}


def browser_unavailable(settings: Settings) -> str | None:
    """Why the browser tools cannot work with these settings, or None. Cheap: nothing is imported
    or launched (a Chromium that is found but will not start is reported by the first call)."""
    from ..browser.launch import find_chromium

    if not installed("playwright"):
        return "the playwright package is not installed (pip install 'herald[browser]')"
    if settings.browser.cdp_url or find_chromium(settings.browser.executable) is not None:
        return None
    wanted = settings.browser.executable or "Chromium"
    return f"no browser: {wanted} is not installed (apt-get install chromium, or set browser.cdp_url)"


def _schema(properties: dict[str, Any] | None = None, required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties or {}, "required": required or []}


REF = {"type": "string", "description": "An element ref from the latest browser_snapshot, e.g. '@e3'."}

TOOLS = [
    Tool(
        name="browser_navigate",
        description=(
            "Open a URL in the session's browser tab and wait for it to load. The browser (local "
            "Chromium, or the one at browser.cdp_url) is started ahead when the session or a script "
            "names a browser tool, else on first use, and is reused. "
            "Then call browser_snapshot() to read the page and get element refs."
        ),
        parameters=_schema(
            {"url": {"type": "string", "description": "Full URL; 'example.com' means https://example.com."}}, ["url"]
        ),
        handler=_browser_call("browser_navigate", lambda s, a: s.navigate(a["url"])),
        touches=fixed(BROWSER),
        unavailable=browser_unavailable,
        warm=warm_browser,
        returns=NavigateResult,
    ),
    Tool(
        name="browser_snapshot",
        description=(
            "Read the current page as an accessibility tree in text. Every element you can act on "
            "carries a ref (@e1, @e2, ...) to pass to browser_click / browser_type; refs stay valid "
            "until the next snapshot or navigation. The default compact view folds unnamed wrapper "
            "elements; full=True keeps the whole tree. A long snapshot is cut in the middle with a "
            "marker; the full text is in the file named by spill_path."
        ),
        parameters=_schema(
            {"full": {"type": "boolean", "default": False, "description": "Keep every node of the tree."}}
        ),
        handler=_browser_call("browser_snapshot", lambda s, a: s.snapshot(a["full"])),
        touches=fixed(BROWSER, shared=True),
        unavailable=browser_unavailable,
        warm=warm_browser,
        returns=SnapshotResult,
    ),
    Tool(
        name="browser_click",
        description="Click the element with this ref (waits for a page load it starts).",
        parameters=_schema({"ref": REF}, ["ref"]),
        handler=_browser_call("browser_click", lambda s, a: s.click(a["ref"])),
        touches=fixed(BROWSER),
        unavailable=browser_unavailable,
        warm=warm_browser,
        returns=ClickResult,
        mutates=True,
    ),
    Tool(
        name="browser_type",
        description=(
            "Replace the text of a field (textbox, searchbox; for a drop-down, pick the option with "
            "this label) and, with submit=True, press Enter to submit it."
        ),
        parameters=_schema(
            {
                "ref": REF,
                "text": {"type": "string", "description": "The text to put in the field."},
                "submit": {"type": "boolean", "default": False, "description": "Press Enter afterwards."},
            },
            ["ref", "text"],
        ),
        handler=_browser_call("browser_type", lambda s, a: s.type(a["ref"], a["text"], a["submit"])),
        touches=fixed(BROWSER),
        unavailable=browser_unavailable,
        warm=warm_browser,
        returns=TypeResult,
        mutates=True,
    ),
    Tool(
        name="browser_scroll",
        description="Scroll the page by about one screen (up, down) or to its top or bottom.",
        parameters=_schema(
            {
                "direction": {
                    "type": "string",
                    "enum": ["down", "up", "top", "bottom"],
                    "description": "down, up, top or bottom.",
                }
            },
            ["direction"],
        ),
        handler=_browser_call("browser_scroll", lambda s, a: s.scroll(a["direction"])),
        touches=fixed(BROWSER),
        unavailable=browser_unavailable,
        warm=warm_browser,
        returns=ScrollResult,
    ),
    Tool(
        name="browser_back",
        description="Go back to the previous page in the tab's history.",
        parameters=_schema(),
        handler=_browser_call("browser_back", lambda s, a: s.back()),
        touches=fixed(BROWSER),
        unavailable=browser_unavailable,
        warm=warm_browser,
        returns=PageResult,
    ),
    Tool(
        name="browser_press",
        description=(
            "Press a key (Enter, Tab, Escape, ArrowDown, PageDown, a character, Control+A, ...) "
            "in the focused element, or the page when nothing is focused."
        ),
        parameters=_schema({"key": {"type": "string", "description": "A key name or combination."}}, ["key"]),
        handler=_browser_call("browser_press", lambda s, a: s.press(a["key"])),
        touches=fixed(BROWSER),
        unavailable=browser_unavailable,
        warm=warm_browser,
        returns=PressResult,
        mutates=True,
    ),
    Tool(
        name="browser_screenshot",
        description="Save a PNG of the current page (the viewport, or the whole page with full_page=True).",
        parameters=_schema(
            {
                "path": {"type": ["string", "null"], "description": "Where to save it (default: Herald's data dir)."},
                "full_page": {"type": "boolean", "default": False},
            }
        ),
        handler=browser_screenshot,
        touches=fixed(BROWSER, shared=True),
        unavailable=browser_unavailable,
        warm=warm_browser,
        returns=ScreenshotResult,
        sandbox=False,
        mutates=True,
    ),
    Tool(
        name="browser_close",
        description="Close the session's browser (or detach from an attached one); "
        "the next browser call starts afresh.",
        parameters=_schema(),
        handler=browser_close,
        touches=fixed(BROWSER),
        unavailable=browser_unavailable,
        warm=warm_browser,
        returns=CloseResult,
        sandbox=False,
        mutates=True,
    ),
]
