"""read_file on the local backend: numbered lines, pages, and errors that say what to do next."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from herald.tools import ToolError

CallTool = Callable[..., Any]  # the `call` fixture of tests/tools/conftest.py


def lines_file(path: Path, count: int) -> Path:
    path.write_text("".join(f"line {i}\n" for i in range(1, count + 1)))
    return path


def test_lines_are_numbered(call: CallTool, workspace: Path) -> None:
    (workspace / "a.py").write_text("import os\n\nprint(os.sep)\n")
    result = call("read_file", path="a.py")
    assert result["content"] == "     1|import os\n     2|\n     3|print(os.sep)"
    assert result["path"] == "a.py"
    assert (result["total_lines"], result["start_line"], result["end_line"]) == (3, 1, 3)
    assert "next_offset" not in result and "hint" not in result


def test_last_line_without_newline_is_counted(call: CallTool, workspace: Path) -> None:
    (workspace / "a.txt").write_text("one\ntwo")
    result = call("read_file", path="a.txt")
    assert result["content"] == "     1|one\n     2|two"
    assert result["total_lines"] == 2


def test_pagination_with_offset_and_limit(call: CallTool, workspace: Path) -> None:
    lines_file(workspace / "ten.txt", 10)
    page = call("read_file", path="ten.txt", offset=3, limit=4)
    assert page["content"].splitlines() == ["     3|line 3", "     4|line 4", "     5|line 5", "     6|line 6"]
    assert (page["start_line"], page["end_line"], page["total_lines"]) == (3, 6, 10)
    assert page["next_offset"] == 7
    assert "Showing lines 3-6 of 10" in page["hint"]
    assert "offset=7" in page["hint"]

    last = call("read_file", path="ten.txt", offset=page["next_offset"], limit=4)
    assert last["content"].splitlines()[-1] == "    10|line 10"
    assert (last["start_line"], last["end_line"]) == (7, 10)
    assert "next_offset" not in last and "hint" not in last


def test_default_limit_pages_a_long_file(call: CallTool, workspace: Path) -> None:
    lines_file(workspace / "long.txt", 1200)
    page = call("read_file", path="long.txt")
    assert page["end_line"] == 500 and page["next_offset"] == 501
    assert page["content"].splitlines()[-1] == "   500|line 500"


def test_character_budget_ends_the_page_early(make_call: Callable[..., CallTool], workspace: Path) -> None:
    call = make_call({"files.read_max_chars": 200})
    lines_file(workspace / "ten.txt", 100)
    page = call("read_file", path="ten.txt")
    assert len(page["content"]) <= 200
    shown = page["content"].splitlines()
    assert shown[0] == "     1|line 1"
    assert page["end_line"] == len(shown) < 100
    assert page["next_offset"] == page["end_line"] + 1
    after = call("read_file", path="ten.txt", offset=page["next_offset"])
    assert after["content"].splitlines()[0] == f"{page['next_offset']:>6}|line {page['next_offset']}"


@pytest.mark.parametrize("spare", [-1, 0, 1])
def test_a_page_that_just_fits_the_budget_is_whole(
    make_call: Callable[..., CallTool], workspace: Path, spare: int
) -> None:
    """Each shown line costs its length and a newline: nine lines "     n|line n" (13 chars)
    take 126 characters of the budget, so 126 shows all nine and 125 one fewer."""
    lines_file(workspace / "nine.txt", 9)
    page = make_call({"files.read_max_chars": 126 + spare})("read_file", path="nine.txt")
    assert page["end_line"] == (8 if spare < 0 else 9)
    assert len(page["content"]) == page["end_line"] * 14 - 1


def test_offset_past_the_end(call: CallTool, workspace: Path) -> None:
    lines_file(workspace / "ten.txt", 10)
    with pytest.raises(
        ToolError, match=re.escape("ten.txt has 10 lines; offset 11 is past the end. Use an offset from 1 to 10.")
    ):
        call("read_file", path="ten.txt", offset=11)
    assert call("read_file", path="ten.txt", offset=10)["content"] == "    10|line 10"


def test_missing_file_suggests_a_near_name_in_the_same_directory(call: CallTool, workspace: Path) -> None:
    (workspace / "main.py").write_text("x\n")
    with pytest.raises(ToolError) as info:
        call("read_file", path="mian.py")
    assert info.value.error_type == "FileNotFound"
    assert f"File not found: mian.py (looked in {workspace})." in str(info.value)
    assert "Did you mean: main.py?" in str(info.value)


def test_missing_file_suggests_the_same_name_in_a_subdirectory(call: CallTool, workspace: Path) -> None:
    (workspace / "pkg" / "deep").mkdir(parents=True)
    (workspace / "pkg" / "deep" / "util.py").write_text("x\n")
    with pytest.raises(ToolError, match=r"Did you mean: pkg/deep/util\.py\?"):
        call("read_file", path="util.py")
    # A wrong directory: the nearest existing parent is searched, and the name found below.
    with pytest.raises(ToolError, match=r"Did you mean: pkg/deep/util\.py\?"):
        call("read_file", path="nope/util.py")


def test_missing_file_with_nothing_similar(call: CallTool, workspace: Path) -> None:
    (workspace / "main.py").write_text("x\n")
    with pytest.raises(ToolError) as info:
        call("read_file", path="zzzzzz.cfg")
    assert "Did you mean" not in str(info.value)
    assert "search_files(pattern, target='files')" in str(info.value)


def test_directory_is_refused(call: CallTool, workspace: Path) -> None:
    (workspace / "pkg").mkdir()
    with pytest.raises(ToolError, match="pkg is a directory, not a file"):
        call("read_file", path="pkg")


def test_binary_file_is_refused(call: CallTool, workspace: Path) -> None:
    (workspace / "img.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    with pytest.raises(ToolError) as info:
        call("read_file", path="img.bin")
    assert info.value.error_type == "BinaryFile"
    assert "img.bin is a binary file" in str(info.value)


def test_size_limit(make_call: Callable[..., CallTool], workspace: Path) -> None:
    call = make_call({"files.read_max_bytes": 100})
    (workspace / "big.txt").write_text("x" * 99 + "\n")
    assert call("read_file", path="big.txt")["total_lines"] == 1  # exactly at the limit
    (workspace / "big.txt").write_text("x" * 200 + "\n")
    with pytest.raises(ToolError, match=re.escape("big.txt is 201 bytes, over read_file's 100-byte limit")):
        call("read_file", path="big.txt")


def test_long_line_is_cut(make_call: Callable[..., CallTool], workspace: Path) -> None:
    call = make_call({"files.read_max_line_chars": 50})
    (workspace / "min.js").write_text("short\n" + "y" * 80 + "\nend\n")
    result = call("read_file", path="min.js")
    first, second, third = result["content"].split("\n")
    assert first == "     1|short"
    assert second == "     2|" + "y" * 50 + "… [line cut at 50 chars]"
    assert third == "     3|end"
    assert "1 long line(s) were cut" in result["hint"]


def test_non_utf8_file_is_readable_with_a_hint(call: CallTool, workspace: Path) -> None:
    (workspace / "latin1.txt").write_bytes("café\nnaïve\n".encode("latin-1"))
    result = call("read_file", path="latin1.txt")
    assert result["content"] == "     1|caf\ufffd\n     2|na\ufffdve"
    assert "not valid UTF-8" in result["hint"]


def test_utf8_file(call: CallTool, workspace: Path) -> None:
    (workspace / "ünï.txt").write_text("héllo ☃ 😀\n", encoding="utf-8")
    result = call("read_file", path="ünï.txt")
    assert result["content"] == "     1|héllo ☃ 😀"
    assert "hint" not in result


def test_empty_file(call: CallTool, workspace: Path) -> None:
    (workspace / "empty.txt").write_bytes(b"")
    result = call("read_file", path="empty.txt")
    assert result["content"] == ""
    assert (result["total_lines"], result["start_line"], result["end_line"]) == (0, 0, 0)
    assert result["hint"] == "The file is empty."


def test_crlf_line_endings_are_not_shown(call: CallTool, workspace: Path) -> None:
    (workspace / "dos.txt").write_bytes(b"one\r\ntwo\r\n")
    assert call("read_file", path="dos.txt")["content"] == "     1|one\n     2|two"


def test_line_numbers_count_newlines_only(call: CallTool, workspace: Path) -> None:
    # A form feed (or other Unicode line separator) is not a line break for grep, ripgrep and
    # editors, so read_file must not count it either: line 3 is "three" in every tool.
    (workspace / "ff.c").write_text("one\ftwo\u2028still two\nthree\n")
    result = call("read_file", path="ff.c")
    assert result["total_lines"] == 2
    assert result["content"].split("\n")[1] == "     2|three"


def test_paths_resolve_against_the_shell_cwd(call: CallTool, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "here.txt").write_text("in sub\n")
    (workspace / "here.txt").write_text("at top\n")
    assert call("terminal", command="cd sub")["exit_code"] == 0
    result = call("read_file", path="here.txt")
    assert result["content"] == "     1|in sub"
    assert result["path"] == "here.txt"
    top = call("read_file", path="../here.txt")
    assert top["content"] == "     1|at top"
    assert top["path"] == str(workspace / "here.txt")  # outside the cwd: shown absolute


def test_empty_path_is_an_error(call: CallTool) -> None:
    with pytest.raises(ToolError, match="path is empty"):
        call("read_file", path="  ")
