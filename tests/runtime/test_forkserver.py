"""The fork server: each run is a fresh process forked from a shared pre-imported interpreter;
nothing leaks between runs; its death costs nothing but speed; its children die like any other."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from herald import Runtime
from herald._sandbox.procs import alive

from ._helpers import run_ok, wait_for

IDENTITY = "import os\nprint(os.getpid(), os.getppid(), os.getsid(0))\n"


def identity(runtime: Runtime) -> tuple[int, int, int]:
    pid, ppid, sid = map(int, run_ok(runtime, IDENTITY).output.split())
    return pid, ppid, sid


def test_runs_are_forked_fresh_processes_in_their_own_session(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime()
    first, second = identity(runtime), identity(runtime)
    assert first[0] != second[0]
    assert first[1] == second[1] != os.getpid(), "children come from the zygote, not from Herald"
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
        "import subprocess, time\n"
        "p = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(300)\n",
        timeout=2,
    )
    assert result.status == "timeout"
    sleeper = int(result.output.split()[0])
    assert wait_for(lambda: not alive(sleeper)), "a process the script started outlived the timeout"


def test_closing_the_last_runtime_stops_the_zygote(make_runtime: Callable[..., Runtime], settings: Any) -> None:
    runtime = Runtime(settings=settings, transcript=False)
    try:
        zygote = identity(runtime)[1]
    finally:
        runtime.close()
    assert wait_for(lambda: not alive(zygote))


def test_fork_server_off_spawns_interpreters(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime(overrides={"sandbox.fork_server": False})
    assert identity(runtime)[1] == os.getpid()
