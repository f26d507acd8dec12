"""What runs inside the child must import in any Python >= 3.8, using the stdlib only."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from herald.runtime.sandbox.stubgen import write_sandbox
from herald.tools.registry import default_registry

STDLIB = set(sys.stdlib_module_names) | {"__future__", "_hermes_runtime", "hermes_tools"}


@pytest.fixture
def sandbox_files(tmp_path: Path) -> list[Path]:
    write_sandbox(tmp_path, default_registry().sandbox_tools(None))
    files = sorted(tmp_path.rglob("*.py"))
    assert {f.name for f in files} >= {"hermes_tools.py", "bootstrap.py", "client.py", "protocol.py", "helpers.py"}
    return files


def test_child_files_parse_as_python_3_8(sandbox_files: list[Path]) -> None:
    for path in sandbox_files:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))


def test_child_files_import_only_the_stdlib(sandbox_files: list[Path]) -> None:
    for path in sandbox_files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = [node.module.split(".")[0]]
            else:
                continue
            assert set(roots) <= STDLIB, f"{path.name} imports {roots}"


def test_annotations_are_never_evaluated_at_runtime(sandbox_files: list[Path]) -> None:
    # PEP 604/585 annotations (`dict[str, Any]`, `X | None`) only work on 3.8 when postponed.
    for path in sandbox_files:
        if path.name == "hermes_tools.py" or path.name == "__init__.py":
            continue  # generated stubs use typing.Optional/Dict/List explicitly
        assert "from __future__ import annotations" in path.read_text(), path.name
