"""The backend-conformance suite: every test here runs once per backend kind (`any_backend`:
local, SSH, Docker), through the Backend protocol or the registered tools only, so the same
expectations hold everywhere. Files are made through the backend (its shell or write_bytes),
never on this machine's disk, and processes are looked at through the backend's own /proc.
The tools' tests run twice per backend (`tool_mode`): called directly, and from scripts inside
the backend (exec_mode "backend")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends import Backend
from tests.runtime._backend_mode import in_backend_settings, script_caller
from tests.tools.conftest import CallTool, caller


@pytest.fixture
def backend(any_backend: Backend) -> Backend:
    return any_backend


@pytest.fixture
def root(backend: Backend) -> str:
    """The directory the backend's session starts in (empty, private to the test)."""
    return backend.cwd


@pytest.fixture(params=["direct", "in-backend"])
def tool_mode(request: pytest.FixtureRequest) -> str:
    """How the tools are called: as the dispatcher calls them (host mode), or from a script
    running inside the backend (exec_mode "backend"), where read_file, write_file and patch run
    next to the script and the other tools come back to Herald. The answers must be the same."""
    return str(request.param)


@pytest.fixture
def make_call(backend: Backend, settings: Settings, tool_mode: str) -> Iterator[Callable[..., CallTool]]:
    """`make_call(**{"files.search": "python"})`: call tools on `backend` with these settings."""
    runtimes: list[Runtime] = []

    def factory(**overrides: Any) -> CallTool:
        tuned = settings.with_overrides(overrides)
        if tool_mode == "direct":
            return caller(backend, tuned)
        # The full profile, as direct calls here bypass the policy: these tests are about the tools
        # (the policy's own tests, backend mode included, are in tests/policy and tests/runtime).
        runtime = Runtime(backend, settings=in_backend_settings(tuned), exec_mode="backend", transcript=False,
                          policy="full")
        runtimes.append(runtime)
        return script_caller(runtime)

    yield factory
    for runtime in runtimes:
        runtime.close()


@pytest.fixture
def call(make_call: Callable[..., CallTool]) -> CallTool:
    return make_call()
