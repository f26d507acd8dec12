"""Nothing a script starts outlives its run: daemons, setsid children and processes forked from a
SIGTERM handler are gone after success, timeout and interrupt, with and without the fork server
and isolation. Each process is found on this machine by a unique command line."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable

import pytest

from herald import Runtime
from herald._sandbox.procs.trees import alive
from tests.runtime._helpers import host_pid, wait_for


def _marker() -> str:
    return f"1000.{uuid.uuid4().int % 10**9:09d}"


def _alive_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def _escapes(marker: str) -> str:
    """A script that hides `sleep MARKER` processes every way a process can leave its parent."""
    return (
        "import os, signal, subprocess, sys, time\n"
        f"M = {marker!r}\n"
        "def daemon():\n"  # the classic double fork + setsid
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        "            os.execvp('sleep', ['sleep', M])\n"
        "        os._exit(0)\n"
        "daemon()\n"
        "subprocess.Popen(['setsid', 'sleep', M])\n"
        "subprocess.Popen(['sleep', M], start_new_session=True)\n"
        "def on_term(*_):\n"  # a last child forked while being killed
        "    subprocess.Popen(['sleep', M], start_new_session=True)\n"
        "    os._exit(143)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "time.sleep(0.5)\n"
        "print('started', flush=True)\n"
    )


# Without isolation and without the fork server, a process forked from the script's own SIGTERM
# handler as it dies lands on the spawned run's keeper (_sandbox/procs/reaper.py), not on init.
@pytest.mark.parametrize("overrides", [
    {}, {"sandbox.fork_server": False}, {"sandbox.isolation": "none"},
    {"sandbox.isolation": "none", "sandbox.fork_server": False},
], ids=["defaults", "spawned", "no-isolation", "spawned-no-isolation"])
@pytest.mark.parametrize("ending", ["success", "timeout", "interrupt"])
def test_nothing_the_script_started_outlives_the_run(
    make_runtime: Callable[..., Runtime], overrides: dict[str, object], ending: str
) -> None:
    runtime = make_runtime(overrides=overrides)
    runtime.wait_warm()
    marker = _marker()
    code = _escapes(marker) + ("" if ending == "success" else "time.sleep(300)\n")
    if ending == "interrupt":
        started = threading.Event()
        def interrupt_once_started() -> None:
            wait_for(lambda: len(_alive_with(marker)) >= 3, timeout=60)
            started.set()
            runtime.interrupt()

        timer = threading.Thread(target=interrupt_once_started, daemon=True)
        timer.start()
    result = runtime.execute(code, timeout=3 if ending == "timeout" else 120)
    assert result.status == ending + ("ed" if ending == "interrupt" else "") if ending != "success" else result.ok, (
        result
    )
    assert wait_for(lambda: not _alive_with(marker), timeout=30), \
        f"left running after {ending}: {_alive_with(marker)} ({result.isolation})"


FORGED_EXIT = (
    "import fcntl, json, stat, struct\n"
    "for fd in range(3, 256):\n"  # the control pipe: the one write-only pipe past stderr
    "    try:\n"
    "        if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:\n"
    "            break\n"
    "    except OSError:\n"
    "        pass\n"
    "subprocess.Popen(['sleep', M])\n"  # in the script's own process group
    "print('pid', os.getpid(), os.readlink('/proc/self/ns/pid'), flush=True)\n"
    "body = json.dumps({'type': 'exit', 'exit_code': 7}).encode()\n"
    "os.write(fd, struct.pack('>I', len(body)) + body)\n"
    "time.sleep(300)\n"
)


@pytest.mark.parametrize("overrides", [{}, {"sandbox.isolation": "none"}], ids=["defaults", "no-isolation"])
def test_a_forged_exit_report_ends_the_run_and_everything_it_started(
    make_runtime: Callable[..., Runtime], overrides: dict[str, object]
) -> None:
    """A forked script's report that it is leaving ends its run at once (host_child.py): one it
    forges while it goes on running ends only its own run, as sys.exit would, and neither it
    nor anything it started, in its group or escaped from it, outlives that run."""
    runtime = make_runtime(overrides=overrides)
    marker = _marker()
    result = runtime.execute(_escapes(marker) + FORGED_EXIT, timeout=120)
    assert result.exit_code == 7 and result.duration_seconds < 100, result
    ns_pid, pidns = result.output.split("pid ", 1)[1].split()
    script = host_pid(int(ns_pid), pidns)
    assert script is None or wait_for(lambda: not alive(script)), "the script outlived its forged exit"
    assert wait_for(lambda: not _alive_with(marker), timeout=30), f"left running: {_alive_with(marker)}"
