"""`herald checkpoints list|diff|restore` as a person runs it: a real subprocess, real runs of
`herald exec` before it, on this machine and over SSH; a container that went with its session
is refused with the way to keep the next one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fixtures.sshd import SSHServer

from ._herald import run

WRITE = ("from hermes_tools import write_file, terminal\n"
         "write_file('a.txt', 'two\\n')\nterminal('rm old.txt; mkdir -p n')\n")


def _checkpoints(home: Path, cwd: Path, *args: str) -> Any:
    done = run(["checkpoints", *args, "--json"], cwd, home)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_list_diff_restore_on_this_machine(tmp_path: Path, workspace: Path) -> None:
    (workspace / "a.txt").write_text("one\n")
    (workspace / "old.txt").write_text("old\n")
    done = run(["exec", "-"], workspace, tmp_path, stdin=WRITE)
    assert done.returncode == 0, done.stderr
    record = _checkpoints(tmp_path, workspace, "list")
    assert record["root"] == str(workspace) and record["runs"] == 1
    assert [point["run"] for point in record["checkpoints"]] == [1]

    text = run(["checkpoints", "diff", "1"], workspace, tmp_path)
    assert text.returncode == 0, text.stderr
    assert "-one\n+two\n" in text.stdout and "--- a/old.txt\n+++ /dev/null" in text.stdout
    assert "directory n: added" in text.stdout

    restored = run(["checkpoints", "restore", "1", "--session", record["session"][:12]], workspace, tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert "to before run 1" in restored.stdout and "removed: n" in restored.stdout
    assert (workspace / "a.txt").read_text() == "one\n" and (workspace / "old.txt").read_text() == "old\n"
    assert not (workspace / "n").exists()

    # The restore kept the workspace as it was first: it can be undone.
    record = _checkpoints(tmp_path, workspace, "list")
    undo = record["checkpoints"][-1]
    assert undo["run"] == 0
    again = _checkpoints(tmp_path, workspace, "restore", "@" + undo["snapshot"][-4:])
    assert again["modified"] == ["a.txt"] and (workspace / "a.txt").read_text() == "two\n"


def test_usage_errors_say_what_exists(tmp_path: Path, workspace: Path) -> None:
    done = run(["checkpoints", "list"], workspace, tmp_path)
    assert done.returncode == 2 and "no checkpoints" in done.stderr
    assert run(["exec", "-"], workspace, tmp_path, stdin="print(1)").returncode == 0
    done = run(["checkpoints", "restore", "5"], workspace, tmp_path)
    assert done.returncode == 2 and "no checkpoint before run 5" in done.stderr
    done = run(["checkpoints", "diff", "1", "--session", "nope"], workspace, tmp_path)
    assert done.returncode == 2 and "matches no session" in done.stderr


def test_restore_over_ssh(tmp_path: Path, workspace: Path, sshd: SSHServer) -> None:
    remote = Path(sshd.make_workspace())
    try:
        options = [item for key, value in sshd.overrides().items() for item in ("-c", f"{key}={value}")]
        run(["exec", "--backend", sshd.spec, "--cwd", str(remote), *options, "-"], workspace, tmp_path,
            stdin="from hermes_tools import terminal\nterminal('echo one > a.txt; echo old > old.txt')")
        done = run(["exec", "--backend", sshd.spec, "--cwd", str(remote), *options, "-"], workspace, tmp_path,
                   stdin=WRITE)
        assert done.returncode == 0, done.stderr
        assert (remote / "a.txt").read_text() == "two\n"
        restored = run(["checkpoints", "restore", "1", *options], workspace, tmp_path)
        assert restored.returncode == 0, restored.stderr
        assert (remote / "a.txt").read_text() == "one\n" and (remote / "old.txt").exists()
        assert not (remote / "n").exists()
    finally:
        sshd.remove_workspace(str(remote))


def test_a_container_gone_with_its_session_is_refused(tmp_path: Path, workspace: Path, docker_engine_url: str,
                                                      docker_test_image: str) -> None:
    options = ["-c", f"docker.host={docker_engine_url}", "-c", "docker.network=none"]
    done = run(["exec", "--backend", f"docker:{docker_test_image}", *options, "-"], workspace, tmp_path, stdin=WRITE)
    assert done.returncode == 0, done.stderr
    refused = run(["checkpoints", "restore", "1", *options], workspace, tmp_path)
    assert refused.returncode == 2
    assert "lived in its Docker container, which ended with the session" in refused.stderr
    assert "docker.name" in refused.stderr
