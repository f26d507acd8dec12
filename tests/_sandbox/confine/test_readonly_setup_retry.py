"""A confined command whose bwrap fails before the command starts is tried again.

bwrap binds `/` with every mount below it; a mount that goes meanwhile (a container stopping on
a Docker host) fails the bind ("Can't bind mount /oldroot/ on /newroot/"), which users saw as a
command's error. Here a real bwrap sits behind a wrapper that fails its first tries as bwrap does.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from herald._sandbox.confine.readonly import local_confinement
from herald._sandbox.shell.script import ShellScripts

CONFINEMENT, PROBLEM = local_confinement()
pytestmark = pytest.mark.skipif(CONFINEMENT is None, reason=f"bwrap cannot confine here: {PROBLEM}")
SETUP_ERROR = "bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: Invalid argument"


def _flaky_bwrap(tmp_path: Path, failures: int) -> str:
    """A bwrap that fails its first `failures` runs before starting anything, then is bwrap."""
    assert CONFINEMENT is not None
    count = tmp_path / "runs"
    wrapper = tmp_path / "bwrap"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}\n"
        f'if [ "$n" -lt {failures} ]; then echo "{SETUP_ERROR}" >&2; exit 1; fi\n'
        f'exec {CONFINEMENT.bwrap} "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def _run_confined(tmp_path: Path, bwrap: str, command: str) -> tuple[str, int, str]:
    """(output, status, directory after) of `command` run through `__herald_ro` in a bash."""
    assert CONFINEMENT is not None
    private = tmp_path / "private"
    private.mkdir()
    scripts = ShellScripts("n0nce", str(private / "state"), str(private / "command"))
    (private / "command").write_text(command)
    work = tmp_path / "work"
    work.mkdir()
    (work / "sub").mkdir()
    text = scripts.confine_function(bwrap, CONFINEMENT.seccomp) + "{ __herald_ro; } 2>&1; echo \"rc=$? dir=$PWD\"\n"
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", text], cwd=work, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "HOME": str(tmp_path)})
    out, _, last = done.stdout.rpartition("rc=")
    status, _, directory = last.strip().partition(" dir=")
    return out, int(status), directory


def test_a_bwrap_that_fails_to_start_twice_is_tried_again_and_its_messages_stay_out(tmp_path: Path) -> None:
    out, status, directory = _run_confined(tmp_path, _flaky_bwrap(tmp_path, 2), "echo hi; echo err >&2; cd sub; exit 3")
    assert (out, status) == ("hi\nerr\n", 3)
    assert directory == str(tmp_path / "work"), "`exit` skips the directory report, as in a session shell"
    assert (tmp_path / "runs").read_text().strip() == "3"


def test_the_directory_the_command_ends_in_carries_over(tmp_path: Path) -> None:
    out, status, directory = _run_confined(tmp_path, _flaky_bwrap(tmp_path, 1), "cd sub && pwd")
    assert (out.strip(), status, directory) == (str(tmp_path / "work" / "sub"), 0, str(tmp_path / "work" / "sub"))


def test_a_bwrap_that_never_starts_says_why_once(tmp_path: Path) -> None:
    out, status, _ = _run_confined(tmp_path, _flaky_bwrap(tmp_path, 99), "echo never")
    assert (out, status) == (SETUP_ERROR + "\n", 1)
    assert (tmp_path / "runs").read_text().strip() == "3", "three tries, then the last one's message"


def test_a_command_that_fails_is_not_run_again(tmp_path: Path) -> None:
    out, status, _ = _run_confined(tmp_path, _flaky_bwrap(tmp_path, 0), "echo once; false")
    assert (out, status) == ("once\n", 1)
    assert (tmp_path / "runs").read_text().strip() == "1"
