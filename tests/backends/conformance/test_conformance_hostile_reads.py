"""read_bytes on every backend refuses what a hostile script may point it at: FIFOs (an open
that would block for ever), devices (never-ending, size 0), and files with more bytes than the
limit, whatever size they claim."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from herald.backends import Backend
from herald.backends.base import FileTooLargeError, NotRegularFileError

from ._helpers import sh

HANG = 60.0  # a read that takes this long counts as hung


def outcome(read: Callable[[], Any]) -> Any:
    """What `read()` returned or raised; fails the test (instead of hanging it) if it does not end."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(read())
        except Exception as exc:
            box.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HANG)
    assert box, f"read_bytes did not return within {HANG:g} s"
    return box[0]


@pytest.mark.parametrize("make", ["mkfifo target", "ln -s /dev/zero target", "ln -s /dev/null target"])
def test_special_files_are_refused(backend: Backend, make: str) -> None:
    sh(backend, make)
    got = outcome(lambda: backend.read_bytes("target"))
    assert isinstance(got, NotRegularFileError), got
    assert "not a regular file" in str(got) and got.filename.endswith("/target")
    assert sh(backend, "echo hi") == "hi"  # and the backend goes on


def test_the_limit_counts_the_bytes_read_not_the_size_claimed(backend: Backend) -> None:
    backend.write_bytes("f", b"x" * 101)
    assert backend.read_bytes("f", 101) == b"x" * 101
    got = outcome(lambda: backend.read_bytes("f", 100))
    assert isinstance(got, FileTooLargeError), got
    # /proc files claim size 0 and hold more.
    got = outcome(lambda: backend.read_bytes("/proc/self/status", 10))
    assert isinstance(got, FileTooLargeError), got
    assert b"Name:" in backend.read_bytes("/proc/self/status")
