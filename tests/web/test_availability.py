"""Tools that cannot work in a session say so up front (`Tool.unavailable`), and a missing library
fails a call with the pip package to install, not one cryptic error per page.

A library is made missing the way a fresh install lacks it: in a separate interpreter whose
`sys.modules` holds None for it (what `import` and `find_spec` then report for a package that is
not installed), or with an old release's stand-in first on its path. Herald itself is untouched.
"""

from __future__ import annotations

import importlib
import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from herald import Settings
from herald.runtime.toolset import default_registry
from herald.tools import Tool
from herald.tools.webpackages import installed
from tests.fakes.firecrawl import FakeFirecrawl
from tests.fixtures.browsers import LocalWebApp

from .conftest import API_KEY, PROVIDER_VARIABLES

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = default_registry()
BROWSER_TOOLS = [t for t in REGISTRY if t.name.startswith("browser_")]


def tool(name: str) -> Tool:
    found = REGISTRY.get(name)
    assert found is not None
    return found


def in_fresh_interpreter(
    tmp_path: Path,
    *,
    missing: Sequence[str] = (),
    path: Sequence[Path] = (),
    overrides: dict[str, Any] | None = None,
    calls: Sequence[tuple[str, dict[str, Any]]] = (),
) -> Any:
    """In a new interpreter lacking `missing`: every tool's unavailable_reason, and each call's
    ToolError (type and message) through the tool's handler with a real ToolContext."""
    program = textwrap.dedent(f"""
        import json, sys
        for name in {list(missing)!r}:
            sys.modules[name] = None  # what a package that is not installed looks like to import
        from pathlib import Path
        from herald import Settings
        from herald.backends.local import LocalBackend
        from herald.runtime.toolset import default_registry
        from herald.tools import ToolContext, ToolError
        from herald.tools.arguments import bind_arguments

        settings = Settings(data_dir=Path({str(tmp_path / "data")!r})).with_overrides({overrides or {}!r})
        registry = default_registry()
        out = {{"unavailable": {{t.name: t.unavailable_reason(settings) for t in registry}}, "calls": {{}}}}
        with LocalBackend({str(tmp_path)!r}, settings=settings) as backend:
            ctx = ToolContext(backend=backend, settings=settings)
            for name, args in {list(calls)!r}:
                tool = registry.get(name)
                try:
                    tool.handler(bind_arguments(tool, args), ctx)
                    out["calls"][name] = None
                except ToolError as exc:
                    out["calls"][name] = [exc.error_type, str(exc)]
            ctx.close()
        print(json.dumps(out))
    """)
    env = {k: v for k, v in os.environ.items() if k not in PROVIDER_VARIABLES and not k.startswith("HERALD_")}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, path), str(ROOT)])
    proc = subprocess.run([sys.executable, "-c", program], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- the checks themselves, with what is installed here ---------------------------------------------


def test_web_search_needs_a_configured_firecrawl(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    reason = tool("web_search").unavailable_reason(settings)
    assert reason is not None and "FIRECRAWL_API_KEY" in reason and "web.firecrawl_api_url" in reason
    assert tool("web_search").unavailable_reason(settings.with_overrides({"web.firecrawl_api_key": "fc-x"})) is None
    monkeypatch.setenv("FIRECRAWL_API_URL", "http://127.0.0.1:3002")  # a self-hosted one, from the environment
    assert tool("web_search").unavailable_reason(settings) is None


def test_web_extract_works_keyless_unless_told_to_use_a_missing_firecrawl(settings: Settings) -> None:
    extract = tool("web_extract")
    assert extract.unavailable_reason(settings) is None  # httpx + trafilatura are installed here
    assert extract.unavailable_reason(settings.with_overrides({"web.extract": "direct"})) is None
    reason = extract.unavailable_reason(settings.with_overrides({"web.extract": "firecrawl"}))
    assert reason is not None and "web.extract is 'firecrawl'" in reason and "FIRECRAWL_API_KEY" in reason
    reason = extract.unavailable_reason(settings.with_overrides({"web.extract": "sometimes"}))
    assert reason is not None and "auto, firecrawl or direct" in reason


def test_browser_tools_need_chromium_or_a_cdp_url(settings: Settings, tmp_path: Path) -> None:
    assert len(BROWSER_TOOLS) >= 9
    nowhere = settings.with_overrides({"browser.executable": str(tmp_path / "no-chromium")})
    for browser_tool in BROWSER_TOOLS:
        reason = browser_tool.unavailable_reason(nowhere)
        assert reason is not None and "no-chromium" in reason and "browser.cdp_url" in reason, browser_tool.name
    attached = nowhere.with_overrides({"browser.cdp_url": "ws://127.0.0.1:9222/devtools/browser/x"})
    assert all(t.unavailable_reason(attached) is None for t in BROWSER_TOOLS)
    # Found is enough: the check launches nothing (a Chromium that will not start says so on first use).
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert all(
        t.unavailable_reason(settings.with_overrides({"browser.executable": str(fake)})) is None for t in BROWSER_TOOLS
    )


# -- missing libraries -------------------------------------------------------------------------------


def test_missing_lxml_html_clean_is_named(tmp_path: Path, web_app: LocalWebApp, firecrawl: FakeFirecrawl) -> None:
    """The fresh-install bug: lxml_html_clean absent, so trafilatura (through justext and lxml's
    shim) cannot import. Before: every page's result was that ImportError."""
    out = in_fresh_interpreter(
        tmp_path,
        missing=["lxml_html_clean"],
        calls=[("web_extract", {"urls": [web_app.url + "/article/1", web_app.url + "/article/2"]})],
    )
    reason = out["unavailable"]["web_extract"]
    assert "lxml_html_clean" in reason and "pip install 'herald[web]'" in reason and "FIRECRAWL_API_KEY" in reason
    error_type, message = out["calls"]["web_extract"]
    assert error_type == "MissingPackage"
    assert message.startswith("web_extract needs the lxml_html_clean package: pip install 'herald[web]'")
    # With a Firecrawl configured the keyless libraries are not needed.
    configured = in_fresh_interpreter(
        tmp_path,
        missing=["lxml_html_clean", "trafilatura"],
        overrides={"web.firecrawl_api_url": firecrawl.url, "web.firecrawl_api_key": API_KEY},
    )
    assert configured["unavailable"]["web_extract"] is None


def test_missing_firecrawl_client_is_named(tmp_path: Path, firecrawl: FakeFirecrawl) -> None:
    out = in_fresh_interpreter(tmp_path, missing=["firecrawl"],
                               overrides={"web.firecrawl_api_url": firecrawl.url, "web.firecrawl_api_key": API_KEY},
                               calls=[("web_search", {"query": "star"})])
    assert "firecrawl-py" in out["unavailable"]["web_search"]
    assert "firecrawl-py" in out["unavailable"]["web_extract"]  # configured, so it would go through Firecrawl
    error_type, message = out["calls"]["web_search"]
    assert error_type == "MissingPackage"
    assert message.startswith("web_search needs the firecrawl-py package: pip install 'herald[web]'")


def test_too_old_firecrawl_client_says_upgrade(tmp_path: Path, firecrawl: FakeFirecrawl) -> None:
    """firecrawl-py 1.x has FirecrawlApp but no Firecrawl class: installed, yet not enough."""
    old = tmp_path / "old-site-packages" / "firecrawl"
    old.mkdir(parents=True)
    (old / "__init__.py").write_text("class FirecrawlApp:\n    pass\n")
    out = in_fresh_interpreter(tmp_path, path=[old.parent],
                               overrides={"web.firecrawl_api_url": firecrawl.url, "web.firecrawl_api_key": API_KEY},
                               calls=[("web_search", {"query": "star"}), ("web_extract", {"urls": ["https://stars.example.org/deneb"]})])
    for name in ("web_search", "web_extract"):
        error_type, message = out["calls"][name]
        assert error_type == "MissingPackage"
        assert message.startswith(f"{name} needs a newer firecrawl-py: pip install --upgrade 'herald[web]'"), message
        assert "cannot import name 'Firecrawl'" in message
    assert firecrawl.requests == []


def test_missing_playwright_is_named(tmp_path: Path, web_app: LocalWebApp) -> None:
    out = in_fresh_interpreter(tmp_path, missing=["playwright"], calls=[("browser_navigate", {"url": web_app.url})])
    for browser_tool in BROWSER_TOOLS:
        reason = out["unavailable"][browser_tool.name]
        assert reason is not None and "playwright" in reason and "pip install 'herald[browser]'" in reason
    error_type, message = out["calls"]["browser_navigate"]
    assert error_type == "BrowserUnavailable" and "pip install 'herald[browser]'" in message and "Playwright" in message


def test_a_library_installed_while_herald_runs_is_found_by_the_next_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is found stays found (every Runtime asks, and each look stats all of sys.path);
    what is missing is looked for again, so installing it needs no restart."""
    name = f"herald_test_lib_{os.getpid()}"
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not installed(name) and not installed(name)
    (tmp_path / f"{name}.py").write_text("")
    importlib.invalidate_caches()
    assert installed(name)
    (tmp_path / f"{name}.py").unlink()
    assert installed(name), "a library found once is not looked for again"
