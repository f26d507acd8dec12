"""The fork server's in-backend start (child/zygote.py has the server and the host-mode start).

`python -I -B -c <loader> SANDBOX_DIR --listen SOCKET_PATH [--isolation SPEC] [PASSTHROUGH_NAME...]`,
on an exec channel of its own that lives as long as the Runtime (runtime/sandbox/backend/zygote.py).
It applies procs/environ.py's policy to its own environment (what a spawned child would get), listens
on SOCKET_PATH in the private sandbox directory and serves every run's supervisor on a
connection of its own. It leaves when its stdin ends or brings LEAVE_BYTE (Herald's close).
With a bwrap SPEC it binds the socket here, then starts again inside bwrap with that socket
(`--listener-fd`), so the supervisors outside reach it and every fork is confined; with a
Landlock SPEC it restricts itself once the socket is bound.
Stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any, Dict, List, Optional

from ..procs.trees import become_subreaper, set_dumpable
from .client import at_unix_path
from .zygote import Zygote, _preimport

LISTEN_FLAG = "--listen"
ISOLATION_FLAG = "--isolation"  # then a JSON spec (_sandbox/confine/bwrap.py): confine ourselves, and so every fork
LISTENER_FD_FLAG = "--listener-fd"  # then the fd of the socket bound outside, once inside bwrap
LISTENING = b"listening\n"  # what a listening zygote says on its stdout once it serves


def _listen(path: str) -> socket.socket:
    try:
        os.unlink(path)  # left by a zygote of this directory that was killed
    except OSError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    old_umask = os.umask(0o077)
    try:
        at_unix_path(path, listener.bind)
    finally:
        os.umask(old_umask)
    listener.listen(64)
    listener.setblocking(False)
    return listener


def _confined_listener(sandbox_dir: str, path: str, spec: "Dict[str, Any]", passthrough: "List[str]") -> socket.socket:
    """Bind the socket here, where the supervisors are, then confine ourselves by `spec`:
    under bwrap, start again inside it with the socket (never returns); under Landlock,
    restrict this process (confine/inprocess.py). The listener, for Landlock."""
    from ..confine import bwrap as isolate

    spec = isolate.complete(spec, sandbox_dir)
    listener = _listen(path)
    os.environ.update(isolate.confined_environ(spec, os.path.join(sandbox_dir, "tmp")))
    if spec.get("mode") == "bwrap":
        os.set_inheritable(listener.fileno(), True)
        loader = "import sys; sys.path.insert(0, sys.argv[1]); " \
            "from %s.zygote_inbackend import main; main()" % __package__
        argv = [sys.executable, "-I", "-B", "-c", loader, sandbox_dir, LISTEN_FLAG, path,
                LISTENER_FD_FLAG, str(listener.fileno()), *passthrough]
        command = isolate.confined_command(spec, argv)
        os.execv(command[0], command)
    from ..confine.inprocess import confine_from_environ

    confine_from_environ()
    return listener


def main_listening(sandbox_dir: str, path: str, rest: "List[str]") -> None:
    from ..procs.environ import sandbox_environ

    spec: Optional[Dict[str, Any]] = None
    inherited: Optional[int] = None
    if rest[:1] == [ISOLATION_FLAG]:
        spec, rest = json.loads(rest[1]), rest[2:]
    elif rest[:1] == [LISTENER_FD_FLAG]:
        inherited, rest = int(rest[1]), rest[2:]
    # Children inherit this environment: make it the one a spawned child would be given.
    environ = sandbox_environ(os.environ, rest)
    os.environ.clear()
    os.environ.update(environ)
    listener = _confined_listener(sandbox_dir, path, spec, rest) if spec else None
    become_subreaper()
    set_dumpable(False)
    _preimport()
    if listener is None:  # only now: a supervisor that can connect finds a ready zygote
        listener = _listen(path) if inherited is None else socket.socket(fileno=inherited)
        listener.setblocking(False)
    zygote = Zygote(listener=listener, lifeline=0)
    try:
        os.write(1, LISTENING)  # Herald's close then asks it to leave rather than killing it
        zygote.serve()
    finally:
        zygote.stop()
        listener.close()
        try:
            os.unlink(path)
        except OSError:
            pass


def main() -> None:
    """argv: SANDBOX_DIR --listen SOCKET_PATH [...] (the module docstring)."""
    sys.path.insert(0, sys.argv[1])
    if len(sys.argv) < 4 or sys.argv[2] != LISTEN_FLAG:
        raise SystemExit("usage: SANDBOX_DIR %s SOCKET_PATH [%s SPEC] [NAME...]" % (LISTEN_FLAG, ISOLATION_FLAG))
    main_listening(sys.argv[1], sys.argv[3], sys.argv[4:])
