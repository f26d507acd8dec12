"""`herald exec` while the script runs: output streamed as produced, a live status line on a
terminal, JSON events, and stop signals. Ordering is forced with files the script waits for,
never with sleeps: a script blocks until the test has seen what it printed."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

import pytest

from herald._sandbox.procs.trees import alive
from tests.runtime._helpers import host_pid

from ._herald import HERALD, herald_env, start

DEADLINE = 60.0  # only bounds a hang; no verdict depends on it


def wait_for_file(name: str) -> str:
    """Script source that blocks until the test creates `name` in the script's cwd."""
    return f"import os, time\nwhile not os.path.exists({name!r}):\n    time.sleep(0.01)\n"


def read_line(stream: IO[str] | None) -> str:
    assert stream is not None, "herald was started without a pipe for this stream"
    line = stream.readline()
    assert line, "herald closed its output before the expected line"
    return str(line)


def test_stdout_and_stderr_arrive_while_the_script_still_runs(workspace: Path, home: Path) -> None:
    script = workspace / "s.py"
    script.write_text(
        "import sys\nprint('first out')\nprint('first err', file=sys.stderr)\n"
        + wait_for_file("go") + "print('after go')\n"
    )
    proc = start(["exec", str(script)], workspace, home, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert read_line(proc.stdout) == "first out\n"  # the script is blocked: this was streamed
        assert read_line(proc.stderr) == "first err\n"
        (workspace / "go").touch()
        out, err = proc.communicate(timeout=DEADLINE)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert out == "after go\n"
    assert "success" in err


def test_json_events_stream_tool_calls_and_output_then_the_result(workspace: Path, home: Path) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    script = workspace / "s.py"
    script.write_text(
        "from hermes_tools import read_file\nread_file('a.txt')\nprint('read it')\n" + wait_for_file("go")
    )
    proc = start(["exec", str(script), "--json", "--events"], workspace, home,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        call = json.loads(read_line(proc.stdout))
        printed = json.loads(read_line(proc.stdout))
        (workspace / "go").touch()
        rest, _ = proc.communicate(timeout=DEADLINE)
    finally:
        proc.kill()
    assert call["event"] == "tool_call" and call["tool"] == "read_file" and call["ok"] is True
    assert call["calls"] == 1
    assert printed == {**printed, "event": "stdout", "data": "read it\n"}
    result = json.loads(rest.strip().splitlines()[-1])  # the last line is the result object
    assert result["status"] == "success" and result["tool_calls_made"] == 1
    assert proc.returncode == 0


def test_json_without_events_prints_only_the_result_object(workspace: Path, home: Path) -> None:
    proc = subprocess.run([*HERALD, "exec", "-", "--json"], cwd=workspace, env=herald_env(home),
                          input="print('hi')\n", capture_output=True, text=True, timeout=DEADLINE)
    assert json.loads(proc.stdout)["output"] == "hi\n"


def test_events_need_json(workspace: Path, home: Path) -> None:
    proc = subprocess.run([*HERALD, "exec", "-", "--events"], cwd=workspace, env=herald_env(home),
                          input="print('hi')\n", capture_output=True, text=True, timeout=DEADLINE)
    assert proc.returncode == 2
    assert "--events goes with --json" in proc.stderr


def _read_pty_until(master: int, wanted: bytes, seen: bytearray) -> None:
    deadline = time.monotonic() + DEADLINE
    while wanted not in seen:
        assert time.monotonic() < deadline, f"never saw {wanted!r} on the terminal: {bytes(seen)!r}"
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the other side closed
                break
            seen += chunk


def test_the_live_status_line_counts_refused_calls_apart_from_failed_ones(workspace: Path, home: Path) -> None:
    """Past the call limit the script goes on (it catches the refusals): the line says so while
    it runs, and the summary after it."""
    script = workspace / "s.py"
    script.write_text(
        "from hermes_tools import terminal, read_file, ToolError\n"
        "for call in [lambda: read_file('missing.txt')] + [lambda: terminal('true')] * 4:\n"
        "    try:\n        call()\n    except ToolError:\n        pass\n"
        + wait_for_file("go")
    )
    master, slave = pty.openpty()
    proc = subprocess.Popen([*HERALD, "exec", str(script), "--max-tool-calls", "2"], cwd=workspace,
                            env=herald_env(home), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    seen = bytearray()
    try:
        _read_pty_until(master, b"5 tool call(s) (1 failed, 3 refused)", seen)  # while the script waits
        (workspace / "go").touch()
        _read_pty_until(master, b"s\r\n", seen)
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        proc.kill()
        os.close(master)
    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", bytes(seen).decode())
    assert "success · exit 0 · 2 tool call(s) (3 refused)" in plain


def test_terminal_shows_a_live_status_line_with_the_tool_call_count(workspace: Path, home: Path) -> None:
    script = workspace / "s.py"
    script.write_text(
        "from hermes_tools import terminal\nprint('hello')\nterminal('true')\nterminal('true')\n"
        + wait_for_file("go") + "print('bye')\n"
    )
    master, slave = pty.openpty()
    proc = subprocess.Popen([*HERALD, "exec", str(script)], cwd=workspace, env=herald_env(home),
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    seen = bytearray()
    try:
        _read_pty_until(master, b"2 tool call(s)", seen)  # the status line, while the script waits
        assert b"running" in seen and b"hello" in seen
        (workspace / "go").touch()
        _read_pty_until(master, b"success", seen)
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        proc.kill()
        os.close(master)
    text = bytes(seen).decode()
    assert "bye" in text
    # The status line is erased before output and never printed into the script's lines.
    lines = [line.rsplit("\r", 1)[-1].replace("\x1b[K", "") for line in text.replace("\r\n", "\n").split("\n")]
    assert "hello" in lines and "bye" in lines


def test_piped_output_has_no_status_line(workspace: Path, home: Path) -> None:
    proc = subprocess.run([*HERALD, "exec", "-"], cwd=workspace, env=herald_env(home),
                          input="from hermes_tools import terminal\nterminal('true')\nprint('x')\n",
                          capture_output=True, text=True, timeout=DEADLINE)
    assert proc.stdout == "x\n"
    assert "running" not in proc.stderr and "\x1b[K" not in proc.stderr


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_stop_signals_kill_the_tree_and_clean_up(workspace: Path, home: Path, tmp_path: Path,
                                                 signum: int, code: int) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    script = workspace / "s.py"
    script.write_text(
        "import os, subprocess\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        "print(child.pid, os.readlink('/proc/self/ns/pid'), flush=True)\n"
        "child.wait()\n"
    )
    proc = subprocess.Popen([*HERALD, "exec", str(script)], cwd=workspace, env=herald_env(home, TMPDIR=str(scratch)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ns_pid, pidns = read_line(proc.stdout).split()
        sleeper = host_pid(int(ns_pid), pidns)  # as this machine sees it (the script may be in a PID namespace)
        assert sleeper is not None
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=DEADLINE)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert "Interrupted" in err
    assert not alive(sleeper), "the script's child outlived herald exec"
    assert list(scratch.iterdir()) == [], "herald exec left temp files behind"
