"""The snapshot engine as a python3 process on a backend that is not this machine.

The engine's sources (herald/_sandbox/snapshot/) are sent as the first line of the process's
stdin, so nothing is installed there and the command line stays short; a missing python3 says
so in its own words (NO_PYTHON) before anything else.
"""

from __future__ import annotations

import base64
import functools
import json
import time
import zlib
from pathlib import Path
from typing import Any

from .._sandbox import snapshot as snapshot_package
from .._sandbox.snapshot.serve import MARK
from ..backends.base import Backend, BackendError, Channel

NO_PYTHON = "HSNAP-NO-PYTHON"
START_TIMEOUT = 30.0
# Syntax any python3 parses, so an old one reports its version instead of a syntax error.
_LOADER = """
import sys
if sys.version_info < (3, 8):
    sys.stdout.write("HSNAP-OLD-PYTHON %d.%d\\n" % sys.version_info[:2]); sys.stdout.flush(); sys.exit(3)
import base64, json, types, zlib
sources = json.loads(zlib.decompress(base64.b64decode(sys.stdin.buffer.readline())).decode())
package = types.ModuleType("_herald_snapshot")
package.__path__ = []
sys.modules["_herald_snapshot"] = package
for name, source in sources:
    module = types.ModuleType("_herald_snapshot." + name)
    module.__package__ = "_herald_snapshot"
    sys.modules[module.__name__] = module
    exec(compile(source, name + ".py", "exec"), module.__dict__)
sys.modules["_herald_snapshot.serve"].main()
"""
_START = ('command -v "$1" >/dev/null 2>&1 || { echo "' + NO_PYTHON + '"; exit 127; }; '
          'exec "$1" -I -S -c "$0"')
_MODULES = ("store", "scan", "apply", "textdiff", "engine", "serve")  # in import order


@functools.cache
def _sources() -> bytes:
    folder = Path(snapshot_package.__file__).parent
    sources = [(name, (folder / f"{name}.py").read_text()) for name in _MODULES]
    return base64.b64encode(zlib.compress(json.dumps(sources).encode(), 9)) + b"\n"


class NoEngine(BackendError):
    """The backend has no python3 (3.8 or newer) to run the engine: asking again will not help."""


class EngineProcess:
    """One engine process on `backend`, asked one request at a time (the caller serialises)."""

    def __init__(self, backend: Backend, python: str, where: str, *, changes_files: bool = False) -> None:
        """`changes_files`: this process will restore (write the workspace); the backend is told,
        so that what it remembers of files is not trusted while the process runs."""
        self.where = where
        self.python = python
        self._buffer = b""
        self._channel: Channel = backend.open_channel(["/bin/sh", "-c", _START, _LOADER, python], cwd="/",
                                                      changes_files=changes_files)
        self._channel.send(_sources())
        try:
            self.pid = int(self._read(START_TIMEOUT)["ok"]["pid"])
        except BackendError:
            self.close()
            raise

    def ask(self, request: dict[str, Any], timeout: float) -> Any:
        """The engine's answer to `request`; SnapshotFailure-worthy errors come back as `error`."""
        self._channel.send(json.dumps(request).encode() + b"\n")
        return self._read(timeout)

    def _read(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        said: list[bytes] = []
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
                if line.startswith(MARK):
                    return json.loads(line[len(MARK) :].decode())
                said.append(line)
                self._check_start(line)
                continue
            left = deadline - time.monotonic()
            chunk = self._channel.recv(max(0.0, min(left, 5.0)))
            if chunk == b"":
                text = b"\n".join([*said, self._buffer]).decode("utf-8", "replace").strip()
                raise BackendError(f"the snapshot engine on the {self.where} stopped: {text[-300:] or 'it exited'}")
            if chunk is None and time.monotonic() >= deadline:
                raise BackendError(f"the snapshot engine on the {self.where} did not answer within {timeout:g} s")
            self._buffer += chunk or b""

    def _check_start(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").strip()
        if text == NO_PYTHON or text.startswith("HSNAP-OLD-PYTHON"):
            found = f"is Python {text.split()[-1]}" if text != NO_PYTHON else "was not found"
            raise NoEngine(
                f"checkpoints and transactions need Python 3.8 or newer on the {self.where}, and {self.python!r} "
                f"{found} there: install it (e.g. apt-get install python3) or set sandbox.remote_python"
            )

    def close(self) -> None:
        self._channel.close()
