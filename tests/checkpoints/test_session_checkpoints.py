"""Session checkpoints from real runs, on every backend, in host and backend mode: a run that
changes the workspace (file tools and terminal alike) leaves "before run N"; a rewind puts the
workspace back; a workspace past max_files turns checkpoints off with one note; retention."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from herald import Runtime
from herald.backends import Backend
from herald.backends.docker import DockerBackend
from herald.backends.local import LocalBackend
from herald.checkpoints import Changes
from herald.checkpoints.records import read_record
from herald.checkpoints.session import SessionCheckpoints
from herald.config import Settings

from .conftest import Tree

CHANGE = """\
from hermes_tools import write_file, terminal
write_file("a.txt", "one\\n")
terminal("mkdir -p d && echo t > d/t.txt && rm -f gone.txt && chmod 600 keep.txt")
"""


@pytest.fixture(params=["host", "backend"])
def exec_mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def runtime(snap_backend: Backend, settings: Settings, exec_mode: str) -> Iterator[Runtime]:
    with Runtime(snap_backend, settings=settings, exec_mode=exec_mode, checkpoint_session="s1",
                 policy="full") as made:
        yield made


def test_a_run_that_changes_files_leaves_a_checkpoint_and_a_rewind_undoes_it(
        runtime: Runtime, snap_backend: Backend, tree: Tree, settings: Settings) -> None:
    snap_backend.run("echo gone > gone.txt && echo keep > keep.txt && chmod 644 keep.txt", timeout=30)
    before = tree("read")
    assert runtime.execute("print(1)").ok
    result = runtime.execute(CHANGE)
    assert result.ok, result.error
    assert runtime.execute("print(3)", session="kernel").ok  # a kernel session's run counts too
    record = read_record(runtime.checkpoints.points.path)
    assert record is not None and record.runs == 3 and not record.off
    assert [point.run for point in record.checkpoints] == [2, 3]  # run 1 changed nothing: run 2's stands for it
    changed = record.checkpoints[0]
    assert (changed.added, changed.modified, changed.removed) == (3, 1, 1)  # a.txt d d/t.txt; keep.txt; gone.txt
    assert changed.title == "from hermes_tools import write_file, terminal"
    points = SessionCheckpoints(snap_backend, settings, "s1")
    point, done = points.rewind(1)  # before run 1 is before run 2: nothing happened between
    assert point.run == 2
    assert tree("read") == before
    assert set(done.removed) == {"a.txt", "d", "d/t.txt"} and done.added == ("gone.txt",)
    assert runtime.execute("print(4)").ok  # the session goes on after a rewind
    record = read_record(runtime.checkpoints.points.path)
    # run 3 changed nothing: the rewind's own checkpoint stands before it
    assert record is not None and [point.run for point in record.checkpoints] == [2, 0, 4]
    assert [record.find(run).run for run in (1, 2, 3, 4)] == [2, 2, 0, 4]  # type: ignore[union-attr]


def test_too_many_files_turns_checkpoints_off_with_one_note(
        snap_backend: Backend, settings: Settings, exec_mode: str) -> None:
    snap_backend.run("for i in 1 2 3 4 5 6; do echo $i > f$i; done", timeout=30)
    few = settings.with_overrides({"checkpoints.max_files": 5})
    with Runtime(snap_backend, settings=few, exec_mode=exec_mode, checkpoint_session="big") as runtime:
        first = runtime.execute("print(1)")
        assert first.ok and len(first.notes) == 1
        assert "Checkpoints are off for the rest of this session" in first.notes[0]
        assert "checkpoints.max_files" in first.error
        second = runtime.execute("print(2)")
        assert second.ok and second.notes == []
        record = read_record(runtime.checkpoints.points.path)
        assert record is not None and record.off and record.checkpoints == [] and record.runs == 2
    # The next session on this workspace is told from memory (a container that goes with its session: counted again).
    with Runtime(snap_backend, settings=few, exec_mode=exec_mode, checkpoint_session="big2") as runtime:
        [note] = runtime.execute("print(1)").notes
        remembered = not isinstance(snap_backend, DockerBackend)
        assert ("counted again after a day" in note) == remembered and "checkpoints.max_files" in note
    more = few.with_overrides({"checkpoints.max_files": 100})  # a raised limit counts again
    with Runtime(snap_backend, settings=more, exec_mode=exec_mode, checkpoint_session="big3") as runtime:
        assert runtime.execute("print(1)").notes == []


def test_retention_keeps_the_last_n(snap_backend: Backend, settings: Settings) -> None:
    kept = settings.with_overrides({"checkpoints.keep": 2})
    with Runtime(snap_backend, settings=kept, checkpoint_session="few") as runtime:
        for number in range(5):
            assert runtime.execute(f"from hermes_tools import write_file\nwrite_file('f{number}.txt', 'x')").ok
        record = read_record(runtime.checkpoints.points.path)
        assert record is not None and [point.run for point in record.checkpoints] == [4, 5]
        snaps = runtime.checkpoints.points.snapshots(record)
        assert sorted(info.id for info in snaps.kept()[0]) == sorted(p.snapshot for p in record.checkpoints)


def test_checkpoints_off_by_setting_take_nothing(snap_backend: Backend, settings: Settings) -> None:
    off = settings.with_overrides({"checkpoints.enabled": False})
    with Runtime(snap_backend, settings=off, checkpoint_session="none") as runtime:
        assert runtime.execute("open('x', 'w').write('x')").ok
        assert not runtime.checkpoints.points.path.exists()


def test_no_python_on_the_backend_turns_checkpoints_off_with_one_note(
        snap_backend: Backend, settings: Settings) -> None:
    if isinstance(snap_backend, LocalBackend):
        pytest.skip("the local backend's engine runs in Herald's process: no python3 to miss")
    missing = settings.with_overrides({"sandbox.remote_python": "no-such-python3"})
    with Runtime(snap_backend, settings=missing, checkpoint_session="nopy") as runtime:
        first = runtime.execute("print(1)")
        assert first.ok and len(first.notes) == 1
        assert "checkpoints and transactions need Python 3.8 or newer" in first.notes[0]
        assert "'no-such-python3' was not found" in first.notes[0] and "sandbox.remote_python" in first.notes[0]
        second = runtime.execute("print(2)")
        assert second.ok and second.notes == []


def test_the_store_stays_under_its_size_oldest_checkpoints_first(local_backend: Backend, workspace: Path,
                                                                  settings: Settings) -> None:
    small = settings.with_overrides({"checkpoints.max_store_mb": 1})
    with Runtime(local_backend, settings=small, checkpoint_session="a") as runtime:
        for _ in range(6):
            (workspace / "big.bin").write_bytes(os.urandom(300_000))  # a change made between runs, 300 kB new
            assert runtime.execute("print(1)").ok
            record = read_record(runtime.checkpoints.points.path)
            assert record is not None
            _, size = runtime.checkpoints.points.snapshots(record).kept()
            assert size <= (1 << 20) or len(record.checkpoints) == 1
        assert record is not None and [point.run for point in record.checkpoints][-1] == 6
        assert len(record.checkpoints) < 6  # the oldest went first, so that the newest files are covered
        snaps = runtime.checkpoints.points.snapshots(record)
        assert snaps.changes(record.checkpoints[-1].snapshot) == Changes()
    with Runtime(local_backend, settings=small, checkpoint_session="b") as runtime:  # another session: a's go
        (workspace / "more.bin").write_bytes(os.urandom(300_000))
        assert runtime.execute("print(1)").ok
        mine = read_record(runtime.checkpoints.points.path)
        assert mine is not None and [point.run for point in mine.checkpoints] == [1]
        kept, size = runtime.checkpoints.points.snapshots(mine).kept()
        assert size <= (1 << 20) + 400_000 and mine.checkpoints[0].snapshot in {info.id for info in kept}
