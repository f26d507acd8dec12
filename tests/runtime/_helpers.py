"""Helpers for the runtime tests: look at real processes and descriptors through /proc."""

from __future__ import annotations

import os
import socket
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any

from herald import ExecutionResult, Runtime
from herald._sandbox.procs.trees import children


def script(code: str) -> str:
    return textwrap.dedent(code).strip() + "\n"


def run_ok(runtime: Runtime, code: str, **kwargs: Any) -> ExecutionResult:
    """Run `code` and fail the test (showing the result) unless it succeeded."""
    kwargs.setdefault("timeout", 30)
    result = runtime.execute(script(code), **kwargs)
    assert result.status == "success", result
    return result


def pids_with_marker(marker: str, *, environ: bool = False) -> list[int]:
    """Live processes whose command line (and, with `environ`, environment) contains `marker`
    (zombies count as gone)."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        if environ:
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    cmdline += b"\0" + fh.read()
            except OSError:
                pass
        state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
        if needle in cmdline and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def child_pids(parent: int | None = None) -> list[int]:
    """Direct children of `parent` (default: this process), zombies included."""
    return children().get(os.getpid() if parent is None else parent, [])


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, step: float = 0.02) -> bool:
    """Poll until `predicate()` holds. The deadline only bounds a hang (a loaded machine may be
    slow to get there): no verdict may depend on how fast it holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


# A script's view of itself: under isolation its pids are its PID namespace's, so it also names
# that namespace, and `host_pid` finds the same process as this machine sees it.
IDENTITY = (
    "import os\n"
    "print(os.getpid(), os.getppid(), os.getsid(0), os.readlink('/proc/self/ns/pid'))\n"
)


def host_pid(ns_pid: int, pidns: str) -> int | None:
    """This machine's pid of the process that is `ns_pid` in the PID namespace `pidns`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != pidns:
                continue
            with open(f"/proc/{entry}/status") as f:
                nspid = next(line for line in f if line.startswith("NSpid:")).split()[1:]
        except (OSError, StopIteration):
            continue
        if int(nspid[-1]) == ns_pid:
            return int(entry)
    return None


def rss_bytes() -> int:
    """This process's resident set size."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def thread_count(name: str) -> int:
    """Live threads of this process called `name`."""
    return sum(1 for thread in threading.enumerate() if thread.name == name)


def raw_connect(path: str) -> socket.socket:
    """A bare connection to an RPC socket, to send it what no client would."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)  # only bounds a hang: a server that never hangs up fails the test
    sock.connect(path)
    return sock


def closed_by_peer(sock: socket.socket) -> bool:
    """The server hung up: EOF, or a reset when it closed with our unread bytes still queued."""
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True
