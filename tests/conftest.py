"""Shared fixtures: an isolated data dir and workspace per test, real backends and runtimes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends.local import LocalBackend

# Real services, one module each; a module owns its fixtures and their skips.
pytest_plugins = [
    "tests.fixtures.sshd",
    "tests.fixtures.netns_sshd",
    "tests.fixtures.dockerd",
    "tests.fixtures.browsers",
    "tests.fixtures.users",
]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Defaults, but with Herald's data (spill files, transcripts) under the test's tmp dir."""
    return Settings(data_dir=tmp_path / "herald-data")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def local_backend(workspace: Path, settings: Settings) -> Iterator[LocalBackend]:
    backend = LocalBackend(str(workspace), settings=settings)
    yield backend
    backend.close()


@pytest.fixture
def make_runtime(workspace: Path, settings: Settings) -> Iterator[Callable[..., Runtime]]:
    """Build Runtimes over a local backend in `workspace`; all are closed after the test."""
    made: list[Runtime] = []

    def factory(**kwargs: Any) -> Runtime:
        overrides = kwargs.pop("overrides", {})
        runtime_settings = settings.with_overrides(overrides)
        backend = kwargs.pop("backend", None) or LocalBackend(str(workspace), settings=runtime_settings)
        runtime = Runtime(backend, settings=runtime_settings, **kwargs)
        made.append(runtime)
        made_backends.append(backend)
        return runtime

    made_backends: list[Any] = []
    yield factory
    for runtime in made:
        runtime.close()
    for backend in made_backends:
        backend.close()


@pytest.fixture
def runtime(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fresh home for a CLI run: its data dir and (absent) config file live here (tests/cli/_herald.py)."""
    path = tmp_path / "home"
    path.mkdir()
    return path
