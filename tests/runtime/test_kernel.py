"""Kernel sessions: one child keeps its globals across runs until a timeout, crash or reset."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from herald import Runtime
from herald._sandbox.procs.trees import descendants
from herald.runtime.sandbox.host.child import ChildProcess

from ._helpers import pids_with_marker, run_ok, wait_for


def kernel_pid(runtime: Runtime, session: str) -> int:
    """The pid of the interpreter that keeps session `session` (a process on this host)."""
    child = runtime._kernels.child(session)
    assert isinstance(child, ChildProcess), child
    return child.pid


def test_state_carries_over(runtime: Runtime) -> None:
    first = run_ok(runtime, "x = 41\nimport json", session="k")
    assert first.session == "k"
    assert first.output == ""
    assert not first.state_lost
    second = run_ok(runtime, "x += 1; print(x)\nprint(json.dumps({'x': x}))", session="k")
    assert second.output == '42\n{"x": 42}\n'
    assert second.session == "k"
    assert not second.state_lost


def test_sessions_are_separate_from_each_other_and_from_oneshot_runs(runtime: Runtime) -> None:
    run_ok(runtime, "who = 'a'", session="a")
    run_ok(runtime, "who = 'b'", session="b")
    assert run_ok(runtime, "print(who)", session="a").output == "a\n"
    assert run_ok(runtime, "print(who)", session="b").output == "b\n"
    assert run_ok(runtime, "print('who' in globals())").output == "False\n"


def test_reset_gives_a_fresh_namespace(runtime: Runtime) -> None:
    run_ok(runtime, "x = 1", session="k")
    result = runtime.execute("print(x)", session="k", reset=True, timeout=30)
    assert result.status == "error"
    assert "NameError" in result.error
    assert result.session == "k"
    assert result.state_lost  # as documented on ExecutionResult: a reset loses the state
    again = run_ok(runtime, "x = 5\nprint(x)", session="k")
    assert again.output == "5\n"
    assert not again.state_lost
    assert not runtime.execute("print(1)", session="new", reset=True, timeout=30).state_lost


def test_errors_keep_the_kernel(runtime: Runtime) -> None:
    run_ok(runtime, "kept = 'still here'", session="k")
    result = runtime.execute("print('before')\nraise ValueError('boom')", session="k", timeout=30)
    assert result.status == "error"
    assert result.output == "before\n"
    assert "ValueError: boom" in result.error
    assert "<cell" in result.error
    assert not result.state_lost
    exited = runtime.execute("import sys\nsys.exit(4)", session="k", timeout=30)
    assert exited.status == "error" and exited.exit_code == 4
    syntax = runtime.execute("def (", session="k", timeout=30)
    assert syntax.status == "error" and "SyntaxError" in syntax.error
    assert run_ok(runtime, "print(kept)", session="k").output == "still here\n"


def test_output_and_stderr_are_per_run(runtime: Runtime) -> None:
    run_ok(runtime, "import sys\nprint('one')\nprint('err one', file=sys.stderr)", session="k")
    result = run_ok(runtime, "print('two', end='')\nsys.stderr.write('err two')", session="k")
    assert result.output == "two"
    assert result.error == "err two"


def test_timeout_kills_the_kernel_and_loses_state(make_runtime: Any) -> None:
    runtime = make_runtime(overrides={"sandbox.kill_grace": 1})
    run_ok(runtime, "x = 1", session="k")
    marker = f"1000.{time.time_ns() % 10**9:09d}"
    result = runtime.execute(
        f"import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\nprint('partial')\ntime.sleep(100)",
        session="k",
        timeout=1,
    )
    assert result.status == "timeout"
    assert result.state_lost
    assert result.output == "partial\n"
    assert "state" in result.error and "lost" in result.error
    assert "Timed out" in result.error
    assert wait_for(lambda: not pids_with_marker(marker))
    fresh = runtime.execute("print(x)", session="k", timeout=30)
    assert fresh.status == "error"
    assert "NameError" in fresh.error
    assert not fresh.state_lost  # the loss was reported once, with the timeout
    assert run_ok(runtime, "x = 2\nprint(x)", session="k").output == "2\n"


def test_interrupt_kills_the_kernel(runtime: Runtime) -> None:
    run_ok(runtime, "x = 1", session="k")
    marker = f"1000.{time.time_ns() % 10**9:09d}"

    def interrupt_once_running() -> None:
        # An interrupt before the cell starts is dropped by design: wait until it runs.
        wait_for(lambda: bool(pids_with_marker(marker)), timeout=60, step=0.05)
        runtime.interrupt()

    watcher = threading.Thread(target=interrupt_once_running, daemon=True)
    watcher.start()
    result = runtime.execute(
        f"import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\ntime.sleep(1000)", session="k", timeout=60
    )
    watcher.join(60)
    # "interrupted", not "timeout": the interrupt, not the 60 s limit, ended the cell.
    assert result.status == "interrupted", result
    assert result.state_lost
    assert "NameError" in runtime.execute("print(x)", session="k", timeout=30).error


def test_kernel_that_exits_hard_reports_lost_state(runtime: Runtime) -> None:
    run_ok(runtime, "x = 1", session="k")
    result = runtime.execute(
        "import os\nprint('bye', flush=True)\nos._exit(9)", session="k", timeout=30
    )
    assert result.status == "error"
    assert result.exit_code == 9
    assert result.state_lost
    assert result.output == "bye\n"
    assert "lost" in result.error
    assert "NameError" in runtime.execute("print(x)", session="k", timeout=30).error


def test_tool_calls_in_a_kernel_with_a_budget_per_run(runtime: Runtime, workspace: Path) -> None:
    (workspace / "data.txt").write_text("kernel data\n")
    run_ok(runtime, "from hermes_tools import read_file, terminal, ToolError", session="k")
    code = """
done = 0
for i in range(3):
    try:
        read_file("data.txt")
        done += 1
    except ToolError as exc:
        last = exc.error_type
print(done)
"""
    for _ in range(2):
        result = run_ok(runtime, code, session="k", max_tool_calls=2)
        assert result.output == "2\n"
        assert result.tool_calls_made == 2
        assert "1 tool call(s) were refused" in result.error
    result = run_ok(runtime, "print(last, terminal('echo in kernel')['output'])", session="k")
    assert result.output == "ToolCallLimit in kernel\n"
    assert result.tool_calls_made == 1


def test_parallel_in_a_kernel(runtime: Runtime, workspace: Path) -> None:
    for i in range(5):
        (workspace / f"k{i}.txt").write_text(f"k{i}\n")
    result = run_ok(
        runtime,
        "from hermes_tools import parallel, read_file\n"
        "pages = parallel([(read_file, f'k{i}.txt') for i in range(5)])\n"
        "print([p['content'].split('|')[1].strip() for p in pages])",
        session="k",
    )
    assert result.output == "['k0', 'k1', 'k2', 'k3', 'k4']\n"
    assert result.tool_calls_made == 5


def test_big_output_in_a_kernel(runtime: Runtime) -> None:
    result = run_ok(runtime, "print('y' * 120_000)", session="k")
    assert result.output_spill_path is not None
    assert Path(result.output_spill_path).read_text() == "y" * 120_000 + "\n"
    assert "output truncated" in result.output
    assert run_ok(runtime, "print('small')", session="k").output == "small\n"


def test_kernels_are_stopped_on_close(make_runtime: Any) -> None:
    runtime = make_runtime()
    before = set(descendants(os.getpid()))  # kernels may be forked by the fork server: any depth
    run_ok(runtime, "x = 1", session="a")
    run_ok(runtime, "x = 1", session="b")
    kernels = {kernel_pid(runtime, name) for name in runtime._kernels.names()}
    assert kernels <= set(descendants(os.getpid())) - before
    runtime.close()
    assert wait_for(lambda: not (set(descendants(os.getpid())) - before))


def test_kernel_killed_between_runs_is_restarted(runtime: Runtime) -> None:
    import os
    import signal

    run_ok(runtime, "x = 1", session="k")
    pid = kernel_pid(runtime, "k")
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: runtime._kernels.child("k").poll() is not None)
    result = runtime.execute("print('x' in globals())", session="k", timeout=30)
    assert result.status == "success"
    assert result.output == "False\n"
    assert result.state_lost
    assert "restarted" in result.error
