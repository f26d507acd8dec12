"""The script interpreter of an in-backend run, as the supervisor (supervisor/loop.py) starts it.
Stdlib only, Python >= 3.8.

The process itself, its pipes and the fork request are the process layer's (procs/child.py,
procs/forking.py), as in host mode. What is the supervisor's: which way, and how it is confined.

- forked by the Runtime's zygote in the backend (child/zygote.py, listening on a socket in the
  sandbox directory) on a connection of our own, when Herald names one (setting
  sandbox.fork_server): the zygote reports the exit over that connection and reaps the child
  only when told, or kills and reaps it when the connection ends;
- else, or when that fails in any way (not started yet, killed, refused), a fresh interpreter:
  a run never fails because the fork server did.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any, Dict, List, Mapping, Optional

from ..child.client import at_unix_path
from ..confine import bwrap as isolate
from ..procs.child import ChildProc, Forked, Spawned, fork_child, spawn_child
from ..procs.environ import sandbox_environ
from ..procs.forking import FORK_REPLY_TIMEOUT, ZygoteConnection


def fork_script(zygote_path: str, sandbox_dir: str, namespaced: bool = False) -> Forked:
    """A child forked by the zygote listening on `zygote_path`; OSError if there is none
    there or it fails to give one (the caller spawns instead). `namespaced`: the zygote runs in
    a PID namespace of its own (bwrap)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link = ZygoteConnection(sock, namespaced)
    try:
        sock.settimeout(FORK_REPLY_TIMEOUT)
        at_unix_path(zygote_path, sock.connect)
        return fork_child(link, sandbox_dir)
    except BaseException:
        link.leave()
        raise


def spawn_script(
    loader: str, sandbox_dir: str, env: "Mapping[str, str]", isolation: "Optional[Dict[str, Any]]" = None
) -> Spawned:
    """A fresh interpreter running `loader` (child/bootstrap.py's main) in its own session, confined
    by `isolation` (a completed spec, confine/bwrap.py): under bwrap its pid is bwrap's."""

    def command(ctl_read: int, ctl_write: int) -> "List[str]":
        argv = [sys.executable, "-I", "-B", "-c", loader, sandbox_dir, str(ctl_read), str(ctl_write)]
        return isolate.confined_command(isolation, argv)

    env = dict(env, **isolate.confined_environ(isolation, os.path.join(sandbox_dir, "tmp")))
    return spawn_child(command, env, sandbox_dir)


def start_script(message: Dict[str, Any], sandbox_dir: str) -> ChildProc:
    """The prepare frame's script interpreter: forked by the Runtime's zygote when Herald names
    one (setting sandbox.fork_server), else, or when that fails, a freshly spawned interpreter."""
    zygote = message.get("fork_server")
    spec = message.get("isolation")  # confined as in host mode (confine/bwrap.py); the zygote confines itself
    spec = isolate.complete(spec, sandbox_dir) if isinstance(spec, dict) else None
    if isinstance(zygote, str) and zygote:
        try:
            return fork_script(zygote, sandbox_dir, namespaced=bool(spec and spec.get("mode") == "bwrap"))
        except OSError:
            pass  # not started yet, killed, or refused: spawn, as without a fork server
    # The host mode's policy (procs/environ.py) on this machine's environment.
    env = sandbox_environ(os.environ, message.get("env", {}).get("passthrough", ()))
    return spawn_script(message["loader"], sandbox_dir, env, spec)
