"""Process trees: find every descendant of a process, signal them all, stop a whole tree.

A command can start grandchildren that leave its process group (`setsid`, daemons), so killing
the group alone is not enough; we also walk the parent links in /proc and signal each process.
Without /proc (macOS) no descendants are found, and only the processes named and the groups
they lead are signalled.

The one implementation for every side: Herald stops sandbox children and local shell commands
with it, the sandbox child kills what its script left behind, and the supervisor of in-backend
execution stops the script's tree inside the backend. Part of the sandbox package (see
__init__.py for its rules: stdlib only, Python >= 3.8).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Callable, Dict, Iterable, List, Optional

from .owners import stat_fields


def children() -> Dict[int, List[int]]:
    """Every process's children (zombies too), by parent pid; empty without /proc."""
    found: Dict[int, List[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = stat_fields(int(entry))
        if fields is not None and len(fields) > 1:
            found.setdefault(int(fields[1]), []).append(int(entry))
    return found


def descendants(*pids: int) -> List[int]:
    """Every process below the given ones (zombies too), children before grandchildren."""
    tree = children()
    found: List[int] = []
    frontier = list(pids)
    while frontier:
        frontier = [child for parent in frontier for child in tree.get(parent, [])]
        found.extend(frontier)
    return found


PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


_prctl_call: Optional[Callable[..., int]] = None  # libc's prctl, found once (a zygote's forks inherit it)


def _prctl(option: int, value: int) -> bool:
    global _prctl_call
    if not sys.platform.startswith("linux"):
        return False
    try:
        if _prctl_call is None:
            import ctypes

            _prctl_call = ctypes.CDLL(None, use_errno=True).prctl
        return bool(_prctl_call(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def set_dumpable(dumpable: bool) -> bool:
    """PR_SET_DUMPABLE: when off, processes of the same user cannot ptrace us or read our
    /proc/<pid>/environ, mem or fd (Linux; False elsewhere). Herald turns it off for itself and
    the zygote; a script's own process inherits it from the zygote."""
    return _prctl(PR_SET_DUMPABLE, 1 if dumpable else 0)


def become_subreaper() -> bool:
    """Make orphans of our descendants re-parent to us instead of init (Linux; False elsewhere).

    A run's process is one: a double-forked or setsid daemon the script starts stays below it,
    where killing the run's tree finds it. The zygote is one too: what a finished run's process
    left behind lands there, and the zygote kills it (child/zygote.py)."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """PR_SET_PDEATHSIG: the kernel sends us `sig` when our parent (the thread that started us)
    dies, SIGKILL included, so a sandbox process never outlives Herald or its zygote (Linux;
    False elsewhere). A process whose tree must go too asks for SIGTERM and kills it then."""
    return _prctl(PR_SET_PDEATHSIG, sig)


def own_children() -> List[int]:
    """Our children as the kernel lists them (orphans re-parented to us included)."""
    return children_of(os.getpid())


def children_of(pid: int) -> List[int]:
    """`pid`'s children from /proc/PID/task/*/children (no scan of all of /proc); [] if gone."""
    found: List[int] = []
    try:
        for task in os.listdir("/proc/%d/task" % pid):
            # os.open/read: three system calls, not open()'s six and a text wrapper (the local
            # backend asks after every command).
            fd = os.open("/proc/%d/task/%s/children" % (pid, task), os.O_RDONLY | os.O_CLOEXEC)
            try:
                listed = b""
                while True:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    listed += chunk
            finally:
                os.close(fd)
            found.extend(int(child) for child in listed.split())
    except OSError:
        pass
    return found


def host_pid(root: int, ns_pid: int) -> Optional[int]:
    """Our pid of the process below `root` whose innermost pid (in its own PID namespace, as a
    bwrap-confined zygote names its forks) is `ns_pid`; None if there is none."""
    frontier = [root]
    while frontier:
        below: List[int] = []
        for pid in frontier:
            below.extend(children_of(pid))
        for pid in below:
            try:
                with open("/proc/%d/status" % pid) as f:
                    for line in f:
                        if line.startswith("NSpid:"):
                            ids = line.split()[1:]
                            if len(ids) > 1 and int(ids[-1]) == ns_pid:
                                return pid
                            break
            except OSError:
                continue
        frontier = below
    return None


def signal_pids(pids: Iterable[int], sig: int) -> None:
    """Signal each pid, and the whole group of any that leads one; gone ones are skipped."""
    for target in pids:
        try:
            if os.getpgid(target) == target:  # a group leader: take its whole group with it
                os.killpg(target, sig)
        except OSError:
            pass
        try:
            os.kill(target, sig)
        except OSError:
            pass


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone)."""
    fields = stat_fields(pid)
    return fields is not None and fields[:1] not in ([b"Z"], [b"X"])


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


class KillClock:
    """The one stop sequence for a running script, wherever its loop runs (Herald's host child,
    Herald's side of an in-backend run, the supervisor inside the backend): at the deadline, or
    at once on `stop()`, run `terminate` (SIGTERM the tree, or ask the far side to); `grace`
    seconds later run `kill` (SIGKILL, or cut the link). The owner's loop calls `tick()` whenever
    it wakes and sleeps at most `wait()` seconds, so no step is late by more than one poll.
    """

    def __init__(
        self,
        deadline: Optional[float],
        grace: float,
        terminate: Callable[[], None],
        kill: Callable[[], None],
    ) -> None:
        self.deadline = deadline  # time.monotonic() at which the script is stopped; None: never
        self.grace = max(0.0, grace)
        self.reason: Optional[str] = None  # "timeout" or the reason given to stop(), once stopping
        self.killed = False
        self._terminate = terminate
        self._kill = kill
        self._kill_at: Optional[float] = None

    def stop(self, reason: str, now: Optional[float] = None) -> None:
        """Start the sequence now (an interrupt); a sequence under way is left as it is."""
        if self.reason is not None:
            return
        now = time.monotonic() if now is None else now
        self.reason = reason
        self._kill_at = now + self.grace
        self._terminate()

    def tick(self, now: Optional[float] = None) -> bool:
        """Run the steps that are due; True once the kill step has run."""
        now = time.monotonic() if now is None else now
        if self.reason is None and self.deadline is not None and now >= self.deadline:
            self.stop("timeout", now)
        if self._kill_at is not None and now >= self._kill_at:
            self._kill_at = None
            self.killed = True
            self._kill()
        return self.killed

    def wait(self, now: Optional[float] = None) -> Optional[float]:
        """Seconds until the next step is due (0 if overdue); None if none is scheduled."""
        now = time.monotonic() if now is None else now
        due = self._kill_at if self.reason is not None else self.deadline
        return None if due is None else max(0.0, due - now)
