"""What sets a Runtime's directory up in a backend (backend/sandbox.py runs it), and reading
what it says: one exec channel, whose process becomes the first run's supervisor.

SETUP_SHELL checks that the backend has the python asked for; SETUP (run by that python, with
the sandbox files following on its stdin) makes the private directory named after its owner
(_sandbox/procs/owners.py), unpacks the files, sweeps dead owners' directories, probes what can
confine a script there (or takes the cached answer: _sandbox/supervisor/sandboxcache.py), says SERVING and
serves the first run. REMOTE_LOADER starts each later run's supervisor in that directory.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import zlib
from pathlib import Path

from ....backends.base import BackendError, Channel
from ....tools.stubgen import RUNTIME_PACKAGE
from ..errors import SandboxStartError

# What a supervisor says instead of starting when its directory is gone (REMOTE_LOADER
# below): a sweep removed it while the connection that owned it was down (_sandbox/procs/owners.py).
DIR_GONE = "__HERALD_DIR_GONE__"


class RemoteDirGone(SandboxStartError):
    """The Runtime's directory in the backend is gone: prepare it again (runtime.py does, once)."""


# A later run's supervisor, in the directory the setup made: gone if a sweep removed it while
# the connection that owned it was down (_sandbox/procs/owners.py); the Runtime then prepares again.
REMOTE_LOADER = (
    "import os, sys\n"
    f"if not os.path.isdir(os.path.join(sys.argv[1], '{RUNTIME_PACKAGE}')):\n"
    f"    sys.stdout.write('{DIR_GONE}\\n'); sys.exit(3)\n"
    "sys.path.insert(0, sys.argv[1])\n"
    f"from {RUNTIME_PACKAGE}.supervisor.loop import main; main()"
)
MIN_PYTHON = (3, 8)
PROBE_TIMEOUT = 30.0
PROBE_MARK = "__HERALD_PROBE__"
CACHE_MODULE = f"{RUNTIME_PACKAGE}/supervisor/sandboxcache.py"
OWNERS_MODULE = f"{RUNTIME_PACKAGE}/procs/owners.py"
SERVING = "serving"  # the setup's last line: from here on its channel is the first run's supervisor
# Run by the backend's python (argv: the temp dir, "probe" or "-", the owner's tag or ""): its
# version and real path, then, on a python new enough, the sandbox files from the archive that
# follows on stdin (its length, a newline, zlib-compressed JSON) in a new private directory named
# after its owner (the connection's sshd, or the tag Herald gives: _sandbox/procs/owners.py), the
# directories of owners that are gone swept, what can confine a script
# there (the probe's answer kept in the backend's cache while still valid:
# _sandbox/supervisor/sandboxcache.py), and then it becomes the
# first run's supervisor on the same stdin and stdout (no channel of its own, no second round
# trip, no second interpreter). Syntax and flags (-E -s -S: no PYTHON* variables, no site) any
# python knows, so that an old one can say its version.
SETUP = (
    "import sys\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"  # nothing from the cwd (what -I does)
    f"print('{PROBE_MARK} version %d.%d' % sys.version_info[:2])\n"
    f"print('{PROBE_MARK} python ' + (sys.executable or ''))\n"
    "sys.stdout.flush()\n"
    f"if sys.version_info >= {MIN_PYTHON!r}:\n"
    "    import json, os, zlib\n"
    "    def take(size):\n"  # exactly `size` bytes of stdin: what follows is the supervisor's
    "        got = bytearray()\n"
    "        while len(got) < size:\n"
    "            chunk = os.read(0, size - len(got))\n"
    "            if not chunk:\n"
    "                raise SystemExit('the sandbox archive ended early')\n"
    "            got += chunk\n"
    "        return bytes(got)\n"
    "    size = b''\n"
    "    while not size.endswith(b'\\n'):\n"
    "        size += take(1)\n"
    "    files = json.loads(zlib.decompress(take(int(size))).decode('utf-8'))\n"
    # The cache's code runs from the archive just received, never from the disk it checks.
    "    cache, owners = {}, {}\n"
    f"    exec(compile(files['{CACHE_MODULE}'], '{CACHE_MODULE}', 'exec'), cache)\n"
    f"    exec(compile(files['{OWNERS_MODULE}'], '{OWNERS_MODULE}', 'exec'), owners)\n"
    "    parent = sys.argv[1]\n"
    "    sys.argv[1] = owners['make_owned_dir'](parent, 'sandbox', sys.argv[3] or owners['connection_owner']())\n"
    "    os.chdir(sys.argv[1])\n"
    f"    print('{PROBE_MARK} dir ' + sys.argv[1])\n"
    f"    print('{PROBE_MARK} unpacked ' + cache['install'](files, sys.argv[1]))\n"
    "    owners['sweep_dead_owners']((parent,), 'sandbox')\n"
    "    if sys.argv[2:3] == ['probe']:\n"  # what can confine a script there (_sandbox/confine/bwrap.py)
    "        root, key = cache['cache_root'](), cache['probe_key'](files)\n"
    "        found = cache['known_probe'](root, key)\n"
    "        if found is None:\n"
    "            sys.path.insert(0, sys.argv[1])\n"
    f"            from {RUNTIME_PACKAGE}.confine.bwrap import probe\n"
    "            found = probe()\n"
    "            cache['remember_probe'](root, key, found)\n"
    f"        print('{PROBE_MARK} isolation ' + json.dumps(found))\n"
    "    del files, cache, owners\n"
    f"    print('{PROBE_MARK} {SERVING}')\n"
    "    sys.stdout.flush()\n"
    # It becomes the supervisor itself, no second interpreter: it has what `-I -B` gives one
    # (no PYTHON* variables, no user site: -E -s, and -S: no site at all; nothing from the cwd
    # on sys.path), and -B's "no bytecode written" is this flag.
    "    sys.dont_write_bytecode = True\n"
    "    sys.argv[1:] = sys.argv[1:2]\n"
    f"    exec({REMOTE_LOADER!r})\n"
)
# The setup's channel: is there a python, then SETUP (which makes the private directory).
SETUP_SHELL = (
    f"if ! command -v \"$1\" >/dev/null 2>&1; then echo '{PROBE_MARK} missing'; exit 0; fi; umask 077; "
    "exec \"$1\" -E -s -S -c \"$2\" \"${TMPDIR:-/tmp}\" \"$3\" \"$4\" 2>&1"
)


def read_setup(channel: Channel, deadline: float) -> tuple[dict[str, str], str, bytes]:
    """What the setup said, up to its SERVING line or the end of its output: the marked
    lines ({key: value}), the others (a shell's or python's complaint), and what came after
    the SERVING line (the supervisor's, if it said anything already: failing to start)."""
    found: dict[str, str] = {}
    said: list[str] = []
    buffer = b""
    while True:
        while b"\n" in buffer:
            raw, buffer = buffer.split(b"\n", 1)
            line = raw.decode("utf-8", "replace")
            if not line.startswith(PROBE_MARK + " "):
                said.append(line)
                continue
            key, _, value = line[len(PROBE_MARK) + 1 :].partition(" ")
            found[key] = value
            if key == SERVING:
                return found, "\n".join(said).strip(), buffer
        left = deadline - time.monotonic()
        if left <= 0:
            raise BackendError(f"the setup did not finish within {PROBE_TIMEOUT:g} s")
        chunk = channel.recv(min(left, 1.0))
        if chunk == b"":
            said.append(buffer.decode("utf-8", "replace"))
            return found, "\n".join(said).strip(), b""
        buffer += chunk or b""


class Preread(Channel):
    """A channel whose first output was read already (`head`): it is read again first."""

    def __init__(self, channel: Channel, head: bytes) -> None:
        self._channel = channel
        self._head = head

    def send(self, data: bytes) -> None:
        self._channel.send(data)

    def recv(self, timeout: float) -> bytes | None:
        if self._head:
            head, self._head = self._head, b""
            return head
        return self._channel.recv(timeout)

    def close(self) -> None:
        self._channel.close()

    @property
    def returncode(self) -> int | None:
        return self._channel.returncode

    @property
    def undelivered(self) -> bool:
        return self._channel.undelivered


# The compressed archive of the sandbox files by their digest: the same for every Runtime with
# the same tools, and compressing it is ~16 ms of each new Runtime's start (the oldest goes first).
ARCHIVES_KEPT = 8
_ARCHIVES: dict[bytes, bytes] = {}
_ARCHIVES_LOCK = threading.Lock()


def sandbox_archive(local_dir: Path) -> bytes:
    """The sandbox files under `local_dir` (hermes_tools.py, the `_hermes_runtime` package),
    {path: text} as JSON, compressed as one stream (a zip compresses file by file: 25% more to
    send), behind its length and a newline: what SETUP reads from its stdin."""
    files = {p.relative_to(local_dir).as_posix(): p.read_text("utf-8") for p in local_dir.rglob("*.py")}
    text = json.dumps(files, sort_keys=True).encode("utf-8")
    key = hashlib.sha256(text).digest()
    with _ARCHIVES_LOCK:
        archive = _ARCHIVES.get(key)
    if archive is None:
        packed = zlib.compress(text, 6)  # 9: twice the time, 0.5% smaller
        archive = b"%d\n" % len(packed) + packed
        with _ARCHIVES_LOCK:
            _ARCHIVES[key] = archive
            while len(_ARCHIVES) > ARCHIVES_KEPT:
                del _ARCHIVES[next(iter(_ARCHIVES))]
    return archive
