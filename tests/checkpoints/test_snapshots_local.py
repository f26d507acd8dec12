"""The snapshot engine on this machine: keep, limits, diff, release and gc (every backend: test_snapshots.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from herald.backends.local import LocalBackend
from herald.checkpoints import Changes, SnapshotError, Snapshots, snapshots_for
from herald.config import Settings


@pytest.fixture
def snaps(local_backend: LocalBackend, workspace: Path, settings: Settings) -> Snapshots:
    return snapshots_for(local_backend, str(workspace), settings)


def test_restore_keeps_what_it_is_told_to(snaps: Snapshots, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a0")
    (workspace / "b.txt").write_text("b0")
    snapshot = snaps.take()
    (workspace / "a.txt").write_text("a1")
    (workspace / "b.txt").write_text("b1")
    (workspace / "new" / "deep").mkdir(parents=True)
    (workspace / "new" / "deep" / "kept.txt").write_text("k")
    (workspace / "new" / "gone.txt").write_text("g")
    done = snaps.restore(snapshot, keep=["b.txt", "new/deep/kept.txt"])
    assert (workspace / "a.txt").read_text() == "a0"
    assert (workspace / "b.txt").read_text() == "b1"
    assert (workspace / "new" / "deep" / "kept.txt").read_text() == "k"
    assert not (workspace / "new" / "gone.txt").exists()
    assert done.paths() == ("a.txt", "new/gone.txt")


def test_changes_between_two_snapshots_and_the_diff(snaps: Snapshots, workspace: Path) -> None:
    (workspace / "code.py").write_text("x = 1\n")
    first = snaps.take()
    (workspace / "code.py").write_text("x = 2\n")
    (workspace / "blob.bin").write_bytes(b"\0\1\2")
    second = snaps.take()
    assert snaps.changes(first, second) == Changes(added=("blob.bin",), modified=("code.py",))
    text = snaps.diff(first, second)
    assert "-x = 1\n+x = 2\n" in text and "Binary files a/blob.bin and b/blob.bin differ" in text
    assert "... the diff is cut" in snaps.diff(first, second, max_bytes=10)


def test_a_file_over_the_size_limit_is_reported_not_covered(
        local_backend: LocalBackend, workspace: Path, settings: Settings) -> None:
    settings.checkpoints.max_file_mb = 1
    snaps = Snapshots(local_backend, str(workspace), settings)
    (workspace / "big.bin").write_bytes(b"x" * (2 << 20))
    (workspace / "small.txt").write_text("s")
    snapshot = snaps.take()
    (workspace / "big.bin").write_bytes(b"y" * (2 << 20))
    (workspace / "small.txt").write_text("t")
    changed = snaps.changes(snapshot)
    assert changed.not_covered == ("big.bin",) and changed.modified == ("small.txt",)
    done = snaps.restore(snapshot)
    assert done.not_covered == ("big.bin",)
    assert (workspace / "big.bin").read_bytes()[:1] == b"y"  # left as it is, and said so
    assert (workspace / "small.txt").read_text() == "s"


def test_too_many_files_is_refused_with_the_setting_to_change(
        local_backend: LocalBackend, workspace: Path, settings: Settings) -> None:
    settings.checkpoints.max_files = 10
    for number in range(11):
        (workspace / f"f{number}").write_text("x")
    with pytest.raises(SnapshotError, match=r"more than 10 files \(checkpoints.max_files\)"):
        Snapshots(local_backend, str(workspace), settings).take()


def test_a_full_store_leaves_new_files_not_covered(
        local_backend: LocalBackend, workspace: Path, settings: Settings) -> None:
    settings.checkpoints.max_store_mb = 1
    snaps = Snapshots(local_backend, str(workspace), settings)
    (workspace / "one.bin").write_bytes(os.urandom(700_000))
    (workspace / "two.bin").write_bytes(os.urandom(700_000))
    snapshot = snaps.take()
    assert len(snaps.changes(snapshot).not_covered) == 1


def test_release_frees_what_no_other_snapshot_holds(snaps: Snapshots, workspace: Path) -> None:
    (workspace / "shared.txt").write_text("same in both")
    (workspace / "only.txt").write_bytes(os.urandom(50_000))
    first = snaps.take()
    (workspace / "only.txt").unlink()
    second = snaps.take()
    third = snaps.take()
    snaps.release(third)  # forgotten at once, collected later (nothing of its own to free here)
    _, size = snaps.kept()
    assert snaps.free(first) >= 50_000  # released and collected now
    kept, after = snaps.kept()
    assert [info.id for info in kept] == [second]
    assert size - after >= 50_000
    assert not snaps.changes(second)
    with pytest.raises(SnapshotError, match="no snapshot"):
        snaps.restore(first)


def test_a_change_that_keeps_size_and_mtime_is_still_seen(snaps: Snapshots, workspace: Path) -> None:
    path = workspace / "same.txt"
    path.write_text("aaaa")
    past = 1_000_000_000
    os.utime(path, ns=(past, past))
    first = snaps.take()
    snaps.take()  # the second take trusts the index where the stat is unchanged
    path.write_text("bbbb")  # same size
    os.utime(path, ns=(past, past))  # same mtime: only ctime tells
    assert snaps.changes(first).modified == ("same.txt",)
    snaps.restore(first)
    assert path.read_text() == "aaaa"


def test_released_objects_are_collected_once_they_add_up(
        local_backend: LocalBackend, workspace: Path, settings: Settings) -> None:
    settings.checkpoints.max_store_mb = 1  # collected once released snapshots may free 1/20 of it
    snaps = Snapshots(local_backend, str(workspace), settings)
    (workspace / "small.bin").write_bytes(os.urandom(10_000))
    small = snaps.take()
    (workspace / "small.bin").unlink()
    keep = snaps.take()
    snaps.release(small)
    assert snaps.kept()[1] >= 10_000  # 10 kB released: not worth a walk yet
    (workspace / "big.bin").write_bytes(os.urandom(60_000))
    big = snaps.take()
    snaps.release(big)  # 70 kB released in all: past 1/20 of the store, collected
    kept, size = snaps.kept()
    assert [info.id for info in kept] == [keep] and size < 1000  # its manifest only


def test_a_fifo_is_reported_not_covered_and_left_alone(snaps: Snapshots, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    (workspace / "file.txt").write_text("a")
    snapshot = snaps.take()  # never blocks on the FIFO
    (workspace / "file.txt").write_text("b")
    assert snaps.changes(snapshot) == Changes(modified=("file.txt",), not_covered=("pipe",))
    assert snaps.restore(snapshot).not_covered == ("pipe",)
    assert (workspace / "pipe").is_fifo() and (workspace / "file.txt").read_text() == "a"


def test_calls_from_many_threads_are_serialised(snaps: Snapshots, workspace: Path) -> None:
    (workspace / "base.txt").write_text("base")
    base = snaps.take()
    errors: list[BaseException] = []

    def work(number: int) -> None:
        try:
            for step in range(10):
                (workspace / f"t{number}-{step}.txt").write_text("x")
                taken = snaps.take()
                assert f"t{number}-{step}.txt" in snaps.changes(base, taken).added
                snaps.release(taken)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(number,)) for number in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and not any(thread.is_alive() for thread in threads)
    assert len(snaps.changes(base).added) == 40


def test_herald_s_own_data_inside_the_workspace_is_never_snapshotted_nor_restored(
        local_backend: LocalBackend, workspace: Path) -> None:
    settings = Settings(data_dir=workspace / ".herald")  # a workspace around Herald's data (e.g. $HOME)
    snaps = Snapshots(local_backend, str(workspace), settings)
    (workspace / "mine.txt").write_text("a")
    snapshot = snaps.take()
    (settings.data_dir / "sessions").mkdir(parents=True)
    (settings.data_dir / "sessions" / "s.jsonl").write_text("{}")
    other = Snapshots(local_backend, str(workspace / "sub"), settings)  # another store beside this one
    (workspace / "sub").mkdir()
    other.take()
    (workspace / "sub").rmdir()
    assert snaps.changes(snapshot) == Changes()
    snaps.restore(snapshot)
    assert (settings.data_dir / "sessions" / "s.jsonl").read_text() == "{}"
    assert len(list((settings.data_dir / "snapshots").iterdir())) == 2
