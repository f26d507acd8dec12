"""When `Runtime.execute()` returns, no tool call of that run can still change anything.

The attacker's script has one patch working on a large file and more parked behind its lock,
then lets the run time out or be interrupted: neither the working one nor the parked ones may
write once execute() has returned, however the lock is freed.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ._helpers import pids_with_marker, script

MARKERS = 8
# Each patch of this file takes about a second here (it is read, changed and diffed whole): the
# file's lock makes them take turns, so when the run ends one is working and the rest are parked.
PATCHES_IN_TURN = """
import threading
from hermes_tools import patch

def change(k):
    try:
        patch("big.txt", "marker%d" % k, "done%d" % k)
        print("patched", k, flush=True)
    except Exception as exc:
        print("failed", k, type(exc).__name__, flush=True)

threads = [threading.Thread(target=change, args=(k,)) for k in range({markers})]
for thread in threads:
    thread.start()
print("started", flush=True)
for thread in threads:
    thread.join()
"""


def _big_file(path: Path) -> None:
    lines = [f"line {i} of a big file with some text in it" for i in range(250_000)]
    for k in range(MARKERS):
        lines[k * 30_000 + 7] = f"marker{k}"
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("interrupt", [False, True], ids=["timeout", "interrupt"])
def test_patches_of_an_ended_run_never_write_after_execute_returns(
    make_runtime: Any, workspace: Path, interrupt: bool,
) -> None:
    runtime = make_runtime(overrides={"sandbox.kill_grace": 1})
    target = workspace / "big.txt"
    for round_ in range(3):
        _big_file(target)
        if interrupt:
            timer = threading.Timer(1.5, runtime.interrupt)
            timer.start()
        result = runtime.execute(script(PATCHES_IN_TURN.format(markers=MARKERS)), timeout=60 if interrupt else 1.5)
        assert result.status == ("interrupted" if interrupt else "timeout"), result
        assert "started" in result.output, result
        after_return, stat = target.read_bytes(), target.stat()
        # Whatever was left of the run has had ample time to act: it must not have.
        time.sleep(3)
        assert target.stat().st_mtime_ns == stat.st_mtime_ns, f"round {round_}: a patch wrote after execute() returned"
        assert target.read_bytes() == after_return
        done = after_return.count(b"\ndone")
        assert done < MARKERS, "every patch ran before the run ended: the machine is too fast for this test"


def test_parked_and_working_calls_end_at_the_runs_deadline(make_runtime: Any, workspace: Path) -> None:
    """A script that ignores SIGTERM lives on for the kill grace after its deadline, and hears
    what became of its calls: the parked patches gave up at the deadline and the working one did
    not write, each with a message that says the run's time limit was reached."""
    runtime = make_runtime(overrides={"sandbox.kill_grace": 4})
    target = workspace / "big.txt"
    _big_file(target)
    code = (
        PATCHES_IN_TURN.format(markers=MARKERS)
        .replace(
            "import threading\n", "import signal, threading, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        )
        .replace(
            'print("failed", k, type(exc).__name__, flush=True)', 'print("failed", k, exc.error_type, exc, flush=True)'
        )
    )
    result = runtime.execute(script(code + "time.sleep(60)\n"), timeout=1.5)
    assert result.status == "timeout", result
    failed = [line for line in result.output.splitlines() if line.startswith("failed")]
    assert failed, result.output
    assert all(" Timeout " in line and "time limit" in line for line in failed), result.output
    after_return = target.read_bytes()
    time.sleep(2)
    assert target.read_bytes() == after_return
    assert after_return.count(b"\ndone") == result.output.count("patched")


def test_calls_of_an_ended_run_are_all_stopped(make_runtime: Any, workspace: Path) -> None:
    """A script whose threads leave calls running and waiting as it exits: by the time execute()
    returns, every one of them has returned, so the command it ran is already gone (no wait)
    and none of the waiting ones started another."""
    runtime = make_runtime()
    marker = f"1000.{uuid.uuid4().int % 10**9:09d}"
    result = runtime.execute(script(f"""
        import os, threading, time
        from hermes_tools import terminal
        for i in range(4):
            threading.Thread(target=lambda i=i: terminal(f"touch s{{i}}; sleep {marker}"), daemon=True).start()
        while not any(os.path.exists(f"s{{i}}") for i in range(4)):  # one runs, three wait for the shell
            time.sleep(0.01)
        os._exit(0)
        """), timeout=30)
    assert result.status == "success", result
    assert not pids_with_marker(marker), "a terminal command of the ended run is still alive"
    time.sleep(1)
    assert len(list(workspace.glob("s[0-3]"))) == 1, "a call that waited for the shell ran after the run ended"


def test_the_deadline_moves_while_a_person_is_asked(make_runtime: Any, settings: Any, workspace: Path) -> None:
    """While one call waits on a person (20 s, far past the run's 8 s), the run's deadline moves
    on with the clock for every call: patches parked behind each other's lock meanwhile keep
    waiting their turn instead of giving up at the deadline the run had before the question."""
    from herald.policy import Policy, PolicyCall

    def approve(call: PolicyCall) -> bool:
        (workspace / "asking").write_text("")  # the patches start only now: while the person is asked
        time.sleep(20)  # a person thinking it over
        return True

    policy = Policy.from_settings(
        settings.with_overrides({"policy.rules": ["ask terminal command=echo"]}), approve=approve
    )
    runtime = make_runtime(policy=policy)
    _big_file(workspace / "big.txt")
    result = runtime.execute(script("""
        import os, threading, time
        from hermes_tools import patch, terminal
        asked = threading.Thread(target=lambda: print(terminal("echo approved")["output"].strip(), flush=True))
        asked.start()
        def change(k):
            while not os.path.exists("asking"):
                time.sleep(0.01)
            try:
                patch("big.txt", "marker%d" % k, "done%d" % k)
                print("patched", k, flush=True)
            except Exception as exc:
                print("failed", k, exc, flush=True)
        threads = [threading.Thread(target=change, args=(k,)) for k in range(N_PATCHES)]
        for t in threads: t.start()
        for t in threads: t.join()
        asked.join()
        """).replace("N_PATCHES", str(MARKERS)), timeout=8)  # 4 s was too few for a loaded machine's start and end
    assert result.status == "success", result
    expected = ["approved", *(f"patched {k}" for k in range(MARKERS))]
    assert sorted(result.output.split()) == sorted(" ".join(expected).split()), result.output


def test_refused_calls_do_not_count_as_running(make_runtime: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A call a budget refuses never ran: the end of the run has nothing to wait for."""
    import logging

    caplog.set_level(logging.WARNING, logger="herald.runtime.scope")
    runtime = make_runtime()
    result = runtime.execute(script("""
        from hermes_tools import write_file, ToolError
        try:
            write_file("a.txt", "hello")
        except ToolError as exc:
            print(exc.error_type)
        """), timeout=30, budgets={"bytes_written": 1})
    assert result.output.strip() == "BudgetExhausted", result
    assert "still running" not in caplog.text
