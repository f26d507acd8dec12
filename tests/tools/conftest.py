"""Call tools the way the dispatcher does: bind the arguments, then run the handler."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from herald import Settings
from herald.backends.base import Backend
from herald.backends.local import LocalBackend
from herald.runtime.toolset import default_registry
from herald.tools import ToolContext
from herald.tools.arguments import bind_arguments
from herald.tools.registry import Registry, Tool

CallTool = Callable[..., Any]


def registered(registry: Registry, name: str) -> Tool:
    """The tool `name` in `registry` (a test fails here, by name, when it is missing)."""
    tool = registry.get(name)
    assert tool is not None, f"no tool named {name}"
    return tool


def caller(backend: Backend, settings: Settings) -> CallTool:
    """`call(name, **args)` -> the tool's result; a ToolError propagates as the dispatcher sees it."""
    registry = default_registry()
    ctx = ToolContext(backend=backend, settings=settings)

    def call(name: str, **args: Any) -> Any:
        tool = registered(registry, name)
        return tool.handler(bind_arguments(tool, args), ctx)

    return call


@pytest.fixture
def make_call(workspace: Path, settings: Settings) -> Iterator[Callable[..., CallTool]]:
    """`make_call(overrides, backend=None)`: a caller with overridden settings. Without a
    backend, a fresh LocalBackend in `workspace` built from those settings (closed afterwards)."""
    made: list[LocalBackend] = []

    def factory(overrides: Mapping[str, Any] | None = None, backend: Backend | None = None) -> CallTool:
        tuned = settings.with_overrides(overrides or {})
        if backend is None:
            backend = LocalBackend(str(workspace), settings=tuned)
            made.append(backend)
        return caller(backend, tuned)

    yield factory
    for backend in made:
        backend.close()


@pytest.fixture
def call(local_backend: LocalBackend, settings: Settings) -> CallTool:
    return caller(local_backend, settings)
