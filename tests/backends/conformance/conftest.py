"""The backend-conformance suite: every test here runs once per backend kind (`any_backend`:
local, SSH, Docker), through the Backend protocol or the registered tools only, so the same
expectations hold everywhere. Files are made through the backend (its shell or write_bytes),
never on this machine's disk, and processes are looked at through the backend's own /proc."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from herald import Settings
from herald.backends import Backend
from tests.tools.conftest import CallTool, caller


@pytest.fixture
def backend(any_backend: Backend) -> Backend:
    return any_backend


@pytest.fixture
def root(backend: Backend) -> str:
    """The directory the backend's session starts in (empty, private to the test)."""
    return backend.cwd


@pytest.fixture
def make_call(backend: Backend, settings: Settings) -> Callable[..., CallTool]:
    """`make_call(**{"files.search": "python"})`: call tools on `backend` with these settings."""

    def factory(**overrides: Any) -> CallTool:
        return caller(backend, settings.with_overrides(overrides))

    return factory


@pytest.fixture
def call(make_call: Callable[..., CallTool]) -> CallTool:
    return make_call()
