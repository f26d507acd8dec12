"""`BrowserSession`: one browser per Herald session, driven from one thread.

Playwright's sync objects belong to the thread that created them, while tool calls arrive on the
dispatcher's RPC threads (several at once when a script uses `parallel`). So the session owns a
single-thread executor: the browser is started on that thread the first time a tool needs it,
every operation is queued there (which also serialises them), and `close()` tears it down there.

Where the browser may go: with a `WebPolicy` (the session's policy, from ToolContext.web_policy)
or a `dial` (the backend's network), a launched Chromium sends every connection through
`guard.GuardProxy`, which checks each one (redirect hops, frames, subresources, workers,
WebSockets) and connects, by `dial`, only to checked addresses. An attached browser
(`browser.cdp_url`) gets the proxy in a context of its own only to reach the backend's network
from this machine (guard.session_guard); otherwise its context routes requests through the same
check, which sees first hops but not redirects (Playwright continues those itself); see README.

Deadlines: a call carries its run's deadline (herald/deadlines.py) onto the browser thread; every
wait there (launch, navigation, action, load) is cut to what the run has left, and a call whose
run is over ends with an error saying so. `close()` waits a few seconds for a call in flight,
then kills the Playwright driver and the Chromium below it.

Connection policy: the browser is launched (local Chromium) or attached (`browser.cdp_url`) on
first use. When the connection is found dropped — the browser crashed, the remote end went away or
was restarted — the call reconnects (or relaunches) once, runs again, and its result carries a
`note` saying so: the old page and its refs are gone, so the model knows to navigate again.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import sync_playwright

from ..config import BrowserSettings
from ..deadlines import current_deadline, time_left
from ..webguard import Dial, WebPolicy
from . import actions
from .errors import BrowserError, looks_dropped
from .guard import GuardProxy, RefusalLog, route_context, session_guard
from .launch import connect_cdp, context_for, driver_pid, first_line, kill_driver, launch_local, redact
from .tab import Tab

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Playwright

log = logging.getLogger(__name__)
Result = dict[str, Any]

CLOSE_WAIT = 3.0  # seconds close() waits for a call in flight before killing the browser
RUN_GRACE = 2.0  # past the run's deadline, how long a caller waits for the browser thread
TIME_UP = "the run's time limit was reached"


class BrowserSession:
    def __init__(self, settings: BrowserSettings, spill_dir: Path, web_policy: WebPolicy | None = None,
                 dial: Dial | None = None) -> None:
        """`dial`: the connections made from the backend instead (through the guard, always)."""
        self.settings = settings
        self.spill_dir = spill_dir
        self.web_policy = web_policy
        self._dial = dial
        self._guard: GuardProxy | None = None  # started with the first launch under a policy
        self._refusals: RefusalLog | None = RefusalLog() if web_policy is not None else None
        self._driver_pid: int | None = None  # the Playwright driver (Chromium runs below it)
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self._warming: Future[None] | None = None  # the launch `warm` started, while it runs
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

    def warm(self) -> None:
        """Start the browser now, in the background, on its thread: a first call waits for this
        launch there rather than making another. Nothing once the session has used it."""
        with self._lock:
            if self._closed or self._executor is not None:
                return
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="herald-browser")
            self._warming = self._executor.submit(self._warm_here)

    def _warm_here(self) -> None:
        try:
            self._ensure()  # bounded by browser.launch_timeout, as a call's launch is
        except Exception as exc:  # the first call launches again and says what failed
            if not self._closed:
                log.warning("starting the browser ahead of its first call failed: %s", first_line(exc))

    def run(self, action: Callable[[Tab], Result]) -> Result:
        """Run `action` on the browser thread with a live page; reconnect once if it dropped."""
        with self._lock:
            if self._closed:
                raise BrowserError("the browser session is closed (the Herald session ended).")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="herald-browser")
            executor = self._executor
        left = time_left()
        if left == 0:
            raise BrowserError(f"not started: {TIME_UP}. Print what you have; the run is ending.", "Timeout")
        try:
            # The call's context (its deadline) goes with it to the browser thread.
            future = executor.submit(contextvars.copy_context().run, self._run_here, action)
        except RuntimeError:  # close() won the race
            raise BrowserError("the browser session is closed (the Herald session ended).") from None
        try:
            return future.result(timeout=None if left is None else left + RUN_GRACE)
        except FutureTimeout:  # the browser thread is stuck past the deadline (an earlier call)
            future.cancel()
            raise BrowserError(
                f"stopped: {TIME_UP} while the browser was busy. The run is ending.", "Timeout"
            ) from None

    def _run_here(self, action: Callable[[Tab], Result]) -> Result:
        try:
            if time_left() == 0:
                raise BrowserError(f"not started: {TIME_UP}. Print what you have; the run is ending.", "Timeout")
            tab = self._ensure()
            self._bound_waits()
            try:
                result = action(tab)
            except Exception as exc:
                if _time_up():
                    raise BrowserError(
                        f"stopped: {TIME_UP}. Print what you have; the run is ending.", "Timeout"
                    ) from None
                result = self._recover(action, exc)
        except BrowserError as exc:  # a reconnect before the failure is news the model needs too
            if _time_up() and exc.kind != "Timeout":
                exc = BrowserError(f"stopped: {TIME_UP} ({exc}). Print what you have; the run is ending.", "Timeout")
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
        if self._closed:  # close() ended the browser under this call: nothing to reconnect
            raise BrowserError("the browser session was closed while this call ran (the Herald session ended).")
        if self._alive():
            assert self._tab is not None
            if isinstance(exc, BrowserError):
                raise exc
            if not (looks_dropped(exc) and self._tab.page.is_closed()):
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

    def _bound_waits(self) -> None:
        """Every wait Playwright makes by default in this call ends by its run's deadline (and a
        call without one gets the configured timeouts back)."""
        if self._context is not None:
            self._context.set_default_timeout(actions.budget_ms(self.settings.action_timeout))
            self._context.set_default_navigation_timeout(actions.budget_ms(self.settings.navigation_timeout))

    def _connect(self) -> None:
        if self._playwright is None:
            manager = sync_playwright()
            self._playwright = manager.start()
            self._driver_pid = driver_pid(manager)
        if self._closed:  # closed while the driver started (a warm-up): launch nothing now
            raise BrowserError("the browser session is closed (the Herald session ended).")
        if self._guard is None:
            self._guard, note = session_guard(self.settings.cdp_url, self.web_policy, self._refusals, self._dial)
            self._pending_note = self._pending_note or note
        if self.settings.cdp_url:
            self._browser = connect_cdp(
                self._playwright, self.settings, actions.budget_ms(self.settings.launch_timeout)
            )
        else:
            extra = self._guard.chromium_args if self._guard is not None else []
            self._browser = launch_local(self._playwright, self.settings, extra,
                                         actions.budget_ms(self.settings.launch_timeout))
        try:
            self._use_context(self._browser)
        except Exception as exc:
            self._disconnect()
            raise BrowserError(
                f"the browser started but gave no page to work in: {first_line(exc)}. Try again."
            ) from None
        if self._lost_reason:
            again = (
                f"reconnected to {redact(self.settings.cdp_url)}" if self.settings.cdp_url else "relaunched Chromium"
            )
            self._pending_note = (
                f"{self._lost_reason}; {again}. This call ran on a fresh page: earlier refs, "
                "page state and history are gone."
            )
            self._lost_reason = None

    def _use_context(self, browser: Browser) -> None:
        self._context = context_for(browser, self.settings, self._guard)
        self._context.on("page", self._popup)
        if self.web_policy is not None and self._guard is None:
            assert self._refusals is not None
            route_context(self._context, self.web_policy, self._refusals)  # an attached browser: no proxy
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
        self._tab = Tab(page, self.settings, self.spill_dir, refusals=self._refusals)
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
            page.wait_for_load_state("load", timeout=actions.budget_ms(self.settings.navigation_timeout))
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
            self._driver_pid = None
        if self._guard is not None:
            self._guard.close()
            self._guard = None

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
        if self._warming is not None and not self._warming.done() and self._driver_pid is not None:
            self._kill_driver()  # a launch nobody waits for: it fails at once, the shutdown follows
        done = executor.submit(self._shutdown)
        try:
            # A running call finishes first, but not for long: its run is over. (A warm-up whose
            # driver was still starting launches nothing once it has: `_connect`.)
            done.result(timeout=CLOSE_WAIT)
        except FutureTimeout:
            log.warning("a browser call was still running at close: killing the browser")
            self._kill_driver()
            with contextlib.suppress(Exception):
                done.result(timeout=CLOSE_WAIT)
        except Exception:
            log.exception("the browser did not shut down cleanly")
        executor.shutdown(wait=False, cancel_futures=True)
        if self._guard is not None:  # the browser thread never got to it
            self._guard.close()

    def _kill_driver(self) -> None:
        if self._driver_pid is None:
            log.warning("the Playwright driver's process is unknown: the browser thread is left to finish")
            return
        kill_driver(self._driver_pid)

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


def _time_up() -> bool:
    return current_deadline() is not None and time_left() == 0

