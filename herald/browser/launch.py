"""Getting a browser: launch the local Chromium, or attach to a CDP URL (a cloud or remote browser).

Both return a Playwright `Browser`; the caller owns it. Nothing here touches a page.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from .._sandbox.procs.trees import descendants, signal_pids
from ..config import BrowserSettings
from .errors import BrowserError

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Playwright

    from .guard import GuardProxy

# Chromium on a machine without internet access: no update checks, sync, field trials or QUIC
# probes, which would otherwise fill the log with refused connections and slow start-up.
CLOSED_NETWORK_ARGS = (
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-quic",
    "--disable-features=Translate,MediaRouter,OptimizationHints",
    "--metrics-recording-only",
    "--disable-dev-shm-usage",
)
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium(configured: str) -> str | None:
    """The configured executable, else the first Chromium on PATH (Debian's is /usr/bin/chromium)."""
    if configured:
        path = shutil.which(configured) or (configured if os.access(configured, os.X_OK) else None)
        return path
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def chromium_args(settings: BrowserSettings) -> list[str]:
    args = list(CLOSED_NETWORK_ARGS)
    if os.geteuid() == 0:
        args.append("--no-sandbox")  # Chromium refuses to start as root with its sandbox on
    args.extend(settings.extra_args)
    return args


def launch_local(playwright: Playwright, settings: BrowserSettings, extra_args: Sequence[str] = (),
                 timeout_ms: float | None = None) -> Browser:
    """Chromium started here; `timeout_ms` (default browser.launch_timeout) bounds the start."""
    executable = find_chromium(settings.executable)
    if executable is None:
        wanted = settings.executable or "chromium"
        raise BrowserError(
            f"no Chromium found ({wanted} is not installed or not executable). Install it "
            "(apt-get install chromium), set browser.executable to its path, or attach to a "
            "running browser with browser.cdp_url / --browser-cdp URL."
        )
    try:
        return playwright.chromium.launch(
            executable_path=executable,
            headless=settings.headless,
            args=[*chromium_args(settings), *extra_args],
            timeout=settings.launch_timeout * 1000 if timeout_ms is None else timeout_ms,
        )
    except Exception as exc:
        raise BrowserError(
            f"could not launch Chromium ({executable}): {first_line(exc)}. Check that it runs "
            f"(`{executable} --headless --version`), or attach to another browser with "
            "browser.cdp_url."
        ) from None


def connect_cdp(playwright: Playwright, settings: BrowserSettings, timeout_ms: float | None = None) -> Browser:
    try:
        return playwright.chromium.connect_over_cdp(
            settings.cdp_url, timeout=settings.launch_timeout * 1000 if timeout_ms is None else timeout_ms
        )
    except Exception as exc:
        raise BrowserError(
            f"could not attach to the browser at {redact(settings.cdp_url)}: {first_line(exc)}. "
            "Check that the browser is running and the CDP URL (browser.cdp_url / --browser-cdp) "
            "is right; a cloud browser's URL usually expires with its session."
        ) from None


def context_for(browser: Browser, settings: BrowserSettings, guard: GuardProxy | None) -> BrowserContext:
    """The context the session's pages live in, its default waits the configured timeouts."""
    if settings.cdp_url and guard is not None:  # an attached browser, to reach the backend's network
        context = browser.new_context(proxy=guard.context_proxy)  # our own, through the guard (closed with it)
    else:
        # An attached browser comes with its own context (its cookies, its logins): use it.
        context = browser.contexts[0] if browser.contexts else browser.new_context()
    context.set_default_timeout(settings.action_timeout * 1000)
    context.set_default_navigation_timeout(settings.navigation_timeout * 1000)
    return context


def redact(url: str) -> str:
    """A CDP URL fit for messages: cloud browsers put API keys in the query string."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "…" if parts.query else "", ""))


def first_line(exc: BaseException) -> str:
    """Playwright errors carry a long call log after the first line; the first line is the news."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def driver_pid(manager: object) -> int | None:
    """The pid of the Playwright driver a `sync_playwright()` manager started (Playwright does not
    expose it; None when its internals have moved)."""
    for path in (("_client", "_transport", "_proc"), ("_connection", "_transport", "_proc")):
        found: object = manager
        for name in path:
            found = getattr(found, name, None)
        pid = getattr(found, "pid", None)
        if isinstance(pid, int):
            return pid
    return None


def kill_driver(pid: int) -> None:
    """Kill a Playwright driver and everything below it (a Chromium it launched): a call blocked on
    it then fails at once. A browser attached over CDP is not below it and is left alone."""
    signal_pids([*descendants(pid)[::-1], pid], signal.SIGKILL)
