"""The process layer (herald/_sandbox/procs/child.py, forking.py), the one Herald's host mode and
the backend's supervisor both start sandbox children with: a child holds its own ends of its
pipes and nothing else of ours; a start that fails leaves no descriptor behind; a forked child's
pid stays reserved (a zombie) until its handle lets it go, so a kill of its group cannot reach a
process that reused it."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from herald._sandbox.procs.child import spawn_child
from herald._sandbox.procs.owners import stat_fields
from herald._sandbox.supervisor.scriptproc import fork_script
from herald.runtime.sandbox.host.child import ChildProcess
from herald.runtime.sandbox.host.zygote import ForkServer
from herald.runtime.sandbox.sandboxdir import write_sandbox
from tests.runtime._helpers import wait_for

ROUNDS = 20
# The child reports every descriptor open in it, whether it leads a session, and what its stdin is.
REPORT = (
    "import json, os, sys\n"
    "print(json.dumps({'fds': [int(fd) for fd in os.listdir('/proc/self/fd')], 'ends': sys.argv[1:],\n"
    "                  'leader': os.getsid(0) == os.getpid(), 'stdin': os.path.realpath('/proc/self/fd/0')}))\n"
)


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, True)
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to list a process's descriptors")
def test_a_spawned_child_holds_its_own_ends_and_nothing_else_of_ours(tmp_path: Path) -> None:
    child = spawn_child(lambda r, w: [sys.executable, "-I", "-c", REPORT, str(r), str(w)], {}, str(tmp_path))
    try:
        said = _read_all(child.stdout).decode()
        assert child.wait(60) == 0
    finally:
        child.release()
        child.close()
    report = json.loads(said)
    theirs = {0, 1, 2, *(int(fd) for fd in report["ends"])}
    listed = set(report["fds"])
    # listdir's own descriptor shows in the list too: at most one beyond the five.
    assert theirs <= listed and len(listed - theirs) <= 1, said
    assert report["leader"], "the child must lead a session of its own"
    assert report["stdin"] == "/dev/null", said


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to list a process's descriptors")
def test_a_start_that_fails_leaves_no_descriptor_open(tmp_path: Path) -> None:
    before = _open_fds()
    for _ in range(ROUNDS):
        with pytest.raises(OSError):
            spawn_child(lambda r, w: [str(tmp_path / "no-such-python")], {}, str(tmp_path))
        with pytest.raises(OSError):  # no zygote listens there: the supervisor spawns instead
            fork_script(str(tmp_path / "no-zygote.sock"), str(tmp_path))
    assert _open_fds() == before


def test_a_forked_childs_pid_stays_reserved_until_it_is_released(tmp_path: Path) -> None:
    write_sandbox(tmp_path, [])  # a whole sandbox directory: the child waits for a script, it does not fail
    server = ForkServer(sys.executable, {"PATH": os.defpath})
    try:
        child = ChildProcess(sys.executable, str(tmp_path), {"PATH": os.defpath}, forkserver=server)
        assert child.forked, "the fork server gave no child"
        pid = child.pid
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: child.poll() is not None, timeout=60)
        assert child.poll() == -signal.SIGKILL
        fields = stat_fields(pid)
        assert fields is not None and fields[0] == b"Z", "reaped before its handle let it go"
        child.kill()  # lets it go
        assert wait_for(lambda: stat_fields(pid) is None, timeout=60), "never reaped once let go"
    finally:
        server.close()
