"""Files and patterns a hostile script points the tools at: devices, FIFOs, regex bombs, slow
searches. Each is refused or cut off within its time, from a script and as a direct call, and the
session goes on (memory not grown, the shell free for the next command).

Timing bounds only catch a hang: they are generous, since the machine may be loaded."""

from __future__ import annotations

import functools
import os
import resource
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime
from herald._sandbox.search.pyengine import WORKER
from tests.runtime._helpers import pids_with_marker, script, wait_for

MB = 1 << 20
HANG = 30.0  # a call that takes this long counts as hung
BOMB = "(a+)+$"  # exponential backtracking on a run of a's that does not end the line

READS = {
    "read_file": {"path": "target"},
    "patch": {"path": "target", "old_string": "a", "new_string": "b"},
}


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes


def finishes(call: Callable[[], Any], within: float = HANG) -> Any:
    """`call()`'s value; fails the test (instead of hanging it) if it does not return in time."""
    box: list[Any] = []
    worker = threading.Thread(target=lambda: box.append(call()), daemon=True)
    worker.start()
    worker.join(within)
    assert box, f"did not return within {within:g} s"
    return box[0]


def in_script(runtime: Runtime, tool: str, args: dict[str, Any], timeout: float = 60) -> str:
    """Call `tool` from a script; what it printed: 'refused <message>' or 'ok'."""
    code = script(
        f"""
        from hermes_tools import ToolError, {tool}
        try:
            {tool}(**{args!r})
            print("ok")
        except ToolError as exc:
            print("refused", exc)
        """
    )
    result = runtime.execute(code, timeout=timeout)
    assert result.status == "success", result
    return result.output


def search_script(pattern: str) -> str:
    return f"from hermes_tools import search_files\nsearch_files({pattern!r})\n"


def ended_by_time(result: Any) -> bool:
    """The run timed out, or the search (given what the run had left) did so first and the
    script died of its error: which comes first is up to the scheduler."""
    return result.status == "timeout" or (result.status == "error" and "search_files: stopped after" in result.error)


def shell_works(runtime: Runtime) -> None:
    """The runtime's shell answers at once, from a script and directly."""
    assert finishes(lambda: in_script(runtime, "terminal", {"command": "echo hi"})) == "ok\n"
    reply = finishes(lambda: runtime.dispatcher.call_direct("terminal", {"command": "echo hi"}))
    assert reply["result"]["output"] == "hi", reply


@pytest.mark.parametrize("tool", sorted(READS))
def test_a_symlink_to_dev_zero_is_refused_without_growing_memory(
    make_runtime: Callable[..., Runtime], workspace: Path, tool: str
) -> None:
    runtime = make_runtime(policy="full")  # the tool's own refusal: the policy would refuse the link first
    (workspace / "target").symlink_to("/dev/zero")
    before = peak_rss()
    printed = finishes(lambda: in_script(runtime, tool, READS[tool]))
    assert printed.startswith("refused") and "not a regular file (a character device)" in printed, printed
    reply = finishes(lambda: runtime.dispatcher.call_direct(tool, READS[tool]))
    assert reply["error"]["type"] == "NotRegularFile", reply
    assert "terminal('head -c 4096 target | xxd'" in reply["error"]["message"]
    assert peak_rss() - before < 100 * MB
    shell_works(runtime)


@pytest.mark.parametrize("tool", sorted(READS))
def test_a_fifo_is_refused_at_once_and_the_shell_stays_free(runtime: Runtime, workspace: Path, tool: str) -> None:
    os.mkfifo(workspace / "target")
    printed = finishes(lambda: in_script(runtime, tool, READS[tool]))
    assert printed.startswith("refused") and "not a regular file (a FIFO)" in printed, printed
    reply = finishes(lambda: runtime.dispatcher.call_direct(tool, READS[tool]))
    assert reply["error"]["type"] == "NotRegularFile", reply
    shell_works(runtime)


def test_write_file_does_not_replace_a_fifo(runtime: Runtime, workspace: Path) -> None:
    os.mkfifo(workspace / "target")
    reply = finishes(lambda: runtime.dispatcher.call_direct("write_file", {"path": "target", "content": "x"}))
    assert "not a regular file" in reply["error"]["message"], reply
    assert (workspace / "target").is_fifo()


def test_search_files_refuses_a_fifo_it_is_given(runtime: Runtime, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    reply = finishes(lambda: runtime.dispatcher.call_direct("search_files", {"pattern": "x", "path": "pipe"}))
    assert "not a regular file or a directory" in reply["error"]["message"], reply
    # In a directory the walk skips it (ripgrep does too).
    (workspace / "a.txt").write_text("x marks\n")
    reply = finishes(lambda: runtime.dispatcher.call_direct("search_files", {"pattern": "x"}))
    assert [m["path"] for m in reply["result"]["matches"]] == ["a.txt"], reply


def test_patch_of_a_long_near_repeat_in_a_big_file_ends_at_once(runtime: Runtime, workspace: Path) -> None:
    """Looking for old_string at every line costs lines x old_string lines (tens of seconds
    here) while patch holds the file's lock; the search is linear."""
    (workspace / "target").write_text("a\n" * 1_000_000)
    args = {"path": "target", "old_string": "a\n" * 5000 + "b", "new_string": "c"}
    reply = finishes(lambda: runtime.dispatcher.call_direct("patch", args))
    assert reply["error"]["type"] == "NoMatch", reply


def test_a_file_over_the_limit_is_refused(make_runtime: Callable[..., Runtime], workspace: Path) -> None:
    runtime = make_runtime(overrides={"files.read_max_bytes": 100})
    (workspace / "target").write_text("a" * 101)
    reply = runtime.dispatcher.call_direct("read_file", {"path": "target"})
    assert "101 bytes, over read_file's 100-byte limit" in reply["error"]["message"], reply


def test_a_regex_bomb_in_the_python_engine_ends_as_a_timeout(
    make_runtime: Callable[..., Runtime], workspace: Path
) -> None:
    runtime = make_runtime(overrides={"files.search": "python"})
    (workspace / "bomb.txt").write_text("a" * 60 + "!\n")
    grace = runtime.settings.sandbox.kill_grace
    started = time.monotonic()
    result = finishes(lambda: runtime.execute(search_script(BOMB), timeout=2), within=60)
    assert ended_by_time(result), result
    assert time.monotonic() - started < 2 + grace + 15
    assert wait_for(lambda: not pids_with_marker(str(WORKER)), timeout=HANG), "the regex worker is still running"
    shell_works(runtime)

    # A direct call has its own time limit, and says what to do when it runs out.
    started = time.monotonic()
    reply = finishes(lambda: runtime.dispatcher.call_direct("search_files", {"pattern": BOMB, "timeout": 2}))
    assert time.monotonic() - started < 2 + 15
    assert reply["error"]["type"] == "Timeout", reply
    assert "Narrow the search" in reply["error"]["message"]
    assert wait_for(lambda: not pids_with_marker(str(WORKER)), timeout=HANG), "the regex worker is still running"


def test_the_python_engine_finds_what_it_should(make_runtime: Callable[..., Runtime], workspace: Path) -> None:
    runtime = make_runtime(overrides={"files.search": "python"})
    (workspace / "a.txt").write_text("one\nneedle two\r\nthree needle\n")
    (workspace / "b.txt").write_text("needle\n")
    reply = runtime.dispatcher.call_direct("search_files", {"pattern": "needle", "limit": 2})
    result = reply["result"]
    assert [(m["path"], m["line"], m["text"]) for m in result["matches"]] == [
        ("a.txt", 2, "needle two"),
        ("a.txt", 3, "three needle"),
    ]
    assert result["has_more"] and result["engine"] == "python"

    # Across the worker's batches (many small files go in one request), lines map back to files.
    for i in range(600):
        (workspace / f"f{i:03}.txt").write_text("x\n" * (i % 3) + f"needle {i}\n")
    reply = runtime.dispatcher.call_direct("search_files", {"pattern": r"needle \d", "limit": 1000})
    matches = reply["result"]["matches"]
    assert [(m["path"], m["line"], m["text"]) for m in matches] == [
        (f"f{i:03}.txt", i % 3 + 1, f"needle {i}") for i in range(600)
    ]


@pytest.mark.parametrize("engine", ["auto", "python"])
def test_a_glob_with_many_wildcards_on_a_long_name_ends_at_once(
    make_runtime: Callable[..., Runtime], workspace: Path, engine: str
) -> None:
    runtime = make_runtime(overrides={"files.search": engine})
    (workspace / ("a" * 200)).write_text("a\n")
    glob = "*a*a*a*a*a*a*a*a*a*a*b"
    for args in ({"pattern": glob, "target": "files"}, {"pattern": "a", "file_glob": glob}):
        reply = finishes(functools.partial(runtime.dispatcher.call_direct, "search_files", args))
        assert reply["result"]["count"] == 0, reply


@pytest.fixture
def slow_for_ripgrep(workspace: Path) -> Iterator[str]:
    """A pattern ripgrep needs a long time for on the workspace (Unicode word boundaries beside
    a bounded repeat defeat its fast paths: ~0.4 s per MB here). The literal alternative is the
    marker that finds its process."""
    if shutil.which("rg") is None:
        pytest.skip("ripgrep (rg) is not installed")
    block = ("héllo wörld ça naïve straße 日本語 ελληνικά " * 40 + "\n").encode()
    words = workspace / "words.txt"
    with open(words, "wb") as fh:
        for _ in range(64 * MB // len(block)):
            fh.write(block)
    yield r"[\w\W]{30}\b\W{5}|heraldslowmarker"
    words.unlink()  # pytest keeps recent tmp dirs: do not leave 64 MB behind


def test_ripgrep_is_stopped_when_the_run_ends(runtime: Runtime, slow_for_ripgrep: str) -> None:
    result = finishes(lambda: runtime.execute(search_script(slow_for_ripgrep), timeout=2), within=60)
    assert ended_by_time(result), result
    assert wait_for(lambda: not pids_with_marker("heraldslowmarker"), timeout=15), "ripgrep still runs"
    started = time.monotonic()
    shell_works(runtime)
    assert time.monotonic() - started < 15


def test_ripgrep_in_a_direct_call_is_bounded_by_its_timeout(runtime: Runtime, slow_for_ripgrep: str) -> None:
    started = time.monotonic()
    reply = finishes(
        lambda: runtime.dispatcher.call_direct("search_files", {"pattern": slow_for_ripgrep, "timeout": 2}), within=60
    )
    assert time.monotonic() - started < 2 + 15
    assert reply["error"]["type"] == "Timeout", reply
    assert "shell, which ran ripgrep, was restarted" in reply["error"]["message"]
    assert wait_for(lambda: not pids_with_marker("heraldslowmarker"), timeout=15), "ripgrep still runs"
    shell_works(runtime)
