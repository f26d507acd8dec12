"""Herald's process guards itself.

- Not dumpable (PR_SET_DUMPABLE 0): processes of the same user, a script's included, cannot
  read our /proc/PID/environ or mem (API keys) or ptrace us.
- Temporary directories of Herald processes that are gone are removed (owned.py).

Herald does not make its own process a child subreaper: it is a library too, and would adopt
(and have to kill or reap) the orphans of the application that embeds it. Orphans of a run are
contained below it instead: the run's process and the zygote are subreapers (_sandbox/procs.py),
an isolated sandbox dies with its PID namespace, and the local shell has its own guard.
"""

from __future__ import annotations

import threading

from .._sandbox.procs import set_dumpable
from .owned import sweep_dead_owners

lock = threading.Lock()  # held around a sweep
_guarded = False


def guard_process() -> None:
    """Called when a Runtime is made: guard this process (once) and remove dead Herald
    processes' temporary directories."""
    global _guarded
    with lock:
        if not _guarded:
            set_dumpable(False)
            _guarded = True
    sweep_dead_owners()
