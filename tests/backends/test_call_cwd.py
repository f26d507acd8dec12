"""A tool call's cwd (backends/base.py call_cwd): fixed at its first use within the call, so the
policy's check and the tool's work resolve a relative path alike; never asked of the backend by
a call that resolves no path (an SSH backend may have to connect to answer)."""

from __future__ import annotations

from typing import Any

from herald.backends.base import call_cwd, pinned_cwd


class Moving:
    """The part of a Backend call_cwd reads: a shell that a concurrent `cd` moves."""

    def __init__(self) -> None:
        self.place = "/work"
        self.asked = 0

    @property
    def cwd(self) -> str:
        self.asked += 1
        return self.place


def test_a_call_keeps_the_cwd_it_first_saw() -> None:
    backend: Any = Moving()
    with pinned_cwd():
        assert call_cwd(backend) == "/work"
        backend.place = "/work/elsewhere"  # a cd beside the call
        assert call_cwd(backend) == "/work"
    assert call_cwd(backend) == "/work/elsewhere"  # outside a call: where the shell is now
    assert backend.asked == 2


def test_a_call_that_resolves_no_path_never_asks_the_backend() -> None:
    backend: Any = Moving()
    with pinned_cwd():
        pass
    assert backend.asked == 0


def test_each_call_has_its_own() -> None:
    backend: Any = Moving()
    with pinned_cwd():
        assert call_cwd(backend) == "/work"
        backend.place = "/tmp"
        with pinned_cwd():  # a call made from inside another (execute_code's script)
            assert call_cwd(backend) == "/tmp"
        assert call_cwd(backend) == "/work"
