"""`herald exec --timeout T` exits by T + kill grace + a margin whatever the script's last call
was doing: a terminal command that ignores SIGTERM, an MCP tool that takes minutes, patches
parked behind a file's lock. The result says "timeout" and nothing of the run is left alive.

The bound asserted is generous (a loaded machine must not fail it); what it catches is a call
that holds the exit up for as long as it likes (tens of seconds, or for ever).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from tests.fixtures.users import User
from tests.runtime._helpers import pids_with_marker

from . import _herald

T = 3
GRACE = 2
MARGIN = 10  # seconds beyond T + grace for start-up, closing and a loaded machine


def _exec(tmp_path: Path, code: str, **env: str) -> tuple[float, dict[str, object], str]:
    script = tmp_path / "script.py"
    script.write_text(code)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    started = time.monotonic()
    done = _herald.run(["exec", "--json", "--timeout", str(T), "-c", f"sandbox.kill_grace={GRACE}", str(script)],
                       cwd=work, home=tmp_path, timeout=120, **env)
    elapsed = time.monotonic() - started
    assert done.returncode == 124, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    return elapsed, json.loads(done.stdout), done.stderr


def test_a_command_that_ignores_sigterm(tmp_path: Path) -> None:
    marker = f"1000.{uuid.uuid4().int % 10**9:09d}"
    elapsed, result, _ = _exec(tmp_path, (
        "from hermes_tools import terminal\n"
        "print('started', flush=True)\n"
        f"terminal(\"trap '' TERM; sleep {marker}\", timeout=600)\n"
    ))
    assert result["status"] == "timeout", result
    assert elapsed < T + GRACE + MARGIN, f"herald exec took {elapsed:.1f} s"
    assert not pids_with_marker(marker, environ=True), "the command outlived herald exec"


def test_patches_parked_behind_a_files_lock(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    line = "a line of a large file, with some words on it\n"
    (work / "big.txt").write_text("".join(f"marker{k}\n" + line * 30_000 for k in range(12)))
    elapsed, result, _ = _exec(
        tmp_path,
        (
            "import threading\n"
            "from hermes_tools import patch\n"
            "threads = [threading.Thread(target=patch, args=('big.txt', 'marker%d' % k, 'done%d' % k))\n"
            "           for k in range(12)]\n"
            "for t in threads: t.start()\n"
            "for t in threads: t.join()\n"
        ),
    )
    assert result["status"] == "timeout", result
    assert elapsed < T + GRACE + MARGIN, f"herald exec took {elapsed:.1f} s"
    after_exit = (work / "big.txt").read_bytes()
    time.sleep(1)
    assert (work / "big.txt").read_bytes() == after_exit, "a patch wrote after herald exec exited"


def test_an_mcp_tool_that_takes_minutes(tmp_path: Path) -> None:
    from tests.mcp.servers import ensure

    pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'herald[mcp]'")
    command = ensure().command("server-everything")
    marker = f"herald-deadline-{uuid.uuid4().hex[:10]}"
    config = tmp_path / "config.toml"
    config.write_text(
        "[mcp_servers.everything]\n"
        f"command = {json.dumps(command[0])}\n"
        f"args = {json.dumps([*command[1:], 'stdio'])}\n"
        f"env = {{ HERALD_TEST_MARKER = {json.dumps(marker)} }}\n"
    )
    # The run's clock starts with herald exec, and listing a server's tools counts against it:
    # listed beforehand (and kept), this run spends its 3 s in the tool call, not in the listing.
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    listed = _herald.run(["mcp", "list"], cwd=work, home=tmp_path, timeout=120, HERALD_CONFIG=str(config))
    assert listed.returncode == 0, (listed.stdout[-2000:], listed.stderr[-2000:])
    elapsed, result, _ = _exec(tmp_path, (
        "from hermes_tools import mcp_everything_trigger_long_running_operation as slow\n"
        "print('started', flush=True)\n"
        "slow(duration=300, steps=3)\n"
    ), HERALD_CONFIG=str(config))
    assert result["status"] == "timeout", result
    assert "started" in str(result.get("output")), result
    assert elapsed < T + GRACE + MARGIN, f"herald exec took {elapsed:.1f} s"
    assert not pids_with_marker(marker, environ=True), "the MCP server outlived herald exec"


def test_a_command_that_ignores_sigterm_as_a_user(nonroot: User) -> None:
    """The same as the generated non-root user: the bound and the clean-up do not lean on root."""
    marker = f"1000.{uuid.uuid4().int % 10**9:09d}"
    code = ("from hermes_tools import terminal\n"
            f"terminal(\"trap '' TERM; sleep {marker}\", timeout=600)\n")
    started = time.monotonic()
    done = nonroot.herald("exec", "--json", "--timeout", str(T), "-c", f"sandbox.kill_grace={GRACE}", "-",
                          input=code, timeout=120)
    elapsed = time.monotonic() - started
    assert done.returncode == 124, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert json.loads(done.stdout)["status"] == "timeout"
    assert elapsed < T + GRACE + MARGIN, f"herald exec took {elapsed:.1f} s"
    assert not pids_with_marker(marker, environ=True), "the command outlived herald exec"
