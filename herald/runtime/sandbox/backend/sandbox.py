"""In-backend execution, once per Runtime: the backend's python, the sandbox files there, and
the pool that serves tool calls (see backend/child.py for the policy and the per-run child).

`BackendSandbox.prepare` probes the python (`command -v`, version >= 3.8; anything else is a
`BackendPythonError` that says what to install or set), makes a private 0700 directory on the
backend named after its owner and unpacks the sandbox files into it, all on one exec channel
(backend/setup.py: the files follow the command on its stdin, compressed, without waiting for
it to start), whose process then becomes the first run's supervisor: a cold start opens one
channel and starts no interpreter twice, and the session's shell need not run; a directory
found gone later (swept while its connection was down) is made again (`forget_dir`);
`spawn` starts a `BackendChild` there (the first on the setup's channel), whose script is forked
by the Runtime's zygote in the backend when there is one (backend/zygote.py, setting
`sandbox.fork_server`; started with the Runtime's third child); `close` stops the zygote,
and the supervisor waiting for the next run removes the directory on its way out (its goodbye
asks it to, `begin_close`; a process started there only for that is ~0.1 s over Docker, two
round trips over SSH); with no such supervisor, or one that did not say it was done, the
directory is removed on a channel of its own. Runs never wait for their channel's close, the
Runtime's close does (backend/closer.py).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar

from ...._sandbox.procs.owners import owner_tag
from ...._sandbox.wire import frames
from ...._sandbox.wire import guards as wire
from ...._sandbox.wire.framing import FrameBuffer, ProtocolError, encode_frame
from ....backends.base import Backend, BackendError, Channel
from ....config import Settings
from ....inflight import InflightBytes
from ...rpc.server import Handler
from ..contract import LocalGrants
from ..errors import SandboxStartError
from ..isolation import PENDING, Isolation, settle
from ..sandboxdir import CHILD_LOADER
from .child import GOODBYE, BackendChild
from .closer import ChannelCloser, close_channel
from .setup import (
    MIN_PYTHON,
    PROBE_TIMEOUT,
    REMOTE_LOADER,
    SERVING,
    SETUP,
    SETUP_SHELL,
    Preread,
    read_setup,
    sandbox_archive,
)
from .zygote import BackendZygote

ZYGOTE_FROM_SPAWN = 3  # the fork server starts with the third child a Runtime spawns
# The goodbye that asks a supervisor to remove the directory as it leaves, and how long it may
# take to say it has (after that the directory is removed from here).
_REMOVE: frames.CloseFrame = {"type": frames.CLOSE, "remove": True}
REMOVE_GOODBYE = encode_frame(_REMOVE)
REMOVE_WAIT_SECONDS = 5.0
CLOSE_JOIN_SECONDS = 30.0  # the Runtime's close waits this long for its channels to be closed
# Per backend, what a python named without a path resolved to there (sandbox.remote_python looked
# up on PATH): later Runtimes on the same backend start it directly, not through a launcher such
# as a pyenv shim (a shell script, ~0.1 s per start).
_RESOLVED_PYTHONS: weakref.WeakKeyDictionary[Backend, dict[str, str]] = weakref.WeakKeyDictionary()
S = TypeVar("S")
log = logging.getLogger(__name__)


class BackendPythonError(SandboxStartError):
    """The backend has no usable Python for in-backend execution; the message says what to do."""


class BackendIsolationError(BackendPythonError):
    """The isolation the settings ask for explicitly cannot be had on the backend: a setting to fix."""


class BackendSandbox(Generic[S]):
    """Per Runtime: the backend's python, the private directory with the sandbox files, and the
    pool that serves tool calls arriving over the runs' channels."""

    def __init__(
        self,
        backend: Backend,
        settings: Settings,
        local_dir: Path,
        authenticate: Callable[[str], S | None],
        handle: Handler[S],
        tools: LocalGrants[S] | None = None,
        isolation: Callable[[], Isolation] | None = None,
        inflight: Callable[[S], InflightBytes | None] | None = None,
    ) -> None:
        """`isolation`: what the settings ask for the script there (isolation.request, once the
        backend is reached), settled by the backend's probe in `prepare`; None where the
        container is the boundary."""
        self.backend = backend
        self._inflight = inflight  # a run's cap on bytes held for its calls (herald/inflight.py)
        self._asked = isolation
        self.isolation = (Isolation("container", f"the {backend.name} container is the boundary") if isolation is None
                          else Isolation(PENDING, "the backend has not been reached yet"))
        self._tools = tools
        self._settings = settings
        self._local_dir = local_dir
        self._authenticate = authenticate
        self._handle = handle
        self._python = _RESOLVED_PYTHONS.get(backend, {}).get(settings.sandbox.remote_python,
                                                              settings.sandbox.remote_python)
        self._lock = threading.Lock()
        self.remote_dir: str | None = None
        self._first: Channel | None = None  # the setup's channel, until the first run takes it
        self._spawned = 0  # children spawned for this directory
        self.zygote: BackendZygote | None = None
        self._closer = ChannelCloser()
        # Made now, not in the first run (a CLI makes its Runtime while it connects to the backend).
        self._archive_bytes = sandbox_archive(self._local_dir)
        self._closing = False  # the Runtime is closing: a supervisor told to leave may take the directory along
        self._removal: _Removal | None = None  # the supervisor that does (begin_close)
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, settings.sandbox.max_parallel_calls), thread_name_prefix="herald-remote-rpc"
        )

    @property
    def where(self) -> str:
        return f"the {self.backend.name} backend"

    @property
    def _on_this_machine(self) -> bool:
        """The backend's files are this machine's (the local backend): the directory lives as
        long as this process, and Herald removes it itself."""
        return self.backend.name == "local"

    def prepare(self) -> str:
        """Probe the python and unpack the sandbox files, once, on a channel that then serves
        the first run (one channel, no round trip of its own); the remote directory."""
        with self._lock:
            if self.remote_dir is None:
                prefetch = None
                if self._tools is not None:  # side by side with the setup, not after it in the first run
                    prefetch = threading.Thread(target=self._tools.prefetch, name="herald-grant-prefetch", daemon=True)
                    prefetch.start()
                try:
                    remote_dir, self._first = self._setup()
                except BackendError as exc:
                    raise SandboxStartError(f"could not prepare in-backend execution on {self.where}: {exc}") from None
                finally:
                    if prefetch is not None:
                        prefetch.join(PROBE_TIMEOUT)  # (shorter than the setup, as a rule) every run's grant is whole
                self.remote_dir = remote_dir
                if self._settings.sandbox.fork_server:
                    self.zygote = BackendZygote(
                        lambda argv: self.backend.open_channel(argv, cwd=remote_dir),
                        self._python,
                        remote_dir,
                        list(self._settings.sandbox.env_passthrough),
                        self._confinement(),
                        self._closer.retire,
                    )
            return self.remote_dir

    def _setup(self) -> tuple[str, Channel]:
        """One channel: is there a python (and which version), a private 0700 directory named
        after its owner, the sandbox files unpacked into it by that python from the archive sent
        right behind the command; then the same process serves the first run (SETUP). The
        directory and that channel."""
        probe = "probe" if self._asked is not None and self._settings.sandbox.isolation != "none" else "-"
        archive = self._archive_bytes
        # On this machine the directory lives as long as this process; elsewhere the setup finds
        # the owner there (the connection's sshd), or there is none (a container's).
        owner = owner_tag(os.getpid()) if self._on_this_machine else ""
        channel = self.backend.open_channel(
            ["/bin/sh", "-c", SETUP_SHELL, "herald-setup", self._python, SETUP, probe, owner]
        )
        try:
            channel.send(archive)
            found, said, rest = read_setup(channel, time.monotonic() + PROBE_TIMEOUT)
            if "missing" in found and self._python != self._settings.sandbox.remote_python:
                stale = True  # what the name resolved to before is gone: look the name up again
            else:
                stale = False
                remote_dir = self._check_setup(found, said)
        except BaseException:
            self._closer.retire(channel, b"")  # it ends by itself (an error said, or stdin closed)
            raise
        if stale:
            self._closer.retire(channel, b"")
            self._forget_resolved_python()
            return self._setup()
        return remote_dir, (Preread(channel, rest) if rest else channel)

    def _check_setup(self, found: dict[str, str], said: str) -> str:
        """The remote directory, from what the setup said; else the error that says what to fix
        (the directory, if made, removed)."""
        fix = (
            "Install Python 3 there (e.g. apt-get install python3), set sandbox.remote_python to "
            'its path, or run scripts on this machine with exec_mode "host".'
        )
        if "missing" in found:
            raise BackendPythonError(
                f"in-backend execution needs Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer on {self.where}, "
                f"but `{self._python}` was not found there. {fix}"
            )
        remote_dir = found.get("dir", "")
        version = found.get("version", "")
        major, _, minor = version.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            if remote_dir:
                self._remove(remote_dir)
            raise BackendPythonError(
                f"`{self._python}` on {self.where} did not run: {said[:500] or 'no output'}. {fix}"
            )
        if (int(major), int(minor)) < MIN_PYTHON:
            if remote_dir:
                self._remove(remote_dir)
            raise BackendPythonError(
                f"in-backend execution needs Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer, but `{self._python}` "
                f"on {self.where} is Python {version}. {fix}"
            )
        if not remote_dir:
            raise SandboxStartError(f"could not make a private directory on {self.where}: {said[:500] or 'no output'}")
        real = found.get("python", "")
        if "/" not in self._python and real.startswith("/"):
            # A name looked up on PATH: start what it found directly from now on, in this Runtime
            # and the next ones on this backend. A path is kept as given: it may be a wrapper that
            # sets up the interpreter's environment.
            self._python = real
            _RESOLVED_PYTHONS.setdefault(self.backend, {})[self._settings.sandbox.remote_python] = real
        if "unpacked" not in found or SERVING not in found:
            self._remove(remote_dir)
            raise SandboxStartError(
                f"could not unpack the sandbox files into {remote_dir} on {self.where} (is its disk full, or "
                f"TMPDIR not writable?): {said[:500] or 'no output'}"
            )
        self._settle(found.get("isolation"), remote_dir)
        return remote_dir

    def _forget_resolved_python(self) -> None:
        """The interpreter the name had resolved to on this backend is gone: look the name up again."""
        asked = self._settings.sandbox.remote_python
        if self._python != asked:
            _RESOLVED_PYTHONS.get(self.backend, {}).pop(asked, None)
            self._python = asked

    def _settle(self, probed: str | None, remote_dir: str) -> None:
        """The isolation in force there, from the settings and what the probe found."""
        if self._asked is None:
            return
        try:
            found = json.loads(probed) if probed else {"bwrap_problem": "the backend's probe said nothing"}
            self.isolation = settle(self._asked(), found, self.where)
        except ValueError as exc:
            self._remove(remote_dir)
            raise BackendIsolationError(f"{exc}. Install it there, or set sandbox.isolation to \"auto\".") from None

    def _confinement(self) -> dict[str, Any] | None:
        """The spec the backend's supervisor and zygote confine the script by, if any."""
        return self.isolation.wire() if self.isolation.mode in ("bwrap", "landlock") else None

    def _remove(self, remote_dir: str) -> None:
        """Remove the directory, on a channel of its own (the session's shell need not run); on
        this machine, from here (a channel is a process or two to start: ~50 ms of a close)."""
        if self._on_this_machine:
            shutil.rmtree(remote_dir, ignore_errors=True)
            return
        try:
            channel = self.backend.open_channel(["rm", "-rf", "--", remote_dir])
        except Exception as exc:  # the backend may be gone already; nothing left to clean then
            log.debug("could not remove %s on %s: %s", remote_dir, self.where, exc)
            return
        read_setup(channel, time.monotonic() + PROBE_TIMEOUT)  # until rm is done (its output ends)
        close_channel(channel, None)

    def forget_dir(self) -> None:
        """The directory was swept (a supervisor found it gone: RemoteDirGone): the next spawn
        prepares a new one, with a zygote of its own."""
        self._let_go()

    def _let_go(self) -> str | None:
        """Forget the directory, stop its zygote and the setup's channel if no run took it; the
        directory that was in use."""
        with self._lock:
            remote_dir, self.remote_dir = self.remote_dir, None
            zygote, self.zygote = self.zygote, None
            first, self._first = self._first, None
        if first is not None:
            # Past its SERVING line it reads frames (waiting for a prepare): it hears a goodbye.
            self._retire_supervisor(first, GOODBYE)
        if zygote is not None:
            zygote.close()
        return remote_dir

    def spawn(self) -> BackendChild[S]:
        """A child whose channel opens in the background (on a remote backend that is a round
        trip or more): a warm successor costs the run that spawns it nothing."""
        remote_dir = self.prepare()
        argv = [self._python, "-I", "-B", "-c", REMOTE_LOADER, remote_dir]
        # The supervisor applies procs/environ.py's policy there; only the user's passthrough names travel.
        env: frames.PrepareEnv = {"passthrough": list(self._settings.sandbox.env_passthrough)}
        with self._lock:
            first, self._first = self._first, None  # the setup's own channel serves the first run
            self._spawned += 1
            spawned = self._spawned
        zygote = self.zygote
        if zygote is not None and spawned >= ZYGOTE_FROM_SPAWN:
            # Started (or replaced) in the background: this run may still spawn. Not for the
            # first two children (the first run's and its successor): it would compete with them
            # for the backend's CPU (two interpreters and a bwrap), and a Runtime that runs a
            # script or two, then closes, never uses it.
            zygote.ensure()
        fork_server = zygote.path if zygote is not None and zygote.usable else None
        prepare: frames.PrepareFrame = {
            "type": frames.PREPARE,
            "env": env,
            "loader": CHILD_LOADER,
            "fork_server": fork_server,
            "isolation": self._confinement(),
        }
        return BackendChild(
            (lambda: first) if first is not None else lambda: self.backend.open_channel(argv, cwd=remote_dir),
            prepare,
            self._authenticate,
            self._handle,
            self._pool,
            where=self.where,
            python=self._python,
            tools=self._tools,
            retire=self._retire_supervisor,
            await_opener=self._closer.await_opener,
            inflight=self._inflight,
        )

    def begin_close(self) -> None:
        """The Runtime is closing (before its children are): the first supervisor told to leave
        from now on (the waiting child's, or the setup's that no run took) removes the
        directory on its way out and says so; on this machine it is removed from here."""
        self._closing = not self._on_this_machine

    def _retire_supervisor(self, channel: Channel, goodbye: bytes | None) -> None:
        """Retire a run's channel (backend/closer.py); while closing, a supervisor told to leave
        (one that is up: still starting it would make the close wait for its start) is asked to
        take the directory with it, and is given the time to."""
        removal = None
        with self._lock:
            if self._closing and self._removal is None and goodbye == GOODBYE:
                removal = self._removal = _Removal()
        if removal is not None:
            self._closer.retire(channel, REMOVE_GOODBYE, removal.heard, REMOVE_WAIT_SECONDS)
        else:
            self._closer.retire(channel, goodbye)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        remote_dir = self._let_go()
        with self._lock:
            removal, self._closing = self._removal, False  # no later claim: the directory is seen to here
        if remote_dir is not None and removal is None:
            self._remove(remote_dir)  # nothing there writes into it any more: no wait for them to leave
        self._closer.close(CLOSE_JOIN_SECONDS)
        if remote_dir is not None and removal is not None and not removal.done:
            log.debug("the last supervisor did not remove %s on %s: removing it from here", remote_dir, self.where)
            self._remove(remote_dir)


class _Removal:
    """What the supervisor asked to remove the directory says on its way out (REMOVED)."""

    def __init__(self) -> None:
        self._frames = FrameBuffer()
        self.done = False  # it said the directory is gone

    def heard(self, data: bytes) -> None:
        try:
            said = self._frames.feed(data)
        except ProtocolError:
            return
        for message in said:
            try:
                frame = wire.from_supervisor(message)
            except wire.FrameError:
                continue
            self.done = self.done or ("type" in frame and frame["type"] == frames.REMOVED and frame["ok"])
