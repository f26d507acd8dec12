"""Tools' warm-ups (`Tool.warm`): each hook runs once per session, on a daemon thread, when the
session names the tool, when a script names it (or, with sandbox.warm_tools = "offered", for
every offered tool); a failing hook is logged and costs nothing else."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from herald import Runtime
from herald.tools import Registry, Tool, ToolContext
from tests.fixtures.users import REPO

from ._helpers import run_ok, wait_for


class Hook:
    """A warm hook that records the sessions (ToolContexts) and threads it ran in."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[ToolContext, threading.Thread]] = []
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, ctx: ToolContext) -> None:
        with self.lock:
            self.calls.append((ctx, threading.current_thread()))
        if self.fail:
            raise RuntimeError("the warm-up broke")


def _tool(name: str, hook: Hook | None) -> Tool:
    return Tool(name=name, description=f"{name} for tests", parameters={"type": "object", "properties": {}},
                handler=lambda args, ctx: {"ok": True}, warm=hook)


def _registry(hook: Hook) -> Registry:
    # Two tools share one hook (as the browser tools share Chromium's launch); one has none.
    return Registry([_tool("cold_a", hook), _tool("cold_b", hook), _tool("plain", None)])


MakeRuntime = Callable[..., Runtime]


def test_a_script_naming_the_tool_warms_it_once_on_a_daemon_thread(make_runtime: MakeRuntime) -> None:
    hook = Hook()
    runtime = make_runtime(registry=_registry(hook))
    run_ok(runtime, "print('nothing to warm')")
    assert hook.calls == []  # offered, but nobody named it: no warm-up
    run_ok(runtime, "from hermes_tools import cold_a, cold_b\ncold_a(); cold_b()")
    run_ok(runtime, "from hermes_tools import cold_b\ncold_b()")
    assert wait_for(lambda: len(hook.calls) >= 1)
    (ctx, thread), = hook.calls  # one session, one warm-up for the hook both tools share
    assert ctx is runtime.dispatcher.ctx
    assert thread.daemon and thread is not threading.main_thread()


def test_a_session_that_names_the_tool_warms_it_when_it_starts(make_runtime: MakeRuntime) -> None:
    hook = Hook()
    runtime = make_runtime(registry=_registry(hook), tools=["cold_b", "plain"])
    assert wait_for(lambda: len(hook.calls) == 1)
    assert hook.calls[0][0] is runtime.dispatcher.ctx
    other = make_runtime(registry=_registry(hook), tools=["plain"])  # a session of its own, not naming it
    run_ok(other, "from hermes_tools import plain\nplain()")
    assert len(hook.calls) == 1


@pytest.mark.parametrize(("mode", "expected"), [("offered", 1), ("off", 0)])
def test_the_setting_warms_every_offered_tool_or_none(make_runtime: MakeRuntime, mode: str, expected: int) -> None:
    hook = Hook()
    runtime = make_runtime(registry=_registry(hook), overrides={"sandbox.warm_tools": mode})
    run_ok(runtime, "from hermes_tools import cold_a\ncold_a()")
    if expected:
        assert wait_for(lambda: len(hook.calls) == expected)
    assert len(hook.calls) == expected


def test_a_failing_warm_up_is_logged_and_the_tool_still_works(make_runtime: MakeRuntime,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    hook = Hook(fail=True)
    with caplog.at_level(logging.WARNING, logger="herald.runtime.offer"):
        runtime = make_runtime(registry=_registry(hook), tools=["cold_a"])
        assert wait_for(lambda: any("warming up cold_a failed" in r.getMessage() for r in caplog.records))
    assert run_ok(runtime, "from hermes_tools import cold_a\nprint(cold_a())").output == "{'ok': True}\n"


def test_an_unknown_mode_is_an_error_naming_the_setting(make_runtime: MakeRuntime) -> None:
    with pytest.raises(ValueError, match=r"unknown sandbox\.warm_tools 'sometimes'"):
        make_runtime(overrides={"sandbox.warm_tools": "sometimes"})


def test_a_name_inside_a_longer_word_warms_nothing(make_runtime: MakeRuntime) -> None:
    hook = Hook()
    runtime = make_runtime(registry=_registry(hook))
    run_ok(runtime, "cold_abc = 'cold_a_b'\nprint(cold_abc)")
    assert hook.calls == []

WEB_WARMED = """
import sys, threading
from pathlib import Path
from herald import Runtime, Settings
settings = Settings(data_dir=Path(sys.argv[1]))
with Runtime(settings=settings, tools=["web_extract"]) as runtime:
    for thread in threading.enumerate():
        if thread.name.startswith("herald-tool-warm"):
            thread.join(30)
    ctx = runtime.dispatcher.ctx
    print("httpx" in sys.modules, "herald.web.renderpool" in sys.modules, "trafilatura" in sys.modules,
          "web.render_pool" in ctx.cache)
"""


def test_a_session_naming_web_extract_readies_it_ahead(tmp_path: Any) -> None:
    done = subprocess.run([sys.executable, "-c", WEB_WARMED, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=str(REPO))
    assert done.returncode == 0, done.stderr
    httpx, renderpool, trafilatura, pool = done.stdout.split()
    assert (httpx, renderpool) == ("True", "True")
    assert trafilatura == "False"  # extraction happens in the workers only
    assert pool == "True"  # the session names web_extract: its workers start ahead of the first call
