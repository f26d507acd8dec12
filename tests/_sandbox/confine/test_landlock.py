"""Landlock fallback: each test confines a fresh interpreter and checks what it may still do.

Verdicts come from the child's exit status and output, never from timing.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from herald._sandbox.confine import landlock

ABI = landlock.abi_version()
pytestmark = pytest.mark.skipif(
    ABI == 0, reason="Landlock unavailable on this kernel (abi_version() == 0)"
)
ROOT = str(Path(__file__).resolve().parents[2])


def _confined(tmp_path: Path, body: str, *, network: bool = False, abi: int = 0, masked: tuple[str, ...] = ()) -> str:
    """Run `body` in a child after restrict(default_paths(workspace)); returns its stdout.

    abi, if set, makes restrict() build the ruleset an older kernel would get (the running
    kernel accepts rulesets of any lower ABI)."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    script = textwrap.dedent(
        f"""
        import os, socket, subprocess, sys
        from herald._sandbox.confine import landlock
        if {abi!r}:  # pretend to run on an older kernel: exercises the per-ABI masks and sizes
            landlock.abi_version = lambda: {abi!r}
        ro, rw = landlock.default_paths({str(workspace)!r}, ["/nonexistent-herald-ro"], ["/nonexistent-herald-rw"])
        landlock.restrict(ro, rw, network={network!r}, masked={list(masked)!r})
        """
    ) + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=str(workspace)
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture
def listener() -> Iterator[int]:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)  # connect completes on the backlog; no accept needed
    yield srv.getsockname()[1]
    srv.close()


def test_abi_version_matches_raw_syscall() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    assert libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)) == ABI


def test_allowed_operations(tmp_path: Path) -> None:
    out = _confined(
        tmp_path,
        """
        with open("/usr/lib/os-release" if os.path.exists("/usr/lib/os-release") else sys.executable, "rb") as f:
            f.read(4)
        os.listdir("/usr")
        subprocess.run(["/bin/true"], check=True)
        with open("out.txt", "w") as f:
            f.write("ok")
        with open("/dev/null", "w") as f:
            f.write("x")
        print("ok")
        """,
    )
    assert out == "ok"
    assert (tmp_path / "ws" / "out.txt").read_text() == "ok"


def test_reading_outside_allowed_set_denied(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("s3cret")
    out = _confined(
        tmp_path,
        f"""
        try:
            open({str(secret / "key")!r}).read()
            print("read")
        except PermissionError:
            print("denied")
        """,
    )
    assert out == "denied"


def test_writing_etc_denied(tmp_path: Path) -> None:
    out = _confined(
        tmp_path,
        """
        try:
            open("/etc/herald-landlock-test", "w")
            print("written")
        except PermissionError:
            print("denied")
        """,
    )
    assert out == "denied"
    assert not os.path.exists("/etc/herald-landlock-test")


_CONNECT = """
s = socket.socket()
try:
    s.connect(("127.0.0.1", {port}))
    print("connected")
except PermissionError:
    print("denied")
"""


@pytest.mark.skipif(ABI < 4, reason="Landlock TCP rights need ABI >= 4")
def test_tcp_connect_denied(tmp_path: Path, listener: int) -> None:
    assert _confined(tmp_path, _CONNECT.format(port=listener)) == "denied"


def test_tcp_connect_allowed_with_network(tmp_path: Path, listener: int) -> None:
    assert _confined(tmp_path, _CONNECT.format(port=listener), network=True) == "connected"


@pytest.mark.skipif(ABI < 6, reason="Landlock signal scoping needs ABI >= 6")
def test_signal_outside_domain_denied(tmp_path: Path) -> None:
    out = _confined(
        tmp_path,
        f"""
        try:
            os.kill({os.getpid()}, 0)
            print("signalled")
        except PermissionError:
            print("denied")
        """,
    )
    assert out == "denied"


def test_unix_path_socket_outside_allowed_set_connects(tmp_path: Path) -> None:
    # The RPC socket: Landlock does not restrict connect() on path sockets, and resolving the
    # path needs no right, so a socket in an unlisted directory stays reachable.
    sockdir = tmp_path / "rpc"
    sockdir.mkdir()
    path = str(sockdir / "s")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    try:
        out = _confined(
            tmp_path,
            f"""
            s = socket.socket(socket.AF_UNIX)
            s.connect({path!r})
            print("connected")
            """,
        )
    finally:
        srv.close()
    assert out == "connected"


@pytest.mark.parametrize("abi", range(1, ABI + 1) if ABI else [1])
def test_older_abi_rulesets(tmp_path: Path, abi: int) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    masked = tmp_path / "ws" / "masked"
    (masked / "deep").mkdir(parents=True)
    (masked / "deep" / "key").write_text("s3cret")
    (tmp_path / "ws" / "sub").mkdir()
    out = _confined(
        tmp_path,
        f"""
        with open("sub/out.txt", "w") as f:
            f.write("ok")
        for path in ({str(secret)!r}, {str(masked / "deep" / "key")!r}):
            try:
                open(path).read()
                print("read")
            except PermissionError:
                print("denied")
        """,
        abi=abi,
        masked=(str(masked),),
    )
    assert out.split() == ["denied", "denied"]
    assert (tmp_path / "ws" / "sub" / "out.txt").read_text() == "ok"


@pytest.mark.skipif(ABI < 6, reason="Landlock abstract-socket scoping needs ABI >= 6")
def test_abstract_unix_socket_outside_domain_denied(tmp_path: Path) -> None:
    name = f"\0herald-landlock-test-{os.getpid()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(name)
    srv.listen(1)
    try:
        out = _confined(
            tmp_path,
            f"""
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect({name!r})
                print("connected")
            except PermissionError:
                print("denied")
            """,
        )
    finally:
        srv.close()
    assert out == "denied"
