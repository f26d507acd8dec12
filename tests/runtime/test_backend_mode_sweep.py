"""In-backend execution leaves nothing behind for long: a session's directory in the backend is
named after its owner (the connection's sshd there, Herald's process on this machine;
herald/_sandbox/procs/owners.py), and the next session's setup removes those whose owner is gone.
A Runtime whose directory was swept while its connection was down prepares a new one."""

from __future__ import annotations

import os
import re
import signal
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends.base import Backend
from tests.fixtures.sshd import SSHServer

from ._backend_mode import backend_runtime, backend_sandbox, exec_backend
from ._helpers import wait_for

__all__ = ["backend_runtime", "exec_backend"]  # fixtures, used by name

OWNED = re.compile(r"/herald-sandbox-(\d+)-(\d+)-[A-Za-z0-9]+$")


def _listing(backend: Backend, tag: str) -> set[str]:
    found = backend.run(f'ls -d "${{TMPDIR:-/tmp}}"/herald-sandbox-*{tag}* 2>/dev/null; true', timeout=30).output
    return {os.path.basename(line) for line in found.split()}


def _exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return True


def test_the_next_setup_removes_dead_owners_directories_and_only_those(
    exec_backend: Backend, backend_runtime: Callable[..., Runtime]
) -> None:
    tag = uuid.uuid4().hex[:8]
    dead = f"herald-sandbox-999999999-1-dead{tag}"  # a pid above any pid_max: its owner is gone
    other = f"herald-sandbox-other{tag}"  # no owner in the name: never swept
    link = f"herald-sandbox-999999998-1-link{tag}"  # a dead owner's name, but a symlink: left alone
    made = exec_backend.run(
        't="${TMPDIR:-/tmp}"; '
        f'live="herald-sandbox-1-$(cut -d" " -f22 /proc/1/stat)-live{tag}"; '  # pid 1 outlives us all
        f'mkdir -m 700 "$t/{dead}" "$t/{other}" "$t/$live" && touch "$t/{dead}/file" && '
        f'ln -s "$t/{other}" "$t/{link}" && echo "$live"',
        timeout=30,
    )
    assert made.exit_code == 0, made.output
    live = made.output.strip()
    try:
        runtime = backend_runtime()
        result = runtime.execute("print(1)")
        assert result.ok and result.output == "1\n", (result.status, result.error)
        left = _listing(exec_backend, tag)
        assert dead not in left
        assert {other, live, link} <= left
    finally:
        exec_backend.run(f'cd "${{TMPDIR:-/tmp}}" && rm -rf -- {other} {live} {link} {dead}', timeout=30)


def test_a_directory_is_named_after_who_it_lives_with(
    exec_backend: Backend, backend_runtime: Callable[..., Runtime]
) -> None:
    runtime = backend_runtime()
    assert runtime.execute("print(1)").ok
    remote = backend_sandbox(runtime)
    assert remote.remote_dir is not None
    owned = OWNED.search(remote.remote_dir)
    if exec_backend.name == "local":  # this process
        assert owned is not None and int(owned.group(1)) == os.getpid()
    elif exec_backend.name == "ssh":  # the sshd process of the connection
        assert owned is not None
        comm = exec_backend.run(f"cat /proc/{owned.group(1)}/comm", timeout=30).output.strip()
        assert comm.startswith("sshd"), comm
    else:  # a container: no owner there, the container goes with its files
        assert owned is None, remote.remote_dir


def test_a_dropped_connections_directory_is_swept_and_its_runtime_prepares_again(
    sshd: SSHServer, settings: Settings
) -> None:
    from herald.backends.ssh import SSHBackend

    workspace = sshd.make_workspace()
    tuned: Any = settings.with_overrides(sshd.overrides())
    with SSHBackend(sshd.spec, cwd=workspace, settings=tuned) as first, Runtime(
        first, settings=tuned, transcript=False, exec_mode="backend"
    ) as dropped:
        assert dropped.execute("print(1)").ok
        old_dir = backend_sandbox(dropped).remote_dir
        assert old_dir is not None
        owned = OWNED.search(old_dir)
        assert owned is not None, old_dir
        owner = int(owned.group(1))
        os.kill(owner, signal.SIGKILL)  # the connection's sshd: the link is gone
        assert wait_for(lambda: _exited(owner), timeout=60)
        with SSHBackend(sshd.spec, cwd=workspace, settings=tuned) as second, Runtime(
            second, settings=tuned, transcript=False, exec_mode="backend"
        ) as sweeper:
            assert sweeper.execute("print(2)").ok
            gone = second.run(f"test -e {old_dir} && echo there || echo gone", timeout=30).output.strip()
            assert gone == "gone"
        again = dropped.execute("from hermes_tools import terminal\nprint(terminal('echo back')['output'])")
        assert again.ok and again.output.strip() == "back", (again.status, again.error, again.output)
        assert backend_sandbox(dropped).remote_dir not in (None, old_dir)
    sshd.remove_workspace(workspace)


@pytest.fixture(autouse=True)
def _root_kills_sshd(request: pytest.FixtureRequest) -> None:
    if "dropped" in request.node.name and os.geteuid() != 0:
        pytest.skip("killing the connection's sshd process needs root here (it runs as root or the test user)")
