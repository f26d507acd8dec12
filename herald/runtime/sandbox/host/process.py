"""How a host sandbox child exists: spawned as a fresh interpreter (ours to wait for), or forked
by the fork server (which reaps it and reports its status); and the pipes it is made with."""

from __future__ import annotations

import os
import subprocess

from .zygote import ForkServer


class Spawned:
    """A child started as a fresh interpreter: ours to wait for."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pid = proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def exited(self) -> bool:
        """Exited, without reaping it (its pid, the group's id, stays reserved)."""
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def wait(self, timeout: float | None) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def release(self) -> None:
        self.proc.wait()


class Forked:
    """A child forked by the fork server: it reaps the child and reports its status."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid

    def poll(self) -> int | None:
        return self.server.status(self.pid)

    def exited(self) -> bool:
        return self.server.status(self.pid) is not None

    def wait(self, timeout: float | None) -> int | None:
        return self.server.wait(self.pid, timeout)

    def release(self) -> None:
        self.server.release(self.pid)


def child_pipes() -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """The child's pipes: our ends (stdout, stderr, control write, control read) and the child's
    (stdout, stderr, control read, control write)."""
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    return (stdout_r, stderr_r, to_child_w, from_child_r), (stdout_w, stderr_w, to_child_r, from_child_w)


def close_fds(fds: tuple[int, ...]) -> None:
    for fd in fds:
        os.close(fd)
