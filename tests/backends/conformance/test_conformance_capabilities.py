"""What a backend declares it can do (herald/backends/base.py: the Backend and Channel
protocols, with their defaults), on every backend: what it says is what happened."""

from __future__ import annotations

import time

from herald.backends import Backend
from herald.backends.shell import PersistentShell

from ._helpers import sh

DEADLINE = 60.0  # generous: a verdict never depends on how fast the backend is


def test_connect_again_keeps_the_session(backend: Backend, root: str) -> None:
    """`herald exec` connects before the script runs; a backend already connected (or with
    nothing to connect to) keeps its session: the shell's directory and variables."""
    sh(backend, "mkdir -p sub && cd sub && export KEPT=yes")
    backend.connect()
    backend.connect()
    assert backend.run('echo "$KEPT $PWD"').output == f"yes {root}/sub"


def test_a_session_with_nothing_to_report_has_no_note(backend: Backend) -> None:
    """The dispatcher adds a backend's note to the next tool result: a session where nothing
    happened to the backend adds nothing, however often it is asked."""
    sh(backend, "true")
    assert backend.take_note() == ""
    assert backend.take_note() == ""


def test_the_session_shell_is_the_one_commands_run_in(backend: Backend, root: str) -> None:
    """A backend-mode supervisor's terminal starts from the session shell's saved state: that
    state is the shell `run` uses, and its file is on the backend."""
    sh(backend, "mkdir -p there && cd there")
    shell = backend.session_shell
    assert isinstance(shell, PersistentShell)
    assert shell.cwd == backend.cwd == f"{root}/there"
    assert backend.stat(shell.state_path) is not None, shell.state_path


def test_a_path_nobody_checked_is_not_pinned(backend: Backend) -> None:
    """A pin is where the workspace check allowed a path to lead: a path never checked has none
    (search_files then goes by the path, checked on this machine by what it opened)."""
    assert backend.pinned("never-checked-by-anyone") is None


def test_a_channel_says_its_send_arrived_and_how_its_process_ended(backend: Backend) -> None:
    channel = backend.open_channel(["sh", "-c", 'read line; echo "got $line"; exit 3'])
    try:
        channel.send(b"hello\n")
        assert not channel.undelivered  # the process was there to read it
        output, deadline = b"", time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            chunk = channel.recv(1.0)
            if chunk == b"":
                break
            output += chunk or b""
        assert b"got hello" in output, output
        while channel.returncode is None and time.monotonic() < deadline:  # the status follows the output
            time.sleep(0.05)
        assert channel.returncode == 3
    finally:
        channel.close()
