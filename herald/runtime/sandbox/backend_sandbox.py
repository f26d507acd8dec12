"""In-backend execution, once per Runtime: the backend's python, the sandbox files there, and
the pool that serves tool calls (see backend_child.py for the policy and the per-run child).

`BackendSandbox.prepare` probes the python (`command -v`, version >= 3.8; anything else is a
`BackendPythonError` that says what to install or set), makes a private 0700 directory on the
backend (`mktemp -d`) and unpacks the sandbox files into it, all in one shell command (the
files travel in it, compressed: one round trip, however many files there are);
`spawn` starts a `BackendChild` there, whose script is forked by the Runtime's zygote in the
backend when there is one (backend_zygote.py, setting `sandbox.fork_server`); `close` stops the
zygote and removes the directory while the channels of the zygote and the waiting child end
(backend_closer.py: runs never wait for their channel's close, the Runtime's close does).
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import threading
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..._sandbox import frames
from ...backends.base import Backend, BackendError
from ...backends.shell import shell_quote
from ...config import Settings
from ..rpc.server import Handler
from .backend_child import BackendChild, LocalGrants
from .backend_closer import ChannelCloser
from .backend_zygote import BackendZygote
from .contract import SandboxStartError
from .host_child import LOADER
from .isolation import PENDING, Isolation, settle
from .stubgen import RUNTIME_PACKAGE

REMOTE_LOADER = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    f"from {RUNTIME_PACKAGE}.supervisor import main; main()"
)
MIN_PYTHON = (3, 8)
PROBE_TIMEOUT = 30.0
CLOSE_JOIN_SECONDS = 30.0  # the Runtime's close waits this long for its channels to be closed
PROBE_MARK = "__HERALD_PROBE__"
# Run by the backend's python for the new directory (argv[1]): its version and real path, then,
# on a python new enough, the sandbox files from the archive on stdin. Syntax and flags (-E -s -S: no
# PYTHON* variables, no site) any python knows, so that an old one can say its version.
SETUP = (
    "import sys\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"  # nothing from the cwd (what -I does)
    f"print('{PROBE_MARK} version %d.%d' % sys.version_info[:2])\n"
    f"print('{PROBE_MARK} python ' + (sys.executable or ''))\n"
    f"if sys.version_info >= {MIN_PYTHON!r}:\n"
    "    import base64, json, os, zlib\n"
    "    files = json.loads(zlib.decompress(base64.b64decode(sys.stdin.read())).decode('utf-8'))\n"
    "    for name in sorted(files):\n"
    "        path = os.path.join(sys.argv[1], *name.split('/'))\n"
    "        if not os.path.isdir(os.path.dirname(path)):\n"
    "            os.makedirs(os.path.dirname(path))\n"
    "        with open(path, 'wb') as out:\n"
    "            out.write(files[name].encode('utf-8'))\n"
    f"    print('{PROBE_MARK} unpacked')\n"
    "    if sys.argv[2:3] == ['probe']:\n"  # what can confine a script there (_sandbox/isolate.py)
    "        sys.path.insert(0, sys.argv[1])\n"
    f"        from {RUNTIME_PACKAGE}.isolate import probe\n"
    f"        print('{PROBE_MARK} isolation ' + json.dumps(probe()))\n"
)

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
    ) -> None:
        """`isolation`: what the settings ask for the script there (isolation.request, once the
        backend is reached), settled by the backend's probe in `prepare`; None where the
        container is the boundary."""
        self.backend = backend
        self._asked = isolation
        self.isolation = (Isolation("container", f"the {backend.name} container is the boundary") if isolation is None
                          else Isolation(PENDING, "the backend has not been reached yet"))
        self._tools = tools
        self._settings = settings
        self._local_dir = local_dir
        self._authenticate = authenticate
        self._handle = handle
        self._python = settings.sandbox.remote_python
        self._lock = threading.Lock()
        self.remote_dir: str | None = None
        self.zygote: BackendZygote | None = None
        self._closer = ChannelCloser()
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, settings.sandbox.max_parallel_calls), thread_name_prefix="herald-remote-rpc"
        )

    @property
    def where(self) -> str:
        return f"the {self.backend.name} backend"

    def prepare(self) -> str:
        """Probe the python and unpack the sandbox files, once: one command, one round trip;
        the remote directory."""
        with self._lock:
            if self.remote_dir is None:
                try:
                    remote_dir = self._setup()
                except BackendError as exc:
                    raise SandboxStartError(f"could not prepare in-backend execution on {self.where}: {exc}") from None
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

    def _setup(self) -> str:
        """One shell command: is there a python (and which version), a private directory
        (`mktemp -d`, 0700), and the sandbox files unpacked into it by that python from an archive
        that travels inside the command (a here-document of base64)."""
        python = shell_quote(self._python)
        probe = " probe" if self._asked is not None and self._settings.sandbox.isolation != "none" else ""
        end = f"__HERALD_ARCHIVE_{secrets.token_hex(8)}__"
        command = (
            f"( if ! command -v {python} >/dev/null 2>&1; then echo '{PROBE_MARK} missing'; else umask 077; "
            f"d=$(mktemp -d \"${{TMPDIR:-/tmp}}/herald-sandbox-XXXXXXXX\") && echo \"{PROBE_MARK} dir $d\" && "
            f"{python} -E -s -S -c {shell_quote(SETUP)} \"$d\"{probe} 2>&1 <<'{end}'\n{self._archive()}{end}\nfi )"
        )
        result = self.backend.run(command, timeout=PROBE_TIMEOUT)
        found: dict[str, str] = {}
        for line in result.output.splitlines():
            if line.startswith(PROBE_MARK + " "):
                key, _, value = line[len(PROBE_MARK) + 1 :].partition(" ")
                found[key] = value
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
                f"`{self._python}` on {self.where} did not run: {result.output.strip()[:500] or 'no output'}. {fix}"
            )
        if (int(major), int(minor)) < MIN_PYTHON:
            if remote_dir:
                self._remove(remote_dir)
            raise BackendPythonError(
                f"in-backend execution needs Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer, but `{self._python}` "
                f"on {self.where} is Python {version}. {fix}"
            )
        if not remote_dir:
            raise SandboxStartError(
                f"could not make a private directory on {self.where}: {result.output.strip()[:500] or 'no output'}"
            )
        real = found.get("python", "")
        if "/" not in self._python and real.startswith("/"):
            # A name looked up on PATH: start what it found directly from now on (a launcher such
            # as a pyenv shim is a shell script, ~0.1 s per start). A path is kept as given: it
            # may be a wrapper that sets up the interpreter's environment.
            self._python = real
        if "unpacked" not in found:
            self._remove(remote_dir)
            said = "\n".join(line for line in result.output.splitlines() if not line.startswith(PROBE_MARK))
            raise SandboxStartError(
                f"could not unpack the sandbox files into {remote_dir} on {self.where} (is its disk full, or "
                f"TMPDIR not writable?): {said.strip()[:500] or 'no output'}"
            )
        self._settle(found.get("isolation"), remote_dir)
        return remote_dir

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

    def _archive(self) -> str:
        """The sandbox files (hermes_tools.py, the `_hermes_runtime` package), {path: text} as
        JSON, compressed as one stream (a zip compresses file by file: 25% more for the shell to
        read) and base64-encoded."""
        files = {p.relative_to(self._local_dir).as_posix(): p.read_text("utf-8") for p in self._local_dir.rglob("*.py")}
        packed = zlib.compress(json.dumps(files, sort_keys=True).encode("utf-8"), 6)  # 9: twice the time, 0.5% smaller
        return base64.encodebytes(packed).decode("ascii")

    def _remove(self, remote_dir: str) -> None:
        try:
            self.backend.run(f"rm -rf -- {shell_quote(remote_dir)}", timeout=PROBE_TIMEOUT)
        except Exception as exc:  # the backend may be gone already; nothing left to clean then
            log.debug("could not remove %s on %s: %s", remote_dir, self.where, exc)

    def spawn(self) -> BackendChild[S]:
        """A child whose channel opens in the background (on a remote backend that is a round
        trip or more): a warm successor costs the run that spawns it nothing."""
        remote_dir = self.prepare()
        argv = [self._python, "-I", "-B", "-c", REMOTE_LOADER, remote_dir]
        # The supervisor applies environ.py's policy there; only the user's passthrough names travel.
        env = {"passthrough": list(self._settings.sandbox.env_passthrough)}
        zygote = self.zygote
        if zygote is not None:
            zygote.ensure()  # started (or replaced) in the background: this run may still spawn
        fork_server = zygote.path if zygote is not None and zygote.usable else None
        prepare = {"type": frames.PREPARE, "env": env, "loader": LOADER, "fork_server": fork_server,
                   "isolation": self._confinement()}
        return BackendChild(
            lambda: self.backend.open_channel(argv, cwd=remote_dir),
            prepare,
            self._authenticate,
            self._handle,
            self._pool,
            where=self.where,
            python=self._python,
            tools=self._tools,
            retire=self._closer.retire,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            remote_dir, self.remote_dir = self.remote_dir, None
            zygote, self.zygote = self.zygote, None
        if zygote is not None:
            zygote.close()
        if remote_dir is not None:
            self._remove(remote_dir)  # nothing there writes into it any more: no wait for them to leave
        self._closer.close(CLOSE_JOIN_SECONDS)
