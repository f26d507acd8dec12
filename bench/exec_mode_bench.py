"""In-backend execution: script start and tool-call latency from a script that runs inside the
backend, on each backend that can run here (local always; SSH and Docker when the test
services in tests/fixtures/ can start)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from herald import Runtime, Settings
from herald.backends.base import Backend
from herald.backends.local import LocalBackend

from .report import Metric
from .workloads import read_patch_verify

NO_LIMIT = 1_000_000
EDIT_FILES = 200
EDIT_TARGET_MS = 1000.0  # read -> patch -> verify over EDIT_FILES files, one script
COLD_TARGET_MS = 300.0  # a new Runtime (setup in one round trip) + print(1) + close
CLI_TARGET_MS = 300.0  # `herald exec --exec-mode backend` print(1): a new process, end to end
WARM_TARGET_MS = 12.0
# "Warm" is a run after a pause (an agent's next model turn takes far longer): the successor
# started after the last run has had time to get ready. No wait_warm(): nothing is done for the
# benchmark's sake.
WARM_PAUSE = 0.2
IDLE_PAUSE = 0.5  # before a Runtime's close: a model turn (seconds, as a rule) before the session ends
# read -> patch -> read again, for each of EDIT_FILES files: the file tools of a review-and-fix
# loop. Prints the seconds it took.
EDIT_SCRIPT = read_patch_verify(f"['bench-edit/f%03d.py' % i for i in range({EDIT_FILES})]", "value = 1", "value = 2")
# Per-call targets (read_file, terminal): both run in the supervisor next to the script (terminal
# in its bash, which shares the session shell's state); the "via Herald" row measures terminal with
# sandbox.backend_tools off: across the exec channel to Herald and back to the backend's shell.
# Host mode's are 0.1 and 2 ms. The target: terminal <= 12 ms per call at 10 ms RTT.
TARGETS_MS = {"local": (0.5, 2.0), "ssh": (5.0, 5.0), "docker": (8.0, 8.0)}


@contextlib.contextmanager
def _local(settings: Settings, work: Path) -> Iterator[Backend]:
    with LocalBackend(str(work), settings=settings) as backend:
        yield backend


@contextlib.contextmanager
def _ssh(settings: Settings, work: Path) -> Iterator[Backend]:
    from herald.backends.ssh import SSHBackend
    from tests.fixtures.sshd import running_sshd

    with running_sshd() as server:
        workspace = server.make_workspace()
        backend = SSHBackend(server.spec, cwd=workspace, settings=settings.with_overrides(server.overrides()))
        try:
            yield backend
        finally:
            backend.close()
            server.remove_workspace(workspace)


@contextlib.contextmanager
def _docker(settings: Settings, work: Path) -> Iterator[Backend]:
    from herald.backends.docker import DockerBackend
    from tests.fixtures.dockerd import build_test_image, docker_engine, docker_settings

    with docker_engine() as url:
        backend = DockerBackend(settings=docker_settings(settings, url, build_test_image(url)))
        try:
            yield backend
        finally:
            backend.close()


BACKENDS: dict[str, Callable[[Settings, Path], contextlib.AbstractContextManager[Backend]]] = {
    "local": _local,
    "ssh": _ssh,
    "docker": _docker,
}


def _in_script(runtime: Runtime, code: str) -> float:
    result = runtime.execute(code, max_tool_calls=NO_LIMIT, timeout=600)
    if not result.ok:
        raise RuntimeError(f"benchmark script failed: {result.error}")
    return float(result.output.strip().splitlines()[-1])


def _edit_loop(kind: str, backend: Backend, settings: Settings,
               modes: tuple[bool, ...] = (True, False)) -> list[Metric]:
    """read -> patch -> verify over EDIT_FILES files, with the file tools in the supervisor and,
    for comparison, with every call going back to Herald (sandbox.backend_tools off)."""
    body = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(40)) + "value = 1\n"
    metrics = []
    for in_backend in modes:
        where = "in the backend" if in_backend else "via Herald"
        metric = Metric(f"in-backend ({kind}): read->patch->verify x{EDIT_FILES}, tools {where}", "ms",
                        EDIT_TARGET_MS if in_backend else None, note="one script, 600 calls; RTT of this machine")
        tuned = settings.with_overrides({"sandbox.backend_tools": in_backend})
        with Runtime(backend, settings=tuned, exec_mode="backend") as runtime:
            for _ in range(3):
                backend.run(f"rm -rf bench-edit && mkdir bench-edit && for i in $(seq -f %03g 0 {EDIT_FILES - 1}); "
                            f"do printf '%s' {_quote(body)} > bench-edit/f$i.py; done")
                metric.samples.append(_in_script(runtime, EDIT_SCRIPT) * 1000)
        metrics.append(metric)
    backend.run("rm -rf bench-edit")
    return metrics


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _cold(kind: str, backend: Backend, settings: Settings) -> Metric:
    """What `herald exec --exec-mode backend` does past its own start-up: a new Runtime (the
    python probe and the sandbox files in one command, a supervisor), print(1), close."""
    metric = Metric(f"in-backend ({kind}): new Runtime + print(1) + close", "ms", COLD_TARGET_MS,
                    note="herald exec's work without the CLI's own import")
    for _ in range(5):
        started = time.perf_counter()
        with Runtime(backend, settings=settings, exec_mode="backend") as runtime:
            if runtime.execute("print(1)").output != "1\n":
                raise RuntimeError("print(1) did not print 1")
        metric.samples.append((time.perf_counter() - started) * 1000)
    return metric


def _idle_close(kind: str, backend: Backend, settings: Settings) -> Metric:
    """An agent session's end: the Runtime ran a script, sat idle through a model turn (its next
    interpreter got ready meanwhile), then closes."""
    metric = Metric(f"in-backend ({kind}): close after a pause", "ms", None,
                    note=f"close() of a Runtime that ran print(1), then paused {IDLE_PAUSE * 1000:.0f} ms")
    for _ in range(5):
        runtime = Runtime(backend, settings=settings, exec_mode="backend")
        try:
            runtime.execute("print(1)")
            time.sleep(IDLE_PAUSE)
        finally:
            started = time.perf_counter()
            runtime.close()
        metric.samples.append((time.perf_counter() - started) * 1000)
    return metric


def _measure(kind: str, backend: Backend, settings: Settings) -> list[Metric]:
    backend.write_bytes("bench-small.txt", "".join(f"line {i}\n" for i in range(20)).encode())
    extra = [_cold(kind, backend, settings), _idle_close(kind, backend, settings), *_edit_loop(kind, backend, settings)]
    with Runtime(backend, settings=settings, exec_mode="backend") as runtime:
        start = Metric(f"in-backend ({kind}): script start print(1), warm", "ms", WARM_TARGET_MS,
                       note=f"end-to-end execute() after a {WARM_PAUSE * 1000:.0f} ms pause")
        for _ in range(30):
            time.sleep(WARM_PAUSE)
            started = time.perf_counter()
            runtime.execute("print(1)")
            start.samples.append((time.perf_counter() - started) * 1000)
        # No waiting: each run waits for the rest of its successor's start-up (a supervisor, and
        # the script's interpreter unless the backend's zygote forks it).
        back_to_back = Metric(f"in-backend ({kind}): print(1) back-to-back", "ms", None, note="end-to-end execute()")
        for _ in range(50):
            started = time.perf_counter()
            runtime.execute("print(1)")
            back_to_back.samples.append((time.perf_counter() - started) * 1000)
        calls = 1000 if kind == "local" else 200
        read_target, terminal_target = TARGETS_MS[kind]
        note = f"per call, {calls} calls per run"
        read = Metric(f"in-backend ({kind}): read_file from a script", "ms", read_target, note=note)
        term = Metric(f"in-backend ({kind}): terminal('true') from a script, in the supervisor", "ms", terminal_target,
                      note=note)
        for _ in range(5):
            for metric, call in ((read, "read_file('bench-small.txt')"), (term, "terminal('true')")):
                seconds = _in_script(runtime, (
                    "import time\nfrom hermes_tools import read_file, terminal\nt = time.perf_counter()\n"
                    f"for _ in range({calls}): {call}\nprint(time.perf_counter() - t)"
                ))
                metric.samples.append(seconds * 1000 / calls)
    backend.run("rm -f bench-small.txt")
    return [start, back_to_back, read, term, _terminal_via_herald(kind, backend, settings, calls),
            *isolation_on_off(kind, backend, settings), *extra]


def _terminal_via_herald(kind: str, backend: Backend, settings: Settings, calls: int) -> Metric:
    metric = Metric(f"in-backend ({kind}): terminal('true') from a script, via Herald", "ms", None,
                    note=f"per call, {calls} calls per run; sandbox.backend_tools off")
    tuned = settings.with_overrides({"sandbox.backend_tools": False})
    with Runtime(backend, settings=tuned, exec_mode="backend") as runtime:
        for _ in range(3):
            seconds = _in_script(runtime, (
                "import time\nfrom hermes_tools import terminal\nt = time.perf_counter()\n"
                f"for _ in range({calls}): terminal('true')\nprint(time.perf_counter() - t)"
            ))
            metric.samples.append(seconds * 1000 / calls)
    return metric


RTT = 0.010


def _ssh_at_rtt(settings: Settings) -> list[Metric]:
    """terminal('true') per call from a backend-mode script over SSH at RTT (through
    tests/fixtures/latency_proxy.py): in the supervisor (the issue's target) and via Herald."""
    from herald.backends.ssh import SSHBackend
    from tests.fixtures.latency_proxy import proxy_process
    from tests.fixtures.sshd import running_sshd

    calls, metrics = 200, []
    with running_sshd() as server, proxy_process((server.host, server.port), RTT) as port:
        workspace = server.make_workspace()
        spec, overrides = server.through(port)
        tuned = settings.with_overrides(overrides)
        try:
            with SSHBackend(spec, cwd=workspace, settings=tuned) as backend:
                backend.run("true")  # the session shell runs: the supervisor's shares it
                for in_backend in (True, False):
                    where = "in the supervisor" if in_backend else "via Herald"
                    metric = Metric(f"in-backend (ssh, {RTT * 1000:.0f} ms RTT): terminal('true') {where}", "ms",
                                    12.0 if in_backend else None, note=f"per call, {calls} calls per run")
                    with Runtime(backend, settings=tuned.with_overrides({"sandbox.backend_tools": in_backend}),
                                 exec_mode="backend") as runtime:
                        for _ in range(3):
                            seconds = _in_script(
                                runtime,
                                (
                                    "import time\nfrom hermes_tools import terminal\n"
                                    "terminal('true')\nt = time.perf_counter()\n"
                                    f"for _ in range({calls}): terminal('true')\nprint(time.perf_counter() - t)"
                                ),
                            )
                            metric.samples.append(seconds * 1000 / calls)
                    metrics.append(metric)
                kind = f"ssh, {RTT * 1000:.0f} ms RTT"
                metrics += [
                    _echo_floor(kind, backend),
                    _warm(kind, backend, tuned, runs=30),
                    _cold(kind, backend, tuned),
                    *_edit_loop(kind, backend, tuned, modes=(True,)),
                    *_search(kind, backend, tuned),
                ]
            metrics += [_cli("ssh", server.spec, workspace, server.overrides()),
                        _cli(f"ssh, {RTT * 1000:.0f} ms RTT", spec, workspace, overrides)]
        finally:
            server.remove_workspace(workspace)
    return metrics


SEARCH_DIRS, SEARCH_FILES, SEARCH_CALLS = 3, 20, 10
# The search in the supervisor (next to the script, on the backend's own files) against the way
# it went before: back over the exec stream to Herald, which searches through the backend (rg in
# the session's shell, or the Python walk over SFTP).
SEARCH_SCRIPT = (
    "import time\nfrom hermes_tools import search_files\nsearch_files('needle', path='bench-search')\n"
    f"t = time.perf_counter()\nfor _ in range({SEARCH_CALLS}): search_files('needle', path='bench-search')\n"
    "print(time.perf_counter() - t)"
)


def _search(kind: str, backend: Backend, settings: Settings) -> list[Metric]:
    """search_files('needle') over SEARCH_DIRS x SEARCH_FILES files from a script, both engines,
    in the supervisor and via Herald."""
    backend.run(f"rm -rf bench-search && for d in $(seq {SEARCH_DIRS}); do mkdir -p bench-search/d$d; "
                f"for i in $(seq {SEARCH_FILES}); do printf 'one\\nneedle %s\\nthree\\n' $i > bench-search/d$d/f$i.py; "
                "done; done")
    metrics = []
    for engine, name in (("auto", "ripgrep"), ("python", "Python walk")):
        for in_backend in (True, False):
            where = "in the supervisor" if in_backend else "via Herald (before)"
            metric = Metric(f"in-backend ({kind}): search_files, {name}, {where}", "ms", None,
                            note=f"per call, {SEARCH_CALLS} calls per run, {SEARCH_DIRS * SEARCH_FILES} files")
            tuned = settings.with_overrides({"sandbox.backend_tools": in_backend, "files.search": engine})
            with Runtime(backend, settings=tuned, exec_mode="backend") as runtime:
                for _ in range(3):
                    metric.samples.append(_in_script(runtime, SEARCH_SCRIPT) * 1000 / SEARCH_CALLS)
            metrics.append(metric)
    backend.run("rm -rf bench-search")
    return metrics


def cli_environment(prefix: str, overrides: dict[str, Any]) -> tuple[Path, dict[str, str]]:
    """A new home for a `herald` process (its data dir, no config file) and its environment,
    with the settings `overrides` as HERALD_* variables. The caller removes the home."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    env = dict(os.environ, HERALD_DATA_DIR=str(home / "data"), HERALD_CONFIG=str(home / "none.toml"))
    # An installed Herald has its modules' bytecode caches (pip writes them; a checkout's first
    # run does): a shell that forbids writing them would time compiling every module on each start.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update({"HERALD_" + key.replace(".", "_").upper(): str(value) for key, value in overrides.items()})
    return home, env


def _cli(kind: str, spec: str, workspace: str, overrides: dict[str, Any], runs: int = 5) -> Metric:
    """`herald exec - --exec-mode backend --backend SPEC` running print(1), as a person runs it:
    a new process (its imports, connecting, the setup, the run, the close), `runs` times. Where
    the time goes, step by step: bench/coldstart_timeline.py."""
    metric = Metric(f"in-backend ({kind}): herald exec --exec-mode backend print(1)", "ms", CLI_TARGET_MS,
                    note="a new process, end to end")
    home, env = cli_environment("herald-bench-cli-", overrides)
    argv = [
        sys.executable,
        "-m",
        "herald",
        "exec",
        "-",
        "--backend",
        spec,
        "--cwd",
        workspace,
        "--exec-mode",
        "backend",
    ]
    try:
        for _ in range(runs + 1):
            started = time.perf_counter()
            proc = subprocess.run(argv, input="print(1)\n", env=env, capture_output=True, text=True, timeout=120)
            elapsed = (time.perf_counter() - started) * 1000
            if proc.returncode != 0 or proc.stdout != "1\n":
                raise RuntimeError(f"herald exec failed ({proc.returncode}): {proc.stderr.strip()[:500]}")
            metric.samples.append(elapsed)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    metric.samples = metric.samples[1:]  # the first run also writes the bytecode caches
    return metric


def isolation_on_off(kind: str, backend: Backend, settings: Settings, runs: int = 30) -> list[Metric]:
    """Warm print(1) with the script confined on the backend (bwrap there, by default) and
    with sandbox.isolation = "none": what the isolation costs a run."""
    on = _warm(kind, backend, settings, runs, label=", isolation on")
    off = _warm(kind, backend, settings.with_overrides({"sandbox.isolation": "none"}), runs, label=", isolation off")
    return [on, off]


def _echo_floor(kind: str, backend: Backend, runs: int = 50) -> Metric:
    """The rig's floor for a warm run: one small write echoed back by `cat` over an exec channel
    (the same link, sshd and client as a run's frames, without Herald's work at either end)."""
    metric = Metric(f"in-backend ({kind}): exec channel round trip (cat echo), the floor", "ms", None,
                    note="warm print(1) minus this: Herald's own share")
    channel = backend.open_channel(["cat"])
    try:
        for _ in range(runs + 1):
            started = time.perf_counter()
            channel.send(b"x" * 64)
            echoed = b""
            while len(echoed) < 64:
                chunk = channel.recv(10.0)
                if not chunk:
                    raise RuntimeError(f"cat on {kind} ended or stayed silent: {chunk!r}")
                echoed += chunk
            metric.samples.append((time.perf_counter() - started) * 1000)
    finally:
        channel.close()
    metric.samples = metric.samples[1:]  # the first also waits for cat to start
    return metric


def _warm(kind: str, backend: Backend, settings: Settings, runs: int = 20, label: str = "") -> Metric:
    metric = Metric(f"in-backend ({kind}): script start print(1), warm{label}", "ms", WARM_TARGET_MS,
                    note=f"end-to-end execute() after a {WARM_PAUSE * 1000:.0f} ms pause")
    with Runtime(backend, settings=settings, exec_mode="backend") as runtime:
        if label:
            metric.note += f"; {runtime.execute('print(1)').isolation}"
        for _ in range(runs):
            time.sleep(WARM_PAUSE)
            started = time.perf_counter()
            runtime.execute("print(1)")
            metric.samples.append((time.perf_counter() - started) * 1000)
    return metric


def run() -> list[Metric]:
    work = Path(tempfile.mkdtemp(prefix="herald-bench-exec-"))
    settings = Settings(data_dir=work / "data")
    metrics: list[Metric] = []
    try:
        for kind, opener in BACKENDS.items():
            try:
                with opener(settings, work) as backend:
                    metrics += _measure(kind, backend, settings)
            except Exception as exc:  # a backend that cannot run here is reported, not fatal
                print(f"in-backend ({kind}): skipped — {type(exc).__name__}: {_first_line(exc)}")
        try:
            metrics += _ssh_at_rtt(settings)
        except Exception as exc:
            print(f"in-backend (ssh, {RTT * 1000:.0f} ms RTT): skipped — {type(exc).__name__}: {_first_line(exc)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return metrics


def _first_line(exc: Any) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no details"
