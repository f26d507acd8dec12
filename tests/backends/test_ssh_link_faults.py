"""Faults of the link, for real, through tests/fixtures/latency_proxy.py in front of a real sshd:
a link that goes dark mid-script (black-holed: nothing forwarded, nothing closed), sshd killed
mid-script, a host unreachable when a run starts. In both execution modes a run's timeout holds
within the kill grace + 3 s, close included, and the next run reconnects.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from herald import Runtime, Settings
from herald._sandbox.wire import frames
from herald._sandbox.wire.framing import encode_frame
from herald.backends.ssh import SSHBackend
from herald.runtime.sandbox.backend.mode import BackendMode
from tests.fixtures.latency_proxy import LatencyProxy
from tests.fixtures.sshd import SSHServer, running_sshd

RELAXED = 60.0
GRACE = 1.0  # sandbox.kill_grace for these runs
TIMEOUT = 4.0
SLACK = 2.0  # a loaded 2-core machine's scheduling, on top of the promised bound

# Calls terminal again and again: one of them is in flight when the link goes dark.
BUSY = (
    "from hermes_tools import terminal\n"
    "print('ready', flush=True)\n"
    "for _ in range(10**6):\n"
    "    terminal('true')\n"
)


@pytest.fixture
def proxied(sshd: SSHServer, settings: Settings) -> Iterator[tuple[LatencyProxy, SSHBackend, Settings]]:
    workspace = sshd.make_workspace()
    with LatencyProxy((sshd.host, sshd.port)) as proxy:
        spec, overrides = sshd.through(proxy.port)
        tuned = settings.with_overrides({**overrides, "sandbox.kill_grace": GRACE, "ssh.connect_timeout": 5.0})
        backend = SSHBackend(spec, cwd=workspace, settings=tuned)
        try:
            yield proxy, backend, tuned
        finally:
            proxy.heal()
            backend.close()
    sshd.remove_workspace(workspace)


def _dark_when_ready(proxy: LatencyProxy) -> Callable[[str, bytes], None]:
    def on_output(stream: str, data: bytes) -> None:
        if b"ready" in data:
            proxy.blackhole()

    return on_output


@pytest.mark.parametrize("mode", ["host", "backend"])
def test_a_black_holed_link_keeps_the_timeout_and_the_next_run_reconnects(
    proxied: tuple[LatencyProxy, SSHBackend, Settings], mode: str
) -> None:
    proxy, backend, settings = proxied
    # No warm child in backend mode: see test_sshd_killed_mid_script.
    settings = settings.with_overrides({"sandbox.warm": mode == "host"})
    runtime = Runtime(backend, settings=settings, transcript=False, exec_mode=mode)
    try:
        assert runtime.execute("print('warm')").ok
        started = time.monotonic()
        result = runtime.execute(BUSY, timeout=TIMEOUT, on_output=_dark_when_ready(proxy))
        elapsed = time.monotonic() - started
        assert result.status in ("timeout", "error"), (result.status, result.error)  # found dark, or timed out
        assert elapsed < TIMEOUT + GRACE + 3 + SLACK, elapsed
        proxy.heal()
        again = runtime.execute(
            "from hermes_tools import terminal\nprint(terminal('echo back')['output'])", timeout=RELAXED
        )
        assert again.ok and again.output.strip() == "back", (again.status, again.error)
        proxy.blackhole()
        started = time.monotonic()
        runtime.close()
        backend.close()
        assert time.monotonic() - started < GRACE + 3 + SLACK
    finally:
        runtime.close()


@pytest.fixture(scope="module")
def killable_sshd(sshd: SSHServer) -> Iterator[SSHServer]:
    with running_sshd() as server:  # `sshd` first: it skips the module when sshd cannot run
        yield server


@pytest.mark.parametrize("mode", ["host", "backend"])
def test_sshd_killed_mid_script(killable_sshd: SSHServer, settings: Settings, mode: str) -> None:
    server = killable_sshd
    workspace = server.make_workspace()
    # Warm children on (the default): the one made during the first run waits on the killed
    # connection, and the next run must go to a new one.
    tuned = settings.with_overrides(server.overrides(**{"sandbox.kill_grace": GRACE, "sandbox.warm": True}))
    flag = Path(workspace, "started")  # the host is this machine
    script = (
        "from hermes_tools import terminal\n"
        "result = terminal('touch started; sleep 300', timeout=600)\n"
        "print(result['exit_code'], result.get('note', ''))\n"
    )

    def kill_when_started() -> None:
        deadline = time.monotonic() + RELAXED
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        server.stop()

    with SSHBackend(server.spec, cwd=workspace, settings=tuned) as backend, Runtime(
        backend, settings=tuned, transcript=False, exec_mode=mode
    ) as runtime:
        killer = threading.Thread(target=kill_when_started)
        killer.start()
        try:
            started = time.monotonic()
            result = runtime.execute(script, timeout=RELAXED * 2)
            assert time.monotonic() - started < RELAXED  # not the 300 s sleep, not the timeout
        finally:
            killer.join(RELAXED)
            server.start()
        if mode == "host":  # the script goes on: its tool call says what happened
            assert result.ok, result.error
            assert "dropped during this command" in result.output
        else:  # the script ran over that connection: it is gone with it
            assert result.status == "error" and result.error, result
        again = runtime.execute(
            "from hermes_tools import terminal\nprint(terminal('echo back')['output'])", timeout=RELAXED
        )
        assert again.ok and again.output.strip() == "back", (again.status, again.error)
    server.remove_workspace(workspace)


def test_the_first_run_after_a_dropped_connection_runs(killable_sshd: SSHServer, settings: Settings) -> None:
    """Between two runs the connection's sshd process dies (killed, out of memory): the child
    made ready for the next run waits on a channel that is gone, and the next run must go to a
    new one on a new connection, not be lost with the old. Default settings: warm children and
    the backend's fork server."""
    if os.geteuid() != 0:
        pytest.skip("killing the connection's sshd process needs root here")
    server = killable_sshd
    workspace = server.make_workspace()
    tuned = settings.with_overrides(server.overrides())
    with SSHBackend(server.spec, cwd=workspace, settings=tuned) as backend, Runtime(
        backend, settings=tuned, transcript=False, exec_mode="backend"
    ) as runtime:
        assert runtime.execute("print(1)", timeout=RELAXED).ok
        # The next run's child has said it is ready, on this connection, and nobody has read
        # that yet: what is unread must not make it look alive once its connection is gone.
        assert isinstance(runtime.mode, BackendMode)
        remote = runtime.mode.sandbox
        assert wait_until(lambda: _ready_unread(runtime), RELAXED)
        owned = re.search(r"/herald-sandbox-(\d+)-", remote.remote_dir or "")
        assert owned is not None  # named after the connection's sshd (_sandbox/procs/owners.py)
        os.kill(int(owned.group(1)), signal.SIGKILL)
        # Once the client has seen the connection end (as it has, a moment after, in real life).
        assert wait_until(lambda: backend._conn is None or not backend._conn.alive(), RELAXED)
        again = runtime.execute("print(2)", timeout=RELAXED)
        assert again.ok and again.output == "2\n", (again.status, again.error)
    server.remove_workspace(workspace)


def _ready_unread(runtime: Runtime) -> bool:
    """The waiting child has said it is ready and that frame still sits unread in its exec
    channel (Herald's and paramiko's internals: no public call tells, and reading it, as
    wait_warm does, would hide the fault: a dead child then looks alive to one poll)."""
    child = runtime._children._waiting
    paramiko_channel = getattr(getattr(child, "_channel", None), "_chan", None)
    if paramiko_channel is None:
        return False
    return bytes(paramiko_channel.in_buffer._buffer).endswith(encode_frame({"type": frames.READY}))


def wait_until(done: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_unreachable_at_run_start_in_backend_mode_is_an_error_result(sshd: SSHServer, settings: Settings) -> None:
    workspace = sshd.make_workspace()
    with LatencyProxy((sshd.host, sshd.port)) as proxy:
        proxy.blackhole()  # TCP connects, SSH never answers
        spec, overrides = sshd.through(proxy.port)
        tuned = settings.with_overrides({**overrides, "ssh.connect_timeout": 1.0})
        with SSHBackend(spec, cwd=workspace, settings=tuned) as backend, Runtime(
            backend, settings=tuned, transcript=False, exec_mode="backend"
        ) as runtime:
            result = runtime.execute("print('never')", timeout=RELAXED)
            assert result.status == "error"
            assert (
                f"127.0.0.1 port {proxy.port}" in result.error and "did not complete the SSH handshake" in result.error
            )
            assert "reachable" in result.error and "next run" in result.error
            proxy.heal()
            again = runtime.execute("print('reached')", timeout=RELAXED)
            assert again.ok and again.output.strip() == "reached", (again.status, again.error)
    sshd.remove_workspace(workspace)
