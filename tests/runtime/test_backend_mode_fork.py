"""In-backend execution with the fork server: each run's script is forked by the Runtime's zygote
inside the backend. A fresh process per run, its tree dies at a timeout, a killed zygote or
supervisor costs nothing but speed, kernel sessions work. Run against every backend here."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from herald import Runtime, Settings
from herald.backends.base import Backend
from herald.backends.local import LocalBackend
from herald.backends.shell import shell_quote

from ._backend_mode import backend_runtime, exec_backend, gone_on_backend, remote_pids, unique_sleep
from ._helpers import run_ok, script, wait_for
from .test_backend_mode_limits import _interpreter

__all__ = ["backend_runtime", "exec_backend"]  # fixtures, used by name
# The tests that kill the zygote or a supervisor find it by the pid a script sees: unconfined,
# since under bwrap (tests/security/test_backend_isolation.py) the script sees neither.
UNCONFINED = {"sandbox.isolation": "none"}

RuntimeFactory = Callable[..., Runtime]

# Whose child is this run: the zygote's command line has the --listen flag, a supervisor's not.
FORKED = """
import os
with open("/proc/%d/cmdline" % os.getppid(), "rb") as fh:
    FORKED = b"--listen" in fh.read().split(b"\\0")
"""

PROBE = FORKED + """
import json, random, sys
print(json.dumps({
    "pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0), "pgid": os.getpgid(0),
    "forked": FORKED, "random": random.random(), "leak": getattr(json, "leak", None),
    "leaked_module": "leaked_module" in sys.modules, "sandbox": os.environ.get("HERALD_SANDBOX"),
    "dir": os.path.dirname(sys.modules["hermes_tools"].__file__),
}))
json.leak = 1                        # module state a later run must not see
sys.modules["leaked_module"] = json
"""


def probe(runtime: Runtime) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(run_ok(runtime, PROBE).output)
    return result


def first_forked(runtime: Runtime) -> dict[str, Any]:
    """Run until a run is forked (a Runtime's first runs are spawned while its zygote starts),
    then once more: the supervisor of the run after a forked one started with it and may have
    looked for the zygote first; every later one starts after the zygote answered. From here on
    every run is forked (while the zygote lives). The forked run's identity."""
    seen: list[dict[str, Any]] = []

    def forked() -> bool:
        seen.append(probe(runtime))
        return bool(seen[-1]["forked"])

    assert wait_for(forked, timeout=120, step=0.1), seen[-3:]
    probe(runtime)
    return seen[-1]


def zygote_marker(found: dict[str, Any]) -> str:
    return f"{found['dir']}/zygote.sock"  # on the zygote's command line, and only there


def test_runs_are_fresh_processes_forked_from_one_zygote(backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime()
    first = first_forked(runtime)
    second, third = probe(runtime), probe(runtime)
    for run in (first, second, third):
        assert run["forked"] and run["ppid"] == first["ppid"], run
        assert run["sid"] == run["pgid"] == run["pid"], "each script leads its own session and group"
        assert run["sandbox"] == "1"
    assert len({first["pid"], second["pid"], third["pid"]}) == 3
    # The first run left a module attribute and a sys.modules entry behind: no later run sees them.
    assert [second["leak"], second["leaked_module"], third["leak"], third["leaked_module"]] == [
        None,
        False,
        None,
        False,
    ]
    assert len({first["random"], second["random"], third["random"]}) == 3, "random is re-seeded per fork"


def test_exit_statuses_come_through_the_zygote(backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime()
    first_forked(runtime)
    exited = runtime.execute(script(FORKED + "import sys\nprint(FORKED, flush=True)\nsys.exit(3)"), timeout=30)
    assert (exited.output, exited.exit_code, exited.status) == ("True\n", 3, "error"), exited
    killed = runtime.execute(
        script(FORKED + "import signal\nprint(FORKED, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)"), timeout=30
    )
    assert (killed.output, killed.exit_code) == ("True\n", -9), killed


SPAWN_AND_WAIT = FORKED + """
import subprocess, time
subprocess.Popen(["sleep", "{marker}"])
subprocess.Popen(["sleep", "{marker}"], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("started", FORKED, flush=True)
time.sleep(1000)
"""


def test_timeout_kills_the_forked_tree(exec_backend: Backend, backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime(overrides={"sandbox.kill_grace": 2})
    first_forked(runtime)
    runtime.wait_warm()  # the 2 s are the script's, not an interpreter's start-up on the backend
    marker = unique_sleep()
    result = runtime.execute(script(SPAWN_AND_WAIT.replace("{marker}", marker)), timeout=2)
    assert result.status == "timeout", result
    assert result.output == "started True\n"
    assert gone_on_backend(exec_backend, marker), remote_pids(exec_backend, marker)
    assert run_ok(runtime, "print('the next run works')").output == "the next run works\n"


def test_killing_the_zygote_falls_back_to_spawning_and_recovers(
    exec_backend: Backend, backend_runtime: RuntimeFactory
) -> None:
    runtime = backend_runtime(overrides=UNCONFINED)
    before = first_forked(runtime)
    exec_backend.run(f"kill -9 {before['ppid']}", timeout=30)
    # By pid: a new zygote (same command line) may already be starting if a spawn saw it die.
    assert wait_for(
        lambda: before["ppid"] not in remote_pids(exec_backend, zygote_marker(before)), timeout=60, step=0.2
    )
    # The waiting child was forked by the dead zygote, the next ones are spawned: all work.
    for _ in range(3):
        run = probe(runtime)
        assert run["ppid"] != before["ppid"]
    after = first_forked(runtime)  # a new zygote, started when the dead one was noticed
    assert after["ppid"] != before["ppid"]


# Prints the pids of the supervisors of the sandbox directory $1 (the zygote's children are not
# dumpable: their fds cannot be read to find the one that holds their pipes).
FIND_SUPERVISORS = r"""
import os, sys
for entry in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open("/proc/%s/cmdline" % entry, "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        continue
    # python3 -I -B -c <loader naming supervisor.main> <dir> (the zygote's interpreter runs -I -S)
    if argv[1:3] == [b"-I", b"-B"] and b"supervisor" in b"".join(argv[4:5]) and argv[5:6] == [sys.argv[1].encode()]:
        print(entry)
"""
# Prints the most bytes waiting unread in any pipe the (stopped) process $1 reads.
UNREAD = r"""
import fcntl, os, struct, sys, termios
most = 0
for fd in os.listdir("/proc/%s/fd" % sys.argv[1]):
    path = "/proc/%s/fd/%s" % (sys.argv[1], fd)
    try:
        if not os.readlink(path).startswith("pipe:"):
            continue
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        continue
    try:
        most = max(most, struct.unpack("i", fcntl.ioctl(handle, termios.FIONREAD, b"\0" * 4))[0])
    finally:
        os.close(handle)
print(most)
"""


def backend_python(backend: Backend, code: str, *args: object) -> str:
    command = " ".join(["python3", "-c", shell_quote(code), *map(str, args)])
    return backend.run(command, timeout=30).output.strip()


def backend_alive(backend: Backend, pid: int) -> bool:
    """Whether `pid` runs on the backend (a zombie counts as gone)."""
    state = backend.run(f"sed -n 's/^State:[[:space:]]*//p' /proc/{pid}/status 2>/dev/null; true", timeout=30).output
    return state[:1] not in ("", "Z", "X")


def test_a_run_handed_to_a_child_that_died_with_its_zygote_goes_to_a_fresh_one(
    exec_backend: Backend, backend_runtime: RuntimeFactory
) -> None:
    # The race of the test above, made certain: the waiting child's supervisor is stopped while
    # the zygote (and with it the child) dies and the run's start frame reaches it; then it goes on.
    runtime = backend_runtime(overrides=UNCONFINED)
    found = first_forked(runtime)
    zygote = found["ppid"]
    runtime.wait_warm()  # the next run's child waits, forked by the zygote
    children = exec_backend.run(f"cat /proc/{zygote}/task/{zygote}/children", timeout=30).output.split()
    assert len(children) == 1, children
    supervisor = backend_python(exec_backend, FIND_SUPERVISORS, found["dir"])
    assert supervisor.isdigit(), f"one waiting supervisor expected, found {supervisor!r}"
    exec_backend.run(f"kill -STOP {supervisor}; kill -9 {zygote}", timeout=30)
    try:
        assert wait_for(lambda: not backend_alive(exec_backend, int(children[0])), timeout=60, step=0.1)
        results: list[Any] = []
        runner = threading.Thread(target=lambda: results.append(probe(runtime)))
        runner.start()
        # Its start frame (the probe's code, hundreds of bytes) waits in the stopped supervisor's stdin.
        assert wait_for(lambda: int(backend_python(exec_backend, UNREAD, supervisor) or 0) > 200, timeout=60, step=0.1)
    finally:
        exec_backend.run(f"kill -CONT {supervisor}", timeout=30)
    runner.join(timeout=120)
    assert results, "the run handed to the dead child failed (killed by signal 9?)"
    assert results[0]["ppid"] != zygote and not results[0]["forked"], results
    assert run_ok(runtime, "from hermes_tools import terminal\nprint(terminal('echo ok')['output'])").output == "ok\n"


def test_a_kernel_session_runs_in_a_forked_child(backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime()
    first_forked(runtime)
    started = run_ok(runtime, FORKED + "x = 41\nstarted_in = os.getpid()\nprint(FORKED)", session="k")
    assert started.output == "True\n"
    result = run_ok(runtime, "x += 1\nprint(x, os.getpid() == started_in)", session="k")
    assert result.output == "42 True\n" and not result.state_lost
    assert run_ok(runtime, "print('x' in globals())").output == "False\n", "one-shot runs do not see the kernel"
    assert run_ok(runtime, "print('x' in globals())", session="other").output == "False\n"
    lost = runtime.execute("import time\ntime.sleep(100)", session="k", timeout=1)
    assert lost.status == "timeout" and lost.state_lost
    fresh = runtime.execute("print(x)", session="k", timeout=30)
    assert fresh.status == "error" and "NameError" in fresh.error


KILL_MY_SUPERVISOR = FORKED + """
import signal, subprocess, time
ours = os.readlink("/proc/self/fd/1")   # our stdout pipe: the supervisor holds its other end

def supervisor():
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as fh:
                if b"supervisor" not in fh.read():
                    continue
            fds = os.listdir("/proc/%s/fd" % entry)
            if any(os.readlink("/proc/%s/fd/%s" % (entry, fd)) == ours for fd in fds):
                return int(entry)
        except OSError:
            continue
    raise SystemExit("no supervisor found")

subprocess.Popen(["sleep", "{marker}"], start_new_session=True, stdout=subprocess.DEVNULL)
with open("{marker}.txt", "w") as fh:   # not printed: the supervisor may die before relaying it
    fh.write("forked %s" % FORKED)
os.kill(supervisor(), signal.SIGKILL)
time.sleep(30)
"""


def test_a_killed_supervisor_takes_its_forked_tree_with_it(
    exec_backend: Backend, backend_runtime: RuntimeFactory
) -> None:
    runtime = backend_runtime(overrides=UNCONFINED)
    first_forked(runtime)
    marker = unique_sleep()
    result = runtime.execute(script(KILL_MY_SUPERVISOR.replace("{marker}", marker)), timeout=60)
    assert result.status == "error", result
    assert "stopped unexpectedly" in result.error
    assert exec_backend.read_bytes(f"{marker}.txt") == b"forked True"
    exec_backend.run(f"rm -f {marker}.txt")
    # Nobody is left to kill the script's tree but the zygote, whose client went away.
    assert gone_on_backend(exec_backend, marker), remote_pids(exec_backend, marker)
    assert run_ok(runtime, "print('next run works')").output == "next run works\n"


def test_closing_the_runtime_stops_its_zygote(exec_backend: Backend, backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime()
    marker = zygote_marker(first_forked(runtime))
    assert remote_pids(exec_backend, marker)
    runtime.close()
    assert gone_on_backend(exec_backend, marker), remote_pids(exec_backend, marker)


def test_fork_server_off_spawns_every_script(exec_backend: Backend, backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime(overrides={"sandbox.fork_server": False})
    for _ in range(4):
        run = probe(runtime)
        assert not run["forked"], run
        time.sleep(0.2)  # time a zygote would have had to start
    assert not remote_pids(exec_backend, zygote_marker(run))


# -- local only: control over the backend's interpreter and environment ---------------------


def test_a_forked_script_gets_the_scrubbed_environment(
    tmp_path: Path, workspace: Path, settings: Settings, monkeypatch: Any
) -> None:
    # The zygote's interpreter on the "backend" starts with a secret in its environment, like
    # a spawned one; its forks must not see it either.
    python = tmp_path / "fake-python3"
    python.write_text('#!/bin/sh\nSERVICE_API_TOKEN=leak WANTED_KEY=kept exec python3 "$@"\n')
    python.chmod(0o755)
    monkeypatch.setenv("WANTED_KEY", "from-host")
    overrides = {"sandbox.remote_python": str(python), "sandbox.env_passthrough": ["WANTED_KEY"]}
    runtime_settings = settings.with_overrides(overrides)
    with LocalBackend(str(workspace), settings=runtime_settings) as backend, Runtime(
        backend, settings=runtime_settings, exec_mode="backend"
    ) as runtime:
        first_forked(runtime)
        code = (
            FORKED
            + "print(FORKED, os.environ.get('SERVICE_API_TOKEN'), os.environ.get('WANTED_KEY'),"
            " os.environ.get('HERALD_SANDBOX'))"
        )
        assert run_ok(runtime, code).output == "True None kept 1\n"


def test_the_zygote_runs_on_python_3_8(workspace: Path, settings: Settings) -> None:
    oldest = settings.with_overrides({"sandbox.remote_python": _interpreter("3.8"), "sandbox.kill_grace": 1})
    with LocalBackend(str(workspace), settings=oldest) as backend, Runtime(
        backend, settings=oldest, exec_mode="backend"
    ) as runtime:
        first_forked(runtime)
        result = run_ok(
            runtime,
            FORKED
            + "import sys\nfrom hermes_tools import terminal\n"
            "print(FORKED, sys.version_info[:2], terminal('echo hi')['output'])",
        )
        assert result.output == "True (3, 8) hi\n"
        marker = unique_sleep()
        timed_out = runtime.execute(script(SPAWN_AND_WAIT.replace("{marker}", marker)), timeout=2)
        assert timed_out.status == "timeout" and timed_out.output == "started True\n", timed_out
        assert gone_on_backend(backend, marker), remote_pids(backend, marker)
