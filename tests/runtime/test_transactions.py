"""`hermes_tools.transaction()` on the local backend, in host and backend mode: what a block
keeps and undoes (file tools, terminal and the script's own open() alike), an exception in it,
a block without verify, nesting, a verify the session's tools or budget refuse, a run that ends
with a block open (os._exit, an interrupt, a kernel cell), the snapshot's limits. Other runs:
test_transactions_other_runs.py. The workspace is read back from disk, byte for byte.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from herald import ExecutionResult, Runtime
from herald.transcript import read_transcript
from tests.checkpoints.trees import read_tree

from ._helpers import script, wait_for
from ._transactions import CHANGE_ALL, MODES, PRINT_TX, RuntimeFactory, outcome, run, seed


@MODES
def test_an_exception_in_the_block_undoes_it_and_propagates(
    make_runtime: RuntimeFactory, workspace: Path, exec_mode: str
) -> None:
    before = seed(workspace)
    runtime = make_runtime(exec_mode=exec_mode)
    block = CHANGE_ALL.replace("\n    ", "\n        ")
    result = run(runtime, "try:\n    with transaction(verify='true') as tx:\n" + block
                 + "        raise ValueError('halfway')\nexcept ValueError as exc:\n    print('propagated', exc)\n"
                 + PRINT_TX)
    found = outcome(result)
    assert "propagated halfway" in result.output
    assert found["committed"] is False and found["verify"] is None  # verify does not run after an exception
    assert found["reason"] == "the block raised ValueError: halfway"
    assert {"keep.txt", "gone.txt", "by_open.txt", "by_terminal.txt", "new/by_tool.txt"} <= set(found["changed"])
    assert read_tree(workspace) == before


@MODES
def test_without_verify_a_block_that_does_not_raise_is_kept(
    make_runtime: RuntimeFactory, workspace: Path, exec_mode: str
) -> None:
    seed(workspace)
    runtime = make_runtime(exec_mode=exec_mode)
    found = outcome(run(runtime, "with transaction() as tx:\n" + CHANGE_ALL + PRINT_TX))
    assert found["committed"] is True and found["reason"] is None and found["verify"] is None
    assert (workspace / "keep.txt").read_text() == "changed by write_file\n"
    assert (workspace / "by_open.txt").exists() and (workspace / "by_terminal.txt").exists()
    assert not (workspace / "gone.txt").exists()
    assert (workspace / "sub" / "mode.sh").stat().st_mode & 0o777 == 0o600
    assert sorted(found["changed"]) == found["changed"]
    assert {"keep.txt", "gone.txt", "by_open.txt", "by_terminal.txt", "new/by_tool.txt", "sub/mode.sh",
            "emptydir"} <= set(found["changed"])


def test_verify_output_and_exit_code_are_reported(make_runtime: RuntimeFactory, workspace: Path) -> None:
    before = seed(workspace)
    runtime = make_runtime()
    verify = "echo start; for i in $(seq 3000); do echo line $i; done; echo 'FAILED 2 tests' >&2; exit 2"
    found = outcome(run(runtime, f"with transaction(verify={verify!r}) as tx:\n" + CHANGE_ALL + PRINT_TX))
    assert found["committed"] is False
    assert found["verify"]["exit_code"] == 2 and found["verify"]["timed_out"] is False
    assert found["verify"]["output"].rstrip().endswith("FAILED 2 tests")  # the tail
    assert "start" not in found["verify"]["output"] and len(found["verify"]["output"]) <= 2000
    assert read_tree(workspace) == before


@MODES
def test_nested_blocks(make_runtime: RuntimeFactory, workspace: Path, exec_mode: str) -> None:
    before = seed(workspace)
    runtime = make_runtime(exec_mode=exec_mode)
    # An inner block that commits folds into the outer: the outer rolling back undoes it too.
    found = outcome(run(runtime, """
        with transaction(verify="false") as tx:
            write_file("outer.txt", "o")
            with transaction(verify="true") as inner:
                write_file("inner.txt", "i")
                write_file("keep.txt", "inner")
        assert inner.committed is True and inner.changed == ["inner.txt", "keep.txt"], inner.changed
    """, PRINT_TX))
    assert found["committed"] is False and set(found["changed"]) == {"outer.txt", "inner.txt", "keep.txt"}
    assert read_tree(workspace) == before
    # An inner block that rolls back leaves the outer's own changes, which it keeps.
    found = outcome(run(runtime, """
        with transaction(verify="test -f outer.txt") as tx:
            write_file("outer.txt", "o")
            with transaction(verify="false") as inner:
                write_file("inner.txt", "i")
                write_file("keep.txt", "inner")
            assert inner.committed is False
    """, PRINT_TX))
    assert found["committed"] is True and found["changed"] == ["outer.txt"]
    assert not (workspace / "inner.txt").exists() and (workspace / "keep.txt").read_text() == "original\n"
    assert (workspace / "outer.txt").read_text() == "o"


def test_an_inner_block_left_open_is_undone_by_its_outer(make_runtime: RuntimeFactory, workspace: Path) -> None:
    seed(workspace)
    runtime = make_runtime()
    found = outcome(run(runtime, """
        with transaction() as tx:
            write_file("outer.txt", "o")
            inner = transaction()
            inner.__enter__()
            write_file("inner.txt", "i")
        try:
            inner.__exit__(None, None, None)
        except ToolError as exc:
            print("inner:", exc.error_type, exc)
    """, PRINT_TX))
    assert found["committed"] is True and found["changed"] == ["outer.txt"]
    assert not (workspace / "inner.txt").exists()


@MODES
def test_a_run_that_ends_inside_a_block_is_rolled_back(
    make_runtime: RuntimeFactory, workspace: Path, exec_mode: str
) -> None:
    before = seed(workspace)
    runtime = make_runtime(exec_mode=exec_mode)
    result = run(runtime, "tx = transaction(verify='true')\ntx.__enter__()\n" + CHANGE_ALL.replace("\n    ", "\n")
                 + "os._exit(0)\n")
    assert result.status == "success", result  # os._exit(0): the script itself succeeded
    assert any("still open when the run ended: rolled back" in note for note in result.notes), result
    assert read_tree(workspace) == before


def test_a_kernel_cell_that_ends_inside_a_block_is_rolled_back(make_runtime: RuntimeFactory, workspace: Path) -> None:
    before = seed(workspace)
    runtime = make_runtime()
    first = run(runtime, "tx = transaction()\ntx.__enter__()\nwrite_file('cell.txt', '1')\n", session="k")
    assert any("rolled back" in note for note in first.notes), first
    assert read_tree(workspace) == before
    late_exit = "try:\n    tx.__exit__(None, None, None)\nexcept ToolError as exc:\n    print(exc.error_type)\n"
    second = run(runtime, late_exit, session="k")
    assert second.output.strip() == "TransactionError", second
    assert tx_records(runtime)[-1]["event"] == "rollback"


def tx_records(runtime: Runtime) -> list[dict[str, Any]]:
    assert runtime.transcript is not None
    runtime.transcript.flush()
    return [r for r in read_transcript(runtime.transcript.path) if r.get("type") == "transaction"]


def test_a_verify_the_session_cannot_run_rolls_back(make_runtime: RuntimeFactory, workspace: Path) -> None:
    before = seed(workspace)
    runtime = make_runtime(tools=["write_file", "read_file"])  # no terminal in this session
    found = outcome(runtime.execute(script("""
        import json
        from hermes_tools import transaction, write_file
        with transaction(verify="true") as tx:
            write_file("keep.txt", "changed")
    """) + PRINT_TX))
    assert found["committed"] is False and found["verify"]["exit_code"] is None
    assert "could not run" in found["reason"] and "terminal" in found["reason"]
    assert read_tree(workspace) == before
    # The verify counts against the run's call budget like any call: past it, it does not run.
    found = outcome(run(make_runtime(), """
        with transaction(verify="true") as tx:
            write_file("keep.txt", "changed")
    """, PRINT_TX, max_tool_calls=1))
    assert found["committed"] is False and "ToolCallLimit" in found["reason"]
    assert read_tree(workspace) == before


@MODES
def test_verify_runs_in_workdir_or_the_session_directory_and_moves_nothing(
    make_runtime: RuntimeFactory, workspace: Path, exec_mode: str
) -> None:
    seed(workspace)
    runtime = make_runtime(exec_mode=exec_mode)
    found = outcome(run(runtime, """
        terminal("cd sub")
        with transaction(verify="pwd; cd /") as tx:
            write_file("here.txt", "1")  # relative to the session's directory, sub/
        with transaction(verify="pwd", workdir=".") as inner:
            pass
        print(json.dumps({"session": tx.verify["output"], "workdir": inner.verify["output"],
                          "after": terminal("pwd")["output"], "changed": tx.changed, "root": tx.root}))
    """))
    sub = str((workspace / "sub").resolve())
    assert found["session"].strip() == sub and found["workdir"].strip() == sub
    assert found["after"].strip() == sub  # the verify's own `cd /` stayed its own
    assert found["changed"] == ["sub/here.txt"] and found["root"] == str(workspace.resolve())


@MODES
def test_an_interrupted_run_is_rolled_back_before_its_result(
    make_runtime: RuntimeFactory, workspace: Path, exec_mode: str
) -> None:
    before = seed(workspace)
    runtime = make_runtime(exec_mode=exec_mode)
    results: list[ExecutionResult] = []
    block = threading.Thread(target=lambda: results.append(run(runtime, """
        import time
        with transaction(verify="true"):
            write_file("keep.txt", "changed")
            terminal("rm gone.txt")
            write_file("ready", "")
            time.sleep(120)
    """, timeout=150)))
    block.start()
    try:
        assert wait_for(lambda: (workspace / "ready").exists(), timeout=60)
        runtime.interrupt()
    finally:
        block.join(180)
    [result] = results
    assert result.status == "interrupted", result
    assert any("still open when the run ended: rolled back (3 path(s)" in note for note in result.notes), result
    assert read_tree(workspace) == before


def test_past_the_snapshot_limits_it_says_so(make_runtime: RuntimeFactory, workspace: Path) -> None:
    seed(workspace)
    big = workspace / "sub" / "big.bin"
    big.write_bytes(b"x" * (2 << 20))
    # Past max_files a block is refused before it runs, and says how to go on.
    runtime = make_runtime(overrides={"checkpoints.max_files": 3, "checkpoints.enabled": False})
    result = run(runtime, """
        try:
            with transaction() as tx:
                write_file("keep.txt", "never written")
        except ToolError as exc:
            print(exc.error_type, exc)
    """)
    assert result.output.startswith("SnapshotError") and "checkpoints.max_files" in result.output, result
    assert (workspace / "keep.txt").read_text() == "original\n"
    # A file past max_file_mb is left out: the rollback undoes the rest and says what it could not.
    runtime = make_runtime(overrides={"checkpoints.max_file_mb": 1})
    found = outcome(run(runtime, """
        with transaction(verify="false") as tx:
            write_file("keep.txt", "changed")
            terminal("printf changed >> sub/big.bin")
    """, PRINT_TX))
    assert found["committed"] is False and found["not_covered"] == ["sub/big.bin"]
    assert "1 path(s) a snapshot limit left out were NOT rolled back" in found["reason"]
    assert (workspace / "keep.txt").read_text() == "original\n"
    assert big.read_bytes().endswith(b"changed")  # not covered: as the block left it
