"""`herald mcp serve` driven by the MCP SDK's own client, over stdio and streamable HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'herald[mcp]'")

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from herald import Runtime, Settings
from tests.mcp.fakeservers import first_text
from tests.tools.conftest import registered

SCRIPT = """
from hermes_tools import write_file, read_file, terminal
write_file("note.txt", "from an MCP client\\n")
print(read_file("note.txt")["content"].strip())
print(terminal("echo shell")["output"].strip())
"""


def _env(home: Path) -> dict[str, str]:
    env = {"HERALD_DATA_DIR": str(home / "data"), "HERALD_CONFIG": str(home / "none.toml"),
           "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    else:
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env


@asynccontextmanager
async def stdio_herald(workspace: Path, tmp_path: Path, *flags: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "herald", "mcp", "serve", "--cwd",
                                                                 str(workspace), *flags], env=_env(tmp_path))
    async with Client(stdio_client(params), read_timeout_seconds=120) as client:
        yield client


async def _run_with_progress(client: Client, code: str) -> tuple[Any, list[str]]:
    reports: list[str] = []

    # The SDK's ProgressFnT names its parameters: the callback takes the same names.
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append(f"{progress:g} {message}")

    result = await client.call_tool("execute_code", {"code": code}, progress_callback=on_progress)
    return result, reports


def test_stdio_execute_code_with_inner_calls_and_progress(workspace: Path, tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_herald(workspace, tmp_path) as client:
            listed = await client.list_tools()
            assert [t.name for t in listed.tools] == ["execute_code"]
            description = listed.tools[0].description or ""
            assert "read_file(path: str, offset: int = 1, limit: int = 500)" in description  # from the stubs
            result, progress = await _run_with_progress(client, SCRIPT)
            assert not result.is_error, result.content
            data = result.structured_content
            assert data["status"] == "success"
            assert data["output"].splitlines() == ["1|from an MCP client", "shell"]
            assert data["tool_calls_made"] == 3
            assert "from an MCP client" in first_text(result)
            assert progress == ["1 write_file", "2 read_file", "3 terminal"]

    anyio.run(main)
    assert (workspace / "note.txt").read_text() == "from an MCP client\n"


def test_stdio_kernel_sessions_and_refused_calls(workspace: Path, tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_herald(workspace, tmp_path, "--tools", "read_file", "--max-tool-calls", "1") as client:
            await client.call_tool("execute_code", {"code": "x = 41", "session": "k"})
            again = await client.call_tool("execute_code", {"code": "x += 1; print(x)", "session": "k"})
            assert again.structured_content["output"].strip() == "42"
            refused = await client.call_tool("execute_code", {"code": """
from hermes_tools import read_file, ToolError
try:
    import hermes_tools; hermes_tools.terminal
except AttributeError as exc:
    print("no terminal:", "not enabled" in str(exc))
for i in range(2):
    try:
        read_file("missing-%d.txt" % i)
    except ToolError as exc:
        print(type(exc).__name__, str(exc)[:40])
"""})
            lines = refused.structured_content["output"].splitlines()
            assert lines[0] == "no terminal: True"
            assert lines[2].startswith("ToolError Tool call limit reached")  # the run's budget: 1 call
            direct = await client.call_tool("read_file", {"path": "a.txt"})
            assert direct.is_error and "--direct-tools" in first_text(direct)

    anyio.run(main)


async def _cancel_then_run_again(client: Client) -> None:
    """Cancel a running script once its first tool call is reported; the next run must answer."""
    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    async def long_script() -> None:
        await client.call_tool("execute_code", {"code": (
            "import time\nfrom hermes_tools import terminal\nterminal('true')\n"
            "time.sleep(600)\nopen('survived.txt', 'w').write('no')\n")}, progress_callback=on_progress)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(long_script)
        with anyio.fail_after(60):
            await started.wait()
        tasks.cancel_scope.cancel()  # the SDK sends notifications/cancelled
    # Runs are serialised: this one answers only once the cancelled script is gone.
    with anyio.fail_after(60):
        after = await client.call_tool("execute_code", {"code": "print('next')"})
    assert after.structured_content["output"].strip() == "next"


def test_stdio_cancellation_interrupts_the_script(workspace: Path, tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_herald(workspace, tmp_path) as client:
            await _cancel_then_run_again(client)

    anyio.run(main)
    assert not (workspace / "survived.txt").exists()


def test_direct_tools_are_offered_with_their_schemas(workspace: Path, tmp_path: Path) -> None:
    (workspace / "a.txt").write_text("alpha\n")

    async def main() -> None:
        async with stdio_herald(workspace, tmp_path, "--direct-tools", "--tools", "read_file,write_file") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"execute_code", "read_file", "write_file"}
            reads, writes = tools["read_file"].annotations, tools["write_file"].annotations
            assert reads is not None and reads.read_only_hint is True
            assert writes is not None and writes.read_only_hint is False
            read = await client.call_tool("read_file", {"path": "a.txt"})
            assert "alpha" in read.structured_content["content"]
            missing = await client.call_tool("read_file", {"path": "nope.txt"})
            assert missing.is_error

    anyio.run(main)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_herald(workspace: Path, tmp_path: Path) -> Iterator[str]:
    """`herald mcp serve --http --no-auth` on a free port of 127.0.0.1; its URL once it listens
    (authentication has tests of its own: test_serve_auth.py)."""
    port = _free_port()
    env = dict(os.environ, **_env(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "herald", "mcp", "serve", "--http", f"127.0.0.1:{port}",
                             "--cwd", str(workspace), "--no-auth"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "herald mcp serve --http did not listen within 60 s"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_http_execute_code_progress_refusal_and_cancellation(workspace: Path, tmp_path: Path) -> None:
    with http_herald(workspace, tmp_path) as url:

        async def main() -> None:
            async with Client(url, read_timeout_seconds=120) as client:
                result, progress = await _run_with_progress(client, SCRIPT)
                assert result.structured_content["output"].splitlines() == ["1|from an MCP client", "shell"]
                assert progress == ["1 write_file", "2 read_file", "3 terminal"]
                refused = await client.call_tool("terminal", {"command": "true"})
                assert refused.is_error and "--direct-tools" in first_text(refused)
                await _cancel_then_run_again(client)

        anyio.run(main)
    assert not (workspace / "survived.txt").exists()


def test_herald_client_over_http_calls_herald_server(workspace: Path, tmp_path: Path, settings: Settings) -> None:
    # Both ways: Herald's MCP client ([mcp_servers.NAME] url + headers) against herald mcp serve --http.
    with http_herald(workspace, tmp_path / "server") as url:
        client_settings = settings.with_overrides(
            {"mcp_servers": {"remote": {"url": url, "headers": {"X-Herald-Test": "1"}}}})
        with Runtime(settings=client_settings, transcript=False) as rt:
            result = rt.execute("""
from hermes_tools import mcp_remote_execute_code as remote
print(remote("print(6 * 7)")["output"].strip())
""")
            assert result.output.strip() == "42", result.error
            assert registered(rt.dispatcher.registry, "mcp_remote_execute_code").mutates  # no readOnlyHint
