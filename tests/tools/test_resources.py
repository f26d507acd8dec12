"""Declared resources: which calls may run together, and the per-resource locks the dispatcher takes.

Lock tests decide "free now or must wait" without timing: a hold given an already-set cancel
event returns at once, True when the resources were free and False when it would have waited."""

from __future__ import annotations

import threading
from pathlib import Path

from herald import Runtime
from herald.runtime.toolset import default_registry
from herald.tools.resources import ANY_FILE, BROWSER, SHELL, KeyedLocks, Resource, conflicts
from tests.runtime._helpers import run_ok
from tests.tools.conftest import registered

SET = threading.Event()
SET.set()


def file(path: str, shared: bool = False) -> Resource:
    return Resource("file:" + path, shared)


def test_reads_of_one_file_go_together_a_change_does_not() -> None:
    assert not conflicts([file("/w/a.py", shared=True)], [file("/w/a.py", shared=True)])
    assert conflicts([file("/w/a.py", shared=True)], [file("/w/a.py")])
    assert conflicts([file("/w/a.py")], [file("/w/a.py")])
    assert not conflicts([file("/w/a.py")], [file("/w/b.py")])


def test_a_directory_overlaps_what_is_inside_it() -> None:
    assert conflicts([file("/w/src", shared=True)], [file("/w/src/a.py")])
    assert not conflicts([file("/w/src", shared=True)], [file("/w/srcs/a.py")])


def test_shell_and_scripts_touch_every_file_but_not_the_browser() -> None:
    anything = [Resource(SHELL), Resource(ANY_FILE)]
    assert conflicts(anything, [file("/etc/hosts", shared=True)])
    assert conflicts(anything, [file("~/notes.txt")])  # expanded by the backend: still a file
    assert not conflicts(anything, [Resource(BROWSER)])
    assert not conflicts(anything, [])


def test_tools_declare_what_their_arguments_touch(runtime: Runtime, workspace: Path) -> None:
    ctx, registry = runtime.dispatcher.ctx, default_registry()
    read = registered(registry, "read_file").resources({"path": "a.py"}, ctx)
    assert read == [Resource(f"file:{workspace}/a.py", shared=True)]
    assert registered(registry, "patch").resources({"path": "sub/../a.py"}, ctx) == [Resource(f"file:{workspace}/a.py")]
    assert registered(registry, "search_files").resources({"pattern": "x"}, ctx) == [
        Resource(f"file:{workspace}", shared=True)
    ]
    assert {r.key for r in registered(registry, "terminal").resources({"command": "ls"}, ctx)} == {SHELL, ANY_FILE}
    assert registered(registry, "web_extract").resources({"urls": ["http://x"]}, ctx) == []


def test_an_exclusive_hold_makes_others_wait_and_cancel_gives_up() -> None:
    locks = KeyedLocks()
    with locks.hold([file("/w/a.py")]) as held:
        assert held
        with locks.hold([file("/w/a.py", shared=True)], SET) as reader:
            assert not reader  # would have waited for the change to finish
        with locks.hold([file("/w/b.py")], SET) as other:
            assert other  # another file is free
    with locks.hold([file("/w/a.py")], SET) as after:
        assert after  # released on exit


def test_readers_share_and_a_writer_waits_for_them() -> None:
    locks = KeyedLocks()
    with locks.hold([file("/w/a.py", shared=True)]), locks.hold([file("/w/a.py", shared=True)], SET) as second:
        assert second
        with locks.hold([file("/w/a.py")], SET) as writer:
            assert not writer


def test_all_or_nothing_so_two_calls_never_deadlock() -> None:
    locks = KeyedLocks()
    first_in, release = threading.Event(), threading.Event()
    done: list[str] = []

    def holder() -> None:
        with locks.hold([Resource(SHELL)]):
            first_in.set()
            release.wait(30)
        done.append("holder")

    thread = threading.Thread(target=holder)
    thread.start()
    assert first_in.wait(30)
    # Wants the browser (free) and the shell (held): takes neither while it waits.
    with locks.hold([Resource(BROWSER), Resource(SHELL)], SET) as both:
        assert not both
    with locks.hold([Resource(BROWSER)], SET) as browser:
        assert browser
    release.set()
    thread.join(30)
    with locks.hold([Resource(BROWSER), Resource(SHELL)]) as both:
        assert both and done == ["holder"]


def test_parallel_patches_of_one_file_lose_nothing(runtime: Runtime, workspace: Path) -> None:
    target = workspace / "counts.txt"
    target.write_text("".join(f"slot{i:02d}=old\n" for i in range(24)))
    result = run_ok(runtime, """
        from hermes_tools import parallel, patch
        results = parallel(*[(patch, "counts.txt", f"slot{i:02d}=old", f"slot{i:02d}=new") for i in range(24)])
        print(sum(r["replacements"] for r in results))
        """)
    assert result.output == "24\n"
    assert target.read_text() == "".join(f"slot{i:02d}=new\n" for i in range(24))
