"""Local process-tree helpers: find every descendant of a process and signal them all.

A command can start grandchildren that leave its process group (`setsid`, daemons), so killing
the group alone is not enough; we also walk the parent links in /proc and signal each process.
"""

from __future__ import annotations

import os
import signal
import time


def descendants(*pids: int) -> list[int]:
    """All live descendants of the given processes, children before grandchildren."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # The command name may hold spaces or parentheses: fields resume after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    frontier = list(pids)
    while frontier:
        nxt: list[int] = []
        for parent in frontier:
            for child in children.get(parent, []):
                found.append(child)
                nxt.append(child)
        frontier = nxt
    return found


def signal_pids(pids: set[int], sig: int) -> None:
    for target in pids:
        try:
            if os.getpgid(target) == target:  # a group leader: take its whole group with it
                os.killpg(target, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.kill(target, sig)
        except (ProcessLookupError, PermissionError):
            pass


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    end = stat.rfind(b")")
    return stat[end + 2 : end + 3] not in (b"Z", b"X")


def terminate_tree(pid: int, *, grace: float, include_root: bool = True) -> None:
    """SIGTERM `pid` (optionally) and all its descendants, wait up to `grace`, SIGKILL the rest.

    The set of targets is taken before the first signal, because processes whose parent dies
    are re-parented to init and no longer show up as descendants. The root is stopped while
    that happens: a shell running `sleep 100; touch x` must not start `touch` in the moment
    between its child's death and its own signal (it resumes only to die of its SIGTERM).
    """
    if include_root:
        signal_pids({pid}, signal.SIGSTOP)
    known = set(descendants(pid))
    if include_root:
        known.add(pid)
    signal_pids(known, signal.SIGTERM)
    if include_root:
        signal_pids({pid}, signal.SIGCONT)
    deadline = time.monotonic() + grace
    while True:
        known |= set(descendants(pid, *known))
        remaining = {p for p in known if alive(p)}
        if not remaining:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    signal_pids(remaining, signal.SIGKILL)
