"""Limits end to end: timeouts kill the whole tree, interrupts, the call budget, output caps."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime

from ._helpers import pids_with_marker, run_ok, script, wait_for


def unique_sleep() -> str:
    """A `sleep` duration no other process uses, so its command line identifies our grandchild."""
    return f"1000.{uuid.uuid4().int % 10**9:09d}"


def test_timeout_kills_the_script_and_its_grandchildren(make_runtime: Any) -> None:
    runtime = make_runtime(overrides={"sandbox.kill_grace": 2})
    runtime.wait_warm()  # the 1.5 s are the script's, not an interpreter's start-up
    marker = unique_sleep()
    started = time.monotonic()
    result = runtime.execute(
        script(
            f"""
            import subprocess, time
            child = subprocess.Popen(["sleep", "{marker}"])
            print("started", child.pid, flush=True)
            time.sleep(1000)
            """
        ),
        timeout=1.5,
    )
    elapsed = time.monotonic() - started
    assert result.status == "timeout", result
    assert "Timed out after 1.5 s" in result.error
    assert result.output.startswith("started ")
    assert elapsed < 60, elapsed  # generous (a loaded machine): the point is, not the script's 1000 s
    assert wait_for(lambda: not pids_with_marker(marker)), pids_with_marker(marker)


def test_timeout_kills_grandchildren_in_their_own_session(make_runtime: Any) -> None:
    runtime = make_runtime(overrides={"sandbox.kill_grace": 2})
    runtime.wait_warm()
    marker = unique_sleep()
    result = runtime.execute(
        script(
            f"""
            import subprocess, time
            subprocess.Popen(["sleep", "{marker}"], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1000)
            """
        ),
        timeout=1,
    )
    assert result.status == "timeout"
    assert wait_for(lambda: not pids_with_marker(marker)), pids_with_marker(marker)


def test_timeout_keeps_unflushed_output(runtime: Runtime) -> None:
    runtime.wait_warm()  # the 1 s are the script's, not an interpreter's start-up
    result = runtime.execute(
        script(
            """
            import sys, time
            print("flushed line", flush=True)
            print("buffered line")
            sys.stderr.write("partial stderr")
            time.sleep(1000)
            """
        ),
        timeout=1,
    )
    assert result.status == "timeout"
    assert result.output == "flushed line\nbuffered line\n"
    assert result.error.startswith("partial stderr")
    assert "Timed out" in result.error


def test_timeout_when_the_script_ignores_sigterm(make_runtime: Any) -> None:
    runtime = make_runtime(overrides={"sandbox.kill_grace": 0.5})
    runtime.wait_warm()
    marker = unique_sleep()
    started = time.monotonic()
    result = runtime.execute(
        script(
            f"""
            import signal, subprocess, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            subprocess.Popen(["sleep", "{marker}"], start_new_session=True)
            print("stubborn", flush=True)
            while True:
                time.sleep(0.05)
            """
        ),
        timeout=1,
    )
    assert result.status == "timeout"
    assert result.output == "stubborn\n"
    assert result.exit_code == -9
    # SIGKILL no sooner than the grace period after the timeout; the upper bound is generous (a
    # loaded machine): the point is that a script ignoring SIGTERM still ends.
    assert 1 + 0.5 <= time.monotonic() - started < 60
    assert wait_for(lambda: not pids_with_marker(marker))


def test_runtime_works_after_a_timeout(runtime: Runtime) -> None:
    assert runtime.execute("import time\ntime.sleep(100)\n", timeout=0.5).status == "timeout"
    assert run_ok(runtime, "print('fine')").output == "fine\n"


def test_tool_call_limit(runtime: Runtime, workspace: Path) -> None:
    (workspace / "f.txt").write_text("x\n")
    result = runtime.execute(
        script(
            """
            from hermes_tools import read_file, ToolError
            done, refused = 0, []
            for i in range(6):
                try:
                    read_file("f.txt")
                    done += 1
                except ToolError as exc:
                    refused.append(exc.error_type)
            print(done, refused)
            print("still running")
            """
        ),
        timeout=30,
        max_tool_calls=3,
    )
    assert result.status == "success", result
    assert result.output == "3 ['ToolCallLimit', 'ToolCallLimit', 'ToolCallLimit']\nstill running\n"
    assert result.tool_calls_made == 3
    assert "3 tool call(s) were refused" in result.error
    assert "limit is 3" in result.error


def test_tool_call_limit_message_reaches_the_script(runtime: Runtime) -> None:
    result = run_ok(
        runtime,
        """
        from hermes_tools import terminal, ToolError
        try:
            terminal("echo 1")
        except ToolError as exc:
            print(exc)
        """,
        max_tool_calls=0,
    )
    assert "Tool call limit reached" in result.output
    assert result.tool_calls_made == 0


def test_budget_is_per_run(runtime: Runtime) -> None:
    code = "from hermes_tools import terminal\nfor i in range(2): terminal('true')\nprint('ok')"
    for _ in range(3):
        result = run_ok(runtime, code, max_tool_calls=2)
        assert result.tool_calls_made == 2
        assert "refused" not in result.error


def test_stdout_cap_keeps_head_and_tail_and_spills(runtime: Runtime) -> None:
    result = run_ok(
        runtime,
        """
        for i in range(20000):
            print(f"line {i:05d}")
        """,
    )
    full = "".join(f"line {i:05d}\n" for i in range(20000))
    assert len(full) == 220_000
    limit = 50_000
    head, tail = full[: int(limit * 0.4)], full[-(limit - int(limit * 0.4)) :]
    assert result.output.startswith(head)
    assert result.output.endswith(tail)
    assert "output truncated" in result.output
    assert "220,000 bytes in all" in result.output
    assert len(result.output) < limit + 500
    assert result.output_spill_path is not None
    spill = Path(result.output_spill_path)
    assert spill.exists()
    assert spill.read_text() == full
    assert str(spill) in result.output


def test_output_at_the_limit_is_not_cut(runtime: Runtime) -> None:
    result = run_ok(runtime, "import sys\nsys.stdout.write('x' * 50_000)")
    assert result.output == "x" * 50_000
    assert result.output_spill_path is None


def test_stderr_cap(runtime: Runtime) -> None:
    result = runtime.execute(
        script(
            """
            import sys
            for i in range(3000):
                print(f"warning {i:04d}", file=sys.stderr)
            raise SystemExit(2)
            """
        ),
        timeout=30,
    )
    full = "".join(f"warning {i:04d}\n" for i in range(3000))
    assert result.status == "error"
    assert result.exit_code == 2
    assert result.error.startswith(full[:4000])
    assert result.error.rstrip("\n").endswith(full.rstrip("\n")[-5000:])
    assert "stderr truncated" in result.error
    assert len(result.error) < 10_000 + 500
    assert result.error_spill_path is not None
    assert Path(result.error_spill_path).read_text() == full
    assert result.output_spill_path is None


def test_interrupt(runtime: Runtime) -> None:
    marker = unique_sleep()
    seen: list[int] = []

    def interrupt_once_running() -> None:
        # An interrupt before the run starts is dropped by design: wait until the script runs
        # (its child exists, so it has printed), then interrupt.
        wait_for(lambda: bool(pids_with_marker(marker)), timeout=60, step=0.05)
        seen.extend(pids_with_marker(marker))
        runtime.interrupt()

    watcher = threading.Thread(target=interrupt_once_running, daemon=True)
    watcher.start()
    result = runtime.execute(
        script(
            f"""
            import subprocess, time
            print("waiting", flush=True)
            subprocess.Popen(["sleep", "{marker}"])
            time.sleep(1000)
            """
        ),
        timeout=60,
    )
    watcher.join(timeout=60)
    assert seen, "the script never started its child"
    # "interrupted", not "timeout": the interrupt, not the 60 s limit, ended the script.
    assert result.status == "interrupted", result
    assert "Interrupted" in result.error
    assert result.output == "waiting\n"
    assert wait_for(lambda: not pids_with_marker(marker)), pids_with_marker(marker)
    assert run_ok(runtime, "print('next run')").output == "next run\n"


def test_interrupt_stops_a_terminal_command_the_script_is_waiting_on(make_runtime: Any) -> None:
    # A long timeout everywhere: only the interrupt can end the command.
    runtime = make_runtime(overrides={"sandbox.timeout": 600, "terminal.timeout": 600})
    marker = unique_sleep()
    seen: list[int] = []

    def interrupt_once_running() -> None:
        wait_for(lambda: bool(pids_with_marker(marker)), timeout=60, step=0.05)
        seen.extend(pids_with_marker(marker))
        runtime.interrupt()

    watcher = threading.Thread(target=interrupt_once_running, daemon=True)
    watcher.start()
    result = runtime.execute(
        script(f"""
            from hermes_tools import terminal
            print(terminal("sleep {marker}; echo finished"))
            """),
        timeout=600,
    )
    watcher.join(timeout=60)
    assert result.status == "interrupted", result
    assert seen, "the command never started"
    # The command is killed with the run, not left to hold the shell until its own timeout.
    assert wait_for(lambda: not pids_with_marker(marker), timeout=30), pids_with_marker(marker)
    assert "hello" in run_ok(runtime, "from hermes_tools import terminal\nprint(terminal('echo hello'))").output


def test_interrupt_between_runs_does_not_hit_the_next_run(runtime: Runtime) -> None:
    runtime.interrupt()
    runtime.interrupt()
    result = run_ok(runtime, "import time\ntime.sleep(0.3)\nprint('unaffected')")
    assert result.output == "unaffected\n"


def test_processes_left_behind_are_killed_when_the_script_ends(runtime: Runtime) -> None:
    in_group, own_session = unique_sleep(), unique_sleep()
    result = run_ok(
        runtime,
        f"""
        import subprocess
        subprocess.Popen(["sleep", "{in_group}"])
        subprocess.Popen(["sleep", "{own_session}"], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print("leaving them behind")
        """,
    )
    assert result.output == "leaving them behind\n"
    assert wait_for(lambda: not pids_with_marker(in_group))
    assert wait_for(lambda: not pids_with_marker(own_session)), "escaped the run"


def test_command_in_flight_at_the_timeout_does_not_outlive_the_run(runtime: Runtime) -> None:
    runtime.wait_warm()  # the 1 s are the script's, not an interpreter's start-up
    marker = unique_sleep()
    result = runtime.execute(
        f"from hermes_tools import terminal\nprint(terminal('sleep {marker}'))",
        timeout=1,
    )
    assert result.status == "timeout"
    started = time.monotonic()
    after = run_ok(
        runtime, "from hermes_tools import terminal\nprint(terminal('echo next')['output'])"
    )
    assert after.output == "next\n"
    # Generous (a loaded machine): waiting for the command would take its 1000 s (or the 180 s
    # terminal timeout).
    assert time.monotonic() - started < 60, "the next run waited for the previous run's command"
    assert wait_for(lambda: not pids_with_marker(marker))


def test_close_during_a_run_stops_it(make_runtime: Any) -> None:
    runtime = make_runtime()
    marker = unique_sleep()
    results: list[Any] = []
    code = f"import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\ntime.sleep(1000)"
    worker = threading.Thread(target=lambda: results.append(runtime.execute(code, timeout=60)))
    worker.start()
    # Close once the script observably runs (a close before the run starts refuses the run).
    assert wait_for(lambda: bool(pids_with_marker(marker)), timeout=60, step=0.05), "the script never started"
    runtime.close()
    worker.join(60)
    assert not worker.is_alive()
    # "interrupted", not "timeout": close, not the 60 s limit, ended the script.
    assert [r.status for r in results] == ["interrupted"]
    with pytest.raises(RuntimeError, match="closed"):
        runtime.execute("print(1)")
