"""The browser on a remote backend's network (`browser.network = "backend"`): browser steps from a
script against an app bound to the backend's 127.0.0.1, through the Docker relay (the
container's network off) and an SSH tunnel (direct-tcpip), with the same steps on this
machine's network over the same SSH session as the baseline; and one connection through
`Backend.open_tcp` (connect, an HTTP GET, the whole answer).

The app and the way it is started are the tests' (tests/fixtures/remote_app.py): direct calls
write it and start it with `&`, as a model would.
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from herald import Runtime, Settings
from herald.backends.base import Backend
from tests.fixtures.browsers import chromium_problem
from tests.fixtures.remote_app import start_app

from .report import Metric

ROUNDS = 20
STEPS = """
import json, re, time
from hermes_tools import browser_navigate, browser_snapshot, browser_click, browser_type
samples = {"navigate": [], "click": [], "type": []}
browser_navigate(BASE); browser_snapshot()  # the browser starts here
for i in range(ROUNDS):
    t = time.perf_counter()
    browser_navigate(BASE)
    page = browser_snapshot()["snapshot"]
    samples["navigate"].append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    browser_click(re.search(r'link "Second page" (@e\\d+)', page).group(1))
    browser_snapshot()
    samples["click"].append((time.perf_counter() - t) * 1000)
    browser_navigate(BASE)
    page = browser_snapshot()["snapshot"]
    t = time.perf_counter()
    browser_type(re.search(r'textbox "Name" (@e\\d+)', page).group(1), "typed %d" % i)
    browser_snapshot()
    samples["type"].append((time.perf_counter() - t) * 1000)
print(json.dumps(samples))
"""


def _steps(backend: Backend, settings: Settings, label: str) -> tuple[list[Metric], int]:
    """Start the app on `backend`, time the steps from scripts; the rows, and the app's port
    (the app stays up with the backend's session)."""
    rows = {
        "navigate": Metric(
            f"{label}: browser_navigate + browser_snapshot", "ms", None, note="app on the backend's 127.0.0.1"
        ),
        "click": Metric(
            f"{label}: browser_click (link) -> browser_snapshot", "ms", None, note="a new page from the app"
        ),
        "type": Metric(f"{label}: browser_type -> browser_snapshot", "ms", None, note="a text field"),
    }
    with Runtime(backend, settings=settings) as runtime:
        def call(name: str, **args: Any) -> dict[str, Any]:
            return runtime.dispatcher.call_direct(name, args)

        port = _free_port()
        start_app(call, port, uuid.uuid4().hex[:8])
        for _ in range(3):
            prelude = f"BASE = 'http://127.0.0.1:{port}/'\nROUNDS = {ROUNDS}\n"
            result = runtime.execute(prelude + STEPS, timeout=600, max_tool_calls=10_000)
            if not result.ok:
                raise RuntimeError(f"benchmark script failed: {result.error}")
            for name, values in json.loads(result.output.strip().splitlines()[-1]).items():
                rows[name].samples.extend(values)
    return list(rows.values()), port


def _connections(backend: Backend, label: str, port: int) -> Metric:
    row = Metric(f"{label}: open_tcp + GET + close", "ms", None, note="one connection from the backend, 50 per run")
    for _ in range(50):
        t = time.perf_counter()
        with backend.open_tcp("127.0.0.1", port, timeout=30) as sock:
            sock.sendall(b"GET /second HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
            while sock.recv(65536):
                pass
        row.samples.append((time.perf_counter() - t) * 1000)
    return row


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _docker(settings: Settings) -> list[Metric]:
    from herald.backends.docker import DockerBackend
    from tests.fixtures.dockerd import (
        DockerUnavailable,
        build_test_image,
        docker_engine,
        docker_settings,
    )

    try:
        with docker_engine() as url:
            tuned = docker_settings(settings, url, build_test_image(url))
            with DockerBackend(settings=tuned) as backend:
                rows, port = _steps(backend, tuned, "Docker (network off), relay")
                return [*rows, _connections(backend, "Docker relay", port)]
    except DockerUnavailable as exc:
        print(f"Docker rows skipped: {exc}")
        return []


def _ssh(settings: Settings) -> list[Metric]:
    from herald.backends.ssh import SSHBackend
    from tests.fixtures.sshd import running_sshd

    stack = ExitStack()
    try:
        server = stack.enter_context(running_sshd())
    except RuntimeError as exc:
        print(f"SSH rows skipped: {exc}")
        return []
    rows: list[Metric] = []
    with stack:
        workspace = server.make_workspace()
        tuned = settings.with_overrides(server.overrides())
        # This sshd shares this machine's loopback: the baseline reaches the same kind of app directly.
        for label, network in (("SSH, direct-tcpip", "backend"), ("SSH, this machine's network (baseline)", "local")):
            session = tuned.with_overrides({"browser.network": network})
            with SSHBackend(server.spec, cwd=workspace, settings=session) as backend:
                steps, port = _steps(backend, session, label)
                rows.extend(steps)
                if network == "backend":
                    rows.append(_connections(backend, "SSH direct-tcpip", port))
        server.remove_workspace(workspace)
    return rows


def run() -> list[Metric]:
    problem = chromium_problem()
    if problem:
        print(f"remote browser rows skipped: {problem}")
        return []
    data = Path(tempfile.mkdtemp(prefix="herald-bench-browser-remote-"))
    settings = Settings(data_dir=data)
    measured: list[Callable[[Settings], list[Metric]]] = [_docker, _ssh]
    try:
        return [row for measure in measured for row in measure(settings)]
    finally:
        shutil.rmtree(data, ignore_errors=True)
