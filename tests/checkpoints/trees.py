"""Workspace trees for the snapshot tests: build one, change it every way, and read it back.

Stdlib only and self-contained: the remote tests run this module's source on the backend
(`on_backend`), so a tree is built and read where the workspace is, as the engine sees it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

State = dict[str, list[Any]]


def build_tree(root: Path, files: int = 1000) -> None:
    """`files` files over nested directories, with modes, links (inside, dangling, outward) and empty dirs."""
    for number in range(files):
        folder = root / f"d{number % 10}" / f"e{number % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"f{number}.txt"
        path.write_bytes(f"file {number}\n".encode() * (1 + number % 5) + bytes([number % 256]))
        if number % 9 == 0:
            path.chmod(0o755)
        if number % 13 == 0:
            path.chmod(0o600)
    (root / "empty" / "deeper").mkdir(parents=True)
    (root / "readonly").mkdir()
    (root / "readonly" / "inside.txt").write_text("kept\n")
    (root / "readonly").chmod(0o555)
    os.symlink("d0/e0/f0.txt", root / "link-in")
    os.symlink("nowhere", root / "link-dangling")
    os.symlink("/etc", root / "link-out")


def read_tree(root: Path) -> State:
    """Every entry below `root`: kind, permission bits, and the sha256 of its bytes or link target."""
    state: State = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            rel = str(path.relative_to(root))
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                state[rel] = ["link", 0, os.readlink(path)]
            elif stat.S_ISDIR(info.st_mode):
                state[rel] = ["dir", stat.S_IMODE(info.st_mode), ""]
            else:
                state[rel] = ["file", stat.S_IMODE(info.st_mode), hashlib.sha256(path.read_bytes()).hexdigest()]
    return state


def mess_up(root: Path) -> None:
    """Change the tree every way a run could: edit, delete, add, chmod, swap kinds, relink."""
    (root / "d1" / "e1" / "f1.txt").write_text("edited\n")
    (root / "d2" / "e2" / "f2.txt").unlink()
    (root / "d3" / "new.txt").write_text("added\n")
    (root / "d4" / "e4" / "f4.txt").chmod(0o700)
    (root / "empty" / "deeper").rmdir()
    (root / "link-in").unlink()
    os.symlink("/etc/passwd", root / "link-in")
    target = root / "d5" / "e5" / "f5.txt"
    target.unlink()
    target.mkdir()  # a file became a directory
    (target / "inner.txt").write_text("x")
    folder = root / "d6" / "e6"
    for child in folder.iterdir():
        child.unlink()
    folder.rmdir()
    folder.write_text("a directory became a file")
    (root / "brand" / "new" / "dir").mkdir(parents=True)
    (root / "readonly").chmod(0o755)
    (root / "readonly" / "inside.txt").write_text("changed\n")


def run_here(action: str, root: str) -> Any:
    """`action` (build, read or mess) on `root`; what it returns as JSON-able data."""
    if action == "build":
        build_tree(Path(root))
    elif action == "mess":
        mess_up(Path(root))
    elif action == "read":
        return read_tree(Path(root))
    return None


if __name__ == "__main__":
    import sys

    print("TREE " + json.dumps(run_here(sys.argv[1], sys.argv[2])))
