"""The fork server: a pre-imported interpreter that forks a fresh sandbox child per request.
Stdlib only, Python >= 3.8.

Started by Herald (forkserver.py) as `python -I -B -c <loader> ZYGOTE_DIR SOCKET_FD`, with a
scrubbed environment, in its own session, with nothing on stdin/stdout/stderr. The socket is a
SOCK_SEQPACKET pair end; each message is one JSON object:

    Herald -> here   {"op": "fork", "sandbox_dir": d} + fds [stdout, stderr, ctl_read, ctl_write]
    here -> Herald   {"op": "forked", "pid": n}  or  {"op": "error", "message": "..."}
    here -> Herald   {"op": "exit", "pid": n, "status": s}   s as Popen.returncode (-N: signal N)
    Herald -> here   {"op": "reap", "pid": n}                 Herald is done with that pid
    here -> Herald   {"op": "ready"}                          once, after the pre-imports

Why: starting an interpreter costs ~35 ms; a fork of this one, which has already imported the
stdlib modules scripts and the runtime use, costs well under one. Each child is a new process
(new session and process group, fresh random seed, its own `hermes_tools` imported after the
fork from the Runtime's sandbox directory), so nothing leaks between runs. This process stays
single-threaded: forking a threaded process is unsafe.

An exited child is reported at once but reaped only on "reap": until then its pid stays a
zombie, so Herald's pidfd and its kill of the process group can never hit a reused pid.
"""

from __future__ import annotations

import array
import importlib
import json
import os
import select
import signal
import socket
import sys
from typing import Any, Dict, List

from . import frames

PREIMPORTS = (
    "json", "socket", "threading", "struct", "traceback", "linecache", "builtins", "typing", "re",
    "shlex", "time", "random", "subprocess", "pathlib", "collections", "itertools", "functools",
    "datetime", "hashlib", "base64", "textwrap", "urllib.parse", "io", "math", "string", "atexit",
)
MAX_MESSAGE = 65536
FDS_PER_FORK = 4


class Zygote:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.children: Dict[int, bool] = {}  # pid -> its exit reported yet?
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)

    def send(self, message: Dict[str, Any]) -> None:
        self.sock.send(json.dumps(message).encode("utf-8"))

    def serve(self) -> None:
        self.send({"op": frames.READY})
        while True:
            try:
                readable, _, _ = select.select([self.sock.fileno(), self.wake_r], [], [])
            except InterruptedError:
                continue
            if self.wake_r in readable:
                try:
                    while os.read(self.wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                self.report_exits()
            if self.sock.fileno() in readable and not self.handle_request():
                return

    def handle_request(self) -> bool:
        fds = array.array("i")
        try:
            data, ancillary, _, _ = self.sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(FDS_PER_FORK * fds.itemsize))
        except InterruptedError:
            return True
        except OSError:
            return False
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
        if not data:  # Herald went away: leave; children in use are Herald's to kill
            return False
        try:
            message = json.loads(data.decode("utf-8"))
            op = message.get("op")
            if op == frames.FORK and len(fds) == FDS_PER_FORK:
                self.fork(str(message["sandbox_dir"]), list(fds))
            elif op == frames.REAP:
                self.reap(int(message["pid"]))
            else:
                self.send({"op": frames.ERROR, "message": "bad request %r" % (op,)})
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        return True

    def fork(self, sandbox_dir: str, fds: "List[int]") -> None:
        try:
            pid = os.fork()
        except OSError as exc:
            self.send({"op": frames.ERROR, "message": "fork failed: %s" % exc})
            return
        if pid == 0:
            self.become_child(sandbox_dir, fds)  # never returns
        self.children[pid] = False
        self.send({"op": frames.FORKED, "pid": pid})

    def become_child(self, sandbox_dir: str, fds: "List[int]") -> None:
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setsid()
            stdout, stderr, ctl_read, ctl_write = fds
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(stdout, 1)
            os.dup2(stderr, 2)
            for fd in (devnull, stdout, stderr, self.wake_r, self.wake_w, self.sock.fileno()):
                os.close(fd)
            os.set_inheritable(ctl_read, False)
            os.set_inheritable(ctl_write, False)
            import random

            random.seed()  # the zygote's state is shared by every fork: re-seed per child
            os.chdir(sandbox_dir)
            sys.path.insert(0, sandbox_dir)
            from .bootstrap import serve

            serve(ctl_read, ctl_write)
        except BaseException as exc:
            try:
                os.write(2, ("sandbox child failed to start: %r\n" % (exc,)).encode("utf-8", "replace"))
            finally:
                os._exit(70)
        os._exit(70)

    def report_exits(self) -> None:
        for pid, reported in list(self.children.items()):
            if reported:
                continue
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                del self.children[pid]
                continue
            if info is None:
                continue
            status = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            self.children[pid] = True
            self.send({"op": frames.EXIT, "pid": pid, "status": status})

    def reap(self, pid: int) -> None:
        if pid not in self.children:
            return
        if not self.children[pid]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        del self.children[pid]


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=int(sys.argv[2]))
    for name in PREIMPORTS:
        try:
            __import__(name)
        except ImportError:
            pass
    for name in ("bootstrap", "client", "helpers"):  # what every child runs: load it once, here
        importlib.import_module("." + name, __package__)

    Zygote(sock).serve()
