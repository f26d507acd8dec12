"""What another run of the session writes while a script's transaction is open: direct tool
calls, as an MCP client or the agent makes them beside a script (runs of one Runtime take turns,
kernel cells too, so a direct call is the other run that can act meanwhile). On the local
backend, in host and backend mode (SSH and Docker: test_transactions_backends.py): kept on
rollback and reported as conflicts, a terminal command's changes rolled back and said so, and
no write lost to a rollback acting at the same moment.
"""

from __future__ import annotations

import threading
from pathlib import Path

from herald import ExecutionResult

from ._helpers import wait_for
from ._transactions import MANY_CALLS, MODES, PRINT_TX, RuntimeFactory, outcome, run, seed


@MODES
def test_what_another_run_writes_meanwhile_is_kept_and_reported(
    make_runtime: RuntimeFactory, workspace: Path, exec_mode: str
) -> None:
    seed(workspace)
    runtime = make_runtime(exec_mode=exec_mode, overrides=MANY_CALLS)
    results: list[ExecutionResult] = []
    block = threading.Thread(target=lambda: results.append(run(runtime, """
        import time
        with transaction(verify="false") as tx:
            write_file("shared.txt", "ours\\n")
            write_file("ours.txt", "ours\\n")
            write_file("ready", "")
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    read_file("go")
                    break
                except ToolError:
                    time.sleep(0.02)
    """, PRINT_TX, timeout=150)))
    block.start()
    try:
        assert wait_for(lambda: (workspace / "ready").exists(), timeout=60)
        for name, content in [("other.txt", "theirs\n"), ("shared.txt", "theirs\n")]:
            reply = runtime.dispatcher.call_direct("write_file", {"path": name, "content": content})
            assert "error" not in reply, reply
        reply = runtime.dispatcher.call_direct("terminal", {"command": "echo cmd > by_their_command.txt"})
        assert "error" not in reply, reply
        assert "error" not in runtime.dispatcher.call_direct("write_file", {"path": "go", "content": ""})
    finally:
        block.join(180)
    found = outcome(results[0])
    assert found["committed"] is False
    assert found["conflicts"] == ["go", "other.txt", "shared.txt"]
    assert "1 terminal command(s)" in found["reason"]
    assert (workspace / "other.txt").read_text() == "theirs\n" and (workspace / "shared.txt").read_text() == "theirs\n"
    assert not (workspace / "ours.txt").exists() and not (workspace / "ready").exists()
    # A command's changes cannot be told from the block's: rolled back with them, as the reason says.
    assert not (workspace / "by_their_command.txt").exists()


@MODES
def test_no_write_of_another_run_is_lost_to_a_rollback_at_the_same_moment(
    make_runtime: RuntimeFactory, workspace: Path, exec_mode: str
) -> None:
    seed(workspace)
    runtime = make_runtime(exec_mode=exec_mode, overrides=MANY_CALLS)
    done = threading.Event()
    written: list[str] = []

    def other_run() -> None:  # direct calls while the script's blocks roll back, bounded in count
        for k in range(1500):
            if done.is_set():
                return
            name = f"theirs_{k}.txt"
            reply = runtime.dispatcher.call_direct("write_file", {"path": name, "content": f"{k}\n"})
            assert "error" not in reply, reply
            written.append(name)

    writer = threading.Thread(target=other_run)
    writer.start()
    try:
        result = run(runtime, """
            import time
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # the other run has begun
                try:
                    read_file("theirs_0.txt")
                    break
                except ToolError:
                    time.sleep(0.02)
            rolled = 0
            for round in range(15):
                with transaction(verify="false") as tx:
                    for i in range(10):
                        write_file("ours_%d.txt" % i, "ours")
                rolled += not tx.committed
            print(json.dumps({"rolled": rolled}))
        """, timeout=240)
    finally:
        done.set()
        writer.join(120)
    assert outcome(result)["rolled"] == 15
    assert written, "the other run wrote nothing while the blocks ran"
    for name in written:
        assert (workspace / name).read_text() == f"{name[7:-4]}\n", name
    assert not list(workspace.glob("ours_*"))
