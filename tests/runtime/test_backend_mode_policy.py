"""Backend mode keeps the permission policy: the file tools the supervisor answers next to the
script refuse and allow exactly what Herald's Dispatcher does (herald/runtime/backend_tools.py).
A call the policy might refuse is handed to Herald, whose Gate decides in its own words."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from herald import Runtime
from herald.backends.base import Backend

from ._backend_mode import backend_runtime, exec_backend, script_call_records, unique_name
from ._helpers import run_ok

__all__ = ["backend_runtime", "exec_backend"]  # fixtures, used by name

RuntimeFactory = Callable[..., Runtime]

TRY = """
from hermes_tools import read_file, write_file, patch, ToolError
def attempt(label, call, *args):
    try:
        call(*args)
        print(label, "ok")
    except ToolError as exc:
        print(label, exc.error_type)
"""


def test_the_default_profile_confines_in_backend_file_tools_to_the_workspace(
    exec_backend: Backend, backend_runtime: RuntimeFactory, tmp_path: Path
) -> None:
    transcript = tmp_path / "t.jsonl"
    runtime = backend_runtime(transcript=transcript)
    name = unique_name()
    exec_backend.run(f"mkdir {name} && echo inside > {name}/in.txt && ln -s /etc {name}/etc-link")
    code = TRY + f"""
attempt("inside", read_file, "{name}/in.txt")
attempt("absolute", read_file, "/etc/hostname")
attempt("dotdot", read_file, "{name}/../../../etc/hostname")
"""
    # Symlinks out of the workspace: Herald's Gate follows them where it can see where they lead
    # (the local backend); on a remote backend it checks paths as written (policy/paths.py), and
    # backend mode must answer as Herald does, so there the links are not part of this test.
    follows_links = exec_backend.name == "local"
    if follows_links:
        code += f"""
attempt("symlink", read_file, "{name}/etc-link/hostname")
attempt("write-out", write_file, "{name}/etc-link/herald-test", "x")
"""
    result = run_ok(runtime, code)
    expected = ["inside ok", "absolute PolicyRefused", "dotdot PolicyRefused"]
    expected += ["symlink PolicyRefused", "write-out PolicyRefused"] if follows_links else []
    assert result.output.split("\n")[:-1] == expected
    assert runtime.transcript is not None
    runtime.transcript.flush()
    # The allowed call ran in the backend; Herald's Gate decided every refusal.
    assert [r.get("in_backend", False) for r in script_call_records(transcript)] == [True] + [False] * (
        len(expected) - 1
    )
    exec_backend.run(f"rm -rf {name}")


def test_read_only_profile_rules_and_byte_budgets_are_kept_in_backend_mode(
    exec_backend: Backend, backend_runtime: RuntimeFactory
) -> None:
    name = unique_name()
    exec_backend.run(f"mkdir {name} && echo one > {name}/a.txt")
    read_only = backend_runtime(policy="read-only")
    assert run_ok(read_only, TRY + f"""
attempt("read", read_file, "{name}/a.txt")
attempt("write", write_file, "{name}/b.txt", "x")
attempt("patch", patch, "{name}/a.txt", "one", "two")
""").output.split("\n")[:-1] == ["read ok", "write PolicyRefused", "patch PolicyRefused"]
    denied = backend_runtime(overrides={"policy.rules": ["deny read_file path=**/a.txt"]})
    assert run_ok(denied, TRY + f'attempt("denied", read_file, "{name}/a.txt")').output == "denied PolicyRefused\n"
    budgeted = backend_runtime()
    result = budgeted.execute(TRY + f"""
attempt("small", write_file, "{name}/c.txt", "12345")
attempt("big", write_file, "{name}/d.txt", "x" * 100)
""", budgets={"bytes_written": 50}, timeout=60)
    assert result.output.split("\n")[:-1] == ["small ok", "big BudgetExhausted"], result
    assert exec_backend.run(f"cat {name}/a.txt; ls {name}").output.split() == ["one", "a.txt", "c.txt"]
    exec_backend.run(f"rm -rf {name}")
