"""Files on every backend through the protocol: paths, binary data, unicode names, atomic writes,
stat and listings, and the standard OSError types."""

from __future__ import annotations

import pytest

from herald.backends import Backend

from ._helpers import sh

UNICODE_DIR = "dïr ☃ 日本"
UNICODE_FILE = "fïlé 😀 'quoted' $x.txt"


def test_paths_are_relative_to_the_shell_cwd(backend: Backend, root: str) -> None:
    sh(backend, "mkdir sub && cd sub")
    backend.write_bytes("made.txt", b"data")
    assert sh(backend, f"cat {root}/sub/made.txt") == "data"
    assert backend.read_bytes("made.txt") == b"data"
    assert backend.read_bytes(f"{root}/sub/made.txt") == b"data"
    assert backend.read_bytes("../sub/./made.txt") == b"data"
    info = backend.stat("made.txt")
    assert info is not None
    assert (info.path, info.size, info.is_file, info.is_dir) == (f"{root}/sub/made.txt", 4, True, False)


def test_binary_files_round_trip_byte_for_byte(backend: Backend) -> None:
    every_byte = bytes(range(256)) * 64
    backend.write_bytes("bytes.bin", every_byte)
    assert backend.read_bytes("bytes.bin") == every_byte
    assert sh(backend, "od -An -tx1 -N4 -j254 bytes.bin").split() == ["fe", "ff", "00", "01"]
    # A bigger file made by the backend's own tools reads back the same as its checksum says.
    sh(backend, "head -c 3000000 /dev/urandom > random.bin")
    data = backend.read_bytes("random.bin")
    assert len(data) == 3_000_000
    backend.write_bytes("copy.bin", data)
    assert sh(backend, "cmp random.bin copy.bin && echo same") == "same"


def test_empty_files(backend: Backend) -> None:
    backend.write_bytes("empty", b"")
    assert backend.read_bytes("empty") == b""
    info = backend.stat("empty")
    assert info is not None and info.size == 0 and info.is_file


def test_unicode_paths(backend: Backend, root: str) -> None:
    path = f"{UNICODE_DIR}/{UNICODE_FILE}"
    backend.write_bytes(path, "contenu ☃\n".encode())
    assert backend.read_bytes(path) == "contenu ☃\n".encode()
    assert sh(backend, f"cat \"{UNICODE_DIR}\"/*.txt") == "contenu ☃"
    info = backend.stat(path)
    assert info is not None and info.path == f"{root}/{path}" and info.is_file
    assert [e.name for e in backend.list_dir(UNICODE_DIR)] == [UNICODE_FILE]
    assert [e.name for e in backend.list_dir(".")] == [UNICODE_DIR]
    sh(backend, "mkdir 'ünï' && printf 'made by the shell' > 'ünï/ça.txt'")
    assert backend.read_bytes("ünï/ça.txt") == b"made by the shell"


def test_write_is_atomic_creates_parents_and_keeps_mode(backend: Backend) -> None:
    backend.write_bytes("a/b/c.sh", b"#!/bin/sh\necho one\n")
    assert sh(backend, "cat a/b/c.sh") == "#!/bin/sh\necho one"
    sh(backend, "chmod 741 a/b/c.sh")
    inode = sh(backend, "ls -i a/b/c.sh").split()[0]
    backend.write_bytes("a/b/c.sh", b"#!/bin/sh\necho two\n")
    info = backend.stat("a/b/c.sh")
    assert info is not None and info.mode & 0o7777 == 0o741
    assert sh(backend, "a/b/c.sh") == "two"
    # Replaced by a rename, not rewritten in place: readers see the old file or the new one.
    assert sh(backend, "ls -i a/b/c.sh").split()[0] != inode
    assert [e.name for e in backend.list_dir("a/b")] == ["c.sh"]  # no temp file left behind


def test_new_files_get_the_usual_mode(backend: Backend) -> None:
    backend.write_bytes("new.txt", b"x")
    sh(backend, "touch by-shell.txt")
    made, by_shell = backend.stat("new.txt"), backend.stat("by-shell.txt")
    assert made is not None and by_shell is not None
    assert made.mode & 0o777 == by_shell.mode & 0o777


def test_write_through_a_symlink_replaces_the_target(backend: Backend) -> None:
    sh(backend, "printf old > real.txt && ln -s real.txt link.txt")
    backend.write_bytes("link.txt", b"new")
    assert sh(backend, "cat real.txt; echo; test -L link.txt && echo still-a-link") == "new\nstill-a-link"


def test_stat_and_list_dir(backend: Backend) -> None:
    sh(backend, "mkdir d && printf x > f && ln -s f l && ln -s nowhere dangling && ln -s d dl")
    assert backend.stat("missing") is None
    assert backend.stat("f/under-a-file") is None
    assert backend.stat("dangling") is None
    info = backend.stat("d")
    assert info is not None and info.is_dir and not info.is_file
    linked = backend.stat("l")
    assert linked is not None and linked.is_file and linked.size == 1  # stat follows links
    entries = {e.name: (e.is_dir, e.is_file, e.is_symlink) for e in backend.list_dir(".")}
    assert entries == {
        "d": (True, False, False),
        "f": (False, True, False),
        "l": (False, True, True),
        "dangling": (False, False, True),
        "dl": (True, False, True),
    }


def test_mtime_is_seconds_since_the_epoch(backend: Backend) -> None:
    sh(backend, "touch -d @1700000000 old.txt")
    info = backend.stat("old.txt")
    assert info is not None and int(info.mtime) == 1_700_000_000


def test_file_errors_are_standard_oserrors(backend: Backend) -> None:
    sh(backend, "mkdir d && printf x > f")
    with pytest.raises(FileNotFoundError):
        backend.read_bytes("missing")
    with pytest.raises(IsADirectoryError):
        backend.read_bytes("d")
    with pytest.raises(NotADirectoryError):
        backend.list_dir("f")
    with pytest.raises(FileNotFoundError):
        backend.list_dir("missing")
    with pytest.raises(IsADirectoryError):
        backend.write_bytes("d", b"x")
    with pytest.raises((NotADirectoryError, FileExistsError)):  # a file where a directory should be
        backend.write_bytes("f/below", b"x")


def test_permission_denied_is_a_permission_error(backend: Backend) -> None:
    if sh(backend, "id -u") == "0":
        pytest.skip("the backend's user is root here, whom file modes do not stop")
    sh(backend, "mkdir locked && printf x > locked/f && chmod 000 locked/f && chmod 500 locked")
    with pytest.raises(PermissionError):
        backend.read_bytes("locked/f")
    with pytest.raises(PermissionError):
        backend.write_bytes("locked/new", b"x")
    sh(backend, "chmod 700 locked")
