"""Read-only `terminal` is confined by the OS, not by the parser: an attacker's view.

Each known parser bypass (ANSI-C quoting, abbreviated long options, bundled short options) is
refused by the allow-list; then the command bash would have run is let through by an `allow`
rule, as a remaining parser gap would let it through, and the OS must stop it: no file written
in the workspace, in the host's /tmp, in /dev/shm or (as root) under /etc; no TCP connection to a
listener on 127.0.0.1 and no connection to a unix socket. Run as root and as a generated
non-root user, directly and from scripts (host and backend mode), locally and over SSH (the
sshd fixture is this machine: bwrap works for its user); Docker refuses, saying how to opt in.
`cd` carries over; workspace-write is unchanged.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime, Settings
from herald._sandbox.confine.readonly import local_confinement
from herald.backends.base import Backend
from herald.backends.local import LocalBackend
from herald.policy import Policy, parse_rule
from herald.policy.shell import readonly_refusal
from tests.fixtures.users import User

from .conftest import direct

CONFINEMENT, PROBLEM = local_confinement()
needs_bwrap = pytest.mark.skipif(CONFINEMENT is None, reason=f"bwrap cannot confine here: {PROBLEM}")
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
RULES = [f"allow terminal command={word}" for word in ("find", "rg", "sort", "git", "date", "file", "touch", "sh",
                                                          "printenv", PYTHON)]
DENIED = ("Read-only file system", "Operation not permitted", "Connection refused", "Network is unreachable",
          "Permission denied")
MAGIC = "0\tstring\tHERALD\therald test data\n"

# A script's side of the attack: each command through hermes_tools.terminal, the answers as JSON.
SCRIPT = r'''
import json, hermes_tools
found = []
for command in json.loads(COMMANDS):
    try:
        reply = hermes_tools.terminal(command)
        found.append(["ran", reply["exit_code"], reply["output"][-300:]])
    except hermes_tools.ToolError as exc:
        found.append([exc.error_type, 0, str(exc)[:300]])
print(json.dumps(found))
'''


@dataclass
class Targets:
    """Where an escape would leave a file, and the listeners it would reach."""

    workspace: str
    host_tmp: str  # outside the workspace, in the host's /tmp, writable by the user
    tcp: socket.socket
    unix: socket.socket
    unix_path: str

    def paths(self, tag: str) -> list[str]:
        places = [os.path.join(self.workspace, tag), os.path.join(self.host_tmp, tag)]
        if os.access("/dev/shm", os.W_OK):
            places.append(f"/dev/shm/herald-ro-{os.getpid()}-{tag}")
        if os.geteuid() == 0:
            places.append(f"/etc/herald-ro-{os.getpid()}-{tag}")
        return places

    def writes(self, tag: str) -> str:
        return "; ".join(f"echo pwned > {p}" for p in self.paths(tag))

    def escapes(self) -> list[tuple[str, str]]:
        """(the parser bypass, the command bash runs for it): each must be refused, then stopped."""
        write = self.writes("find")
        pairs = [
            (f"find . -maxdepth 0 $'-exec' sh -c '{write}' \\;", f"find . -maxdepth 0 -exec sh -c '{write}' \\;"),
            ("rg $'--pre=sh' -e . evil.sh", "rg --pre=sh -e . evil.sh"),
            (
                "git grep --open-files-in-pag='sh evil-pager.sh' -e pwn",
                "git grep --open-files-in-pager='sh evil-pager.sh' -e pwn",
            ),
            ("file -kC -m magic", "file -C -m magic"),
            (f"date --s=@{int(time.time())}", f"date --set=@{int(time.time())}"),
        ]
        pairs += [(f"sort --o={p} a.txt", f"sort --output={p} a.txt") for p in self.paths("sort")]
        return pairs

    def direct_writes(self) -> list[str]:
        """Commands the allow-list would refuse outright, let through by a rule."""
        connect_tcp = f"import socket; socket.create_connection(('127.0.0.1', {self.tcp.getsockname()[1]}), 5)"
        connect_unix = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{self.unix_path}')"
        return [
            "touch " + " ".join(self.paths("touch")),
            f"sh -c '{self.writes('sh')}'",
            f'{PYTHON} -c "{connect_tcp}"',
            f'{PYTHON} -c "{connect_unix}"',
        ]

    def plant(self) -> None:
        """The workspace's files the escapes use (a read-only session cannot make them)."""
        work = Path(self.workspace)
        (work / "a.txt").write_text("pwn\n")
        (work / "evil.sh").write_text(self.writes("rg") + "\n")
        (work / "evil-pager.sh").write_text(self.writes("git") + "\n")
        (work / "magic").write_text(MAGIC)
        env = {"PATH": "/usr/bin:/bin", "HOME": self.workspace, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_COUNT": "1",
               "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}  # made here, owned by another user
        for argv in (["git", "init", "-q"], ["git", "add", "a.txt"]):
            subprocess.run(argv, cwd=work, env=env, check=True, capture_output=True)

    def assert_nothing_escaped(self) -> None:
        written = [
            p for tag in ("find", "rg", "git", "sort", "touch", "sh") for p in self.paths(tag) if os.path.lexists(p)
        ]
        written += [str(p) for p in Path(self.workspace).glob("*.mgc")]
        assert not written, f"a confined command wrote {written}"
        for server in (self.tcp, self.unix):
            server.setblocking(False)
            with pytest.raises(BlockingIOError):  # a connection made would wait in the backlog
                server.accept()[0].close()


@pytest.fixture
def targets(tmp_path: Path) -> Iterator[Targets]:
    yield from _targets(str(tmp_path / "work-ro"), str(tmp_path / "host-tmp"))


def _targets(workspace: str, host_tmp: str, owner: tuple[int, int] | None = None) -> Iterator[Targets]:
    """The targets, with the workspace's files owned by `owner` (uid, gid) when given."""
    for path in (workspace, host_tmp):
        os.makedirs(path, exist_ok=True)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    unix_path = os.path.join(host_tmp, "listener.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    os.chmod(unix_path, 0o777)
    unix.listen(8)
    found = Targets(workspace, host_tmp, tcp, unix, unix_path)
    found.plant()
    if owner is not None:
        for root, dirs, files in os.walk(workspace):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), *owner)
    try:
        yield found
    finally:
        tcp.close()
        unix.close()
        for tag in ("find", "rg", "git", "sort", "touch", "sh"):
            for path in found.paths(tag):
                if path.startswith(("/dev/shm/", "/etc/")) and os.path.lexists(path):
                    os.unlink(path)


def _script(commands: list[str]) -> str:
    return f"COMMANDS = {json.dumps(json.dumps(commands))}\n" + SCRIPT


def _attempts(runtime: Runtime, commands: list[str]) -> list[list[Any]]:
    """Each command directly, then all from one script: the answers of both."""
    found = []
    for command in commands:
        reply = runtime.dispatcher.call_direct("terminal", {"command": command})
        error = reply.get("error")
        found.append([error["type"], 0, error["message"]] if error else
                     ["ran", reply["result"]["exit_code"], reply["result"]["output"][-300:]])
    result = runtime.execute(_script(commands), timeout=120)
    assert result.status == "success", result
    ran_in_script: list[list[Any]] = json.loads(result.output)
    return found + ran_in_script


def _assert_ran(found: list[list[Any]], commands: list[str]) -> None:
    """Every let-through command ran (the rule lifted the allow-list): what it did is checked
    where it would have left its mark (Targets.assert_nothing_escaped)."""
    assert len(found) in (len(commands), 2 * len(commands)), found
    for (kind, _, output), command in zip(found, (commands * 2)[: len(found)], strict=True):
        assert kind == "ran", (command, kind, output)
        # It got as far as its write or connect, and the OS said no (/dev/shm is the private /dev's).
        assert "/dev/shm/" in command or any(word in output for word in DENIED), (command, output)


def _attack(runtime: Runtime, targets: Targets) -> None:
    escapes = targets.escapes()
    for bypass, _ in escapes:
        assert readonly_refusal(bypass) is not None, bypass
    through = [command for _, command in escapes] + targets.direct_writes()
    _assert_ran(_attempts(runtime, through), through)
    targets.assert_nothing_escaped()
    # A sysctl checks the writer's uid: root in the namespace is uid 0 outside. The value
    # written is the one there, so a failure of this test changes nothing.
    [(kind, _, said)] = _attempts(runtime, ["sh -c 'cat /proc/sys/vm/swappiness > /proc/sys/vm/swappiness'"])[:1]
    assert kind == "ran" and "Read-only file system" in said, said


def _policy(rules: list[str] = RULES) -> Policy:
    return Policy("read-only", rules=tuple(parse_rule(r) for r in rules))


def test_every_known_bypass_is_refused_by_the_allow_list(make_runtime: Any, targets: Targets) -> None:
    runtime = make_runtime(policy="read-only", backend=LocalBackend(targets.workspace))
    bypasses = [bypass for bypass, _ in targets.escapes()]
    for kind, _, message in _attempts(runtime, bypasses):
        assert kind == "PolicyRefused", message
    targets.assert_nothing_escaped()


@needs_bwrap
@pytest.mark.parametrize("exec_mode", ["host", "backend"])
def test_what_a_rule_lets_through_is_stopped_by_the_os(
    targets: Targets, settings: Settings, exec_mode: str
) -> None:
    backend = LocalBackend(targets.workspace, settings=settings)
    with backend, Runtime(backend, settings=settings, policy=_policy(), exec_mode=exec_mode) as runtime:
        _attack(runtime, targets)


@needs_bwrap
def test_cd_carries_over_and_the_session_environment_carries_in(targets: Targets, settings: Settings) -> None:
    os.mkdir(os.path.join(targets.workspace, "sub dir"))
    backend = LocalBackend(targets.workspace, settings=settings)
    with backend:
        with Runtime(backend, settings=settings) as writer:  # workspace-write: as it was
            assert direct(writer, "terminal", {"command": "export HERALD_RO_VAR=kept; touch made"}).ok
        assert os.path.exists(os.path.join(targets.workspace, "made"))
        with Runtime(backend, settings=settings, policy=_policy()) as runtime:
            def run(command: str, **more: Any) -> dict[str, Any]:
                reply = runtime.dispatcher.call_direct("terminal", {"command": command, **more})
                assert "result" in reply, reply
                result: dict[str, Any] = reply["result"]
                return result

            assert run("printenv HERALD_RO_VAR")["output"] == "kept"
            assert run("cd 'sub dir'")["exit_code"] == 0
            assert run("pwd")["output"] == os.path.join(targets.workspace, "sub dir")
            assert backend.cwd == os.path.join(targets.workspace, "sub dir")
            assert run("cd /nonexistent-herald")["exit_code"] != 0
            assert run("pwd", workdir="/")["output"] == "/"  # one command elsewhere: the session stays
            result = runtime.execute("import hermes_tools\nprint(hermes_tools.terminal('cd .. && pwd')['output'])\n"
                                     "print(hermes_tools.terminal('pwd')['output'])\n", timeout=60)
            assert result.output.split() == [targets.workspace] * 2, result
            assert run("pwd")["output"] == targets.workspace
            assert run("sh -c 'exit 3'")["exit_code"] == 3  # the confined command's status comes back
        with Runtime(backend, settings=settings) as writer:  # and workspace-write again, in the same shell
            done = direct(writer, "terminal", {"command": "touch made-after && test \"$HERALD_RO_VAR\" = kept"})
            assert done.ok
        assert os.path.exists(os.path.join(targets.workspace, "made-after"))


@needs_bwrap
@pytest.mark.parametrize("exec_mode", ["host", "backend"])
def test_a_non_root_user_is_stopped_by_the_os(nonroot: User, exec_mode: str) -> None:
    workspace, host_tmp = (nonroot.run(["mktemp", "-d"]).stdout.strip() for _ in range(2))
    for targets in _targets(workspace, host_tmp, owner=(nonroot.uid, nonroot.gid)):
        through = [command for _, command in targets.escapes()] + targets.direct_writes()
        rules = json.dumps(RULES)
        done = nonroot.herald("exec", "--json", "--profile", "read-only", "--exec-mode", exec_mode,
                              "-c", f"policy.rules={rules}", "--cwd", targets.workspace, "-",
                              input=_script(through), cwd=targets.workspace)
        assert done.returncode == 0, done.stderr
        found = json.loads(json.loads(done.stdout)["output"])
        _assert_ran(found, through)
        targets.assert_nothing_escaped()


@needs_bwrap
def test_over_ssh_the_host_confines_the_command(sshd: Any, settings: Settings, tmp_path: Path) -> None:
    from herald.backends.ssh import SSHBackend

    workspace = sshd.make_workspace()
    backend = SSHBackend(sshd.spec, cwd=workspace, settings=settings.with_overrides(sshd.overrides()))
    try:
        with Runtime(backend, settings=settings) as writer:  # the SSH user's own /tmp directory
            host_tmp = direct_output(writer, "mktemp -d")
        os.chmod(host_tmp, 0o777)
        user = pwd.getpwnam(sshd.user)
        for targets in _targets(workspace, host_tmp, owner=(user.pw_uid, user.pw_gid)):
            for exec_mode in ("host", "backend"):
                with Runtime(backend, settings=settings, policy=_policy(), exec_mode=exec_mode) as runtime:
                    _attack(runtime, targets)
            with Runtime(backend, settings=settings, policy=_policy()) as runtime:
                assert direct_output(runtime, "cd /etc && pwd") == "/etc"
                assert backend.cwd == "/etc"
    finally:
        backend.close()
        sshd.remove_workspace(workspace)


def direct_output(runtime: Runtime, command: str) -> str:
    reply = runtime.dispatcher.call_direct("terminal", {"command": command})
    assert "result" in reply and reply["result"]["exit_code"] == 0, reply
    return str(reply["result"]["output"])


def test_docker_refuses_read_only_terminal_saying_how_to_opt_in(make_docker_backend: Any, settings: Settings) -> None:
    backend: Backend = make_docker_backend()
    with Runtime(backend, settings=settings, policy="read-only") as runtime:
        reply = runtime.dispatcher.call_direct("terminal", {"command": "ls"})
        assert reply["error"]["type"] == "PolicyRefused", reply
        message = reply["error"]["message"]
        assert "cannot confine" in message and "--profile workspace-write" in message, message
        assert "allow terminal command=ls" in message, message
        result = runtime.execute("import hermes_tools\ntry:\n    hermes_tools.terminal('ls')\n"
                                 "except hermes_tools.ToolError as exc:\n    print(exc.error_type)\n", timeout=60)
        assert result.output.strip() == "PolicyRefused", result
    # An explicit rule is the opt-in: the command runs, unconfined, and the answer says so.
    with Runtime(backend, settings=settings, policy=_policy(["allow terminal command=touch|ls"])) as runtime:
        reply = runtime.dispatcher.call_direct("terminal", {"command": "touch opted-in && ls opted-in"})
        assert reply["result"]["output"] == "opted-in", reply
        assert "without read-only confinement" in reply["result"]["note"], reply


@needs_bwrap
def test_plan_mode_gets_the_same_confinement(workspace: Path, tmp_path: Path) -> None:
    from tests.cli._herald import run
    from tests.fakes.llm_server import FakeLLMServer, call, calls, reply

    (workspace / "sub").mkdir()
    script = "from hermes_tools import terminal\nprint(terminal('touch from-script; pwd')['output'])\n"
    with FakeLLMServer() as llm:
        llm.script(calls(call("terminal", command="touch planned.txt")), calls(call("terminal", command="cd sub")),
                   calls(call("execute_code", code=script)), reply("PLAN: nothing to change"))
        proc = run(["run", "look around", "--plan", "--base-url", llm.openai_base_url, "--model", "m",
                    "-c", 'policy.rules=["allow terminal command=touch|pwd"]'], workspace, tmp_path, OPENAI_API_KEY="k")
        assert proc.returncode == 0, proc.stderr
        [(_, touched)] = llm.requests[1].tool_results()
        assert "Read-only file system" in touched, touched
        [(_, script_said)] = llm.requests[3].tool_results()
        assert str(workspace / "sub") in script_said, script_said  # the `cd` carried over
    assert sorted(p.name for p in workspace.iterdir()) == ["sub"]


def test_a_host_without_bwrap_is_named_in_the_refusal() -> None:
    from herald._sandbox.confine.readonly import parse_probe, socket_filter

    said = "bwrap is not installed (Debian: apt-get install bubblewrap)"
    assert parse_probe(3, said + "\n") == (None, said)
    assert parse_probe(4, "bwrap cannot confine a command here: setting up uid map: Permission denied")[0] is None
    found, _ = parse_probe(0, "/usr/bin/bwrap\nx86_64\n")
    assert found is not None and found.bwrap == "/usr/bin/bwrap" and found.seccomp == socket_filter("x86_64")
    assert socket_filter("riscv64") is None
    found, why = parse_probe(0, "/usr/bin/bwrap\nriscv64\n")  # unix sockets would stay open: refused
    assert found is None and "no seccomp socket filter for riscv64" in why, why
