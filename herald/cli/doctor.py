"""`herald doctor`: what works on this machine, one row per check (ok / warn / fail + detail).

A row fails only when something Herald needs for the configured setup is broken; optional parts
that are missing (ripgrep, a web provider, a browser) warn and say what to install or set.
Exit 1 when any row fails. `--json` prints the rows as a list of objects.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..config import Settings, default_config_path
from ..keys import herald_environ
from .common import UsageError, console, ensure_data_dir, escape, load


@dataclass(frozen=True)
class Row:
    check: str
    status: str  # ok | warn | fail
    detail: str


def _row(check: str, ok: bool | None, detail: str) -> Row:
    return Row(check, "ok" if ok else ("warn" if ok is None else "fail"), detail)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], parents: list[argparse.ArgumentParser]
) -> None:
    p = sub.add_parser("doctor", parents=parents, help="check what works on this machine")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.set_defaults(func=cmd_doctor)


def _config_row(args: argparse.Namespace) -> tuple[Row, Settings]:
    explicit = getattr(args, "config_sub", None) or getattr(args, "config", None)
    try:
        settings = load(args)
    except UsageError as exc:
        return _row("config", False, str(exc)), Settings()
    path = Path(explicit) if explicit else default_config_path()
    detail = f"{path}" if path.exists() else f"no config file ({path} does not exist): defaults and HERALD_* variables"
    return _row("config", True, detail), settings


def _data_dir_row(settings: Settings) -> Row:
    try:
        ensure_data_dir(settings)
    except UsageError as exc:
        return _row("data dir", False, str(exc))
    return _row("data dir", True, str(settings.data_dir))


def _provider_row(settings: Settings) -> Row:
    from ..agent.providers.resolve import KNOWN, ProviderSetupError, resolve_primary

    keys = sorted({p.key_env for p in KNOWN.values() if p.key_env and herald_environ().get(p.key_env)})
    have = f"keys set: {', '.join(keys)}" if keys else "no provider API key in the environment"
    try:
        config = resolve_primary(settings.agent, herald_environ())
    except (ProviderSetupError, ValueError) as exc:
        return _row("model provider", None, f"herald run cannot pick a model: {exc}")
    where = f" at {config.base_url}" if config.base_url else ""
    return _row("model provider", True, f"herald run uses {config.provider}:{config.model}{where} ({have})")


def _web_row(settings: Settings) -> Row:
    from ..web.firecrawl import firecrawl_config_from
    from ..web.search import describe

    firecrawl = firecrawl_config_from(settings)
    parts = []
    missing = [m for m in ("httpx", "trafilatura", "lxml_html_clean") if importlib.util.find_spec(m) is None]
    if missing:
        parts.append(f"web_extract without Firecrawl needs {', '.join(missing)}: pip install 'herald[web]'")
    else:
        parts.append("web_extract works without a provider (httpx + trafilatura)")
    if firecrawl is not None:
        parts.append(f"Firecrawl at {firecrawl.api_url}")
    search_ok, search = describe(settings)  # which search provider is in force, what else is configured
    parts.append(search)
    ok = None if missing or not search_ok else True
    return _row("web", ok, "; ".join(parts))


def _browser_row(settings: Settings) -> Row:
    if importlib.util.find_spec("playwright") is None:
        return _row("browser", None, "playwright is not installed: pip install 'herald[browser]'")
    from playwright.sync_api import sync_playwright

    from ..browser.errors import BrowserError
    from ..browser.launch import connect_cdp, find_chromium, first_line, launch_local, redact

    cdp = settings.browser.cdp_url
    if not cdp and find_chromium(settings.browser.executable) is None:
        return _row("browser", None, "no Chromium: apt-get install chromium, or set browser.cdp_url")
    try:
        with sync_playwright() as playwright:
            browser = connect_cdp(playwright, settings.browser) if cdp else launch_local(playwright, settings.browser)
            version = browser.version
            browser.close()
    except (BrowserError, Exception) as exc:
        return _row("browser", False, f"could not start the browser: {first_line(exc)}")
    where = f"attached to {redact(cdp)}" if cdp else f"launched {find_chromium(settings.browser.executable)}"
    return _row("browser", True, f"{where} (Chromium {version})")


def _isolation_row(settings: Settings) -> Row:
    """What confines a script here (host mode), from the same decision a Runtime makes."""
    from ..runtime.sandbox import isolation

    if settings.sandbox.exec_mode == "backend":
        return _backend_isolation_row(settings)

    try:
        chosen = isolation.resolve(settings, os.getcwd(), settings.sandbox.python)
    except ValueError as exc:
        return _row("isolation", False, str(exc))
    if chosen.mode == "none":
        return _row("isolation", None, f"{chosen.describe}: scripts run as your user with your view of this "
                    "machine (files, network, processes); install bubblewrap, or use a container "
                    "(--backend docker --exec-mode backend)")
    seen = ", ".join(chosen.read_write) or "nothing"
    return _row("isolation", True if chosen.mode == "bwrap" else None,
                f"{chosen.describe}; read-write: {seen}; home, Herald's config and data "
                + ("hidden" if chosen.mode == "bwrap" else "refused (visible by name, unreadable)"))


def _backend_isolation_row(settings: Settings) -> Row:
    """In-backend execution: what confines a script on the configured backend, as its probe
    answers in a real run's setup (bwrap there, else Landlock, else none; a container)."""
    import contextlib

    from ..backends.factory import open_backend
    from ..runtime import Runtime

    where = settings.backend or "local"
    try:
        with contextlib.closing(open_backend(where, settings=settings)) as backend, \
                Runtime(backend, settings=settings, transcript=False, exec_mode="backend") as runtime:
            result = runtime.execute("print('ok')", timeout=60)
    except Exception as exc:
        return _row("isolation", False, f"in-backend on {where}: {type(exc).__name__}: {exc}")
    if not result.ok:
        return _row(
            "isolation", False, f"in-backend on {where}: {result.isolation}; the run failed: {result.error[:200]}"
        )
    confined = result.isolation.split(" ", 1)[0] in ("bwrap", "container")
    hint = "" if confined else "; install bubblewrap on the backend to hide its files, processes and network"
    return _row("isolation", True if confined else None, f"in-backend on {where}: {result.isolation}{hint}")


def _local_backend_row(settings: Settings) -> Row:
    from ..backends.local import LocalBackend
    from ..runtime import Runtime

    try:
        with (
            LocalBackend(os.getcwd(), settings=settings) as backend,
            Runtime(backend, settings=settings, transcript=False) as rt,
        ):
            result = rt.execute("from hermes_tools import terminal\nprint(terminal('echo ok')['output'])", timeout=30)
    except Exception as exc:
        return _row("backend local", False, f"{type(exc).__name__}: {exc}")
    ok = result.ok and result.output.strip() == "ok"
    return _row("backend local", ok, result.error.strip()[:200] or "sandbox + RPC + shell round trip")


def collect(args: argparse.Namespace) -> list[Row]:
    config, settings = _config_row(args)
    rows = [_row("python", sys.version_info >= (3, 11), sys.version.split()[0]), config, _data_dir_row(settings)]
    bash = shutil.which("bash")
    rows.append(_row("bash", bash is not None, bash or "bash is required by the local backend"))
    rg = shutil.which("rg")
    rows.append(
        _row("ripgrep", True if rg else None, rg or "not installed: search_files uses the slower pure-Python search")
    )
    checks: list[tuple[str, Callable[[], Row]]] = [
        ("model provider", lambda: _provider_row(settings)),
        ("web", lambda: _web_row(settings)),
        ("browser", lambda: _browser_row(settings)),
        ("isolation", lambda: _isolation_row(settings)),
        ("backend local", lambda: _local_backend_row(settings)),
    ]
    for name, check in checks:
        try:
            rows.append(check())
        except Exception as exc:  # one broken check must not hide the others
            rows.append(_row(name, False, f"the check itself failed: {type(exc).__name__}: {exc}"))
    from ..backends.doctor import backend_checks

    rows.extend(_row(f"backend {name}", ok, detail) for name, ok, detail in backend_checks(settings))
    return rows


def cmd_doctor(args: argparse.Namespace) -> int:
    rows = collect(args)
    failed = any(r.status == "fail" for r in rows)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2, ensure_ascii=False))
        return 1 if failed else 0
    from rich.table import Table

    table = Table(title="herald doctor", show_lines=False)
    for column in ("check", "status", "detail"):
        table.add_column(column)
    marks = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]fail[/]"}
    for r in rows:
        table.add_row(escape(r.check), marks[r.status], escape(r.detail))
    console().print(table)
    return 1 if failed else 0
