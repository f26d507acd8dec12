"""Backend mode runs read_file, write_file and patch inside the backend's supervisor, next to the
script: the same answers as Herald's own tools, byte for byte, with the allow-list, argument
checks and call budget kept there, the calls recorded in Herald's transcript, and everything
else (a missing file's suggestions, web, browser) still served by Herald; terminal and
search_files there too (search_files: tests/backends/conformance/test_conformance_search_in_backend.py)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from herald import Runtime, Settings
from herald._sandbox.beside.localtools import LocalTools
from herald._sandbox.child.zygote_inbackend import LISTEN_FLAG
from herald._sandbox.wire.frames import CallFrame, RecordFrame
from herald.backends.base import Backend, Channel, CommandResult
from herald.backends.local import LocalBackend
from herald.runtime.backend_tools import BackendTools
from herald.runtime.tokens import RunToken
from herald.tools import ToolError
from tests.tools.conftest import caller

from ._backend_mode import (
    backend_runtime,
    backend_sandbox,
    exec_backend,
    in_backend_settings,
    script_call_records,
    script_caller,
    unique_name,
)
from ._helpers import run_ok, wait_for

__all__ = ["backend_runtime", "exec_backend"]  # fixtures, used by name

RuntimeFactory = Callable[..., Runtime]

# Calls whose answers (results and errors alike) must not depend on where the tool ran.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("write_file", {"path": "{d}/a.py", "content": "def f():\n    if x:\n        return 1\n"}),
    ("write_file", {"path": "{d}/a.py", "content": "def f():\n    if x:\n        return 1\n# ünï ☃\n"}),
    ("read_file", {"path": "{d}/a.py"}),
    ("read_file", {"path": "{d}/a.py", "offset": 2, "limit": 1}),
    ("read_file", {"path": "{d}/a.py", "offset": 9}),
    ("patch", {"path": "{d}/a.py", "old_string": "if x:\n    return 1", "new_string": "if y:\n    return 2"}),
    ("patch", {"path": "{d}/a.py", "old_string": "nowhere", "new_string": "x"}),
    ("patch", {"path": "{d}/a.py", "old_string": "", "new_string": "x"}),
    ("write_file", {"path": "{d}/crlf.txt", "content": "one\r\ntwo\r\ntwo\r\n"}),
    ("patch", {"path": "{d}/crlf.txt", "old_string": "two\n", "new_string": "2\n"}),
    ("patch", {"path": "{d}/crlf.txt", "old_string": "two\n", "new_string": "2\n", "replace_all": True}),
    ("read_file", {"path": "{d}/crlf.txt"}),
    ("write_file", {"path": "{d}/long.txt", "content": "x" * 5000 + "\n" + "y\n" * 40}),
    ("read_file", {"path": "{d}/long.txt", "limit": 10}),
    ("write_file", {"path": "{d}/bin", "content": "a\x00b"}),
    ("read_file", {"path": "{d}/bin"}),
    ("read_file", {"path": "{d}"}),
    ("read_file", {"path": "{d}/a.pyy"}),  # missing: Herald adds the suggestions
    ("read_file", {"path": ""}),
    ("read_file", {"path": "{d}/a.py", "offset": 0}),
    ("read_file", {"path": "{d}/a.py", "colour": "red"}),
    ("write_file", {"path": "{d}/a.py/under", "content": "x"}),
    ("write_file", {"path": "{d}/deep/er/new.txt", "content": "made\n"}),
    ("read_file", {"path": "{d}/deep/er/new.txt"}),
    # terminal: in the supervisor's shell, the same answers as Herald's persistent shell
    ("terminal", {"command": "echo hi; echo err >&2; printf 'ünï\\n\\n'"}),
    ("terminal", {"command": "false"}),
    ("terminal", {"command": "echo 'unterminated"}),
    ("terminal", {"command": "   "}),
    ("terminal", {"command": "echo x", "colour": "red"}),
    ("terminal", {"command": "pwd", "workdir": "{d}/deep"}),
    ("terminal", {"command": "cd {d}/deep && export HERALD_T=1"}),
    ("terminal", {"command": "echo ${HERALD_T:-unset}; basename $PWD"}),
    ("terminal", {"command": "sleep 5", "timeout": 0.3}),
    ("terminal", {"command": "exit 3"}),
    ("terminal", {"command": "cd {d} && export HERALD_T=2"}),
    ("terminal", {"command": "echo $HERALD_T; basename $PWD"}),
    ("read_file", {"path": "a.py", "limit": 1}),  # relative to where terminal moved the session
    ("terminal", {"command": "cd .."}),
]


def _answers(call: Callable[..., Any], directory: str) -> list[Any]:
    answers = []
    for name, args in CALLS:
        filled = {k: v.replace("{d}", directory) if isinstance(v, str) else v for k, v in args.items()}
        try:
            answers.append({"result": call(name, **filled)})
        except ToolError as exc:
            answers.append({"error": [exc.error_type, str(exc)]})
    return answers


def test_answers_match_herald_tools_byte_for_byte(
    exec_backend: Backend, backend_runtime: RuntimeFactory, settings: Settings
) -> None:
    directory, start = unique_name(), exec_backend.cwd
    direct = _answers(caller(exec_backend, settings), directory)
    # The same calls again, from nothing, in the same place (the session's shell too).
    exec_backend.run(f"unset HERALD_T; cd {start} && rm -rf {directory}")
    runtime = backend_runtime(overrides={"sandbox.max_stdout_bytes": 20_000_000})
    in_backend = _answers(script_caller(runtime), directory)
    for (name, args), got, want in zip(CALLS, in_backend, direct, strict=True):
        assert json.dumps(got, ensure_ascii=False) == json.dumps(want, ensure_ascii=False), (name, args)
    exec_backend.run(f"rm -rf {directory}")


def test_file_calls_run_in_the_backend_and_are_recorded(
    exec_backend: Backend, backend_runtime: RuntimeFactory, tmp_path: Path
) -> None:
    transcript = tmp_path / "t.jsonl"
    runtime = backend_runtime(transcript=transcript)
    name = unique_name()
    result = run_ok(
        runtime,
        f"""
        from hermes_tools import read_file, write_file, patch, terminal
        write_file("{name}.txt", "one\\n" + "x" * 1000)
        patch("{name}.txt", "one", "two")
        print(read_file("{name}.txt")["content"].splitlines()[0])
        print(terminal("head -c 3 {name}.txt")["output"])
        """,
    )
    assert result.output.splitlines() == ["     1|two", "two"]
    assert result.tool_calls_made == 4
    assert runtime.transcript is not None
    runtime.transcript.flush()
    records = script_call_records(transcript)
    assert [(r["tool"], r.get("in_backend", False)) for r in records] == [
        ("write_file", True), ("patch", True), ("read_file", True), ("terminal", True)
    ]
    # The arguments are previewed as Herald previews them (long strings cut).
    assert records[0]["args"]["content"].endswith("… (1,004 chars)")
    exec_backend.run(f"rm -f {name}.txt")


def test_switched_off_every_call_comes_back_to_herald(backend_runtime: RuntimeFactory, tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    runtime = backend_runtime(transcript=transcript, overrides={"sandbox.backend_tools": False})
    name = unique_name()
    run_ok(runtime, f'from hermes_tools import write_file\nwrite_file("{name}.txt", "x")')
    assert runtime.transcript is not None
    runtime.transcript.flush()
    assert [r.get("in_backend", False) for r in script_call_records(transcript)] == [False]


def test_the_call_budget_holds_across_local_and_relayed_calls(backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime()
    name = unique_name()
    result = run_ok(
        runtime,
        f"""
        from hermes_tools import parallel, read_file, terminal, write_file, ToolError
        write_file("{name}.txt", "x\\n")
        def one(i):
            try:
                (read_file("{name}.txt") if i % 2 else terminal("true"))
                return "ok"
            except ToolError as exc:
                return exc.error_type
        print(sorted(parallel([(one, i) for i in range(12)])))
        """,
        max_tool_calls=6,
    )
    outcomes = eval(result.output)  # a printed list of strings
    assert outcomes.count("ok") == 5 and outcomes.count("ToolCallLimit") == 7
    assert result.tool_calls_made == 6


def test_budget_and_grant_are_per_kernel_cell(backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime()
    name = unique_name()
    code = f"""
from hermes_tools import read_file, write_file, ToolError
write_file("{name}.txt", "x\\n")
made = 0
for _ in range(5):
    try:
        read_file("{name}.txt"); made += 1
    except ToolError as exc:
        print(exc.error_type)
print(made)
"""
    for _ in range(2):
        result = runtime.execute(code, session="k", max_tool_calls=3)
        assert result.status == "success", result.error
        assert result.output.split() == ["ToolCallLimit"] * 3 + ["2"]
        assert result.tool_calls_made == 3


def test_tools_outside_the_allow_list_are_refused_by_herald(backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime(tools=["read_file"])
    result = run_ok(
        runtime,
        """
        from _hermes_runtime.child.client import call
        from hermes_tools import ToolError
        try:
            call("write_file", {"path": "x", "content": "y"})
        except ToolError as exc:
            print(exc.error_type)
        """,
    )
    assert result.output.strip() == "ToolNotAvailable"
    assert result.tool_calls_made == 0


@pytest.mark.parametrize("target", ["fifo", "/dev/zero"])
def test_hostile_reads_are_refused_in_the_backend(
    exec_backend: Backend, backend_runtime: RuntimeFactory, target: str
) -> None:
    name = unique_name()
    if target == "fifo":
        assert exec_backend.run(f"mkfifo {name}").exit_code == 0
        target = name
    # The full profile: the default one refuses /dev/zero (outside the workspace) before the tool's own check.
    result = run_ok(
        backend_runtime(policy="full"),
        f"""
        from hermes_tools import read_file, patch, ToolError
        for call in (lambda: read_file("{target}"), lambda: patch("{target}", "a", "b")):
            try:
                call()
            except ToolError as exc:
                print(exc.error_type)
        """,
        timeout=60,
    )
    assert result.output.split() == ["NotRegularFile", "NotRegularFile"]
    exec_backend.run(f"rm -f {name}")


class CountingBackend:
    """A real backend, with its commands and file writes counted (a wrapper, not a patch)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.runs = 0
        self.writes = 0
        self.channels: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    @property
    def cwd(self) -> str:
        return self._backend.cwd

    def run(self, command: str, **kwargs: Any) -> CommandResult:
        self.runs += 1
        return self._backend.run(command, **kwargs)

    def write_bytes(self, path: str, data: bytes) -> None:
        self.writes += 1
        self._backend.write_bytes(path, data)

    def open_channel(self, argv: list[str], **kwargs: Any) -> Channel:
        self.channels.append(argv)
        return self._backend.open_channel(argv, **kwargs)


def test_setup_is_one_channel_that_then_serves_the_first_run(exec_backend: Backend, settings: Settings) -> None:
    counted = CountingBackend(exec_backend)
    # (no successor and no fork server: their channels open in the background, whenever; no
    # checkpoints: the snapshot engine is a channel of its own, tests/checkpoints/)
    alone = in_backend_settings(settings).with_overrides({"sandbox.warm": False, "sandbox.fork_server": False,
                                                          "checkpoints.enabled": False})
    with Runtime(counted, settings=alone, exec_mode="backend", transcript=False) as runtime:
        assert run_ok(runtime, "print(1)").output == "1\n"
        assert len(counted.channels) == 1 and "herald-setup" in counted.channels[0]  # the run had none of its own
        remote_dir = backend_sandbox(runtime).remote_dir
        assert remote_dir is not None
    assert counted.writes == 0
    if exec_backend.name == "local":  # the directory is on this machine: removed from here
        assert len(counted.channels) == 1
    else:  # one more channel, to remove the directory
        assert len(counted.channels) == 2 and counted.channels[1][0] == "rm"
    assert exec_backend.run(f"test -e {remote_dir}").exit_code != 0, "the directory outlived the close"


def test_a_closing_runtime_s_waiting_supervisor_takes_the_directory_along(exec_backend: Backend,
                                                                           settings: Settings) -> None:
    """At close, the supervisor waiting for the next run removes the directory as it leaves:
    no process is started there only for that (over Docker an exec, ~0.1 s of the close)."""
    counted = CountingBackend(exec_backend)
    warm = in_backend_settings(settings).with_overrides({"sandbox.warm": True, "sandbox.fork_server": False})
    with Runtime(counted, settings=warm, exec_mode="backend", transcript=False) as runtime:
        assert run_ok(runtime, "print(1)").output == "1\n"
        runtime.wait_warm()  # the successor's supervisor is up and waiting
        remote_dir = backend_sandbox(runtime).remote_dir
        assert remote_dir is not None
        opened = len(counted.channels)
    # On this machine the directory is removed from here; elsewhere the supervisor took it along.
    assert counted.channels[opened:] == [], f"the close started {counted.channels[opened:]}"
    assert exec_backend.run(f"test -e {remote_dir}").exit_code != 0, "the directory outlived the close"


def test_the_directory_goes_even_when_the_waiting_supervisor_died(exec_backend: Backend, settings: Settings) -> None:
    """Nobody left there to take the directory along: it is removed from Herald's side."""
    if exec_backend.name == "local":
        pytest.skip("on this machine the directory is always removed from here")
    counted = CountingBackend(exec_backend)
    warm = in_backend_settings(settings).with_overrides({"sandbox.warm": True, "sandbox.fork_server": False})
    with Runtime(counted, settings=warm, exec_mode="backend", transcript=False) as runtime:
        assert run_ok(runtime, "print(1)").output == "1\n"
        runtime.wait_warm()
        remote_dir = backend_sandbox(runtime).remote_dir
        assert remote_dir is not None
        # Every process whose command line names the directory: the waiting supervisor (by a
        # /proc walk: the test image has no pkill).
        killer = ("import os, sys\nfor pid in filter(str.isdigit, os.listdir('/proc')):\n"
                  "    try:\n        line = open('/proc/%s/cmdline' % pid, 'rb').read()\n"
                  "        if sys.argv[1].encode() in line and int(pid) != os.getpid(): os.kill(int(pid), 9)\n"
                  "    except OSError: pass")
        assert exec_backend.run(f"python3 -c {shlex.quote(killer)} {remote_dir}").exit_code == 0
        opened = len(counted.channels)
    assert [argv[0] for argv in counted.channels[opened:]] == ["rm"]
    assert exec_backend.run(f"test -e {remote_dir}").exit_code != 0, "the directory outlived the close"


def test_the_fork_server_starts_only_for_a_third_child(exec_backend: Backend, settings: Settings) -> None:
    """Beside the first children it would compete for the backend's CPU with their start, and a
    Runtime that runs a script or two, then closes, would never use it."""
    counted = CountingBackend(exec_backend)
    forked = in_backend_settings(settings).with_overrides({"sandbox.warm": False, "sandbox.fork_server": True})

    def zygotes() -> int:
        return sum(LISTEN_FLAG in argv for argv in counted.channels)

    with Runtime(counted, settings=forked, exec_mode="backend") as runtime:
        for number in (1, 2):
            assert run_ok(runtime, f"print({number})").output == f"{number}\n"
            assert zygotes() == 0
        assert run_ok(runtime, "print(3)").output == "3\n"
        assert wait_for(lambda: zygotes() == 1), counted.channels  # started with the third child's spawn


def test_later_runtimes_start_the_python_the_name_found(
    workspace: Path, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sandbox.remote_python looked up on PATH (a launcher such as a pyenv shim costs ~0.1 s a
    start): the next Runtime on the backend starts what it found; if that is gone, the name is
    looked up again and the run goes on."""
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    for where in (first_dir, second_dir):
        where.mkdir()
    (first_dir / "herald-test-python").symlink_to(os.path.realpath(sys.executable))
    monkeypatch.setenv("PATH", f"{first_dir}:{second_dir}:{os.environ['PATH']}")
    named = in_backend_settings(settings).with_overrides(
        {"sandbox.remote_python": "herald-test-python", "sandbox.warm": False, "sandbox.fork_server": False})

    def setup_python(backend: CountingBackend) -> str:
        with Runtime(backend, settings=named, exec_mode="backend") as runtime:
            assert run_ok(runtime, "print(1)").output == "1\n"
        setup = next(argv for argv in reversed(backend.channels) if "herald-setup" in argv)
        return setup[setup.index("herald-setup") + 1]

    with LocalBackend(str(workspace), settings=named) as local:
        backend = CountingBackend(local)
        assert setup_python(backend) == "herald-test-python"
        assert setup_python(backend) == str(first_dir / "herald-test-python")
        (first_dir / "herald-test-python").rename(second_dir / "herald-test-python")
        assert setup_python(backend) == "herald-test-python"  # (after the one it had was not found)
        assert setup_python(backend) == str(second_dir / "herald-test-python")
        assert setup_python(CountingBackend(local)) == "herald-test-python"  # another backend: its own lookup


def test_paths_follow_the_session_directory_across_cells_and_calls(
    exec_backend: Backend, backend_runtime: RuntimeFactory
) -> None:
    runtime = backend_runtime()
    name = unique_name()
    exec_backend.run(f"mkdir -p {name}/a/b")
    home = exec_backend.cwd
    write = 'from hermes_tools import write_file\nprint(write_file("f.txt", "x")["path"])'
    assert runtime.execute(write, session="k").output == "f.txt\n"
    runtime.dispatcher.call_direct("terminal", {"command": f"cd {name}/a"})  # between cells: the next grant says so
    assert runtime.execute(write, session="k").output == "f.txt\n"
    # Within one run: a terminal cd (served by Herald) moves the supervisor's directory too.
    moved = run_ok(
        runtime,
        'from hermes_tools import terminal, write_file\nterminal("cd b")\nprint(write_file("f.txt", "y")["path"])',
    )
    assert moved.output == "f.txt\n"
    for where, content in ((home, b"x"), (f"{home}/{name}/a", b"x"), (f"{home}/{name}/a/b", b"y")):
        assert exec_backend.read_bytes(f"{where}/f.txt") == content
    runtime.dispatcher.call_direct("terminal", {"command": f"cd {home} && rm -rf {name} f.txt"})


def test_malformed_records_are_ignored(backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime(overrides={"sandbox.warm": False})
    tools = BackendTools(runtime.dispatcher)
    assert tools.names == ["patch", "read_file", "search_files", "terminal", "write_file"]
    scope = runtime.dispatcher.new_scope(5)
    grant = RunToken(scope)
    for bad in (
        {"type": "record", "tool": "web_search", "duration_ms": 1, "reply_bytes": 1},  # not a local tool
        {"type": "record", "tool": "read_file", "duration_ms": "1", "reply_bytes": 1},
        {"type": "record", "tool": "read_file", "duration_ms": 1, "reply_bytes": 1, "error": "boom"},
    ):
        tools.record(grant, cast(RecordFrame, bad))
    assert scope.calls == 0
    tools.record(grant, {"type": "record", "tool": "read_file", "args": {}, "duration_ms": 1, "reply_bytes": 1})
    assert scope.calls == 1
    granted = tools.grant(grant)
    assert granted is not None and granted["max_calls"] == 4


def test_the_supervisor_ignores_a_malformed_grant() -> None:
    read_fd, write_fd = os.pipe()
    try:
        local = LocalTools(write_fd)
        call = {"id": 1, "tool": "read_file", "args": {"path": "x"}, "conn": 1}
        bad_grants: tuple[Any, ...] = (
            None,
            [],
            {"allowed": ["read_file"]},
            {"allowed": ["read_file"], "local": {"rm": {}}, "max_calls": 1, "cwd": "/", "files": {}},
        )
        for grant in bad_grants:
            local.set_grant(grant)
            assert local.route(cast(CallFrame, dict(call))) is False  # goes to Herald as before
        # A grant naming a tool whose schema never came (no specs, or malformed ones in the prepare frame).
        files = {"read_max_bytes": 1000, "read_max_line_chars": 100, "read_max_chars": 1000}
        named = {"allowed": ["read_file"], "local": ["read_file"], "max_calls": 1, "cwd": "/", "files": files}
        no_specs: tuple[Any, ...] = (None, {}, {"read_file": {"properties": []}},
                                     {"rm": {"properties": {}, "required": [], "refused": {}}})
        for specs in no_specs:
            local.set_specs(specs)
            local.set_grant(dict(named))
            assert local.grant is None and local.route(cast(CallFrame, dict(call))) is False
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_parallel_patches_of_one_file_take_turns(exec_backend: Backend, backend_runtime: RuntimeFactory) -> None:
    name = unique_name()
    exec_backend.write_bytes(f"{name}.txt", "".join(f"token{i}\n" for i in range(12)).encode())
    result = run_ok(
        backend_runtime(),
        f"""
        from hermes_tools import parallel, patch
        done = parallel([(patch, "{name}.txt", "token%d\\n" % i, "done%d\\n" % i) for i in range(12)])
        print(sum(r["replacements"] for r in done))
        """,
    )
    assert result.output == "12\n"
    assert exec_backend.read_bytes(f"{name}.txt") == "".join(f"done{i}\n" for i in range(12)).encode()
    exec_backend.run(f"rm -f {name}.txt")
