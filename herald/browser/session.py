"""`BrowserSession`: one browser per Herald session, driven from one thread.

Playwright's sync objects belong to the thread that created them, while tool calls arrive on the
dispatcher's RPC threads (several at once when a script uses `parallel`). So the session owns a
single-thread executor: the browser is started on that thread the first time a tool needs it,
every operation is queued there (which also serialises them), and `close()` tears it down there.

Connection policy: the browser is launched (local Chromium) or attached (`browser.cdp_url`) on
first use. When the connection is found dropped — the browser crashed, the remote end went away or
was restarted — the call reconnects (or relaunches) once, runs again, and its result carries a
`note` saying so: the old page and its refs are gone, so the model knows to navigate again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import sync_playwright

from ..config import BrowserSettings
from . import actions
from .errors import BrowserError
from .launch import connect_cdp, first_line, launch_local, redact

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Playwright

log = logging.getLogger(__name__)
Result = dict[str, Any]

# Messages of Playwright errors that mean the browser (not just one call) is gone.
_DROPPED = (
    "browser has been closed",
    "browser has disconnected",
    "target page, context or browser has been closed",
    "connection closed",
    "target closed",
    "target crashed",
    "websocket error",
    "socket hang up",
)


@dataclass
class Tab:
    """The page tools act on and the refs of its latest snapshot (browser thread only)."""

    page: Page
    settings: BrowserSettings
    spill_dir: Path
    generation: int = 0  # bumped by every main-frame navigation
    refs: dict[str, str] = field(default_factory=dict)
    refs_generation: int = -1
    opened: Page | None = None  # a tab the last action opened (a target=_blank link)

    def watch(self) -> None:
        self.page.on("framenavigated", self._navigated)

    def _navigated(self, frame: Any) -> None:
        if frame == self.page.main_frame:
            self.generation += 1


class BrowserSession:
    def __init__(self, settings: BrowserSettings, spill_dir: Path) -> None:
        self.settings = settings
        self.spill_dir = spill_dir
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        # Touched on the browser thread only:
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._context: BrowserContext | None = None
        self._tab: Tab | None = None
        self._opened_page = False  # we opened the page (attached browsers: close it on exit)
        self._pending_note: str | None = None
        self._new_pages: list[Page] = []
        self._lost_reason: str | None = None

    # -- the browser thread ------------------------------------------------------------------

    def run(self, action: Callable[[Tab], Result]) -> Result:
        """Run `action` on the browser thread with a live page; reconnect once if it dropped."""
        with self._lock:
            if self._closed:
                raise BrowserError("the browser session is closed (the Herald session ended).")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="herald-browser")
            executor = self._executor
        try:
            future = executor.submit(self._run_here, action)
        except RuntimeError:  # close() won the race
            raise BrowserError("the browser session is closed (the Herald session ended).") from None
        return future.result()

    def _run_here(self, action: Callable[[Tab], Result]) -> Result:
        try:
            tab = self._ensure()
            try:
                result = action(tab)
            except Exception as exc:
                result = self._recover(action, exc)
        except BrowserError as exc:  # a reconnect before the failure is news the model needs too
            note = self._take_note()
            raise BrowserError(f"{exc} Note: {note}" if note else str(exc), exc.kind) from None
        if self._tab is not None and self._tab.opened is not None:
            popup, self._tab.opened = self._tab.opened, None
            self._switch_to(popup, "the link opened a new tab ({url}); this and later calls act on that tab.")
            result.update(actions.page_info(self._tab))
        note = self._take_note()
        if note:
            result["note"] = note
        return result

    def _recover(self, action: Callable[[Tab], Result], exc: Exception) -> Result:
        """After a failed action: raise its error, or — when the browser or the page went away —
        reconnect (relaunch) or reopen the page and run the action once more."""
        if self._alive():
            assert self._tab is not None
            if isinstance(exc, BrowserError):
                raise exc
            if not (_looks_dropped(exc) and self._tab.page.is_closed()):
                raise BrowserError(first_line(exc)) from None
            self._open_tab("the page was closed")
        else:
            self._lost(f"the browser connection dropped ({first_line(exc)})")
            self._connect()
        assert self._tab is not None
        try:
            return action(self._tab)
        except BrowserError:
            raise
        except Exception as again:
            raise BrowserError(first_line(again)) from None

    def _take_note(self) -> str | None:
        note, self._pending_note = self._pending_note, None
        return note

    def _alive(self) -> bool:
        """Whether the browser still answers: Playwright may not have noticed a dropped socket."""
        if self._browser is None or self._context is None or not self._browser.is_connected():
            return False
        try:
            self._context.cookies()  # a round trip to the browser
        except Exception:
            return False
        return self._browser.is_connected()

    def _ensure(self) -> Tab:
        if self._browser is None:
            self._connect()
        elif not self._browser.is_connected():
            self._lost("the browser connection had dropped")
            self._connect()
        assert self._tab is not None
        if self._tab.page.is_closed():
            self._open_tab("the page had been closed")
        self._follow_new_tab()
        return self._tab

    def _lost(self, reason: str) -> None:
        self._disconnect()
        self._lost_reason = reason  # told with the first call that gets a browser again

    def _connect(self) -> None:
        if self._playwright is None:
            self._playwright = sync_playwright().start()
        if self.settings.cdp_url:
            self._browser = connect_cdp(self._playwright, self.settings)
        else:
            self._browser = launch_local(self._playwright, self.settings)
        try:
            self._use_context(self._browser)
        except Exception as exc:
            self._disconnect()
            raise BrowserError(f"the browser started but gave no page to work in: {first_line(exc)}. Try again.") from None
        if self._lost_reason:
            again = f"reconnected to {redact(self.settings.cdp_url)}" if self.settings.cdp_url else "relaunched Chromium"
            self._pending_note = (
                f"{self._lost_reason}; {again}. This call ran on a fresh page: earlier refs, "
                "page state and history are gone."
            )
            self._lost_reason = None

    def _use_context(self, browser: Browser) -> None:
        contexts = browser.contexts
        # An attached browser comes with its own context (its cookies, its logins): use it.
        self._context = contexts[0] if contexts else browser.new_context()
        self._context.set_default_timeout(self.settings.action_timeout * 1000)
        self._context.set_default_navigation_timeout(self.settings.navigation_timeout * 1000)
        self._context.on("page", self._popup)
        pages = self._context.pages
        self._tab = None
        if pages:
            self._adopt(pages[0], opened=False)
        else:
            self._open_tab(None)

    def _open_tab(self, reason: str | None) -> None:
        assert self._context is not None
        self._adopt(self._context.new_page(), opened=True)
        if reason:
            self._pending_note = f"{reason}; opened a new blank page. Navigate again."

    def _adopt(self, page: Page, *, opened: bool) -> None:
        self._tab = Tab(page, self.settings, self.spill_dir)
        self._tab.watch()
        self._opened_page = opened

    def _popup(self, page: Page) -> None:
        self._new_pages.append(page)  # followed after the action: no Playwright calls in handlers

    def _follow_new_tab(self) -> None:
        """The page opened a tab since the last call (window.open, a late popup): act on that
        tab from now on, as a person would, and say so."""
        pages, self._new_pages = self._new_pages, []
        current = self._tab.page if self._tab is not None else None
        opened = [p for p in pages if p is not current and not p.is_closed()]
        if opened:
            self._switch_to(opened[-1], "the page had opened a new tab ({url}); this and later calls act on that tab.")

    def _switch_to(self, page: Page, note: str) -> None:
        with contextlib.suppress(Exception):
            page.wait_for_load_state("load", timeout=self.settings.navigation_timeout * 1000)
        self._adopt(page, opened=True)
        self._new_pages = [p for p in self._new_pages if p is not page]
        self._pending_note = note.format(url=page.url)

    def _disconnect(self) -> None:
        browser, self._browser, self._context, self._tab = self._browser, None, None, None
        if browser is None:
            return
        with contextlib.suppress(Exception):
            browser.close()

    def _shutdown(self) -> None:
        if self._browser is not None and self.settings.cdp_url and self._opened_page and self._tab:
            with contextlib.suppress(Exception):  # leave the remote browser as we found it
                self._tab.page.close()
        self._disconnect()
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                self._playwright.stop()
            self._playwright = None

    # -- lifecycle -----------------------------------------------------------------------------

    def close_browser(self) -> bool:
        """Close the browser now (the next call starts a new one); False if none was open."""
        with self._lock:
            executor = self._executor
        if executor is None or self._closed:
            return False

        def close_here() -> bool:
            was_open = self._browser is not None
            self._shutdown()
            return was_open

        return executor.submit(close_here).result()

    def close(self) -> None:
        """End the session: close the browser (or detach from it) and stop the thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is None:
            return
        done = executor.submit(self._shutdown)
        try:
            # A running call finishes first; its own timeouts bound the wait.
            done.result(timeout=self.settings.navigation_timeout + self.settings.launch_timeout + 10)
        except Exception:
            log.exception("the browser did not shut down cleanly")
        executor.shutdown(wait=False, cancel_futures=True)

    # -- the tools' operations -----------------------------------------------------------------

    def navigate(self, url: str) -> Result:
        return self.run(lambda tab: actions.navigate(tab, url))

    def snapshot(self, full: bool = False) -> Result:
        return self.run(lambda tab: actions.snapshot(tab, full))

    def click(self, ref: str) -> Result:
        return self.run(lambda tab: actions.click(tab, ref))

    def type(self, ref: str, text: str, submit: bool = False) -> Result:
        return self.run(lambda tab: actions.type_text(tab, ref, text, submit))

    def scroll(self, direction: str) -> Result:
        return self.run(lambda tab: actions.scroll(tab, direction))

    def back(self) -> Result:
        return self.run(actions.back)

    def press(self, key: str) -> Result:
        return self.run(lambda tab: actions.press(tab, key))

    def screenshot(self, path: Path, full_page: bool = False) -> Result:
        return self.run(lambda tab: actions.screenshot(tab, path, full_page))


def _looks_dropped(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(marker in text for marker in _DROPPED)
