"""Script runs end to end: a real child interpreter, real RPC, real tools on a local workspace."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime
from herald.runtime.toolset import default_registry
from herald.tools import Registry, Tool

from ._helpers import run_ok, script


def sleep_echo(args: dict[str, Any], ctx: Any) -> Any:
    time.sleep(args["delay"])
    return args["value"]


SLEEP_ECHO = Tool(
    name="sleep_echo",
    description="Sleep `delay` seconds, then return `value`.",
    parameters={
        "type": "object",
        "properties": {
            "value": {"type": "integer", "description": "What to return."},
            "delay": {"type": "number", "default": 0.0, "description": "Seconds to sleep."},
        },
        "required": ["value"],
    },
    handler=sleep_echo,
)


def wait_echo(args: dict[str, Any], ctx: Any) -> Any:
    """Return `value` once the file `after` exists (at once when `after` is empty)."""
    deadline = time.monotonic() + 60  # only bounds a hang: no verdict depends on it
    while args["after"] and not os.path.exists(args["after"]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{args['after']} never appeared")
        time.sleep(0.01)
    return args["value"]


WAIT_ECHO = Tool(
    name="wait_echo",
    description="Wait until the file `after` exists, then return `value`.",
    parameters={
        "type": "object",
        "properties": {
            "value": {"type": "integer", "description": "What to return."},
            "after": {"type": "string", "default": "", "description": "Absolute path to wait for."},
        },
        "required": ["value"],
    },
    handler=wait_echo,
)


def meet_tool(parties: int) -> Tool:
    """`meet(value)`: returns `value` once `parties` calls are in it at the same time."""
    barrier = threading.Barrier(parties, timeout=60)  # only bounds a hang: no verdict depends on it

    def meet(args: dict[str, Any], ctx: Any) -> Any:
        barrier.wait()
        return args["value"]

    return Tool(
        name="meet",
        description=f"Return `value` once {parties} calls are waiting together.",
        parameters={"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]},
        handler=meet,
    )


DIRECT_ONLY = Tool(
    name="direct_only",
    description="A tool the model calls directly, never from a script.",
    parameters={"type": "object", "properties": {}},
    handler=lambda args, ctx: "should never run from a script",
    sandbox=False,
)


def custom_registry(*extra: Tool) -> Registry:
    return Registry([*default_registry(), SLEEP_ECHO, WAIT_ECHO, DIRECT_ONLY, *extra])


# -- plain Python ----------------------------------------------------------------------------


def test_print(runtime: Runtime) -> None:
    result = run_ok(runtime, "print('hello from the sandbox')")
    assert result.output == "hello from the sandbox\n"
    assert result.error == ""
    assert result.exit_code == 0
    assert result.tool_calls_made == 0
    assert result.ok
    assert result.duration_seconds > 0


def test_syntax_error(runtime: Runtime) -> None:
    result = runtime.execute("print('unclosed'\n", timeout=30)
    assert result.status == "error"
    assert "SyntaxError" in result.error
    assert result.output == ""
    assert result.exit_code == 1


def test_runtime_exception_keeps_earlier_output(runtime: Runtime) -> None:
    result = runtime.execute(
        script(
            """
            print("step one done")
            def broken():
                return {}["missing"]
            broken()
            """
        ),
        timeout=30,
    )
    assert result.status == "error"
    assert result.output == "step one done\n"
    assert "Traceback" in result.error
    assert "KeyError: 'missing'" in result.error
    assert "broken" in result.error  # the script's own frames are shown
    assert "bootstrap" not in result.error  # ... but not the sandbox's exec() frame
    assert result.exit_code == 1


def test_sys_exit_status(runtime: Runtime) -> None:
    result = runtime.execute("import sys\nprint('bye')\nsys.exit(3)\n", timeout=30)
    assert result.status == "error"
    assert result.exit_code == 3
    assert result.output == "bye\n"
    assert "status 3" in result.error


def test_sys_exit_zero_and_message(runtime: Runtime) -> None:
    assert run_ok(runtime, "import sys\nsys.exit(0)").exit_code == 0
    result = runtime.execute("import sys\nsys.exit('giving up: no input')\n", timeout=30)
    assert result.status == "error"
    assert result.exit_code == 1
    assert "giving up: no input" in result.error


@pytest.mark.parametrize("code", ["", "   ", "\n\n\t  \n"])
def test_empty_code(runtime: Runtime, code: str) -> None:
    result = runtime.execute(code)
    assert result.status == "error"
    assert result.exit_code is None
    assert "empty" in result.error
    assert result.output == ""
    assert result.tool_calls_made == 0


def test_code_must_be_a_string(runtime: Runtime) -> None:
    with pytest.raises(TypeError, match="str"):
        runtime.execute(b"print(1)")  # type: ignore[arg-type]  # bytes on purpose: refused by name


def test_herald_is_not_importable(runtime: Runtime) -> None:
    result = runtime.execute("import herald\n", timeout=30)
    assert result.status == "error"
    assert "ModuleNotFoundError" in result.error
    assert "not importable inside the sandbox" in result.error
    result = runtime.execute("from herald.runtime import Runtime\n", timeout=30)
    assert result.status == "error"
    assert "not importable inside the sandbox" in result.error


def test_script_runs_in_the_backend_cwd(runtime: Runtime, workspace: Path) -> None:
    (workspace / "local.txt").write_text("seen by open()\n")
    result = run_ok(
        runtime, "import os\nprint(os.getcwd())\nprint(open('local.txt').read(), end='')"
    )
    assert result.output == f"{workspace}\nseen by open()\n"


def test_non_daemon_threads_finish_before_exit(runtime: Runtime) -> None:
    result = run_ok(
        runtime,
        """
        import threading, time
        main_done = threading.Event()
        def late():
            main_done.wait(60)  # after the main thread's print, however the threads are scheduled
            time.sleep(0.2)  # and most likely after the script's last line (no verdict hangs on it)
            print("thread done", flush=True)
        threading.Thread(target=late).start()
        print("main done")
        main_done.set()
        """,
    )
    assert result.output == "main done\nthread done\n"


def test_unicode_output(runtime: Runtime) -> None:
    result = run_ok(runtime, "print('héllo ✓ 日本')\nimport sys\nprint('ünï', file=sys.stderr)")
    assert result.output == "héllo ✓ 日本\n"
    assert result.error == "ünï\n"


# -- tool calls ------------------------------------------------------------------------------


def test_one_tool_call(runtime: Runtime, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    result = run_ok(
        runtime,
        """
        from hermes_tools import read_file
        page = read_file("notes.txt")
        print(page["total_lines"])
        print("beta" in page["content"])
        """,
    )
    assert result.output == "2\nTrue\n"
    assert result.tool_calls_made == 1


def test_several_tool_calls(runtime: Runtime, workspace: Path) -> None:
    result = run_ok(
        runtime,
        """
        from hermes_tools import write_file, read_file, terminal
        written = write_file("out/made.txt", "made by a script\\n")
        print(written["created"])
        print(terminal("cat out/made.txt")["output"].strip())
        print("made by a script" in read_file("out/made.txt")["content"])
        print(terminal("(exit 7)")["exit_code"])
        """,
    )
    assert result.output == "True\nmade by a script\nTrue\n7\n"
    assert result.tool_calls_made == 4
    assert (workspace / "out" / "made.txt").read_text() == "made by a script\n"


def test_tool_error_is_catchable(runtime: Runtime) -> None:
    result = run_ok(
        runtime,
        """
        from hermes_tools import read_file, ToolError
        try:
            read_file("does/not/exist.txt")
        except ToolError as exc:
            print("caught", type(exc).__name__, exc.tool)
            print(str(exc))
        """,
    )
    assert result.output.startswith("caught ToolError read_file\n")
    assert "exist.txt" in result.output
    assert result.tool_calls_made == 1


def test_bad_arguments_are_tool_errors(runtime: Runtime) -> None:
    result = run_ok(
        runtime,
        """
        from hermes_tools import _call, terminal, ToolError
        for attempt in (
            lambda: _call("read_file", {"path": 5}),
            lambda: _call("read_file", {}),
            lambda: _call("read_file", {"path": "x", "bogus": 1}),
            lambda: terminal("sleep 1", background=True),
        ):
            try:
                attempt()
            except ToolError as exc:
                print("refused:", exc)
        """,
    )
    lines = result.output.splitlines()
    assert len(lines) == 4, result.output
    assert "'path' must be string" in lines[0]
    assert "missing required argument 'path'" in lines[1]
    assert "unknown argument(s) 'bogus'" in lines[2]
    assert "background" in lines[3] and "foreground" in lines[3]


def test_ten_threads_get_their_own_replies(runtime: Runtime, workspace: Path) -> None:
    for i in range(10):
        (workspace / f"file{i}.txt").write_text(f"content of {i}\n")
    result = run_ok(
        runtime,
        """
        import threading
        from hermes_tools import read_file, terminal
        errors = []
        barrier = threading.Barrier(10)
        def work(i):
            try:
                barrier.wait()
                for _ in range(3):
                    out = terminal(f"echo {i}")["output"].strip()
                    if out != str(i):
                        errors.append((i, "terminal", out))
                    content = read_file(f"file{i}.txt")["content"]
                    if f"content of {i}" not in content:
                        errors.append((i, "read_file", content))
            except Exception as exc:
                errors.append((i, repr(exc)))
        threads = [threading.Thread(target=work, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("errors:", errors)
        """,
        max_tool_calls=100,
    )
    assert result.output == "errors: []\n"
    assert result.tool_calls_made == 60


def test_parallel_returns_results_in_call_order(make_runtime: Any) -> None:
    runtime = make_runtime(registry=custom_registry())
    result = run_ok(
        runtime,
        """
        import os
        from hermes_tools import parallel, wait_echo
        finished = []
        def call(i):
            # Call i returns only once call i + 1 has (its file exists): they finish last to first.
            value = wait_echo(i, after=os.path.abspath(f"done{i + 1}") if i < 7 else "")
            finished.append(value)
            open(f"done{i}", "w").close()
            return value
        results = parallel([(call, i) for i in range(8)])
        print(results)
        print(finished)
        """,
    )
    assert result.output == "[0, 1, 2, 3, 4, 5, 6, 7]\n[7, 6, 5, 4, 3, 2, 1, 0]\n"
    assert result.tool_calls_made == 8


def test_parallel_read_files_in_order(runtime: Runtime, workspace: Path) -> None:
    for i in range(6):
        (workspace / f"p{i}.txt").write_text(f"payload {i}\n" * (2000 * (6 - i)))
    result = run_ok(
        runtime,
        """
        from hermes_tools import parallel, read_file
        pages = parallel(*[(lambda i=i: read_file(f"p{i}.txt", limit=1)) for i in range(6)])
        print([p["content"].split("|", 1)[1].strip() for p in pages])
        """,
    )
    assert result.output == str([f"payload {i}" for i in range(6)]) + "\n"


def test_parallel_calls_run_concurrently(make_runtime: Any) -> None:
    # The 16 calls wait for each other at a barrier: they can only return if all run at once.
    runtime = make_runtime(registry=custom_registry(meet_tool(16)))
    result = run_ok(
        runtime,
        """
        from hermes_tools import parallel, meet
        print(parallel([(meet, i) for i in range(16)]) == list(range(16)))
        """,
        timeout=120,
    )
    assert result.output == "True\n", result.output
    assert result.tool_calls_made == 16


def test_parallel_in_a_loop_reuses_its_threads_and_nests(make_runtime: Any) -> None:
    # Each round's 16 calls meet at a barrier, so each round has all 16 at once; the threads
    # of one round serve the next (the process's thread count stays put); a job may itself
    # call parallel() without waiting for threads its caller holds.
    runtime = make_runtime(registry=custom_registry(meet_tool(16)))
    result = run_ok(
        runtime,
        """
        import threading
        from hermes_tools import parallel, meet
        rounds = []
        for _ in range(3):
            jobs = [lambda i=i: (meet(i), threading.get_native_id())[1] for i in range(16)]
            rounds.append(set(parallel(jobs)))
        print(len(rounds[0]) == 16 and rounds[0] == rounds[1] == rounds[2])
        print(parallel(lambda: parallel(lambda: 1, lambda: 2), lambda: 3))
        """,
        max_tool_calls=100,
        timeout=120,
    )
    assert result.output == "True\n[[1, 2], 3]\n", result.output


def test_parallel_failure_and_return_exceptions(runtime: Runtime) -> None:
    result = run_ok(
        runtime,
        """
        from hermes_tools import parallel, read_file, ToolError
        out = parallel(lambda: 1, lambda: read_file("nope.txt"), lambda: 3, return_exceptions=True)
        print(out[0], type(out[1]).__name__, out[2])
        try:
            parallel(lambda: 1, lambda: read_file("nope.txt"))
        except ToolError:
            print("raised")
        """,
    )
    assert result.output == "1 ToolError 3\nraised\n"


def test_excluded_tool_message(make_runtime: Any) -> None:
    runtime = make_runtime(registry=custom_registry())
    result = run_ok(
        runtime,
        """
        import hermes_tools
        from hermes_tools import ToolError
        print(hasattr(hermes_tools, "direct_only"))
        try:
            hermes_tools._call("direct_only", {})
        except ToolError as exc:
            print(exc.error_type)
            print(exc)
        """,
    )
    lines = result.output.splitlines()
    assert lines[0] == "False"
    assert lines[1] == "ToolNotAvailable"
    assert "'direct_only' is not available inside execute_code" in lines[2]
    assert "Available in this script:" in lines[2]
    assert "read_file" in lines[2] and "sleep_echo" in lines[2]
    assert "direct_only" not in lines[2].split("Available in this script:")[1]
    assert result.tool_calls_made == 0


def test_disabled_tool_message(make_runtime: Any) -> None:
    runtime = make_runtime(tools=["read_file", "terminal"])
    result = run_ok(
        runtime,
        """
        import hermes_tools
        print(sorted(n for n in hermes_tools.__all__ if n in ("read_file", "terminal", "write_file")))
        try:
            hermes_tools._call("write_file", {"path": "x.txt", "content": "no"})
        except hermes_tools.ToolError as exc:
            print(exc)
        """,
    )
    lines = result.output.splitlines()
    assert lines[0] == "['read_file', 'terminal']"
    assert "'write_file' is not enabled in this session" in lines[1]
    assert "Available in this script: read_file, terminal." in lines[1]


def test_unknown_tool_message(runtime: Runtime) -> None:
    result = run_ok(
        runtime,
        """
        from hermes_tools import _call, ToolError
        for name in ("web_search_xyz", "execute_code"):
            try:
                _call(name, {})
            except ToolError as exc:
                print(exc.error_type, "|", exc)
        """,
    )
    unknown, nested = result.output.splitlines()
    assert unknown.startswith("UnknownTool | Unknown tool: 'web_search_xyz'.")
    assert (
        "Available in this script:" in unknown and "read_file" in unknown and "terminal" in unknown
    )
    assert "no nested sandboxes" in nested
    assert result.tool_calls_made == 0


def test_helpers(runtime: Runtime) -> None:
    result = run_ok(
        runtime,
        r"""
        from hermes_tools import json_parse, shell_quote, retry, terminal
        print(json_parse('```json\n{"a": 1}\n```'))
        print(json_parse('Result: [1, 2, {"b": null}] -- done'))
        print(json_parse("no json here", default="fallback"))
        try:
            json_parse("nothing")
        except ValueError as exc:
            print("ValueError", "nothing" in str(exc))
        print(shell_quote("it's a file.txt"))
        print(shell_quote(["ls", "-l", "my dir"]))
        print(terminal("printf %s " + shell_quote("a b'c"))["output"])
        attempts = []
        def flaky():
            attempts.append(1)
            if len(attempts) < 3:
                raise OSError("not yet")
            return "third time"
        print(retry(flaky, attempts=3, delay=0.01), len(attempts))
        try:
            retry(lambda: 1 / 0, attempts=2, delay=0)
        except ZeroDivisionError:
            print("re-raised")
        """,
    )
    assert result.output.splitlines() == [
        "{'a': 1}",
        "[1, 2, {'b': None}]",
        "fallback",
        "ValueError True",
        "'it'\"'\"'s a file.txt'",
        "ls -l 'my dir'",
        "a b'c",
        "third time 3",
        "re-raised",
    ]


def test_runs_are_isolated(runtime: Runtime) -> None:
    run_ok(runtime, "import os\nos.environ['LEFT_OVER'] = '1'\nleft_over = 1")
    result = run_ok(
        runtime, "import os\nprint('left_over' in globals(), 'LEFT_OVER' in os.environ)"
    )
    assert result.output == "False False\n"


def test_script_killed_by_a_signal(runtime: Runtime) -> None:
    result = runtime.execute(
        "import os, signal\nprint('dying', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)",
        timeout=30,
    )
    assert result.status == "error"
    assert result.exit_code == -9
    assert result.output == "dying\n"
    assert "killed by signal 9" in result.error


def test_surrogates_in_code_are_refused_before_running(runtime: Runtime) -> None:
    result = runtime.execute("print('before')\nx = '\ud800'\n", timeout=30)
    assert result.status == "error"
    assert result.exit_code is None
    assert "not valid text" in result.error and "\\ud800" in result.error
    assert run_ok(runtime, "print('after')").output == "after\n"


def test_surrogates_in_tool_arguments_do_not_break_the_connection(runtime: Runtime) -> None:
    result = run_ok(
        runtime,
        """
        from hermes_tools import read_file, terminal, ToolError
        try:
            read_file("bad" + chr(0xDCFF) + ".txt")
        except ToolError as exc:
            print(type(exc).__name__)
        print(terminal("echo still connected")["output"])
        """,
    )
    assert result.output == "ToolError\nstill connected\n"
    assert result.tool_calls_made == 2
