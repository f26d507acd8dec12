"""A script's `terminal` command on SSH and Docker ends with everything it started, as it does
locally: `setsid -f`, `(cmd &)`, a double fork and `nohup ... & disown` are all gone once the
run is over, whether the command ran in Herald's session shell (host mode) or in the
supervisor's shell next to the script (backend mode). The shell runs under a guard, a child
subreaper that kills what re-parented to it after every command (_sandbox/shell/guard.py).

Looked at from a fresh process on the backend (an exec channel of its own, not the session's
shell), with `sleep` durations unique to the test as markers. The SSH host's user is the
fixture's generated non-root user.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends.base import Backend

ROUNDS = 3
GONE_WITHIN = 30.0  # generous: a killed process is gone in milliseconds; a survivor stays


@pytest.fixture(params=["ssh", "docker"])
def remote_backend(request: pytest.FixtureRequest) -> Backend:
    backend: Backend = request.getfixturevalue(f"{request.param}_backend")
    return backend


@pytest.fixture(params=["host", "backend"])
def runtime(request: pytest.FixtureRequest, remote_backend: Backend, settings: Settings) -> Iterator[Runtime]:
    with Runtime(remote_backend, settings=settings, exec_mode=request.param, transcript=False) as made:
        yield made


def _marker() -> str:
    return f"1000.{uuid.uuid4().int % 10**9:09d}"


def _on_backend(backend: Backend, script: str, timeout: float = 30.0) -> str:
    """Run `script` in a process of its own on the backend (not the session's shell); its output."""
    channel: Any = backend.open_channel(["/bin/sh", "-c", script])
    deadline = time.monotonic() + timeout
    output = b""
    try:
        while time.monotonic() < deadline:
            chunk = channel.recv(deadline - time.monotonic())
            if chunk == b"":
                break
            output += chunk or b""
    finally:
        channel.close()
    return output.decode("utf-8", "replace")


def _running(backend: Backend, markers: list[str]) -> list[str]:
    """The markers whose process still runs on the backend (zombies count as gone)."""
    pattern = "|".join(m.replace(".", "[.]") for m in markers)
    script = (
        "for p in /proc/[0-9]*; do "
        "read -r s 2>/dev/null < $p/stat || continue; case ${s##*) } in Z*|X*) continue ;; esac; "
        f"tr '\\000' ' ' 2>/dev/null < $p/cmdline | grep -oE '{pattern}'; done; true"
    )
    return sorted({word for word in _on_backend(backend, script).split() if word in markers})


def _gone(backend: Backend, markers: list[str]) -> list[str]:
    deadline = time.monotonic() + GONE_WITHIN
    while True:
        left = _running(backend, markers)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


ESCAPES = (
    "setsid -f sleep {0}; "
    "(sleep {1} &); "
    "sh -c '(sleep {2} &) &'; "  # a double fork
    "nohup sleep {3} >/dev/null 2>&1 & disown; "
    "echo started"
)


def test_what_a_scripts_command_starts_ends_with_the_run(runtime: Runtime, remote_backend: Backend) -> None:
    for _ in range(ROUNDS):
        markers = [_marker() for _ in range(4)]
        command = ESCAPES.format(*markers)
        result = runtime.execute(f"from hermes_tools import terminal\nprint(terminal({command!r})['output'])")
        assert result.status == "success", (result.output, result.error)
        assert result.output.strip() == "started"
        assert _gone(remote_backend, markers) == [], "left running after the run"


def test_a_direct_background_job_lives_on_but_its_escapes_do_not(remote_backend: Backend) -> None:
    """A model's direct call may leave a server running with `&`; what left the shell's tree
    (`setsid -f`) is still ended with the command, as locally."""
    kept, escaped = _marker(), _marker()
    remote_backend.run(f"sleep {kept} >/dev/null 2>&1 & setsid -f sleep {escaped}; echo ok", timeout=30)
    try:
        assert _gone(remote_backend, [escaped]) == []
        assert _running(remote_backend, [kept]) == [kept]
    finally:
        remote_backend.run(f"pkill -f 'sleep {kept}' || true", timeout=30)
