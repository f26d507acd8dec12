"""The Modal backend as far as the real SDK goes offline (Modal's cloud is unreachable here).

Covered: the missing-credentials error (before any request), the bound on the first request
against a server that refuses connections or never answers (the SDK alone retries for about a
minute), and a real gRPC refusal from a local server speaking Modal's API
(tests/fakes/modal_server.py), all through the real modal SDK. The shell, the exec wrapper,
the kill-tree command and the atomic replace are shared with Docker and tested there. What stays
untested (sandbox creation, exec streams, sandbox.filesystem, snapshots) is listed in the README.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from herald import Settings
from herald.backends import Backend, BackendError
from herald.backends.factory import open_backend
from herald.backends.modal import ModalBackend
from herald.backends.modal.backend import credentials_problem
from tests.fakes import modal_server


@pytest.fixture
def modal_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-herald-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-herald-test")
    return monkeypatch


def first_call_error(settings: Settings, timeout: float = 2.0) -> tuple[str, float]:
    backend = ModalBackend(settings=settings.with_overrides({"modal.connect_timeout": timeout}))
    started = time.monotonic()
    try:
        with pytest.raises(BackendError) as caught:
            backend.run("true")
    finally:
        backend.close()
    return str(caught.value), time.monotonic() - started


def test_is_a_backend_and_opening_it_costs_nothing(settings: Settings) -> None:
    backend = open_backend("modal:python:3.11-slim", settings=settings)
    assert isinstance(backend, ModalBackend) and isinstance(backend, Backend)
    assert backend.image == "python:3.11-slim" and backend.cwd == "/workspace"
    backend.close()


def test_without_credentials_the_error_says_how_to_add_them(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
    monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
    if credentials_problem() is None:
        pytest.skip("a Modal profile with credentials is configured on this machine (~/.modal.toml)")
    message, took = first_call_error(settings)
    assert "MODAL_TOKEN_ID" in message and "modal token new" in message
    assert took < 30  # generous (a loaded machine): it does not hang


def test_unreachable_server_fails_within_the_connect_timeout(settings: Settings, modal_env: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        modal_env.setenv("MODAL_SERVER_URL", f"http://127.0.0.1:{sock.getsockname()[1]}")
        message, took = first_call_error(settings, timeout=2.0)
    assert "did not answer within 2 s" in message and "modal.connect_timeout" in message
    assert took < 40  # generous (a loaded machine); the SDK on its own keeps retrying for about a minute


@pytest.fixture
def silent_port() -> Iterator[int]:
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


def test_server_that_never_answers_is_bounded(
    settings: Settings, modal_env: pytest.MonkeyPatch, silent_port: int
) -> None:
    modal_env.setenv("MODAL_SERVER_URL", f"http://127.0.0.1:{silent_port}")
    message, took = first_call_error(settings, timeout=2.0)
    assert "did not answer within 2 s" in message
    assert took < 40  # generous (a loaded machine); the SDK on its own keeps retrying for about a minute


def test_refused_credentials_are_reported(settings: Settings, modal_env: pytest.MonkeyPatch) -> None:
    with modal_server.RefusingModalServer() as url:
        modal_env.setenv("MODAL_SERVER_URL", url)
        message, took = first_call_error(settings, timeout=120.0)
    assert "Modal refused the request" in message and modal_server.REFUSAL in message
    assert "AppGetOrCreate" in modal_server.calls  # the real SDK spoke gRPC to the fake
    assert took < 60  # generous (a loaded machine), and still well before the 120 s connect timeout
