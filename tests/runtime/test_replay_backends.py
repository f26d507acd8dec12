"""Record a run on a real remote backend, then replay it with that backend gone: the same output.

Over SSH (the fixture's real sshd, stopped for the replay and started again after) in host mode
and in backend mode, where the supervisor would answer the file tools, `terminal` and
`search_files` next to the script: a recording run sends them all to Herald, so every result is
in the recording. On Docker (the fixture's dockerd and image) in backend mode, replayed with the
settings still naming Docker but an engine address that leads nowhere.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path
from typing import Any

import pytest

from tests.cli._herald import run
from tests.fixtures.browsers import LocalWebApp

SCRIPT = """\
from hermes_tools import read_file, write_file, terminal, patch, search_files, parallel, ToolError
print(read_file("notes.txt")["content"])
print(terminal("whoami; pwd; uname -n")["output"])
write_file("made.txt", "made remotely\\n")
print(patch("notes.txt", "first", "FIRST")["diff"].splitlines()[-2:])
print(sorted(m["path"] for m in search_files("FIRST|made", path=".")["matches"]))
print([p["content"] for p in parallel([(read_file, "made.txt"), (read_file, "notes.txt")])])
try:
    patch("notes.txt", "not there", "x")
except ToolError as exc:
    print("caught:", str(exc).splitlines()[0])
"""


def _env(sshd: Any) -> dict[str, str]:
    return {"HERALD_SSH_" + key.split(".", 1)[1].upper(): str(value) for key, value in sshd.overrides().items()}


def _remote_project(sshd: Any) -> str:
    remote: str = sshd.make_workspace()
    entry = pwd.getpwnam(sshd.user)
    notes = Path(remote, "notes.txt")
    notes.write_text("first line\nsecond line\n")
    os.chown(notes, entry.pw_uid, entry.pw_gid)
    return remote


@pytest.mark.parametrize("mode", ["host", "backend"])
def test_a_run_recorded_over_ssh_replays_with_sshd_stopped(sshd: Any, tmp_path: Path, home: Path, mode: str) -> None:
    remote = _remote_project(sshd)
    here = tmp_path / "here"
    here.mkdir()
    (here / "s.py").write_text(SCRIPT)
    recording = tmp_path / "ssh.jsonl"
    env = {**_env(sshd), "HERALD_BACKEND": sshd.spec}
    try:
        recorded = run(["exec", "s.py", "--cwd", remote, "--exec-mode", mode, "--record", str(recording)],
                       cwd=here, home=home, **env)
        assert recorded.returncode == 0, recorded.stderr
        assert f"{sshd.user}\n{remote}\n" in recorded.stdout and "caught: " in recorded.stdout
        assert Path(remote, "made.txt").read_text() == "made remotely\n"
        head = json.loads(recording.read_text().splitlines()[0])
        assert head["backend"] == sshd.spec and head["exec_mode"] == mode

        sshd.stop()
        replayed = run(["exec", "s.py", "--replay", str(recording), "--strict"], cwd=here, home=home, **env)
        assert replayed.returncode == 0, replayed.stderr
        assert replayed.stdout == recorded.stdout
        assert "8 tool call(s)" in replayed.stderr
        assert sorted(p.name for p in here.iterdir()) == ["s.py"]
    finally:
        sshd.restart()
        sshd.remove_workspace(remote)


def test_a_run_recorded_on_docker_replays_without_reaching_an_engine(docker_engine_url: str, docker_test_image: str,
                                                                   tmp_path: Path, home: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    (here / "s.py").write_text('from hermes_tools import write_file\nwrite_file("notes.txt", "first line\\n")\n'
                               + SCRIPT)
    recording = tmp_path / "docker.jsonl"
    env = {"HERALD_BACKEND": "docker", "HERALD_DOCKER_HOST": docker_engine_url,
           "HERALD_DOCKER_IMAGE": docker_test_image, "HERALD_DOCKER_NETWORK": "none"}
    recorded = run(["exec", "s.py", "--exec-mode", "backend", "--record", str(recording)], cwd=here, home=home,
                   timeout=300, **env)
    assert recorded.returncode == 0, recorded.stderr
    assert "caught: " in recorded.stdout

    nowhere = f"unix://{tmp_path / 'no-docker.sock'}"
    elsewhere = {**env, "HERALD_DOCKER_HOST": nowhere}
    replayed = run(["exec", "s.py", "--replay", str(recording)], cwd=here, home=home, timeout=120, **elsewhere)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout
    assert not (here / "notes.txt").exists()  # the recorded write_file acted in the container only


def test_a_browser_run_replays_as_its_results_with_the_site_gone(chromium: str, tmp_path: Path, home: Path) -> None:
    """The browser's calls replay as their results: the page's server is closed before the
    replay, so a browser that navigated for real would get an error page instead."""
    here = tmp_path / "here"
    here.mkdir()
    recording = tmp_path / "browser.jsonl"
    with LocalWebApp() as app:
        (here / "s.py").write_text(
            "from hermes_tools import browser_navigate, browser_snapshot\n"
            f"page = browser_navigate({app.url + '/search'!r})\n"
            "print(page['title'])\n"
            "snapshot = browser_snapshot()['snapshot']\n"
            "print(len(snapshot.splitlines()), 'lines,', snapshot.count('@e'), 'refs')\n")
        recorded = run(["exec", "s.py", "--record", str(recording)], cwd=here, home=home, timeout=180)
    assert recorded.returncode == 0, recorded.stderr
    assert " refs" in recorded.stdout and "ERR_" not in recorded.stdout
    replayed = run(["exec", "s.py", "--replay", str(recording), "--strict"], cwd=here, home=home)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout
