"""`herald mcp serve --http` started for a test, and the SDK's own client reaching it with a token."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def herald_env(home: Path) -> dict[str, str]:
    env = dict(os.environ, HERALD_DATA_DIR=str(home / "data"), HERALD_CONFIG=str(home / "none.toml"))
    env.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    return env


def token_file(path: Path, **tokens: str) -> Path:
    """A 0600 token file with NAME:TOKEN lines (fresh tokens for names given as "")."""
    path.write_text("".join(f"{name}:{token or secrets.token_urlsafe(24)}\n" for name, token in tokens.items()))
    path.chmod(0o600)
    return path


def tokens_in(path: Path) -> dict[str, str]:
    return dict(line.split(":", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))


@dataclass
class Served:
    url: str
    proc: subprocess.Popen[bytes]
    stderr: Path
    data_dir: Path

    def said(self) -> str:
        return self.stderr.read_text(errors="replace")


@contextmanager
def http_herald(workspace: Path, home: Path, *flags: str, host: str = "127.0.0.1", port: int | None = None,
                env: dict[str, str] | None = None) -> Iterator[Served]:
    """`herald mcp serve --http` on a free port; once it listens, its URL and what it said."""
    port = port or free_port()
    home.mkdir(parents=True, exist_ok=True)
    stderr = home / "serve.stderr"
    with stderr.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "herald", "mcp", "serve", "--http", f"{host}:{port}",
                                 "--cwd", str(workspace), *flags], env=dict(herald_env(home), **(env or {})),
                                stdout=subprocess.DEVNULL, stderr=err)
    served = Served(f"http://{host}:{port}/mcp", proc, stderr, home / "data")
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, served.said()
            try:
                socket.create_connection((host, port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "herald mcp serve --http did not listen within 60 s"
                time.sleep(0.1)
        yield served
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@asynccontextmanager
async def client(url: str, token: str | None, *, mode: str = "auto", auth: Any = None) -> AsyncIterator[Client]:
    """The SDK's Client, sending `Authorization: Bearer TOKEN` (no header for None). `mode`
    "legacy": the initialize handshake and an MCP session (Mcp-Session-Id); "auto": the SDK's
    newest protocol (2026-07-28: one self-contained request per call, no MCP session). `auth`:
    an httpx Auth such as the SDK's OAuth providers."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers, auth=auth))
    async with Client(transport, read_timeout_seconds=120, mode=mode) as connected:
        yield connected
