"""In-backend execution: the script runs inside the backend, so open(), subprocess and
hermes_tools all act on the same machine and directory. Run against every backend here."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from herald import Runtime, Settings
from herald.backends.base import Backend
from herald.backends.local import LocalBackend

from ._backend_mode import backend_runtime, exec_backend, unique_name
from ._helpers import run_ok, script

__all__ = ["backend_runtime", "exec_backend"]  # fixtures, used by name

RuntimeFactory = Callable[..., Runtime]


def test_open_subprocess_and_tools_act_on_the_backend(exec_backend: Backend, backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime()
    name = unique_name()
    result = run_ok(
        runtime,
        f"""
        import json, os, subprocess
        from hermes_tools import read_file, terminal, write_file
        with open("{name}.txt", "w") as fh:              # the script's own open()
            fh.write("written by open()\\n")
        seen_by_tool = read_file("{name}.txt")["content"]
        write_file("{name}-tool.txt", "written by write_file\\n")
        with open("{name}-tool.txt") as fh:
            seen_by_open = fh.read()
        pwd_subprocess = subprocess.run(["pwd"], capture_output=True, text=True).stdout.strip()
        pwd_terminal = terminal("pwd")["output"].strip()
        listed = subprocess.run(["ls"], capture_output=True, text=True).stdout.split()
        print(json.dumps({{
            "seen_by_tool": seen_by_tool, "seen_by_open": seen_by_open, "cwd": os.getcwd(),
            "pwd_subprocess": pwd_subprocess, "pwd_terminal": pwd_terminal, "listed": listed,
        }}))
        """,
    )
    seen = json.loads(result.output)
    assert "written by open()" in seen["seen_by_tool"]
    assert seen["seen_by_open"] == "written by write_file\n"
    assert seen["pwd_subprocess"] == seen["pwd_terminal"] == seen["cwd"] == exec_backend.cwd
    assert {f"{name}.txt", f"{name}-tool.txt"} <= set(seen["listed"])
    # ... and the backend's own file access sees what the script wrote.
    assert exec_backend.read_bytes(f"{name}.txt") == b"written by open()\n"
    assert result.tool_calls_made == 3
    exec_backend.run(f"rm -f {name}.txt {name}-tool.txt")


def test_script_and_subprocess_output_are_captured(backend_runtime: RuntimeFactory) -> None:
    result = run_ok(
        backend_runtime(),
        """
        import os, subprocess, sys
        print("from the script", flush=True)
        subprocess.run(["sh", "-c", "echo from a child; echo child error >&2"])
        os.system("echo from a grandchild via os.system")
        sys.stderr.write("script error\\n")
        sys.stdout.buffer.write(b"bytes \\xff\\xfe end\\n")
        """,
    )
    lines = result.output.splitlines()
    assert lines[:3] == ["from the script", "from a child", "from a grandchild via os.system"]
    assert lines[3] == "bytes \ufffd\ufffd end"  # not UTF-8: replaced, as in host mode
    assert result.error == "child error\nscript error\n"


def test_call_budget_and_unknown_tools_answer_as_in_host_mode(backend_runtime: RuntimeFactory) -> None:
    result = run_ok(
        backend_runtime(),
        """
        from hermes_tools import ToolError, terminal
        from _hermes_runtime.child.client import call
        for i in range(3):
            try:
                print(terminal("echo call %d" % i)["output"].strip())
            except ToolError as exc:
                print("refused:", exc)
        try:
            call("no_such_tool", {})
        except ToolError as exc:
            print("unknown:", exc)
        """,
        max_tool_calls=2,
    )
    lines = result.output.splitlines()
    assert lines[:2] == ["call 0", "call 1"]
    assert lines[2].startswith("refused: Tool call limit reached: this script already made its 2 allowed")
    assert lines[3].startswith("unknown: Unknown tool: 'no_such_tool'. Available in this script:")
    assert "read_file" in lines[3]
    assert result.tool_calls_made == 2
    assert "1 tool call(s) were refused: the limit is 2 per run" in result.error
    assert (result.refused_calls, result.budget_exhausted) == (1, True)


def test_every_call_is_in_the_transcript(backend_runtime: RuntimeFactory, tmp_path: Path) -> None:
    transcript = tmp_path / "transcript.jsonl"
    runtime = backend_runtime(transcript=transcript)
    run_ok(runtime, "from hermes_tools import terminal\nfor i in range(3): terminal('echo %d' % i)")
    runtime.close()
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    calls = [r for r in records if r.get("type") == "sandbox_tool_call"]
    assert [c["tool"] for c in calls] == ["terminal"] * 3
    assert [c["args"]["command"] for c in calls] == ["echo 0", "echo 1", "echo 2"]


def test_parallel_calls_and_forked_children_reach_the_tools(backend_runtime: RuntimeFactory) -> None:
    result = run_ok(
        backend_runtime(),
        """
        import os
        from hermes_tools import parallel, terminal
        outputs = parallel([(terminal, "echo %d" % i) for i in range(8)])
        print(sorted(int(o["output"]) for o in outputs))
        pid = os.fork()
        if pid == 0:   # a forked child gets its own connection
            ok = terminal("echo from the fork")["output"].strip() == "from the fork"
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("fork exit", os.WEXITSTATUS(status))
        print(terminal("echo parent still fine")["output"].strip())
        """,
    )
    assert result.output.splitlines() == [str(list(range(8))), "fork exit 0", "parent still fine"]
    assert result.tool_calls_made == 10


def test_large_arguments_and_results_cross_the_stream(exec_backend: Backend, backend_runtime: RuntimeFactory) -> None:
    name = unique_name()
    result = run_ok(
        backend_runtime(),
        f"""
        from hermes_tools import read_file, write_file
        body = "".join("line %06d ünïcödé\\n" % i for i in range(60000))
        write_file("{name}.txt", body)
        with open("{name}.txt", encoding="utf-8") as fh:
            print(fh.read() == body)
        page = read_file("{name}.txt", offset=59990, limit=5)
        print(page["content"].splitlines()[0].strip())
        """,
    )
    assert result.output.splitlines() == ["True", "59990|line 059989 ünïcödé"]
    assert exec_backend.stat(f"{name}.txt") is not None
    exec_backend.run(f"rm -f {name}.txt")


def test_herald_is_not_importable_and_the_sandbox_is_marked(backend_runtime: RuntimeFactory) -> None:
    result = run_ok(
        backend_runtime(),
        """
        import os
        try:
            import herald
        except ModuleNotFoundError as exc:
            print("blocked:", exc)
        print(os.environ.get("HERALD_SANDBOX"), os.environ.get("PYTHONIOENCODING"))
        """,
    )
    assert result.output.splitlines() == [
        "blocked: Herald's own package is not importable inside the sandbox; call tools through hermes_tools.",
        "1 utf-8",
    ]


def test_kernel_session_keeps_state_on_the_backend(backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime()
    run_ok(runtime, "import os\nx = 41\nstarted_in = os.getpid()", session="k")
    result = run_ok(runtime, "import os\nx += 1\nprint(x, os.getpid() == started_in)", session="k")
    assert result.output == "42 True\n"
    assert not result.state_lost
    lost = runtime.execute("import time\ntime.sleep(100)", session="k", timeout=1)
    assert lost.status == "timeout" and lost.state_lost
    fresh = runtime.execute("print(x)", session="k", timeout=30)
    assert fresh.status == "error" and "NameError" in fresh.error


def test_cold_start_and_many_runs(backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime(overrides={"sandbox.warm": False})
    for i in range(3):
        assert run_ok(runtime, f"print({i} * 2)").output == f"{i * 2}\n"


def test_script_that_kills_its_supervisor_gets_a_clear_error(backend_runtime: RuntimeFactory) -> None:
    # A spawned script's parent is its supervisor; a forked one's is the zygote (see
    # test_backend_mode_fork.py for the same with the fork server). The script plays a crash of
    # the supervisor, which it must see to kill: unconfined (isolation hides it, tests/security/).
    runtime = backend_runtime(overrides={"sandbox.fork_server": False, "sandbox.isolation": "none"})
    result = runtime.execute(
        script(
            """
            import os, signal
            print("before", flush=True)
            os.kill(os.getppid(), signal.SIGKILL)   # the supervisor on the backend
            import time; time.sleep(30)
            """
        ),
        timeout=60,  # generous (a loaded machine): "error", not "timeout", says the loss was noticed
    )
    assert result.status == "error", result
    assert "stopped unexpectedly" in result.error
    assert run_ok(runtime, "print('next run works')").output == "next run works\n"


def test_sandbox_directory_is_private_and_removed_on_close(
    exec_backend: Backend, backend_runtime: RuntimeFactory
) -> None:
    runtime = backend_runtime()
    result = run_ok(
        runtime,
        "import hermes_tools, os\nd = os.path.dirname(hermes_tools.__file__)\n"
        "print(d)\nprint(oct(os.stat(d).st_mode & 0o777))",
    )
    directory, mode = result.output.split()
    assert mode == "0o700"
    assert exec_backend.stat(directory) is not None
    runtime.close()
    assert exec_backend.stat(directory) is None


# -- local only: what needs control over the backend's interpreter or environment ---------


def _fake_python(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-python3"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_the_backend_environment_is_scrubbed_for_the_script(
    tmp_path: Path, workspace: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The interpreter on the "backend" gets secrets in its environment; the script must not.
    python = _fake_python(tmp_path, 'SERVICE_API_TOKEN=leak WANTED_KEY=kept exec python3 "$@"\n')
    monkeypatch.setenv("WANTED_KEY", "from-host")
    overrides = {"sandbox.remote_python": python, "sandbox.env_passthrough": ["WANTED_KEY"]}
    runtime_settings = settings.with_overrides(overrides)
    with LocalBackend(str(workspace), settings=runtime_settings) as backend, Runtime(
        backend, settings=runtime_settings, exec_mode="backend"
    ) as runtime:
        result = run_ok(runtime, "import os\nprint(os.environ.get('SERVICE_API_TOKEN'), os.environ.get('WANTED_KEY'))")
    assert result.output == "None kept\n"


def test_exec_mode_is_validated(local_backend: LocalBackend, settings: Settings) -> None:
    with pytest.raises(ValueError, match=r"unknown exec_mode 'remote'.*\"host\".*\"backend\""):
        Runtime(local_backend, settings=settings, exec_mode="remote")
