"""Backend mode runs `terminal` in the supervisor's shell, next to the script: it is the session's
shell as far as anyone can tell (directory and exports carry over both ways between a script's
calls and direct calls), its output past the cap is capped and spilled by Herald as always, its
background jobs end with the command, and the policy keeps terminal with Herald where it decides.
The answers themselves are compared byte for byte in test_backend_mode_tools.py."""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from herald import Runtime, Settings
from herald._sandbox.beside.localtools import LocalTools
from herald._sandbox.wire.framing import HEADER
from herald.backends.base import Backend
from herald.backends.local import LocalBackend
from herald.runtime.backend_tools import BackendTools
from herald.runtime.tokens import RunToken

from ._backend_mode import (
    backend_runtime,
    exec_backend,
    gone_on_backend,
    remote_pids,
    script_call_records,
    unique_name,
    unique_sleep,
)
from ._helpers import run_ok

__all__ = ["backend_runtime", "exec_backend"]  # fixtures, used by name

RuntimeFactory = Callable[..., Runtime]


def _terminal_records(path: Path) -> list[bool]:
    return [bool(r.get("in_backend")) for r in script_call_records(path) if r["tool"] == "terminal"]


def _direct(runtime: Runtime, command: str) -> str:
    reply = runtime.dispatcher.call_direct("terminal", {"command": command})
    assert "result" in reply, reply
    output: str = reply["result"]["output"]
    return output


def test_the_script_shell_and_the_session_shell_are_one(
    exec_backend: Backend, backend_runtime: RuntimeFactory, tmp_path: Path
) -> None:
    transcript = tmp_path / "t.jsonl"
    runtime = backend_runtime(transcript=transcript)
    name = unique_name()
    home = _direct(runtime, f"mkdir -p {name}/sub && export HERALD_FROM=direct && pwd")
    # A direct call's export reaches the script's shell; the script's cd and export reach the next direct call.
    script = f"""
    from hermes_tools import terminal, read_file
    print(terminal('echo $HERALD_FROM; cd {name}/sub; export HERALD_X=1; echo note > n.txt')["output"])
    print(terminal('echo $HERALD_X; pwd')["output"])
    print(read_file('n.txt')["content"])
    """
    result = run_ok(runtime, script)
    assert result.output.splitlines() == ["direct", "1", f"{home}/{name}/sub", "     1|note"]
    assert _direct(runtime, "echo $HERALD_X; pwd") == f"1\n{home}/{name}/sub"
    assert exec_backend.cwd == f"{home}/{name}/sub"
    # And back: a direct call moves the session and exports; the next script's shell starts there.
    _direct(runtime, "cd .. && export HERALD_X=2")
    again = run_ok(runtime, "from hermes_tools import terminal\nprint(terminal('echo $HERALD_X; pwd')['output'])")
    assert again.output == f"2\n{home}/{name}\n"
    assert runtime.transcript is not None
    runtime.transcript.flush()
    assert _terminal_records(transcript) == [True, True, True]  # the script's calls ran in the backend
    _direct(runtime, f"cd {home} && rm -rf {name}; unset HERALD_X HERALD_FROM")


def test_output_past_the_cap_is_capped_and_spilled_by_herald(
    backend_runtime: RuntimeFactory, tmp_path: Path
) -> None:
    runtime = backend_runtime(overrides={"sandbox.max_stdout_bytes": 20_000_000})
    command = "seq -f line-%g 1 200000; exit 3"
    direct = runtime.dispatcher.call_direct("terminal", {"command": command.replace("exit 3", "false")})["result"]
    quiet = command.replace("exit 3", "false")
    code = f"import json\nfrom hermes_tools import terminal\nprint(json.dumps(terminal({quiet!r})))"
    got = json.loads(run_ok(runtime, code).output)
    assert got["truncated"] and got["exit_code"] == 1 and len(got["output"]) < 1_100_000
    spill = got["output"].split("full command output in ")[1].split(" ...]")[0]
    assert Path(spill).read_text().splitlines()[-1] == "line-200000"  # the spill file is Herald's, on its host
    # The same text as Herald's own shell gives, but for the spill file's name.
    assert got["output"].replace(spill, "SPILL") == direct["output"].replace(
        direct["output"].split("full command output in ")[1].split(" ...]")[0], "SPILL"
    )
    assert {k: v for k, v in got.items() if k != "output"} == {k: v for k, v in direct.items() if k != "output"}


def test_a_scripts_background_jobs_end_with_its_command(exec_backend: Backend, backend_runtime: RuntimeFactory) -> None:
    runtime = backend_runtime()
    marker = unique_sleep()
    result = run_ok(
        runtime, f"from hermes_tools import terminal\nprint(terminal('sleep {marker} & echo started')['output'])"
    )
    assert result.output == "started\n"
    assert gone_on_backend(exec_backend, marker), remote_pids(exec_backend, marker)


def test_the_policy_keeps_terminal_with_herald_where_it_decides(backend_runtime: RuntimeFactory) -> None:
    default = backend_runtime(overrides={"sandbox.warm": False})
    assert "terminal" in BackendTools(default.dispatcher).names
    read_only = backend_runtime(overrides={"sandbox.warm": False, "policy.profile": "read-only"})
    assert "terminal" not in BackendTools(read_only.dispatcher).names
    ruled = backend_runtime(overrides={"sandbox.warm": False, "policy.rules": ["deny terminal command=git push"]})
    assert "terminal" not in BackendTools(ruled.dispatcher).names
    refused = ruled.execute("from hermes_tools import terminal\nprint(terminal('git push')['output'])", timeout=60)
    assert refused.status == "error" and "deny terminal command=git push" in refused.error, refused
    assert run_ok(ruled, "from hermes_tools import terminal\nprint(terminal('echo ok')['output'])").output == "ok\n"


def test_a_huge_output_keeps_its_count_and_tail(backend_runtime: RuntimeFactory) -> None:
    # Past the 8 MiB the supervisor's shell keeps for Herald, only the count and the tail go on.
    runtime = backend_runtime(overrides={"sandbox.max_stdout_bytes": 20_000_000})
    command = "seq -f line-%g 1 1200000"
    direct = runtime.dispatcher.call_direct("terminal", {"command": command})["result"]
    code = f"import json\nfrom hermes_tools import terminal\nprint(json.dumps(terminal({command!r})))"
    got = json.loads(run_ok(runtime, code).output)
    assert got["truncated"] and got["exit_code"] == 0
    assert "(spill file cut at 8,388,608 bytes)" in got["output"]
    assert got["output"].split(" bytes in all")[0] == direct["output"].split(" bytes in all")[0]  # the same count
    assert got["output"].split(" ...]\n")[1] == direct["output"].split(" ...]\n")[1]  # the same tail
    assert (
        run_ok(runtime, "from hermes_tools import terminal\nprint(terminal('echo next')['output'])").output == "next\n"
    )


def test_a_terminal_timeout_is_cut_to_the_time_the_run_has_left(workspace: Path, settings: Settings) -> None:
    # The supervisor's side in this process, with the grant Herald makes for a run with 1 s left.
    quiet = settings.with_overrides({"sandbox.warm": False})
    with (
        LocalBackend(str(workspace), settings=quiet) as backend,
        Runtime(backend, settings=quiet, exec_mode="backend") as runtime,
    ):
        backend.run("true")  # the session shell runs: the supervisor's may share it
        scope = runtime.dispatcher.new_scope(5, deadline=time.monotonic() + 1.0)
        tools = BackendTools(runtime.dispatcher)
        grant = tools.grant(RunToken(scope))
        time_left = grant["shell"]["time_left"] if grant is not None else None
        assert grant is not None and "terminal" in grant["local"] and time_left is not None and time_left <= 1.0
        read_fd, write_fd = os.pipe()
        local = LocalTools(write_fd)
        try:
            local.set_specs(tools.specs())  # as the supervisor's prepare frame brings them
            local.set_grant(grant)
            assert local.route({"id": 1, "tool": "terminal", "args": {"command": "sleep 30"}, "conn": 1})
            done: list[Any] = []
            give_up = time.monotonic() + 60
            while not done and time.monotonic() < give_up:
                select.select([read_fd], [], [], 1.0)
                done = local.finished()
        finally:
            local.close()
            os.close(read_fd)
            os.close(write_fd)
        [(conn, frame, record)] = done
        reply = json.loads(frame[HEADER.size :])["result"]
        assert conn == 1 and reply["timed_out"] and reply["exit_code"] == 124, reply
        assert float(reply["note"].split("timed out after ")[1].split(" s")[0]) <= 1.0, reply["note"]
        assert record["tool"] == "terminal" and record["cwd"] == str(workspace)
