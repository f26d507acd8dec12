"""Helpers for the conformance tests: set things up and look at processes through the backend."""

from __future__ import annotations

import time

from herald.backends import Backend


def sh(backend: Backend, command: str, timeout: float = 30) -> str:
    """Run a setup command that must succeed; its output."""
    result = backend.run(command, timeout=timeout)
    assert result.exit_code == 0, f"{command!r} failed ({result.exit_code}): {result.output}"
    return result.output


def running(backend: Backend, pids: list[int]) -> list[int]:
    """The pids that still run on the backend (a zombie counts as gone)."""
    if not pids:
        return []
    script = (
        f"for p in {' '.join(map(str, pids))}; do "
        "s=$(cut -d')' -f2 /proc/$p/stat 2>/dev/null | cut -c2); "
        'case "$s" in ""|Z|X) ;; *) echo $p ;; esac; done'
    )
    return [int(line) for line in sh(backend, script).split()]


def wait_until_gone(backend: Backend, pids: list[int], timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = running(backend, pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = running(backend, pids)
    return alive
