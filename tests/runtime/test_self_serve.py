"""Host mode on the local backend: a script's read_file is answered in the script's own process
(herald/_sandbox/child/selfserve.py), with the answer, the count and the transcript record Herald's
own read_file gives; everything it cannot answer as Herald would goes to Herald."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime
from herald.transcript import read_transcript

from ._backend_mode import CALL_SCRIPT
from ._helpers import run_ok, script

RuntimeFactory = Callable[..., Runtime]


def _records(runtime: Runtime) -> list[dict[str, Any]]:
    assert runtime.transcript is not None
    runtime.transcript.flush()
    return [r for r in read_transcript(runtime.transcript.path) if r.get("type") == "sandbox_tool_call"]


def _in_script(runtime: Runtime) -> list[bool]:
    return [bool(r.get("in_script")) for r in _records(runtime)]


def _call(runtime: Runtime, name: str, **args: Any) -> dict[str, Any]:
    """One call from a script, exactly as given: {"result": ...} or {"error": {"type", "message"}}."""
    result = runtime.execute(CALL_SCRIPT.format(name=name, args=json.dumps(args)), timeout=60)
    assert result.status == "success", result
    reply: dict[str, Any] = json.loads(result.output)
    return reply


@pytest.fixture
def files(workspace: Path) -> Path:
    (workspace / "small.txt").write_text("".join(f"line {i}\n" for i in range(30)))
    (workspace / "sub").mkdir()
    (workspace / "sub" / "inner.txt").write_text("inside sub\n")
    (workspace / "bin").write_bytes(b"a\0b")
    return workspace


def test_a_script_s_read_file_is_answered_in_its_process_as_herald_answers_it(
    make_runtime: RuntimeFactory, files: Path
) -> None:
    calls: list[dict[str, Any]] = [
        {"path": "small.txt"},
        {"path": "small.txt", "offset": 5, "limit": 3},
        {"path": str(files / "sub" / "inner.txt")},
        {"path": "sub/../small.txt", "limit": 1},
    ]
    herald = make_runtime(transcript=True, overrides={"sandbox.backend_tools": False})
    itself = make_runtime(transcript=True)
    for args in calls:
        assert _call(itself, "read_file", **args) == _call(herald, "read_file", **args)
    assert _in_script(herald) == [False] * len(calls)
    assert _in_script(itself) == [True] * len(calls)
    record = _records(itself)[1]
    assert record["args"] == {"path": "small.txt", "offset": 5, "limit": 3}
    assert record["reply_bytes"] == len(json.dumps({"id": 1, "result": _call(herald, "read_file", path="small.txt",
                                                                              offset=5, limit=3)["result"]},
                                                   separators=(",", ":"), ensure_ascii=False).encode())


def test_every_error_is_herald_s_in_its_own_words(make_runtime: RuntimeFactory, files: Path) -> None:
    calls: list[dict[str, Any]] = [
        {"path": "smal.txt"},  # missing: Herald's "did you mean"
        {"path": "sub"},  # a directory
        {"path": "bin"},  # binary
        {"path": "small.txt", "offset": 99},  # past the end
        {"path": "small.txt", "offset": 0},  # a bad argument
        {"path": "small.txt", "colour": "red"},  # an unknown one
        {"path": ""},
    ]
    herald = make_runtime(transcript=True, overrides={"sandbox.backend_tools": False})
    itself = make_runtime(transcript=True)
    for args in calls:
        got = _call(itself, "read_file", **args)
        assert "error" in got, got
        assert got == _call(herald, "read_file", **args)
    assert _in_script(itself) == [False] * len(calls)
    assert "small.txt" in _call(itself, "read_file", path="smal.txt")["error"]["message"]


def test_paths_outside_what_the_script_sees_as_herald_go_to_herald(
    make_runtime: RuntimeFactory, files: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not in the workspace\n")
    (files / "link.txt").symlink_to(outside)
    confined = make_runtime(transcript=True)
    for path in (str(outside), "link.txt", "~/.bashrc"):
        reply = _call(confined, "read_file", path=path)
        assert reply.get("error", {}).get("type") == "PolicyRefused", reply
    full = make_runtime(transcript=True, overrides={"policy.profile": "full"})
    assert _call(full, "read_file", path="link.txt")["result"]["content"] == "     1|not in the workspace"
    assert _call(full, "read_file", path=str(files / "small.txt"), limit=1)["result"]["total_lines"] == 30
    assert _in_script(confined) == [False, False, False]
    # Under bwrap the script sees only its binds as Herald does (its /tmp is its own): a link
    # that leads out of the workspace is read by Herald; without isolation the script sees all.
    expected = full.isolation.mode != "bwrap"
    assert _in_script(full) == [expected, True]


def test_a_masked_file_inside_the_workspace_is_refused_by_herald(make_runtime: RuntimeFactory, workspace: Path) -> None:
    """Herald's data directory inside the workspace is masked from the script (isolation.py) and
    from file tools alike (policy/paths.py): the script's side does not answer (what it sees there
    is its own), and Herald refuses in its words."""
    data = workspace / ".herald"
    runtime = make_runtime(transcript=True, overrides={"data_dir": str(data)})
    if runtime.isolation.mode != "bwrap":
        pytest.skip(f"the data directory is masked under bwrap only; isolation here: {runtime.isolation.describe}")
    note = data / "note.txt"
    note.write_text("herald's own\n")
    result = run_ok(runtime, f"""
        from hermes_tools import read_file
        try:
            with open({str(note)!r}, "w") as fh:  # into the mask, where it may write
                fh.write("the script's own\\n")
        except OSError:
            pass
        try:
            print(read_file({str(note)!r})["content"])
        except Exception as exc:
            print(exc)
    """)
    assert "Herald's own data" in result.output and "own\n" not in result.output, result.output
    assert _in_script(runtime) == [False]


def test_a_cd_in_the_session_moves_the_script_s_own_reads(make_runtime: RuntimeFactory, files: Path) -> None:
    runtime = make_runtime(transcript=True)
    result = run_ok(runtime, """
        from hermes_tools import read_file, terminal
        terminal('cd sub')
        print(read_file('inner.txt')['content'])
        terminal('cd ..')
        print(read_file('small.txt', limit=1)['content'])
    """)
    assert result.output.split() == ["1|inside", "sub", "1|line", "0"]
    assert [r["tool"] for r in _records(runtime) if r.get("in_script")] == ["read_file", "read_file"]


def test_the_call_budget_counts_self_answers_exactly(make_runtime: RuntimeFactory, files: Path) -> None:
    runtime = make_runtime(transcript=True)
    result = run_ok(runtime, """
        import json
        from hermes_tools import read_file, parallel, ToolError
        def one():
            try:
                read_file('small.txt', limit=1)
                return 'ok'
            except ToolError as exc:
                return exc.error_type
        print(json.dumps(parallel([one] * 12) + [one() for _ in range(3)]))
    """, max_tool_calls=7)
    outcomes = json.loads(result.output)
    assert outcomes.count("ok") == 7
    assert outcomes.count("ToolCallLimit") == 8
    assert result.tool_calls_made == 7
    assert "8 tool call(s) were refused" in result.error


def test_after_a_fork_herald_answers_both_processes(make_runtime: RuntimeFactory, files: Path) -> None:
    runtime = make_runtime(transcript=True)
    run_ok(runtime, """
        import os
        from hermes_tools import read_file
        read_file('small.txt', limit=1)
        pid = os.fork()
        if pid == 0:
            read_file('small.txt', limit=1)
            os._exit(0)
        os.waitpid(pid, 0)
        read_file('small.txt', limit=1)
    """)
    assert sorted(_in_script(runtime)) == [False, False, True]  # two streams of records: any order


def test_a_killed_script_s_answers_are_all_in_the_transcript(make_runtime: RuntimeFactory, files: Path) -> None:
    runtime = make_runtime(transcript=True)
    result = runtime.execute(script("""
        import sys, time
        from hermes_tools import read_file
        for _ in range(300):
            read_file('small.txt', limit=1)
        print('read', flush=True)
        time.sleep(600)
    """), timeout=5, max_tool_calls=1000)
    assert result.status == "timeout" and "read" in result.output
    assert _in_script(runtime) == [True] * 300
    assert result.tool_calls_made == 300


def test_kernel_cells_answer_their_own_reads(make_runtime: RuntimeFactory, files: Path) -> None:
    runtime = make_runtime(transcript=True)
    for _ in range(2):
        result = runtime.execute(
            "from hermes_tools import read_file\nprint(read_file('small.txt', limit=1)['content'])",
            session="k",
            max_tool_calls=1,
        )
        assert result.output.strip() == "1|line 0" and result.tool_calls_made == 1
    assert _in_script(runtime) == [True, True]


def test_off_when_backend_tools_are_off_or_a_byte_budget_is_kept(make_runtime: RuntimeFactory, files: Path) -> None:
    off = make_runtime(transcript=True, overrides={"sandbox.backend_tools": False})
    budgeted = make_runtime(transcript=True)
    run_ok(off, "from hermes_tools import read_file\nread_file('small.txt')")
    run_ok(budgeted, "from hermes_tools import read_file\nread_file('small.txt')", budgets={"reply_bytes": 100_000})
    assert _in_script(off) == [False]
    assert _in_script(budgeted) == [False]


def test_a_script_s_forged_records_only_use_up_its_own_budget(make_runtime: RuntimeFactory, files: Path) -> None:
    """The script can write on its control pipe: records it makes up count against its run
    (malformed ones, records of tools it was not granted and records past its budget are
    dropped); they never give it a call its budget does not have, and calls it cannot answer
    itself then find Herald's count full."""
    runtime = make_runtime(transcript=True)
    result = run_ok(
        runtime,
        """
        import json, os, stat, struct
        from hermes_tools import read_file, ToolError
        def frame(message):
            body = json.dumps(message).encode()
            return struct.pack('>I', len(body)) + body
        forged = frame({'type': 'record', 'tool': 'read_file', 'args': {'path': 'x'},
                        'duration_ms': 1, 'reply_bytes': 1})
        junk = frame({'type': 'record', 'tool': 'web_search', 'args': {}, 'duration_ms': 1, 'reply_bytes': 1})
        for fd in map(int, os.listdir('/proc/self/fd')):
            try:
                if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
                    os.write(fd, junk + frame({'type': 'record'}) + forged * 500)
            except OSError:
                pass
        def one(path):
            try:
                read_file(path, limit=1)
                return 'ok'
            except ToolError as exc:
                return exc.error_type
        print(one('missing.txt'), one('small.txt'), one('small.txt'), one('small.txt'))
    """,
        max_tool_calls=3,
    )
    missing, *reads = result.output.split()
    # Its own count lets two more reads through, whatever it forged; the missing file goes to
    # Herald, which refuses it once the forged records are in (or, read before them, says it is
    # missing: the pipe and the call race, and either is right).
    assert reads == ["ok", "ok", "ToolCallLimit"]
    assert missing in ("ToolCallLimit", "FileNotFound")
    # Records past the budget were dropped: the run shows its budget's worth of calls, no more,
    # and a script that forges records only spoils its own run's record.
    assert result.tool_calls_made == 3
    records = _records(runtime)
    assert len([r for r in records if r.get("in_script")]) + (missing == "FileNotFound") == 3
    assert {r["args"].get("path") for r in records if r.get("in_script")} <= {"x", "small.txt"}


def test_a_file_only_herald_can_read_is_read_by_herald(make_runtime: RuntimeFactory, files: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: a file the sandboxed script cannot open but Herald (root) can")
    private = files / "private.txt"
    private.write_text("root only\n")
    os.chown(private, 65534, 65534)
    private.chmod(0o000)
    runtime = make_runtime(transcript=True)
    if runtime.isolation.mode != "bwrap":
        pytest.skip(
            f"the script is root with its capabilities outside bwrap; isolation here: {runtime.isolation.describe}"
        )
    assert _call(runtime, "read_file", path="private.txt")["result"]["content"] == "     1|root only"
    assert _in_script(runtime) == [False]


def test_live_events_keep_the_order_of_calls_and_output(make_runtime: RuntimeFactory, files: Path) -> None:
    """A record of an answer is written before anything the script prints after the call: a
    live view sees the call first (the collect loop reads the control pipe before the output)."""
    runtime = make_runtime()
    events: list[str] = []
    runtime.dispatcher.on_script_call = lambda name, ok: events.append(name)
    result = runtime.execute(
        script("""
        from hermes_tools import read_file
        for i in range(20):
            read_file('small.txt', limit=1)
            print(i, flush=True)
    """),
        timeout=60,
        on_output=lambda stream, data: events.extend(f"out {line}" for line in data.decode().splitlines()),
    )
    assert result.status == "success"
    assert sorted(events) == sorted(["read_file"] * 20 + [f"out {i}" for i in range(20)])
    for i in range(20):  # (several may come in one read: then the calls come first, as they happened first)
        assert events[:events.index(f"out {i}")].count("read_file") >= i + 1, events
