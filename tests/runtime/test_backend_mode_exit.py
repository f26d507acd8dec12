"""The end of a backend-mode run: the supervisor reports the exit as soon as the script says it
is leaving (supervisor.py), so everything the script wrote up to its last moment must still
arrive, in order, with its status; and the run's channel is closed off the result path
(backend_closer.py), so the Runtime's close is what leaves no process of its sandbox behind."""

from __future__ import annotations

from collections.abc import Callable

from herald import Runtime
from herald.backends.base import Backend

from ._backend_mode import backend_runtime, exec_backend, gone_on_backend, remote_pids
from ._helpers import script, wait_for

__all__ = ["backend_runtime", "exec_backend"]  # fixtures, used by name

RuntimeFactory = Callable[..., Runtime]

LAST_WORDS = """
import atexit, sys
atexit.register(lambda: print("from atexit", flush=False))
sys.stdout.write("x" * 300000)         # buffered: flushed only on the way out
sys.stdout.write("\\nend of stdout\\n")
sys.stderr.write("last stderr line\\n")
sys.exit({status})
"""


def test_output_written_on_the_way_out_arrives_whole(backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime(overrides={"sandbox.max_stdout_bytes": 1_000_000})
    for status in (0, 4, 0, 4):  # spawned and (once the zygote answers) forked scripts alike
        result = runtime.execute(script(LAST_WORDS.format(status=status)), timeout=60)
        assert result.output == "x" * 300000 + "\nend of stdout\nfrom atexit\n", result.output[-200:]
        assert result.error.endswith("last stderr line\n"), result.error
        assert (result.exit_code, result.status) == (status, "success" if status == 0 else "error"), result


def test_many_short_runs_each_get_their_own_output_and_status(backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime()
    for i in range(12):
        result = runtime.execute(f"import sys\nprint({i})\nsys.exit({i % 3})", timeout=60)
        assert (result.output, result.exit_code) == (f"{i}\n", i % 3), result


def test_closing_the_runtime_leaves_no_process_of_its_sandbox(
    exec_backend: Backend, backend_runtime: RuntimeFactory
) -> None:
    runtime = backend_runtime()
    sandbox_dir = runtime.execute("import os, hermes_tools\nprint(os.path.dirname(hermes_tools.__file__))", timeout=60)
    marker = sandbox_dir.output.strip()
    assert marker.startswith("/"), sandbox_dir
    # The waiting child's supervisor and script, the zygote: all run from the sandbox directory.
    runtime.wait_warm()
    assert wait_for(lambda: bool(remote_pids(exec_backend, marker)), timeout=60)
    runtime.close()
    assert gone_on_backend(exec_backend, marker), remote_pids(exec_backend, marker)
