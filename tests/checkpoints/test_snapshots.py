"""Snapshots on every backend (local, SSH, Docker): a 1,000-file tree changed every way comes back
byte for byte, links and modes and empty directories included."""

from __future__ import annotations

from herald.backends import Backend
from herald.backends.local import LocalBackend
from herald.checkpoints import Snapshots
from herald.config import Settings

from .conftest import Tree


def test_a_1000_file_tree_comes_back_byte_for_byte(snap_backend: Backend, tree: Tree, settings: Settings) -> None:
    snaps = Snapshots(snap_backend, tree.root, settings)
    try:
        tree("build")
        before = tree("read")
        snapshot = snaps.take("before")
        assert not snaps.changes(snapshot)
        tree("mess")
        changed = snaps.changes(snapshot)
        assert "d1/e1/f1.txt" in changed.modified and "d2/e2/f2.txt" in changed.removed
        assert "d3/new.txt" in changed.added and "link-in" in changed.modified
        assert "empty/deeper" in changed.removed and "brand/new/dir" in changed.added
        done = snaps.restore(snapshot)
        assert tree("read") == before
        assert "d3/new.txt" in done.removed and "d2/e2/f2.txt" in done.added and "d1/e1/f1.txt" in done.modified
        assert not snaps.changes(snapshot)
        assert "+edited" not in snaps.diff(snapshot)
    finally:
        snaps.close()


def test_one_engine_per_workspace_survives_a_lost_process(snap_backend: Backend, tree: Tree,
                                                         settings: Settings) -> None:
    """The remote engine is a process on the backend; killed there, the next call starts another."""
    snaps = Snapshots(snap_backend, tree.root, settings)
    try:
        first = snaps.take()
        pid = snaps.engine_pid()
        assert (pid is None) == isinstance(snap_backend, LocalBackend)
        if pid is not None:
            snap_backend.run(f"kill -9 {pid}", timeout=30)
        snap_backend.run("echo new > made-after.txt", timeout=30)
        assert snaps.changes(first).added == ("made-after.txt",)
    finally:
        snaps.close()
