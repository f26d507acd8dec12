"""The backend's cache (_sandbox/supervisor/sandboxcache.py), as an attacker sees it: a session's
supervisor imports sandbox files a hostile script in another session may have tried to rewrite
(through the cache, or through files shared with it), so nothing the script leaves behind may run
in another session, one that runs beside it or the next; the probe's cached answer can only say
what was found, for the machine as it still is.

The SSH cases run on the test sshd (this machine) as its user; what they damage or check on the
backend they do through the backend (`run`).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herald import Runtime, Settings
from herald._sandbox.supervisor import sandboxcache
from herald.backends.base import Backend
from herald.runtime.sandbox import isolation
from tests.runtime._helpers import run_ok

PLANTED = "planted code ran"
# The script's attack on what the next session imports; CACHE_ROOT, MARKER and HOW are prepended.
ATTACK = r"""
import importlib.util, json, os, sys, hermes_tools
from importlib._bootstrap_external import _code_to_timestamp_pyc
PAYLOAD = "\nopen(%r, 'a').write(__file__ + '\\n')  # planted code ran\n" % MARKER
done = {"wrote": [], "refused": 0}
def attempt(path, action):
    try:
        action()
        done["wrote"].append(path)
    except OSError:
        done["refused"] += 1
def rewrite(path):  # in place: through every hard link to it
    with open(path, "a") as f:
        f.write(PAYLOAD)
def shadow(directory):  # a stdlib module the supervisor imports, and bytecode its import trusts
    attempt(os.path.join(directory, "json.py"), lambda: open(os.path.join(directory, "json.py"), "w").write(PAYLOAD))
    source = os.path.join(directory, "_hermes_runtime", "supervisor", "loop.py")
    if os.path.exists(source):
        found = os.stat(source)
        code = compile(open(source).read() + PAYLOAD, source, "exec")
        pyc = importlib.util.cache_from_source(source)
        def plant():
            os.makedirs(os.path.dirname(pyc), exist_ok=True)
            open(pyc, "wb").write(_code_to_timestamp_pyc(code, found.st_mtime, found.st_size))
        attempt(pyc, plant)
package = done["package"] = os.path.dirname(hermes_tools.__file__)
places = [package] + [os.path.join(CACHE_ROOT, n)
                      for n in (os.listdir(CACHE_ROOT) if os.path.isdir(CACHE_ROOT) else [])]
for place in places:
    if HOW == "shadow":
        shadow(place)
        continue
    for directory, _, names in os.walk(place):
        for name in names:
            if name.endswith(".py"):
                attempt(os.path.join(directory, name), lambda p=os.path.join(directory, name): rewrite(p))
print(json.dumps(done))
"""


def _cache_root(backend: Backend) -> str:
    return backend.run('printf %s "${TMPDIR:-/tmp}/herald-cache-$(id -u)"', timeout=30).output.strip()


def _session(sshd: Any, settings: Settings, workspace: str, **overrides: Any) -> tuple[Backend, Runtime]:
    from herald.backends.ssh import SSHBackend

    backend = SSHBackend(sshd.spec, cwd=workspace, settings=settings.with_overrides(sshd.overrides()))
    runtime = Runtime(backend, settings=settings.with_overrides(overrides), exec_mode="backend", transcript=False)
    return backend, runtime


@pytest.fixture
def ssh_workspace(sshd: Any) -> Iterator[str]:
    workspace = sshd.make_workspace()
    yield workspace
    sshd.remove_workspace(workspace)


@pytest.mark.parametrize("how", ["rewrite", "shadow"])
@pytest.mark.parametrize("confined", [True, False], ids=["isolated", "isolation-none"])
def test_what_a_script_leaves_in_the_cache_never_runs_in_the_next_session(
    sshd: Any, settings: Settings, ssh_workspace: str, how: str, confined: bool
) -> None:
    if confined and isolation.bwrap_problem() is not None:
        pytest.skip(f"bubblewrap unusable here: {isolation.bwrap_problem()}")
    overrides = {} if confined else {"sandbox.isolation": "none"}
    marker = os.path.join(ssh_workspace, "planted-marker")
    bystander = _session(sshd, settings, ssh_workspace, **overrides)  # a session running beside the attack
    try:
        assert run_ok(bystander[1], "print(1)").output == "1\n"
        backend, runtime = _session(sshd, settings, ssh_workspace, **overrides)
        try:
            run_ok(runtime, "print('the backend has this version')")
            root = _cache_root(backend)
            attack = f"CACHE_ROOT = {root!r}\nMARKER = {marker!r}\nHOW = {how!r}\n" + ATTACK
            done = json.loads(run_ok(runtime, attack).output)
            if confined:
                assert done["wrote"] == [], done  # the package is read-only and the cache out of sight
            else:
                assert done["wrote"], done  # it did rewrite what it could reach
        finally:
            runtime.close()
            backend.close()
        for _ in range(2):  # the bystander's next runs: a new supervisor and script each
            assert run_ok(bystander[1], "print(1)").output == "1\n"
    finally:
        bystander[1].close()
        bystander[0].close()
    for fork_server in (True, False):
        backend, runtime = _session(sshd, settings, ssh_workspace, **{**overrides, "sandbox.fork_server": fork_server})
        try:
            for _ in range(2):
                assert run_ok(runtime, "print(1)").output == "1\n"
        finally:
            runtime.close()
            backend.close()
    # Unconfined, the script could rewrite its own session's files (a successor started there may
    # have run them: the script's own privileges); never what another session imports.
    ran = Path(marker).read_text().split() if os.path.exists(marker) else []
    assert not confined or not ran, ran
    assert all(path.startswith(done["package"] + "/") for path in ran), f"planted code ran in another session: {ran}"


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TMPDIR for the cache: a directory of this test's own."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


FILES = {
    "hermes_tools.py": "import _hermes_runtime\n",
    "_hermes_runtime/__init__.py": "",
    "_hermes_runtime/a.py": "A = 1\n",
}


def test_a_cache_root_not_safely_ours_is_not_used(tmpdir_env: Path) -> None:
    root = tmpdir_env / f"herald-cache-{os.getuid()}"
    elsewhere = tmpdir_env / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    root.symlink_to(elsewhere)
    assert sandboxcache.cache_root() is None  # a link (planted to redirect us)
    root.unlink()
    root.mkdir(mode=0o700)
    root.chmod(0o733)
    assert sandboxcache.cache_root() is None  # others may write in it
    root.chmod(0o700)
    if os.getuid() == 0:
        os.chown(root, 65534, 65534)
        assert sandboxcache.cache_root() is None  # someone else's
        os.chown(root, 0, 0)
    assert sandboxcache.cache_root() == str(root)
    root.chmod(0o755)
    assert sandboxcache.cache_root() is None  # others may enter it: nothing is kept there


def test_a_session_writes_its_own_files(tmpdir_env: Path) -> None:
    session = tmpdir_env / "session"
    session.mkdir()
    assert sandboxcache.install(FILES, str(session)) == "unpacked"
    assert (session / "_hermes_runtime" / "a.py").read_text() == "A = 1\n"
    assert stat.S_IMODE((session / "_hermes_runtime" / "a.py").stat().st_mode) == 0o600


def test_the_probe_answer_is_reused_only_for_the_same_machine_state(tmpdir_env: Path) -> None:
    if not shutil.which("bwrap"):
        pytest.skip("no bwrap on PATH: the probe runs nothing worth keeping")
    root = sandboxcache.cache_root()
    files = {sandboxcache.ISOLATE_FILE: "probe code"}
    key = sandboxcache.probe_key(files)
    assert key is not None and sandboxcache.known_probe(root, key) is None
    sandboxcache.remember_probe(root, key, {"bwrap": "/x/bwrap", "bwrap_problem": "cannot", "landlock": 3})
    assert sandboxcache.known_probe(root, key) is None  # "does not work" is never kept
    sandboxcache.remember_probe(root, key, {"bwrap": "/x/bwrap", "bwrap_problem": None, "landlock": 3})
    found = sandboxcache.known_probe(root, key)
    assert found == {"bwrap": shutil.which("bwrap"), "bwrap_problem": None, "landlock": 3}  # bwrap as found now
    assert sandboxcache.probe_key({sandboxcache.ISOLATE_FILE: "other probe code"}) != key
    assert sandboxcache.known_probe(root, key.replace("]", ", 1]", 1)) is None  # another machine state
    assert root is not None
    kept = Path(root, sandboxcache.PROBE_FILE)
    old = time.time() - sandboxcache.PROBE_MAX_AGE - 1
    os.utime(kept, (old, old))
    assert sandboxcache.known_probe(root, key) is None  # too old: probed again
