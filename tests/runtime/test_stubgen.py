"""The generated `hermes_tools` module, imported by a real interpreter as a sandbox child would."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest

import herald._sandbox
from herald import Runtime, Settings
from herald.backends.local import LocalBackend
from herald.runtime.sandbox.sandboxdir import shared_runtime_package, write_sandbox
from herald.runtime.toolset import default_registry
from herald.tools import Registry, Tool
from herald.tools.stubgen import HELPERS, render_module, render_stub, signatures


def noop(args: dict[str, Any], ctx: Any) -> Any:
    return None


class TrickyResult(TypedDict):
    ok: bool


TRICKY = Tool(
    name="tricky",
    description='Quotes """ and \'\'\' and a backslash \\ and \\n; ends with a quote "',
    parameters={
        "type": "object",
        "properties": {
            "mode": {
                "type": "string",
                "enum": ["fast", "slow"],
                "default": "fast",
                "description": "How.",
            },
            "items": {"type": "array", "description": "Things."},
            "options": {"type": "object"},
            "ratio": {"type": ["number", "null"]},
            "count": {"type": "integer", "default": 3},
            "flag": {"type": "boolean", "default": False},
            "anything": {"description": "No type at all."},
            "name": {"type": "string", "description": "Required, declared last."},
        },
        "required": ["name"],
    },
    handler=noop,
    returns=TrickyResult,
)


def script_tools() -> list[Tool]:
    return [t for t in default_registry() if t.sandbox]


def import_in_child(directory: Path, code: str) -> Any:
    """Import hermes_tools from `directory` in a fresh isolated interpreter; run `code`, which
    must print one JSON value."""
    prelude = (
        f"import sys, json, inspect\nsys.path.insert(0, {str(directory)!r})\nimport hermes_tools\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-B", "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=directory,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_generated_module_compiles() -> None:
    source = render_module([*script_tools(), TRICKY])
    compile(source, "hermes_tools.py", "exec")


def test_sandbox_layout(tmp_path: Path) -> None:
    stub = write_sandbox(tmp_path, script_tools())
    assert stub == tmp_path / "hermes_tools.py"
    package = tmp_path / "_hermes_runtime"
    # Every module of the package Herald itself imports, shipped as a plain copy.
    source = Path(herald._sandbox.__file__).parent
    shipped = sorted(p.relative_to(package).as_posix() for p in package.rglob("*") if p.is_file())
    assert shipped == sorted(p.relative_to(source).as_posix() for p in source.rglob("*.py"))
    for name in shipped:
        assert (package / name).read_bytes() == (source / name).read_bytes(), name


def test_host_sandboxes_link_one_copy_of_the_package(tmp_path: Path) -> None:
    """Host-mode sandbox directories share the process's one copy of the package (copying it
    per Runtime was most of what making a Runtime cost); what is shipped elsewhere is a copy."""
    package = shared_runtime_package(str(tmp_path))
    assert shared_runtime_package(str(tmp_path)) == package
    one, two, shipped = (tmp_path / name for name in ("one", "two", "shipped"))
    for directory in (one, two, shipped):
        directory.mkdir()
    write_sandbox(one, script_tools(), package=package)
    write_sandbox(two, script_tools(), package=package)
    write_sandbox(shipped, script_tools())
    assert (one / "_hermes_runtime").resolve() == (two / "_hermes_runtime").resolve() == package.resolve()
    assert (
        not (shipped / "_hermes_runtime").is_symlink()
        and (shipped / "_hermes_runtime" / "child" / "bootstrap.py").is_file()
    )
    info = import_in_child(one, "print(json.dumps({'ok': hermes_tools.ToolError.__name__}))")
    assert info == {"ok": "ToolError"}


def test_stub_bytecode_is_checked_against_the_source_not_its_time(tmp_path: Path) -> None:
    """One compilation serves every Runtime with the same tools, so the compiled stubs must be
    valid for whichever file holds that source: a hash-checked .pyc, used by the child only
    while the source is unchanged."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    stubs = write_sandbox(one, script_tools()), write_sandbox(two, script_tools())
    compiled = [Path(importlib.util.cache_from_source(str(stub))).read_bytes() for stub in stubs]
    assert compiled[0] == compiled[1]
    assert int.from_bytes(compiled[0][4:8], "little") == 0b11, "flags: hash-based, checked"
    stubs[1].write_text(stubs[1].read_text() + "\nCHANGED = True\n")
    info = import_in_child(two, "print(json.dumps({'changed': getattr(hermes_tools, 'CHANGED', False)}))")
    assert info == {"changed": True}, "a stale .pyc must not stand in for a changed source"


def test_module_surface(tmp_path: Path) -> None:
    tools = [*script_tools(), TRICKY]
    write_sandbox(tmp_path, tools)
    info = import_in_child(
        tmp_path,
        """
out = {"all": hermes_tools.__all__, "doc": hermes_tools.__doc__, "tools": {}}
for name in hermes_tools.__all__:
    obj = getattr(hermes_tools, name)
    if inspect.isfunction(obj) and obj.__module__ == "hermes_tools":
        out["tools"][name] = {"sig": str(inspect.signature(obj)), "doc": inspect.getdoc(obj)}
out["herald_loaded"] = [m for m in sys.modules if m == "herald" or m.startswith("herald.")]
out["error_is_exception"] = issubclass(hermes_tools.ToolError, Exception)
print(json.dumps(out))
""",
    )
    names = [t.name for t in tools]
    assert info["all"] == [*names, *HELPERS, "ToolError", "ConnectionLost"]
    assert sorted(info["tools"]) == sorted(names)
    for name in names:
        assert info["tools"][name]["doc"], f"{name} has no docstring"
        assert "Raises ToolError" in info["tools"][name]["doc"]
        assert name in info["doc"]
    assert info["herald_loaded"] == []
    assert info["error_is_exception"]
    read_file = info["tools"]["read_file"]
    assert read_file["sig"] == "(path: str, offset: int = 1, limit: int = 500) -> hermes_tools.ReadFileResult"
    assert "Returns:\n    {'path': str, 'content': str (numbered lines" in read_file["doc"]
    assert "Args:\n    path: File path" in read_file["doc"]
    terminal = info["tools"]["terminal"]
    assert terminal["sig"].startswith("(command: str, timeout: Optional[float] = None, workdir: Optional[str] = None")
    tricky = info["tools"]["tricky"]
    assert tricky["sig"] == (
        "(name: str, mode: str = 'fast', items: Optional[List[Any]] = None, "
        "options: Optional[Dict[str, Any]] = None, ratio: Optional[float] = None, count: int = 3, "
        "flag: bool = False, anything: Any = None) -> hermes_tools.TrickyResult"
    )
    assert "One of: 'fast', 'slow'." in tricky["doc"]
    assert "a backslash \\ and \\n" in tricky["doc"]
    assert "Returns:\n    {'ok': bool}" in tricky["doc"]


def test_calls_outside_a_run_raise_tool_error(tmp_path: Path) -> None:
    write_sandbox(tmp_path, script_tools())
    out = import_in_child(
        tmp_path,
        """
try:
    hermes_tools.read_file("x")
except hermes_tools.ToolError as exc:
    print(json.dumps([exc.error_type, str(exc)]))
""",
    )
    assert out[0] == "NotInSandbox"
    assert "only works inside" in out[1]


def test_stub_passes_arguments_by_name() -> None:
    stub = render_stub(TRICKY)
    namespace: dict[str, Any] = {}
    calls: list[tuple[str, dict[str, Any]]] = []
    header = "from typing import Any, Dict, List, Optional, Union\n"
    exec(header + stub, namespace)

    def call(tool: str, args: dict[str, Any]) -> str:
        calls.append((tool, args))
        return "sent"

    namespace["_call"] = call
    assert namespace["tricky"]("n", count=5) == "sent"
    assert calls == [
        (
            "tricky",
            {
                "name": "n",
                "mode": "fast",
                "items": None,
                "options": None,
                "ratio": None,
                "count": 5,
                "flag": False,
                "anything": None,
            },
        )
    ]


def test_refused_arguments_reach_the_dispatcher() -> None:
    terminal = next(t for t in script_tools() if t.name == "terminal")
    namespace: dict[str, Any] = {}
    exec("from typing import Any, Dict, List, Optional, Union\n" + render_stub(terminal), namespace)
    seen: list[dict[str, Any]] = []
    namespace["_call"] = lambda tool, args: seen.append(args)
    namespace["terminal"]("ls", background=True)
    assert seen[0]["background"] is True  # so the dispatcher can say why it is refused


def test_signatures_for_prompts() -> None:
    lines = signatures([TRICKY])
    assert lines == [
        "tricky(name: str, mode: str = 'fast', items: Optional[List[Any]] = None, "
        "options: Optional[Dict[str, Any]] = None, ratio: Optional[float] = None, count: int = 3, "
        "flag: bool = False, anything: Any = None) -> TrickyResult"
    ]


@pytest.mark.parametrize("name", ["web-search", "class", "parallel", "ToolError", "_call", "2fast"])
def test_tool_names_that_cannot_be_stubs_are_refused(name: str) -> None:
    tool = Tool(name=name, description="x", parameters={"type": "object", "properties": {}}, handler=noop)
    with pytest.raises(ValueError, match="cannot be called from scripts"):
        render_module([tool])


@pytest.mark.parametrize("param", ["not-valid", "lambda", "_call"])
def test_parameter_names_that_cannot_be_arguments_are_refused(param: str) -> None:
    tool = Tool(
        name="odd",
        description="x",
        parameters={"type": "object", "properties": {param: {"type": "string"}}},
        handler=noop,
    )
    with pytest.raises(ValueError, match=repr(param)):
        render_module([tool])


def test_runtime_with_an_unusable_tool_name_fails_cleanly(make_runtime: Any, settings: Settings) -> None:
    bad = Tool(
        name="web-search",
        description="x",
        parameters={"type": "object", "properties": {}},
        handler=noop,
    )
    with LocalBackend(settings=settings) as backend, pytest.raises(ValueError, match="web-search"):
        Runtime(backend, settings=settings, registry=Registry([*default_registry(), bad]))
    # A tool that scripts cannot call anyway does not need a valid stub name.
    direct = Tool(
        name="web-search",
        description="x",
        parameters={"type": "object", "properties": {}},
        handler=noop,
        sandbox=False,
    )
    runtime = make_runtime(registry=Registry([*default_registry(), direct]))
    assert runtime.execute("import hermes_tools\nprint('ok')", timeout=30).output == "ok\n"
