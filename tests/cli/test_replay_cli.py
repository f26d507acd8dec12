"""`herald exec --record FILE` and `herald exec --replay FILE`, as a person runs them (a real
subprocess, the local backend, isolation at its default): a replay prints what the recorded
run printed without running a tool; a changed script fails at its first differing call with a
message naming it; calls made in another order still replay; recorded errors replay as the same
ToolError; a cut, damaged or foreign recording is refused before anything runs; a replay never
reads the real files a script asks for (as root and as the generated non-root user)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli._herald import run
from tests.fixtures.users import User

SCRIPT = """\
from hermes_tools import read_file, terminal, parallel, patch, ToolError
print(read_file("a.txt")["content"])
pages = parallel([(read_file, p) for p in ["a.txt", "b.txt"]])
print([p["total_lines"] for p in pages])
print(terminal("echo $((6 * 7)); cat b.txt")["output"])
print(patch("b.txt", "gamma", "delta")["diff"].splitlines()[-1])
try:
    read_file("missing.txt")
except ToolError as exc:
    print("caught:", exc)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    (path / "a.txt").write_text("alpha\nbeta\n")
    (path / "b.txt").write_text("gamma\n")
    (path / "s.py").write_text(SCRIPT)
    return path


def _record(project: Path, home: Path, script: str = "s.py", *extra: str) -> Path:
    recording = project.parent / "run.jsonl"
    done = run(["exec", script, "--record", str(recording), *extra], cwd=project, home=home)
    assert done.returncode == 0, done.stderr
    return recording


def _elsewhere(tmp_path: Path) -> Path:
    """An empty directory: what a replay reads of the project would fail there."""
    path = tmp_path / "elsewhere"
    path.mkdir(exist_ok=True)
    return path


def test_a_replay_prints_what_the_recorded_run_printed_without_running_a_tool(project: Path, tmp_path: Path,
                                                                               home: Path) -> None:
    recorded = run(["exec", "s.py", "--record", str(tmp_path / "run.jsonl")], cwd=project, home=home)
    assert recorded.returncode == 0, recorded.stderr
    assert (project / "b.txt").read_text() == "delta\n"  # the patch ran while recording
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    head, end = json.loads(lines[0]), json.loads(lines[-1])
    assert head["format"] == "herald-recording" and head["backend"] == "local" and len(head["script_sha256"]) == 64
    assert end["end"]["calls"] == 6 == len(lines) - 2
    assert (tmp_path / "run.jsonl").stat().st_mode & 0o777 == 0o600  # whole results: the owner's only

    elsewhere = _elsewhere(tmp_path)
    (elsewhere / "s.py").write_text(SCRIPT)
    replayed = run(["exec", "s.py", "--replay", str(tmp_path / "run.jsonl")], cwd=elsewhere, home=home)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout
    assert "caught: File not found: missing.txt" in replayed.stdout  # the recorded error, as recorded
    assert "6 tool call(s)" in replayed.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == ["s.py"]  # nothing written here


def test_the_json_result_of_a_replay_has_the_recorded_runs_fields(project: Path, tmp_path: Path, home: Path) -> None:
    recording = tmp_path / "run.jsonl"
    recorded = run(["exec", "s.py", "--json", "--record", str(recording)], cwd=project, home=home)
    replayed = run(["exec", str(project / "s.py"), "--json", "--replay", str(recording)], cwd=_elsewhere(tmp_path),
                   home=home)
    assert replayed.returncode == 0, replayed.stderr
    before, after = json.loads(recorded.stdout), json.loads(replayed.stdout)
    for key in ("status", "output", "exit_code", "tool_calls_made", "refused_calls", "budget_exhausted"):
        assert after[key] == before[key], key


def test_a_changed_script_fails_at_its_first_differing_call(project: Path, tmp_path: Path, home: Path) -> None:
    recording = _record(project, home)
    (project / "changed.py").write_text(SCRIPT.replace('["a.txt", "b.txt"]', '["a.txt", "c.txt"]'))
    done = run(["exec", "changed.py", "--replay", str(recording)], cwd=project, home=home)
    assert done.returncode == 1
    assert done.stdout == "     1|alpha\n     2|beta\n"  # what ran before the differing call
    message = done.stderr
    assert "Replay mismatch at call 3: read_file(" in message and '"path":"c.txt"' in message
    assert 'Nearest recorded read_file call: #' in message and '"path":"b.txt"' in message
    assert "The script is not the one recorded" in message
    assert "hermes_tools.ToolError: Replay mismatch" in message  # the script got it as a ToolError


def test_a_script_that_catches_the_mismatch_still_fails_the_replay(project: Path, tmp_path: Path,
                                                                   home: Path) -> None:
    recording = _record(project, home)
    (project / "sly.py").write_text(
        "from hermes_tools import read_file, terminal, ToolError\n"
        "try:\n    read_file('other.txt')\nexcept ToolError as exc:\n    print('caught', type(exc).__name__)\n"
        "try:\n    print(terminal('echo $((6 * 7)); cat b.txt')['output'])\n"
        "except ToolError as exc:\n    print('later:', str(exc)[:40])\n")
    done = run(["exec", "sly.py", "--replay", str(recording)], cwd=project, home=home)
    assert done.returncode == 1
    assert "caught ToolError" in done.stdout
    assert "later: Not replayed: the replay stopped at an" in done.stdout  # no call is answered after it
    assert "Replay mismatch at call 1: read_file(" in done.stderr


def test_calls_made_in_another_order_still_replay(project: Path, tmp_path: Path, home: Path) -> None:
    names = [f"f{i}.txt" for i in range(12)]
    for i, name in enumerate(names):
        (project / name).write_text(f"file {i}\n")
    (project / "seq.py").write_text(
        "from hermes_tools import read_file\n"
        f"for p in {names!r}:\n    print(read_file(p)['content'])\n")
    recording = _record(project, home, "seq.py")
    (project / "par.py").write_text(
        "from hermes_tools import read_file, parallel\n"
        f"pages = parallel([(read_file, p) for p in reversed({names!r})])\n"
        "for page in reversed(pages):\n    print(page['content'])\n")
    elsewhere = _elsewhere(tmp_path)
    (elsewhere / "par.py").write_text((project / "par.py").read_text())
    done = run(["exec", "par.py", "--replay", str(recording), "--strict"], cwd=elsewhere, home=home)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "".join(f"     1|file {i}\n" for i in range(12))


def test_recorded_calls_the_replay_does_not_make_are_a_note_or_with_strict_an_error(
        project: Path, tmp_path: Path, home: Path) -> None:
    recording = _record(project, home)
    (project / "short.py").write_text('from hermes_tools import read_file\nprint(read_file("a.txt")["total_lines"])\n')
    done = run(["exec", "short.py", "--replay", str(recording)], cwd=project, home=home)
    assert done.returncode == 0, done.stderr
    assert "Replay: 5 of the 6 recorded call(s) were not made by this run" in done.stderr
    strict = run(["exec", "short.py", "--replay", str(recording), "--strict"], cwd=project, home=home)
    assert strict.returncode == 1 and "(--strict)" in strict.stderr


@pytest.mark.parametrize("damage", ["cut", "garbage", "foreign", "miscounted", "empty"])
def test_a_cut_or_damaged_recording_is_refused_and_nothing_runs(project: Path, tmp_path: Path, home: Path,
                                                                damage: str) -> None:
    recording = _record(project, home)
    lines = recording.read_text().splitlines(keepends=True)
    broken = {
        "cut": "".join(lines[:-1]),  # no end line
        "garbage": "".join([*lines[:3], lines[3][: len(lines[3]) // 2] + "\n", *lines[4:]]),
        "foreign": '{"hello": "world"}\n' + "".join(lines[1:]),
        "miscounted": "".join([*lines[:2], *lines[3:]]),  # a call line removed
        "empty": "",
    }[damage]
    recording.write_text(broken)
    (project / "marker.py").write_text('open("ran.txt", "w").write("it ran")\n' + SCRIPT)
    done = run(["exec", "marker.py", "--replay", str(recording)], cwd=project, home=home)
    assert done.returncode == 2, done.stderr
    assert "nothing was run" in done.stderr and str(recording.name) in done.stderr
    assert not (project / "ran.txt").exists()


def test_recording_to_a_place_that_cannot_be_written(project: Path, tmp_path: Path, home: Path) -> None:
    done = run(["exec", "s.py", "--record", str(tmp_path / "no" / "such" / "dir.jsonl")], cwd=project, home=home)
    assert done.returncode == 2 and "cannot write the recording" in done.stderr
    assert (project / "b.txt").read_text() == "gamma\n"  # nothing ran
    full = run(["exec", "s.py", "--record", "/dev/full"], cwd=project, home=home)  # every write fails
    assert full.returncode == 0, full.stderr
    assert full.stderr.count("could not be written") == 1 and "the run itself was not affected" in full.stderr
    assert "caught: File not found" in full.stdout


def test_record_and_replay_go_separately(project: Path, tmp_path: Path, home: Path) -> None:
    done = run(["exec", "s.py", "--record", "a.jsonl", "--replay", "b.jsonl"], cwd=project, home=home)
    assert done.returncode == 2 and "--record and --replay go separately" in done.stderr


PROBE = ("from hermes_tools import read_file, write_file, terminal, ToolError\n"
         "for call in (lambda: read_file('secret.txt'), lambda: write_file('planted.txt', 'x'),\n"
         "             lambda: terminal('touch ran-a-command')):\n"
         "    try:\n        print(call())\n"
         "    except ToolError as exc:\n        print('refused:', str(exc)[:30])\n")


@pytest.fixture
def user_dir() -> Iterator[Path]:
    """A directory outside pytest's 0700 tmp tree, for a run as another user."""
    path = Path(tempfile.mkdtemp(prefix="herald-replay-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("as_user", [False, True], ids=["as-root-or-self", "as-nonroot"])
def test_a_replay_never_runs_a_tool_on_the_real_files(project: Path, tmp_path: Path, home: Path, user_dir: Path,
                                                      as_user: bool, request: pytest.FixtureRequest) -> None:
    """A script replayed against a recording that lacks its calls asks for a real secret file,
    writes one and runs a command: each call is refused as a mismatch; none reaches a tool."""
    recording = _record(project, home)
    if as_user:
        user: User = request.getfixturevalue("nonroot")
        place = user_dir / "project"
        shutil.copytree(project, place)
        shutil.copy(recording, user_dir / "run.jsonl")
        recording = user_dir / "run.jsonl"
        (place / "secret.txt").write_text("the secret\n")
        (place / "probe.py").write_text(PROBE)
        for path in (place, *place.iterdir()):
            os.chown(path, user.uid, user.gid)
        recording.chmod(0o644)
        done = user.herald("exec", "probe.py", "--replay", str(recording), cwd=str(place),
                           env={"HERALD_DATA_DIR": str(place / ".data"), "HERALD_CONFIG": str(place / "none.toml")})
        project = place
    else:
        (project / "secret.txt").write_text("the secret\n")
        (project / "probe.py").write_text(PROBE)
        done = run(["exec", "probe.py", "--replay", str(recording)], cwd=project, home=home)
    assert done.returncode == 1, done.stderr
    assert "the secret" not in done.stdout and "the secret" not in done.stderr
    assert done.stdout.count("refused: ") == 3, done.stdout
    assert "Replay mismatch at call 1: read_file(" in done.stderr
    assert not (project / "planted.txt").exists() and not (project / "ran-a-command").exists()


TRANSACTION_SCRIPT = """\
from hermes_tools import transaction, write_file
with transaction(verify="test -s new.txt") as kept:
    write_file("new.txt", "kept\\n")
try:
    with transaction(verify="grep -q never new.txt") as undone:
        write_file("new.txt", "undone\\n")
except Exception as exc:
    print("raised:", exc)
print(kept.committed, kept.changed, undone.committed, undone.verify["exit_code"], undone.changed)
"""


def test_a_transaction_replays_whole_from_the_recording(project: Path, tmp_path: Path, home: Path) -> None:
    """A transaction's begin and end, and its verify inside the end, replay as they were recorded:
    the same outcome, no verify run and no file touched here, no recorded call left unused."""
    (project / "tx.py").write_text(TRANSACTION_SCRIPT)
    recording = _record(project, home, "tx.py")
    elsewhere = _elsewhere(tmp_path)
    replayed = run(["exec", str(project / "tx.py"), "--replay", str(recording), "--strict"], cwd=elsewhere,
                   home=home)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.splitlines()[-1] == "True ['new.txt'] False 1 ['new.txt']"
    assert (project / "new.txt").read_text() == "kept\n"
    assert not (elsewhere / "new.txt").exists(), "a replay writes nothing"
