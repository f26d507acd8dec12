"""Keyless web_extract makes pages text in worker processes: one pool per session, reused by its
calls and killed with it; results in URL order; workers without Herald's environment or
descriptors, dying with Herald; a page that exhausts, crashes or outlasts its worker fails alone
and the worker is replaced. Real pages from a real HTTP server on 127.0.0.1, real processes."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from herald._sandbox.confine import seccomp
from herald._sandbox.procs.trees import alive
from herald.web.renderpool import RenderPool
from tests.fixtures.users import REPO, User, nonroot  # noqa: F401  (fixture)

from .conftest import WebSession, serving

MakeWeb = Callable[..., WebSession]
DEADLINE = 60.0  # generous: every wait below ends as soon as what it waits for happens


def article(marker: str) -> bytes:
    words = " ".join(f"{marker} sentence {i} explains one step of the survey in plain words." for i in range(8))
    return (f"<!doctype html><html><head><title>{marker}</title></head><body><nav><a href='/'>Home</a></nav>"
            f"<main><article><h1>{marker}</h1><p>{words}</p></article></main></body></html>").encode()


def link_list(count: int) -> bytes:
    """A page whose extraction takes seconds: thousands of linked paragraphs."""
    rows = "".join(f"<p>Entry {i} of the catalogue, see <a href='e{i}.html'>entry {i}</a>.</p>" for i in range(count))
    return f"<!doctype html><html><head><title>Catalogue</title></head><body><main>{rows}</main></body></html>".encode()


# Nine megabytes of elements: a parse tree far larger than 256 MiB of address space allows.
HUGE = b"<!doctype html><html><body><main>" + b"<p>x</p>" * 1_125_000 + b"</main></body></html>"
SLOW = link_list(8000)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/page/"):
            body = article(f"marker{self.path.rsplit('/', 1)[1]}")
        elif self.path == "/huge":
            body = HUGE
        elif self.path == "/slow":
            body = SLOW
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serving(_Handler) as url:
        yield url


def pool_of(session: WebSession) -> RenderPool:
    pool = session.ctx.cache["web.render_pool"]
    assert isinstance(pool, RenderPool)
    return pool


def wait_until(condition: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"not within {DEADLINE:.0f} s: {what}")
        time.sleep(0.02)


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_results_come_back_in_url_order(make_web: MakeWeb, site: str) -> None:
    session = make_web({"web.extract_workers": 2})
    urls = [f"{site}/page/{i}" for i in (7, 3, 11, 0, 19, 5, 2, 13, 17, 1, 23, 29)]
    reply = session("web_extract", urls=urls)
    assert reply["failed"] == 0
    assert [page["url"] for page in reply["results"]] == urls
    for url, page in zip(urls, reply["results"], strict=True):
        marker = "marker" + url.rsplit("/", 1)[1]
        assert page["title"] == marker and f"{marker} sentence 7" in page["content"]


def test_one_pool_per_session_reused_and_killed_with_it(make_web: MakeWeb, site: str) -> None:
    session = make_web({"web.extract_workers": 2})
    session("web_extract", urls=[f"{site}/page/1", f"{site}/page/2"])
    pids = pool_of(session).pids()
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    session("web_extract", urls=[f"{site}/page/3", f"{site}/page/4", f"{site}/page/5"])
    assert sorted(pool_of(session).pids()) == sorted(pids)  # the same processes
    other = make_web({"web.extract_workers": 1})
    other("web_extract", urls=[f"{site}/page/6"])
    assert not set(pool_of(other).pids()) & set(pids)  # another session has its own
    session.ctx.close()
    wait_until(lambda: not any(alive(pid) for pid in pids), "the session's workers gone once it closed")
    assert all(alive(pid) for pid in pool_of(other).pids())


def test_workers_hold_no_environment_no_inherited_descriptors_and_no_sockets(
    make_web: MakeWeb, site: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HERALD_TEST_SECRET", "s3cr3t-value")
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text("top secret")
    fd = os.open(secret_file, os.O_RDONLY)
    os.set_inheritable(fd, True)  # even a descriptor Herald left inheritable stays here
    try:
        session = make_web({"web.extract_workers": 2})
        session("web_extract", urls=[f"{site}/page/1"])
        pids = pool_of(session).pids()
        assert pids
        for pid in pids:
            assert Path(f"/proc/{pid}/environ").read_bytes() == b""
            targets = set()
            for n in os.listdir(f"/proc/{pid}/fd"):
                try:
                    targets.add(os.readlink(f"/proc/{pid}/fd/{n}"))
                except FileNotFoundError:  # a file the worker's libraries had open a moment ago
                    pass
            # Its pipes, /dev/null and what its own libraries open; nothing of Herald's (the
            # test's HTTP server's sockets, the file above).
            assert str(secret_file) not in targets and not any(t.startswith("socket:") for t in targets), targets
            assert os.getsid(pid) == pid  # a session of its own: a Ctrl-C at Herald's terminal is Herald's
            assert os.readlink(f"/proc/{pid}/cwd") == "/"
            if seccomp.supported():  # once loaded (answered or not), its socket filter is in place
                status = _status_once_loaded(pid)
                assert "\nNoNewPrivs:\t1\n" in status and "\nSeccomp:\t2\n" in status, status
    finally:
        os.close(fd)


def _status_once_loaded(pid: int) -> str:
    """The worker's /proc status once it has loaded its libraries and put its filter on (a worker
    the page did not go to may still be importing); the deadline only bounds a hang."""
    end = time.monotonic() + 60
    while True:
        status = Path(f"/proc/{pid}/status").read_text()
        if "\nSeccomp:\t2\n" in status or time.monotonic() > end:
            return status
        time.sleep(0.05)


WORKERS_THEN_WAIT = """
import sys, time
from herald import Settings
from herald.backends.local import LocalBackend
from herald.tools import ToolContext
from herald.runtime.toolset import default_registry
from herald.tools.arguments import bind_arguments

from pathlib import Path
settings = Settings(data_dir=Path(sys.argv[2])).with_overrides({"web.extract_workers": 2})
ctx = ToolContext(backend=LocalBackend(sys.argv[2], settings=settings), settings=settings)
tool = default_registry().get("web_extract")
reply = tool.handler(bind_arguments(tool, {"urls": [sys.argv[1]]}), ctx)
assert reply["failed"] == 0, reply
print(" ".join(str(pid) for pid in ctx.cache["web.render_pool"].pids()), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("as_user", ["root", "nonroot"])
def test_workers_die_when_herald_is_killed(as_user: str, site: str, request: pytest.FixtureRequest) -> None:
    data = tempfile.mkdtemp(prefix="herald-worker-test-")
    request.addfinalizer(lambda: shutil.rmtree(data, ignore_errors=True))
    if as_user == "nonroot":
        user: User = request.getfixturevalue("nonroot")
        argv, env = user.argv([user.python, "-c", WORKERS_THEN_WAIT]), user.env()
        os.chmod(data, 0o777)
    else:
        argv, env = [sys.executable, "-c", WORKERS_THEN_WAIT], {**os.environ, "PYTHONPATH": str(REPO)}
    herald = subprocess.Popen([*argv, f"{site}/page/1", data], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env, cwd="/", text=True)
    try:
        assert herald.stdout is not None
        line = herald.stdout.readline()
        assert line.strip(), herald.stderr.read() if herald.stderr else ""
        pids = [int(pid) for pid in line.split()]
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        for pid in pids:
            assert "herald.web.renderworker" in Path(f"/proc/{pid}/cmdline").read_text()
        herald.kill()  # SIGKILL: Herald gets no chance to close anything
        herald.wait()
        wait_until(lambda: not any(alive(pid) for pid in pids), "the workers gone after Herald was killed")
    finally:
        if herald.poll() is None:
            herald.kill()
            herald.wait()


def test_a_page_that_exhausts_its_workers_memory_fails_alone(make_web: MakeWeb, site: str) -> None:
    session = make_web({"web.extract_workers": 1, "web.extract_worker_memory_mb": 256})
    urls = [f"{site}/page/1", f"{site}/huge", f"{site}/page/2"]
    reply = session("web_extract", urls=urls)
    first, huge, second = reply["results"]
    assert reply["failed"] == 1
    assert "needed more than 256 MiB of memory" in huge["error"] and "web.extract_worker_memory_mb" in huge["error"]
    assert "marker1 sentence 3" in first["content"] and "marker2 sentence 3" in second["content"]
    # The worker that ran out was replaced: the session goes on.
    assert session("web_extract", urls=[f"{site}/page/3"])["failed"] == 0


def test_a_worker_killed_mid_page_fails_only_that_page(make_web: MakeWeb, site: str) -> None:
    session = make_web({"web.extract_workers": 1})
    session("web_extract", urls=[f"{site}/page/1"])  # the worker is up and idle
    (pid,) = pool_of(session).pids()
    idle_ticks = cpu_ticks(pid)
    result: dict[str, Any] = {}
    call = threading.Thread(target=lambda: result.update(session("web_extract", urls=[f"{site}/slow"])))
    call.start()
    # An idle worker spends no CPU: once it has spent 0.2 s it is extracting the slow page.
    wait_until(lambda: cpu_ticks(pid) - idle_ticks >= 20 * os.sysconf("SC_CLK_TCK") // 100, "the worker busy")
    os.kill(pid, signal.SIGKILL)
    call.join(DEADLINE)
    assert not call.is_alive()
    (page,) = result["results"]
    assert "killed by SIGKILL" in page["error"] and "curl" in page["error"]
    reply = session("web_extract", urls=[f"{site}/page/2", f"{site}/page/3"])
    assert reply["failed"] == 0
    assert pool_of(session).pids() != [pid]


def test_workers_killed_while_idle_are_replaced(make_web: MakeWeb, site: str) -> None:
    session = make_web({"web.extract_workers": 2})
    session("web_extract", urls=[f"{site}/page/1", f"{site}/page/2"])
    pids = pool_of(session).pids()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(alive(pid) for pid in pids), "the workers dead")
    reply = session("web_extract", urls=[f"{site}/page/{i}" for i in range(6)])
    assert reply["failed"] == 0  # no page is handed to a dead worker
    assert not set(pool_of(session).pids()) & set(pids)


def test_a_page_that_outlasts_the_fetch_timeout_fails_alone(make_web: MakeWeb, site: str) -> None:
    session = make_web({"web.extract_workers": 1, "web.fetch_timeout": 1})
    session("web_extract", urls=[f"{site}/page/1"])  # the worker started and warm
    reply = session("web_extract", urls=[f"{site}/slow", f"{site}/page/2"])
    slow, fine = reply["results"]
    assert "extracting the page took more than 1 s (web.fetch_timeout)" in slow["error"]
    assert "marker2 sentence 1" in fine["content"]


def test_a_worker_that_stops_reading_cannot_hold_the_call(make_web: MakeWeb, site: str) -> None:
    """A stopped worker (SIGSTOP) takes no more of a page than the pipe holds: the page, larger
    than that, fails at web.fetch_timeout and the worker is replaced."""
    session = make_web({"web.extract_workers": 1, "web.fetch_timeout": 2})
    session("web_extract", urls=[f"{site}/page/1"])
    (pid,) = pool_of(session).pids()
    os.kill(pid, signal.SIGSTOP)
    try:
        (page,) = session("web_extract", urls=[f"{site}/slow"])["results"]  # ~600 kB: more than a pipe holds
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed already, as it should be
            os.kill(pid, signal.SIGCONT)
    assert "took more than 2 s (web.fetch_timeout)" in page["error"]
    wait_until(lambda: not alive(pid), "the stopped worker killed")
    assert session("web_extract", urls=[f"{site}/page/2"])["failed"] == 0


def test_concurrent_calls_share_the_pool_and_each_gets_its_own_pages(make_web: MakeWeb, site: str) -> None:
    session = make_web({"web.extract_workers": 2})
    replies: dict[int, dict[str, Any]] = {}

    def call(n: int) -> None:
        replies[n] = session("web_extract", urls=[f"{site}/page/{n * 10 + i}" for i in range(6)])

    threads = [threading.Thread(target=call, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    assert sorted(replies) == list(range(6))
    for n, reply in replies.items():
        assert reply["failed"] == 0
        for i, page in enumerate(reply["results"]):
            assert page["title"] == f"marker{n * 10 + i}"
    assert len(pool_of(session).pids()) == 2  # never more workers than the pool's size


SOCKETS_AFTER_FILTER = """
import socket, sys
from herald.web.renderworker import refuse_sockets
assert refuse_sockets()
refused = []
for family, kind in ((socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET6, socket.SOCK_DGRAM),
                     (socket.AF_UNIX, socket.SOCK_STREAM), (socket.AF_NETLINK, socket.SOCK_RAW)):
    try:
        socket.socket(family, kind).close()
    except PermissionError:
        refused.append(True)
try:
    socket.socketpair()
except PermissionError:
    refused.append(True)
print(len(refused))
"""


@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filter is written for this machine")
def test_what_the_workers_filter_leaves_a_page_that_took_over_the_parser() -> None:
    """The filter a worker installs once its libraries are loaded, applied to a process that then
    tries what hijacked parser code would: TCP, UDP, a local daemon's unix socket, netlink."""
    done = subprocess.run([sys.executable, "-c", SOCKETS_AFTER_FILTER], capture_output=True, text=True,
                          timeout=60, cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "5"
