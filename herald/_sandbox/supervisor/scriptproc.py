"""The script interpreter of an in-backend run, as the supervisor (supervisor/loop.py) holds it.
Stdlib only, Python >= 3.8.

Two ways to get one, the same process either way (child/bootstrap.py in its own session and process
group, stdin from /dev/null, stdout, stderr and a control pipe pair on pipes to the supervisor):

- `fork_script`: ask the Runtime's zygote in the backend (child/zygote.py, listening on a socket in
  the sandbox directory) to fork one. Well under a millisecond, where an interpreter's start-up
  costs ~35 ms or more; the zygote reports the exit over our connection and reaps the child
  only when told, so its pid cannot be reused while we may still signal its group.
- `spawn_script`: start a fresh interpreter, when there is no zygote or it fails in any way
  (not started yet, killed, refused): a run never fails because the fork server did.
"""

from __future__ import annotations

import array
import os
import signal
import socket
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..child.client import at_unix_path
from ..confine import bwrap as isolate
from ..procs.environ import sandbox_environ
from ..procs.trees import alive, host_pid
from ..wire import frames
from ..wire import guards as wire

FORK_REPLY_TIMEOUT = 5.0  # a zygote that does not answer this fast is treated as gone
LOST_STATUS = -signal.SIGKILL  # an exit nobody could report (the zygote died) after a kill


class ScriptProcess:
    """A started script interpreter: its pid and our ends of its pipes (all non-blocking)."""

    pid = 0
    watch: Optional[int] = None  # an fd the supervisor polls and hands to `readable`, if any

    def __init__(self, stdout: int, stderr: int, ctl_in: int, ctl_out: int) -> None:
        self.stdout, self.stderr, self.ctl_in, self.ctl_out = stdout, stderr, ctl_in, ctl_out
        for fd in (stdout, stderr, ctl_in, ctl_out):
            os.set_blocking(fd, False)

    def readable(self) -> None:
        """`watch` has something to read."""

    def exited(self) -> bool:
        """It has exited; it is not reaped yet, so its pid still names its process group."""
        raise NotImplementedError

    def wait(self) -> Optional[int]:
        """Its status as Popen.returncode (-N: signal N), None if nobody could tell; let its pid go."""
        raise NotImplementedError

    def close(self) -> None:
        """Leaving: whatever is still ours of it is let go."""

    def discard(self) -> None:
        """It died unused: let it go and close our ends of its pipes."""
        self.close()
        _close([self.stdout, self.stderr, self.ctl_in, self.ctl_out])


class Spawned(ScriptProcess):
    def __init__(self, proc: "subprocess.Popen[bytes]", fds: "Tuple[int, int, int, int]") -> None:
        super().__init__(*fds)
        self.proc = proc
        self.pid = proc.pid

    def exited(self) -> bool:
        if self.proc.returncode is not None or not hasattr(os, "waitid"):  # no waitid: macOS
            return self.proc.poll() is not None
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def wait(self) -> Optional[int]:
        return self.proc.wait()


class Forked(ScriptProcess):
    def __init__(self, sock: socket.socket, pid: int, fds: "Tuple[int, int, int, int]", ns_pid: int = 0) -> None:
        super().__init__(*fds)
        sock.setblocking(False)
        self.sock: Optional[socket.socket] = sock
        self.watch = sock.fileno()
        self.pid = pid  # ours: what we signal and watch
        self.ns_pid = ns_pid or pid  # the zygote's name for it (in its PID namespace, under bwrap)
        self.status: Optional[int] = None

    def readable(self) -> None:
        if self.sock is None:
            return
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the zygote died: its orphan is init's now, and its exit is unknown to us
            self._disconnect()
            return
        try:
            message = wire.from_zygote(data)
        except wire.FrameError:
            return
        if message["op"] == frames.EXIT and message["pid"] == self.ns_pid:
            self.status = message["status"]

    def exited(self) -> bool:
        return self.status is not None or (self.sock is None and not alive(self.pid))

    def wait(self) -> Optional[int]:
        status = self.status
        if self.sock is not None:
            try:
                self.sock.send(wire.encode_op({"op": frames.REAP, "pid": self.ns_pid}))
            except OSError:
                pass
        self._disconnect()
        return status

    def close(self) -> None:
        # Our connection ending tells the zygote to kill and reap whatever of ours is left.
        self._disconnect()

    def _disconnect(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock, self.watch = None, None


def _pipes() -> "Tuple[List[int], List[int]]":
    """Four pipes: (ours: stdout read, stderr read, control in, control out),
    (the child's: stdout write, stderr write, control read, control write)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    return [out_r, err_r, from_child_r, to_child_w], [out_w, err_w, to_child_r, from_child_w]


def _close(fds: "List[int]") -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def fork_script(zygote_path: str, sandbox_dir: str, namespaced: bool = False) -> Forked:
    """A child forked by the zygote listening on `zygote_path`; OSError if there is none
    there or it fails to give one (the caller spawns instead). `namespaced`: the zygote runs in
    a PID namespace of its own (bwrap) and names the child by its pid there; ours is found
    below the process that bound the socket (bwrap, which started the zygote)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours, theirs = _pipes()
    try:
        sock.settimeout(FORK_REPLY_TIMEOUT)
        at_unix_path(zygote_path, sock.connect)
        request = wire.encode_op({"op": frames.FORK, "sandbox_dir": sandbox_dir})
        sock.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", theirs))])
        data = sock.recv(65536)
        if not data:
            raise OSError("the zygote refused: it went away")
        reply = wire.from_zygote(data)
        if reply["op"] == frames.ERROR:
            raise OSError("the zygote refused: %s" % reply["message"])
        if reply["op"] != frames.FORKED:
            raise OSError("the zygote refused: it sent %s" % reply["op"])
        ns_pid = pid = reply["pid"]
        if namespaced:
            pid = _ours(sock, ns_pid)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sock.close()
        _close(ours)
        raise OSError(str(exc) or type(exc).__name__) from None
    finally:
        _close(theirs)
    out_r, err_r, ctl_in, ctl_out = ours
    return Forked(sock, pid, (out_r, err_r, ctl_in, ctl_out), ns_pid)


def _ours(sock: socket.socket, ns_pid: int) -> int:
    """Our pid of the zygote's child `ns_pid`: the socket's peer is the process that listened
    (bwrap's, exec'd from the zygote that bound it); the child is below it."""
    creds = sock.getsockopt(socket.SOL_SOCKET, getattr(socket, "SO_PEERCRED"), 12)  # noqa: B009
    found = host_pid(int.from_bytes(creds[0:4], sys.byteorder), ns_pid)
    if found is None:
        try:  # a child we cannot name cannot be contained: let it go
            sock.send(wire.encode_op({"op": frames.REAP, "pid": ns_pid}))
        except OSError:
            pass
        raise OSError("the zygote's child %d is not visible from here" % ns_pid)
    return found


def spawn_script(
    loader: str, sandbox_dir: str, env: "Mapping[str, str]", isolation: "Optional[Dict[str, Any]]" = None
) -> Spawned:
    """A fresh interpreter running `loader` (child/bootstrap.py's main) in its own session, confined
    by `isolation` (a completed spec, confine/bwrap.py): under bwrap its pid is bwrap's."""
    ours, theirs = _pipes()
    out_w, err_w, to_child_r, from_child_w = theirs
    argv = [sys.executable, "-I", "-B", "-c", loader, sandbox_dir, str(to_child_r), str(from_child_w)]
    env = dict(env, **isolate.confined_environ(isolation, os.path.join(sandbox_dir, "tmp")))
    try:
        proc = subprocess.Popen(
            isolate.confined_command(isolation, argv),
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            pass_fds=(to_child_r, from_child_w),
            start_new_session=True,
            env=dict(env),
            cwd=sandbox_dir,
        )
    except BaseException:
        _close(ours)
        raise
    finally:
        _close(theirs)
    out_r, err_r, ctl_in, ctl_out = ours
    return Spawned(proc, (out_r, err_r, ctl_in, ctl_out))


def start_script(message: Dict[str, Any], sandbox_dir: str) -> ScriptProcess:
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
