"""SSH faults, for real: sshd restarted mid-session, hosts that cannot be reached, host keys that
are unknown or changed, logins that are refused. Only loopback addresses are used.

The restart tests get an sshd of their own, so restarting it disturbs no other test.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends import BackendError
from herald.backends.ssh import SSHBackend
from tests.fixtures.sshd import SSHServer, running_sshd

RELAXED = 60.0  # an upper bound for "promptly" that a loaded 2-core machine still meets


@pytest.fixture(scope="module")
def restartable_sshd(sshd: SSHServer) -> Iterator[SSHServer]:
    with running_sshd() as server:  # `sshd` first: it skips the module when sshd cannot run
        yield server


@pytest.fixture
def backend(restartable_sshd: SSHServer, settings: Settings) -> Iterator[SSHBackend]:
    workspace = restartable_sshd.make_workspace()
    backend = SSHBackend(
        restartable_sshd.spec, cwd=workspace, settings=settings.with_overrides(restartable_sshd.overrides())
    )
    yield backend
    backend.close()
    restartable_sshd.remove_workspace(workspace)


def wait_dropped(backend: SSHBackend) -> None:
    """Wait until the client has seen the connection close. (paramiko notices on its own thread;
    a call made in the same instant can still go out on the dying connection, and then reports
    that the connection dropped during it rather than reconnecting first.)"""
    deadline = time.monotonic() + RELAXED
    while backend.transport is not None and backend.transport.is_active() and time.monotonic() < deadline:
        time.sleep(0.01)


def settings_for(server: SSHServer, settings: Settings, **more: Any) -> Settings:
    return settings.with_overrides(server.overrides(**more))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- the connection drops ---------------------------------------------------------------------


def test_restart_mid_session_reconnects_and_says_so(backend: SSHBackend, restartable_sshd: SSHServer) -> None:
    backend.run("mkdir -p sub && cd sub && export KEEP=yes")
    before = backend.transport
    restartable_sshd.restart()
    wait_dropped(backend)
    result = backend.run('pwd; echo "$KEEP"')
    assert (result.output, result.exit_code) == (f"{backend.cwd}\nyes", 0)
    assert backend.cwd.endswith("/sub")
    assert "Reconnected" in result.note and "connection had dropped" in result.note
    assert backend.transport is not before
    assert backend.run("echo steady").note == ""  # said once


def test_a_file_call_after_a_restart_reconnects_and_the_tool_result_says_so(
    backend: SSHBackend, restartable_sshd: SSHServer, settings: Settings
) -> None:
    backend.write_bytes("data.txt", b"kept on the host\n")
    with Runtime(backend, settings=settings, transcript=False) as runtime:
        restartable_sshd.restart()
        wait_dropped(backend)
        result = runtime.execute(
            "from hermes_tools import read_file, terminal\n"
            "first = read_file('data.txt')\n"
            "print(first['content'])\nprint(first.get('note'))\n"
            "print(read_file('data.txt').get('note'))\n"
            "print(terminal('echo ok'))\n"
        )
    assert result.ok, result.error
    content, note, second, terminal = result.output.splitlines()
    assert content == "     1|kept on the host"
    assert "Reconnected" in note
    assert (second, terminal) == ("None", "{'output': 'ok', 'exit_code': 0}")


def test_connection_lost_during_a_command(backend: SSHBackend, restartable_sshd: SSHServer) -> None:
    backend.run("export KEEP=yes")
    flag = Path(backend.cwd, "started")  # the host is this machine
    results: list[Any] = []
    # The command outlasts its timeout, which outlasts the wait below: only the drop can end it in time.
    worker = threading.Thread(
        target=lambda: results.append(backend.run("echo started; touch started; sleep 300", timeout=2 * RELAXED))
    )
    worker.start()
    deadline = time.monotonic() + RELAXED
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    restartable_sshd.restart()
    worker.join(RELAXED)
    assert not worker.is_alive()
    (lost,) = results
    # Either the connection went first (-1), or sshd's SIGTERM reached `sleep` just before
    # (143, bash says "Terminated"): both times the command did not end on its own.
    assert lost.exit_code in (-1, 143) and lost.output.startswith("started")
    assert "dropped during this command" in lost.note and "may or may not have finished" in lost.note
    after = backend.run('echo "$KEEP"')
    assert (after.output, after.exit_code) == ("yes", 0)
    assert "Reconnected" in after.note


def test_host_down_then_back(backend: SSHBackend, restartable_sshd: SSHServer) -> None:
    backend.run("true")
    restartable_sshd.stop()
    wait_dropped(backend)
    try:
        with pytest.raises(BackendError, match="refused the connection"):
            backend.run("true")
        with pytest.raises(BackendError, match="refused the connection"):
            backend.read_bytes("anything")
    finally:
        restartable_sshd.start()
    result = backend.run("echo back")
    assert (result.output, result.exit_code) == ("back", 0)
    assert "Reconnected" in result.note


def test_state_lost_with_the_hosts_temporary_files_is_said(backend: SSHBackend, restartable_sshd: SSHServer) -> None:
    probe = uuid.uuid4().hex
    backend.run(f"mkdir sub && cd sub && export PROBE={probe}")
    state = next(
        p.parent for p in Path("/dev/shm").glob("herald-shell-*/state.sh") if probe in p.read_text(errors="replace")
    )
    restartable_sshd.stop()
    shutil.rmtree(state)  # as a reboot would
    restartable_sshd.start()
    wait_dropped(backend)
    result = backend.run('pwd; echo "${PROBE-gone}"')
    assert (result.output, result.exit_code) == (f"{backend.cwd}\ngone", 0)
    assert backend.cwd.endswith("/sub")
    assert "Reconnected" in result.note and "exported variables were lost" in result.note
    assert backend.run("export AGAIN=1").exit_code == 0 and backend.run('echo "$AGAIN"').output == "1"


# -- unreachable hosts ------------------------------------------------------------------------


def test_closed_port_is_a_clear_error_at_once(sshd: SSHServer, settings: Settings) -> None:
    port = closed_port()
    # A connect timeout well past RELAXED: failing within RELAXED means failing at once.
    tuned = settings_for(sshd, settings, **{"ssh.connect_timeout": 4 * RELAXED})
    backend = SSHBackend(f"ssh://{sshd.user}@127.0.0.1:{port}", settings=tuned)
    started = time.monotonic()
    with pytest.raises(BackendError, match=rf"127.0.0.1 port {port} refused the connection: is sshd running"):
        backend.run("true")
    assert time.monotonic() - started < RELAXED
    backend.close()


def test_silent_server_times_out_within_the_connect_timeout(sshd: SSHServer, settings: Settings) -> None:
    # A listener that accepts TCP but never speaks SSH, as a hung or wrong service would.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        port = silent.getsockname()[1]
        tuned = settings_for(sshd, settings, **{"ssh.connect_timeout": 1.0})
        backend = SSHBackend(f"ssh://{sshd.user}@127.0.0.1:{port}", settings=tuned)
        started = time.monotonic()
        with pytest.raises(
            BackendError, match=r"did not complete the SSH handshake within 1 s \(setting ssh.connect_timeout\)"
        ):
            backend.run("true")
        elapsed = time.monotonic() - started
    assert 0.9 < elapsed < RELAXED
    backend.close()


def test_missing_start_directory(sshd: SSHServer, settings: Settings) -> None:
    with (
        SSHBackend(sshd.spec, cwd="/no/such/dir", settings=settings_for(sshd, settings)) as backend,
        pytest.raises(BackendError, match=re.escape("the directory /no/such/dir does not exist on 127.0.0.1")),
    ):
        backend.run("true")


# -- host keys and logins ---------------------------------------------------------------------


def test_unknown_host_is_refused_naming_the_option(sshd: SSHServer, settings: Settings, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    with (
        SSHBackend(
            sshd.spec, settings=settings_for(sshd, settings, **{"ssh.known_hosts": str(known_hosts)})
        ) as backend,
        pytest.raises(BackendError) as info,
    ):
        backend.run("true")
    message = str(info.value)
    assert f"[127.0.0.1]:{sshd.port} is not in {known_hosts}" in message
    assert 'ssh.host_key_policy = "accept-new"' in message
    assert "SHA256:" in message
    assert not known_hosts.exists()  # nothing recorded in strict mode


def test_accept_new_records_the_key_and_strict_then_trusts_it(
    sshd: SSHServer, settings: Settings, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "ssh" / "known_hosts"
    accept = settings_for(sshd, settings, **{"ssh.known_hosts": str(known_hosts), "ssh.host_key_policy": "accept-new"})
    with SSHBackend(sshd.spec, settings=accept) as backend:
        assert backend.run("echo first").output == "first"
    assert known_hosts.read_text() == f"[127.0.0.1]:{sshd.port} {sshd.host_key}\n"
    assert known_hosts.stat().st_mode & 0o777 == 0o600
    strict = settings_for(sshd, settings, **{"ssh.known_hosts": str(known_hosts)})
    with SSHBackend(sshd.spec, settings=strict) as backend:
        assert backend.run("echo again").output == "again"
    assert len(known_hosts.read_text().splitlines()) == 1  # known now: not appended twice


def test_changed_host_key_is_refused_even_with_accept_new(sshd: SSHServer, settings: Settings, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, blob = Path(f"{other}.pub").read_text().split()[:2]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {kind} {blob}\n")
    for policy in ("strict", "accept-new"):
        tuned = settings_for(sshd, settings, **{"ssh.known_hosts": str(known_hosts), "ssh.host_key_policy": policy})
        with SSHBackend(sshd.spec, settings=tuned) as backend, pytest.raises(BackendError) as info:
            backend.run("true")
        message = str(info.value)
        assert f"the host key of [127.0.0.1]:{sshd.port} has CHANGED" in message
        assert "refused" in message and "ssh-keygen -R" in message
    assert known_hosts.read_text() == f"[127.0.0.1]:{sshd.port} {kind} {blob}\n"  # left alone


def test_a_bad_policy_name_is_a_clear_error(sshd: SSHServer, settings: Settings) -> None:
    with (
        SSHBackend(sshd.spec, settings=settings_for(sshd, settings, **{"ssh.host_key_policy": "yes"})) as backend,
        pytest.raises(BackendError, match=re.escape("ssh.host_key_policy is 'yes'; use 'strict' or 'accept-new'")),
    ):
        backend.run("true")


def test_a_key_the_host_does_not_accept(sshd: SSHServer, settings: Settings, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    tuned = settings_for(sshd, settings, **{"ssh.key_file": str(stranger)})
    with SSHBackend(sshd.spec, settings=tuned) as backend, pytest.raises(BackendError) as info:
        backend.run("true")
    message = str(info.value)
    assert f"{sshd.user}@127.0.0.1:{sshd.port} refused the login" in message
    assert "Set ssh.key_file" in message


def test_a_missing_key_file(sshd: SSHServer, settings: Settings, tmp_path: Path) -> None:
    tuned = settings_for(sshd, settings, **{"ssh.key_file": str(tmp_path / "nope")})
    with SSHBackend(sshd.spec, settings=tuned) as backend, pytest.raises(BackendError, match="does not exist"):
        backend.run("true")


def test_a_passphrase_protected_key_points_to_the_agent(sshd: SSHServer, settings: Settings, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret phrase", "-f", str(locked)], check=True)
    tuned = settings_for(sshd, settings, **{"ssh.key_file": str(locked)})
    with SSHBackend(sshd.spec, settings=tuned) as backend, pytest.raises(BackendError, match=r"passphrase.*ssh-agent"):
        backend.run("true")
