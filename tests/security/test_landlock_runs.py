"""Real runs under the Landlock fallback (`sandbox.isolation = "landlock"`): the script's own work
(the workspace, tool calls over RPC, parallel() calls) still works, what it must not reach stays
out of reach, and the result's label says what held. Forked by the fork server and spawned, in
host mode and in backend mode, as root here and as the generated non-root user via `herald exec`.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime, Settings
from herald._sandbox.confine import landlock, seccomp
from herald.runtime.sandbox import isolation
from tests.fixtures.users import User
from tests.runtime._helpers import run_ok

pytestmark = pytest.mark.skipif(not landlock.abi_version() or not seccomp.supported(),
                                reason="Landlock or the seccomp socket filter is unsupported here")
LABEL = "landlock (no IP network; host unix sockets reachable)"

SCRIPT = r'''
import json, os, socket
from hermes_tools import parallel, read_file, write_file
found = {}
def attempt(name, action):
    try:
        found[name] = ["ok", action()]
    except Exception as exc:
        found[name] = ["refused", type(exc).__name__]
attempt("write", lambda: open("made-here.txt", "w").write("by the script"))
attempt("rpc", lambda: write_file("made-by-tool.txt", "by a tool") and "called")
attempt("parallel", lambda: [page["content"].count("by") for page in
                              parallel([(read_file, "made-here.txt"), (read_file, "made-by-tool.txt")])])
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"escaped", ("127.0.0.1", UDP_PORT)))
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", TCP_PORT), timeout=10).close())
attempt("shadow", lambda: len(open("/etc/shadow").read()))
attempt("secret_dir", lambda: os.listdir(SECRET_DIR))
with open("/proc/self/status") as f:
    found["caps"] = sorted({line.split()[1] for line in f if line.startswith(("CapEff", "CapPrm", "CapAmb"))})
print(json.dumps(found))
'''


@pytest.fixture
def udp_server() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.setblocking(False)
    yield server
    server.close()


def _script(udp: socket.socket, tcp_port: int, secret_dir: str) -> str:
    """The script: its work, then the attacks; `secret_dir` exists and must not be listable."""
    return f"UDP_PORT = {udp.getsockname()[1]}\nTCP_PORT = {tcp_port}\nSECRET_DIR = {secret_dir!r}\n" + SCRIPT


def _assert_held(found: dict[str, Any], udp: socket.socket) -> None:
    assert found["write"] == ["ok", 13]
    assert found["rpc"] == ["ok", "called"], found["rpc"]
    assert found["parallel"] == ["ok", [1, 1]], found["parallel"]
    for attack in ("udp", "tcp", "shadow", "secret_dir"):
        assert found[attack][0] == "refused", (attack, found[attack])
    assert found["caps"] == ["0000000000000000"]
    with pytest.raises(BlockingIOError):
        udp.recv(64)


@pytest.mark.parametrize("exec_mode", ["host", "backend"])
@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "spawned"])
def test_a_landlock_run_does_its_work_and_nothing_more(
    make_runtime: Callable[..., Runtime], workspace: Path, settings: Settings, listener: int,
    udp_server: socket.socket, fork_server: bool, exec_mode: str,
) -> None:
    runtime = make_runtime(exec_mode=exec_mode, overrides={
        "sandbox.isolation": "landlock", "sandbox.fork_server": fork_server})
    for _ in range(2):  # the second run is a fresh fork / child of the same confinement
        result = run_ok(runtime, _script(udp_server, listener, str(settings.data_dir)))
        assert result.isolation == LABEL
        _assert_held(json.loads(result.output), udp_server)
    assert (workspace / "made-here.txt").read_text() == "by the script"
    assert (workspace / "made-by-tool.txt").read_text() == "by a tool"


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "spawned"])
def test_herald_data_inside_the_workspace_stays_out_of_reach(
    make_runtime: Callable[..., Runtime], workspace: Path, fork_server: bool,
) -> None:
    """Landlock cannot grant a directory minus one entry: the workspace's own entries and
    subdirectories stay the script's, but it cannot add entries at the top of a directory that
    holds a masked path (its tools can), and the masked directory's names can be listed."""
    data = workspace / ".herald-data"
    (workspace / "src").mkdir()
    (workspace / "notes.txt").write_text("old")
    runtime = make_runtime(overrides={"sandbox.isolation": "landlock", "sandbox.fork_server": fork_server,
                                      "data_dir": str(data)})
    run_ok(runtime, "print(1)")  # a transcript now exists in the data dir
    assert any(data.rglob("*.jsonl"))
    result = run_ok(
        runtime,
        """
        import json, os
        from hermes_tools import write_file
        found = {}
        def attempt(name, action):
            try:
                found[name] = ["ok", action()]
            except Exception as exc:
                found[name] = ["refused", type(exc).__name__]
        attempt("list_data", lambda: os.listdir(".herald-data"))
        attempt("read_transcript",
                lambda: [open(os.path.join(d, f)).read() for d, _, fs in os.walk(".herald-data") for f in fs])
        attempt("plant_in_data", lambda: open(".herald-data/planted", "w").write("x"))
        attempt("subdir", lambda: open("src/new.py", "w").write("x = 1"))
        attempt("existing", lambda: open("notes.txt", "w").write("new"))
        attempt("top_level", lambda: open("top.txt", "w").write("x"))
        attempt("tool_top_level", lambda: write_file("top-by-tool.txt", "x") and "called")
        print(json.dumps(found))
    """,
    )
    found = json.loads(result.output)
    # Listing is granted to the workspace and so beneath it: the names show, never the contents.
    for attack in ("read_transcript", "plant_in_data"):
        assert found[attack][0] == "refused", (attack, found[attack])
    assert found["subdir"] == ["ok", 5] and found["existing"] == ["ok", 3]
    assert found["top_level"] == ["refused", "PermissionError"]
    assert found["tool_top_level"] == ["ok", "called"]
    assert not (data / "planted").exists()


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "spawned"])
def test_a_landlock_run_on_the_ssh_backend_holds_the_same(
    sshd: Any, settings: Settings, listener: int, udp_server: socket.socket, fork_server: bool,
) -> None:
    """The same _sandbox code confines the script on the SSH host, as the sshd fixture's user
    (non-root when we are root); its ~/.ssh is the secret."""
    from herald.backends.ssh import SSHBackend

    ssh_dir = Path(sshd.home) / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    workspace = sshd.make_workspace()
    overrides = {"sandbox.isolation": "landlock", "sandbox.fork_server": fork_server}
    backend = SSHBackend(sshd.spec, cwd=workspace, settings=settings.with_overrides(sshd.overrides()))
    runtime = Runtime(backend, settings=settings.with_overrides(overrides), exec_mode="backend", transcript=False)
    try:
        for _ in range(2):
            result = run_ok(runtime, _script(udp_server, listener, str(ssh_dir)))
            assert result.isolation == LABEL
            _assert_held(json.loads(result.output), udp_server)
        assert Path(workspace, "made-here.txt").read_text() == "by the script"
    finally:
        runtime.close()
        backend.close()
        sshd.remove_workspace(workspace)


def test_a_non_root_user_gets_the_same_landlock_run(nonroot: User, listener: int, udp_server: socket.socket) -> None:
    work = nonroot.run(["mktemp", "-d"]).stdout.strip()
    done = nonroot.herald("exec", "--json", "--cwd", work, "-c", "sandbox.isolation=landlock", "-",
                          input=_script(udp_server, listener, f"{nonroot.home}/.local/share/herald"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["isolation"] == LABEL
    _assert_held(json.loads(result["output"]), udp_server)


def test_the_label_names_the_landlock_coverage() -> None:
    assert isolation.Isolation("landlock").describe == LABEL
    assert isolation.Isolation("landlock", network="host").describe == "landlock (host network)"
    assert isolation.Isolation("bwrap").describe == "bwrap (no network)"


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "spawned"])
def test_a_deep_sandbox_directory_still_reaches_herald_under_landlock(
    tmp_path: Path, workspace: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch, fork_server: bool,
) -> None:
    """A TMPDIR too deep for a socket path, in backend mode: the RPC socket must not become an
    abstract name, which Landlock's scoping (ABI >= 6) keeps the script from reaching."""
    from herald.backends.local import LocalBackend

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    overrides = {"sandbox.isolation": "landlock", "sandbox.fork_server": fork_server}
    with LocalBackend(str(workspace), settings=settings) as backend:
        runtime = Runtime(backend, settings=settings.with_overrides(overrides), exec_mode="backend", transcript=False)
        try:
            result = run_ok(runtime, "from hermes_tools import terminal\nprint(terminal('echo reached')['output'])")
            assert (result.output, result.isolation) == ("reached\n", LABEL)
        finally:
            runtime.close()
