"""In-backend execution, as an attacker sees it: the script runs on the backend next to its
supervisor, and on the local and SSH backends (the test sshd is this machine, so it has bwrap)
it runs under bwrap there, forked by the backend's zygote or spawned by the supervisor.

The script cannot see the supervisor or Herald in /proc, cannot read the backend user's ~/.ssh
(even when the workspace is that home), cannot write outside the workspace (the sandbox files the
next supervisor imports included), has no network, and nothing it starts outlives the run. The
SSH cases run as the sshd fixture's user (non-root when we are root); the local ones as root here
and as the generated non-root user through `herald exec --exec-mode backend`.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime, Settings
from herald._sandbox.confine import landlock
from herald.backends.base import Backend
from herald.backends.local import LocalBackend
from herald.runtime.sandbox import isolation
from tests.fixtures.users import User
from tests.runtime._backend_mode import gone_on_backend, remote_pids, unique_sleep
from tests.runtime._helpers import run_ok, wait_for
from tests.security.test_run_containment import _escapes

SECRET = "herald-backend-isolation-secret"
pytestmark = pytest.mark.skipif(isolation.bwrap_problem() is not None,
                                reason=f"bubblewrap unusable here: {isolation.bwrap_problem()}")

# Every answer in JSON; HOME_DIR, SSH_SECRET and PORT are prepended. Without a PID namespace (Landlock) the
# script sees every process of the machine: it reports how many and a bounded sample, so the answer stays well
# inside the output budget on a busy machine (a long list would be cut and no longer parse).
ATTACK = r'''
import json, os, socket, hermes_tools
found = {"processes": 0, "cmdlines": []}
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            cmdline = open("/proc/%s/cmdline" % entry, "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        found["processes"] += 1
        if len(found["cmdlines"]) < 20:
            found["cmdlines"].append(cmdline[:300])
def attempt(name, action):
    try:
        found[name] = ["ok", action()]
    except Exception as exc:
        found[name] = ["refused", type(exc).__name__]
package = os.path.dirname(hermes_tools.__file__)
attempt("read_ssh", lambda: open(SSH_SECRET).read())
attempt("write_home", lambda: open(os.path.join(HOME_DIR, "planted-by-script"), "w").write("x"))
attempt("write_etc", lambda: open("/etc/herald-backend-isolation-test", "w").write("x"))
attempt("write_sandbox_files", lambda: open(os.path.join(package, "hermes_tools.py"), "a").write("# planted"))
attempt("write_workspace", lambda: open("from-script.txt", "w").write("made in the sandbox"))
attempt("connect", lambda: socket.create_connection(("127.0.0.1", PORT), timeout=5).close())
print(json.dumps(found))
'''


def _attack(home: str, ssh_secret: str, port: int) -> str:
    return f"HOME_DIR = {home!r}\nSSH_SECRET = {ssh_secret!r}\nPORT = {port}\n" + ATTACK


def _assert_confined(found: dict[str, Any], home: str, workspace_is_home: bool) -> None:
    visible = " | ".join(found["cmdlines"])
    assert found["processes"] < 10, visible  # so the sample below is every process the script sees
    with open("/proc/self/cmdline", "rb") as f:
        herald = f.read().replace(b"\0", b" ").decode()
    assert herald[:300] not in found["cmdlines"], f"the script sees Herald: {visible}"
    for outsider in ("supervisor.loop import main", "sshd:"):
        assert outsider not in visible, f"the script sees {outsider!r}: {visible}"
    for attack in ("read_ssh", "write_etc", "write_sandbox_files", "connect"):
        assert found[attack][0] == "refused", (attack, found[attack])
    assert found["write_workspace"] == ["ok", 19]
    assert not os.path.exists("/etc/herald-backend-isolation-test")
    # Outside the workspace the home's path is a directory of the sandbox's own (bwrap makes the
    # parents of a bind): a write there lands nowhere on the backend's disk.
    assert os.path.exists(os.path.join(home, "planted-by-script")) == workspace_is_home, found["write_home"]


@pytest.fixture
def ssh_secret_home(sshd: Any) -> Iterator[tuple[str, str]]:
    """The SSH user's home with a private key in ~/.ssh: (home, key path)."""
    entry = pwd.getpwnam(sshd.user)
    ssh_dir = Path(sshd.home) / ".ssh"
    made = not ssh_dir.exists()
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    key = ssh_dir / f"id_herald_test_{os.getpid()}"
    key.write_text(f"PRIVATE KEY {SECRET}\n")
    key.chmod(0o600)
    for path in (ssh_dir, key):
        os.chown(path, entry.pw_uid, entry.pw_gid)
    yield sshd.home, str(key)
    key.unlink(missing_ok=True)
    if made:
        shutil.rmtree(ssh_dir, ignore_errors=True)


@pytest.fixture
def local_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A home with a private key, which the local backend's user (HOME) has: (home, key path)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(f"PRIVATE KEY {SECRET}\n")
    monkeypatch.setenv("HOME", str(home))
    return str(home), str(home / ".ssh" / "id_ed25519")


def _runtime(backend: Backend, settings: Settings, made: list[Runtime], **overrides: Any) -> Runtime:
    runtime = Runtime(backend, settings=settings.with_overrides(overrides), exec_mode="backend", transcript=False)
    made.append(runtime)
    return runtime


@pytest.fixture
def runtimes() -> Iterator[list[Runtime]]:
    made: list[Runtime] = []
    yield made
    for runtime in made:
        runtime.close()


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "spawned"])
@pytest.mark.parametrize("workspace_is_home", [False, True], ids=["workspace", "home-as-workspace"])
def test_ssh_script_is_confined_on_the_backend(
    sshd: Any, ssh_secret_home: tuple[str, str], settings: Settings, listener: int, runtimes: list[Runtime],
    fork_server: bool, workspace_is_home: bool,
) -> None:
    from herald.backends.ssh import SSHBackend

    home, key = ssh_secret_home
    workspace = home if workspace_is_home else sshd.make_workspace()
    backend = SSHBackend(sshd.spec, cwd=workspace, settings=settings.with_overrides(sshd.overrides()))
    try:
        runtime = _runtime(backend, settings, runtimes, **{"sandbox.fork_server": fork_server})
        for _ in range(2):  # the first run may be spawned while the zygote starts; the second is forked
            result = run_ok(runtime, _attack(home, key, listener))
            assert result.isolation == "bwrap (no network)"
            _assert_confined(json.loads(result.output), home, workspace_is_home)
        assert Path(workspace, "from-script.txt").read_text() == "made in the sandbox"
    finally:
        for runtime in runtimes:
            runtime.close()
        backend.close()
        Path(home, "planted-by-script").unlink(missing_ok=True)
        Path(home, "from-script.txt").unlink(missing_ok=True)
        if not workspace_is_home:
            sshd.remove_workspace(workspace)


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "spawned"])
@pytest.mark.parametrize("workspace_is_home", [False, True], ids=["workspace", "home-as-workspace"])
def test_local_script_is_confined_on_the_backend(
    workspace: Path, local_home: tuple[str, str], settings: Settings, listener: int, runtimes: list[Runtime],
    fork_server: bool, workspace_is_home: bool,
) -> None:
    home, key = local_home
    cwd = home if workspace_is_home else str(workspace)
    with LocalBackend(cwd, settings=settings) as backend:
        runtime = _runtime(backend, settings, runtimes, **{"sandbox.fork_server": fork_server})
        for _ in range(2):
            result = run_ok(runtime, _attack(home, key, listener))
            assert result.isolation == "bwrap (no network)"
            _assert_confined(json.loads(result.output), home, workspace_is_home)
        runtime.close()
    assert Path(cwd, "from-script.txt").read_text() == "made in the sandbox"


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "spawned"])
@pytest.mark.parametrize("ending", ["success", "timeout"])
@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_nothing_the_script_started_outlives_the_run(
    request: pytest.FixtureRequest, kind: str, settings: Settings, runtimes: list[Runtime], fork_server: bool,
    ending: str,
) -> None:
    backend: Backend = request.getfixturevalue(f"{kind}_backend")
    runtime = _runtime(backend, settings, runtimes, **{"sandbox.fork_server": fork_server})
    run_ok(runtime, "print('warm')")  # the zygote is up (or not, when spawned) before the attack
    marker = unique_sleep()
    code = _escapes(marker) + ("" if ending == "success" else "time.sleep(300)\n")
    result = runtime.execute(code, timeout=3 if ending == "timeout" else 120)
    assert result.status == ending, result
    assert result.isolation == "bwrap (no network)"
    assert gone_on_backend(backend, marker), f"left running after {ending}: {remote_pids(backend, marker)}"


def test_isolation_none_is_said_on_every_result(
    local_backend: LocalBackend, settings: Settings, runtimes: list[Runtime]
) -> None:
    runtime = _runtime(local_backend, settings, runtimes, **{"sandbox.isolation": "none"})
    result = run_ok(runtime, "import os\nprint(len([p for p in os.listdir('/proc') if p.isdigit()]) > 10)")
    assert result.isolation == 'none (sandbox.isolation = "none")'
    assert result.output == "True\n"  # it sees the machine's processes, as the result says


def test_a_backend_without_bwrap_falls_back_and_says_so() -> None:
    """What the backend's probe answers decides; a downgrade is named with its reason."""
    asked = isolation.request(Settings(), "/work")
    without = {"bwrap": "", "bwrap_problem": "bwrap is not installed (Debian: apt-get install bubblewrap)"}
    settled = isolation.settle(asked, {**without, "landlock": 0}, "the ssh backend")
    assert settled.describe == ("none (neither bwrap (bwrap is not installed (Debian: apt-get install bubblewrap)) "
                                "nor Landlock is usable the ssh backend)")
    fallback = isolation.settle(asked, {**without, "landlock": 4}, "the ssh backend")
    assert fallback.describe.startswith(
        "landlock (no IP network; host unix sockets reachable; bwrap unusable on the ssh backend: bwrap is not"
    )
    with pytest.raises(ValueError, match=r"sandbox\.isolation = \"bwrap\" but bwrap is not installed"):
        isolation.settle(isolation.request(Settings().with_overrides({"sandbox.isolation": "bwrap"}), "/w"),
                         {**without, "landlock": 4}, "the ssh backend")


@pytest.mark.skipif(not landlock.abi_version(), reason="this kernel has no Landlock")
@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "spawned"])
def test_landlock_confines_the_script_on_the_backend(
    workspace: Path, local_home: tuple[str, str], settings: Settings, listener: int, runtimes: list[Runtime],
    fork_server: bool,
) -> None:
    home, key = local_home
    with LocalBackend(str(workspace), settings=settings) as backend:
        runtime = _runtime(backend, settings, runtimes,
                           **{"sandbox.isolation": "landlock", "sandbox.fork_server": fork_server})
        for _ in range(2):
            result = run_ok(runtime, _attack(home, key, listener))
            assert result.isolation == "landlock (no IP network; host unix sockets reachable)"
            found = json.loads(result.output)
            for attack in ("read_ssh", "write_home", "write_etc", "write_sandbox_files", "connect"):
                assert found[attack][0] == "refused", (attack, found[attack])
            assert found["write_workspace"] == ["ok", 19]
        runtime.close()


def test_a_non_root_user_is_confined_on_the_local_backend(nonroot: User, listener: int) -> None:
    home = nonroot.home
    secret = os.path.join(home, ".ssh", "id_herald_test")
    nonroot.run(["sh", "-c", f"umask 077 && mkdir -p {home}/.ssh && echo {SECRET} > {secret}"]).check_returncode()
    work = nonroot.run(["mktemp", "-d"]).stdout.strip()
    done = nonroot.herald("exec", "--json", "--exec-mode", "backend", "--cwd", work, "-",
                          input=_attack(home, secret, listener), cwd=work)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["isolation"] == "bwrap (no network)", result
    _assert_confined(json.loads(result["output"]), home, workspace_is_home=False)


def _supervisors_of(sandbox_dir: str) -> list[int]:
    """The supervisors (outside the sandbox) serving runs from `sandbox_dir`, found on this machine."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(b"supervisor.loop import main" in arg for arg in argv) and sandbox_dir.encode() in argv:
            found.append(int(entry))
    return found


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "spawned"])
@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_a_killed_supervisor_takes_the_confined_tree_with_it(
    request: pytest.FixtureRequest, kind: str, settings: Settings, runtimes: list[Runtime], fork_server: bool,
) -> None:
    backend: Backend = request.getfixturevalue(f"{kind}_backend")
    runtime = _runtime(backend, settings, runtimes, **{"sandbox.fork_server": fork_server})
    run_ok(runtime, "print('warm')")
    marker = unique_sleep()
    code = ("import hermes_tools, os\n"
            "open('sandbox-dir.txt', 'w').write(os.path.dirname(hermes_tools.__file__))\n"
            + _escapes(marker) + "time.sleep(300)\n")
    results: list[Any] = []
    runner = threading.Thread(target=lambda: results.append(runtime.execute(code, timeout=120)))
    runner.start()
    try:
        assert wait_for(lambda: len(remote_pids(backend, marker)) >= 3, timeout=60, step=0.1)
        sandbox_dir = backend.read_bytes("sandbox-dir.txt").decode()
        supervisors = _supervisors_of(sandbox_dir)
        assert supervisors, f"no supervisor of {sandbox_dir} found"
        for pid in supervisors:  # the run's, and its warm successor's
            os.kill(pid, signal.SIGKILL)
    finally:
        runner.join(timeout=150)
    assert results and results[0].status == "error", results
    assert gone_on_backend(backend, marker), f"left running: {remote_pids(backend, marker)}"
    runtime.execute("print(1)")  # its warm child lost its supervisor too: this run may say so
    assert run_ok(runtime, "print('next run works')").output == "next run works\n"


def test_a_deep_sandbox_directory_still_reaches_herald_from_inside_bwrap(
    tmp_path: Path, workspace: Path, settings: Settings, runtimes: list[Runtime], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A TMPDIR too deep for a socket path: the RPC socket is reached through its directory, not
    an abstract name, which the script's own network namespace would not see."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    with LocalBackend(str(workspace), settings=settings) as backend:
        runtime = _runtime(backend, settings, runtimes)
        result = run_ok(runtime, "from hermes_tools import terminal\nprint(terminal('echo reached')['output'])")
        assert (result.output, result.isolation) == ("reached\n", "bwrap (no network)")
        runtime.close()
