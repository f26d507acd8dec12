"""The pieces of containment on their own: owned temp dirs and their sweep, API keys out of
os.environ."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from herald import tempdirs
from tests.runtime._helpers import wait_for


def test_a_dead_owners_dirs_are_swept_and_a_live_owners_kept(tmp_path: Path) -> None:
    mine = tempdirs.owned_tempdir("test", dir=str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "from herald.tempdirs import owned_tempdir; "
                           f"print(owned_tempdir('test', dir={str(tmp_path)!r}))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    reused = tmp_path / f"herald-test-{os.getpid()}-1-abcd"  # our pid, another start time: a dead owner
    reused.mkdir()
    other = tmp_path / "herald-test-notours"
    other.mkdir()
    removed = tempdirs.sweep_dead_owners((str(tmp_path),))
    assert sorted(removed) == sorted([dead, str(reused)])
    assert os.path.isdir(mine) and other.is_dir() and not os.path.exists(dead)


def test_api_keys_leave_the_environment_but_herald_still_sees_them() -> None:
    check = ("import os; from herald.keys import herald_environ, take_api_keys; take_api_keys(); "
             "print('EXAMPLE_API_KEY' in os.environ, herald_environ()['EXAMPLE_API_KEY'])")
    env = {**os.environ, "EXAMPLE_API_KEY": "sk-example"}
    done = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "sk-example"]


def test_taken_keys_are_wiped_from_the_exec_time_environment_block() -> None:
    # /proc/PID/environ shows the block the kernel copied at exec, whatever os.environ says;
    # root reads it even from a process that is not dumpable.
    check = ("from herald.keys import take_api_keys; take_api_keys(); "
             "import sys; sys.stdout.buffer.write(open('/proc/self/environ', 'rb').read())")
    env = {**os.environ, "EXAMPLE_API_KEY": "sk-example-secret", "HERALD_KEEP": "kept-value"}
    done = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, check=True)
    assert b"sk-example-secret" not in done.stdout
    assert b"EXAMPLE_API_KEY=\0" in done.stdout  # the name stays, its value is gone
    assert b"HERALD_KEEP=kept-value\0" in done.stdout  # nothing else is touched


def test_an_owner_that_exited_but_is_not_yet_reaped_counts_as_gone(tmp_path: Path) -> None:
    from herald._sandbox.procs.owners import owner_tag, stat_fields

    child = subprocess.Popen(["true"])  # not waited for until the end: a zombie meanwhile
    try:
        tag = owner_tag(child.pid)
        assert wait_for(lambda: (stat_fields(child.pid) or [b"Z"])[0] == b"Z", timeout=60)
        left = tmp_path / f"herald-test-{tag}-zombie"
        left.mkdir()
        assert tempdirs.sweep_dead_owners((str(tmp_path),)) == [str(left)]
    finally:
        child.wait()
