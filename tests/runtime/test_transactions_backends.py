"""`with transaction(verify=...)` on every backend that runs here (local, SSH through the sshd
fixture, Docker through the dockerd fixture), in host and backend mode: a 200-file patch whose
verify fails leaves every file byte for byte as before (content, modes, links, empty
directories), including what `terminal` created, deleted or changed in the block; one whose
verify passes keeps every change; a run that times out mid-block, or whose supervisor is killed
mid-block, is rolled back before its result comes; what another run (a direct call) writes
meanwhile is kept. The workspace is looked at through the backend itself (a python3 there).
"""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from herald import Runtime, Settings
from herald.backends.base import Backend

from ._backend_mode import exec_backend
from ._helpers import script, wait_for

__all__ = ["exec_backend"]  # a fixture, used by name

FILES = 200

# Run on the backend, in the workspace: 200 modules over nested directories, modes, a link, an empty dir.
BUILD = f"""
import os
for i in range({FILES}):
    folder = os.path.join("src", "p%d" % (i % 7))
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "m%03d.py" % i)
    with open(path, "w") as fh:
        fh.write("VALUE = %d\\n\\ndef old_name():\\n    return VALUE\\n" % i)
    if i % 9 == 0:
        os.chmod(path, 0o755)
os.makedirs("empty/deeper", exist_ok=True)
os.symlink("src/p0/m000.py", "link-in")
"""

# Run on the backend: every entry below the workspace, its kind, mode and bytes' digest or link target.
STATE = """
import hashlib, json, os, stat
state = {}
for folder, dirs, files in os.walk("."):
    for name in dirs + files:
        path = os.path.join(folder, name)
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            state[path] = ["link", os.readlink(path)]
        elif stat.S_ISDIR(info.st_mode):
            state[path] = ["dir", stat.S_IMODE(info.st_mode)]
        else:
            with open(path, "rb") as fh:
                state[path] = ["file", stat.S_IMODE(info.st_mode), hashlib.sha256(fh.read()).hexdigest()]
print(json.dumps(state, sort_keys=True))
"""

# The model's script: every module patched through the file tools, more through terminal.
BLOCK = """
import json
from hermes_tools import parallel, patch, terminal, transaction, write_file
paths = ["src/p%d/m%03d.py" % (i % 7, i) for i in range({files})]
with transaction(verify={verify!r}) as tx:
    parallel([(patch, path, "def old_name():", "def new_name():") for path in paths])
    write_file("src/new_by_tool.py", "made = 1\\n")
    terminal("echo made > made_by_terminal.txt && rm src/p0/m000.py && rm -r empty/deeper && "
             "chmod 600 src/p1/m001.py && ln -sfn src/p2/m002.py link-in && mkdir -p newdir/sub && "
             "printf more >> src/p3/m003.py")
    print("block done", flush=True)
    {tail}
print(json.dumps({{"committed": tx.committed, "changed": tx.changed, "count": tx.changed_count,
                  "verify": tx.verify, "reason": tx.reason}}))
"""


def on_backend(backend: Backend, source: str) -> str:
    result = backend.run(f"python3 -c {shlex.quote(source)}", timeout=120)
    assert result.exit_code == 0, result.output
    return result.output


def workspace_state(backend: Backend) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(on_backend(backend, STATE).strip().splitlines()[-1])
    return state


@pytest.fixture(params=["host", "backend"])
def tx_runtime(request: pytest.FixtureRequest, exec_backend: Backend, settings: Settings) -> Iterator[Runtime]:
    on_backend(exec_backend, BUILD)
    overrides = {"sandbox.max_stdout_bytes": 1_000_000, "sandbox.backend_tools": True}
    with Runtime(exec_backend, settings=settings.with_overrides(overrides), exec_mode=request.param,
                 transcript=False) as runtime:
        yield runtime


def run_block(runtime: Runtime, verify: str, tail: str = "", timeout: float = 300) -> Any:
    return runtime.execute(BLOCK.format(files=FILES, verify=verify, tail=tail or "pass"), timeout=timeout)


def test_failed_verify_leaves_every_file_as_before(tx_runtime: Runtime, exec_backend: Backend) -> None:
    before = workspace_state(exec_backend)
    result = run_block(tx_runtime, "grep -q never_there src/p4/m004.py")
    assert result.status == "success", result
    outcome = json.loads(result.output.splitlines()[-1])
    assert outcome["committed"] is False
    assert outcome["verify"]["exit_code"] == 1 and "exited with status 1" in outcome["reason"]
    # Every module, the tool's new file and all terminal did, then rolled back.
    assert outcome["count"] >= FILES + 4, outcome
    assert workspace_state(exec_backend) == before


def test_passed_verify_keeps_every_change(tx_runtime: Runtime, exec_backend: Backend) -> None:
    before = workspace_state(exec_backend)
    result = run_block(tx_runtime, "grep -q new_name src/p4/m004.py")
    assert result.status == "success", result
    outcome = json.loads(result.output.splitlines()[-1])
    assert outcome["committed"] is True and outcome["reason"] is None and outcome["verify"]["exit_code"] == 0
    after = workspace_state(exec_backend)
    patched = [path for path in before if path.startswith("./src/p") and path.endswith(".py")]
    assert len(patched) == FILES
    for path in patched:
        if path != "./src/p0/m000.py":
            assert after[path] != before[path], path  # each module's bytes changed
    text = on_backend(exec_backend, "import glob\nprint(sum('def new_name' in open(p).read() "
                                    "for p in glob.glob('src/p*/m*.py')))")
    assert int(text.strip()) == FILES - 1
    assert "./src/p0/m000.py" not in after and "./empty/deeper" not in after
    assert after["./made_by_terminal.txt"][0] == "file" and after["./newdir/sub"][0] == "dir"
    assert after["./src/new_by_tool.py"][0] == "file"
    assert after["./link-in"] == ["link", "src/p2/m002.py"]
    assert after["./src/p1/m001.py"][1] == 0o600
    assert "src/new_by_tool.py" in outcome["changed"] and "made_by_terminal.txt" in outcome["changed"]


def test_a_timeout_mid_block_rolls_back(tx_runtime: Runtime, exec_backend: Backend) -> None:
    before = workspace_state(exec_backend)
    # Whenever the deadline lands (patching, or the sleep after the block's work), all is undone.
    result = run_block(tx_runtime, "true", tail="import time; time.sleep(600)", timeout=12)
    assert result.status == "timeout", result
    [note] = [note for note in result.notes if "still open when the run ended: rolled back" in note]
    if "block done" in result.output:  # the deadline came after the block's work: all of it was undone
        restored = int(note.split("(", 1)[1].split(" ", 1)[0])
        assert restored >= FILES, note
    assert workspace_state(exec_backend) == before


def test_what_another_run_writes_meanwhile_is_kept(tx_runtime: Runtime, exec_backend: Backend) -> None:
    before = workspace_state(exec_backend)
    results: list[Any] = []
    block = threading.Thread(target=lambda: results.append(tx_runtime.execute(script("""
        import json, time
        from hermes_tools import ToolError, read_file, transaction, write_file
        with transaction(verify="false") as tx:
            write_file("src/ours.txt", "ours\\n")
            write_file("src/p5/m005.py", "ours\\n")
            write_file("ready", "")
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    read_file("go")
                    break
                except ToolError:
                    time.sleep(0.05)
        print(json.dumps({"committed": tx.committed, "conflicts": tx.conflicts}))
    """), timeout=150, max_tool_calls=100_000)))
    block.start()
    try:
        assert wait_for(lambda: exec_backend.stat(f"{exec_backend.cwd}/ready") is not None, timeout=120, step=0.1)
        for name in ("theirs.txt", "src/p5/m005.py", "go"):
            reply = tx_runtime.dispatcher.call_direct("write_file", {"path": name, "content": "theirs\n"})
            assert "error" not in reply, reply
    finally:
        block.join(180)
    [result] = results
    assert result.status == "success", result
    outcome = json.loads(result.output.splitlines()[-1])
    assert outcome == {"committed": False, "conflicts": ["go", "src/p5/m005.py", "theirs.txt"]}
    after = workspace_state(exec_backend)
    for kept in ("./go", "./theirs.txt", "./src/p5/m005.py"):
        assert after.pop(kept)[0] == "file"
    before.pop("./src/p5/m005.py")
    assert after == before  # the block's own changes undone, the other run's kept
    text = on_backend(exec_backend, "print(open('src/p5/m005.py').read(), end='')")
    assert text.strip() == "theirs"


def test_a_supervisor_killed_mid_block_is_rolled_back(exec_backend: Backend, settings: Settings) -> None:
    on_backend(exec_backend, BUILD)
    before = workspace_state(exec_backend)
    # The script plays a crash of its supervisor, which it must see to kill: spawned (its parent)
    # and unconfined (isolation hides it), as in test_backend_mode.py.
    overrides = {"sandbox.fork_server": False, "sandbox.isolation": "none", "sandbox.backend_tools": True}
    with Runtime(exec_backend, settings=settings.with_overrides(overrides), exec_mode="backend",
                 transcript=False) as runtime:
        result = runtime.execute(script("""
            import os, signal
            from hermes_tools import terminal, transaction, write_file
            with transaction(verify="true"):
                write_file("src/p0/m000.py", "changed\\n")
                terminal("rm -r empty && echo made > made.txt")
                os.kill(os.getppid(), signal.SIGKILL)   # the supervisor on the backend
                import time; time.sleep(30)
        """), timeout=60)
    assert result.status == "error" and "stopped unexpectedly" in result.error, result
    assert any("still open when the run ended: rolled back" in note for note in result.notes), result.notes
    assert workspace_state(exec_backend) == before
