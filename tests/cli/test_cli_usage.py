"""What a new user meets on the command line: flags that mean what they say, usage errors that say
what to fix in one line, and text printed intact (no rich markup eaten, no hard wraps in pipes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ._herald import run

CAN_CALL = (
    "import hermes_tools\n"
    "print(sorted(n for n in hermes_tools.__all__ if n not in "
    "('parallel', 'json_parse', 'shell_quote', 'retry', 'transaction', 'ToolError', 'ConnectionLost')))\n"
)


def test_empty_tools_flag_means_no_tools(workspace: Path, home: Path) -> None:
    proc = run(["exec", "-", "--tools", ""], workspace, home, stdin=CAN_CALL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[]\n"


def test_empty_tools_variable_means_no_tools(workspace: Path, home: Path) -> None:
    proc = run(["exec", "-"], workspace, home, stdin=CAN_CALL, HERALD_TOOLS="")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[]\n"


def test_unset_tools_means_every_tool(workspace: Path, home: Path) -> None:
    proc = run(["exec", "-"], workspace, home, stdin=CAN_CALL)
    assert "read_file" in proc.stdout and "terminal" in proc.stdout


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0", "soon"])
def test_bad_timeouts_are_usage_errors(workspace: Path, home: Path, value: str) -> None:
    proc = run(["exec", "-", f"--timeout={value}"], workspace, home, stdin="print(1)\n")
    assert proc.returncode == 2
    assert "--timeout" in proc.stderr and ("above 0" in proc.stderr or "not a number" in proc.stderr)
    assert proc.stdout == ""


def test_a_directory_is_not_a_script(workspace: Path, home: Path) -> None:
    proc = run(["exec", str(workspace)], workspace, home)
    assert proc.returncode == 2
    assert f"{workspace} is a directory" in proc.stderr


def test_config_is_accepted_after_the_subcommand(workspace: Path, home: Path) -> None:
    config = home / "c.toml"
    config.write_text('tools = ["read_file"]\n')
    proc = run(["exec", "-", "--config", str(config)], workspace, home, stdin=CAN_CALL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "['read_file']\n"


def test_dash_c_overrides_the_config_file_and_flags_override_dash_c(workspace: Path, home: Path) -> None:
    config = home / "c.toml"
    config.write_text('tools = ["read_file"]\n[sandbox]\ntimeout = 100\n')
    script = "import time\ntime.sleep(60)\n"
    proc = run(["--config", str(config), "exec", "-", "-c", "sandbox.timeout=1"], workspace, home, stdin=script)
    assert proc.returncode == 124
    assert "Timed out after 1 s" in proc.stderr
    proc = run(["--config", str(config), "exec", "-", "-c", 'tools=["terminal"]', "--tools", "write_file"],
               workspace, home, stdin=CAN_CALL)
    assert proc.stdout == "['write_file']\n"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("nonsense", "expected KEY=VALUE"),
        ("sandbox.timeuot=5", "unknown setting 'sandbox.timeuot'"),
        ("sandbox.timeout=inf", "must be a finite number"),
        ("sandbox.timeout=0", "must be a number above 0"),
    ],
)
def test_bad_dash_c_is_a_one_line_usage_error(workspace: Path, home: Path, option: str, message: str) -> None:
    proc = run(["exec", "-", "-c", option], workspace, home, stdin="print(1)\n")
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stderr.count("\n") == 1, "piped errors are one line, never hard-wrapped"
    assert "Traceback" not in proc.stderr


def test_bracketed_text_in_errors_is_printed_intact(workspace: Path, home: Path) -> None:
    proc = run(["exec", "-", "--tools", "read_file,[bold]nope[/bold]"], workspace, home, stdin="print(1)\n")
    assert proc.returncode == 2
    assert "[bold]nope[/bold]" in proc.stderr


def test_unwritable_data_dir_is_a_one_line_error(workspace: Path, home: Path) -> None:
    blocker = home / "a-file"
    blocker.write_text("not a directory\n")
    for command in (["exec", "-"], ["run", "task"]):
        proc = run(command, workspace, home, stdin="print(1)\n", HERALD_DATA_DIR=str(blocker / "data"))
        assert proc.returncode == 2, proc.stderr
        assert f"the data directory {blocker / 'data'} is not writable" in proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_tool_error_traceback_shows_only_the_script(workspace: Path, home: Path) -> None:
    script = "from hermes_tools import read_file\n\ndef load():\n    return read_file('missing.txt')\n\nload()\n"
    for mode in ("host", "backend"):
        proc = run(["exec", "-", "--exec-mode", mode], workspace, home, stdin=script)
        assert proc.returncode == 1
        frames = [line for line in proc.stderr.splitlines() if line.strip().startswith("File ")]
        assert frames == ['  File "<script>", line 6, in <module>', '  File "<script>", line 4, in load'], proc.stderr
        assert "hermes_tools.ToolError: File not found: missing.txt" in proc.stderr
        assert "_hermes_runtime" not in proc.stderr and "hermes_tools.py" not in proc.stderr


def test_importing_a_tool_that_is_not_enabled_names_the_enabled_ones(workspace: Path, home: Path) -> None:
    proc = run(
        ["exec", "-", "--tools", "read_file,patch"], workspace, home, stdin="from hermes_tools import terminal\n"
    )
    assert proc.returncode == 1
    assert ("ImportError: Tool 'terminal' is not enabled in this session. Tools this script can call: "
            "patch, read_file.") in proc.stderr
    proc = run(["exec", "-"], workspace, home, stdin="from hermes_tools import read_fil\n")
    assert "hermes_tools has no tool or helper named 'read_fil'" in proc.stderr


def test_tools_json_includes_execute_code_in_both_formats(workspace: Path, home: Path) -> None:
    openai = json.loads(run(["tools", "--json"], workspace, home).stdout)
    assert openai[0]["function"]["name"] == "execute_code"
    assert "read_file" in openai[0]["function"]["description"]
    anthropic = json.loads(run(["tools", "--json", "--format", "anthropic"], workspace, home).stdout)
    assert anthropic[0]["name"] == "execute_code"
    assert {"name", "description", "input_schema"} <= set(anthropic[1])
    assert [t["name"] for t in anthropic] == [t["function"]["name"] for t in openai]


def test_tools_shows_what_a_session_offers_and_what_it_withholds(workspace: Path, home: Path) -> None:
    # No search provider configured: web_search is not offered, and `herald tools` says why.
    proc = run(["tools"], workspace, home)
    assert "Not offered in this session" in proc.stdout
    assert "web_search: no search provider is configured" in proc.stdout
    assert "web_search(" not in proc.stdout
    names = [s["function"]["name"] for s in json.loads(run(["tools", "--json"], workspace, home).stdout)]
    assert "web_search" not in names and "web_extract" in names
    # Named explicitly, it is offered, with the reason in its description (as `herald run` does).
    named = json.loads(run(["tools", "--json", "--tools", "web_search,read_file"], workspace, home).stdout)
    web_search = next(s["function"] for s in named if s["function"]["name"] == "web_search")
    assert "Unavailable in this session: no search provider is configured" in web_search["description"]
    assert "web_search(" in named[0]["function"]["description"]  # execute_code lists it for scripts


def test_tools_prints_type_annotations_intact(workspace: Path, home: Path) -> None:
    proc = run(["tools"], workspace, home)
    assert "Optional[str]" in proc.stdout  # rich markup would eat the [str]


def test_doctor_json_rows_and_config_row_is_honest(workspace: Path, home: Path) -> None:
    proc = run(["doctor", "--json"], workspace, home)
    rows = {r["check"]: r for r in json.loads(proc.stdout)}
    assert {"python", "config", "data dir", "model provider", "web", "browser", "isolation", "backend local"} <= set(
        rows
    )
    assert all(r["status"] in ("ok", "warn", "fail") for r in rows.values())
    assert "does not exist" in rows["config"]["detail"]
    assert rows["backend local"]["status"] == "ok"
