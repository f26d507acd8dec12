"""Where paths lead, and the pinned-path guard, in the file commands that Docker runs in its
container and Modal runs in its sandbox (`ShellFiles`), here run by a real /bin/sh on this
machine: the fake Modal server of tests/fakes/ runs no sandboxes, so this is Modal's coverage
of the shared part (its resolution and its writes' guard); Docker's own tests run the same
commands in a container (tests/policy/test_remote_links.py).
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from herald.backends.base import CommandResult
from herald.backends.shellfiles import ShellFiles


def _run(command: str) -> CommandResult:
    """`command` as the file shell runs it: output merged, its last newline dropped."""
    done = subprocess.run(["/bin/sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    output = done.stdout.decode("utf-8", "surrogateescape")
    return CommandResult(output.removesuffix("\n"), done.returncode)


def _upload(temp: str, data: bytes) -> None:
    Path(temp).write_bytes(data)


@pytest.fixture
def files() -> ShellFiles:
    return ShellFiles(_run, _upload)


def test_resolution_follows_every_link(files: ShellFiles, tmp_path: Path) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "sub" / "d1").mkdir(parents=True)
    outside.mkdir()
    (work / "root").symlink_to("/")
    (work / "out").symlink_to(outside)
    (work / "dangling_deep").symlink_to(outside / "made" / "new.txt")
    (work / "a").symlink_to("sub/d1")
    (work / "sneaky").symlink_to("a/../../x.txt")  # `..` after the link `a`: physically work/x.txt
    (work / "loop").symlink_to("loop")
    assert files.realpath(f"{work}/root/etc/hostname") == "/etc/hostname"
    assert files.realpath(f"{work}/out/new.txt") == f"{outside}/new.txt"
    assert files.realpath(f"{work}/missing/dir/f.txt") == f"{work}/missing/dir/f.txt"
    assert files.realpath(f"{work}/dangling_deep") == f"{outside}/made/new.txt"  # readlink -f gives up here
    assert files.realpath(f"{work}/dangling_deep/more.txt") == f"{outside}/made/new.txt/more.txt"
    assert files.realpath(f"{work}/sneaky") == f"{work}/x.txt"
    with pytest.raises(OSError) as loop:
        files.realpath(f"{work}/loop")
    assert loop.value.errno == errno.ELOOP


def test_a_pinned_path_that_leads_elsewhere_is_neither_read_nor_written(files: ShellFiles, tmp_path: Path) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "d").mkdir(parents=True)
    outside.mkdir()
    (work / "d" / "f.txt").write_text("inside\n")
    (outside / "f.txt").write_text("secret\n")
    pinned = files.realpath(f"{work}/d/f.txt")
    assert files.read_bytes(f"{work}/d/f.txt", 1000, pinned) == b"inside\n"
    (work / "d" / "f.txt").unlink()
    (work / "d").rmdir()
    (work / "d").symlink_to(outside)  # swapped after the check
    for action in (
        lambda: files.read_bytes(f"{work}/d/f.txt", 1000, pinned),
        lambda: files.write_bytes(f"{work}/d/f.txt", b"leaked\n", pinned),
        lambda: files.write_bytes(f"{work}/d/f.txt", b"x" * 300_000, pinned),  # streamed: temp file, then rename
    ):
        with pytest.raises(PermissionError, match=f"now leads to {outside}/f.txt"):
            action()
    assert (outside / "f.txt").read_text() == "secret\n" and os.listdir(outside) == ["f.txt"]


def test_a_pinned_write_lands_where_the_check_said(files: ShellFiles, tmp_path: Path) -> None:
    """Through a dangling link into a directory still to make, as the local backend writes."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "later").symlink_to("made/new.txt")
    pinned = files.realpath(f"{work}/later")
    assert pinned == f"{work}/made/new.txt"
    files.write_bytes(f"{work}/later", b"new\n", pinned)
    assert (work / "made" / "new.txt").read_text() == "new\n" and (work / "later").is_symlink()
