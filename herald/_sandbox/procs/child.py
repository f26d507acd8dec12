"""A sandbox child process, however it was made: the one process layer of Herald's host mode
(runtime/sandbox/host/child.py) and of the supervisor of an in-backend run (supervisor/).
Stdlib only, Python >= 3.8.

A child runs child/bootstrap.py in its own session and process group, stdin from /dev/null,
stdout and stderr on pipes, and a control pipe pair for its frames (ChildPipes: the four pipes,
made and closed here). Two ways to get one, the same process either way:

- `fork_child`: a fork server (child/zygote.py, through a ZygoteLink, procs/forking.py) forks
  it, in well under a millisecond where an interpreter's start-up costs ~35 ms. The zygote
  reports the exit and reaps the child only when told (`release`), so its pid, which names its
  process group, cannot be reused while the caller may still signal that group.
- `spawn_child`: a fresh interpreter, ours to wait for; used when there is no zygote or it fails
  in any way (not started, killed, refused): a run never fails because the fork server did.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any, Callable, List, Mapping, Optional, Tuple

from .forking import ForkError, ZygoteLink
from .trees import alive


class ChildPipes:
    """A child's four pipes. Ours: `stdout`, `stderr` and `ctl_in` (its control frames) to read,
    `ctl_out` (frames to it) to write. Theirs (`theirs`): stdout, stderr, control read, control
    write, the order in which a fork request passes them and the bootstrap takes them."""

    def __init__(self) -> None:
        made: List[int] = []
        try:
            for _ in range(4):
                made.extend(os.pipe())
        except OSError:
            _close(made)
            raise
        out_r, out_w, err_r, err_w, to_child_r, to_child_w, from_child_r, from_child_w = made
        self.stdout, self.stderr, self.ctl_in, self.ctl_out = out_r, err_r, from_child_r, to_child_w
        self.theirs: Tuple[int, int, int, int] = (out_w, err_w, to_child_r, from_child_w)
        self.ours_open = self.theirs_open = True

    def close_theirs(self) -> None:
        """Once the child has them (or will never be): only the child may hold its ends."""
        if self.theirs_open:
            self.theirs_open = False
            _close(self.theirs)

    def close_ours(self) -> None:
        if self.ours_open:
            self.ours_open = False
            _close((self.stdout, self.stderr, self.ctl_in, self.ctl_out))


class ChildProc:
    """A started child: its pid and our ends of its pipes (the reading ones non-blocking)."""

    pid = 0

    def __init__(self, pipes: ChildPipes) -> None:
        self.pipes = pipes
        self.stdout, self.stderr, self.ctl_in, self.ctl_out = pipes.stdout, pipes.stderr, pipes.ctl_in, pipes.ctl_out
        for fd in (self.stdout, self.stderr, self.ctl_in):
            os.set_blocking(fd, False)

    @property
    def watch(self) -> Optional[int]:
        """An fd the owner's loop polls and hands to `readable`, if any (the zygote's word)."""
        return None

    def readable(self) -> None:
        """`watch` has something to read."""

    def poll(self) -> Optional[int]:
        """Its exit status once it has exited (as Popen.returncode, -N: signal N), else None."""
        raise NotImplementedError

    def exited(self) -> bool:
        """It has exited; it is not reaped yet, so its pid still names its process group."""
        raise NotImplementedError

    def wait(self, timeout: Optional[float]) -> Optional[int]:
        """Its status once it exits within `timeout` seconds; None if not, or if nobody could tell."""
        raise NotImplementedError

    def release(self) -> None:
        """We are done with its pid: it is reaped (and may be reused)."""
        raise NotImplementedError

    def close(self) -> None:
        """Leaving: our ends of its pipes are closed, and whatever else is ours of it let go."""
        self.pipes.close_ours()

    def discard(self) -> None:
        """It died unused: let it go entirely."""
        self.release()
        self.close()


class Spawned(ChildProc):
    """A child started as a fresh interpreter: ours to wait for."""

    def __init__(self, proc: "subprocess.Popen[bytes]", pipes: ChildPipes) -> None:
        super().__init__(pipes)
        self.proc = proc
        self.pid = proc.pid

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def exited(self) -> bool:
        if self.proc.returncode is not None or not hasattr(os, "waitid"):  # no waitid: macOS
            return self.proc.poll() is not None
        try:  # without reaping it: its pid, the group's id, stays reserved
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def wait(self, timeout: Optional[float]) -> Optional[int]:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def release(self) -> None:
        self.proc.wait()


class Forked(ChildProc):
    """A child forked by a zygote, which reaps it and reports its status over `link`."""

    def __init__(self, link: ZygoteLink, pid: int, ns_pid: int, pipes: ChildPipes) -> None:
        super().__init__(pipes)
        self.link = link
        self.pid = pid  # ours: what we signal and watch
        self.ns_pid = ns_pid  # the zygote's name for it (in its PID namespace, under bwrap)

    @property
    def watch(self) -> Optional[int]:
        return self.link.watch

    def readable(self) -> None:
        self.link.readable()

    def poll(self) -> Optional[int]:
        return self.link.status(self.ns_pid)

    def exited(self) -> bool:
        if self.link.status(self.ns_pid) is not None:
            return True
        # The zygote is gone before it could tell: its orphan is init's now.
        return self.link.gone() and not alive(self.pid)

    def wait(self, timeout: Optional[float]) -> Optional[int]:
        return self.link.wait(self.ns_pid, timeout)

    def release(self) -> None:
        self.link.release(self.ns_pid)

    def close(self) -> None:
        self.link.leave()
        super().close()


Popen = Callable[..., "subprocess.Popen[bytes]"]


def spawn_child(
    command: Callable[[int, int], List[str]], env: Mapping[str, str], cwd: str, popen: Popen = subprocess.Popen,
) -> Spawned:
    """A fresh interpreter running `command(control read fd, control write fd)` in its own
    session, on new pipes; `popen` starts it (Herald's starts it from a thread that lives as long
    as Herald: herald/spawner.py). What `popen` raises is raised, with every pipe closed."""
    pipes = ChildPipes()
    stdout, stderr, ctl_read, ctl_write = pipes.theirs
    try:
        proc = popen(
            command(ctl_read, ctl_write),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            pass_fds=(ctl_read, ctl_write),
            start_new_session=True,
            env=dict(env),
            cwd=cwd,
        )
    except BaseException:
        pipes.close_ours()
        raise
    finally:
        pipes.close_theirs()
    return Spawned(proc, pipes)


def fork_child(link: ZygoteLink, sandbox_dir: str) -> Forked:
    """A child forked through `link` on pipes of its own; ForkError (or what `link` raises) if
    there is none, with every pipe closed. Own pipes per attempt: a zygote that dies mid-request
    may already have forked a child holding them, which must never share a pipe with the child
    spawned in its place."""
    pipes = ChildPipes()
    try:
        ns_pid = link.fork(sandbox_dir, pipes.theirs)
        pid = link.our_pid(ns_pid)
        if pid is None:  # a child we cannot name cannot be contained: let it go
            link.release(ns_pid)
            raise ForkError("the fork server's child %d is not visible from here" % ns_pid)
    except BaseException:
        pipes.close_ours()
        raise
    finally:
        pipes.close_theirs()
    return Forked(link, pid, ns_pid, pipes)


def _close(fds: Any) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
