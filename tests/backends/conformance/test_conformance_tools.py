"""The tools, called as the dispatcher calls them, on every backend: the same answers everywhere.

search_files runs with both engines: ripgrep when the backend has it (files.search = "auto"),
and the pure-Python walk over the Backend protocol (files.search = "python").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from herald.backends import Backend
from herald.tools import ToolError
from tests.tools.conftest import CallTool

from ._helpers import sh

PROJECT: dict[str, str | bytes] = {
    "README.md": "# Demo\nTODO: write docs\n",
    "src/app.py": "import os\n\ndef main():\n    # TODO: handle errors\n    return os.getcwd()\n",
    "src/util.py": "def helper():\n    return 42  # TODO\n",
    "src/ünï ☃.py": "# TODO: unicode names too\n",
    "node_modules/dep/index.js": "// TODO: skipped\n",
    "logo.png": b"\x89PNG\r\n\x1a\n\x00\x00TODO",
}


@pytest.fixture
def project(backend: Backend) -> Backend:
    for name, content in PROJECT.items():
        backend.write_bytes(name, content if isinstance(content, bytes) else content.encode())
    return backend


# -- read_file, write_file, patch -------------------------------------------------------------


def test_write_then_read(call: CallTool, backend: Backend) -> None:
    written = call("write_file", path="pkg/mod.py", content="import os\n\nprint('☃')\n")
    assert written == {"path": "pkg/mod.py", "bytes_written": 24, "created": True}
    assert call("write_file", path="pkg/mod.py", content="x = 1\n")["created"] is False
    result = call("read_file", path="pkg/mod.py")
    assert (result["path"], result["content"], result["total_lines"]) == ("pkg/mod.py", "     1|x = 1", 1)
    assert sh(backend, "cat pkg/mod.py") == "x = 1"


def test_read_file_pages(call: CallTool, backend: Backend) -> None:
    backend.write_bytes("ten.txt", "".join(f"line {i}\n" for i in range(1, 11)).encode())
    page = call("read_file", path="ten.txt", offset=3, limit=4)
    assert page["content"].splitlines() == ["     3|line 3", "     4|line 4", "     5|line 5", "     6|line 6"]
    assert (page["end_line"], page["next_offset"], page["total_lines"]) == (6, 7, 10)


def test_read_file_refuses_binary_files_and_directories(call: CallTool, backend: Backend) -> None:
    backend.write_bytes("blob.bin", b"\x00\x01\x02" * 10)
    with pytest.raises(ToolError) as info:
        call("read_file", path="blob.bin")
    assert info.value.error_type == "BinaryFile"
    sh(backend, "mkdir pkg")
    with pytest.raises(ToolError, match="pkg is a directory"):
        call("read_file", path="pkg")


def test_read_file_refuses_a_file_over_its_limit_and_says_its_size(make_call: Callable[..., CallTool],
                                                                     backend: Backend) -> None:
    backend.write_bytes("big.txt", b"x" * 150)
    backend.write_bytes("fits.txt", b"y" * 100)
    call = make_call(**{"files.read_max_bytes": 100})
    with pytest.raises(ToolError, match=re.escape("big.txt is 150 bytes, over read_file's 100-byte limit")):
        call("read_file", path="big.txt")
    assert call("read_file", path="fits.txt")["total_lines"] == 1


def test_missing_file_suggests_near_names(call: CallTool, backend: Backend) -> None:
    backend.write_bytes("src/config.yaml", b"a: 1\n")
    with pytest.raises(ToolError) as info:
        call("read_file", path="src/confg.yaml")
    assert info.value.error_type == "FileNotFound"
    assert "Did you mean: src/config.yaml?" in str(info.value)


def test_tools_follow_the_shell_cwd(call: CallTool, root: str) -> None:
    call("terminal", command="mkdir -p sub && cd sub")
    call("write_file", path="here.txt", content="in sub\n")
    assert call("read_file", path=f"{root}/sub/here.txt")["path"] == "here.txt"
    assert call("terminal", command="cat here.txt")["output"] == "in sub"


def test_write_file_under_a_file_is_a_clear_error(call: CallTool, backend: Backend) -> None:
    backend.write_bytes("plain", b"x")
    with pytest.raises(ToolError, match=re.escape("Could not write plain/child.txt")):
        call("write_file", path="plain/child.txt", content="y")
    assert backend.read_bytes("plain") == b"x"


def test_patch_replaces_a_unique_match_and_returns_a_diff(call: CallTool, backend: Backend) -> None:
    backend.write_bytes("app.py", b"a\nb\nc\n")
    result = call("patch", path="app.py", old_string="b\n", new_string="B\nB2\n")
    assert (result["replacements"], result["match"]) == (1, "exact")
    assert result["diff"] == "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,4 @@\n a\n-b\n+B\n+B2\n c\n"
    assert backend.read_bytes("app.py") == b"a\nB\nB2\nc\n"


def test_patch_keeps_the_mode_and_leaves_the_file_alone_on_failure(call: CallTool, backend: Backend) -> None:
    backend.write_bytes("run.sh", b"#!/bin/sh\necho x\necho x\n")
    sh(backend, "chmod 750 run.sh")
    with pytest.raises(ToolError) as info:
        call("patch", path="run.sh", old_string="echo x", new_string="echo y")
    assert info.value.error_type == "AmbiguousMatch"
    assert backend.read_bytes("run.sh") == b"#!/bin/sh\necho x\necho x\n"
    assert call("patch", path="run.sh", old_string="echo x", new_string="echo y", replace_all=True)["replacements"] == 2
    assert sh(backend, "./run.sh") == "y\ny"
    info_after = backend.stat("run.sh")
    assert info_after is not None and info_after.mode & 0o777 == 0o750


def test_patch_falls_back_to_indentation_insensitive_matching(call: CallTool, backend: Backend) -> None:
    backend.write_bytes("f.py", b"def f():\n    if x:\n        return 1\n")
    result = call("patch", path="f.py", old_string="if x:\n    return 1", new_string="if y:\n    return 2")
    assert result["match"] == "indentation"
    assert backend.read_bytes("f.py") == b"def f():\n    if y:\n        return 2\n"


def test_patch_run_twice_says_the_edit_looks_applied(call: CallTool, backend: Backend) -> None:
    """A script run again (or a retried call) finds its old_string gone because its own edit is
    there: the error says so, by its own type, wherever the patch ran, and changes nothing."""
    backend.write_bytes("cfg.py", b"a = 1\nDEBUG = False\nb = 2\n")
    args = {"path": "cfg.py", "old_string": "DEBUG = False", "new_string": "DEBUG = True"}
    assert call("patch", **args)["replacements"] == 1
    with pytest.raises(ToolError) as info:
        call("patch", **args)
    assert info.value.error_type == "AlreadyApplied"
    assert "new_string is there (line 2): the edit looks applied already" in str(info.value)
    assert backend.read_bytes("cfg.py") == b"a = 1\nDEBUG = True\nb = 2\n"
    with pytest.raises(ToolError) as gone:  # neither there: the usual advice
        call("patch", path="cfg.py", old_string="VERBOSE = 0", new_string="VERBOSE = 1")
    assert gone.value.error_type == "NoMatch"


def test_patch_on_a_unicode_path(call: CallTool, backend: Backend) -> None:
    backend.write_bytes("dïr/ça ☃.txt", "héllo wörld\n".encode())
    assert call("patch", path="dïr/ça ☃.txt", old_string="wörld", new_string="☃")["replacements"] == 1
    assert backend.read_bytes("dïr/ça ☃.txt") == "héllo ☃\n".encode()


# -- search_files -----------------------------------------------------------------------------


@pytest.fixture(params=["auto", "python"])
def search(request: pytest.FixtureRequest, make_call: Callable[..., CallTool], backend: Backend) -> Callable[..., Any]:
    call = make_call(**{"files.search": request.param})
    if request.param == "auto" and backend.run("command -v rg").exit_code != 0:
        pytest.skip(f"ripgrep is not installed on the {backend.name} backend")
    engine = "ripgrep" if request.param == "auto" else "python"

    def run(**args: Any) -> dict[str, Any]:
        result: dict[str, Any] = call("search_files", **args)
        assert result["engine"] == engine
        return result

    return run


def test_search_content(search: Callable[..., Any], project: Backend) -> None:
    result = search(pattern="TODO")
    assert result["matches"] == [
        {"path": "README.md", "line": 2, "text": "TODO: write docs"},
        {"path": "src/app.py", "line": 4, "text": "    # TODO: handle errors"},
        {"path": "src/util.py", "line": 2, "text": "    return 42  # TODO"},
        {"path": "src/ünï ☃.py", "line": 1, "text": "# TODO: unicode names too"},
    ]
    assert [m["path"] for m in search(pattern="TODO", file_glob="*.md")["matches"]] == ["README.md"]


def test_search_files_by_name(search: Callable[..., Any], project: Backend) -> None:
    assert search(pattern="*.py", target="files")["files"] == ["src/app.py", "src/util.py", "src/ünï ☃.py"]
    assert search(pattern="util", target="files")["files"] == ["src/util.py"]


def test_search_pages(search: Callable[..., Any], backend: Backend) -> None:
    for i in range(10):
        backend.write_bytes(f"f{i:02}.txt", b"needle\nhay\nneedle again\n")
    expected = [(f"f{i:02}.txt", line) for i in range(10) for line in (1, 3)]
    first = search(pattern="needle", limit=8)
    assert [(m["path"], m["line"]) for m in first["matches"]] == expected[:8]
    assert (first["has_more"], first["next_offset"]) == (True, 8)
    last = search(pattern="needle", limit=8, offset=16)
    assert [(m["path"], m["line"]) for m in last["matches"]] == expected[16:]
    assert last["has_more"] is False


def test_search_from_another_cwd(search: Callable[..., Any], call: CallTool, project: Backend, root: str) -> None:
    call("terminal", command="cd src")
    assert [m["path"] for m in search(pattern="TODO", file_glob="*.py")["matches"]] == ["app.py", "util.py", "ünï ☃.py"]
    outside = search(pattern="TODO", path="..", file_glob="*.md")
    assert [m["path"] for m in outside["matches"]] == [f"{root}/README.md"]


# -- terminal ---------------------------------------------------------------------------------


def test_terminal_tool(call: CallTool) -> None:
    assert call("terminal", command="echo hi; exit_code=3; (exit $exit_code)") == {"output": "hi", "exit_code": 3}
    timed_out = call("terminal", command="echo partial; sleep 30", timeout=0.5)
    assert (timed_out["output"], timed_out["exit_code"], timed_out["timed_out"]) == ("partial", 124, True)
    assert "timed out" in timed_out["note"]
    assert call("terminal", command="echo after")["output"] == "after"
