"""Closing in-backend execution's exec channels off the run's result path (backend_closer.py)
and the listening zygote's goodbye (zygote.py): a process that leaves when told is let go
by itself, one that does not is stopped as before, and the Runtime's close waits for both."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from herald._sandbox.child.zygote import LEAVE_BYTE
from herald._sandbox.child.zygote_inbackend import LISTEN_FLAG, LISTENING
from herald.backends.local import LocalBackend
from herald.runtime.sandbox.backend.closer import ChannelCloser

from ._backend_mode import unique_sleep
from ._helpers import pids_with_marker, wait_for

LEAVES_ON_GOODBYE = "import sys\nsys.stdin.readline()\nsys.exit(7)"


def test_a_channel_whose_process_leaves_on_the_goodbye_is_let_go(local_backend: LocalBackend) -> None:
    closer = ChannelCloser()
    channels = [local_backend.open_channel([sys.executable, "-c", LEAVES_ON_GOODBYE]) for _ in range(3)]
    for channel in channels:
        closer.retire(channel, b"bye\n")
    closer.close(60)
    # 7: each exited by itself on the goodbye, not by the close's SIGTERM.
    assert [getattr(channel, "returncode", None) for channel in channels] == [7, 7, 7]


def test_a_channel_whose_process_stays_is_closed_anyway(local_backend: LocalBackend) -> None:
    marker = unique_sleep()
    channel = local_backend.open_channel(["sleep", marker])
    assert wait_for(lambda: bool(pids_with_marker(marker)), timeout=30)
    closer = ChannelCloser()
    closer.retire(channel, b"bye\n")
    closer.close(60)
    assert wait_for(lambda: not pids_with_marker(marker), timeout=30), pids_with_marker(marker)


def test_a_channel_still_starting_is_closed_without_waiting(local_backend: LocalBackend) -> None:
    closer = ChannelCloser()
    channel = local_backend.open_channel([sys.executable, "-c", LEAVES_ON_GOODBYE])
    closer.retire(channel, None)  # no goodbye: it would stay until its stdin ends, so it is stopped
    closer.close(60)
    assert getattr(channel, "returncode", None) not in (None, 7)


def test_after_close_a_retired_channel_is_closed_at_once(local_backend: LocalBackend) -> None:
    closer = ChannelCloser()
    closer.close(60)
    channel = local_backend.open_channel([sys.executable, "-c", LEAVES_ON_GOODBYE])
    closer.retire(channel, b"bye\n")
    assert getattr(channel, "returncode", None) == 7


def test_a_listening_zygote_leaves_on_the_goodbye_byte_with_its_stdin_open(tmp_path: Path) -> None:
    sock = tmp_path / "zygote.sock"
    loader = "import sys; from herald._sandbox.child.zygote_inbackend import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", loader, str(tmp_path), LISTEN_FLAG, str(sock)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == LISTENING, "it says when it serves"
        assert sock.exists()
        proc.stdin.write(LEAVE_BYTE)
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
        assert not sock.exists(), "it removes its socket on the way out"
    finally:
        proc.kill()
        proc.wait()
