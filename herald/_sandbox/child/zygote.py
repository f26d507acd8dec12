"""The fork server: a pre-imported interpreter that forks a fresh sandbox child per request.
Stdlib only, Python >= 3.8.

Two ways to start it, one mechanism:

- Host mode (host/zygote.py): `python -I -B -c <loader> ZYGOTE_DIR SOCKET_FD`, with a scrubbed
  environment, in its own session, with nothing on stdin/stdout/stderr. SOCKET_FD is a
  SOCK_SEQPACKET pair end to Herald, its one client; when Herald's end closes, it leaves.
- In-backend execution (runtime/sandbox/backend/zygote.py): `... SANDBOX_DIR --listen SOCKET_PATH
  ...` on an exec channel of its own that lives as long as the Runtime, listening on a socket
  that every run's supervisor connects to; its start (environment, isolation, the listener) is
  child/zygote_inbackend.py. It leaves when its stdin ends or brings LEAVE_BYTE (Herald's close).

Each message is one JSON datagram, a ForkOp / ReapOp from a client, a ForkedOp or ErrorOp,
ChildExitOp, and in host mode one ZygoteReadyOp from here (wire/frames.py, "Fork server socket").

Why: starting an interpreter costs ~35 ms; a fork of this one, which has already imported the
stdlib modules scripts and the runtime use, costs well under one. Each child is a new process
(new session and process group, fresh random seed, its own copy of the sandbox directory's
`hermes_tools`, which this process imported once: child/stubcache.py), so nothing leaks between
runs. This process stays single-threaded: forking a threaded process is unsafe.

An exited child is reported at once (to the client that asked for it) but reaped only on
"reap": until then its pid stays a zombie, so a kill of its process group can never hit a
reused pid. A "reap" may come while the child is still on its way out (Herald lets a run go
once its script says it is leaving): its group is killed and it is reaped once it has exited,
without holding up the next fork. A listening zygote's client that goes away without reaping
(a supervisor that was killed) takes its children with it: they are killed and reaped here.
"""

from __future__ import annotations

import array
import gc
import importlib
import os
import select
import signal
import socket
import sys
from types import ModuleType
from typing import Any, Dict, List, Optional, Set

from ..procs.trees import become_subreaper, descendants, die_with_parent, own_children, set_dumpable, signal_pids
from ..wire import frames
from ..wire import guards as wire
from . import stubcache

PREIMPORTS = (
    "json", "socket", "threading", "struct", "traceback", "linecache", "builtins", "typing", "re",
    "shlex", "time", "random", "subprocess", "pathlib", "collections", "itertools", "functools",
    "datetime", "hashlib", "base64", "textwrap", "urllib.parse", "io", "math", "string", "atexit",
)
MAX_MESSAGE = 65536
FDS_PER_FORK = 4
LEAVE_BYTE = b"\n"  # the only thing Herald writes on a listening zygote's stdin: leave now


class _Child:
    def __init__(self, owner: socket.socket) -> None:
        self.owner = owner  # the client that asked for it: its exit goes there, only it may reap
        self.reported = False
        self.reap_on_exit = False  # its client let it go while it was still on its way out


class Zygote:
    """Serves `herald`, the one client of host mode, whose end of the socket ends the zygote;
    or (`listener`, `lifeline`) every client that connects, until `lifeline` (stdin) ends."""

    def __init__(
        self,
        herald: Optional[socket.socket] = None,
        listener: Optional[socket.socket] = None,
        lifeline: Optional[int] = None,
    ) -> None:
        self.herald = herald
        self.listener = listener
        self.lifeline = lifeline
        self.clients: Dict[int, socket.socket] = {}
        if herald is not None:
            self.clients[herald.fileno()] = herald
        self.broken: Set[socket.socket] = set()  # clients a send failed on: dropped by the loop
        self.children: Dict[int, _Child] = {}
        self.stubs = stubcache.StubCache()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)

    def send(self, client: socket.socket, message: frames.FromZygote) -> None:
        data = wire.encode_op(message)
        if client is self.herald:
            client.send(data)
            return
        # A client that does not read must not stall every other run: never block on it.
        try:
            client.send(data, socket.MSG_DONTWAIT)
        except OSError:
            self.broken.add(client)

    def serve(self) -> None:
        if self.herald is not None:
            self.send(self.herald, {"op": frames.READY, "pid": os.getpid()})
        while True:
            watched = [self.wake_r, *self.clients]
            if self.listener is not None:
                watched.append(self.listener.fileno())
            if self.lifeline is not None:
                watched.append(self.lifeline)
            try:
                readable, _, _ = select.select(watched, [], [])
            except InterruptedError:
                continue
            if self.wake_r in readable:
                try:
                    while os.read(self.wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                self.report_exits()
            if self.lifeline is not None and self.lifeline in readable and not self.lifeline_holds():
                return
            if self.listener is not None and self.listener.fileno() in readable:
                self.accept()
            for fd in readable:
                client = self.clients.get(fd)
                if client is not None and not self.handle_request(client):
                    if client is self.herald:  # Herald went away: leave; children in use are Herald's to kill
                        return
                    self.broken.add(client)
            for client in list(self.broken):
                self.drop(client)

    def lifeline_holds(self) -> bool:
        assert self.lifeline is not None
        try:
            said = os.read(self.lifeline, 512)
            return bool(said) and LEAVE_BYTE not in said
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False

    def accept(self) -> None:
        assert self.listener is not None
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        if not _same_user(client):
            client.close()
            return
        self.clients[client.fileno()] = client

    def drop(self, client: socket.socket) -> None:
        """A client left (or stopped reading): its children's runs are over, kill and reap them."""
        self.broken.discard(client)
        self.clients.pop(client.fileno(), None)
        for pid, child in list(self.children.items()):
            if child.owner is client:
                if not child.reported:  # also what left its process group: no one else will
                    signal_pids(descendants(pid), signal.SIGKILL)
                self.reap(pid, client)
        client.close()

    def handle_request(self, client: socket.socket) -> bool:
        fds = array.array("i")
        try:
            data, ancillary, _, _ = client.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(FDS_PER_FORK * fds.itemsize))
        except InterruptedError:
            return True
        except OSError:
            return False
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
        if not data:
            return False
        try:
            message = wire.to_zygote(data)
            if message["op"] == frames.FORK and len(fds) == FDS_PER_FORK:
                self.fork(client, message["sandbox_dir"], list(fds))
            elif message["op"] == frames.REAP:
                self.reap(message["pid"], client, block=False)
            else:
                self.send(client, {"op": frames.ERROR, "message": "bad request: a fork needs %d fds" % FDS_PER_FORK})
        except wire.FrameError as exc:
            self.send(client, {"op": frames.ERROR, "message": "bad request: %s" % (exc,)})
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        return True

    def fork(self, client: socket.socket, sandbox_dir: str, fds: "List[int]") -> None:
        stubs = self.stubs.get(sandbox_dir)
        # Out of the collector's reach, in here and in the child: a collection writes to every
        # object it walks, which would copy shared pages into each waiting child (~60 KB each).
        # What was made since the last fork is collected first (microseconds: the rest is frozen),
        # so no garbage cycle is frozen with it.
        gc.collect()
        gc.freeze()
        try:
            pid = os.fork()
        except OSError as exc:
            self.send(client, {"op": frames.ERROR, "message": "fork failed: %s" % exc})
            return
        if pid == 0:
            self.become_child(sandbox_dir, fds, stubs)  # never returns
        self.children[pid] = _Child(client)
        self.send(client, {"op": frames.FORKED, "pid": pid})

    def become_child(self, sandbox_dir: str, fds: "List[int]", stubs: Optional[ModuleType]) -> None:
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setsid()
            stdout, stderr, ctl_read, ctl_write = fds
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)  # in-backend, 0-2 were the zygote's exec channel: replaced here
            os.dup2(stdout, 1)
            os.dup2(stderr, 2)
            ours = [devnull, stdout, stderr, self.wake_r, self.wake_w, *self.clients]
            if self.listener is not None:
                ours.append(self.listener.fileno())
            if self.lifeline is not None and self.lifeline > 2:
                ours.append(self.lifeline)
            for fd in ours:
                os.close(fd)
            os.set_inheritable(ctl_read, False)
            os.set_inheritable(ctl_write, False)
            os.chdir(sandbox_dir)
            sys.path.insert(0, sandbox_dir)
            if stubs is not None:
                sys.modules[stubcache.MODULE] = stubs
            from .bootstrap import serve  # (`random` needs no re-seeding: os.fork does it)

            serve(ctl_read, ctl_write)
        except BaseException as exc:
            try:
                os.write(2, ("sandbox child failed to start: %r\n" % (exc,)).encode("utf-8", "replace"))
            finally:
                os._exit(70)
        os._exit(70)

    def report_exits(self) -> None:
        for pid, child in list(self.children.items()):
            if child.reported:
                continue
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                del self.children[pid]
                continue
            if info is None:
                continue
            if child.reap_on_exit:
                self.reap(pid, child.owner)
                continue
            status = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            child.reported = True
            self.send(child.owner, {"op": frames.EXIT, "pid": pid, "status": status})
        self.kill_strays()

    def kill_strays(self) -> None:
        """Kill and reap what finished runs left behind: we are their subreaper, and a run's own
        process (also a subreaper) hands its orphans up only when it exits, so any child we did
        not fork belongs to a run that is over."""
        strays = [pid for pid in own_children() if pid not in self.children]
        if not strays:
            return
        for _ in range(3):  # the tree may still fork while we look; kill it again
            signal_pids(descendants(*strays) + strays, signal.SIGKILL)
        for pid in strays:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

    def reap(self, pid: int, client: socket.socket, block: bool = True) -> None:
        child = self.children.get(pid)
        if child is None or child.owner is not client:  # not this client's to reap
            return
        if not child.reported:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            # A client lets a run go as soon as its script says it is leaving (host/child.py):
            # the process may still be on its way out. Reap it when it is gone (report_exits),
            # and serve the next fork meanwhile.
            if os.waitpid(pid, 0 if block or child.reported else os.WNOHANG) == (0, 0):
                child.reap_on_exit = True
                return
        except ChildProcessError:
            pass
        del self.children[pid]

    def stop(self) -> None:
        """Leaving while listening: every child still here belongs to a run that is over."""
        for client in list(self.clients.values()):
            self.drop(client)


def _same_user(client: socket.socket) -> bool:
    # The socket sits in a 0700 directory already; where the kernel tells the peer's uid, check
    # it too: a fork of this process runs whatever its control pipe is handed.
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    try:
        creds = client.getsockopt(socket.SOL_SOCKET, getattr(socket, "SO_PEERCRED"), 12)  # noqa: B009
    except OSError:
        return False
    return int.from_bytes(creds[4:8], sys.byteorder) == os.getuid()


def _preimport(host: bool = False) -> None:
    for name in PREIMPORTS:
        try:
            __import__(name)
        except ImportError:
            pass
    # What every child runs: load it once, here; in host mode, what a child's own answers run too.
    for name in ("bootstrap", "client", "helpers", *(("selfserve",) if host else ())):
        importlib.import_module("." + name, __package__)
    if host:
        from .selfserve import warm_up

        warm_up()
    from .bootstrap import ready_for_scripts

    ready_for_scripts()  # for every fork, once (nothing past this imports Herald's package)


def _kill_tree_and_exit(signum: int, frame: Any) -> None:
    signal_pids(descendants(os.getpid()), signal.SIGKILL)
    os._exit(128 + signum)


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=int(sys.argv[2]))
    from ..confine.inprocess import confine_from_environ

    confine_from_environ()  # before anything is imported: every fork inherits the domain
    become_subreaper()
    # Herald's zygote dies with Herald, and takes every run below it along (their daemons too,
    # which a run's own death signal would leave re-parented here, then to init).
    signal.signal(signal.SIGTERM, _kill_tree_and_exit)
    die_with_parent(signal.SIGTERM)
    set_dumpable(False)  # a script (same user, same namespace) cannot trace us and taint later forks
    _preimport(host=True)
    Zygote(herald=sock).serve()
