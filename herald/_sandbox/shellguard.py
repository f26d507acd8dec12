"""The parent of a local persistent shell: it dies with Herald and takes the shell's commands along.

`bash` cannot ask the kernel to die with Herald, and its commands would outlive it anyway: a
foreground command whose shell is killed is re-parented to init. So Herald starts this small
process, which
- gets SIGTERM when Herald dies (PR_SET_PDEATHSIG, SIGKILL included) and then SIGKILLs every
  process below it;
- is a child subreaper: a command that leaves the shell's tree (`setsid -f`, a double fork)
  re-parents here, not to init, where Herald finds and kills it when the command ends
  (LocalBackend) and where it is reaped;
- exits with the shell's status once the shell exits, killing what is left.

Run as `python -I -S -c LAUNCH HERALD_PID SHELL ARGS...` (LAUNCH puts this package on the path).
Part of the sandbox package (see __init__.py: stdlib only, Python >= 3.8).
"""

from __future__ import annotations

import os
import signal
from typing import List

from .procs import become_subreaper, descendants, die_with_parent, signal_pids


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


def main(argv: List[str]) -> None:
    herald = int(argv[0])
    become_subreaper()
    signal.signal(signal.SIGTERM, lambda *_: _kill_all(128 + signal.SIGTERM))
    signal.signal(signal.SIGHUP, lambda *_: _kill_all(128 + signal.SIGHUP))
    die_with_parent(signal.SIGTERM)
    if os.getppid() != herald:  # Herald died before the death signal was armed
        os._exit(1)
    shell = os.fork()
    if shell == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        try:
            os.execvp(argv[1], argv[1:])
        finally:
            os._exit(127)
    while True:  # reap the shell and every orphan that lands here
        try:
            pid, status = os.wait()
        except ChildProcessError:
            _kill_all(0)
        except InterruptedError:
            continue
        if pid == shell:
            _finish(status)


LAUNCH = ("import sys; sys.path.insert(0, sys.argv[1]); from _sandbox.shellguard import main; "
          "main(sys.argv[2:])")
