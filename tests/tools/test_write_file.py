"""write_file on the local backend: whole-file, atomic writes that keep what the file was."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from herald.tools import ToolError

CallTool = Callable[..., Any]  # the `call` fixture of tests/tools/conftest.py


def test_creates_file_and_parent_directories(call: CallTool, workspace: Path) -> None:
    result = call("write_file", path="a/b/c/new.txt", content="hello\n")
    assert result == {"path": "a/b/c/new.txt", "bytes_written": 6, "created": True}
    assert (workspace / "a" / "b" / "c" / "new.txt").read_bytes() == b"hello\n"


def test_replaces_an_existing_file(call: CallTool, workspace: Path) -> None:
    (workspace / "f.txt").write_text("a much longer old content\n" * 10)
    result = call("write_file", path="f.txt", content="short")
    assert result["created"] is False
    assert result["bytes_written"] == 5
    assert (workspace / "f.txt").read_bytes() == b"short"


def test_no_temporary_files_are_left_behind(call: CallTool, workspace: Path) -> None:
    (workspace / "keep.txt").write_text("x")
    call("write_file", path="keep.txt", content="y" * 100_000)
    call("write_file", path="new.txt", content="z")
    assert sorted(os.listdir(workspace)) == ["keep.txt", "new.txt"]


def test_replacement_is_atomic_for_a_reader_holding_the_old_file(call: CallTool, workspace: Path) -> None:
    # The new content goes to a temp file that is renamed over the target: a reader that
    # opened the old file keeps reading the old content whole, never a half-written mix.
    target = workspace / "config.json"
    target.write_text('{"old": true}\n')
    with open(target, "rb") as reader:
        call("write_file", path="config.json", content='{"new": true}\n')
        assert reader.read() == b'{"old": true}\n'
    assert target.read_text() == '{"new": true}\n'


def test_preserves_the_mode_of_an_existing_file(call: CallTool, workspace: Path) -> None:
    script = workspace / "run.sh"
    script.write_text("#!/bin/sh\necho old\n")
    script.chmod(0o750)
    call("write_file", path="run.sh", content="#!/bin/sh\necho new\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert call("terminal", command="./run.sh")["output"] == "new"


def test_new_file_gets_the_usual_mode(call: CallTool, workspace: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    call("write_file", path="fresh.txt", content="x")
    assert stat.S_IMODE((workspace / "fresh.txt").stat().st_mode) == 0o666 & ~umask


def test_unicode_content_is_written_as_utf8(call: CallTool, workspace: Path) -> None:
    text = "héllo ☃ 😀\nсистема\n"
    result = call("write_file", path="ünï/fïle.txt", content=text)
    assert result["bytes_written"] == len(text.encode("utf-8"))
    assert (workspace / "ünï" / "fïle.txt").read_text(encoding="utf-8") == text
    assert call("read_file", path="ünï/fïle.txt")["content"] == "     1|héllo ☃ 😀\n     2|система"


def test_empty_content(call: CallTool, workspace: Path) -> None:
    assert call("write_file", path="empty", content="")["bytes_written"] == 0
    assert (workspace / "empty").read_bytes() == b""


def test_writes_relative_to_the_shell_cwd(call: CallTool, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    call("terminal", command="cd sub")
    assert call("write_file", path="x.txt", content="x")["path"] == "x.txt"
    assert (workspace / "sub" / "x.txt").read_text() == "x"


def test_writing_through_a_symlink_updates_its_target(call: CallTool, workspace: Path) -> None:
    (workspace / "real.cfg").write_text("old\n")
    (workspace / "link.cfg").symlink_to("real.cfg")
    result = call("write_file", path="link.cfg", content="new\n")
    assert result["created"] is False
    assert (workspace / "link.cfg").is_symlink()
    assert (workspace / "real.cfg").read_text() == "new\n"


def test_home_relative_path(call: CallTool, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    result = call("write_file", path="~/notes/todo.txt", content="milk\n")
    assert result["created"] is True
    assert (home / "notes" / "todo.txt").read_text() == "milk\n"
    assert not (workspace / "~").exists()
    assert call("read_file", path="~/notes/todo.txt")["content"] == "     1|milk"


def test_directory_target_is_refused(call: CallTool, workspace: Path) -> None:
    (workspace / "pkg").mkdir()
    with pytest.raises(ToolError, match="pkg is a directory; pass a file path to write_file"):
        call("write_file", path="pkg", content="x")
    assert (workspace / "pkg").is_dir()


def test_parent_that_is_a_file_is_a_clear_error(call: CallTool, workspace: Path) -> None:
    (workspace / "plain").write_text("x")
    with pytest.raises(ToolError, match=re.escape("Could not write plain/child.txt")):
        call("write_file", path="plain/child.txt", content="y")
    assert (workspace / "plain").read_text() == "x"


def test_empty_path_is_an_error(call: CallTool) -> None:
    with pytest.raises(ToolError, match="path is empty"):
        call("write_file", path="", content="x")
