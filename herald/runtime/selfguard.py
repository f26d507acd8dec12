"""Herald's process guards itself, and kills what scripts left re-parented to it.

- Not dumpable (PR_SET_DUMPABLE 0): processes of the same user, a script's included, cannot
  read our /proc/PID/environ or mem (API keys) or ptrace us.
- A child subreaper: an orphan of anything below us (a daemon whose run's process was killed)
  re-parents to us instead of init, so it can still be found.
- `kill_strays()`: every process Herald starts in a session of its own (shells, zygotes,
  sandbox children, workers) is started through `spawner.popen`, which records it here. A child
  of ours in another session than ours that is not recorded can only be such an orphan (a
  process cannot join our session), so it is killed with its descendants and reaped. Recorded
  processes of other Runtimes in this process are never touched; the record is taken under the
  same lock as the spawn, so a child being started is never mistaken for an orphan.
"""

from __future__ import annotations

import os
import signal
import threading

from .._sandbox.procs import become_subreaper, descendants, own_children, set_dumpable, signal_pids
from .owned import start_time, sweep_dead_owners

lock = threading.Lock()  # held around a spawn and its record, and around a sweep
_ours: set[tuple[int, int | None]] = set()  # (pid, start time) of the processes Herald started
_guarded = False


def guard_process() -> None:
    """Called when a Runtime is made: guard this process (once) and remove dead Herald
    processes' temporary directories."""
    global _guarded
    with lock:
        if not _guarded:
            set_dumpable(False)
            become_subreaper()
            _guarded = True
    sweep_dead_owners()


def record(pid: int) -> None:
    """Note a child Herald started itself (call with `lock` held, right after the spawn)."""
    _ours.add((pid, start_time(pid)))


def kill_strays() -> list[int]:
    """Kill and reap our children that Herald did not start (see above); returns their pids."""
    with lock:
        session = os.getsid(0)
        strays: list[int] = []
        for pid in own_children():
            key = (pid, start_time(pid))
            if key in _ours:
                continue
            try:
                if os.getsid(pid) == session:  # started by a library of ours, not an orphan
                    continue
            except OSError:  # already a zombie: reap it below
                pass
            strays.append(pid)
        _ours.intersection_update({(pid, start_time(pid)) for pid, _ in _ours})  # forget the dead
    if strays:
        signal_pids([*strays, *descendants(*strays)], signal.SIGKILL)
        for pid in strays:  # orphans are ours to reap now
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return strays
