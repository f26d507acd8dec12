"""`Tool.warm`: what a tool's first call would wait for, readied when a session offers the tool,
once per session, on a daemon thread of its own, a failure logged and nothing else. And the web
stack's own: a new Herald process offering web_extract has its parent-side imports done in the
background, starts no extraction process until a call needs one, and never imports trafilatura."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from typing import Any

import pytest

from herald import Settings
from herald.backends.local import LocalBackend
from herald.runtime.dispatcher import Dispatcher
from herald.tools import ToolContext
from herald.tools.registry import Registry, Tool
from tests.fixtures.users import REPO

WAIT = 30.0
PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


def tool(name: str, warm: Any) -> Tool:
    return Tool(name=name, description=f"{name} tool", parameters=PARAMETERS, handler=lambda args, ctx: name, warm=warm)


def test_warm_runs_once_per_session_on_a_thread_of_its_own(local_backend: LocalBackend, settings: Settings) -> None:
    calls: list[tuple[str, ToolContext]] = []
    done = threading.Event()

    def warm(ctx: ToolContext) -> None:
        calls.append((threading.current_thread().name, ctx))
        done.set()

    registry = Registry([tool("alpha", warm), tool("beta", warm)])  # one hook shared by two tools: run once
    ctx = ToolContext(backend=local_backend, settings=settings)
    Dispatcher(registry, ctx)
    assert done.wait(WAIT)
    Dispatcher(registry, ctx)  # the same session again: not warmed twice
    other = ToolContext(backend=local_backend, settings=settings)
    done.clear()
    Dispatcher(registry, other)  # another session: warmed for it
    assert done.wait(WAIT)
    for thread in threading.enumerate():
        if thread.name == "herald-warm":
            thread.join(WAIT)
    assert [(name, seen) for name, seen in calls] == [("herald-warm", ctx), ("herald-warm", other)]


def test_a_tool_not_offered_is_not_warmed(local_backend: LocalBackend, settings: Settings) -> None:
    warmed = threading.Event()
    registry = Registry([tool("alpha", lambda ctx: warmed.set()), tool("beta", None)])
    Dispatcher(registry, ToolContext(backend=local_backend, settings=settings), enabled=["beta"])
    for thread in threading.enumerate():
        if thread.name == "herald-warm":
            thread.join(WAIT)
    assert not warmed.is_set()


def test_a_failing_warm_is_logged_and_changes_nothing(
    local_backend: LocalBackend, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    failed = threading.Event()

    def warm(ctx: ToolContext) -> None:
        failed.set()
        raise RuntimeError("no browser here")

    caplog.set_level(logging.WARNING, logger="herald.runtime.offer")
    registry = Registry([tool("alpha", warm)])
    dispatcher = Dispatcher(registry, ToolContext(backend=local_backend, settings=settings))
    assert failed.wait(WAIT)
    for thread in threading.enumerate():
        if thread.name == "herald-warm":
            thread.join(WAIT)
    assert any("warming up" in r.getMessage() and r.exc_info and "no browser here" in str(r.exc_info[1])
               for r in caplog.records)
    assert [t.name for t in dispatcher.tools] == ["alpha"]


WEB_WARMED = """
import sys, threading
from pathlib import Path
from herald import Runtime, Settings
settings = Settings(data_dir=Path(sys.argv[1]))
with Runtime(settings=settings, tools=["web_extract"]) as runtime:
    for thread in threading.enumerate():
        if thread.name == "herald-warm":
            thread.join(30)
    ctx = runtime.dispatcher.ctx
    print("httpx" in sys.modules, "herald.web.renderpool" in sys.modules, "trafilatura" in sys.modules,
          "web.render_pool" in ctx.cache)
"""


def test_a_session_offering_web_extract_imports_its_parent_side_ahead(tmp_path: Any) -> None:
    done = subprocess.run([sys.executable, "-c", WEB_WARMED, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=str(REPO))
    assert done.returncode == 0, done.stderr
    httpx, renderpool, trafilatura, pool = done.stdout.split()
    assert (httpx, renderpool) == ("True", "True")
    assert trafilatura == "False"  # extraction happens in the workers only
    assert pool == "False"  # no process is started before a call needs one
