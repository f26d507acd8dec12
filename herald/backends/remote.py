"""Processes on backends reached only through an exec API (Docker, Modal).

Such APIs start a process and hand back its stdin and output, but neither tell its process id
inside the sandbox nor offer "kill this process and everything it started". Both are provided
here once, in POSIX sh, so they work in any image that has /bin/sh:

- `launch_argv` wraps a command: the wrapper merges stderr into stdout (a Channel is one byte
  stream, in the order the process wrote it), changes to the working directory, waits for one
  line on stdin, prints its process id on a line of its own, and `exec`s the command, so that
  id is the command's. Waiting for the "go" line means nothing is written before the caller is
  ready to read (an HTTP upgrade, for one, may otherwise swallow early bytes).
- `kill_tree_argv` is a one-shot command that does what `herald._sandbox.procs.trees.terminate_tree` does
  locally: stop the process, collect it and its descendants from /proc, SIGTERM them (process
  groups too), let it continue (to die), wait up to a grace period, SIGKILL whatever is left.
"""

from __future__ import annotations

import base64
import functools
import json
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from .. import _sandbox

GO = b"go\n"

# A sandbox's main process only has to stay alive (commands come through exec); a shell loop
# rather than `sleep infinity`, which busybox lacks.
IDLE_COMMAND = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600; done"]

_LAUNCH = (
    'exec 2>&1; cd -- "$1" 2>/dev/null; shift; '
    'IFS= read -r _herald_go || exit 125; printf "%s\\n" "$$"; exec "$@"'
)

# Descendants are found by following parent links (field 4 of /proc/PID/stat, counted after the
# command name, which may contain spaces or parentheses); the set is taken before signalling,
# as orphans are re-parented and would drop out of the tree.
_KILL_TREE = r"""
root=$1; tenths=$2
tree() {
  pairs=
  for stat in /proc/[0-9]*/stat; do
    IFS= read -r line 2>/dev/null < "$stat" || continue
    set -- ${line##*) }
    pid=${stat#/proc/}; pairs="$pairs ${pid%/stat}:$2"
  done
  frontier=" $root "
  while [ "$frontier" != " " ]; do
    next=" "
    for pair in $pairs; do
      case "$frontier" in *" ${pair#*:} "*)
        case "$found" in *" ${pair%%:*} "*) ;; *) found="$found${pair%%:*} "; next="$next${pair%%:*} " ;; esac ;;
      esac
    done
    frontier=$next
  done
}
running() {
  IFS= read -r line 2>/dev/null < "/proc/$1/stat" || return 1
  set -- ${line##*) }
  [ "$1" != Z ] && [ "$1" != X ]
}
found=" $root "
kill -STOP "$root" 2>/dev/null  # a stopped shell starts no next command while we look
tree
for pid in $found; do kill -TERM "$pid" 2>/dev/null; kill -TERM "-$pid" 2>/dev/null; done
kill -CONT "$root" 2>/dev/null
waited=0
while :; do
  tree
  alive=
  for pid in $found; do running "$pid" && alive="$alive $pid"; done
  [ -z "$alive" ] && exit 0
  [ "$waited" -ge "$tenths" ] && break
  sleep 0.1 2>/dev/null || sleep 1
  waited=$((waited + 1))
done
for pid in $alive; do kill -KILL "$pid" 2>/dev/null; kill -KILL "-$pid" 2>/dev/null; done
exit 0
"""


# The guard's modules, loaded from their sources in a package of their own (nothing of the host's
# python path is read: -I -S). Syntax any python3 parses, so that a python too old for the guard
# (< 3.8) still starts the shell, unguarded, rather than failing it.
_GUARD_MODULES = ("procs/owners", "procs/trees", "shell/guard")
_GUARD_LOADER = """
import os, sys
try:
    import base64, json, types, zlib
    sources = json.loads(zlib.decompress(base64.b64decode(sys.argv[1])).decode())
    for name, source in sources:
        parts = ["_herald_guard"] + name.split("/")
        for depth in range(1, len(parts)):
            package = ".".join(parts[:depth])
            if package not in sys.modules:
                sys.modules[package] = types.ModuleType(package)
                sys.modules[package].__path__ = []
        module = types.ModuleType(".".join(parts))
        module.__package__ = ".".join(parts[:-1])
        sys.modules[module.__name__] = module
        exec(compile(source, name + ".py", "exec"), module.__dict__)
    main = sys.modules["_herald_guard.shell.guard"].main
except Exception:
    os.execvp(sys.argv[3], sys.argv[3:])
main(sys.argv[2:])
"""

# Runs python3 with the loader when there is one (its parent, for the death signal, is ours).
_GUARD_SH = (
    'sources=$1; shift; '
    'command -v python3 >/dev/null 2>&1 && exec python3 -I -S -c "$0" "$sources" "$PPID" "$@"; '
    'exec "$@"'
)


@functools.cache
def _guard_sources() -> str:
    folder = Path(_sandbox.__file__).parent
    sources = [(name, (folder / f"{name}.py").read_text()) for name in _GUARD_MODULES]  # in import order
    return base64.b64encode(zlib.compress(json.dumps(sources).encode(), 9)).decode()


def guarded_argv(argv: list[str]) -> list[str]:
    """`argv` (a persistent shell) under the shell guard where the host has a python3."""
    return ["/bin/sh", "-c", _GUARD_SH, _GUARD_LOADER, _guard_sources(), *argv]


def launch_argv(argv: list[str], cwd: str | None) -> list[str]:
    """`argv` behind the wrapper: send `GO`, then read the process id line, then its output."""
    if not argv:
        raise ValueError("empty command")
    return ["/bin/sh", "-c", _LAUNCH, "herald-launch", cwd or ".", *argv]


def kill_tree_argv(pid: int, grace: float) -> list[str]:
    """A command that stops `pid` and its descendants: SIGTERM, up to `grace` s, SIGKILL."""
    return ["/bin/sh", "-c", _KILL_TREE, "herald-kill", str(int(pid)), str(max(0, round(grace * 10)))]


def parse_pid_line(buffer: bytes) -> tuple[int | None, bytes]:
    """(pid, rest) once `buffer` holds the wrapper's first line; (None, buffer) until then.

    Raises ValueError when the first line is not a process id (the wrapper could not start).
    """
    end = buffer.find(b"\n")
    if end < 0:
        if len(buffer) > 64:
            raise ValueError(buffer[:200].decode("utf-8", "replace"))
        return None, buffer
    line = buffer[:end].strip()
    if not line.isdigit():
        raise ValueError(buffer[:200].decode("utf-8", "replace"))
    return int(line), buffer[end + 1 :]


def read_pid(recv: Callable[[float], bytes | None], timeout: float) -> tuple[int, bytes]:
    """Read the wrapper's process id line with `recv` (a Channel's); the output after it too.

    Raises ValueError with what the process said instead when it did not start.
    """
    deadline = time.monotonic() + timeout
    buffer = b""
    while True:
        pid, rest = parse_pid_line(buffer)
        if pid is not None:
            return pid, rest
        chunk = recv(max(0.0, deadline - time.monotonic()))
        if chunk == b"" or (chunk is None and time.monotonic() >= deadline):
            said = buffer.decode("utf-8", "replace").strip()
            raise ValueError(said or ("it exited at once" if chunk == b"" else f"no answer within {timeout:g} s"))
        buffer += chunk or b""
