"""SSH host mode at <= 2 round trips per file operation, counted rather than timed: the SFTP
layer counts the requests it sends and the batches it waits for (a batch is one round trip).
Also: concurrent file calls use SFTP sessions of their own, and the session's private state
directory is private, removed on close, and swept by a later connection when it leaked.
"""

from __future__ import annotations

import os
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from herald import Runtime, Settings
from herald.backends.ssh import SSHBackend
from tests.fixtures.latency_proxy import LatencyProxy
from tests.fixtures.sshd import SSHServer

RELAXED = 60.0


@pytest.fixture
def backend(sshd: SSHServer, settings: Settings) -> Iterator[SSHBackend]:
    workspace = sshd.make_workspace()
    with SSHBackend(sshd.spec, cwd=workspace, settings=settings.with_overrides(sshd.overrides())) as backend:
        backend.write_bytes("warm.txt", b"first write and read of a connection learn its server\n")
        backend.read_bytes("warm.txt")
        backend.write_bytes("warm.txt", b"...and the second confirms it\n")
        yield backend
    sshd.remove_workspace(workspace)


def counted(backend: SSHBackend, action: Callable[[], object]) -> tuple[int, int]:
    """(requests, round trips) that `action()` cost."""
    before = backend.sftp_counts()
    action()
    after = backend.sftp_counts()
    return after[0] - before[0], after[1] - before[1]


def test_backend_file_calls_take_at_most_two_round_trips(backend: SSHBackend) -> None:
    backend.write_bytes("small.txt", b"hello\n" * 100)
    backend.run("true")  # forget what the write saw
    # read_file's calls: a stat, then the read (open + fstat + reads pipelined, close not awaited)
    assert counted(backend, lambda: backend.stat("small.txt"))[1] == 1
    assert counted(backend, lambda: backend.read_bytes("small.txt")) == (4, 1)
    backend.run("true")
    assert counted(backend, lambda: backend.read_bytes("small.txt"))[1] == 2  # looks first when it saw nothing
    # write: lstat + temp open + write + close, then chmod + rename (+ an lstat of the result)
    assert counted(backend, lambda: backend.write_bytes("small.txt", b"changed\n"))[1] == 2
    assert (
        counted(backend, lambda: backend.write_bytes("new/dir/file.txt", b"new\n"))[1] <= 8
    )  # parents looked for and made
    assert counted(backend, lambda: backend.write_bytes("new/dir/other.txt", b"new\n"))[1] == 2
    assert backend.read_bytes("new/dir/file.txt") == b"new\n"


def test_large_and_exact_chunk_sizes_read_whole_without_a_read_for_the_end(backend: SSHBackend) -> None:
    for size in (0, 1, 32767, 32768, 32769, 300_000):
        data = os.urandom(size)
        backend.write_bytes("blob.bin", data)  # what it wrote stands for the look before a read
        requests, trips = counted(backend, lambda: backend.read_bytes("blob.bin"))
        assert trips == 1, size
        assert requests == 3 + size // 32768 + 1, size  # open, fstat, reads up to size + 1, close
        assert backend.read_bytes("blob.bin") == data


def test_file_tools_round_trips_from_a_script(backend: SSHBackend, settings: Settings) -> None:
    backend.write_bytes("mod.py", b"def old_name():\n    return 1\n")
    with Runtime(backend, settings=settings, transcript=False) as runtime:
        def run(code: str) -> tuple[int, int]:
            # A command first: what the backend saw of the files is forgotten, the tools look again.
            runtime.execute("from hermes_tools import terminal\nterminal('true')")
            before = backend.sftp_counts()
            result = runtime.execute("from hermes_tools import read_file, write_file, patch\n" + code)
            assert result.ok, result.error
            after = backend.sftp_counts()
            return after[0] - before[0], after[1] - before[1]

        assert run("read_file('mod.py')")[1] == 2  # stat + read
        assert run("write_file('out.py', 'x = 1\\n')")[1] == 3  # the tool's stat + write
        assert run("patch('mod.py', 'old_name', 'new_name')")[1] == 4  # stat + read + write
        # In a row, what a call saw answers the next call's stat: read, then patch and verify.
        chain = "read_file('mod.py')\npatch('mod.py', 'new_name', 'newer_name')\nread_file('mod.py')"
        assert run(chain)[1] == 2 + 3 + 1
    assert Path(backend.cwd, "mod.py").read_text() == "def newer_name():\n    return 1\n"  # the host is this machine


def test_the_workspace_check_costs_no_round_trip_of_its_own(backend: SSHBackend, settings: Settings) -> None:
    """The check resolves the path on the host (REALPATH) in the same flight as the stat the
    tool makes first, and a read or write of the checked path verifies it in its own first
    flight: the same round trips as with no check at all (profile full). Through a link, fewer:
    a checked write goes straight where the link leads (unchecked, it learns that it is a link
    from its first flight and starts again there)."""
    backend.write_bytes("mod.py", b"def old_name():\n    return 1\n")
    backend.run("ln -s mod.py alias.py")
    chain = ("read_file('{0}')\npatch('{0}', 'old_name', 'new_name')\nread_file('{0}')\n"
             "patch('{0}', 'new_name', 'old_name')")
    trips = {}
    for profile in ("full", "workspace-write"):
        with Runtime(backend, settings=settings, policy=profile, transcript=False) as runtime:
            for path in ("mod.py", "alias.py"):
                runtime.execute("from hermes_tools import terminal\nterminal('true')")  # nothing seen
                before = backend.sftp_counts()
                result = runtime.execute("from hermes_tools import read_file, patch\n" + chain.format(path))
                assert result.ok, result.error
                trips[profile, path] = backend.sftp_counts()[1] - before[1]
    assert trips["workspace-write", "mod.py"] == trips["full", "mod.py"] == 2 + 3 + 1 + 3, trips
    assert trips["workspace-write", "alias.py"] == 2 + 3 + 1 + 3 < trips["full", "alias.py"], trips


def test_concurrent_file_calls_use_sessions_of_their_own(sshd: SSHServer, settings: Settings) -> None:
    workspace = sshd.make_workspace()
    with LatencyProxy((sshd.host, sshd.port)) as proxy:
        spec, overrides = sshd.through(proxy.port)
        tuned = settings.with_overrides({**overrides, "ssh.connect_timeout": 3.0})
        with SSHBackend(spec, cwd=workspace, settings=tuned) as backend:
            backend.write_bytes("f.txt", b"data\n")
            first = backend.transport
            proxy.blackhole()  # every call now waits for an answer: they can only pile up in parallel
            errors: list[Exception] = []

            def read() -> None:
                try:
                    backend.read_bytes("f.txt")
                except Exception as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=read) for _ in range(4)]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + RELAXED
            while backend.sftp_sessions()[1] < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert backend.sftp_sessions() == (4, 4)
            for thread in threads:
                thread.join(RELAXED)
            assert len(errors) == 4 and all("answer" in str(e) for e in errors), errors
            proxy.heal()
            assert backend.read_bytes("f.txt") == b"data\n"  # a new connection
            assert backend.transport is not first
    sshd.remove_workspace(workspace)


def _state_dir_holding(secret: str) -> Path:
    """The session state directory whose state.sh holds `secret` (other sessions may run too)."""
    for state in [*Path("/dev/shm").glob("herald-shell-*/state.sh"), *Path("/tmp").glob("herald-shell-*/state.sh")]:
        try:
            if secret in state.read_text(errors="replace"):
                return state.parent
        except OSError:
            continue
    raise AssertionError(f"no state directory holds {secret}")


def test_state_dir_is_private_removed_on_close_and_swept_when_leaked(sshd: SSHServer, settings: Settings) -> None:
    workspace = sshd.make_workspace()
    plain = settings.with_overrides(sshd.overrides())
    secret = uuid.uuid4().hex
    with SSHBackend(sshd.spec, cwd=workspace, settings=plain) as backend:
        backend.run(f"export HERALD_TEST_SECRET={secret}")
        mine = _state_dir_holding(secret)
        assert stat.S_IMODE(mine.stat().st_mode) == 0o700
        assert stat.S_IMODE((mine / "state.sh").stat().st_mode) == 0o600
    assert not mine.exists()  # removed on close

    with LatencyProxy((sshd.host, sshd.port)) as proxy:
        spec, overrides = sshd.through(proxy.port)
        leaky = SSHBackend(spec, cwd=workspace, settings=settings.with_overrides(overrides))
        leaky.run(f"export HERALD_TEST_SECRET={secret}")
        leaked = _state_dir_holding(secret)
        owner = int((leaked / "owner").read_text())
        proxy.blackhole()
        started = time.monotonic()
        leaky.close()  # the host cannot be reached: the directory stays
        assert time.monotonic() - started < RELAXED
        assert leaked.exists()
        proxy.drop_all()  # the server side of that connection ends now
        deadline = time.monotonic() + RELAXED
        while Path(f"/proc/{owner}").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    with SSHBackend(sshd.spec, cwd=workspace, settings=plain) as backend:
        backend.run("true")  # the next connection sweeps it
        assert not leaked.exists()
    sshd.remove_workspace(workspace)


def test_closing_a_process_that_ended_sends_no_kill(sshd: SSHServer, settings: Settings) -> None:
    # Its end of output and its exit status arrive one after the other: closing in between must
    # wait for the status, not open a channel to kill a tree that is gone (a round trip or more).
    workspace = sshd.make_workspace()
    with LatencyProxy((sshd.host, sshd.port)) as proxy:
        spec, overrides = sshd.through(proxy.port)
        with SSHBackend(spec, cwd=workspace, settings=settings.with_overrides(overrides)) as backend:
            backend.run("true")
            for _ in range(20):
                channel = backend.open_channel(["/bin/sh", "-c", "echo hi"])
                output = b""
                deadline = time.monotonic() + RELAXED
                while time.monotonic() < deadline:
                    chunk = channel.recv(deadline - time.monotonic())
                    if chunk == b"":
                        break
                    output += chunk or b""
                assert output == b"hi\n"
                before = proxy.counted()[0]
                channel.close()
                # The channel's close (and a window adjust); a kill would open a channel and run
                # a command: 4 or more. (Without waiting for the status: 4-6 in most of 20 runs.)
                assert proxy.counted()[0] - before <= 2
                assert channel.returncode == 0
    sshd.remove_workspace(workspace)
