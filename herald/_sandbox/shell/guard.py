"""The parent of a local persistent shell: it dies with Herald and takes the shell's commands along.

`bash` cannot ask the kernel to die with Herald, and its commands would outlive it anyway: a
foreground command whose shell is killed is re-parented to init. So Herald starts this small
process, which
- gets SIGTERM when Herald dies (PR_SET_PDEATHSIG, SIGKILL included) and then SIGKILLs every
  process below it;
- is a child subreaper: a command that leaves the shell's tree (`setsid -f`, a double fork)
  re-parents here, not to init, where Herald finds and kills it when the command ends
  (LocalBackend) and where it is reaped;
- exits with the shell's status once the shell exits, killing what is left;
- on SIGUSR1 (the shell's `__herald_done` sends it after every command: shell/script.py) kills
  what left the shell's tree during the command, its descendants and their groups, until
  nothing of it is left, then writes one byte to the pipe the shell waits on (so the command's
  record comes back only once its escapes are gone). The shell finds the pipe and this
  process's pid in HERALD_SHELL_GUARD ("PID:FD"). Only processes that re-parented here are
  escapes: a job still below the shell is the shell's to keep or end (a direct call's server).

Run as `python -I -S -c LAUNCH HERALD_PID SHELL ARGS...` (LAUNCH puts this package on the path).
Part of the sandbox package (see __init__.py: stdlib only, Python >= 3.8).
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from typing import List

from ..procs.trees import alive, become_subreaper, children_of, descendants, die_with_parent, signal_pids

GUARD_ENV = "HERALD_SHELL_GUARD"
ACK_FD_FLOOR = 200  # the shell's end of the pipe sits above the fds scripts use (3-9, 10+ for {var})
ESCAPES_SECONDS = 10.0  # a bound on one sweep: a fork bomb must not hold the command's record forever


def _reap_all() -> None:
    """SIGKILL everything below us and reap it all (orphans keep landing here while their
    parents die): a zombie left when we exit would go to Herald, which does not wait for it."""
    while True:
        signal_pids(descendants(os.getpid()), signal.SIGKILL)
        try:
            os.wait()
        except ChildProcessError:
            return
        except InterruptedError:
            pass


def _kill_all(code: int) -> None:
    _reap_all()
    os._exit(code)


def _finish(status: int) -> None:
    """Exit as the shell did (a signal too, so Herald sees the same status), after its tree."""
    _reap_all()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not kill by default
    os._exit(os.WEXITSTATUS(status))


def end_escapes(shell: int) -> None:
    """SIGKILL every process that re-parented here (all our children but `shell`), with its
    descendants and groups, until none is left alive. An escape's children re-parent here only
    once it is dead (a zombie), so the sweep repeats until a look finds nothing alive."""
    deadline = time.monotonic() + ESCAPES_SECONDS
    while True:
        escaped = [pid for pid in children_of(os.getpid()) if pid != shell]
        live = [pid for pid in escaped + descendants(*escaped) if alive(pid)] if escaped else []
        if not live or time.monotonic() > deadline:
            return
        signal_pids(live, signal.SIGKILL)
        time.sleep(0.002)


def _answer_escapes(shell: List[int], ack: int) -> None:
    if shell:
        end_escapes(shell[0])
    try:
        os.write(ack, b".")
    except OSError:
        pass


def main(argv: List[str]) -> None:
    herald = int(argv[0])
    become_subreaper()
    signal.signal(signal.SIGTERM, lambda *_: _kill_all(128 + signal.SIGTERM))
    signal.signal(signal.SIGHUP, lambda *_: _kill_all(128 + signal.SIGHUP))
    die_with_parent(signal.SIGTERM)
    if os.getppid() != herald:  # Herald died before the death signal was armed
        os._exit(1)
    read_end, ack = os.pipe()
    wait_end = fcntl.fcntl(read_end, fcntl.F_DUPFD, ACK_FD_FLOOR)
    os.close(read_end)
    shell_pid: List[int] = []  # set once forked; SIGUSR1 is held back until then
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    signal.signal(signal.SIGUSR1, lambda *_: _answer_escapes(shell_pid, ack))
    shell = os.fork()
    if shell == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        try:
            os.close(ack)
            os.set_inheritable(wait_end, True)
            os.environ[GUARD_ENV] = "%d:%d" % (os.getppid(), wait_end)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
            os.execvp(argv[1], argv[1:])
        finally:
            os._exit(127)
    os.close(wait_end)
    shell_pid.append(shell)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
    while True:  # reap the shell and every orphan that lands here
        try:
            pid, status = os.wait()
        except ChildProcessError:
            _kill_all(0)
        except InterruptedError:
            continue
        if pid == shell:
            _finish(status)


LAUNCH = ("import sys; sys.path.insert(0, sys.argv[1]); from _sandbox.shell.guard import main; "
          "main(sys.argv[2:])")
