"""The Docker backend against a real dockerd and the locally built test image (tests/fixtures/dockerd.py).

What every backend must do is in the shared conformance suite (`any_backend`); here is what is
Docker's own: the container's secure defaults, one exec socket for the whole session, files that
only exist inside the container (tmpfs /tmp), labels, reuse, the reaper and clean removal.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from herald.backends import Backend, BackendError
from herald.backends.base import Channel
from herald.backends.docker import DockerBackend, engine
from herald.backends.docker.channel import ExecChannel
from tests.fixtures.dockerd import MakeDockerBackend

# Capability bits (linux/capability.h) of the default docker.cap_add.
CHOWN, DAC_OVERRIDE, FOWNER = 1 << 0, 1 << 1, 1 << 3


def inspect(backend: DockerBackend) -> dict[str, Any]:
    backend.run("true")  # the container exists from the first call on
    found: dict[str, Any] = backend._api.inspect_container(backend.container_id)
    return found


def test_is_a_backend_starting_in_workdir(docker_backend: DockerBackend) -> None:
    assert isinstance(docker_backend, Backend)
    assert docker_backend.name == "docker"
    assert docker_backend.cwd == "/workspace"
    assert docker_backend.run("pwd").output == "/workspace"


def test_container_has_secure_defaults(docker_backend: DockerBackend) -> None:
    info = inspect(docker_backend)
    host = info["HostConfig"]
    assert host["CapDrop"] == ["ALL"]
    assert sorted(host["CapAdd"]) == ["CHOWN", "DAC_OVERRIDE", "FOWNER"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["PidsLimit"] == 512
    assert host["Memory"] == 2 * 1024**3
    assert host["NanoCpus"] == 1_000_000_000
    assert host["NetworkMode"] == "none"
    assert "/tmp" in host["Tmpfs"]
    labels = info["Config"]["Labels"]
    assert labels[engine.MANAGED] == "1" and labels[engine.KEEP] == "0"
    assert f":{os.getpid()}:" in labels[engine.OWNER]
    # ... and as the processes inside see it:
    status = docker_backend.run("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status").output
    fields = dict(line.split(":\t") for line in status.splitlines())
    assert int(fields["CapEff"], 16) == CHOWN | DAC_OVERRIDE | FOWNER
    assert fields["NoNewPrivs"] == "1"
    assert docker_backend.run("stat -f -c %T /tmp").output == "tmpfs"
    assert docker_backend.run("ls /sys/class/net").output == "lo"  # network "none"


def test_limits_and_capabilities_are_settings(make_docker_backend: MakeDockerBackend) -> None:
    backend = make_docker_backend(
        **{"docker.cap_add": [], "docker.pids_limit": 64, "docker.memory": "256m", "docker.cpus": 0.5}
    )
    host = inspect(backend)["HostConfig"]
    assert not host["CapAdd"] and host["PidsLimit"] == 64 and host["Memory"] == 256 * 1024**2
    assert host["NanoCpus"] == 500_000_000
    # Without DAC_OVERRIDE the container's root is held to permission bits like anyone else.
    assert backend.run("grep CapEff /proc/self/status").output.split()[-1] == "0000000000000000"
    assert backend.run("touch /workspace/x && chmod 000 /workspace/x && cat /workspace/x").exit_code != 0
    with pytest.raises(PermissionError):
        backend.read_bytes("/workspace/x")


def test_commands_share_one_exec_session(docker_backend: DockerBackend) -> None:
    docker_backend.run("cd /tmp && export GREETING=hello")
    before = len(inspect(docker_backend).get("ExecIDs") or [])
    for _ in range(20):
        docker_backend.run("true")
    assert docker_backend.run('echo "$GREETING from $PWD"').output == "hello from /tmp"
    after = len(docker_backend._api.inspect_container(docker_backend.container_id).get("ExecIDs") or [])
    assert after == before  # no exec per command


def test_timeout_kills_the_command_tree_and_keeps_the_session(docker_backend: DockerBackend) -> None:
    docker_backend.run("cd /tmp && export KEPT=yes")
    result = docker_backend.run("sleep 300 & sleep 301; echo never", timeout=1)
    assert result.timed_out and result.exit_code == 124 and "never" not in result.output
    left = docker_backend.run(
        "for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\\0' ' '; echo; done | grep -c '^sleep 30[01]'"
    )
    assert left.output == "0"
    assert docker_backend.run('echo "$KEPT $PWD"').output == "yes /tmp"


def test_files_inside_the_container_only(docker_backend: DockerBackend) -> None:
    # /tmp is a tmpfs mounted inside the container: Docker's archive API cannot see it.
    docker_backend.run("printf 'made by a command' > /tmp/note.txt")
    assert docker_backend.read_bytes("/tmp/note.txt") == b"made by a command"
    docker_backend.write_bytes("/tmp/deep/new.bin", bytes(range(256)))
    assert docker_backend.run("od -An -tx1 -N4 /tmp/deep/new.bin").output.split() == ["00", "01", "02", "03"]
    info = docker_backend.stat("/tmp/deep/new.bin")
    assert info is not None and info.size == 256 and info.is_file and not info.is_dir
    assert docker_backend.stat("/tmp/deep/nothing") is None


def test_relative_paths_follow_the_shell(docker_backend: DockerBackend) -> None:
    docker_backend.run("mkdir -p /srv/app && cd /srv/app")
    docker_backend.write_bytes("main.py", b"print('hi')\n")
    assert docker_backend.run("cat /srv/app/main.py").output == "print('hi')"
    assert docker_backend.run("python3 main.py").output == "hi"
    docker_backend.write_bytes("~/in-home.txt", b"home")
    assert docker_backend.run("cat ~/in-home.txt").output == "home"


def test_large_files_round_trip(docker_backend: DockerBackend) -> None:
    data = os.urandom(3 * 1024 * 1024 + 7)  # past the inline limit: streamed to the temp file
    docker_backend.write_bytes("big.bin", data)
    assert docker_backend.read_bytes("big.bin") == data
    assert docker_backend.run("ls -A /workspace").output == "big.bin"  # no temp file left behind


def test_write_keeps_mode_and_owner_and_follows_symlinks(docker_backend: DockerBackend) -> None:
    docker_backend.run(
        "printf old > script.sh && chmod 750 script.sh && chown 1234:4321 script.sh && ln -s script.sh link"
    )
    docker_backend.write_bytes("link", b"new")
    assert docker_backend.run("stat -c '%a %u:%g %F' script.sh; test -L link && cat link").output == (
        "750 1234:4321 regular file\nnew"
    )


def test_file_errors_are_the_standard_ones(make_docker_backend: MakeDockerBackend) -> None:
    backend = make_docker_backend(**{"docker.user": "65534:65534", "docker.workdir": "/tmp"})
    assert backend.run("mkdir -p d && printf x > f && mkdir -p locked && chmod 000 locked").exit_code == 0
    with pytest.raises(FileNotFoundError):
        backend.read_bytes("missing")
    with pytest.raises(IsADirectoryError):
        backend.read_bytes("d")
    with pytest.raises(IsADirectoryError):
        backend.write_bytes("d", b"x")
    with pytest.raises(NotADirectoryError):
        backend.list_dir("f")
    with pytest.raises(PermissionError):
        backend.list_dir("locked")
    with pytest.raises(PermissionError):
        backend.write_bytes("/etc/owned-by-root", b"x")
    with pytest.raises(PermissionError):
        backend.read_bytes("/etc/shadow")


def test_list_dir_shows_hidden_unicode_and_links(docker_backend: DockerBackend) -> None:
    docker_backend.run("mkdir -p sub && touch .hidden ..dots 'späce ü.txt' && ln -s sub link && ln -s gone dangling")
    entries = {e.name: e for e in docker_backend.list_dir(".")}
    assert set(entries) == {"sub", ".hidden", "..dots", "späce ü.txt", "link", "dangling"}
    assert entries["sub"].is_dir and entries["link"].is_dir and entries["link"].is_symlink
    assert entries["späce ü.txt"].is_file and not entries["dangling"].is_file and entries["dangling"].is_symlink


def exit_status(channel: Channel) -> int | None:
    """The exit status of a docker exec channel's process (None while it runs)."""
    assert isinstance(channel, ExecChannel), channel
    return channel.returncode


def test_open_channel_runs_a_process_and_kills_its_tree(docker_backend: DockerBackend) -> None:
    channel = docker_backend.open_channel(["python3", "-c", "import sys; print(input()[::-1]); sys.exit(3)"])
    channel.send(b"olleh\n")
    output = b""
    while (chunk := channel.recv(60)) not in (b"", None):
        output += chunk
    assert output == b"hello\n" and exit_status(channel) == 3
    channel.close()

    runaway = docker_backend.open_channel(["sh", "-c", "sleep 500 & sleep 501 & echo started; wait"], cwd="/tmp")
    assert runaway.recv(60) == b"started\n"
    runaway.close()
    count = "for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\\0' ' '; echo; done | grep -c '^sleep 50[01]'"
    assert docker_backend.run(count).output == "0"


def test_channel_for_a_missing_program_reports_it(docker_backend: DockerBackend) -> None:
    channel = docker_backend.open_channel(["no-such-program"])
    output = b""
    while (chunk := channel.recv(60)) not in (b"", None):
        output += chunk
    assert b"no-such-program" in output and exit_status(channel) == 127


def test_close_removes_the_container(make_docker_backend: MakeDockerBackend) -> None:
    backend = make_docker_backend()
    container = inspect(backend)["Id"]
    api = backend._api
    backend.close()
    assert engine.container_state(api, container) is None
    with pytest.raises(BackendError, match="closed"):
        backend.run("true")


def test_named_container_is_kept_and_reused(make_docker_backend: MakeDockerBackend) -> None:
    name = f"test-keep-{os.getpid()}-{time.monotonic_ns()}"
    first = make_docker_backend(**{"docker.name": name})
    first.run("echo remembered > /workspace/state.txt")
    container = first.container_id
    first.close()
    second = make_docker_backend(**{"docker.name": name})
    try:
        assert second.read_bytes("/workspace/state.txt") == b"remembered\n"
        assert second.container_id == container
        assert inspect(second)["Config"]["Labels"][engine.NAME] == name
    finally:
        engine.remove_container(second._api, container)


def test_reaper_removes_containers_whose_owner_died(docker_backend: DockerBackend, docker_test_image: str) -> None:
    inspect(docker_backend)
    api = docker_backend._api
    owner = engine.owner_label().split(":")
    dead = ":".join([*owner[:2], "999999999", "1"])  # this machine and boot, a process that is gone
    labels = {engine.MANAGED: "1", engine.KEEP: "0", engine.OWNER: dead}
    orphan = api.create_container(docker_test_image, command=["true"], labels=labels)["Id"]
    foreign = api.create_container(
        docker_test_image, command=["true"], labels={**labels, engine.OWNER: "elsewhere:x:1:1"}
    )["Id"]
    try:
        removed = engine.reap_orphans(api)
        assert orphan in removed and foreign not in removed
        assert docker_backend.container_id not in removed  # its owner (this process) runs
        assert engine.container_state(api, docker_backend.container_id) is not None
    finally:
        engine.remove_container(api, orphan)
        engine.remove_container(api, foreign)


def test_parallel_file_calls_and_commands(docker_backend: DockerBackend) -> None:
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            docker_backend.write_bytes(f"f{n}.txt", f"{n}".encode() * 1000)
            assert docker_backend.read_bytes(f"f{n}.txt") == f"{n}".encode() * 1000
        except BaseException as exc:
            errors.append(exc)

    command = f"sleep 120.{os.getpid()}"  # a command line no other process has

    def long_command() -> None:
        try:
            docker_backend.run(command)
        except BackendError:
            pass  # the container is removed at the end of the test

    def command_runs() -> bool:
        top = docker_backend._api.top(docker_backend.container_id)
        return any(command in " ".join(row) for row in top.get("Processes") or [])

    docker_backend.run("true")  # the container exists
    slow = threading.Thread(target=long_command, daemon=True)
    slow.start()
    deadline = time.monotonic() + 60  # only bounds a hang
    while not command_runs():  # the file calls below must come while the command runs
        assert time.monotonic() < deadline and slow.is_alive(), "the command never started"
        time.sleep(0.05)
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert slow.is_alive()  # file calls did not queue behind the running command
