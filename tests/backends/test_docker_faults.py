"""Docker faults, for real: the container killed under a call or between calls, no engine at the
address, an engine that never answers, an image that is not there and cannot be pulled."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from herald import Settings
from herald.backends import BackendError
from herald.backends.docker import DockerBackend, engine
from tests.fixtures.dockerd import MakeDockerBackend


def kill_once_running(backend: DockerBackend, command: str) -> threading.Thread:
    """Kill the container from outside once `command` observably runs in it (the engine's `top`)."""
    container, api = backend.container_id, backend._api

    def running() -> bool:
        return any(command in " ".join(row) for row in api.top(container).get("Processes") or [])

    def kill() -> None:
        deadline = time.monotonic() + 60  # only bounds a hang: no verdict depends on it
        while not running() and time.monotonic() < deadline:
            time.sleep(0.05)
        api.kill(container)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def test_container_killed_mid_call_is_a_clear_error_then_a_fresh_container(docker_backend: DockerBackend) -> None:
    docker_backend.run("echo before > /workspace/marker")
    old = docker_backend.container_id
    api = docker_backend._api
    command = f"sleep 300.{uuid.uuid4().int % 10**6:06d}"  # a command line no other process has
    killer = kill_once_running(docker_backend, command)
    started = time.monotonic()
    with pytest.raises(BackendError) as caught:
        docker_backend.run(command)
    killer.join()
    # Generous (a loaded machine): the error comes when the container dies, not after the 300 s.
    assert time.monotonic() - started < 120
    message = str(caught.value)
    assert old[:12] in message and "killed or stopped from outside" in message
    assert "next call starts a fresh container" in message

    result = docker_backend.run("pwd; ls /workspace")
    assert result.exit_code == 0 and result.output == "/workspace"  # a new container: the marker is gone
    assert "fresh container" in result.note
    assert docker_backend.container_id != old
    assert engine.container_state(api, old) is None  # the dead one was removed
    assert docker_backend.run("echo again").note == ""  # the news is told once


def test_container_killed_between_calls(docker_backend: DockerBackend) -> None:
    docker_backend.run("true")
    docker_backend.write_bytes("f.txt", b"x")
    docker_backend._api.kill(docker_backend.container_id)
    with pytest.raises(BackendError, match="stopped"):
        docker_backend.read_bytes("f.txt")  # the file shell finds out
    with pytest.raises(FileNotFoundError):
        docker_backend.read_bytes("f.txt")  # a fresh container
    assert docker_backend.run("echo ok").output == "ok"


def test_container_removed_between_calls(docker_backend: DockerBackend) -> None:
    docker_backend.run("true")
    docker_backend._api.remove_container(docker_backend.container_id, force=True)
    with pytest.raises(BackendError, match="was removed"):
        docker_backend.run("echo lost")
    assert docker_backend.run("echo found").output == "found"


def test_shell_exit_is_not_a_lost_container(docker_backend: DockerBackend) -> None:
    container = (docker_backend.run("true"), docker_backend.container_id)[1]
    result = docker_backend.run("exit 3")
    assert result.exit_code == 3 and "shell exited" in result.note
    assert docker_backend.run("echo still here").output == "still here"
    assert docker_backend.container_id == container


def _unreachable(settings: Settings, host: str, timeout: float = 1.0) -> tuple[str, float]:
    backend = DockerBackend(settings=settings.with_overrides({"docker.host": host, "docker.connect_timeout": timeout}))
    started = time.monotonic()
    with pytest.raises(BackendError) as caught:
        backend.run("true")
    backend.close()
    return str(caught.value), time.monotonic() - started


def test_no_engine_at_a_socket_path(settings: Settings, tmp_path: Path) -> None:
    message, took = _unreachable(settings, f"unix://{tmp_path}/docker.sock")
    assert "no Docker engine is reachable" in message and "no such socket" in message
    assert "docker.host" in message
    assert took < 30  # generous (a loaded machine): it does not hang


def test_no_engine_on_a_port(settings: Settings) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        message, took = _unreachable(settings, f"tcp://127.0.0.1:{port}")
    assert "no Docker engine is reachable" in message and "refused" in message
    assert took < 30  # generous (a loaded machine): it does not hang


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_engine_that_never_answers_fails_within_the_connect_timeout(settings: Settings, silent_server: int) -> None:
    message, took = _unreachable(settings, f"tcp://127.0.0.1:{silent_server}", timeout=1.0)
    assert "no Docker engine is reachable" in message and "timed out" in message
    assert took < 30  # about the 1 s connect timeout, with room for a loaded machine


def test_missing_image_that_cannot_be_pulled(make_docker_backend: MakeDockerBackend) -> None:
    backend = make_docker_backend(**{"docker.image": "herald-test/not-built-anywhere:0"})
    with pytest.raises(BackendError) as caught:
        backend.run("true")
    message = str(caught.value)
    assert "herald-test/not-built-anywhere:0" in message and "pulling it failed" in message
    assert "docker.image" in message


def test_closing_while_calls_start_their_shell_never_hangs(make_docker_backend: MakeDockerBackend) -> None:
    """A file call whose shell is starting (it holds the shell and asks the backend for a process)
    while the backend closes (it holds the backend and closes the shells): each waited for the
    other, and the close never returned. Raced in a loop; the close must return every time."""
    for attempt in range(5):
        backend = make_docker_backend()
        backend.run("echo ready > /workspace/f")  # the container is up; the file shell is not
        started = threading.Event()

        def call_files(backend: DockerBackend = backend, started: threading.Event = started) -> None:
            started.set()
            for _ in range(50):
                try:
                    backend.read_bytes("/workspace/f")
                except BackendError:  # closed under it: what a call of a closing backend gets
                    return

        caller = threading.Thread(target=call_files, daemon=True)
        caller.start()
        started.wait(30)
        closer = threading.Thread(target=backend.close, daemon=True)
        closer.start()
        closer.join(120)  # a deadlock, not slowness: it would never return
        assert not closer.is_alive(), f"close() hung on attempt {attempt} while a call started its shell"
        caller.join(120)
        assert not caller.is_alive(), f"a call hung on attempt {attempt} after the backend closed"
