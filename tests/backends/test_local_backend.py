"""The local backend: a persistent bash session and file access, exercised for real."""

from __future__ import annotations

import os
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from herald import Settings
from herald._sandbox.procs.trees import alive
from herald.backends import Backend, BackendError
from herald.backends.local import LocalBackend

MakeBackend = Callable[..., LocalBackend]


@pytest.fixture
def make_backend(workspace: Path, settings: Settings) -> Iterator[MakeBackend]:
    """`make_backend(**{"section.field": value})`: a LocalBackend in `workspace`, closed afterwards."""
    made: list[LocalBackend] = []

    def factory(**overrides: object) -> LocalBackend:
        backend = LocalBackend(str(workspace), settings=settings.with_overrides(overrides))
        made.append(backend)
        return backend

    yield factory
    for backend in made:
        backend.close()


def pids_with(marker: str) -> list[int]:
    """Running processes whose command line contains `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != str(os.getpid()):
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and alive(int(entry)):
                found.append(int(entry))
    return found


def wait_for(path: Path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.01)
    raise AssertionError(f"{path} was not written")


def test_is_a_backend(local_backend: LocalBackend, workspace: Path) -> None:
    assert isinstance(local_backend, Backend)
    assert local_backend.name == "local"
    assert local_backend.cwd == str(workspace)


# -- the persistent session -------------------------------------------------------------------


def test_cwd_persists_across_calls(local_backend: LocalBackend, workspace: Path) -> None:
    assert local_backend.run("mkdir -p sub/deeper && cd sub").exit_code == 0
    assert local_backend.run("pwd").output == str(workspace / "sub")
    assert local_backend.cwd == str(workspace / "sub")
    local_backend.run("cd deeper")
    assert local_backend.run("pwd").output == str(workspace / "sub" / "deeper")


def test_exported_and_plain_shell_variables_persist(local_backend: LocalBackend) -> None:
    local_backend.run("export GREETING='hello world'; PLAIN=just-here")
    assert local_backend.run('echo "$GREETING|$PLAIN"').output == "hello world|just-here"
    # Only the exported one reaches child processes, as in any shell.
    child = local_backend.run("bash -c 'echo \"${GREETING-unset}|${PLAIN-unset}\"'")
    assert child.output == "hello world|unset"


def test_functions_persist(local_backend: LocalBackend) -> None:
    local_backend.run("greet() { echo \"hi $1\"; }")
    assert local_backend.run("greet there").output == "hi there"


def test_exit_codes_are_returned(local_backend: LocalBackend) -> None:
    assert local_backend.run("true").exit_code == 0
    assert local_backend.run("false").exit_code == 1
    assert local_backend.run("(exit 7)").exit_code == 7
    assert local_backend.run("no-such-command-herald").exit_code == 127
    result = local_backend.run("ls /no/such/dir")
    assert result.exit_code == 2
    assert "No such file or directory" in result.output


def test_stdout_and_stderr_are_merged_in_order(local_backend: LocalBackend) -> None:
    result = local_backend.run("echo out1; echo err1 >&2; echo out2; echo err2 >&2")
    assert result.output == "out1\nerr1\nout2\nerr2"


def test_output_shape(local_backend: LocalBackend) -> None:
    assert local_backend.run("printf 'no newline'").output == "no newline"
    assert local_backend.run("printf 'two\\n\\n'").output == "two\n"  # only the last newline goes
    assert local_backend.run("true").output == ""
    result = local_backend.run("printf 12345")
    assert (result.output_bytes, result.truncated, result.timed_out) == (5, False, False)


def test_multiline_commands_and_heredocs(local_backend: LocalBackend, workspace: Path) -> None:
    result = local_backend.run("cat > notes.txt <<'EOF'\nline $1\n'quoted'\nEOF\nwc -l < notes.txt")
    assert result.output == "2"
    assert (workspace / "notes.txt").read_text() == "line $1\n'quoted'\n"
    assert local_backend.run("for i in 1 2 3; do\n  echo $i\ndone").output == "1\n2\n3"


def test_bash_errors_read_like_bash(local_backend: LocalBackend) -> None:
    result = local_backend.run("no-such-command-herald")
    assert result.output == "bash: line 1: no-such-command-herald: command not found"


@pytest.mark.parametrize(
    "broken",
    [
        "echo 'unterminated",
        'echo "unterminated',
        "echo $(date",
        "echo $(",
        "echo ${HOME",
        "echo `date",
        "echo \\",
        "if true; then",
    ],
)
def test_broken_syntax_does_not_break_the_session(local_backend: LocalBackend, workspace: Path, broken: str) -> None:
    local_backend.run("mkdir -p sub && cd sub && export KEPT=1")
    local_backend.run(broken, timeout=5)
    after = local_backend.run('echo "next $KEPT"; pwd', timeout=5)
    assert (after.output, after.exit_code, after.note) == (f"next 1\n{workspace / 'sub'}", 0, "")


def test_unterminated_command_substitution_does_not_crash_the_shell_later(local_backend: LocalBackend) -> None:
    # bash 5.2 corrupts its heap parsing an unterminated `$(`; a later big command then
    # crashed the session's shell ("free(): invalid next size").
    local_backend.run("echo $(")
    body = "x" * 300_000
    for _ in range(3):
        result = local_backend.run(f"cat <<'EOF' | wc -c\n{body}\nEOF")
        assert (result.output, result.exit_code, result.note) == ("300001", 0, "")


def test_syntax_error_is_reported(local_backend: LocalBackend) -> None:
    result = local_backend.run("echo 'unterminated")
    assert result.exit_code == 2
    assert "unexpected EOF while looking for matching" in result.output


def test_commands_cannot_read_the_shell_input(local_backend: LocalBackend) -> None:
    # stdin is /dev/null: `cat` ends at once instead of eating the session's protocol stream
    # (or waiting for input until the timeout, which would cut "done").
    assert local_backend.run("cat; echo done", timeout=60).output == "done"
    assert local_backend.run("read -r line; echo \"rc=$? line=$line\"", timeout=60).output == "rc=1 line="
    assert local_backend.run("echo still-fine").output == "still-fine"


def test_unicode_output(local_backend: LocalBackend) -> None:
    assert local_backend.run("echo 'héllo ☃ 😀 日本'").output == "héllo ☃ 😀 日本"
    assert local_backend.run("printf 'h\\303\\251'").output == "hé"


def test_binary_output_does_not_break_the_shell(local_backend: LocalBackend, workspace: Path) -> None:
    (workspace / "blob").write_bytes(bytes(range(256)) * 400)
    result = local_backend.run("cat blob")
    assert result.exit_code == 0
    assert result.output_bytes == 256 * 400
    assert "\x00" in result.output and "\ufffd" in result.output  # NULs kept, bad UTF-8 replaced
    assert local_backend.run("echo alive; pwd").output == f"alive\n{workspace}"


def test_workdir_runs_one_command_elsewhere(local_backend: LocalBackend, workspace: Path) -> None:
    (workspace / "elsewhere").mkdir()
    result = local_backend.run("pwd; cd /; export MOVED=1", workdir="elsewhere")
    assert result.output == str(workspace / "elsewhere")
    assert local_backend.cwd == str(workspace)
    assert local_backend.run('pwd; echo "${MOVED-unset}"').output == f"{workspace}\nunset"
    assert local_backend.run("pwd", workdir=str(workspace / "elsewhere")).output == str(workspace / "elsewhere")


def test_environment_is_scrubbed_of_secrets(
    make_backend: MakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-herald-test-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-herald-test-secret")
    monkeypatch.setenv("LANG", "C.UTF-8")
    backend = make_backend()
    assert backend.run('echo "${OPENAI_API_KEY-absent} ${GITHUB_TOKEN-absent}"').output == "absent absent"
    env = backend.run("env").output
    assert "herald-test-secret" not in env
    assert "LANG=C.UTF-8" in env.splitlines()
    assert backend.run("command -v ls").exit_code == 0  # PATH is kept


def test_env_passthrough_lets_a_named_variable_through(
    make_backend: MakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-passed-on-purpose")
    backend = make_backend(**{"sandbox.env_passthrough": ["OPENAI_API_KEY"]})
    assert backend.run('echo "$OPENAI_API_KEY"').output == "sk-passed-on-purpose"


def test_concurrent_calls_are_serialised(local_backend: LocalBackend) -> None:
    results: dict[int, str] = {}

    def worker(n: int) -> None:
        results[n] = local_backend.run(f"sleep 0.05; echo worker-{n}").output

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == {n: f"worker-{n}" for n in range(4)}


# -- timeouts ---------------------------------------------------------------------------------


def test_timeout_returns_124_and_keeps_partial_output(local_backend: LocalBackend) -> None:
    started = time.monotonic()
    result = local_backend.run("echo before; sleep 1000", timeout=0.5)
    elapsed = time.monotonic() - started
    assert (result.exit_code, result.timed_out) == (124, True)
    assert result.output == "before"
    assert "timed out after 0.5 s" in result.note
    # Not before the timeout; the upper bound is generous (a loaded machine): not the 1000 s.
    assert 0.5 <= elapsed < 60
    assert 0.5 <= result.duration_seconds < 60


def test_timeout_kills_the_command_and_everything_it_started(local_backend: LocalBackend, workspace: Path) -> None:
    marker = f"herald-test-{uuid.uuid4().hex}"
    command = (
        # a direct child, a grandchild, and one in its own session (out of the process group)
        f"sh -c 'echo $$ > child.pid; exec sleep 1000' {marker} & "
        f"sh -c 'sleep 1000 & echo $! > grandchild.pid; wait' {marker} & "
        f"setsid -w sh -c 'echo $$ > session.pid; exec sleep 1000' {marker} & "
        f"sleep 1000; : {marker}"
    )
    result = local_backend.run(command, timeout=1.0)
    assert result.timed_out
    pids = [int(wait_for(workspace / name)) for name in ("child.pid", "grandchild.pid", "session.pid")]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (any(map(alive, pids)) or pids_with(marker)):
        time.sleep(0.02)
    assert [pid for pid in pids if alive(pid)] == []
    assert pids_with(marker) == []


def test_rest_of_a_command_list_does_not_run_after_timeout(local_backend: LocalBackend, workspace: Path) -> None:
    # The first command waits for a file the test makes only after the timeout, so the timeout
    # always comes first, however slow the machine.
    result = local_backend.run("while [ ! -e go ]; do sleep 0.01; done; touch marker", timeout=0.2)
    assert result.timed_out
    (workspace / "go").touch()
    time.sleep(1.0)  # room for `touch` to run if the list went on (it cannot make a pass fail)
    assert not (workspace / "marker").exists()


def test_session_survives_a_timeout(local_backend: LocalBackend, workspace: Path) -> None:
    local_backend.run("mkdir -p sub && cd sub && export KEEP=yes")
    assert local_backend.run("sleep 30", timeout=0.3).timed_out
    assert local_backend.cwd == str(workspace / "sub")
    after = local_backend.run('pwd; echo "$KEEP"')
    assert (after.output, after.exit_code, after.timed_out) == (f"{workspace / 'sub'}\nyes", 0, False)


def test_timeout_of_a_command_ignoring_sigterm(make_backend: MakeBackend) -> None:
    backend = make_backend(**{"sandbox.kill_grace": 0.3})
    started = time.monotonic()
    result = backend.run("trap '' TERM; sleep 1000", timeout=0.2)
    assert result.timed_out
    # SIGKILL after the grace period; generous (a loaded machine): not the command's 1000 s.
    assert time.monotonic() - started < 60
    assert backend.run("echo back").output == "back"


# -- the shell going away ---------------------------------------------------------------------


def test_exit_ends_the_shell_but_not_the_session(local_backend: LocalBackend, workspace: Path) -> None:
    local_backend.run("mkdir -p sub && cd sub && export KEEP=yes")
    result = local_backend.run("exit 3")
    assert result.exit_code == 3
    assert "The shell exited during this command" in result.note
    after = local_backend.run('pwd; echo "$KEEP"')
    assert (after.output, after.exit_code) == (f"{workspace / 'sub'}\nyes", 0)


def test_shell_killed_from_inside(local_backend: LocalBackend, workspace: Path) -> None:
    result = local_backend.run("kill -9 $$")
    assert result.exit_code == -1
    assert "The shell exited" in result.note
    assert local_backend.run("pwd").output == str(workspace)


# -- output capping ---------------------------------------------------------------------------


def test_large_output_is_capped_with_head_tail_and_spill_file(make_backend: MakeBackend, settings: Settings) -> None:
    backend = make_backend(**{"terminal.max_output_bytes": 1000})
    result = backend.run("seq 1 700000")  # about 4.8 MB
    full = "".join(f"{i}\n" for i in range(1, 700001))
    assert result.truncated
    assert result.exit_code == 0
    assert result.output_bytes == len(full)
    head, rest = result.output.split("\n[... ", 1)
    marker, tail = rest.split(" ...]\n", 1)
    assert full.startswith(head) and len(head) <= 400
    assert full.endswith(tail) and len(tail) <= 600 and tail.endswith("699999\n700000\n")
    assert f"{len(full):,} bytes in all" in marker
    assert len(result.output) < 1300
    spill = Path(marker.rsplit("full command output in ", 1)[1])
    assert spill.parent == settings.spill_dir
    assert spill.read_text() == full
    assert backend.run("echo small").output == "small"


def test_default_cap_is_about_a_megabyte(local_backend: LocalBackend) -> None:
    result = local_backend.run("head -c 3000000 /dev/zero | tr '\\0' x")
    assert result.truncated and result.output_bytes == 3_000_000
    assert 999_000 < len(result.output) < 1_001_000


def test_capped_unicode_output_has_no_broken_characters(make_backend: MakeBackend) -> None:
    backend = make_backend(**{"terminal.max_output_bytes": 1000})
    result = backend.run("for i in $(seq 1 2000); do printf '☃'; done; echo")
    assert result.truncated
    assert "\ufffd" not in result.output
    assert result.output.startswith("☃" * 133)


# -- files ------------------------------------------------------------------------------------


def test_file_access_is_relative_to_the_shell_cwd(local_backend: LocalBackend, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    local_backend.run("cd sub")
    local_backend.write_bytes("made.txt", b"data")
    assert (workspace / "sub" / "made.txt").read_bytes() == b"data"
    assert local_backend.read_bytes("made.txt") == b"data"
    assert local_backend.read_bytes(str(workspace / "sub" / "made.txt")) == b"data"
    info = local_backend.stat("made.txt")
    assert info is not None
    assert (info.path, info.size, info.is_file, info.is_dir) == (str(workspace / "sub" / "made.txt"), 4, True, False)


def test_write_bytes_is_atomic_creates_parents_and_keeps_mode(local_backend: LocalBackend, workspace: Path) -> None:
    local_backend.write_bytes("a/b/c.bin", b"\x00\x01")
    assert (workspace / "a" / "b" / "c.bin").read_bytes() == b"\x00\x01"
    (workspace / "a" / "b" / "c.bin").chmod(0o741)
    local_backend.write_bytes("a/b/c.bin", b"new")
    assert stat.S_IMODE((workspace / "a" / "b" / "c.bin").stat().st_mode) == 0o741
    assert os.listdir(workspace / "a" / "b") == ["c.bin"]


def test_stat_and_list_dir(local_backend: LocalBackend, workspace: Path) -> None:
    (workspace / "d").mkdir()
    (workspace / "f").write_text("x")
    (workspace / "l").symlink_to("f")
    (workspace / "dangling").symlink_to("nowhere")
    assert local_backend.stat("missing") is None
    assert local_backend.stat("f/under-a-file") is None
    assert local_backend.stat("dangling") is None
    info = local_backend.stat("d")
    assert info is not None and info.is_dir and not info.is_file
    entries = {e.name: (e.is_dir, e.is_file, e.is_symlink) for e in local_backend.list_dir(".")}
    assert entries == {
        "d": (True, False, False),
        "f": (False, True, False),
        "l": (False, True, True),
        "dangling": (False, False, True),
    }


def test_file_errors_are_standard_oserrors(local_backend: LocalBackend, workspace: Path) -> None:
    (workspace / "d").mkdir()
    (workspace / "f").write_text("x")
    with pytest.raises(FileNotFoundError):
        local_backend.read_bytes("missing")
    with pytest.raises(IsADirectoryError):
        local_backend.read_bytes("d")
    with pytest.raises(NotADirectoryError):
        local_backend.list_dir("f")
    with pytest.raises(FileNotFoundError):
        local_backend.list_dir("missing")


def test_home_paths_expand(local_backend: LocalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    local_backend.write_bytes("~/dot/file", b"x")
    assert (home / "dot" / "file").read_bytes() == b"x"
    assert local_backend.read_bytes("~/dot/file") == b"x"


# -- lifecycle --------------------------------------------------------------------------------


def test_missing_working_directory(tmp_path: Path, settings: Settings) -> None:
    with pytest.raises(NotADirectoryError, match="does not exist"):
        LocalBackend(str(tmp_path / "nope"), settings=settings)


def test_unstartable_shell_is_a_backend_error(make_backend: MakeBackend) -> None:
    backend = make_backend(**{"terminal.shell": "/no/such/bash"})
    with pytest.raises(BackendError, match="could not start the shell '/no/such/bash'"):
        backend.run("true")


def test_close_stops_the_shell_and_its_background_jobs(workspace: Path, settings: Settings) -> None:
    backend = LocalBackend(str(workspace), settings=settings)
    backend.run("sleep 1000 & echo $! > bg.pid; echo $$ > shell.pid")
    pids = [int((workspace / name).read_text()) for name in ("bg.pid", "shell.pid")]
    assert all(map(alive, pids))
    backend.close()
    backend.close()  # idempotent
    assert [pid for pid in pids if alive(pid)] == []
    with pytest.raises(BackendError, match="closed"):
        backend.run("true")
