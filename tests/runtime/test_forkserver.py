"""The fork server: each run is a fresh process forked from a shared pre-imported interpreter;
nothing leaks between runs; its death costs nothing but speed; its children die like any other."""

from __future__ import annotations

import gc
import os
import signal
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from herald import Runtime
from herald._sandbox.child.stubcache import StubCache
from herald._sandbox.procs.owners import stat_fields
from herald._sandbox.procs.trees import alive, children_of
from herald.runtime.sandbox.host.child import ChildProcess
from herald.runtime.sandbox.host.zygote import ForkServerError
from herald.runtime.sandbox.sandboxdir import write_runtime_package

from ._helpers import IDENTITY, host_pid, run_ok, wait_for


def identity(runtime: Runtime) -> tuple[int, int, int]:
    """The script's pid and session id as it saw them (under isolation: in its PID namespace),
    and its parent (the zygote, which outlives the run) as this machine sees it."""
    pid, ppid, sid, pidns = run_ok(runtime, IDENTITY).output.split()
    parent = host_pid(int(ppid), pidns)
    assert parent is not None, "the script's parent is gone"
    return int(pid), parent, int(sid)


def test_runs_are_forked_fresh_processes_in_their_own_session(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime()
    first, second = identity(runtime), identity(runtime)
    assert first[0] != second[0]
    assert first[1] == second[1] != os.getpid(), "children come from the zygote, not from Herald"
    assert b"zygote" in Path(f"/proc/{first[1]}/cmdline").read_bytes()
    assert first[2] == first[0] and second[2] == second[0], "each child leads its own session"


def test_no_state_leaks_between_runs(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime()
    code = (
        "import random, json, sys\n"
        "print(random.random(), getattr(json, 'leak', None), 'leaked_module' in sys.modules)\n"
        "json.leak = 1\nsys.modules['leaked_module'] = json\n"
    )
    first = run_ok(runtime, code).output.split()
    second = run_ok(runtime, code).output.split()
    assert first[1:] == second[1:] == ["None", "False"]
    assert first[0] != second[0], "the random seed must differ per run"


def test_runtimes_with_the_same_interpreter_share_one_zygote(make_runtime: Callable[..., Runtime]) -> None:
    one, two = make_runtime(), make_runtime()
    assert identity(one)[1] == identity(two)[1]


def test_zygote_death_falls_back_and_recovers(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime()
    zygote = identity(runtime)[1]
    os.kill(zygote, signal.SIGKILL)
    assert wait_for(lambda: not alive(zygote))
    results = [run_ok(runtime, "print('still works')") for _ in range(3)]
    assert all(r.output == "still works\n" for r in results)
    assert identity(runtime)[1] not in (zygote,)


def test_timeout_kills_the_forked_tree(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime()
    runtime.wait_warm()  # the 2 s are the script's, not an interpreter's start-up
    result = runtime.execute(
        "import os, subprocess, time\n"
        "p = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "print(p.pid, os.readlink('/proc/self/ns/pid'), flush=True)\n"
        "time.sleep(300)\n",
        timeout=2,
    )
    assert result.status == "timeout"
    ns_pid, pidns = result.output.split()
    sleeper = host_pid(int(ns_pid), pidns)
    assert sleeper is None or wait_for(lambda: not alive(sleeper)), "a process the script started outlived the timeout"


def test_closing_the_last_runtime_stops_the_zygote(make_runtime: Callable[..., Runtime], settings: Any) -> None:
    runtime = Runtime(settings=settings, transcript=False)
    try:
        zygote = identity(runtime)[1]
    finally:
        runtime.close()
    assert wait_for(lambda: not alive(zygote))


def test_fork_server_off_spawns_interpreters(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime(overrides={"sandbox.fork_server": False})
    result = run_ok(runtime, IDENTITY)
    ppid = int(result.output.split()[1])
    # Herald starts the interpreter itself: isolated, bwrap's init (pid 1 of a fresh namespace).
    assert ppid == (1 if result.isolation.startswith("bwrap") else os.getpid())


class _ZygoteDyingMidRequest:
    """Stands in for a zygote that forks the requested child and dies before it can answer: the
    orphan keeps the request's pipes and, like a bootstrap, reads the run's frames from them."""

    def __init__(self) -> None:
        self.report_r, self.report_w = os.pipe()

    def fork(self, sandbox_dir: str, fds: tuple[int, int, int, int]) -> int:
        if os.fork() == 0:
            try:
                keep = (fds[2], self.report_w)  # like a real zygote: none of Herald's ends
                os.closerange(3, min(keep))
                os.closerange(min(keep) + 1, max(keep))
                os.closerange(max(keep) + 1, 4096)
                data = os.read(fds[2], 65536)
                os.write(self.report_w, b"read: " + data[:40] if data else b"EOF")
            finally:
                os._exit(0)
        os.close(self.report_w)
        raise ForkServerError("the fork server is gone (it died after forking)")


def test_a_child_spawned_after_a_failed_fork_shares_no_pipe_with_the_orphan(tmp_path: Path) -> None:
    write_runtime_package(tmp_path)  # the spawned child runs and reads its pipe (else it may be gone before the send)
    zygote = _ZygoteDyingMidRequest()
    child = ChildProcess(sys.executable, str(tmp_path), {"PATH": os.defpath}, forkserver=zygote)  # type: ignore[arg-type]  # a fake fork server
    try:
        assert not child.forked
        child.send({"type": "code", "code": "print('for the spawned child only')"})
        with os.fdopen(zygote.report_r, "rb") as report:
            assert report.read() == b"EOF", "the orphan of the failed fork read the run's frames"
    finally:
        child.kill()


def _zombies_below(pid: int) -> list[int]:
    found = []
    for child in children_of(pid):
        fields = stat_fields(child)
        if fields is not None and fields[0] == b"Z":
            found.append(child)
    return found


def test_finished_runs_are_reaped_by_the_zygote(make_runtime: Callable[..., Runtime]) -> None:
    """A run ends when its script says it is leaving, before its process is gone: the zygote
    reaps each such child once it has exited, so none piles up as a zombie."""
    runtime = make_runtime()
    zygote = identity(runtime)[1]
    for _ in range(20):
        run_ok(runtime, "print(1)")
    assert wait_for(lambda: not _zombies_below(zygote)), f"unreaped: {_zombies_below(zygote)}"
    assert wait_for(lambda: len(children_of(zygote)) <= 1), f"more than the warm child left: {children_of(zygote)}"


def test_each_runtime_gets_its_own_stubs_from_a_shared_zygote(make_runtime: Callable[..., Runtime]) -> None:
    """The zygote holds each sandbox directory's hermes_tools (stubcache.py): a Runtime's
    children see its own tools, never those of another Runtime served by the same zygote."""
    reader, shell = make_runtime(tools=["read_file"]), make_runtime(tools=["terminal"])
    code = "import hermes_tools\nprint(hasattr(hermes_tools, 'read_file'), hasattr(hermes_tools, 'terminal'))\n"
    for _ in range(2):
        assert run_ok(reader, code).output == "True False\n"
        assert run_ok(shell, code).output == "False True\n"
    assert identity(reader)[1] == identity(shell)[1]


def test_the_stub_cache_never_runs_a_stub_file_that_changed(tmp_path: Path) -> None:
    """What the zygote imports is what Herald wrote before the Runtime's first child; a file
    rewritten later (by a script that could write there) is left to the child to import."""
    counter = tmp_path / "loads"
    stubs = tmp_path / "hermes_tools.py"
    stubs.write_text(f"open({str(counter)!r}, 'a').write('x')\nVALUE = 1\n")
    cache = StubCache()
    first = cache.get(str(tmp_path))
    assert first is not None and first.VALUE == 1 and cache.get(str(tmp_path)) is first
    stubs.write_text(f"open({str(counter)!r}, 'a').write('x')\nVALUE = 2  # changed\n")
    assert cache.get(str(tmp_path)) is None
    assert counter.read_text() == "x", "a changed stub file must not be run by the zygote"
    assert StubCache().get(str(tmp_path / "nowhere")) is None


def test_the_stub_cache_keeps_a_bounded_number_of_directories(tmp_path: Path) -> None:
    cache = StubCache(limit=2)
    dirs = []
    for name in "abc":
        (tmp_path / name).mkdir()
        (tmp_path / name / "hermes_tools.py").write_text(f"NAME = {name!r}\n")
        dirs.append(str(tmp_path / name))
    modules, names = [], []
    for directory in dirs:
        module = cache.get(directory)
        assert module is not None
        modules.append(module)
        names.append(module.NAME)
    assert names == ["a", "b", "c"]
    assert cache.get(dirs[2]) is modules[2] and cache.get(dirs[1]) is modules[1]
    reloaded = cache.get(dirs[0])
    assert reloaded is not None and reloaded is not modules[0], "the oldest directory was let go"
    assert reloaded.NAME == "a"


def test_a_let_go_stub_module_is_freed_though_the_collector_cannot_reach_it(tmp_path: Path) -> None:
    """The zygote freezes its objects before each fork, so the collector never frees a cycle
    among them: the cache must free what it lets go by itself, or a process that makes many
    Runtimes over its life would grow its zygote by one module for each."""
    cache = StubCache(limit=1)
    for name in "ab":
        (tmp_path / name).mkdir()
        (tmp_path / name / "hermes_tools.py").write_text("def tool():\n    return tool\n")
    first = cache.get(str(tmp_path / "a"))
    assert first is not None
    gone = weakref.ref(first.tool)
    del first
    gc.freeze()
    try:
        assert cache.get(str(tmp_path / "b")) is not None
        assert gone() is None, "the let-go module's function (in a cycle with its globals) is still alive"
    finally:
        gc.unfreeze()
