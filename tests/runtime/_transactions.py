"""Shared by the transaction tests (test_transactions*.py, tests/security/test_transaction_requests.py):
a small seeded workspace, a script's header and the line it prints of its transaction."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from herald import ExecutionResult, Runtime
from tests.checkpoints.trees import State, read_tree

from ._helpers import script

RuntimeFactory = Callable[..., Runtime]
MODES = pytest.mark.parametrize("exec_mode", ["host", "backend"])
MANY_CALLS = {"sandbox.max_tool_calls": 100_000}


def seed(workspace: Path) -> State:
    (workspace / "keep.txt").write_text("original\n")
    (workspace / "gone.txt").write_text("deleted by the block\n")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "mode.sh").write_text("#!/bin/sh\n")
    (workspace / "sub" / "mode.sh").chmod(0o755)
    return read_tree(workspace)


# Changes every way a block can: a file tool, terminal, the script's own open().
CHANGE_ALL = """
    write_file("keep.txt", "changed by write_file\\n")
    write_file("new/by_tool.txt", "new\\n")
    terminal("rm gone.txt && chmod 600 sub/mode.sh && echo cmd > by_terminal.txt && mkdir -p emptydir")
    with open("by_open.txt", "w") as fh:
        fh.write("written by open()\\n")
"""
PRINT_TX = """
print(json.dumps({"committed": tx.committed, "changed": tx.changed, "verify": tx.verify, "reason": tx.reason,
                  "conflicts": tx.conflicts, "not_covered": tx.not_covered}))
"""
HEADER = "import json, os\nfrom hermes_tools import transaction, write_file, terminal, read_file, ToolError\n"


def outcome(result: ExecutionResult) -> dict[str, Any]:
    assert result.status == "success", result
    found: dict[str, Any] = json.loads(result.output.strip().splitlines()[-1])
    return found


def run(runtime: Runtime, body: str, tail: str = "", **kwargs: Any) -> ExecutionResult:
    kwargs.setdefault("timeout", 60)
    return runtime.execute(HEADER + script(body) + tail, **kwargs)


