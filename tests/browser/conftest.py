"""Browser tools called the way the dispatcher calls them, on real Chromium, plus process probes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from herald import Settings
from herald.backends.local import LocalBackend
from herald.runtime.toolset import default_registry
from herald.tools import ToolContext
from herald.tools.arguments import bind_arguments

CallTool = Callable[..., Any]
MakeBrowser = Callable[..., "BrowserCaller"]


class BrowserCaller:
    """`call(name, **args)` -> the tool's result, over one ToolContext (one browser session)."""

    def __init__(self, workspace: Path, settings: Settings) -> None:
        self.registry = default_registry()
        self.backend = LocalBackend(str(workspace), settings=settings)
        self.ctx = ToolContext(backend=self.backend, settings=settings)

    def __call__(self, name: str, **args: Any) -> Any:
        tool = self.registry.get(name)
        assert tool is not None, f"no tool named {name}"
        return tool.handler(bind_arguments(tool, args), self.ctx)

    def close(self) -> None:
        self.ctx.close()
        self.backend.close()


@pytest.fixture(scope="module")
def browser(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserCaller]:
    """One browser session shared by a module's tests (Chromium starts once)."""
    root = tmp_path_factory.mktemp("browser")
    (root / "work").mkdir()
    caller = BrowserCaller(root / "work", Settings(data_dir=root / "herald-data"))
    yield caller
    caller.close()


@pytest.fixture
def make_browser(chromium: str, workspace: Path, settings: Settings) -> Iterator[Callable[..., BrowserCaller]]:
    """`make_browser(overrides)`: a fresh browser session with these settings, closed afterwards."""
    made: list[BrowserCaller] = []

    def factory(overrides: Mapping[str, Any] | None = None) -> BrowserCaller:
        caller = BrowserCaller(workspace, settings.with_overrides(overrides or {}))
        made.append(caller)
        return caller

    yield factory
    for caller in made:
        caller.close()


def chromium_pids() -> list[int]:
    """Live Chromium browser processes (not their helpers) started under this test process."""
    me = os.getpid()
    parents: dict[int, int] = {}
    commands: dict[int, bytes] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                commands[int(entry)] = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] not in (b"Z", b"X"):
            parents[int(entry)] = int(fields[1])

    def descends_from_me(pid: int) -> bool:
        for _ in range(50):
            pid = parents.get(pid, 0)
            if pid == me:
                return True
            if pid <= 1:
                return False
        return False

    return [
        pid for pid, cmd in commands.items()
        if pid in parents and b"chromium" in cmd.split(b"\0")[0] and b"--type=" not in cmd and descends_from_me(pid)
    ]
