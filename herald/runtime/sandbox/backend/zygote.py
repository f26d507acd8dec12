"""In-backend execution, the fork server inside the backend: one zygote (_sandbox/child/zygote.py) per
Runtime, so that each run's script is a fork of a pre-imported interpreter instead of a new one.

Policy:
- A run's supervisor lives for that run only (one exec channel each, backend/child.py), so a zygote it
  started would die with it and no later run could use it. The zygote therefore has an exec
  channel of its own, opened by `BackendSandbox` once the sandbox files are in place (setting
  `sandbox.fork_server`), and lives as long as the Runtime: it listens on a socket in the
  private sandbox directory, which the prepare frame names to every supervisor.
- It runs confined as the run's script would be (sandbox.isolation, settled by the backend's
  probe): under bwrap its socket is bound outside, in the sandbox directory, and it serves from
  inside the namespaces, so every script it forks shares them; the supervisor finds a forked
  script's pid on the backend through the namespace's NSpid (procs/forking.py).
- It leaves when its stdin ends (Herald gone, an SSH connection dropped) or says `LEAVE_BYTE`:
  `close` (the Runtime closes) says it and lets the channel end by itself (backend/closer.py),
  which spares a remote backend the kill of its tree. Processes it forked for a supervisor that
  died are killed there.
- A run never depends on it: a supervisor that cannot connect (the zygote is still importing,
  was killed, refused) spawns an interpreter as before. A zygote found dead when a run is
  spawned is replaced, in the background, at most `MAX_STARTS` times per Runtime, so one that
  cannot live on this backend does not cost every run a start.
"""

from __future__ import annotations

import json
import logging
import posixpath
import threading
from collections.abc import Callable
from typing import Any

from ...._sandbox.child.zygote import LEAVE_BYTE
from ...._sandbox.child.zygote_inbackend import ISOLATION_FLAG, LISTEN_FLAG, LISTENING
from ....backends.base import Channel
from ....tools.stubgen import RUNTIME_PACKAGE
from .closer import close_channel

ZYGOTE_LOADER = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    f"from {RUNTIME_PACKAGE}.child.zygote_inbackend import main; main()"
)
SOCKET_NAME = "zygote.sock"
AF_UNIX_PATH_MAX = 100  # sun_path is 104 bytes on macOS, 108 on Linux: keep clear of both
MAX_STARTS = 3
CLOSE_JOIN_SECONDS = 30.0
log = logging.getLogger(__name__)


class BackendZygote:
    """The zygote of one BackendSandbox, on its exec channel (opened in the background)."""

    def __init__(
        self,
        open_channel: Callable[[list[str]], Channel],
        python: str,
        remote_dir: str,
        passthrough: list[str],
        isolation: dict[str, Any] | None = None,
        retire: Callable[[Channel, bytes | None], None] = close_channel,
    ) -> None:
        """`isolation`: the spec (isolation.Isolation.wire) the zygote confines itself, and so
        every script it forks, by: under bwrap it binds its socket, then starts again inside."""
        self._retire = retire
        self.path = posixpath.join(remote_dir, SOCKET_NAME)
        confined = [ISOLATION_FLAG, json.dumps(isolation)] if isolation else []
        self._argv = [python, "-I", "-B", "-c", ZYGOTE_LOADER, remote_dir, LISTEN_FLAG, self.path, *confined,
                      *passthrough]
        self._open_channel = open_channel
        self._lock = threading.Lock()
        self._channel: Channel | None = None
        self._listening = False  # the current channel's zygote said it serves (it hears LEAVE_BYTE)
        self._opener: threading.Thread | None = None
        self._starts = 0
        self._closed = False
        self.usable = len(self.path.encode()) <= AF_UNIX_PATH_MAX
        if not self.usable:
            log.info("sandbox directory path too long for a socket (%s): runs spawn their interpreter", remote_dir)

    def ensure(self) -> None:
        """Start the zygote if none runs (without waiting for it): the next runs fork from it."""
        with self._lock:
            if self._closed or not self.usable or (self._opener is not None and self._opener.is_alive()):
                return
            if self._channel is not None:
                if self._heard(self._channel):
                    return
                dead, self._channel = self._channel, None
                self._retire(dead, b"")
            if self._starts >= MAX_STARTS:
                log.warning("the backend's fork server died %d times: runs spawn their interpreter", self._starts)
                self.usable = False
                return
            self._starts += 1
            self._opener = threading.Thread(target=self._open, name="herald-zygote-open", daemon=True)
            self._opener.start()

    def _open(self) -> None:
        try:
            channel = self._open_channel(self._argv)
        except Exception as exc:  # BackendError, or whatever the backend's client raised
            log.warning("could not start the backend's fork server (runs spawn their interpreter): %s", exc)
            with self._lock:
                self.usable = False
            return
        with self._lock:
            if not self._closed:
                self._channel, self._listening = channel, False
                return
        self._retire(channel, None)  # closed while it opened: still starting, it would not hear

    def close(self) -> None:
        with self._lock:
            self._closed = True
            opener = self._opener
        if opener is not None:
            opener.join(timeout=CLOSE_JOIN_SECONDS)
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            # Listening, it leaves on the goodbye byte; still importing, it would hear it only
            # after that: closed at once then. Gone: closed once its end is read.
            running = self._heard(channel)
            self._retire(channel, (LEAVE_BYTE if self._listening else None) if running else b"")

    def _heard(self, channel: Channel) -> bool:
        """Read what the zygote said, without waiting: that it listens, else only failures.
        False once its output ended (it is gone)."""
        for _ in range(64):
            try:
                chunk = channel.recv(0)
            except Exception:
                return False
            if chunk is None:
                return True
            if not chunk:
                return False
            if LISTENING in chunk:
                self._listening = True
                chunk = chunk.replace(LISTENING, b"")
            if chunk.strip():
                log.debug("the backend's fork server said: %s", chunk.decode("utf-8", "replace").strip())
        return True
