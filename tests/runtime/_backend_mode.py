"""Fixtures and helpers for the in-backend execution tests.

`exec_backend` is each backend kind that can run here (local always; ssh and docker through the
`ssh_backend` / `docker_backend` fixtures of tests/fixtures/, skipped with the reason when a
fixture is missing or its service cannot run). What the tests observe on the backend they
observe through the backend itself (`run`, `read_bytes`, `stat`), so the same checks hold
wherever it is.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends.base import Backend
from herald.runtime.sandbox.backend.mode import BackendMode
from herald.runtime.sandbox.backend.sandbox import BackendSandbox
from herald.tools import ToolError
from herald.transcript import read_transcript

from ._helpers import wait_for

BACKEND_KINDS = ["local", "ssh", "docker"]


def backend_sandbox(runtime: Runtime) -> BackendSandbox[Any]:
    """The sandbox in the backend of a Runtime in backend mode (its directory there, ...)."""
    assert isinstance(runtime.mode, BackendMode), runtime.exec_mode
    return runtime.mode.sandbox


@pytest.fixture(params=BACKEND_KINDS)
def exec_backend(request: pytest.FixtureRequest) -> Backend:
    name = f"{request.param}_backend"
    try:
        backend: Backend = request.getfixturevalue(name)
    except pytest.FixtureLookupError:
        pytest.skip(f"no {name} fixture: the {request.param} backend is not wired into the tests yet")
    return backend


@pytest.fixture
def backend_runtime(exec_backend: Backend, settings: Settings) -> Iterator[Callable[..., Runtime]]:
    """Build Runtimes in exec_mode "backend" over `exec_backend`; all closed after the test."""
    made: list[Runtime] = []

    def factory(**kwargs: Any) -> Runtime:
        runtime_settings = settings.with_overrides(kwargs.pop("overrides", {}))
        runtime = Runtime(exec_backend, settings=runtime_settings, exec_mode="backend", **kwargs)
        made.append(runtime)
        return runtime

    yield factory
    for runtime in made:
        runtime.close()


def unique_name(prefix: str = "herald-test") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def unique_sleep() -> str:
    """A `sleep` duration no other process uses, so its command line identifies our process."""
    return f"1000.{uuid.uuid4().int % 10**9:09d}"


def remote_pids(backend: Backend, marker: str) -> list[int]:
    """Live processes on the backend whose command line contains `marker` (zombies count as
    gone: their command line is empty). The pattern is spelled so that grep's own command line
    does not match it."""
    pattern = marker.replace(".", "[.]")
    command = (
        "for p in /proc/[0-9]*; do "
        f"tr '\\000' ' ' < $p/cmdline 2>/dev/null | grep -q '{pattern}' && echo ${{p#/proc/}}; "
        "done; true"
    )
    output = backend.run(command, timeout=30).output
    return [int(line) for line in output.split() if line.isdigit()]


def gone_on_backend(backend: Backend, marker: str, timeout: float = 60.0) -> bool:
    return wait_for(lambda: not remote_pids(backend, marker), timeout=timeout, step=0.2)


# A script that makes one tool call, with exactly these arguments (not through the stub's
# signature, so that Herald's argument checks are what answers), and prints the reply as JSON
# (ASCII: any byte survives).
CALL_SCRIPT = """
import json, hermes_tools
from _hermes_runtime.child.client import call
try:
    reply = {{"result": call({name!r}, json.loads({args!r}))}}
except hermes_tools.ToolError as exc:
    reply = {{"error": {{"type": exc.error_type, "message": str(exc)}}}}
print(json.dumps(reply))
"""


def script_caller(runtime: Runtime) -> Callable[..., Any]:
    """`call(name, **args)` as a script in `runtime` makes it: the tool's result, or the
    ToolError the script got, raised as Herald's ToolError (what a direct call raises)."""

    def call(name: str, **args: Any) -> Any:
        result = runtime.execute(CALL_SCRIPT.format(name=name, args=json.dumps(args)))
        assert result.status == "success", f"{name} script failed: {result.output}\n{result.error}"
        reply = json.loads(result.output)
        if "error" in reply:
            raise ToolError(reply["error"]["message"], reply["error"]["type"])
        return reply["result"]

    return call


def in_backend_settings(settings: Settings) -> Settings:
    """Settings of a backend-mode Runtime whose scripts print whole tool results."""
    return settings.with_overrides({"sandbox.max_stdout_bytes": 20_000_000, "sandbox.backend_tools": True})


def script_call_records(path: Path) -> list[dict[str, Any]]:
    """The transcript's records of tool calls from scripts (answered in the backend or by Herald)."""
    return [r for r in read_transcript(path) if r.get("type") == "sandbox_tool_call"]
