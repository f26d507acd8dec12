"""Start Herald's child processes from one long-lived thread.

A child that must die with Herald (bwrap --die-with-parent, PR_SET_PDEATHSIG) dies when the
*thread* that started it exits, not the process: warm children and zygotes are started from
short-lived background threads, which would take their children with them. Every such process is
therefore started here, on a thread that lives as long as Herald.
"""

from __future__ import annotations

import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def popen(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """subprocess.Popen(argv, **kwargs), started on the spawner thread."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="herald-spawner")
        pool = _pool

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, **kwargs)

    return pool.submit(start).result()
