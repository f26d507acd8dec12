"""Herald's process guards itself.

- Not dumpable (PR_SET_DUMPABLE 0): processes of the same user, a script's included, cannot
  read our /proc/PID/environ or mem (API keys) or ptrace us.
- Temporary directories of Herald processes that are gone are removed (herald/tempdirs.py).

Herald does not make its own process a child subreaper: it is a library too, and would adopt
(and have to kill or reap) the orphans of the application that embeds it. Orphans of a run are
contained below it instead: the run's process and the zygote are subreapers (_sandbox/procs/trees.py),
an isolated sandbox dies with its PID namespace, and the local shell has its own guard.
"""

from __future__ import annotations

import threading

from .._sandbox.procs.trees import set_dumpable
from ..tempdirs import sweep

_lock = threading.Lock()
_guarded = False


def guard_process() -> None:
    """Called when a Runtime is made; the first call of this process guards it and removes dead
    Herald processes' temporary directories (later Runtimes would only list them again)."""
    global _guarded
    with _lock:
        if _guarded:
            return
        set_dumpable(False)
        _guarded = True
    sweep()
