"""What only the SSH backend has: the spec, one connection with TCP_NODELAY, the remote state
directory, channels whose close stops the remote process tree, `~` paths, and the runtime and
CLI on top of it. (What every backend shares is in conformance/; faults in test_ssh_faults.py.)

The sshd runs on this machine, so the remote processes are looked at here, in /proc.
"""

from __future__ import annotations

import os
import pwd
import socket
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from herald import Runtime, Settings
from herald._sandbox.procs.trees import alive
from herald.backends import Backend, BackendError
from herald.backends.base import Channel
from herald.backends.factory import BackendSpecError, open_backend
from herald.backends.ssh import SSHBackend, SSHTarget, parse_ssh_spec
from herald.cli import main as herald_main
from tests.fixtures.sshd import SSHServer


def wait_gone(pids: list[int], timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(map(alive, pids)):
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


@pytest.fixture
def workspace_on_host(sshd: SSHServer) -> Iterator[str]:
    path = sshd.make_workspace()
    yield path
    sshd.remove_workspace(path)


# -- the spec ---------------------------------------------------------------------------------


def test_spec_parsing() -> None:
    assert parse_ssh_spec("ssh://deploy@build.example.com") == SSHTarget("build.example.com", "deploy", 22, "")
    assert parse_ssh_spec("ssh://me@10.0.0.5:2222/srv/app/") == SSHTarget("10.0.0.5", "me", 2222, "/srv/app")
    assert parse_ssh_spec("ssh://me@[::1]:2200") == SSHTarget("::1", "me", 2200, "")
    assert parse_ssh_spec("ssh://box").user == pwd.getpwuid(os.getuid()).pw_name
    assert str(parse_ssh_spec("ssh://me@[::1]:2200")) == "me@[::1]:2200"
    assert parse_ssh_spec("ssh://me@box").known_hosts_name == "box"
    assert parse_ssh_spec("ssh://me@box:2222").known_hosts_name == "[box]:2222"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("ssh://", "names no host"),
        ("ssh://me@box:99999", "port must be a number"),
        ("ssh://me:secret@box", "passwords are not accepted"),
        ("ssh://me@box?x=1", "takes no '?'"),
    ],
)
def test_bad_specs_are_clear_errors(spec: str, message: str, settings: Settings) -> None:
    with pytest.raises(BackendSpecError, match=message):
        open_backend(spec, settings=settings)


def test_factory_opens_lazily(settings: Settings) -> None:
    # Nothing listens on a fresh closed port, yet opening only records where to go.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = open_backend(f"ssh://nobody@127.0.0.1:{port}/srv", settings=settings)
    assert isinstance(backend, SSHBackend)  # (isinstance of the Backend protocol would read cwd: connect)
    assert (backend.name, backend.target.port, backend.target.directory) == ("ssh", port, "/srv")
    assert backend.transport is None
    backend.close()


# -- one connection, a persistent shell, a private state directory ----------------------------


def test_one_connection_with_tcp_nodelay(ssh_backend: SSHBackend) -> None:
    assert isinstance(ssh_backend, Backend)
    transport = ssh_backend.transport
    assert transport is not None
    assert transport.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    assert transport.sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    ssh_backend.write_bytes("f", b"x")
    ssh_backend.read_bytes("f")
    channel = ssh_backend.open_channel(["true"])
    channel.close()
    ssh_backend.run("echo again")
    assert ssh_backend.transport is transport  # commands, files and channels share it


def test_session_starts_in_the_given_directory_and_knows_home(ssh_backend: SSHBackend, sshd: SSHServer) -> None:
    assert ssh_backend.cwd.startswith(f"{sshd.home}/work-")
    assert ssh_backend.home == sshd.home
    assert ssh_backend.run("pwd; whoami").output == f"{ssh_backend.cwd}\n{sshd.user}"


def test_default_directory_is_home(sshd: SSHServer, settings: Settings) -> None:
    with SSHBackend(sshd.spec, settings=settings.with_overrides(sshd.overrides())) as backend:
        assert backend.cwd == sshd.home
        assert backend.run("pwd").output == sshd.home


def test_state_file_is_in_a_private_directory_in_dev_shm(
    sshd: SSHServer, settings: Settings, workspace_on_host: str
) -> None:
    probe = uuid.uuid4().hex
    backend = SSHBackend(sshd.spec, cwd=workspace_on_host, settings=settings.with_overrides(sshd.overrides()))
    backend.run(f"export HERALD_PROBE={probe}")
    holders = [
        p.parent for p in Path("/dev/shm").glob("herald-shell-*/state.sh") if probe in p.read_text(errors="replace")
    ]
    assert len(holders) == 1
    info = holders[0].stat()
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == pwd.getpwnam(sshd.user).pw_uid
    backend.close()
    assert not holders[0].exists()  # removed on close


def test_home_paths(ssh_backend: SSHBackend, sshd: SSHServer) -> None:
    name = f"herald-home-{uuid.uuid4().hex[:8]}"
    try:
        ssh_backend.write_bytes(f"~/{name}/f.txt", b"at home")
        assert Path(sshd.home, name, "f.txt").read_bytes() == b"at home"
        assert ssh_backend.read_bytes(f"~/{name}/f.txt") == b"at home"
        info = ssh_backend.stat(f"~/{name}")
        assert info is not None and info.is_dir and info.path == f"{sshd.home}/{name}"
    finally:
        ssh_backend.run(f"rm -rf ~/{name}")


# -- channels ---------------------------------------------------------------------------------


def read_until(channel: Channel, wanted: bytes, timeout: float = 60) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout
    while wanted not in data and time.monotonic() < deadline:
        chunk = channel.recv(deadline - time.monotonic())
        if chunk == b"":
            break
        data += chunk or b""
    return data


def test_open_channel_runs_any_command_with_stdin_and_merged_output(ssh_backend: SSHBackend) -> None:
    ssh_backend.run("mkdir sub")
    channel = ssh_backend.open_channel(["sh", "-c", "pwd; echo err >&2; exec cat"], cwd="sub")
    assert read_until(channel, b"err\n") == f"{ssh_backend.cwd}/sub\nerr\n".encode()
    channel.send(b"echoed back\n")
    assert read_until(channel, b"back\n") == b"echoed back\n"
    assert channel.recv(0.05) is None  # nothing more yet
    assert channel.returncode is None
    channel.close()


def test_channel_reports_the_exit_status(ssh_backend: SSHBackend) -> None:
    channel = ssh_backend.open_channel(["sh", "-c", "echo bye; exit 5"])
    assert read_until(channel, b"never") == b"bye\n"
    assert channel.recv(1) == b""
    assert channel.returncode == 5
    channel.close()
    missing = ssh_backend.open_channel(["no-such-program-herald"])
    output = read_until(missing, b"never")
    assert b"no-such-program-herald" in output and b"not found" in output
    assert missing.returncode == 127
    missing.close()


def test_what_a_process_changes_after_a_look_is_seen_once_it_ends(ssh_backend: SSHBackend) -> None:
    """A stat made while a process started on the host runs is not reused after it ends: it
    may have changed the path right after the look (a backend-mode script removing a file)."""
    ssh_backend.write_bytes("doomed.txt", b"x")
    channel = ssh_backend.open_channel(["sh", "-c", "read go; rm -f doomed.txt; echo gone"])
    assert ssh_backend.stat("doomed.txt") is not None  # looked at while the process runs
    channel.send(b"go\n")
    assert read_until(channel, b"gone\n") == b"gone\n"
    assert channel.recv(10) == b""
    channel.close()
    assert ssh_backend.stat("doomed.txt") is None
    assert ssh_backend.stat("doomed.txt") is None  # and what is seen now is kept: still nothing


def test_channel_close_stops_the_remote_process_tree(ssh_backend: SSHBackend) -> None:
    channel = ssh_backend.open_channel(
        ["sh", "-c", "sleep 1000 & echo $!; setsid sh -c 'echo $$; exec sleep 1000' & sleep 1000"]
    )
    lines = read_until(channel, b"\n")
    if lines.count(b"\n") < 2:  # the two lines may come in one read or in two
        lines += read_until(channel, b"\n")
    pids = [int(line) for line in lines.split()]
    assert len(pids) == 2 and all(map(alive, pids))
    started = time.monotonic()
    channel.close()
    assert wait_gone(pids) == []
    assert time.monotonic() - started < 60  # generous (a loaded machine): not the 1000 s
    channel.close()  # idempotent


def test_close_stops_the_shell_and_its_background_jobs(
    sshd: SSHServer, settings: Settings, workspace_on_host: str
) -> None:
    backend = SSHBackend(sshd.spec, cwd=workspace_on_host, settings=settings.with_overrides(sshd.overrides()))
    pids = [int(p) for p in backend.run("sleep 1000 & echo $!; echo $$").output.split()]
    assert all(map(alive, pids))
    backend.close()
    backend.close()
    assert wait_gone(pids) == []
    with pytest.raises(BackendError, match="closed"):
        backend.run("true")


def test_a_missing_shell_is_a_clear_error(sshd: SSHServer, settings: Settings, workspace_on_host: str) -> None:
    tuned = settings.with_overrides(sshd.overrides(**{"terminal.shell": "/no/such/bash"}))
    with (
        SSHBackend(sshd.spec, cwd=workspace_on_host, settings=tuned) as backend,
        pytest.raises(
            BackendError, match=r"could not start the shell '/no/such/bash' on .* \(setting terminal.shell\)"
        ),
    ):
        backend.run("true")


# -- on top: the runtime and the CLI ----------------------------------------------------------


def test_scripts_use_the_ssh_backend(ssh_backend: SSHBackend, settings: Settings) -> None:
    ssh_backend.write_bytes("data.txt", b"alpha\nbeta\n")
    with Runtime(ssh_backend, settings=settings, transcript=False) as runtime:
        result = runtime.execute(
            "from hermes_tools import read_file, patch, terminal, search_files\n"
            "print(read_file('data.txt')['content'])\n"
            "patch('data.txt', 'beta', 'gamma')\n"
            "print(terminal('cat data.txt; whoami')['output'])\n"
            "print(search_files('gam', target='content')['matches'][0]['line'])\n"
        )
    assert result.ok, result.error
    assert result.output == "     1|alpha\n     2|beta\nalpha\ngamma\nheraldtest\n2\n".replace(
        "heraldtest", ssh_backend.target.user
    )


def test_cli_exec_with_backend_flag(
    sshd: SSHServer, workspace_on_host: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[ssh]\nkey_file = "{sshd.key_file}"\n'
        f'known_hosts = "{sshd.known_hosts}"\nuse_agent = false\n'
    )
    script = tmp_path / "script.py"
    script.write_text("from hermes_tools import terminal\nprint(terminal('pwd; whoami')['output'])\n")
    code = herald_main(
        ["--config", str(config), "exec", str(script), "--backend", sshd.spec, "--cwd", workspace_on_host]
    )
    assert code == 0
    assert capsys.readouterr().out == f"{workspace_on_host}\n{sshd.user}\n"


def test_cli_exec_with_an_unreachable_host_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = tmp_path / "script.py"
    script.write_text("print('never runs')\n")
    config = tmp_path / "config.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\nbackend = "ssh://me@127.0.0.1:{port}"\n')
    assert herald_main(["--config", str(config), "exec", str(script)]) == 1
    captured = capsys.readouterr()
    assert "never runs" not in captured.out
    message = " ".join(captured.err.split())  # rich wraps long lines
    assert "the ssh backend is not usable" in message and "refused the connection" in message


def test_doctor_checks_the_configured_ssh_host(
    sshd: SSHServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\nbackend = "{sshd.spec}"\n[ssh]\nkey_file = "{sshd.key_file}"\n'
        f'known_hosts = "{sshd.known_hosts}"\nuse_agent = false\n'
    )
    herald_main(["--config", str(config), "doctor"])
    out = capsys.readouterr().out
    ssh_row = next(line for line in out.splitlines() if "backend ssh" in line)
    assert "ok" in ssh_row and "reachable" in ssh_row
