"""What runs inside the child (hermes_tools.py and the sandbox package, herald/_sandbox) must
import in any Python >= 3.8, using the stdlib only; the package's modules import each other
relatively, so that the copy works under its installed name."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import herald._sandbox
from herald.runtime.sandbox.sandboxdir import write_sandbox
from herald.runtime.toolset import default_registry
from herald.tools.stubgen import RUNTIME_PACKAGE

# hermes_tools.py sits beside the package in the sandbox directory (bootstrap pre-imports it).
STDLIB = set(sys.stdlib_module_names) | {"__future__", "hermes_tools"}
_HOME = Path(herald._sandbox.__file__).parent
PACKAGE_FILES = {p.relative_to(_HOME).as_posix() for p in _HOME.rglob("*.py")}


@pytest.fixture
def sandbox_files(tmp_path: Path) -> list[Path]:
    write_sandbox(tmp_path, default_registry().sandbox_tools(None))
    files = sorted(tmp_path.rglob("*.py"))
    assert sorted(f.relative_to(tmp_path).as_posix() for f in files) == sorted(
        ["hermes_tools.py"] + [f"{RUNTIME_PACKAGE}/{name}" for name in PACKAGE_FILES]
    )
    assert {"child/bootstrap.py", "child/client.py", "wire/framing.py", "child/helpers.py", "supervisor/loop.py",
            "child/zygote.py"} <= PACKAGE_FILES
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
            # Only the generated stubs name the package; its own modules import relatively.
            allowed = STDLIB | {RUNTIME_PACKAGE} if path.name == "hermes_tools.py" else STDLIB
            assert set(roots) <= allowed, f"{path.name} imports {roots}"


def test_annotations_are_never_evaluated_at_runtime(sandbox_files: list[Path]) -> None:
    # PEP 604/585 annotations (`dict[str, Any]`, `X | None`) only work on 3.8 when postponed.
    for path in sandbox_files:
        if path.name == "hermes_tools.py" or path.name == "__init__.py":
            continue  # generated stubs use typing.Optional/Dict/List explicitly
        assert "from __future__ import annotations" in path.read_text(), path.name
