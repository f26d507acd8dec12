"""The script interpreter of an in-backend run, as the supervisor (supervisor/loop.py) holds it:
started, replaced when it died unused, stopped with everything it started, reaped (HeldScript).
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
import signal
import socket
import sys
from typing import Any, Dict, List, Mapping, Optional, Set

from ..child.client import at_unix_path
from ..confine import bwrap as isolate
from ..procs.child import ChildProc, Forked, Spawned, fork_child, spawn_child
from ..procs.environ import sandbox_environ
from ..procs.forking import FORK_REPLY_TIMEOUT, LOST_STATUS, ZygoteConnection
from ..procs.trees import KillClock, alive, descendants, signal_pids  # descendants: found through /proc


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


class HeldScript:
    """The supervisor's script interpreter, from its start to its reaping."""

    def __init__(self, sandbox_dir: str) -> None:
        self.sandbox_dir = sandbox_dir
        self.child: Optional[ChildProc] = None
        self.prepared: Optional[Dict[str, Any]] = None  # the prepare frame it was started by
        self.known: Set[int] = set()  # processes signalled when the kill began
        self.clock: Optional[KillClock] = None  # SIGTERM -> grace -> SIGKILL, once asked to kill

    def start(self, prepare: Dict[str, Any]) -> ChildProc:
        self.prepared = dict(prepare)
        self.child = start_script(dict(prepare), self.sandbox_dir)
        return self.child

    def replace_if_dead(self, started: bool) -> Optional[ChildProc]:
        """A forked script that dies before its run starts was killed with its zygote (its
        parent-death signal): the run goes to a freshly spawned one, whichever of the death and
        the start frame comes first. The new child, when it was replaced."""
        old = self.child
        if old is None or started or self.clock is not None or not isinstance(old, Forked):
            return None
        if not (old.exited() or not alive(old.pid)):
            return None
        old.discard()
        assert self.prepared is not None
        self.child = start_script(dict(self.prepared, fork_server=None), self.sandbox_dir)
        return self.child

    def exited(self) -> bool:
        return self.child is not None and self.child.exited()

    def stop(self, grace: float) -> None:
        """SIGTERM the script and everything it started; SIGKILL whatever is left after `grace`."""
        if self.child is None:
            return
        if self.clock is None:
            self.clock = KillClock(None, grace, self.sigterm_everything, self.kill_everything)
        self.clock.stop("killed")

    def sigterm_everything(self) -> None:
        assert self.child is not None
        self.known |= set(descendants(self.child.pid)) | {self.child.pid}
        signal_pids(self.known, signal.SIGTERM)

    def kill_everything(self) -> None:
        if self.child is not None:
            signal_pids(self.known | set(descendants(self.child.pid)) | {self.child.pid}, signal.SIGKILL)

    def kill_group(self) -> None:
        """It has exited, not reaped yet, so its pid still names its group: take what is left of it."""
        assert self.child is not None
        signal_pids(self.known | {self.child.pid}, signal.SIGKILL)

    def reap(self) -> Optional[int]:
        """Its status, its pid let go; None if nobody could tell (forked, and the zygote died first)."""
        assert self.child is not None
        status = self.child.wait(None)
        self.child.release()
        return status

    def lost_status(self, reported: Optional[int]) -> int:
        """The status of one whose zygote died first: what the script said on its way out,
        unless it was being killed."""
        return reported if reported is not None and not self.known else LOST_STATUS

    def close(self) -> None:
        if self.child is not None:
            self.child.close()
