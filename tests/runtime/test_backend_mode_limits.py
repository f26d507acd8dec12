"""In-backend execution, limits: timeout and interrupt kill the whole tree on the backend,
output caps and spill files hold, a missing or old python is a clear error."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from herald import Runtime, Settings
from herald.backends.base import Backend
from herald.backends.local import LocalBackend
from herald.runtime.sandbox.backend.sandbox import BackendPythonError
from herald.runtime.sandbox.errors import SandboxStartError

from ._backend_mode import backend_runtime, exec_backend, gone_on_backend, remote_pids, unique_sleep
from ._helpers import run_ok, script, wait_for

__all__ = ["backend_runtime", "exec_backend"]  # fixtures, used by name

RuntimeFactory = Callable[..., Runtime]

SPAWN_AND_WAIT = """
import subprocess, time
subprocess.Popen(["sleep", "{marker}"])
subprocess.Popen(["sleep", "{marker}"], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("started", flush=True)
time.sleep(1000)
"""


def test_timeout_kills_the_remote_tree(exec_backend: Backend, backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime(overrides={"sandbox.kill_grace": 2})
    runtime.wait_warm()  # the 2 s are the script's, not an interpreter's start-up on the backend
    marker = unique_sleep()
    started = time.monotonic()
    result = runtime.execute(script(SPAWN_AND_WAIT.format(marker=marker)), timeout=2)
    elapsed = time.monotonic() - started
    assert result.status == "timeout", result
    assert "Timed out after 2 s" in result.error
    assert result.output == "started\n"
    # Generous bound (a loaded machine); the point is that it is not the script's 1000 s.
    assert elapsed < 2 + 2 + 60, elapsed
    assert gone_on_backend(exec_backend, marker), remote_pids(exec_backend, marker)
    assert run_ok(runtime, "print('the next run works')").output == "the next run works\n"


def test_interrupt_kills_the_remote_tree(exec_backend: Backend, backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime(overrides={"sandbox.kill_grace": 2})
    marker = unique_sleep()
    seen_running: list[int] = []

    def look_then_interrupt() -> None:
        # An interrupt before the run starts is dropped by design: wait until the script runs
        # (both its children exist). Also proves the check below can see what it says is gone.
        wait_for(lambda: len(remote_pids(exec_backend, marker)) == 2, timeout=60, step=0.2)
        seen_running.extend(remote_pids(exec_backend, marker))
        runtime.interrupt()

    watcher = threading.Thread(target=look_then_interrupt, daemon=True)
    watcher.start()
    result = runtime.execute(script(SPAWN_AND_WAIT.format(marker=marker)), timeout=120)
    watcher.join(60)
    # "interrupted", not "timeout": the interrupt, not the run's limit, ended the script.
    assert result.status == "interrupted", result
    assert "Interrupted" in result.error
    assert len(seen_running) == 2, seen_running
    assert gone_on_backend(exec_backend, marker), remote_pids(exec_backend, marker)


def test_a_successful_run_leaves_no_process_in_its_group(
    exec_backend: Backend, backend_runtime: RuntimeFactory
) -> None:
    marker = unique_sleep()
    result = run_ok(backend_runtime(), f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\nprint('bye')")
    assert result.output == "bye\n"
    assert gone_on_backend(exec_backend, marker), remote_pids(exec_backend, marker)


def test_stdout_is_capped_head_and_tail_with_the_whole_text_spilled(backend_runtime: RuntimeFactory) -> None:
    result = run_ok(
        backend_runtime(),
        """
        import subprocess
        for i in range(6000):
            print("script line %05d" % i)
        print(flush=True)
        subprocess.run(["sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo child line $i; i=$((i+1)); done"])
        """,
    )
    assert result.output.startswith("script line 00000\n")
    assert result.output.rstrip().endswith("child line 2999")
    assert "output truncated" in result.output
    assert len(result.output.encode()) < 50_000 + 500
    assert result.output_spill_path is not None
    spilled = Path(result.output_spill_path).read_text()
    assert spilled.count("script line") == 6000 and spilled.count("child line") == 3000


def test_stderr_is_capped(backend_runtime: RuntimeFactory) -> None:
    result = backend_runtime().execute(
        script(
            """
            import sys
            for i in range(5000):
                sys.stderr.write("problem %04d\\n" % i)
            """
        ),
        timeout=60,
    )
    assert result.status == "success", result
    assert result.error.startswith("problem 0000\n")
    assert result.error.rstrip().endswith("problem 4999")
    assert "stderr truncated" in result.error
    assert len(result.error.encode()) < 10_000 + 500
    assert result.error_spill_path is not None
    assert Path(result.error_spill_path).read_text().count("problem") == 5000


def test_a_missing_python_is_a_clear_error(exec_backend: Backend, settings: Settings) -> None:
    missing = settings.with_overrides({"sandbox.remote_python": "python3-herald-missing"})
    with pytest.raises(BackendPythonError) as info:
        Runtime(exec_backend, settings=missing, exec_mode="backend")
    message = str(info.value)
    assert f"on the {exec_backend.name} backend, but `python3-herald-missing` was not found there" in message
    assert "sandbox.remote_python" in message and 'exec_mode "host"' in message
    # Without warm start the error comes with the first run instead.
    cold = missing.with_overrides({"sandbox.warm": False})
    with Runtime(exec_backend, settings=cold, exec_mode="backend") as runtime, pytest.raises(BackendPythonError):
        runtime.execute("print(1)")


def test_an_old_python_is_refused(workspace: Path, settings: Settings, tmp_path: Path) -> None:
    fake = tmp_path / "python2.7"
    fake.write_text("#!/bin/sh\necho '__HERALD_PROBE__ version 2.7'\n")
    fake.chmod(0o755)
    old = settings.with_overrides({"sandbox.remote_python": str(fake)})
    with LocalBackend(str(workspace), settings=old) as backend, pytest.raises(BackendPythonError) as info:
        Runtime(backend, settings=old, exec_mode="backend")
    assert "needs Python 3.8 or newer" in str(info.value) and "is Python 2.7" in str(info.value)


def test_an_interpreter_that_dies_at_start_up_is_reported(workspace: Path, settings: Settings, tmp_path: Path) -> None:
    # Passes the setup, then fails when started for real: the error shows what it said.
    fake = tmp_path / "flaky-python"
    # (the setup runs it with -E and then serves the first run itself; later supervisors start with -I)
    fake.write_text('#!/bin/sh\ncase "$1" in -I) echo "no memory for you" >&2; exit 3;; esac\nexec python3 "$@"\n')
    fake.chmod(0o755)
    flaky = settings.with_overrides({"sandbox.remote_python": str(fake)})
    with LocalBackend(str(workspace), settings=flaky) as backend, Runtime(
        backend, settings=flaky, exec_mode="backend"
    ) as runtime:
        assert run_ok(runtime, "print(1)").output == "1\n"
        with pytest.raises(SandboxStartError) as info:
            runtime.execute("print(1)")
    assert "exited during start-up" in str(info.value) and "no memory for you" in str(info.value)


def _interpreter(version: str) -> str:
    """A real Python `version` on this machine (pyenv or the system), or skip saying so."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    installed = sorted((pyenv / "versions").glob(f"{version}.*/bin/python{version}"))
    found = str(installed[-1]) if installed else shutil.which(f"python{version}")
    if found is None or "/shims/" in found:  # a pyenv shim without the version behind it
        pytest.skip(f"no Python {version} on this machine to run the backend's side with")
    return found


def test_the_backend_side_runs_on_python_3_8(workspace: Path, settings: Settings) -> None:
    oldest = settings.with_overrides({"sandbox.remote_python": _interpreter("3.8")})
    with LocalBackend(str(workspace), settings=oldest) as backend, Runtime(
        backend, settings=oldest, exec_mode="backend"
    ) as runtime:
        result = run_ok(
            runtime,
            """
            import sys
            from hermes_tools import parallel, patch, read_file, terminal, write_file
            print(sys.version_info[:2], [r["output"] for r in parallel([(terminal, "echo %d" % i) for i in range(3)])])
            write_file("py38.txt", "one\\n")                    # the file tools run in the supervisor, on 3.8
            print(patch("py38.txt", "one", "two")["diff"].splitlines()[-1], read_file("py38.txt")["content"])
            """,
        )
        assert result.output == "(3, 8) ['0', '1', '2']\n+two      1|two\n"
        assert result.tool_calls_made == 6
        assert runtime.transcript is not None
        runtime.transcript.flush()
        records = [json.loads(line) for line in runtime.transcript.path.read_text().splitlines()]
        assert [r["tool"] for r in records if r.get("in_backend")] == ["terminal"] * 3 + [
            "write_file",
            "patch",
            "read_file",
        ]
        assert runtime.execute("import time\ntime.sleep(100)", timeout=1).status == "timeout"


@pytest.mark.parametrize("version", ["2.7", "3.6"])
def test_a_real_old_python_is_refused(version: str, workspace: Path, settings: Settings) -> None:
    old = settings.with_overrides({"sandbox.remote_python": _interpreter(version)})
    with (
        LocalBackend(str(workspace), settings=old) as backend,
        pytest.raises(BackendPythonError, match=f"is Python {version}"),
    ):
        Runtime(backend, settings=old, exec_mode="backend")


def test_a_script_larger_than_the_channel_window_arrives_whole(backend_runtime: RuntimeFactory) -> None:
    """Frames to the backend larger than its channel's window (an SSH channel's is 2 MiB) must
    wait for room, not lose their tail: a start frame cut short left the supervisor waiting
    for the rest until the run timed out."""
    runtime = backend_runtime()
    size = 3_000_000
    result = run_ok(runtime, f"DATA = '{'x' * size}'\nprint(len(DATA))", timeout=120)
    assert result.output == f"{size}\n"
