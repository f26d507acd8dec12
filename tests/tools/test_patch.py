"""patch on the local backend: find-and-replace that is exact first, forgiving second, and
leaves the file untouched whenever it fails."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from herald.tools import ToolError

CallTool = Callable[..., Any]  # the `call` fixture of tests/tools/conftest.py

OLD_TIME_NS = 1_000_000_000 * 1_000_000_000  # 2001-09-09: any write would move mtime to now


@contextmanager
def untouched(path: Path) -> Iterator[None]:
    """Assert the file's bytes and mtime are the same after the block."""
    os.utime(path, ns=(OLD_TIME_NS, OLD_TIME_NS))
    before = path.read_bytes()
    yield
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == OLD_TIME_NS


def test_unique_exact_match(call: CallTool, workspace: Path) -> None:
    (workspace / "app.py").write_text("def main():\n    return 1\n\nprint(main())\n")
    result = call("patch", path="app.py", old_string="return 1", new_string="return 2")
    assert (result["path"], result["replacements"], result["match"]) == ("app.py", 1, "exact")
    assert (workspace / "app.py").read_text() == "def main():\n    return 2\n\nprint(main())\n"


def test_diff_is_a_unified_diff(call: CallTool, workspace: Path) -> None:
    (workspace / "app.py").write_text("a\nb\nc\n")
    diff = call("patch", path="app.py", old_string="b\n", new_string="B\nB2\n")["diff"]
    assert diff == "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,4 @@\n a\n-b\n+B\n+B2\n c\n"


def test_diff_marks_a_missing_final_newline(call: CallTool, workspace: Path) -> None:
    (workspace / "app.py").write_text("a\nb")
    diff = call("patch", path="app.py", old_string="b", new_string="c")["diff"]
    assert diff == (
        "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n a\n"
        "-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
    )
    assert (workspace / "app.py").read_text() == "a\nc"


def test_multiple_matches_without_replace_all_is_an_error(call: CallTool, workspace: Path) -> None:
    target = workspace / "cfg.ini"
    target.write_text("debug = true\nname = x\ndebug = true\n\n[more]\ndebug = true\n")
    with untouched(target), pytest.raises(ToolError) as info:
        call("patch", path="cfg.ini", old_string="debug = true", new_string="debug = false")
    assert info.value.error_type == "AmbiguousMatch"
    assert "occurs 3 times in cfg.ini (at lines 1, 3, 6)" in str(info.value)
    assert "replace_all=True" in str(info.value)


def test_replace_all_replaces_every_occurrence(call: CallTool, workspace: Path) -> None:
    (workspace / "cfg.ini").write_text("debug = true\nname = x\ndebug = true\ndebug = true\n")
    result = call("patch", path="cfg.ini", old_string="debug = true", new_string="debug = false", replace_all=True)
    assert result["replacements"] == 3
    assert (workspace / "cfg.ini").read_text() == "debug = false\nname = x\ndebug = false\ndebug = false\n"


def test_replace_all_with_a_single_match(call: CallTool, workspace: Path) -> None:
    (workspace / "f.txt").write_text("one two\n")
    assert call("patch", path="f.txt", old_string="two", new_string="2", replace_all=True)["replacements"] == 1
    assert (workspace / "f.txt").read_text() == "one 2\n"


def test_fuzzy_match_ignores_trailing_whitespace(call: CallTool, workspace: Path) -> None:
    (workspace / "app.py").write_text("def f():   \n    x = 1\t\n    return x\n")
    result = call("patch", path="app.py", old_string="def f():\n    x = 1\n", new_string="def f():\n    x = 2\n")
    assert result["match"] == "whitespace"
    assert (workspace / "app.py").read_text() == "def f():\n    x = 2\n    return x\n"


def test_fuzzy_match_ignores_indentation_and_reindents_new_string(call: CallTool, workspace: Path) -> None:
    source = (
        "class A:\n"
        "    def f(self):\n"
        "        if self.x:\n"
        "            return 1\n"
        "        return 2\n"
    )
    (workspace / "a.py").write_text(source)
    # The model copied the block without its indentation and adds a nested line.
    result = call(
        "patch",
        path="a.py",
        old_string="if self.x:\n    return 1\nreturn 2",
        new_string="if self.x:\n    log()\n    return 1\nreturn 3",
    )
    assert result["match"] == "indentation"
    assert (workspace / "a.py").read_text() == (
        "class A:\n"
        "    def f(self):\n"
        "        if self.x:\n"
        "            log()\n"
        "            return 1\n"
        "        return 3\n"
    )


def test_exact_match_wins_over_a_fuzzy_one(call: CallTool, workspace: Path) -> None:
    (workspace / "a.py").write_text("    x = 1\nx = 1\n")
    result = call("patch", path="a.py", old_string="x = 1\n", new_string="x = 2\n", replace_all=True)
    # "x = 1\n" occurs exactly twice (once after the indentation): no line-wise re-matching.
    assert (result["match"], result["replacements"]) == ("exact", 2)
    assert (workspace / "a.py").read_text() == "    x = 2\nx = 2\n"


def test_no_match_is_an_error_and_file_untouched(call: CallTool, workspace: Path) -> None:
    target = workspace / "app.py"
    target.write_text("def main():\n    return 1\n")
    with untouched(target), pytest.raises(ToolError) as info:
        call("patch", path="app.py", old_string="return 42", new_string="return 43")
    assert info.value.error_type == "NoMatch"
    assert "old_string was not found in app.py" in str(info.value)


def test_an_edit_already_there_is_named_even_when_reindented(call: CallTool, workspace: Path) -> None:
    """The applied edit is recognised as old_string would have been matched (indentation
    aside); a deletion leaves nothing to recognise, so it gets the usual NoMatch."""
    target = workspace / "app.py"
    target.write_text("def main():\n    if ready:\n        return 2\n")
    with untouched(target), pytest.raises(ToolError) as info:
        call("patch", path="app.py", old_string="if ready:\n    return 1", new_string="if ready:\n    return 2")
    assert info.value.error_type == "AlreadyApplied"
    assert "(line 2)" in str(info.value)
    with untouched(target), pytest.raises(ToolError) as deleted:
        call("patch", path="app.py", old_string="    import os\n", new_string="")
    assert deleted.value.error_type == "NoMatch"


def test_identical_strings_are_an_error(call: CallTool, workspace: Path) -> None:
    target = workspace / "f.txt"
    target.write_text("abc\n")
    with untouched(target), pytest.raises(ToolError, match="old_string and new_string are identical"):
        call("patch", path="f.txt", old_string="abc", new_string="abc")


def test_empty_old_string_is_an_error(call: CallTool, workspace: Path) -> None:
    target = workspace / "f.txt"
    target.write_text("abc\n")
    with untouched(target), pytest.raises(ToolError, match=r"old_string is empty.*use write_file"):
        call("patch", path="f.txt", old_string="", new_string="x")


def test_crlf_file_keeps_crlf(call: CallTool, workspace: Path) -> None:
    target = workspace / "dos.txt"
    target.write_bytes(b"first\r\nsecond\r\nthird\r\n")
    result = call("patch", path="dos.txt", old_string="second\nthird\n", new_string="2nd\n2.5\nthird\n")
    assert result["match"] == "exact"
    assert target.read_bytes() == b"first\r\n2nd\r\n2.5\r\nthird\r\n"


def test_crlf_file_keeps_crlf_on_a_fuzzy_match(call: CallTool, workspace: Path) -> None:
    target = workspace / "dos.py"
    target.write_bytes(b"def f():\r\n    a = 1   \r\n    b = 2\r\nend\r\n")
    result = call("patch", path="dos.py", old_string="a = 1\nb = 2", new_string="a = 10\nb = 20")
    assert result["match"] == "indentation"
    assert target.read_bytes() == b"def f():\r\n    a = 10\r\n    b = 20\r\nend\r\n"


def test_missing_file_suggests_candidates(call: CallTool, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "server.py").write_text("x\n")
    with pytest.raises(ToolError) as info:
        call("patch", path="server.py", old_string="x", new_string="y")
    assert info.value.error_type == "FileNotFound"
    assert "Did you mean: src/server.py?" in str(info.value)
    assert not (workspace / "server.py").exists()


def test_directory_binary_and_non_utf8_files_are_refused(call: CallTool, workspace: Path) -> None:
    (workspace / "pkg").mkdir()
    with pytest.raises(ToolError, match="pkg is a directory"):
        call("patch", path="pkg", old_string="a", new_string="b")
    binary = workspace / "blob.bin"
    binary.write_bytes(b"abc\x00def")
    with untouched(binary), pytest.raises(ToolError) as info:
        call("patch", path="blob.bin", old_string="abc", new_string="xyz")
    assert info.value.error_type == "BinaryFile"
    latin = workspace / "latin1.txt"
    latin.write_bytes("café = 1\n".encode("latin-1"))
    with untouched(latin), pytest.raises(ToolError, match="not valid UTF-8"):
        call("patch", path="latin1.txt", old_string="= 1", new_string="= 2")


def test_unicode_and_file_mode_survive_a_patch(call: CallTool, workspace: Path) -> None:
    target = workspace / "ünï.sh"
    target.write_text("#!/bin/sh\necho 'héllo ☃'\n", encoding="utf-8")
    target.chmod(0o755)
    call("patch", path="ünï.sh", old_string="héllo ☃", new_string="adiós 😀")
    assert target.read_text(encoding="utf-8") == "#!/bin/sh\necho 'adiós 😀'\n"
    assert target.stat().st_mode & 0o777 == 0o755
    assert call("terminal", command="./ünï.sh")["output"] == "adiós 😀"
