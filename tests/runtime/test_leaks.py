"""Many runs leave nothing behind: no descriptors, no child processes, no threads, no sockets."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from herald.runtime.sandbox.backend.sandbox import BackendPythonError
from herald.runtime.sandbox.errors import SandboxStartError
from herald.runtime.sandbox.isolation import shared_root

from ._helpers import child_pids, fd_count, run_ok, wait_for

FD_SLACK = 3


def steady(runtime: Runtime) -> tuple[int, int, int]:
    """Descriptors, child processes and threads once the warm child is ready and every RPC
    connection but the kernels' own is gone."""
    runtime.wait_warm()
    assert wait_for(lambda: runtime._server.connection_count() <= len(runtime._kernels))
    return fd_count(), len(child_pids()), threading.active_count()


def test_a_thousand_runs_leak_nothing(make_runtime: Any) -> None:
    runtime = make_runtime(transcript=False)
    run_ok(runtime, "print(1)")
    fds, children, threads = steady(runtime)
    for _ in range(1000):  # how fast they run is for `make bench`, not for a test
        result = runtime.execute("print(1)", timeout=30)
        assert result.status == "success" and result.output == "1\n", result
    after_fds, after_children, after_threads = steady(runtime)
    assert after_fds <= fds + FD_SLACK, (fds, after_fds)
    assert after_children <= children, (children, after_children)
    assert after_threads <= threads + 1, (threads, after_threads)


def test_runs_with_tool_calls_and_failures_leak_nothing(make_runtime: Any) -> None:
    runtime = make_runtime(transcript=False)
    scripts = [
        "from hermes_tools import terminal, parallel\nparallel([(terminal, 'true')] * 4)\nprint('ok')",
        "from hermes_tools import read_file\ntry:\n    read_file('missing')\nexcept Exception:\n    pass",
        "raise ValueError('x')",
        "print('a' * 60_000)",
        "import subprocess\nsubprocess.Popen(['sleep', '30'])",
        "import threading\nfrom hermes_tools import terminal\n"
        "ts = [threading.Thread(target=terminal, args=('true',)) for _ in range(5)]\n"
        "[t.start() for t in ts]\n[t.join() for t in ts]",
    ]
    for code in scripts:  # warm-up: the first use of each path may open lasting things (spill dir)
        runtime.execute(code, timeout=30)
    fds, children, threads = steady(runtime)
    for _ in range(10):
        for code in scripts:
            assert runtime.execute(code, timeout=30).status in ("success", "error")
    assert runtime.execute("import time\ntime.sleep(10)", timeout=0.3).status == "timeout"
    after_fds, after_children, _ = steady(runtime)
    assert after_fds <= fds + FD_SLACK, (fds, after_fds)
    assert after_children <= children, (children, after_children)
    assert wait_for(lambda: threading.active_count() <= threads + 1), (
        threads,
        threading.active_count(),
    )


def test_kernel_sessions_leak_nothing(make_runtime: Any) -> None:
    runtime = make_runtime(transcript=False)
    run_ok(runtime, "x = 0\nfrom hermes_tools import terminal\nterminal('true')", session="k")
    fds, children, _ = steady(runtime)
    for i in range(30):
        run_ok(
            runtime, f"from hermes_tools import terminal\nterminal('true')\nx += {i}", session="k"
        )
    for _ in range(5):
        runtime.execute("import time\ntime.sleep(10)", session="k", timeout=0.2)
        run_ok(runtime, "x = 0", session="k")
    after_fds, after_children, _ = steady(runtime)
    assert after_fds <= fds + FD_SLACK, (fds, after_fds)
    assert after_children <= children, (children, after_children)


def test_closed_runtimes_leak_nothing(settings: Settings, workspace: Path) -> None:
    def one_runtime() -> None:
        with (
            LocalBackend(str(workspace), settings=settings) as backend,
            Runtime(backend, settings=settings) as runtime,
        ):
            run_ok(runtime, "from hermes_tools import terminal\nterminal('true')")
            run_ok(runtime, "y = 1", session="k")

    one_runtime()
    fds, children, threads = fd_count(), len(child_pids()), threading.active_count()
    for _ in range(10):
        one_runtime()
    assert fd_count() <= fds + FD_SLACK, (fds, fd_count())
    assert wait_for(lambda: len(child_pids()) <= children), (children, child_pids())
    assert wait_for(lambda: threading.active_count() <= threads + 1)


def herald_temp_dirs() -> set[str]:
    """Herald's temp dirs here: the backend mode's sandbox copies and RPC sockets in TMPDIR, and
    the host mode's sandbox directories in the process's shared root."""
    root = tempfile.gettempdir()
    return {
        name for name in os.listdir(root) if name.startswith(("herald-sandbox-", "herald-rpc-"))
    } | {os.path.join("root", name) for name in os.listdir(shared_root()) if name.startswith("sandbox-")}


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"tools": ["no_such_tool"]}, ValueError),
        ({"overrides": {"sandbox.python": "/nonexistent/python3"}}, SandboxStartError),
        # Host mode, once its sandbox directory is made: an isolation no setting names.
        ({"overrides": {"sandbox.isolation": "bogus"}}, SandboxStartError),
        # Backend mode, at its first child (the backend's python probed), with everything else made.
        ({"exec_mode": "backend", "overrides": {"sandbox.remote_python": "/nonexistent/python3"}}, BackendPythonError),
    ],
)
def test_failed_construction_leaks_nothing(
    settings: Settings, tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A temp dir of this test's own: other test processes (pytest-xdist's workers) make herald-*
    # directories in /tmp meanwhile, which must not count as this Herald's.
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    Runtime(settings=settings, transcript=False).close()  # warm up lazy imports and caches
    fds, children, threads, dirs = (
        fd_count(),
        len(child_pids()),
        threading.active_count(),
        herald_temp_dirs(),
    )
    for _ in range(3):
        with pytest.raises(error):
            Runtime(
                settings=settings.with_overrides(kwargs.get("overrides", {})),
                tools=kwargs.get("tools"),
                transcript=tmp_path / "t.jsonl",
                exec_mode=kwargs.get("exec_mode"),
            )
    assert fd_count() <= fds, (fds, fd_count())
    assert len(child_pids()) <= children
    assert wait_for(lambda: threading.active_count() <= threads)
    assert herald_temp_dirs() <= dirs


def test_interrupt_after_close_writes_nowhere(settings: Settings, tmp_path: Path) -> None:
    with LocalBackend(str(tmp_path), settings=settings) as backend:
        runtime = Runtime(backend, settings=settings, transcript=False)
        run_ok(runtime, "print(1)")
        runtime.close()
        # Descriptor numbers are reused lowest-first: these files take the ones close() freed.
        victims = [open(tmp_path / f"victim{i}.txt", "w") for i in range(16)]  # noqa: SIM115
        try:
            runtime.interrupt()
        finally:
            for victim in victims:
                victim.close()
        assert [p.name for p in tmp_path.glob("victim*.txt") if p.read_text()] == []
