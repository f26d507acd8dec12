"""A spawned run's keeper, where no PID namespace holds the run. Stdlib only, Python >= 3.8.

Without bwrap's PID namespace and without the fork server's zygote (which is a subreaper), a
process the script forks and leaves behind is re-parented to init when the run's process exits,
out of reach: a script's SIGTERM handler can fork a `setsid` child and exit during the kill
clock's grace, before Herald walks the tree. So a spawned child forks once at start: the parent
stays as this keeper, a child subreaper, and the child runs the script. Orphans land here; when
the script's process ends (or Herald dies), the keeper kills everything still below it, then
exits with the script's status (a signal death is passed on as the same signal).

The keeper ignores SIGTERM, SIGINT and SIGHUP (they are for the script): it goes when the script
has gone, or by SIGKILL from Herald's kill clock, which has by then listed the whole tree.
"""

from __future__ import annotations

import os
import signal
from typing import NoReturn, Optional, Tuple

from .trees import become_subreaper, descendants, die_with_parent, signal_pids

HERALD_GONE = signal.SIGUSR1  # our parent-death signal: Herald went away


def fork_keeper(keep_fds: Tuple[int, ...] = ()) -> None:
    """Fork; return in the child (which runs the script). The parent becomes the keeper and
    never returns. `keep_fds` are the child's: the keeper closes its copies of them."""
    become_subreaper()
    die_with_parent(HERALD_GONE)
    pid = os.fork()
    if pid == 0:
        return
    _keep(pid, keep_fds)


def _keep(script: int, fds: Tuple[int, ...]) -> NoReturn:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(HERALD_GONE, lambda signum, frame: _end(signal.SIGKILL, None))
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the run's output pipes must reach EOF when the script's end
        os.dup2(null, fd)
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            _end(None, 1)
        if pid == script:
            if os.WIFSIGNALED(status):
                _end(os.WTERMSIG(status), None)
            _end(None, os.WEXITSTATUS(status))


def _end(sig: Optional[int], code: Optional[int]) -> NoReturn:
    """Kill and reap everything below us, then leave with `code` or die of `sig`. Each round
    reaps one child and kills again what it finds, so a fork bomb cannot outrun us."""
    me = os.getpid()
    while True:
        left = descendants(me)
        if left:
            signal_pids(left, signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    if sig is not None:
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
            pass
        os.kill(me, sig)
    os._exit(1 if code is None else code)
