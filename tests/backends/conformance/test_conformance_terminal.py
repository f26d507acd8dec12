"""Commands on every backend: the persistent session, exit codes, output, timeouts, the shell dying."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from herald.backends import Backend
from herald.backends.shell import foreground_only

from ._helpers import running, sh, wait_until_gone

# -- the persistent session -------------------------------------------------------------------


def test_cwd_persists_across_calls(backend: Backend, root: str) -> None:
    assert backend.run("mkdir -p sub/deeper && cd sub").exit_code == 0
    assert backend.run("pwd").output == f"{root}/sub"
    assert backend.cwd == f"{root}/sub"
    backend.run("cd deeper")
    assert backend.run("pwd").output == f"{root}/sub/deeper"


def test_variables_and_functions_persist(backend: Backend) -> None:
    backend.run("export GREETING='hello world'; PLAIN=just-here; greet() { echo \"hi $1\"; }")
    assert backend.run('echo "$GREETING|$PLAIN"').output == "hello world|just-here"
    assert backend.run("bash -c 'echo \"${GREETING-unset}|${PLAIN-unset}\"'").output == "hello world|unset"
    assert backend.run("greet there").output == "hi there"


def test_commands_run_at_the_top_level_of_the_shell(backend: Backend) -> None:
    """What follows each command is a function of the shell's; the command itself is not run
    inside it: `declare` makes globals that the next command sees, `local` is refused as in
    any top-level script, and the positional parameters are the shell's own (none)."""
    backend.run("declare -A colors=([sky]=blue); declare -i count=41; count+=1")
    assert backend.run('echo "${colors[sky]} $count"').output == "blue 42"
    refused = backend.run("local x=1")
    assert refused.exit_code != 0 and "can only be used in a function" in refused.output
    assert backend.run('echo "[$#|${1-none}]"').output == "[0|none]"


def test_exit_codes(backend: Backend) -> None:
    assert backend.run("true").exit_code == 0
    assert backend.run("false").exit_code == 1
    assert backend.run("(exit 7)").exit_code == 7
    assert backend.run("no-such-command-herald").exit_code == 127
    missing = backend.run("ls /no/such/dir")
    assert missing.exit_code == 2 and "No such file or directory" in missing.output


def test_stdout_and_stderr_are_merged_in_order(backend: Backend) -> None:
    assert backend.run("echo out1; echo err1 >&2; echo out2; echo err2 >&2").output == "out1\nerr1\nout2\nerr2"


def test_output_shape(backend: Backend) -> None:
    assert backend.run("printf 'no newline'").output == "no newline"
    assert backend.run("printf 'two\\n\\n'").output == "two\n"
    assert backend.run("true").output == ""
    result = backend.run("printf 12345")
    assert (result.output_bytes, result.truncated, result.timed_out, result.note) == (5, False, False, "")


def test_multiline_commands_and_heredocs(backend: Backend) -> None:
    result = backend.run("cat > notes.txt <<'EOF'\nline $1\n'quoted'\nEOF\nwc -l < notes.txt")
    assert result.output == "2"
    assert backend.read_bytes("notes.txt") == b"line $1\n'quoted'\n"
    assert backend.run("for i in 1 2 3; do\n  echo $i\ndone").output == "1\n2\n3"


@pytest.mark.parametrize("broken", ["echo 'unterminated", "echo $(", "echo ${HOME", "echo \\", "if true; then"])
def test_broken_syntax_does_not_break_the_session(backend: Backend, root: str, broken: str) -> None:
    backend.run("mkdir -p sub && cd sub && export KEPT=1")
    backend.run(broken, timeout=10)
    after = backend.run('echo "next $KEPT"; pwd', timeout=10)
    assert (after.output, after.exit_code, after.note) == (f"next 1\n{root}/sub", 0, "")


def test_a_command_run_again_runs_again_and_broken_text_stays_harmless(backend: Backend) -> None:
    # The second run of a command skips the parse check (it parsed in this shell already).
    for _ in range(3):
        counted = backend.run("echo x >> count.txt; wc -l < count.txt")
    assert (counted.output, counted.exit_code) == ("3", 0)
    backend.run("export KEPT=2")
    for _ in range(2):  # never cached: each time checked, reported, and run apart
        broken = backend.run("echo $(", timeout=10)
        assert broken.exit_code != 0 and "unexpected EOF" in broken.output
    assert backend.run('echo "next $KEPT"', timeout=10).output == "next 2"
    assert backend.run("exit 3").exit_code == 3  # a new shell: cached verdicts are gone with the old one
    assert backend.run("echo x >> count.txt; wc -l < count.txt").output == "4"


def test_commands_cannot_read_the_shell_input(backend: Backend) -> None:
    assert backend.run("cat; echo done", timeout=10).output == "done"
    assert backend.run('read -r line; echo "rc=$? line=$line"', timeout=10).output == "rc=1 line="
    assert backend.run("echo still-fine").output == "still-fine"


def test_unicode_output(backend: Backend) -> None:
    assert backend.run("echo 'héllo ☃ 😀 日本'").output == "héllo ☃ 😀 日本"
    assert backend.run("printf 'h\\303\\251'").output == "hé"


def test_binary_output_does_not_break_the_shell(backend: Backend, root: str) -> None:
    backend.write_bytes("blob", bytes(range(256)) * 400)
    result = backend.run("cat blob")
    assert (result.exit_code, result.output_bytes) == (0, 256 * 400)
    assert "\x00" in result.output and "\ufffd" in result.output
    assert backend.run("echo alive; pwd").output == f"alive\n{root}"


def test_workdir_runs_one_command_elsewhere(backend: Backend, root: str) -> None:
    sh(backend, "mkdir elsewhere")
    result = backend.run("pwd; cd /; export MOVED=1", workdir="elsewhere")
    assert result.output == f"{root}/elsewhere"
    assert backend.cwd == root
    assert backend.run('pwd; echo "${MOVED-unset}"').output == f"{root}\nunset"


def test_concurrent_calls_are_serialised(backend: Backend) -> None:
    results: dict[int, str] = {}

    def worker(n: int) -> None:
        results[n] = backend.run(f"sleep 0.05; echo worker-{n}").output

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == {n: f"worker-{n}" for n in range(4)}


# -- large output -----------------------------------------------------------------------------


def test_large_output_is_capped_with_head_tail_and_spill_file(backend: Backend) -> None:
    result = backend.run("seq 1 400000")  # about 2.7 MB, over the 1 MB default cap
    full = "".join(f"{i}\n" for i in range(1, 400001))
    assert (result.exit_code, result.truncated, result.output_bytes) == (0, True, len(full))
    head, rest = result.output.split("\n[... ", 1)
    marker, tail = rest.split(" ...]\n", 1)
    assert full.startswith(head) and full.endswith(tail) and tail.endswith("399999\n400000\n")
    assert 999_000 < len(result.output) < 1_001_000
    spill = Path(marker.rsplit("full command output in ", 1)[1])
    assert spill.read_text() == full
    assert backend.run("echo small").output == "small"


# -- timeouts ---------------------------------------------------------------------------------


def test_timeout_returns_124_and_keeps_partial_output(backend: Backend) -> None:
    started = time.monotonic()
    result = backend.run("echo before; sleep 1000", timeout=1.0)
    assert (result.exit_code, result.timed_out, result.output) == (124, True, "before")
    assert "timed out after 1 s" in result.note
    # Not before the timeout; the upper bound is generous (a loaded machine): not the 1000 s.
    assert 1.0 <= time.monotonic() - started < 60


def test_session_survives_a_timeout(backend: Backend, root: str) -> None:
    backend.run("mkdir -p sub && cd sub && export KEEP=yes")
    assert backend.run("sleep 30", timeout=0.5).timed_out
    assert backend.cwd == f"{root}/sub"
    after = backend.run('pwd; echo "$KEEP"')
    assert (after.output, after.exit_code, after.timed_out) == (f"{root}/sub\nyes", 0, False)


def test_rest_of_a_command_list_does_not_run_after_timeout(backend: Backend) -> None:
    # The first command waits for a file the test makes only after the timeout, so the timeout
    # always comes first, however slow the machine.
    result = backend.run("while [ ! -e go ]; do sleep 0.05; done; touch marker", timeout=0.5)
    assert result.timed_out
    backend.write_bytes("go", b"")
    time.sleep(1.0)  # room for `touch` to run if the list went on (it cannot make a pass fail)
    assert backend.stat("marker") is None


def test_timeout_kills_the_command_and_everything_it_started(backend: Backend) -> None:
    tag = f"herald-{uuid.uuid4().hex[:8]}"
    command = (
        # a direct child, a grandchild, and one in a session of its own (out of the process group)
        f"sh -c 'echo $$ > child.pid; exec sleep 1000' {tag} & "
        f"sh -c 'sleep 1000 & echo $! > grandchild.pid; wait' {tag} & "
        f"setsid -w sh -c 'echo $$ > session.pid; exec sleep 1000' {tag} & "
        "sleep 1000"
    )
    assert backend.run(command, timeout=1.5).timed_out
    pids = [int(backend.read_bytes(name)) for name in ("child.pid", "grandchild.pid", "session.pid")]
    assert wait_until_gone(backend, pids) == []


# -- the shell going away ---------------------------------------------------------------------


def test_exit_ends_the_shell_but_not_the_session(backend: Backend, root: str) -> None:
    backend.run("mkdir -p sub && cd sub && export KEEP=yes")
    result = backend.run("exit 3")
    assert result.exit_code == 3
    assert "The shell exited during this command" in result.note
    after = backend.run('pwd; echo "$KEEP"')
    assert (after.output, after.exit_code) == (f"{root}/sub\nyes", 0)


def test_shell_killed_from_inside(backend: Backend, root: str) -> None:
    result = backend.run("kill -9 $$")
    assert result.exit_code == -1 and "The shell exited" in result.note
    assert backend.run("pwd").output == root


# -- background jobs ----------------------------------------------------------------------------


def test_a_scripts_background_jobs_end_with_its_command(backend: Backend) -> None:
    """`cmd &` from a script (foreground_only, as the dispatcher sets it for script calls) lived
    until the shell ended; a direct call's job lives on with the session."""
    with foreground_only():
        out = backend.run("sleep 301 & echo $!; sleep 302 & disown; echo $!").output.split()
    from_script = [int(pid) for pid in out]
    assert wait_until_gone(backend, from_script) == []
    direct = int(backend.run("sleep 303 & echo $!").output)
    assert backend.run("echo next").output == "next"  # no "Killed" notice in later output
    assert running(backend, [direct]) == [direct]
    sh(backend, f"kill {direct}")


@pytest.mark.parametrize("swap", ["mkfifo", "mkdir"])
def test_something_else_in_place_of_the_command_file_is_cleared(backend: Backend, swap: str) -> None:
    """The command file sits in the shell's private directory, where a command can reach it
    ($BASH_SOURCE names it). A FIFO left in its place would block every later command's write
    of it (a directory fail it): the session clears it and goes on."""
    swapped = backend.run(f'f="$BASH_SOURCE"; rm -f "$f" && {swap} "$f" && echo swapped')
    assert swapped.output == "swapped", swapped
    results: list[object] = []
    call = threading.Thread(target=lambda: results.append(backend.run("echo after", timeout=60)), daemon=True)
    call.start()
    call.join(120)  # a generous bound on a hang, not a timing verdict
    assert not call.is_alive(), "the session hung on what was left in place of its command file"
    assert getattr(results[0], "output", None) == "after", results[0]
    assert backend.run("echo again").output == "again"
