"""The script as an attacker sees the machine, with default settings (isolation on).

Each test runs the attack from a script and asserts what it can and cannot reach: Herald's own
process and its secrets, the user's home and Herald's config and data, system directories,
the network. The same attacks run as root (this process) and as a generated non-root user
through `herald exec`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime
from herald._sandbox.confine import landlock
from herald.backends.local import LocalBackend
from herald.runtime.sandbox import isolation
from tests.fixtures.users import User
from tests.runtime._helpers import run_ok

SECRET = "sk-ant-herald-isolation-test-secret"

needs_bwrap = pytest.mark.skipif(isolation.bwrap_problem() is not None,
                                 reason=f"bubblewrap unusable here: {isolation.bwrap_problem()}")

# What a script written after reading a hostile page would try: every question answered in JSON.
PROBE = r'''
import json, os, socket
herald_pid = int(os.environ.get("PROBE_HERALD_PID", "0") or 0)
found = {"isolation_pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
def attempt(name, action):
    try:
        found[name] = ("ok", action())
    except Exception as exc:
        found[name] = ("refused", type(exc).__name__)
secret_hits = []
for pid in found["isolation_pids"]:
    for what in ("environ", "cmdline"):
        try:
            if SECRET.encode() in open("/proc/%d/%s" % (pid, what), "rb").read():
                secret_hits.append(pid)
        except OSError:
            pass
found["secret_hits"] = secret_hits
attempt("signal_herald", lambda: os.kill(herald_pid, 0))
attempt("herald_environ", lambda: len(open("/proc/%d/environ" % herald_pid, "rb").read()))
attempt("herald_fds", lambda: os.listdir("/proc/%d/fd" % herald_pid))
for name, path in PATHS.items():
    attempt("read_" + name, lambda path=path: open(path).read()[:20])
attempt("write_etc", lambda: open("/etc/herald-isolation-test", "w").write("x"))
attempt("write_usr", lambda: open("/usr/herald-isolation-test", "w").write("x"))
attempt("write_workspace", lambda: open("from-script.txt", "w").write("made in the sandbox"))
attempt("write_tmp", lambda: open("/tmp/herald-private-tmp-test", "w").write("x"))
attempt("connect", lambda: socket.create_connection(("127.0.0.1", PORT), timeout=5).close())
print(json.dumps(found))
'''


def _probe(secret: str, paths: dict[str, str], port: int) -> str:
    return f"SECRET = {secret!r}\nPATHS = {paths!r}\nPORT = {port}\n" + PROBE


@pytest.fixture
def secrets_around(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A secret in Herald's environment, a home with credentials, Herald's config."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY " + SECRET)
    (home / ".config" / "herald").mkdir(parents=True)
    (home / ".config" / "herald" / "config.toml").write_text(f'api_key = "{SECRET}"\n')
    return {
        "ssh_key": str(home / ".ssh" / "id_ed25519"),
        "herald_config": str(home / ".config" / "herald" / "config.toml"),
        "shadow": "/etc/shadow",
    }


@needs_bwrap
def test_the_script_cannot_reach_herald_its_secrets_or_the_home(
    make_runtime: Callable[..., Runtime], workspace: Path, secrets_around: dict[str, str], listener: int,
    settings: Any,
) -> None:
    runtime = make_runtime()
    transcript = runtime.transcript.path if runtime.transcript else None
    paths = {**secrets_around, "transcript": str(transcript)}
    result = run_ok(runtime, f"import os\nos.environ['PROBE_HERALD_PID'] = '{os.getpid()}'\n"
                    + _probe(SECRET, paths, listener))
    found = json.loads(result.output)
    assert result.isolation == "bwrap (no network)"
    assert os.getpid() not in found["isolation_pids"] and len(found["isolation_pids"]) < 10
    assert found["secret_hits"] == []
    for attack in ("signal_herald", "herald_environ", "herald_fds", "read_ssh_key", "read_herald_config",
                   "read_shadow", "read_transcript", "write_etc", "write_usr", "connect"):
        assert found[attack][0] == "refused", (attack, found[attack])
    assert found["write_workspace"] == ["ok", 19] and found["write_tmp"][0] == "ok"
    assert (workspace / "from-script.txt").read_text() == "made in the sandbox"
    assert not Path("/tmp/herald-private-tmp-test").exists(), "the script's /tmp is its own"


@needs_bwrap
def test_herald_data_inside_the_workspace_stays_hidden(make_runtime: Callable[..., Runtime], workspace: Path) -> None:
    data = workspace / ".herald-data"
    runtime = make_runtime(overrides={"data_dir": str(data)})
    run_ok(runtime, "print(1)")  # a transcript now exists in the data dir
    assert any(data.rglob("*.jsonl"))
    result = run_ok(runtime, "import os\nprint(sorted(os.listdir('.herald-data')))")
    assert result.output == "[]\n"


@needs_bwrap
def test_a_config_file_named_by_herald_config_inside_the_workspace_stays_hidden(
    make_runtime: Callable[..., Runtime], workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HERALD_CONFIG may name a file anywhere: the one mask (config.herald_files) hides it from
    the script as from the file tools, so a script cannot read or rewrite the settings."""
    config = workspace / "herald.toml"
    config.write_text(f'# {SECRET}\n[sandbox]\ntimeout = 60\n')
    monkeypatch.setenv("HERALD_CONFIG", str(config))
    runtime = make_runtime()
    result = run_ok(runtime, (
        "try:\n    print(repr(open('herald.toml').read()))\nexcept OSError as exc:\n    print('refused', exc.errno)\n"
        "try:\n    open('herald.toml', 'w').write('[policy]\\nprofile = \"full\"\\n')\n    print('written')\n"
        "except OSError as exc:\n    print('refused', exc.errno)\n"
    ))
    assert SECRET not in result.output and "written" not in result.output, result.output
    assert SECRET in config.read_text()


@needs_bwrap
def test_a_workspace_that_is_the_home_keeps_its_credential_stores_hidden(
    make_runtime: Callable[..., Runtime], tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY " + SECRET)
    (home / ".netrc").write_text(f"machine example.com password {SECRET}\n")
    (home / "notes.txt").write_text("the user's own file")
    monkeypatch.setenv("HOME", str(home))
    runtime = make_runtime(backend=LocalBackend(str(home), settings=settings))
    result = run_ok(runtime, (
        "import os\n"
        "try:\n"
        "    netrc = repr(open('.netrc').read())\n"
        "except OSError as exc:\n"
        "    netrc = type(exc).__name__\n"
        "print(sorted(os.listdir('.ssh')), netrc, open('notes.txt').read())\n"
        "open('made.txt', 'w').write('ok')\n"
    ))
    assert result.isolation == "bwrap (no network)"
    assert SECRET not in result.output
    assert result.output in ("[] '' the user's own file\n", "[] PermissionError the user's own file\n")
    assert (home / "made.txt").read_text() == "ok"
    assert (home / ".ssh" / "id_ed25519").read_text().startswith("PRIVATE KEY")


@needs_bwrap
def test_network_and_binds_are_settings(make_runtime: Callable[..., Runtime], tmp_path: Path, listener: int) -> None:
    shared, writable = tmp_path / "shared", tmp_path / "writable"
    shared.mkdir()
    writable.mkdir()
    (shared / "data.txt").write_text("reference data")
    runtime = make_runtime(overrides={"sandbox.network": "host", "sandbox.ro_binds": [str(shared)],
                                      "sandbox.rw_binds": [str(writable)]})
    code = (
        "import socket\n"
        f"socket.create_connection(('127.0.0.1', {listener}), timeout=10).close()\n"
        f"print(open('{shared}/data.txt').read())\n"
        f"open('{writable}/out.txt', 'w').write('written')\n"
        "try:\n"
        f"    open('{shared}/nope.txt', 'w')\n"
        "except OSError as exc:\n"
        "    print('read-only:', type(exc).__name__)\n"
    )
    result = run_ok(runtime, code)
    assert result.isolation == "bwrap (host network)"
    assert result.output == "reference data\nread-only: OSError\n"
    assert (writable / "out.txt").read_text() == "written"


def test_isolation_none_is_said_on_every_result(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime(overrides={"sandbox.isolation": "none"})
    assert run_ok(runtime, "print(1)").isolation == 'none (sandbox.isolation = "none")'


def test_an_unknown_isolation_mode_is_a_clear_error(make_runtime: Callable[..., Runtime]) -> None:
    with pytest.raises(Exception, match=r"sandbox\.isolation"):
        make_runtime(overrides={"sandbox.isolation": "chroot"})


@needs_bwrap
def test_a_non_root_user_is_confined_the_same_way(nonroot: User, tmp_path: Path, listener: int) -> None:
    home = Path(nonroot.home)
    secret_file = home / ".herald-isolation-secret"
    nonroot.run(["sh", "-c", f"umask 077 && echo {SECRET} > {secret_file}"]).check_returncode()
    work = nonroot.run(["mktemp", "-d"]).stdout.strip()
    paths = {"home_secret": str(secret_file), "shadow": "/etc/shadow"}
    script = "import os\nos.environ['PROBE_HERALD_PID'] = str(os.getppid())\n" + _probe(SECRET, paths, listener)
    done = nonroot.herald("exec", "--json", "--cwd", work, "-", input=script,
                          env={"ANTHROPIC_API_KEY": SECRET}, cwd=work)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    found = json.loads(result["output"])
    assert result["isolation"] == "bwrap (no network)"
    assert found["secret_hits"] == []
    for attack in ("read_home_secret", "read_shadow", "write_etc", "connect"):
        assert found[attack][0] == "refused", (attack, found[attack])
    assert found["write_workspace"][0] == "ok"


TRACE = r'''
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def attach(pid):
    if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
        libc.ptrace(17, pid, 0, 0)  # PTRACE_DETACH
        return "attached"
    return os.strerror(ctypes.get_errno())
def environ(pid):
    try:
        return len(open("/proc/%d/environ" % pid, "rb").read())
    except OSError as exc:
        return type(exc).__name__
print(json.dumps({"parent": [attach(os.getppid()), environ(os.getppid())]}))
'''


@needs_bwrap
def test_the_script_cannot_trace_the_process_that_started_it(make_runtime: Callable[..., Runtime]) -> None:
    """The zygote serves every later run: a script that could attach to it could taint what runs
    next. Isolated, even root's script has no capabilities to do it with."""
    found = json.loads(run_ok(make_runtime(), TRACE).output)
    assert found["parent"][0] != "attached" and found["parent"][1] == "PermissionError", found


def test_without_isolation_a_non_root_script_still_cannot_trace_its_parent(nonroot: User) -> None:
    """The zygote (and Herald) are not dumpable: same-user processes cannot attach or read them."""
    done = nonroot.herald("exec", "--json", "-c", "sandbox.isolation=none", "-", input=TRACE)
    assert done.returncode == 0, done.stderr
    found = json.loads(json.loads(done.stdout)["output"])
    assert found["parent"][0] != "attached" and found["parent"][1] == "PermissionError", found


@pytest.mark.skipif(not landlock.abi_version(), reason="this kernel has no Landlock")
@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "spawned"])
def test_landlock_confines_files_and_network_where_bwrap_cannot_run(
    make_runtime: Callable[..., Runtime], workspace: Path, secrets_around: dict[str, str], listener: int,
    fork_server: bool,
) -> None:
    runtime = make_runtime(overrides={"sandbox.isolation": "landlock", "sandbox.fork_server": fork_server})
    paths = {"ssh_key": secrets_around["ssh_key"], "herald_config": secrets_around["herald_config"]}
    found = json.loads(run_ok(runtime, _probe(SECRET, paths, listener)).output)
    for attack in ("read_ssh_key", "read_herald_config", "write_etc", "write_usr", "connect", "write_tmp"):
        assert found[attack][0] == "refused", (attack, found[attack])  # /tmp is shared: only TMPDIR is writable
    assert found["write_workspace"][0] == "ok"
    assert (workspace / "from-script.txt").exists()
    assert runtime.isolation.describe == "landlock (no IP network; host unix sockets reachable)"
