"""Herald's process guards itself and nothing a run starts outlives it, nor a killed `herald exec`.

Attacks run from a script through `herald exec`, as root (this process) and as a generated
non-root user: reading Herald's environment and tracing it; leaving processes behind through
`terminal` (`setsid -f`, `nohup &`); killing herald with SIGKILL or SIGTERM mid-run. Processes
are found on this machine by a unique command line; deadlines only bound a hang.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from herald import Runtime
from tests.fixtures.users import REPO, User
from tests.runtime._helpers import wait_for
from tests.security.test_run_containment import _alive_with, _escapes, _marker

SECRET = "sk-ant-containment-test-" + uuid.uuid4().hex

# Reads every process's environ and memory maps it can, and tries to ptrace-attach the `herald
# exec` processes it descends from (its own Herald): prints what succeeded. (Matching the words
# anywhere also hit other test processes, e.g. a parallel worker's `python -c "import herald ...
# sys.executable"`, left stopped; so did attaching another test's `herald exec` of the same user
# in the instant before it made itself untraceable, which then hung.)
PROBE = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
SECRET = "SECRET_VALUE"
ancestors, pid = set(), os.getppid()
while pid > 1 and pid not in ancestors:
    ancestors.add(pid)
    try:
        pid = int(open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        break
for entry in os.listdir("/proc"):
    if not entry.isdigit() or int(entry) == os.getpid():
        continue
    pid = int(entry)
    try:
        if SECRET.encode() in open("/proc/%d/environ" % pid, "rb").read():
            print("LEAK environ", pid)
    except OSError:
        pass
    try:
        cmdline = open("/proc/%d/cmdline" % pid, "rb").read()
    except OSError:
        continue
    args = cmdline.split(b"\0")  # whole arguments: a `herald exec`, not any process naming both words
    if pid in ancestors and b"exec" in args and any(a == b"herald" or a.endswith(b"/herald") for a in args):
        if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
            print("ATTACHED", pid)
            libc.ptrace(17, pid, 0, 0)  # PTRACE_DETACH: let it finish
        try:
            open("/proc/%d/mem" % pid, "rb").read(1)
            print("MEM", pid)
        except OSError:
            pass
print("probed")
'''.replace("SECRET_VALUE", SECRET)


@pytest.fixture(params=["root", "nonroot"])
def attacker(request: pytest.FixtureRequest, nonroot: User, tmp_path: Path) -> User:
    if request.param == "nonroot":
        return nonroot
    if os.geteuid() != 0:
        pytest.skip("not running as root")
    return User("root", 0, 0, str(tmp_path), sys.executable, str(REPO))  # a home of its own: data dir


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_the_script_cannot_read_or_trace_herald(attacker: User, isolation: str) -> None:
    if isolation == "none" and attacker.uid == 0:
        pytest.skip("without a sandbox a root script holds CAP_SYS_PTRACE: nothing stops it")
    env = {"ANTHROPIC_API_KEY": SECRET, "FIRECRAWL_API_KEY": SECRET, "HERALD_SANDBOX_ISOLATION": isolation,
           "HERALD_SANDBOX_FORK_SERVER": "false"}  # spawned: Herald is the script's parent
    done = attacker.herald("exec", "-", env=env, input=PROBE)
    assert "probed" in done.stdout, done
    assert SECRET not in done.stdout + done.stderr
    for word in ("LEAK", "ATTACHED", "MEM"):
        assert word not in done.stdout, done.stdout


@pytest.mark.parametrize("ending", ["success", "timeout", "interrupt"])
def test_terminal_commands_do_not_outlive_their_command(
    make_runtime: Callable[..., Runtime], ending: str
) -> None:
    runtime = make_runtime()
    marker = _marker()
    code = (
        "from hermes_tools import terminal\n"
        f"terminal('setsid -f sleep {marker}; (nohup setsid sleep {marker} >/dev/null 2>&1 &); echo ok')\n"
        f"terminal('(sleep {marker} &); setsid -f sleep {marker}; echo ok')\n"
        f"terminal('sleep {marker} & sleep {marker} & disown; echo ok')\n"
        "print('started', flush=True)\n"
    ) + ("" if ending == "success" else f"terminal('setsid -f sleep {marker}; sleep 300')\n")
    if ending == "timeout":
        # The command's own timeout is cut to the run's: it returns at the deadline itself, and
        # the script must not then end first (a race the run's kill loses under load).
        code += "import time\ntime.sleep(300)\n"
    if ending == "interrupt":
        def interrupt_once_started() -> None:
            wait_for(lambda: len(_alive_with(marker)) >= 1, timeout=60)
            runtime.interrupt()

        threading.Thread(target=interrupt_once_started, daemon=True).start()
    result = runtime.execute(code, timeout=5 if ending == "timeout" else 120)
    assert result.status == {"success": "success", "timeout": "timeout", "interrupt": "interrupted"}[ending], result
    assert wait_for(lambda: not _alive_with(marker), timeout=30), f"left running: {_alive_with(marker)}"
    assert runtime.execute("print(1)").ok  # the session goes on


def _owned_dirs(pid: int) -> list[str]:
    return glob.glob(f"/tmp/herald-*-{pid}-*") + glob.glob(f"/dev/shm/herald-*-{pid}-*")


def _processes_naming(pid: int) -> list[int]:
    """Live processes of a herald run: its shell guard names herald's pid in its command line."""
    return [p for p in _alive_with(f"\0{pid}\0") if p != pid]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killed_herald_leaves_nothing_behind(attacker: User, sig: int) -> None:
    marker = _marker()
    script = _escapes(marker) + (
        "from hermes_tools import terminal\n"
        f"terminal('setsid -f sleep {marker}; sleep {marker}')\n"
    )
    proc = subprocess.Popen(attacker.argv([attacker.python, "-m", "herald", "exec", "-"]), env=attacker.env(),
                            cwd=attacker.home, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdin is not None
        proc.stdin.write(script)
        proc.stdin.close()
        herald = proc.pid  # setpriv execs herald in its own process
        assert wait_for(lambda: len(_alive_with(marker)) >= 5, timeout=60), _alive_with(marker)
        assert _processes_naming(herald), "the shell guard names herald's pid"
        if sig == signal.SIGKILL:
            assert _owned_dirs(herald), "herald's dirs are named after it"
        os.kill(herald, sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert wait_for(lambda: not _alive_with(marker), timeout=30), f"left running: {_alive_with(marker)}"
    assert wait_for(lambda: not _processes_naming(herald), timeout=30), _processes_naming(herald)
    after = attacker.herald("exec", "-", input="print('next')")
    assert "next" in after.stdout, after
    assert not _owned_dirs(herald), _owned_dirs(herald)
