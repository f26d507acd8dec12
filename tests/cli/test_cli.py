"""`herald` as a person runs it: a real subprocess, real scripts, real exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERALD = [sys.executable, "-m", "herald"]


def run(
    args: list[str], cwd: Path, env_home: Path, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HERALD_DATA_DIR=str(env_home / "data"), HERALD_CONFIG=str(env_home / "none.toml"))
    return subprocess.run(HERALD + args, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout)


def test_exec_prints_stdout_and_exits_zero(workspace: Path, home: Path) -> None:
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    script = workspace / "s.py"
    script.write_text("from hermes_tools import read_file\nprint(read_file('notes.txt')['total_lines'])\n")
    proc = run(["exec", str(script)], workspace, home)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "2\n"
    assert "success" in proc.stderr and "1 tool call" in proc.stderr


def test_exec_reads_script_from_stdin(workspace: Path, home: Path) -> None:
    proc = run(["exec", "-"], workspace, home, stdin="print('from stdin')\n")
    assert proc.returncode == 0
    assert proc.stdout == "from stdin\n"


def test_exec_error_exit_code_and_traceback(workspace: Path, home: Path) -> None:
    proc = run(["exec", "-"], workspace, home, stdin="print('before')\nraise ValueError('boom')\n")
    assert proc.returncode == 1
    assert proc.stdout == "before\n"
    assert "ValueError: boom" in proc.stderr


def test_exec_timeout_exit_code(workspace: Path, home: Path) -> None:
    proc = run(["exec", "-", "--timeout", "1"], workspace, home, stdin="import time\ntime.sleep(30)\n")
    assert proc.returncode == 124
    assert "Timed out after 1 s" in proc.stderr


def test_exec_ctrl_c_interrupts_script(workspace: Path, home: Path) -> None:
    env = dict(os.environ, HERALD_DATA_DIR=str(home / "data"), HERALD_CONFIG=str(home / "none.toml"))
    script = workspace / "slow.py"
    script.write_text("print('started', flush=True)\nopen('running', 'w').close()\nimport time\ntime.sleep(60)\n")
    proc = subprocess.Popen(
        [*HERALD, "exec", str(script)],
        cwd=workspace,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    while not (workspace / "running").exists():  # interrupt once the script runs, not before
        assert time.monotonic() - started < 60 and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert time.monotonic() - started < 45  # generous (a loaded machine): not the script's 60 s
    assert "Interrupted" in err
    assert out == "started\n"  # what the script printed before the interrupt is kept


def test_exec_json_prints_result_object(workspace: Path, home: Path) -> None:
    proc = run(["exec", "-", "--json"], workspace, home, stdin="print('hi')\n")
    assert proc.returncode == 0
    result = json.loads(proc.stdout)
    assert result["status"] == "success"
    assert result["output"] == "hi\n"
    assert set(result) >= {"error", "exit_code", "tool_calls_made", "duration_seconds", "output_spill_path"}


def test_exec_tools_flag_limits_what_scripts_can_call(workspace: Path, home: Path) -> None:
    script = (
        "from hermes_tools import _call, ToolError\n"
        "try:\n    _call('terminal', {'command': 'echo hi'})\nexcept ToolError as e:\n    print(e)\n"
    )
    proc = run(["exec", "-", "--tools", "read_file,search_files"], workspace, home, stdin=script)
    assert proc.returncode == 0, proc.stderr
    assert "not enabled in this session" in proc.stdout
    assert "Available in this script: read_file, search_files" in proc.stdout


def test_exec_max_tool_calls_and_cwd(workspace: Path, home: Path) -> None:
    sub = workspace / "sub"
    sub.mkdir()
    script = (
        "from hermes_tools import terminal, ToolError\n"
        "print(terminal('pwd')['output'])\n"
        "try:\n    terminal('pwd')\nexcept ToolError as e:\n    print('refused:', e)\n"
    )
    proc = run(["exec", "-", "--max-tool-calls", "1", "--cwd", str(sub)], workspace, home, stdin=script)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()[:2]
    assert first == str(sub)
    assert second.startswith("refused: Tool call limit reached")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["exec", "does-not-exist.py"], "script does-not-exist.py not found"),
        (["exec", "-", "--tools", "read_file,nope"], "unknown tool(s): nope"),
        (["exec", "-", "--cwd", "/no/such/dir"], "no such directory"),
    ],
)
def test_exec_usage_errors_exit_two_with_a_clear_message(
    workspace: Path, home: Path, args: list[str], message: str
) -> None:
    proc = run(args, workspace, home, stdin="print(1)\n")
    assert proc.returncode == 2
    assert message in proc.stderr


def test_bad_config_file_is_a_usage_error(workspace: Path, home: Path) -> None:
    config = home / "bad.toml"
    config.write_text("[sandbox]\ntimeuot = 5\n")
    proc = run(["--config", str(config), "exec", "-"], workspace, home, stdin="print(1)\n")
    assert proc.returncode == 2
    assert "unknown setting 'sandbox.timeuot'" in proc.stderr


def test_tools_lists_stub_signatures(workspace: Path, home: Path) -> None:
    proc = run(["tools"], workspace, home)
    assert proc.returncode == 0
    assert "read_file(path: str, offset: int = 1, limit: int = 500)" in proc.stdout
    assert "terminal(command: str" in proc.stdout
    assert "parallel(*calls)" in proc.stdout
    schemas = json.loads(run(["tools", "--json"], workspace, home).stdout)
    assert {s["function"]["name"] for s in schemas} >= {"read_file", "write_file", "patch", "search_files", "terminal"}


def test_doctor_reports_local_backend_ok(workspace: Path, home: Path) -> None:
    proc = run(["doctor"], workspace, home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "backend local" in proc.stdout


def test_the_cli_imports_rich_only_to_print_with_it() -> None:
    """Every `herald` command pays for what `herald.cli` imports: rich (~40 ms here) waits for a
    console, so a piped `herald exec` or `--json` never loads it."""
    probe = ("import sys, herald.cli\n"
             "from herald.cli.common import escape\n"
             "print('rich' in sys.modules, end=' ')\n"
             "escape('[x]')\n"
             "print('rich' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout == "False True\n"
